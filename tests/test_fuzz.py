"""Fuzzing as a test (issue 12): thousands of random override sets, with 0, negative, huge,
non-numeric and quoted values, through submit --dry-run, plan and diff in-process. Bad input must
end in a BridgeLaunchError (one line, exit 2 at the CLI) or a result; any other exception fails."""

import contextlib
import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge_launch.cli import commands
from bridge_launch.core.errors import BridgeLaunchError
from bridge_launch.spec import clusters, recipes

pytest.importorskip("megatron.core")

KEYS = [
    "model.tensor_model_parallel_size",
    "model.pipeline_model_parallel_size",
    "model.context_parallel_size",
    "model.expert_model_parallel_size",
    "model.expert_tensor_parallel_size",
    "model.virtual_pipeline_model_parallel_size",
    "dist.eval_context_parallel_size",
    "model.sequence_parallel",
    "train.global_batch_size",
    "train.micro_batch_size",
    "validation.eval_global_batch_size",
    "validation.eval_micro_batch_size",
    "dataset.micro_batch_size",
    "model.seq_length",
    "dataset.seq_length",
    "model.num_layers",
    "model.hidden_size",
    "model.ffn_hidden_size",
    "model.num_attention_heads",
    "model.num_query_groups",
    "model.kv_channels",
    "model.num_moe_experts",
    "model.moe_router_topk",
    "model.moe_ffn_hidden_size",
    "model.moe_shared_expert_intermediate_size",
    "model.mtp_num_layers",
    "model.vocab_size",
    "model.linear_num_key_heads",
    "model.linear_num_value_heads",
    "model.mamba_num_heads",
    "model.mamba_num_groups",
    "model.make_vocab_size_divisible_by",
    "model.recompute_granularity",
    "model.recompute_method",
    "model.recompute_num_layers",
    "model.recompute_modules",
    "model.microbatch_group_size_per_vp_stage",
    "model.account_for_embedding_in_pipeline_split",
    "model.num_layers_in_first_pipeline_stage",
    "mixed_precision",
    "mixed_precision.fp8",
    "mixed_precision.fp8_recipe",
    "mixed_precision.fp4",
    "mixed_precision.fp8_param_gather",
    "mixed_precision.reuse_grad_buf_for_mxfp8_param_ag",
    "dataset.packing_buffer_size",
    "model.calculate_per_token_loss",
    "ddp.average_in_collective",
    "model.cuda_graph_impl",
    "model.moe_token_dispatcher_type",
    "model.moe_flex_dispatcher_backend",
    "model.overlap_moe_expert_parallel_comm",
    "dataset.path",
    "dataset.data_path",
    "dataset.blend",
    "checkpoint.pretrained_checkpoint",
    "checkpoint.save",
    "checkpoint.load",
    "train.train_iters",
    "ddp.use_distributed_optimizer",
    "ddp.grad_reduce_in_fp32",
    "dataset.task_encoder.max_visual_tokens",
    "model.hybrid_layer_pattern",
    "model.pipeline_model_parallel_layout",
    "smoke.busbw_iters",
    "model.not_a_key",
    "dataset.seq_lenght",
    "train",
]
NUMBERS = [
    "0",
    "-1",
    "-7",
    "1",
    "2",
    "3",
    "4",
    "8",
    "16",
    "24",
    "72",
    "128",
    "4096",
    "131088",
    "524288",
    "1000000007",
    "99999999999",
    "1" + "0" * 40,
    str(2**63),
    "-" + "9" * 30,
]
VALUES = NUMBERS * 3 + [  # numbers most often, so that most sets get past the type checks into the rules
    "1e400",
    "1.5",
    "-0.0",
    "nan",
    "inf",
    "abc",
    "'8'",
    '"16"',
    "'abc'",
    "null",
    "true",
    "false",
    "[]",
    "[1,2]",
    "[core_attn,mlp]",
    "{a: 1}",
    "${oc.env:X}",
    "${oc.env:X,8}",
    "",
    "' '",
    "/home/me/data",
    "/lustre/fsw/data",
    "s3://bucket/x",
    "full",
    "selective",
    "uniform",
    "block",
    "flex",
    "alltoall",
    "deepep",
    "hybridep",
    "ncclep",
    "none",
    "transformer_engine",
    "bf16_mixed",
    "bf16_with_mxfp8_mixed",
    "bf16_with_nvfp4_mixed",
    "fp16_with_fp8_delayed_scaling_mixed",
    "bf16_with_fp8_subchannel_scaling_mixed",
    "e4m3",
    "mxfp8",
    "delayed",
    "blockwise",
    "M*M*|M*M*",
    "héllo",
    "1,2",
]
PREFIX = [""] * 12 + ["+", "++", "~"]


def _fitting(key: str) -> list:
    """Values of the key's own type (the schema's), so that most sets reach the rules."""
    from bridge_launch.spec import schema

    spec = schema.lookup(key) or {}
    if spec.get("choices"):
        return list(spec["choices"]) + ["null"] * bool(spec.get("nullable"))
    return {
        "int": NUMBERS,
        "bool": ["true", "false"],
        "float": NUMBERS + ["1.5", "1e400", "nan"],
        "list": ["[]", "[1,2]", "[core_attn,mlp]", "[/lustre/fsw/a,/home/b]"],
        "str": ["/home/me/data", "/lustre/fsw/data", "s3://bucket/x", "abc", "M*M*|M*M*"],
    }.get(spec.get("type"), VALUES)


