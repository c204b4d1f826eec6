"""The model description: one place (models.toml via models.py) for the architecture facts that
plan, validate and --dry-run read, each fact with its source."""

import subprocess
import sys
from types import SimpleNamespace

import pytest

from bridge_launch.plan import rules as validate
from bridge_launch.resolve import resolver as resolve
from bridge_launch.spec import models


def _job(recipe, **config):
    return SimpleNamespace(
        recipe=recipe, hf_model=None, config=config, provenance={"config": {k: "cli" for k in config}}
    )


def test_every_fact_names_a_source_and_every_tag_a_reference():
    table = models.table()["models"]
    for name in table:
        f = models.facts_for(_job(table[name]["recipes"][0]))
        assert f.name == name and f.facts
        for key, fact in f.facts.items():
            assert fact.source.startswith("models.toml "), (name, key)
            tags = [t.strip("[]") for t in fact.source.split()[2:] if t.startswith("[")]
            assert len(fact.refs) == len(tags), (name, key, fact.source)  # every tag found its citation
            assert all(len(r) > 20 for r in fact.refs)


def test_inherited_facts_name_the_entry_that_states_them():
    f = models.facts_for(_job("qwen35-vl-sft"))
    assert f.name == "qwen35-vl-35b-a3b" and f.get("moe.num_experts") == 256 and f.get("vision.depth") == 27
    assert f.source("moe.num_experts") == "models.toml qwen35-35b-a3b [slime] [card]"
    assert f.source("vision.depth") == "models.toml qwen35-vl-35b-a3b [card] [mb-vl]"
    assert "THUDM/slime" in f.facts["moe.num_experts"].refs[0]


def test_the_jobs_model_values_win_and_say_so():
    f = models.facts_for(_job("nemotron-3-nano-pretrain", **{"model.num_moe_experts": 64, "model.num_layers": 26}))
    assert f.get("moe.num_experts") == 64 and f.source("moe.num_experts") == "job config: cli"
    assert f.cite("moe.num_experts") == "model.num_moe_experts=64 (job config: cli)"
    assert f.get("mamba.num_heads") == 64 and f.source("mamba.num_heads").startswith(
        "models.toml nemotron-3-nano-30b-a3b"
    )
    assert "from the job: model.num_layers, model.num_moe_experts" in f.summary()


def test_a_recipe_without_an_entry_gets_megatrons_defaults():
    f = models.facts_for(_job("custom", **{"model.hidden_size": 1024, "model.num_attention_heads": 16}))
    assert f.name == "job config" and f.get("ffn") == 4096 and f.get("attention.head_dim") == 64
    assert f.get("attention.num_query_groups") == 16 and "megatron-core TransformerConfig default" in f.source(
        "attention.num_query_groups"
    )
    assert models.facts_for(_job("custom")) is None


@pytest.mark.usefixtures("home")
def test_plan_and_validate_read_the_same_facts():
    pytest.importorskip("megatron.core")
    from bridge_launch.plan import estimate, report

    job = resolve.resolve(
        "nemotron-3-nano-pretrain", resolve.Options(cluster="gb200-8", overrides=("model.num_moe_experts=64",))
    )
    assert estimate.arch_for(job).moe["num_experts"] == 64
    assert validate.context(job).facts.get("moe.num_experts") == 64
    assert report.plan(job)["model"]["facts"]["moe.num_experts"] == {"value": 64, "source": "job config: cli"}


def test_dry_run_shows_the_model_and_its_sources(cli):
    r = cli("submit", "nemotron-3-nano-pretrain", "-c", "gb200-8", "--dry-run")
    assert r.code == 0, r.err
    assert (
        "Model      nemotron-3-nano-30b-a3b (models.toml [models.nemotron-3-nano-30b-a3b]): 52 layers, "
        "32 heads / 2 query groups, Mamba 64 heads / 8 groups, 128 experts (top-6, FFN 1856)"
    ) in r.out
    d = cli("submit", "nemotron-3-nano-pretrain", "-c", "gb200-8", "--dry-run", "-o", "json").json()
    assert d["model"]["facts"]["moe.num_experts"] == {
        "value": 128,
        "source": "models.toml nemotron-3-nano-30b-a3b [mb] [paper]",
    }
    assert cli("submit", "smoke", "--dry-run", "-o", "json").json()["model"] is None  # not a Megatron model


def test_model_facts_import_neither_megatron_nor_torch():
    code = (
        "import sys, bridge_launch.spec.models, bridge_launch.plan.rules, bridge_launch.plan.findings, "
        "bridge_launch.plan.topology, "
        "bridge_launch.plan.estimate; print(sorted(m for m in ('megatron', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
