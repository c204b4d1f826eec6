"""Retries of a plain Slurm job and the bad-node list, on the real two-node cluster (scripts/local-slurm):
a node made bad for the test (a fake nvidia-smi with uncorrectable ECC errors on node2; a failure the
smoke trainer injects on node2 alone) is found, left out of the next attempt and of later submits;
a deterministic failure never retries; an attempt that saved a checkpoint uses up no restart."""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import FAST, run_cli, write

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

if os.geteuid() != 0:
    pytest.skip("the local Slurm cluster needs root", allow_module_level=True)


def _submit(*args, cluster="local-slurm", env=None):
    r = run_cli("submit", "smoke", "-c", cluster, "-o", "json", *FAST, *args, env=env)
    assert r.code == 0, r.err
    return r.json()


def _wait(run_id, states=("COMPLETED", "FAILED", "CANCELLED"), timeout=600):
    deadline = time.time() + timeout
    while time.time() < deadline:
        st = run_cli("status", run_id, "-o", "json").json()[0]
        if st["state"] in states:
            return st
        time.sleep(2)  # each status is a process: ~0.4 s of CPU that the jobs need
    raise AssertionError(f"{run_id} did not reach {states}: {st}")


def _records(run: dict) -> list[list[str]]:
    path = Path(run["run_dir"]) / "attempts" / run["run_id"] / "outcomes"
    return [line.split("\t") for line in path.read_text().splitlines()] if path.exists() else []


def _wait_record(run: dict, timeout=600) -> list[str]:
    deadline = time.time() + timeout
    while not _records(run):
        assert time.time() < deadline, "the first attempt wrote no record"
        time.sleep(0.5)
    return _records(run)[0]


@pytest.fixture
def node1_drained(cluster):
    """node1 drained, so that a one-node job's first attempt lands on node2; the test resumes it."""
    env = dict(os.environ, SLURM_CONF=cluster)

    def scontrol(state):
        subprocess.run(
            [
                "scontrol",
                "update",
                "NodeName=node1",
                f"State={state}",
                *(["Reason=bridge-launch-test"] * (state == "DRAIN")),
            ],
            env=env,
            check=True,
            capture_output=True,
        )

    scontrol("DRAIN")
    try:
        yield lambda: scontrol("RESUME")
    finally:
        subprocess.run(["scontrol", "update", "NodeName=node1", "State=RESUME"], env=env, capture_output=True)


def _retried_on_node1(run: dict, resume) -> dict:
    """The first attempt fails on node2 and hands over to a retry without it; node1 comes back; the
    run completes there. Returns its final status."""
    first = _wait_record(run)
    assert first[2] == "retried" and first[5] == "node2" and first[6] == "node2", first
    resume()
    st = _wait(run["run_id"])
    assert st["state"] == "COMPLETED", (st, run_cli("logs", run["run_id"]).out[-3000:])
    assert st["info"]["nodes"] == "node1" and len(st["job_ids"]) == 2, st
    rows = st["info"]["attempts"]
    assert [(a["attempt"], a["nodes"], a["outcome"]) for a in rows] == [
        (1, "node2", "retried"),
        (2, "node1", "completed"),
    ]
    assert rows[0]["left_out"] == ["node2"] and st["info"]["restarts"] == 1
    return st


@pytest.mark.slurm_alone  # node1 is drained while it runs
@pytest.mark.usefixtures("home")
def test_a_failure_injected_on_one_node_retries_without_it_and_later_submits_leave_it_out(node1_drained):
    # the failure carries the CUDA runtime's own text for cudaErrorECCUncorrectable ("uncorrectable ECC
    # error encountered", cudaGetErrorString), which torch raises as "RuntimeError: CUDA error: ..."
    run = _submit(
        "--nodes",
        "1",
        "train.train_iters=4",
        "+smoke.fail_at_step=2",
        "+smoke.fail_node=node2",
        "+smoke.fail_message=uncorrectable ECC error encountered on GPU 0",
    )
    st = _retried_on_node1(run, node1_drained)
    assert (
        "node2: " in st["info"]["attempts"][0]["detail"] and "uncorrectable ECC" in st["info"]["attempts"][0]["detail"]
    )
    shown = run_cli("status", run["run_id"]).out
    assert "attempt 1   job " in shown and " on node2: FAILED, retried (exit 1: node2: " in shown, shown
    assert " on node1: COMPLETED, completed" in shown and "restarts    1 of 3" in shown, shown
    r = run_cli("clusters", "show", "local-slurm")
    assert "  node2 " in r.out and "uncorrectable ECC error" in r.out and run["run_id"] in r.out, r.out
    r = run_cli("submit", "smoke", "-c", "local-slurm", "--dry-run")
    assert "#SBATCH --exclude=node2\n" in r.out and "node node2 is left out" in r.out
    r = run_cli("submit", "smoke", "-c", "local-slurm", *FAST)  # two nodes, one left out: said before queueing
    assert r.code == 2 and "the bad-node list leaves out node2: too few nodes for 2" in r.err, r.err
    assert run_cli("clusters", "forget-node", "local-slurm", "node2").code == 0


