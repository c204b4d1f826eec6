"""The run registry and the commands on runs: lineage, concurrent resumes, the Energon DP
rule, diff, status filters, prune."""

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bridge_launch.core import paths
from bridge_launch.runs import lifecycle as launch
from bridge_launch.runs.registry import Registry
from conftest import run_cli, write

FAST = ["smoke.busbw_sizes=[1024]", "smoke.busbw_iters=1", "train.train_iters=2"]


@pytest.mark.usefixtures("home")
def test_registry_ids_are_unique_and_chains_exclusive():
    reg = Registry()
    ids = {reg.reserve("smoke", "local", "local").run_id for _ in range(200)}
    assert len(ids) == 200 and all(i.startswith("smoke-") and len(i) <= 40 for i in ids)
    first = reg.recent(1)[0]
    with pytest.raises(Exception) as exc:
        reg.reserve("smoke", "local", "local", chain=first.chain)  # the chain's run is still SUBMITTING
    assert "of this chain is SUBMITTING" in str(exc.value)
    reg.update(first.run_id, state="COMPLETED")
    nxt = reg.reserve("smoke", "local", "local", resumed_from=first.run_id, chain=first.chain)
    assert nxt.chain == first.chain and nxt.resumed_from == first.run_id
    assert [r.run_id for r in reg.chain(first.chain)] == [first.run_id, nxt.run_id]


@pytest.mark.usefixtures("home")
def test_status_filters_and_prune():
    reg = Registry()
    a = reg.reserve("smoke", "local", "local")
    b = reg.reserve("qwen35-vl-sft", "gb200-32", "slurm")
    reg.update(a.run_id, state="COMPLETED")
    reg.update(b.run_id, state="FAILED")
    reg.db.execute("UPDATE runs SET updated = updated - 86400 * 40 WHERE run_id = ?", (a.run_id,))
    assert [r["run_id"] for r in run_cli("status", "--state", "failed", "-o", "json").json()] == [b.run_id]
    assert [r["run_id"] for r in run_cli("status", "--recipe", "smoke", "-o", "json").json()] == [a.run_id]
    kept = [paths.state_dir() / d / a.run_id for d in ("cloud-logs", "slurm-logs")]
    for d in kept:
        d.mkdir(parents=True)
        (d / "sbatch-1.out").write_text("log\n")
    (reg.jobs_dir() / f"{a.run_id}.json").write_text("{}")
    (reg.jobs_dir() / f"{b.run_id}.json").write_text("{}")
    r = run_cli("prune", "--older-than", "30d")
    assert r.code == 0 and "forgot 1 finished run" in r.out
    assert not any(d.exists() for d in kept) and not (reg.jobs_dir() / f"{a.run_id}.json").exists()
    assert (reg.jobs_dir() / f"{b.run_id}.json").exists()
    assert [x["run_id"] for x in run_cli("status", "--all", "-o", "json").json()] == [b.run_id]
    assert run_cli("prune", "--older-than", "soon").code == 2


@pytest.mark.usefixtures("home")
@pytest.mark.slow
def test_two_concurrent_resumes_exactly_one_wins():
    sub = run_cli("submit", "smoke", "--follow", "-o", "json", *FAST, timeout=300)
    assert sub.code == 0, sub.err
    run_id = json.loads(sub.out.split("\n}\n")[0] + "\n}")["run_id"]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: run_cli("resume", run_id, "train.train_iters=3", "-o", "json"), range(2)))
    codes = sorted(r.code for r in results)
    assert codes == [0, 2], [(r.code, r.err) for r in results]
    loser = next(r for r in results if r.code == 2)
    assert "of this chain is" in loser.err
    winner = next(r for r in results if r.code == 0).json()
    chain = [r for r in run_cli("status", "--all", "-o", "json").json()]
    assert len(chain) == 2 and {c["chain"] for c in chain} == {run_id}
    launch_dir = Path(winner["run_dir"]) / "launch"
    assert sorted(p.name for p in launch_dir.iterdir()) == sorted(
        [
            f"{run_id}.json",
            f"{run_id}.sh",
            f"{run_id}.run.json",
            f"{winner['run_id']}.json",
            f"{winner['run_id']}.sh",
            f"{winner['run_id']}.run.json",
        ]
    )
    run_cli("cancel", winner["run_id"])


@pytest.mark.slow
def test_resume_refuses_a_new_data_parallel_size_for_energon(home):
    write(
        home / "recipes" / "smoke-energon.toml",
        """
        extends = "smoke"
        name = "smoke-energon"
        dataset_kind = "energon"
        [config]
        model.tensor_model_parallel_size = 1
    """,
    )
    sub = run_cli("submit", "smoke-energon", "--follow", "-o", "json", *FAST, timeout=300)
    assert sub.code == 0, sub.err
    run_id = json.loads(sub.out.split("\n}\n")[0] + "\n}")["run_id"]
    r = run_cli("resume", run_id, "model.tensor_model_parallel_size=2", "train.train_iters=3")
    assert r.code == 2 and "data-parallel size from 2 to 1" in r.err and "Energon" in r.err
    ok = run_cli("resume", run_id, "train.train_iters=4", "--follow", timeout=300)
    assert ok.code == 0, ok.err


@pytest.mark.usefixtures("home")
def test_diff_of_two_sets_and_of_two_runs():
    r = run_cli(
        "diff",
        "nemotron-3-nano-pretrain",
        "-c",
        "gb200-8",
        "--",
        "nemotron-3-nano-pretrain",
        "-c",
        "gb200-64",
        "--overlay",
        "nemo-ci-convergence",
        "-o",
        "json",
    )
    assert r.code == 0, r.err
    d = {(x["section"], x["key"]): x for x in r.json()["differences"]}
    gbs = d[("config", "train.global_batch_size")]
    assert (gbs["a"], gbs["a_source"], gbs["b"], gbs["b_source"]) == (
        3072,
        "recipe",
        512,
        "overlay:nemo-ci-convergence",
    )
    assert d[("job", "nodes")]["a"] == 2 and d[("job", "nodes")]["b"] == 16
    assert ("config", "dataset.seq_length") not in d  # equal on both sides
    text = run_cli("diff", "qwen35-vl-sft", "-c", "gb200-32", "--", "qwen35-vl-sft-mxfp8", "-c", "gb200-32")
    assert text.code == 0 and "mixed_precision.fp8_recipe" in text.out
    # two runs: their recorded jobs
    reg = Registry()
    from bridge_launch.resolve import resolver as resolve

    ids = []
    for overrides in (("train.train_iters=5",), ("train.train_iters=7",)):
        job = resolve.resolve("smoke", resolve.Options(overrides=overrides))
        run = reg.reserve("smoke", "local", "local")
        (reg.jobs_dir() / f"{run.run_id}.json").write_text(launch.job_json(job.with_run_id(run.run_id)))
        reg.update(run.run_id, state="COMPLETED")
        ids.append(run.run_id)
    r = run_cli("diff", *ids, "-o", "json")
    keys = {x["key"]: x for x in r.json()["differences"]}
    assert keys["train.train_iters"]["a"] == 5 and keys["train.train_iters"]["b"] == 7
    assert run_cli("diff", "only-one").code == 2
