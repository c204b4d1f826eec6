"""bridge-launch plan: rank groups, NVLink spans, memory per GPU, FLOPs and GPU-hours.

Rank groups are checked by hand on small worlds and against megatron-core's own
parallel_state.initialize_model_parallel run with gloo on CPU processes; the memory and FLOP
formulas against published figures, each test naming its source.
"""

import dataclasses
from types import SimpleNamespace

import pytest

from bridge_launch.plan import estimate as plan
from bridge_launch.plan import report
from plan_jobs import job

pytest.importorskip("megatron.core")


def arch(recipe, **changes):
    a = plan.arch_for(SimpleNamespace(recipe=recipe, hf_model=None, config={}))
    return dataclasses.replace(a, **changes) if changes else a


def gpt(h=4096, a=32):
    """The GPT layer of Korthikanti et al.: MHA, 4h GeLU MLP, dropout, no flash attention."""
    return plan.Arch(
        name="gpt",
        source="test",
        hidden=h,
        vocab=51200,
        tied=True,
        layers=("*+-",),
        ffn=4 * h,
        gated_mlp=False,
        dropout=True,
        flash_attention=False,
        attention={"num_heads": a, "num_query_groups": a, "head_dim": h // a},
    )


def test_bytes_per_parameter_match_megatron_distributed_optimizer_table():
    # Megatron-LM docs/user-guide/features/dist_optimizer.md: bf16 parameters with fp32
    # gradients cost 18 bytes without the distributed optimizer and 6 + 12/d with it; fp16/bf16
    # gradients cost 20 and 4 + 16/d.
    assert plan.bytes_per_param(distributed=False, shard=8, fp32_grads=True)["total"] == 18
    assert plan.bytes_per_param(distributed=True, shard=8, fp32_grads=True)["total"] == 6 + 12 / 8
    assert plan.bytes_per_param(distributed=False, shard=8, fp32_grads=False)["total"] == 20
    assert plan.bytes_per_param(distributed=True, shard=16, fp32_grads=False)["total"] == 4 + 16 / 16


@pytest.mark.parametrize("t", [1, 2, 8])
def test_activation_memory_per_layer_matches_korthikanti_table_2(t):
    # Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"
    # (arXiv 2205.05198), Table 2, activation bytes per transformer layer.
    s, b, h, a = 2048, 1, 4096, 32
    m = gpt(h, a)

    def layer(**kw):
        return plan.layer_activation_bytes(m, "*+-", seq=s, tp=t, **kw) * s * b

    sbh = s * b * h
    selective = frozenset({"core_attn"})
    if t == 1:
        assert layer() == pytest.approx(sbh * (34 + 5 * a * s / h))  # no parallelism
    assert layer() == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)))  # tensor parallel
    assert layer(sp=True) == pytest.approx(sbh * (34 / t + 5 * a * s / (h * t)))  # + sequence parallel
    assert layer(recompute=selective) == pytest.approx(sbh * (10 + 24 / t))  # + selective recompute
    assert layer(sp=True, recompute=selective) == pytest.approx(sbh * 34 / t)  # TP + SP + selective
    # full activation recompute keeps only each layer's input: sbh * 2 (Table 2, last row)
    kept, transient = plan.stage_activation_bytes(
        m, ["*+-"] * 4, plan.Recompute("full", method="uniform", num_layers=1), seq=s, tp=t, sp=False, etp=1
    )
    assert kept * s * b == pytest.approx(4 * sbh * 2)
    assert transient == pytest.approx(plan.layer_activation_bytes(m, "*+-", seq=s, tp=t))


def test_flash_attention_and_no_dropout_match_megatron_lm_estimate():
    # Megatron-LM megatron/training/theoretical_memory_usage.py (compute_activation_memory):
    # with sequence parallelism and selective recompute a layer keeps sbh(18 + 4 ffn/h)/t bytes,
    # which is 34 sbh/t for the 4h MLP: the s^2 term is gone once core attention is not stored.
    s, h, t = 4096, 4096, 4
    m = dataclasses.replace(gpt(h), flash_attention=True)
    assert plan.layer_activation_bytes(m, "*+-", seq=s, tp=t, sp=True) * s == pytest.approx(s * h * (18 + 4 * 4) / t)


def test_qwen35_vl_parameter_count_reproduces_the_verification_card():
    # Megatron-Bridge examples/model_verification_cards/qwen3.6-35b-a3b/card.yaml (same
    # architecture as Qwen3.5-35B-A3B): the HF export holds 71,903,645,408 BF16 bytes
    # (language model, MTP layer and vision tower).
    assert plan.total_params(arch("qwen35-vl-sft"))["total"] == 71_903_645_408 // 2


def test_nemotron_3_nano_parameter_count_matches_the_report():
    # Nemotron 3 Nano technical report (arXiv 2512.20848): 31.6B total parameters.
    assert plan.total_params(arch("nemotron-3-nano-pretrain"))["total"] == pytest.approx(31.6e9, rel=0.002)