@pytest.mark.slurm_alone  # node1 is drained while it runs
@pytest.mark.usefixtures("home")
def test_a_chain_segment_failing_on_a_bad_node_has_its_successor_leave_it_out(node1_drained):
    # --until-done: the successor is queued when a segment starts (afterany); the segment that fails on
    # node2 with node2's own ECC error tells it to leave node2 out (scontrol update ExcNodeList)
    run = _submit(
        "--until-done",
        "--time",
        "00:05:00",
        "--nodes",
        "1",
        "train.train_iters=4",
        "+smoke.fail_at_step=2",
        "+smoke.fail_node=node2",
        "+smoke.fail_message=uncorrectable ECC error encountered on GPU 0",
    )
    outcomes = Path(run["run_dir"]) / "chain" / run["run_id"] / "outcomes"
    deadline = time.time() + 180
    while not (outcomes.exists() and outcomes.read_text().strip()):
        assert time.time() < deadline, "the first segment wrote no outcome"
        time.sleep(0.5)
    first = outcomes.read_text().splitlines()[0]
    assert " failed " in first and "(node: ECC error): node2: " in first and "uncorrectable ECC" in first, first
    assert ", restart 1 of 3; " in first, first
    assert first.endswith(" leaves out node2"), first
    node1_drained()  # node1 back: the successor, which may not use node2, runs there
    st = _wait(run["run_id"], timeout=600)
    assert st["state"] == "COMPLETED", (st, run_cli("logs", run["run_id"]).out[-3000:])
    ran = [s["job_id"] for s in st["info"]["segments"] if s["state"] == "COMPLETED"]
    assert ran and run["job_ids"][0] not in ran, st["info"]["segments"]
    logs = Path(run["run_dir"]) / "logs"
    assert all((logs / f"{j}-node1.log").exists() and not (logs / f"{j}-node2.log").exists() for j in ran)
    r = run_cli("clusters", "show", "local-slurm")
    assert "  node2 " in r.out and "uncorrectable ECC" in r.out and run["run_id"] in r.out, r.out
    r = run_cli("submit", "smoke", "-c", "local-slurm", "--nodes", "1", "--dry-run")
    assert "#SBATCH --exclude=node2\n" in r.out
    assert run_cli("clusters", "forget-node", "local-slurm", "node2").code == 0


