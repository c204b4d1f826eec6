"""Every value the seeds state is in the resolved job, marked as the recipe's, and is passed
to run_recipe.py as an explicit override; aliases, modes, GPU counts, inputs and images."""

import re

import pytest

from bridge_launch.core import upstream
from bridge_launch.spec import recipes
from cli_inputs import VL_INPUTS
from conftest import run_cli, write

# What the seeds say, written out independently of the recipe files (../shared/seeds).
VL_COMMON = {
    "model.tensor_model_parallel_size": 2,
    "model.context_parallel_size": 8,
    "model.expert_model_parallel_size": 16,
    "model.sequence_parallel": True,
    "model.moe_token_dispatcher_type": "flex",
    "model.moe_flex_dispatcher_backend": "hybridep",
    "model.recompute_granularity": "selective",
    "dataset.seq_length": 131072,
    "model.seq_length": 131072,
    "dataset.task_encoder.min_pixels": 200704,
    "dataset.task_encoder.max_pixels": 401408,
    "dataset.task_encoder.max_num_images": 4,
    "dataset.task_encoder.max_visual_tokens": 2048,
    "dataset.num_workers": 1,
    "dataset.shuffle_buffer_size": 2,
    "dataset.packing_buffer_size": 8,
}


SEEDS = {
    "qwen35-vl-sft": dict(
        gpus=32,
        mode="sft",
        cluster="gb200-32",
        upstream="qwen35_vl_35b_a3b_sft_long_context_32gpu_gb200_bf16_config",
        aliases=["qwen35_vl_35b_a3b_sft_long_context_32gpu_gb200_bf16_config"],
        config={**VL_COMMON, "mixed_precision": "bf16_mixed"},
        env={"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
        required=["dataset.path", "checkpoint.pretrained_checkpoint"],
    ),
    "qwen35-vl-sft-mxfp8": dict(
        gpus=32,
        mode="sft",
        cluster="gb200-32",
        upstream="qwen35_vl_35b_a3b_sft_long_context_32gpu_gb200_fp8mx_config",
        aliases=["qwen35_vl_35b_a3b_sft_long_context_32gpu_gb200_fp8mx_config"],
        config={**VL_COMMON, "mixed_precision.fp8_recipe": "mxfp8", "mixed_precision.fp8_param_gather": False},
        env={"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
        required=["dataset.path", "checkpoint.pretrained_checkpoint"],
    ),
    "qwen35-9b-pretrain": dict(
        gpus=8,
        mode="pretrain",
        cluster="gb200-8",
        upstream=None,
        aliases=["qwen35_9b_pretrain_config"],
        config={},
        env={},
        required=[],
    ),
    "qwen35-35b-a3b-pretrain": dict(
        gpus=8,
        mode="pretrain",
        cluster="gb200-8",
        upstream=None,
        aliases=["qwen35_35b_a3b_pretrain_config"],
        config={},
        env={},
        required=[],
    ),
    "nemotron-3-nano-pretrain": dict(
        gpus=8,
        mode="pretrain",
        cluster="gb200-8",
        upstream=None,
        aliases=[
            "nemotron_3_nano_gb200",
            "nemotron_3_nano_gb200_pretrain_config",
            "nemotron_3_nano_pretrain_8gpu_gb200_bf16_config",
        ],
        config={
            "model.seq_length": 4096,
            # the seed's dataset sequence length, by the name its revision (987244934) gives the field
            "dataset.sequence_length": 4096,
            "model.tensor_model_parallel_size": 1,
            "model.pipeline_model_parallel_size": 1,
            "model.context_parallel_size": 1,
            "model.expert_model_parallel_size": 8,
            "model.expert_tensor_parallel_size": 1,
            "model.sequence_parallel": False,
            "model.moe_flex_dispatcher_backend": "hybridep",
            "model.moe_hybridep_num_sms": 16,
            "model.cuda_graph_impl": "none",
            "model.moe_router_force_load_balancing": False,
            "train.global_batch_size": 3072,
            "train.micro_batch_size": 2,
        },
        env={},
        required=[],
    ),
}


INPUTS = ("dataset.path=/lustre/clevr2", "checkpoint.pretrained_checkpoint=/lustre/ckpt")


def _dry(name, *extra, cluster=None):
    seed = SEEDS[name]
    args = ["submit", name, "-c", cluster or seed["cluster"], "--dry-run", "-o", "json", *extra]
    if seed["required"]:
        args += list(INPUTS)
    r = run_cli(*args)
    assert r.code == 0, r.err
    return r.json()


def test_the_vl_recipes_name_the_function_bridge_launch_ships_and_its_entry(cli):
    shown = cli("recipes", "show", "qwen35-vl-sft-mxfp8", "-o", "json").json()
    module = shown["bridge_recipe_module"]
    assert module.endswith("src/bridge_launch/workloads/bridge_recipes/qwen35_vl_gb200.py")
    assert "def qwen35_vl_35b_a3b_sft_long_context_32gpu_gb200_fp8mx_config()" in open(module).read()
    assert "upstream_status" not in shown or shown["upstream_status"] is None
    text = cli("recipes", "show", "qwen35-vl-sft").out
    assert re.search(r"^bridge_recipe_module +\S+/bridge_recipes/qwen35_vl_gb200.py$", text, re.M)
    assert "config (bridge-launch-fn@067f987: what bridge-launch's recipe function sets" in text
    r = cli("submit", "qwen35-vl-sft", "-c", "gb200-32", "--dry-run", *VL_INPUTS)
    assert r.code == 0 and "not in upstream" not in r.out
    assert re.search(
        r"^Function   qwen35_vl_35b_a3b_sft_long_context_32gpu_gb200_bf16_config is bridge-launch's own "
        r"\(workload/bridge_recipes/qwen35_vl_gb200.py",
        r.out,
        re.M,
    )
    # the entry torchrun starts: the shim, the staged module, then run_recipe.py and its arguments
    flat = re.sub(r"\n    ", " ", r.out)  # the train array's lines, joined
    assert re.search(
        r"/workload/bridge_recipe_entry\.py \S+/workload/bridge_recipes/qwen35_vl_gb200\.py "
        r"/opt/Megatron-Bridge/scripts/training/run_recipe\.py --recipe "
        r"qwen35_vl_35b_a3b_sft_long_context_32gpu_gb200_bf16_config --mode sft ",
        flat,
    )
    j = cli("submit", "qwen35-vl-sft", "-c", "gb200-32", "--dry-run", "-o", "json", *VL_INPUTS).json()
    assert j["bridge_recipe_module"] == "qwen35_vl_gb200.py" and j["upstream_status"] is None
    labels = {j["provenance"]["config"][k] for k in ("optimizer.lr", "model.mtp_num_layers", "rng.seed")}
    assert labels == {"bridge-launch-fn@067f987"}
    assert not any(s.startswith("upstream@") for s in j["provenance"]["config"].values())
    plain = cli("submit", "qwen35-9b-pretrain", "-c", "gb200-8", "--dry-run", "-o", "json").json()
    assert plain["upstream_status"] is None and plain["bridge_recipe_module"] is None
    assert "/workload/" not in plain["artifact"]["text"].split("run_recipe.py")[0].rsplit("\n", 1)[-1]


def test_a_recipe_naming_a_module_that_lacks_its_function_is_refused_in_one_line(cli, home):
    write(
        home / "recipes" / "bad-fn.toml",
        """
        name = "bad-fn"
        extends = "qwen35-vl-sft"
        upstream = "qwen35_vl_no_such_config"
    """,
    )
    r = cli("submit", "bad-fn", "-c", "gb200-32", "--dry-run", *VL_INPUTS)
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1
    assert "qwen35_vl_no_such_config is not a function qwen35_vl_gb200.py exports" in r.err
    write(
        home / "recipes" / "bad-mod.toml",
        """
        name = "bad-mod"
        extends = "qwen35-vl-sft"
        bridge_recipe_module = "nope.py"
    """,
    )
    r = cli("submit", "bad-mod", "-c", "gb200-32", "--dry-run", *VL_INPUTS)
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1
    assert (
        "bridge_recipe_module 'nope.py' is not a recipe module bridge-launch ships; valid: qwen35_vl_gb200.py"
    ) in r.err


def test_child_recipe_overrides_an_upstream_value_and_provenance_names_it(cli, home):
    write(
        home / "recipes" / "my-sft.toml",
        """
        name = "my-sft"
        extends = "qwen35-vl-sft"
        [config]
        optimizer.lr = 1e-5
        train.global_batch_size = 64
        [env]
        USE_MNNVL = "0"
    """,
    )
    d = cli("submit", "my-sft", "-c", "gb200-32", "--dry-run", "-o", "json", *VL_INPUTS).json()
    assert d["errors"] == []
    assert d["config"]["optimizer.lr"] == 1e-5 and d["provenance"]["config"]["optimizer.lr"] == "recipe:my-sft"
    assert d["provenance"]["config"]["train.global_batch_size"] == "recipe:my-sft"  # was upstream
    assert d["provenance"]["config"]["model.context_parallel_size"] == "recipe"  # inherited, unchanged
    assert d["env"]["USE_MNNVL"] == "0" and d["provenance"]["env"]["USE_MNNVL"] == "recipe:my-sft"
    assert " optimizer.lr=1e-05 " in d["artifact"]["text"].replace("\\\n", " ").replace("\n", " ")
    # the same key in both sections of one file is still a mistake, named with its line
    write(
        home / "recipes" / "twice.toml",
        'extends = "smoke"\n[config]\noptimizer.lr = 1\n[upstream_config]\noptimizer.lr = 2\n',
    )
    r = cli("submit", "twice", "--dry-run")
    assert r.code == 2 and "twice.toml:3" in r.err and "of the same file" in r.err


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize("name", sorted(SEEDS))
def test_seed_values_are_in_the_job_and_the_artifact(name):
    seed = SEEDS[name]
    d = _dry(name)
    assert d["errors"] == [] and d["world_size"] == seed["gpus"]
    words = d["artifact"]["text"].replace("\\\n", " ").split()
    for key, value in seed["config"].items():
        assert d["config"][key] == value, key
        assert d["provenance"]["config"][key] == "recipe", key
        assert any(w.strip("'").startswith(f"{key}=") for w in words), f"{key} is not passed explicitly"
    for key, value in seed["env"].items():
        assert d["env"][key] == value and d["provenance"]["env"][key] == "recipe"
        assert f"export {key}={value}" in d["artifact"]["text"]
    # every value the job holds is passed, whatever its source
    assert sum(1 for w in words if "=" in w and w.strip("'").split("=")[0] in d["config"]) >= len(d["config"])
    assert d["mode"] == seed["mode"]
    # --mode only where the pinned revision's run_recipe.py takes it (987244934 and dd81e664e infer it)
    takes_mode = upstream.revision(d["bridge_commit"]).takes_mode
    assert (f"--mode {seed['mode']}" in d["artifact"]["text"].replace("\\\n    ", "")) == takes_mode
    if seed["upstream"]:
        assert d["upstream"] == seed["upstream"]
    assert d["container"].startswith("nvcr.io/nvidia/nemo:") and d["provenance"]["job"]["container"] == "recipe"


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize("name", sorted(SEEDS))
def test_seed_aliases_resolve(name):
    for alias in SEEDS[name]["aliases"]:
        assert recipes.load(alias)["name"] == name


@pytest.mark.usefixtures("home")
def test_values_the_seeds_do_not_state_are_marked_upstream():
    d = _dry("nemotron-3-nano-pretrain")
    prov = d["provenance"]["config"]
    assert prov["optimizer.lr"] == "upstream@9872449" and d["config"]["optimizer.lr"] == 1.6e-3
    assert prov["train.global_batch_size"] == "recipe"
    vl = _dry("qwen35-vl-sft")
    # the VL recipes' function is bridge-launch's: its values are not labelled upstream's
    assert vl["provenance"]["config"]["train.global_batch_size"] == "bridge-launch-fn@067f987"
    assert vl["provenance"]["env"]["USE_MNNVL"] == "upstream@067f987"
    assert vl["provenance"]["env"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "recipe"
    # the seed's 3072 overrides upstream's default 512, explicitly
    assert "train.global_batch_size=3072" in d["artifact"]["text"]


@pytest.mark.usefixtures("home")
def test_the_nemotron_base_is_the_library_recipe_not_the_benchmark_one():
    d = _dry("nemotron-3-nano-pretrain")
    assert d["upstream"] == "nemotron_3_nano_gb200_pretrain_config"
    assert "--recipe nemotron_3_nano_gb200_pretrain_config" in d["artifact"]["text"].replace("\\\n    ", "")


@pytest.mark.usefixtures("home")
def test_required_inputs_are_warnings_in_dry_run():
    r = run_cli("submit", "qwen35-vl-sft", "-c", "gb200-32", "--dry-run", "-o", "json")
    assert r.code == 0
    d = r.json()
    assert d["missing_inputs"] == ["dataset.path", "checkpoint.pretrained_checkpoint"]
    assert len([w for w in d["warnings"] if w.startswith("required input")]) == 2


@pytest.mark.usefixtures("home")
def test_submitting_without_required_inputs_is_refused():
    r = run_cli("submit", "qwen35-vl-sft", "-c", "gb200-32")
    assert r.code == 2
    assert "required input dataset.path is not set" in r.err
    assert run_cli("status", "-o", "json").json() == []  # nothing recorded


@pytest.mark.usefixtures("home")
def test_overlays():
    d = _dry("nemotron-3-nano-pretrain", "--overlay", "nemo-ci-convergence", cluster="gb200-64")
    assert d["errors"] == [] and d["world_size"] == 64 and d["nodes"] == 16
    # NeMo-CI's run: each value labelled with its line in NeMo-CI's entry at the recipe's pin
    # (tests/e2e/test_real_bridge_e2e.py holds them equal to what that script builds)
    for key, value, line in [
        ("train.train_iters", 48000, "61-62 (--max_steps 48000)"),
        ("dataset.sequence_length", 4096, "105-106 (its mock dataset's)"),
        ("train.global_batch_size", 512, "63-64"),
        ("train.micro_batch_size", 2, "65-66"),
        ("scheduler.lr_warmup_iters", 480, "211-212"),
        ("checkpoint.save_interval", 1000, "201-202"),
        ("validation.eval_interval", 800, "208-209"),
        ("logger.log_interval", 1, "194"),
        ("logger.log_timers_to_tensorboard", True, "176"),
    ]:
        assert d["config"][key] == value
        assert d["provenance"]["config"][key] == f"nemo-ci@9872449 scripts/performance/run_recipe.py:{line}"
    assert not [w for w in d["warnings"] if "nemo-ci-convergence" in w]  # a candidate the seed names
    other = _dry("qwen35-35b-a3b-pretrain", "--overlay", "nemo-ci-convergence", cluster="gb200-64")
    assert other["provenance"]["config"]["scheduler.lr_warmup_iters"].startswith("nemo-ci@dd81e66 ")
    assert (
        "overlay 'nemo-ci-convergence' is written for nemotron-3-nano-pretrain, qwen35-9b-pretrain, not recipe "
        "'qwen35-35b-a3b-pretrain': its values were not validated for this model" in other["warnings"]
    )
    assert d["provenance"]["job"]["nodes"] == "cluster:gb200-64"
    wrong = run_cli(
        "submit", "nemotron-3-nano-pretrain", "-c", "gb200-8", "--overlay", "nemo-ci-convergence", "--dry-run"
    )
    assert wrong.code == 2 and "needs 64 GPUs (overlay:nemo-ci-convergence)" in wrong.err
    assert "--cluster gb200-64" in wrong.err
    v = _dry("qwen35-vl-sft", "--overlay", "validation-run")
    for key, value in {
        "train.train_iters": 100,
        "validation.eval_interval": 50,
        "validation.eval_iters": 8,
        "dist.distributed_timeout_minutes": 60,
    }.items():
        assert v["config"][key] == value and v["provenance"]["config"][key] == "overlay:validation-run"


def test_mxfp8_is_refused_on_hopper(home):
    (home / "clusters" / "h100-32.toml").write_text(
        'backend = "slurm"\ngpu_type = "h100"\ngpus_per_node = 8\nnodes = 4\njob_root = "/shared"\n'
    )
    r = run_cli("submit", "qwen35-vl-sft-mxfp8", "-c", "h100-32", "--dry-run", *INPUTS)
    assert r.code == 2 and "MXFP8 needs compute capability 10.x or 11.x (Blackwell datacenter GPUs)" in r.err
    assert run_cli("submit", "qwen35-vl-sft", "-c", "h100-32", "--dry-run", *INPUTS).code == 0


@pytest.mark.usefixtures("home")
def test_every_recipe_value_fits_the_schema():
    from bridge_launch.spec import schema

    for r in recipes.list_all():
        for key, value in {**r["config"], **r["upstream_config"]}.items():
            if r["workload"] == "smoke" and key.startswith("smoke."):
                continue
            spec = schema.lookup(key)
            assert spec is not None, f"{r['name']}: {key} is not a ConfigContainer field"
            assert schema.type_error(spec, value) is None, f"{r['name']}: {key}={value!r}"


@pytest.mark.usefixtures("home")
def test_abstract_base_recipe_cannot_be_submitted():
    r = run_cli("submit", "qwen35-vl-sft-common", "-c", "gb200-32", "--dry-run")
    assert r.code == 2 and "is a base for other recipes" in r.err


def test_an_overlays_sources_name_its_own_values(home):
    """An overlay says where a value comes from ([sources], "{bridge}": the recipe's pinned commit);
    a source for a value it does not set is one line, exit 2."""
    write(
        home / "recipes" / "overlays" / "mine.toml",
        'name = "mine"\n[config]\ntrain.train_iters = 7\n[sources]\n"train.train_iters" = "my-ci@{bridge} run.py:3"\n',
    )
    d = run_cli("submit", "smoke", "-c", "local", "--overlay", "mine", "--dry-run", "-o", "json").json()
    assert d["config"]["train.train_iters"] == 7
    assert re.fullmatch(r"my-ci@[0-9a-f]{7} run\.py:3", d["provenance"]["config"]["train.train_iters"])
    write(
        home / "recipes" / "overlays" / "mine.toml",
        'name = "mine"\n[config]\ntrain.train_iters = 7\n[sources]\n"train.global_batch_size" = "x"\n',
    )
    r = run_cli("submit", "smoke", "-c", "local", "--overlay", "mine", "--dry-run")
    assert r.code == 2 and r.err.count("\n") == 1, r.err
    assert "sources.train.global_batch_size must be the text naming where [config]'s" in r.err
    assert "[config] sets no train.global_batch_size" in r.err
    write(
        home / "recipes" / "overlays" / "mine.toml",
        'name = "mine"\n[config]\ntrain.train_iters = 7\n[sources]\n"train.train_iters" = "ci@{commit}"\n',
    )
    r = run_cli("submit", "smoke", "-c", "local", "--overlay", "mine", "--dry-run")
    assert r.code == 2 and r.err.count("\n") == 1 and "its only placeholder may be {bridge}" in r.err, r.err