def test_qwen35_9b_parameter_count_matches_published_size():
    # llama.cpp GGUF metadata of Qwen3.5-9B (language model, no MTP): 8.95B parameters.
    assert plan.total_params(arch("qwen35-9b-pretrain", mtp_layers=0))["total"] == pytest.approx(8.95e9, rel=0.001)


@pytest.mark.usefixtures("home")
def test_vl_sft_memory_breakdown():
    mem = report.plan(job("qwen35-vl-sft", "gb200-32"))["memory"]
    p = mem["parameters"]
    # experts over EP16, the rest (embeddings, output layer, vision) over TP2
    assert p["expert_per_gpu"] == pytest.approx(p["experts"] / 16, rel=1e-9)
    assert mem["bytes_per_param"] == {
        "dense": 6 + 12 / 16,
        "expert": 6 + 12 / 2,
        "distributed_optimizer": True,
        "fp32_grads": True,
        "dense_shard": 16,
        "expert_shard": 2,
    }
    gib = 1024**3
    assert mem["params_gib"] == pytest.approx(2 * p["per_gpu"] / gib, abs=0.01)
    assert mem["grads_gib"] == pytest.approx(4 * p["per_gpu"] / gib, abs=0.01)
    assert mem["optimizer_gib"] == pytest.approx(
        (12 / 16 * p["dense_per_gpu"] + 12 / 2 * p["expert_per_gpu"]) / gib, abs=0.01
    )
    assert mem["tokens_per_microbatch"] == 131072 / 8 and mem["microbatches_in_flight"] == 1
    # the shipped function leaves recompute_modules unset: megatron-core's default list, core_attn alone
    assert mem["recompute"] == "selective: core_attn"
    assert mem["capacity_gib"] == 186 and 0.3 < mem["fraction"] < 0.9
    parts = mem["params_gib"] + mem["grads_gib"] + mem["optimizer_gib"] + mem["activations_gib"]
    assert mem["total_gib"] == pytest.approx(parts, abs=0.05)


@pytest.mark.usefixtures("home")
def test_recompute_lowers_activations():
    base = report.plan(job("qwen35-9b-pretrain", "gb200-8"))["memory"]
    sel = report.plan(
        job(
            "qwen35-9b-pretrain",
            "gb200-8",
            "model.recompute_granularity=selective",
            "model.recompute_modules=[layernorm,mlp]",
        )
    )["memory"]
    full = report.plan(
        job(
            "qwen35-9b-pretrain",
            "gb200-8",
            "model.recompute_granularity=full",
            "model.recompute_method=uniform",
            "model.recompute_num_layers=1",
        )
    )["memory"]
    assert full["activations"]["layers"] < sel["activations"]["layers"] < base["activations"]["layers"]
    assert full["activations"]["recompute_transient"] > 0


@pytest.mark.usefixtures("home")
def test_memory_above_100_percent_is_an_error_with_what_fits():
    j = job("qwen35-9b-pretrain", "gb200-8", "train.micro_batch_size=8")
    result = report.plan(j)
    assert result["memory"]["fraction"] > 1
    err = [e for e in result["errors"] if e.startswith("memory: about")]
    assert len(err) == 1 and "does not fit; would fit: " in err[0] and "--no-memory-check" in err[0]
    assert err[0] in j.errors  # what submit refuses
    assert "train.micro_batch_size=4" in err[0]  # half the micro batch fits
    assert f"error: {err[0]}" in report.render_text(result)


@pytest.mark.usefixtures("home")
def test_config_values_override_the_table():
    j = job("qwen35-35b-a3b-pretrain", "gb200-8", "model.num_layers=8", "model.mtp_num_layers=0")
    a = plan.arch_for(j)
    assert len(a.layers) == 8 and a.layers[3] == "*+E" and a.mtp_layers == 0
    assert plan.arch_for(job("qwen35-35b-a3b-pretrain", "gb200-8")).mtp_layers == 1  # the table is not mutated


@pytest.mark.usefixtures("home")
def test_unknown_model_gives_no_memory_but_a_note():
    result = report.plan(job("smoke", "local", "~model.num_layers"))
    assert result["memory"] is None and result["throughput"] is None
    assert any("no architecture known" in n for n in result["notes"])


def test_nemotron_flops_per_token_reproduce_megatron_bridge_throughput_table():
    # Megatron-Bridge docs/performance-summary-archive.md (26.06.01 container), Nemotron_3_Nano
    # on 8 DGX-GB200, seq 8192: 776 model TFLOP/s/GPU at 34816 tokens/s/GPU, i.e. the model
    # TFLOPs Megatron-Bridge counts per token.
    assert plan.flops_per_token(arch("nemotron-3-nano-pretrain"), 8192) == pytest.approx(776e12 / 34816, rel=0.002)


def test_qwen35_flops_per_token_match_the_verification_card():
    # Megatron-Bridge qwen3.6-35b-a3b card, pretrain_performance.GB200: 210.360 TFLOP/s/GPU at
    # 9142.714 tokens/s/GPU, seq 4096. That count includes the vision tower's FLOPs for the
    # mock images, which plan leaves out, so the language model accounts for ~97% of it.
    ratio = plan.flops_per_token(arch("qwen35-35b-a3b-pretrain"), 4096) / (210.36e12 / 9142.714)
    assert 0.97 < ratio < 1.0


