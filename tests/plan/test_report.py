import json
import subprocess
import sys

import pytest

from bridge_launch.core.errors import UsageError
from bridge_launch.plan import report
from conftest import run_cli, write
from plan_jobs import job

pytest.importorskip("megatron.core")


def test_one_node_is_singular(home):
    write(home / "clusters" / "tri.toml", 'extends = "local"\nname = "tri"\ngpus_per_node = 3\n')
    d = run_cli("submit", "smoke", "-c", "tri", "--dry-run", "-o", "json", "model.tensor_model_parallel_size=2").json()
    assert any("(1 node x 3)" in e for e in d["errors"]), d["errors"]
    assert not any("1 nodes" in e for e in d["errors"] + d["warnings"])


@pytest.mark.usefixtures("home")
def test_plan_tokens_wording():
    pytest.importorskip("megatron.core")
    r = run_cli("plan", "nemotron-3-nano-pretrain", "-c", "gb200-8", "--tokens", "1e11")
    assert r.code == 0, r.err
    assert "budget from a budget" not in r.out and "(--tokens: a budget of 100,000,000,000 tokens)" in r.out
    r = run_cli("plan", "nemotron-3-nano-pretrain", "-c", "gb200-8")
    assert "(train.train_iters from upstream@9872449)" in r.out


@pytest.mark.usefixtures("home")
def test_bad_sizes_are_usage_errors():
    with pytest.raises(UsageError, match="not divisible by TP\\*PP\\*CP"):
        report.plan(job("qwen35-9b-pretrain", "gb200-8", "model.tensor_model_parallel_size=3"))


@pytest.mark.usefixtures("home")
def test_missing_megatron_core_is_one_usage_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "megatron.core.parallel_state", None)
    with pytest.raises(UsageError) as err:
        report.plan(job("qwen35-9b-pretrain", "gb200-8"))
    assert str(err.value) == "bridge-launch plan needs the 'plan' extra: pip install 'bridge-launch[plan]'"


def test_importing_plan_does_not_import_megatron_or_torch():
    code = (
        "import sys, bridge_launch.plan.estimate; print(sorted(m for m in ('megatron', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_plan_command_output_survives_the_fast_exit(cli):
    # plan ends without the interpreter's teardown once megatron-core is loaded: its output must be whole
    r = cli("plan", "qwen35-vl-sft", "-c", "gb200-32", "-o", "json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["parallel"]["cp"] == 8
    r = cli("plan", "qwen35-9b-pretrain", "-c", "gb200-8")
    assert r.code == 0 and r.out.rstrip().splitlines()[-1].startswith("warning: qwen35-9b-pretrain trains on mock data")


def test_plan_without_a_rank_layout_says_what_submit_says(cli):
    r = cli("plan", "qwen35-vl-sft", "-c", "gb200-32", "model.tensor_model_parallel_size=3")
    s = cli("submit", "qwen35-vl-sft", "-c", "gb200-32", "model.tensor_model_parallel_size=3", "--dry-run")
    assert r.code == s.code == 2 and r.err == s.err
    assert "Traceback" not in r.err and r.err.startswith(
        "bridge-launch: error: world size 32 (8 nodes x 4) is not divisible"
    )