@pytest.mark.slurm_alone  # node1 is drained while it runs
@pytest.mark.usefixtures("cluster")
def test_the_health_step_finds_the_bad_node_and_the_retry_leaves_it_out(home, tmp_path, node1_drained):
    from gpu_reports import fake_nvidia_smi

    # both nodes share this PATH (sbatch exports the submitting environment, and so does the retry's
    # sbatch): node2's GPU 0 reports uncorrectable ECC errors, node1's GPUs are healthy
    fake_nvidia_smi(tmp_path / "bin", bad_node="node2", gpus=2)
    env = {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    write(
        home / "clusters" / "healthy.toml", 'name = "healthy"\nextends = "local-slurm"\n[slurm]\nhealth_check = true\n'
    )
    t0 = time.time()
    run = _submit("--nodes", "1", "train.train_iters=2", cluster="healthy", env=env)
    first = _wait_record(run)
    assert time.time() - t0 < 120  # the step is bounded (srun --time=2) and stopped the attempt before torchrun
    assert first[7].startswith("health step: node2 FAIL gpu: GPU 00000000:01:00.0") and "retry 1 of 3" in first[7], (
        first
    )
    run_dir = Path(run["run_dir"])
    first_job = run["job_ids"][0]
    reports = {p.stem: json.loads(p.read_text()) for p in (run_dir / "health" / first_job).glob("*.json")}
    assert reports["node2"]["status"] == "fail", reports
    assert not list((run_dir / "logs").glob(f"{first_job}-*.log"))  # torchrun never started on node2
    st = _retried_on_node1(run, node1_drained)
    second = st["job_ids"][1]
    assert (
        "bridge-launch health: node1 ok gpu: 2 x NVIDIA GB200"
        in (run_dir / "logs" / f"sbatch-{second}.out").read_text()
    )
    r = run_cli("clusters", "show", "healthy")
    assert "  node2 " in r.out and "health step" in r.out, r.out
    assert run_cli("clusters", "forget-node", "healthy", "node2").code == 0


@pytest.mark.slurm_alone  # node1 is drained while it runs
@pytest.mark.usefixtures("cluster")
def test_a_chain_whose_health_step_fails_on_a_node_continues_without_it(home, tmp_path, node1_drained):
    """--until-done with the health step: the first segment's health step fails on node2 (its GPU's
    uncorrectable ECC errors); the segment counts as a failed one and its queued successor leaves
    node2 out, as after a failure in training, instead of the chain stopping."""
    from gpu_reports import fake_nvidia_smi

    fake_nvidia_smi(tmp_path / "bin", bad_node="node2", gpus=2)
    env = {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    write(
        home / "clusters" / "healthy.toml", 'name = "healthy"\nextends = "local-slurm"\n[slurm]\nhealth_check = true\n'
    )
    run = _submit(
        "--until-done", "--time", "00:05:00", "--nodes", "1", "train.train_iters=2", cluster="healthy", env=env
    )
    outcomes = Path(run["run_dir"]) / "chain" / run["run_id"] / "outcomes"
    deadline = time.time() + 120
    while not (outcomes.exists() and outcomes.read_text().strip()):
        assert time.time() < deadline, "the first segment wrote no outcome"
        time.sleep(0.5)
    first = outcomes.read_text().splitlines()[0]
    assert f"{run['job_ids'][0]} failed 0 0 health step: node2 FAIL gpu: " in first, first
    assert "restart 1 of 3; " in first and first.endswith(" leaves out node2"), first
    node1_drained()  # node1 back: the successor, which may not use node2, runs there
    st = _wait(run["run_id"], timeout=600)
    assert st["state"] == "COMPLETED", (st, run_cli("logs", run["run_id"]).out[-3000:])
    ran = [s["job_id"] for s in st["info"]["segments"] if s["state"] == "COMPLETED"]
    logs = Path(run["run_dir"]) / "logs"
    assert ran and all((logs / f"{j}-node1.log").exists() and not (logs / f"{j}-node2.log").exists() for j in ran)
    assert not (Path(run["run_dir"]) / "chain" / run["run_id"] / "stopped").exists()
    assert run_cli("clusters", "forget-node", "healthy", "node2").code == 0


@pytest.mark.usefixtures("cluster")
def test_a_two_node_job_measures_its_fabric_in_the_health_step(home, tmp_path):
    from gpu_reports import fake_nvidia_smi

    # node1 and node2 report GPUs in two NVLink cliques (two racks): after their own checks both join
    # an all-reduce over the allocation and one across the racks (gloo here: figures, no verdict)
    fake_nvidia_smi(tmp_path / "bin", gpus=2, cliques={"node1": "11", "node2": "12"})
    env = {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    write(
        home / "clusters" / "healthy.toml", 'name = "healthy"\nextends = "local-slurm"\n[slurm]\nhealth_check = true\n'
    )
    dry = run_cli("submit", "smoke", "-c", "healthy", "--dry-run", env=env).out
    assert "then an all-reduce over the 2 nodes and one across racks (one GPU a node, not judged on gloo)" in dry
    run = _submit("train.train_iters=2", cluster="healthy", env=env)
    st = _wait(run["run_id"])
    assert st["state"] == "COMPLETED", (st, run_cli("logs", run["run_id"]).out[-3000:])
    job = run["job_ids"][0]
    out = (Path(run["run_dir"]) / "logs" / f"sbatch-{job}.out").read_text()
    line = next(ln for ln in out.splitlines() if " fabric: " in ln)
    head = "bridge-launch health: node[1-2] ok fabric: all-reduce over 2 nodes (across NVLink domains): "
    assert line.startswith(head), line
    assert "no verdict on gloo; across racks (node1 and node2): " in line, line
    report = json.loads((Path(run["run_dir"]) / "health" / job / "fabric.json").read_text())
    assert report["ranks"] == ["node1", "node2"] and report["cross_rack"]["ranks"] == ["node1", "node2"], report
    assert report["all"][-1]["busbw_gbps"] > 0 and report["cross_rack"]["rows"][-1]["busbw_gbps"] > 0


@pytest.mark.usefixtures("cluster", "home")
def test_deterministic_and_unknown_failures_cost_one_attempt_and_progress_buys_an_unknown_one_a_retry():
    """Retries by evidence (logs/failures.py): a deterministic failure never retries (out of memory;
    the hub's "couldn't connect" under HF_HUB_OFFLINE=1, a cache miss, though upstream's allowlist calls
    it flaky), and a failure no class names is retried only after it saved a newer checkpoint: each
    costs one attempt, not four."""
    oom = _submit(
        "--nodes",
        "1",
        "train.train_iters=4",
        "+smoke.fail_at_step=2",
        "+smoke.fail_message=torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    )
    unknown = _submit(
        "--nodes", "1", "train.train_iters=6", "checkpoint.save_interval=2", "+smoke.fail_at_step=3"
    )  # InjectedFailure: attempt 1 saved iteration 2 (retried), attempt 2 saved nothing new (not)
    hub = _submit(
        "--nodes",
        "1",
        "--env",
        "HF_HUB_OFFLINE=1",
        "train.train_iters=4",
        "+smoke.fail_at_step=2",
        "+smoke.fail_message=\"OSError: We couldn't connect to 'https://huggingface.co' to load the files\"",
    )
    st = _wait(hub["run_id"])
    assert st["state"] == "FAILED" and len(st["job_ids"]) == 1, st
    (rec,) = _records(hub)
    assert "deterministic, not retried: hub unreachable: " in rec[7] and "couldn't connect" in rec[7], rec
    st = _wait(oom["run_id"])
    assert st["state"] == "FAILED" and len(st["job_ids"]) == 1, st
    (rec,) = _records(oom)
    assert rec[2] == "failed" and "deterministic, not retried: " in rec[7] and "CUDA out of memory" in rec[7], rec
    assert "attempt 1: deterministic, not retried: " in st["reason"], st
    assert not (Path(oom["run_dir"]) / "attempts" / oom["run_id"] / "jobs").exists()
    table = (Path(hub["run_dir"]) / "launch" / f"{hub['run_id']}.failures.tsv").read_text()
    assert table.startswith("deterministic\t") and "deterministic\thub unreachable\t" in table
    st = _wait(unknown["run_id"], timeout=600)
    assert st["state"] == "FAILED" and len(st["job_ids"]) == 2, st
    rows = [(r[2], r[3], r[4]) for r in _records(unknown)]
    assert rows == [("retried", "0", "2"), ("failed", "2", "2")], rows
    first, second = (r[7] for r in _records(unknown))
    assert "(unknown)" in first and "it saved iteration 2: no restart used" in first, first
    assert "unknown failure (no failure class matches its logs), not retried: it saved no newer checkpoint" in second
    shown = run_cli("status", unknown["run_id"]).out
    assert "not retried: it saved no newer checkpoint" in shown, shown


@pytest.mark.usefixtures("cluster", "home")
def test_an_attempt_that_saved_a_checkpoint_uses_up_no_restart():
    # every attempt fails at step 3; the first saved iteration 2 (progress: free), the second resumed
    # there and saved nothing new (restart 1 of 1), the third finds the budget used up
    run = _submit(
        "--nodes",
        "1",
        "--max-restarts",
        "1",
        "train.train_iters=6",
        "checkpoint.save_interval=2",
        "+smoke.fail_at_step=3",
        "+smoke.fail_message=Watchdog caught collective operation timeout on rank 0",  # flaky
    )
    st = _wait(run["run_id"], timeout=400)
    assert st["state"] == "FAILED" and len(st["job_ids"]) == 3, st
    rows = [(r[2], r[3], r[4]) for r in _records(run)]
    assert rows == [("retried", "0", "2"), ("retried", "2", "2"), ("failed", "2", "2")], rows
    assert "retry (it saved iteration 2: no restart used, 0 of 1 so far) as job " in _records(run)[0][7]
    assert "retry 1 of 1 as job " in _records(run)[1][7] and "--max-restarts 1 used up" in _records(run)[2][7]
    assert "(exit code 1; attempt 3: not retried: --max-restarts 1 used up)" in st["reason"], st
    second = (Path(run["run_dir"]) / "logs" / f"sbatch-{st['job_ids'][1]}.out").read_text()
    assert "bridge-launch: attempt 2 on node" in second and ", from iteration 2" in second, second