@pytest.mark.usefixtures("home")
def test_throughput_for_the_convergence_overlay():
    thr = report.plan(job("nemotron-3-nano-pretrain", "gb200-64", overlays=("nemo-ci-convergence",)))["throughput"]
    assert thr["tokens_per_step"] == 512 * 4096
    assert thr["steps"] == 48000 and thr["tokens"] == 48000 * 512 * 4096
    assert thr["budget_source"] == "nemo-ci@9872449 scripts/performance/run_recipe.py:61-62 (--max_steps 48000)"
    # the recipe is BF16 and the only published GB200 figure is MXFP8: no GPU-hours, said plainly
    assert thr["precision"] == "bf16" and thr["tflops_assumption"] is None and thr["gpu_hours"] is None
    assert "no BF16 measurement on gb200" in thr["no_assumption"] and "MXFP8 on gb200: 776" in thr["no_assumption"]
    # at MXFP8 the measurement applies
    thr = report.plan(
        job(
            "nemotron-3-nano-pretrain",
            "gb200-64",
            "mixed_precision=bf16_with_mxfp8_mixed",
            overlays=("nemo-ci-convergence",),
        )
    )["throughput"]
    assert thr["precision"] == "mxfp8" and thr["tflops_assumption"] == 776 and "performance-summary" in thr["source"]
    expected = thr["tokens"] * thr["flops_per_token"] / 776e12 / 3600
    assert thr["gpu_hours"] == pytest.approx(expected, rel=1e-3)
    assert thr["wall_hours"] == pytest.approx(expected / 64, rel=1e-2)


@pytest.mark.usefixtures("home")
def test_tflops_and_token_budget_from_the_caller():
    thr = report.plan(job("qwen35-9b-pretrain", "gb200-8"), tflops_per_gpu=500, token_budget=10**9)["throughput"]
    assert thr["steps"] == -(-(10**9) // (128 * 4096)) and thr["budget_source"] == "a budget of 1,000,000,000 tokens"
    assert thr["tflops_assumption"] == 500 and thr["source"] == "given for this plan" and thr["gpu_hours"] > 0


@pytest.mark.usefixtures("home")
def test_recipe_without_a_stated_tflops_has_no_gpu_hours():
    result = report.plan(job("qwen35-9b-pretrain", "gb200-8"))
    assert result["throughput"]["gpu_hours"] is None and result["throughput"]["tflops_assumption"] is None
    assert "GPU-hours unknown" in report.render_text(result)


@pytest.mark.usefixtures("home")
def test_mxfp8_recipe_states_the_model_card_assumption():
    thr = report.plan(job("qwen35-vl-sft-mxfp8", "gb200-32"))["throughput"]
    assert thr["tflops_assumption"] == 210.36 and "qwen3.6-35b-a3b" in thr["source"]


@pytest.mark.usefixtures("home")
def test_throughput_assumption_depends_on_precision():
    # issue 12: the BF16 and MXFP8 VL recipes used to get the same step time from one MXFP8 measurement
    inputs = ("dataset.path=/lustre/fsw/clevr2", "checkpoint.pretrained_checkpoint=/lustre/fsw/ckpt")
    bf16 = report.plan(job("qwen35-vl-sft", "gb200-32", *inputs))["throughput"]
    mxfp8 = report.plan(job("qwen35-vl-sft-mxfp8", "gb200-32", *inputs))["throughput"]
    assert (bf16["precision"], mxfp8["precision"]) == ("bf16", "mxfp8")
    assert mxfp8["tflops_assumption"] == 210.36 and mxfp8["step_seconds"] > 0
    assert bf16["tflops_assumption"] is None and bf16["step_seconds"] is None and bf16["gpu_hours"] is None
    assert bf16["no_assumption"].startswith(
        "no BF16 measurement on gb200 for this model (measured: MXFP8 on gb200: 210.36"
    )
    assert "GPU-hours unknown" in report.render_text(report.plan(job("qwen35-vl-sft", "gb200-32", *inputs)))
    # a measurement is for one GPU type too: the GB300 row applies on GB300 only
    par8 = plan.Parallel(world=8, tp=1, pp=1, cp=1, ep=8, etp=1, dp=8, edp=1, vpp=None, sp=False)
    j = job("nemotron-3-nano-pretrain", "gb200-8", "mixed_precision=bf16_with_mxfp8_mixed")
    assert plan.tflops_assumption(j)["tflops_per_gpu"] == 776
    assert plan.tflops_assumption(dataclasses.replace(j, gpu_type="gb300"))["tflops_per_gpu"] == 905
    assert plan.tflops_assumption(dataclasses.replace(j, gpu_type="h100"))["tflops_per_gpu"] is None
    assert plan.throughput(j, plan.arch_for(j), par8, tflops_per_gpu=500)["tflops_assumption"] == 500  # --tflops wins