_PAIRS = {k: [(k, v) for v in _fitting(k)] * 3 + [(k, v) for v in VALUES] for k in KEYS}
override = st.builds(
    lambda p, kv: f"~{kv[0]}" if p == "~" else f"{p}{kv[0]}={kv[1]}",
    st.sampled_from(PREFIX),
    st.one_of(*[st.sampled_from(_PAIRS[k]) for k in KEYS]),
)
overrides = st.lists(override, min_size=0, max_size=5)


def _targets():
    names = [r["name"] for r in recipes.list_recipes()]
    cl = [(c["name"], c["nodes"]) for c in clusters.list_profiles()]
    return names, cl


def _quiet(fn, *args, **kw):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            return fn(*args, **kw)
        except BridgeLaunchError as exc:  # what the CLI turns into one line and exit 2
            assert "\n" not in str(exc).strip(), str(exc)
            return exc.exit_code


@pytest.fixture(scope="module")
def targets():
    return _targets()


def _job_words(data, names, cl):
    recipe = data.draw(st.sampled_from(names))
    cluster, fixed = data.draw(st.sampled_from(cl))
    nodes = None if fixed else data.draw(st.sampled_from([None, 1, 2, 3, 9, 18, 36, 144]))
    return recipe, cluster, nodes, data.draw(overrides)


SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.mark.usefixtures("home")
@pytest.mark.timeout(180)
@settings(max_examples=1500, **SETTINGS)
@given(data=st.data())
def test_submit_dry_run_never_raises(targets, data):
    recipe, cluster, nodes, ovs = _job_words(data, *targets)
    output = data.draw(st.sampled_from(["text", "json"]))
    code = _quiet(
        commands.submit,
        recipe,
        ovs,
        cluster=cluster,
        overlays=[],
        nodes=nodes,
        time=None,
        partition=None,
        account=None,
        container=None,
        env=[],
        secrets=[],
        bridge_src=None,
        dry_run=True,
        follow=False,
        output=output,
        memory_check=data.draw(st.booleans()),
    )
    assert code in (0, 2)


@pytest.mark.usefixtures("home")
@pytest.mark.timeout(180)
@settings(max_examples=1000, **SETTINGS)
@given(data=st.data())
def test_plan_never_raises(targets, data):
    recipe, cluster, nodes, ovs = _job_words(data, *targets)
    code = _quiet(
        commands.plan,
        recipe,
        ovs,
        cluster=cluster,
        overlays=[],
        nodes=nodes,
        tflops=data.draw(st.sampled_from([None, 0.0, -5.0, 250.0, 1e308, float("inf"), float("nan")])),
        tokens=data.draw(st.sampled_from([None, 0.0, 1.0, 1e11, 1e300, float("inf"), float("nan"), -1.0])),
        output=data.draw(st.sampled_from(["text", "json"])),
    )
    assert code in (0, 2)


@pytest.mark.usefixtures("home")
@pytest.mark.timeout(180)
@settings(max_examples=500, **SETTINGS)
@given(data=st.data())
def test_diff_never_raises(targets, data):
    a = _job_words(data, *targets)
    b = _job_words(data, *targets)

    def words(recipe, cluster, nodes, ovs):
        return [recipe, "-c", cluster, *(["--nodes", str(nodes)] if nodes else []), *ovs]

    code = _quiet(
        commands.diff,
        words(*a) + ["--"] + words(*b),
        all_keys=data.draw(st.booleans()),
        output=data.draw(st.sampled_from(["text", "json"])),
        parse_side=_side_parser(),
    )
    assert code in (0, 2)


def _side_parser():
    """diff's sides parsed by submit's own parser, as the CLI parses them."""
    import click
    import typer.main

    from bridge_launch.cli import app as cli

    root = typer.main.get_command(cli.app)
    return cli._side_parser(click.Context(root, info_name="bridge-launch"))


INT_KEYS = [k for k in KEYS if "1" in _fitting(k)]
EXTREMES = ["0", "-1", "99999999999", "1" + "0" * 40]


@pytest.mark.usefixtures("home")
@pytest.mark.timeout(120)
@pytest.mark.parametrize("recipe,cluster", [("qwen35-vl-sft", "gb200-32"), ("nemotron-3-nano-pretrain", "gb200-8")])
def test_every_integer_key_at_its_extremes(recipe, cluster):
    """Each integer key at 0, -1 and huge values, alone: no exception, no unbounded work (the
    fuzz once found model.mtp_num_layers=99999999999 building a list of that many layers)."""
    for key in INT_KEYS:
        for value in EXTREMES:
            ovs = [f"{key}={value}", "dataset.path=/lustre/fsw/d", "checkpoint.pretrained_checkpoint=/lustre/fsw/c"]
            for fn, kw in (
                (
                    commands.submit,
                    dict(
                        time=None,
                        partition=None,
                        account=None,
                        container=None,
                        env=[],
                        secrets=[],
                        bridge_src=None,
                        dry_run=True,
                        follow=False,
                        output="json",
                    ),
                ),
                (commands.plan, dict(tflops=None, tokens=None, output="text")),
            ):
                code = _quiet(
                    fn,
                    recipe,
                    ovs if recipe.startswith("qwen35-vl") else ovs[:1],
                    cluster=cluster,
                    overlays=[],
                    nodes=None,
                    **kw,
                )
                assert code in (0, 2), (key, value)
