"""The canary on the local two-node Slurm cluster with containers (pyxis, enroot, the local image given
the real Megatron-Bridge 067f987 and its Python 3.12 venv through mounts: test_containers_e2e.real_mb),
on the seed's Qwen3.5-VL SFT recipe (the function bridge-launch ships) made to fit 4 CPU ranks: a
canary that passes lets the job start; one that fails (a missing data path, an image that cannot be
pulled, an override the image's trainer rejects) leaves the real job never started and `status`
naming the check."""

import json
import subprocess
import time
from pathlib import Path

import pytest
import realbridge  # scripts/bridge: on the path tests/conftest.py sets
from test_containers_e2e import STATE, _submit, _wait, cluster, mb_profile, real_mb  # noqa: F401 (fixtures)

from canary_jobs import FIT, VL_FUNCTION, _spec, real_bridge, run_env
from conftest import WORKLOADS, run_cli, write

pytestmark = [pytest.mark.slow, pytest.mark.slurm]


VL = "qwen35-vl-sft-4"  # the seed's VL SFT recipe (its function: workloads/bridge_recipes/qwen35_vl_gb200.py) on 4 GPUs


SLURM_CONF = str(STATE / "etc" / "slurm.conf")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A prepared Energon dataset, a pretrained checkpoint in Bridge's layout, an offline HF cache."""
    from bridge_launch.data import prepare, synthetic

    root = tmp_path_factory.mktemp("canary-inputs")
    src = synthetic.make_source(root / "src", n=8, seed=2)
    prepare.prepare(
        "nemotron-image-v3",
        src,
        root / "data",
        subsets=["clevr_2"],
        skip_integrity=True,
        validation_fraction=0.25,
        max_samples_per_tar=5,
        num_workers=1,
    )
    it = root / "ckpt" / "iter_0000001"
    write(it / "metadata.json", json.dumps({"sharded_backend": "torch_dist", "sharded_backend_version": 1}))
    write(it / ".metadata", "dcp")
    write(root / "ckpt" / "latest_checkpointed_iteration.txt", "1")
    # the model's config.json at the revisions the recipes pin (scripts/bridge/hf_configs.py, sources
    # cited there), and the processor's file the canary's HF-cache check looks for
    realbridge.hf_home(root / "hf")
    for snap in (root / "hf" / "hub").glob("models--Qwen--Qwen3.5-35B-A3B/snapshots/*"):
        write(snap / "preprocessor_config.json", "{}")
    return root


@pytest.fixture
def vl(home, inputs, request):
    """A profile with the canary on by default over the real Megatron-Bridge; the seed's VL SFT recipe
    on the local cluster's 4 ranks (its topology fitted by FIT), and its inputs."""
    write(home / "recipes" / f"{VL}.toml", f'name = "{VL}"\nextends = "qwen35-vl-sft"\ngpus = 4\n')
    mb_profile(
        home,
        "pyxis-canary",
        request.getfixturevalue("real_mb"),
        mounts=[f"{inputs}:{inputs}"],
        extra=f'hf_home = "{inputs}/hf"\n[canary]\nenabled = true',
    )
    return [f"dataset.path={inputs}/data", f"checkpoint.pretrained_checkpoint={inputs}/ckpt", *FIT]


def _slurm_state(job_id: str) -> dict:
    """The job's state and start time from squeue (it keeps finished jobs for MinJobAge), else sacct
    (other tests take accounting away for a while: then this may find nothing)."""
    env = {"SLURM_CONF": SLURM_CONF, "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        ["squeue", "-h", "--states=all", "-j", job_id, "-o", "%i|%T|%S|%e"], capture_output=True, text=True, env=env
    ).stdout
    out += subprocess.run(
        ["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "JobID,State,Start,End"],
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4 and parts[0] == job_id:
            # a job cancelled while pending has no start time (sacct) or starts when it ends (squeue)
            return {
                "state": parts[1],
                "started": parts[2] not in ("N/A", "None", "Unknown", "") and parts[2] != parts[3],
            }
    return {}


def _never_started(st: dict) -> None:
    """The real job: no log, no exit marker, no probe, and Slurm removed it without starting it."""
    main = st["job_ids"][0]
    run_dir = Path(st["run_dir"])
    deadline = time.time() + 60
    while time.time() < deadline:
        seen = _slurm_state(main)
        if not seen or seen["state"].startswith("CANCELLED"):
            break
        time.sleep(2)
    assert not seen or (seen["state"].startswith("CANCELLED") and not seen["started"]), seen
    assert not (run_dir / "logs" / f"sbatch-{main}.out").exists()
    assert not list((run_dir / "logs").glob(f"{main}-*.log")) and not (run_dir / "exit" / main).exists()
    assert not (run_dir / "probe").exists()


@pytest.mark.slow
def test_canary_under_torchrun_writes_its_report(tmp_path, energon_dataset):
    """The whole in-job canary as the job runs it: torchrun, two ranks (gloo), every check."""
    ck = tmp_path / "ck" / "iter_0000001"
    write(ck / "metadata.json", json.dumps({"sharded_backend": "torch_dist", "sharded_backend_version": 1}))
    write(ck / ".metadata", "x")
    write(tmp_path / "ck" / "latest_checkpointed_iteration.txt", "1")
    spec = _spec(
        tmp_path,
        args=[*FIT, f"dataset.path={energon_dataset}", f"checkpoint.pretrained_checkpoint={tmp_path}/ck"],
        dataset={"kind": "energon", "path": str(energon_dataset)},
        pretrained_checkpoint=str(tmp_path / "ck"),
        network={"sizes": [1024, 65536], "iters": 2, "expected_busbw_gbps": 1e-6, "min_fraction": 0.8},
    )
    rb = real_bridge()  # the image's interpreter and Megatron-Bridge (main), as in the job
    env = run_env(tmp_path, rb["pythonpath"])
    proc = subprocess.run(
        [
            rb["python"],
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(WORKLOADS / "cluster_checks.py"),
            str(spec),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "run" / "canary" / "r1.json").read_text())
    assert report["complete"] and report["verdict"] == "pass"
    assert [c["check"] for c in report["checks"]] == [
        "image",
        "trainer",
        "data",
        "checkpoint",
        "hf_cache",
        "fabric",
        "network",
    ]
    assert {c["check"]: c["status"] for c in report["checks"]} == {
        "image": "ok",
        "trainer": "ok",
        "data": "ok",
        "checkpoint": "ok",
        "hf_cache": "skip",
        "fabric": "skip",
        "network": "ok",
    }
    assert "bridge-launch canary: PASS" in proc.stdout
    # a failing check (the exit status, the verdict naming the first failing check in order): the runs on
    # the cluster below, test_a_canary_that_fails_leaves_the_job_never_started


@pytest.mark.usefixtures("cluster")
def test_a_canary_that_passes_lets_the_job_start(vl, inputs):
    sub = _submit(VL, "-c", "pyxis-canary", *vl)
    st = _wait(sub["run_id"], timeout=600)
    c = st["info"]["canary"]
    assert st["state"] == "COMPLETED" and c["verdict"] == "pass", (st, run_cli("logs", sub["run_id"]).out[-4000:])
    report = json.loads(Path(c["report"]).read_text())
    got = {x["check"]: x["status"] for x in report["checks"]}
    assert got == {
        "image": "ok",
        "trainer": "ok",
        "data": "ok",
        "checkpoint": "ok",
        "hf_cache": "ok",
        "fabric": "skip",
        "network": "ok",
    }, report
    details = {x["check"]: x["detail"] for x in report["checks"]}
    assert "started on 2 node(s) (node1, node2)" in details["image"]
    assert details["trainer"].startswith(f"recipe {VL_FUNCTION} built with "), details["trainer"]
    assert (
        "validated for 4 ranks (data-parallel size 4); image: megatron-bridge 0.7.0, megatron-core "
        in (details["trainer"])
        and "schema/ from megatron-bridge 0.7.0 (067f987df)" in details["trainer"]
    )
    assert "opened with the image's Energon 7.4.1; one train sample read (ChatMLSample" in details["data"]
    assert "(4 ranks on 2 node(s), gloo)" in details["network"]
    # the real job waited for it, then ran the recipe in the same image
    script = (Path(st["run_dir"]) / "launch" / f"{sub['run_id']}.sbatch").read_text()
    assert f"#SBATCH --dependency=afterok:{c['job_id']}\n" in script
    probes = [json.loads(p.read_text()) for p in (Path(st["run_dir"]) / "probe").glob("*.json")]
    assert len(probes) == 4 and all(p["mode"] == "finetune" and p["interface"] == "run_config" for p in probes)
    assert all(p["config"]["dataset.path"] == f"{inputs}/data" for p in probes)
    assert all(p["config"]["model.expert_model_parallel_size"] == 4 for p in probes)
    shown = run_cli("status", sub["run_id"]).out
    assert f"canary      job {c['job_id']}: passed; report {c['report']}" in shown
    logs = run_cli("logs", sub["run_id"]).out
    assert logs.index("bridge-launch canary: PASS") < logs.index("probe: rank")


# A training script of the user's own: it takes run_recipe.py's arguments (--recipe, --mode, the
# overrides) but builds nothing through Megatron-Bridge; the last rank prints Megatron's iteration line.
MINE = """
import os
import sys


def main():
    cfg = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a and not a.startswith("-"))
    iters = int(cfg.get("train.train_iters", "2"))
    if int(os.environ["RANK"]) == int(os.environ["WORLD_SIZE"]) - 1:
        for it in range(1, iters + 1):
            print(f" [2026-12-05 12:00:00] iteration {it:8d}/{iters:8d} | consumed samples: {it * 4:12d} | "
                  f"elapsed time per iteration (ms): 10.0 | learning rate: 1.000000E-05 | global batch size: 4 | "
                  f"lm loss: {2.0 / it:.6E} | loss scale: 1.0 | number of skipped iterations: 0 | "
                  "number of nan iterations: 0 |", flush=True)


if __name__ == "__main__":
    main()
"""


@pytest.mark.usefixtures("cluster")
def test_a_job_with_an_entry_of_the_users_own_passes_its_canary_with_the_trainer_check_skipped(vl, inputs, home):
    write(inputs / "train_mine.py", MINE)
    write(
        home / "recipes" / "canary-mine.toml",
        f"""
        name = "canary-mine"
        upstream = "{VL_FUNCTION}"
        entry = "{inputs}/train_mine.py"
        mode = "sft"
        container = "nvcr.io/nvidia/nemo:26.10"   # the profile's local image wins
        dataset_kind = "energon"
        hf_model = "Qwen/Qwen3.5-35B-A3B"
        required = ["dataset.path", "checkpoint.pretrained_checkpoint"]
        """,
    )
    sub = _submit("canary-mine", "-c", "pyxis-canary", *vl)
    st = _wait(sub["run_id"], timeout=600)
    c = st["info"]["canary"]
    assert st["state"] == "COMPLETED" and c["verdict"] == "pass", (st, run_cli("logs", sub["run_id"]).out[-4000:])
    report = json.loads(Path(c["report"]).read_text())
    trainer = next(x for x in report["checks"] if x["check"] == "trainer")
    assert trainer["status"] == "skip", trainer
    assert trainer["detail"].startswith(f"{inputs}/train_mine.py is not Megatron-Bridge's run_recipe.py"), trainer
    assert {x["check"]: x["status"] for x in report["checks"]}["data"] == "ok"  # the other checks still ran
    assert "iteration        2/       2 |" in run_cli("logs", sub["run_id"]).out


@pytest.mark.usefixtures("cluster", "inputs")
@pytest.mark.parametrize("case", ["image", "trainer"])  # data: test_through_the_login_host
def test_a_canary_that_fails_leaves_the_job_never_started(vl, case):
    args = list(vl)
    if case == "image":
        args += ["--container", "nvcr.io/nvidia/nemo:26.10"]
    else:
        args.append("model.mtp_num_layers=1")  # 067f987's validate() refuses MTP with Energon native packing
    sub = _submit(VL, "-c", "pyxis-canary", *args)
    st = _wait(sub["run_id"], timeout=600)
    assert st["state"] == "FAILED", (st, run_cli("logs", sub["run_id"]).out[-4000:])
    expected = {
        "image": "canary failed at image: pyxis: failed to import docker image",
        "trainer": "canary failed at trainer: ConfigContainer.validate() failed: ValueError: Energon native "
        "sequence packing does not support MTP.",
    }[case]
    assert st["reason"].startswith(expected), st["reason"]
    if case == "image":
        assert "Could not resolve host: nvcr.io" in st["reason"]
    c = st["info"]["canary"]
    assert c["verdict"] == "fail" and c["first_failure"]["check"] == case
    _never_started(st)
    shown = run_cli("status", sub["run_id"]).out
    assert f"canary      job {c['job_id']}: FAILED at {case}: " in shown


@pytest.mark.usefixtures("cluster")
def test_cancel_takes_the_canary_with_the_run(vl):
    sub = _submit(VL, "-c", "pyxis-canary", *vl)
    r = run_cli("cancel", sub["run_id"])
    assert r.code == 0, r.err
    st = run_cli("status", sub["run_id"], "-o", "json").json()[0]
    cid, main = st["info"]["canary"]["job_id"], st["job_ids"][0]
    deadline = time.time() + 60
    while time.time() < deadline:
        states = [_slurm_state(cid).get("state", ""), _slurm_state(main).get("state", "")]
        if all(s.startswith("CANCELLED") for s in states):
            break
        time.sleep(2)
    assert all(s.startswith("CANCELLED") for s in states), states
    assert st["state"] == "CANCELLED"


@pytest.mark.usefixtures("cluster")
def test_a_later_segments_own_dependency_replaces_the_canarys(tmp_path):
    """--until-done: the first segment's script holds the canary's dependency; a later segment is
    submitted from it with --dependency=afterany on the command line, which replaces the script's
    #SBATCH line, so the canary (long gone, or failed) never holds it."""
    env = {"SLURM_CONF": SLURM_CONF, "PATH": "/usr/bin:/bin"}

    def sbatch(*args, script):
        path = tmp_path / f"s{len(list(tmp_path.iterdir()))}.sh"
        path.write_text(script)
        out = subprocess.run(["sbatch", "--parsable", *args, str(path)], capture_output=True, text=True, env=env)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip().split(";")[0]

    head = f"#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --time=00:02:00\n#SBATCH --output={tmp_path}/%j.out\n"
    failed = sbatch(script=head + "exit 3\n")
    ok = sbatch(script=head + "exit 0\n")
    segment = head + f"#SBATCH --dependency=afterok:{failed}\n#SBATCH --kill-on-invalid-dep=yes\necho ran\n"
    later = sbatch(f"--dependency=afterany:{ok}", script=segment)
    first = sbatch(script=segment)
    deadline = time.time() + 180
    while time.time() < deadline:
        states = {j: _slurm_state(j).get("state", "") for j in (later, first)}
        if all(s in ("COMPLETED", "FAILED") or s.startswith("CANCELLED") for s in states.values()):
            break
        time.sleep(2)
    assert states[later] == "COMPLETED" and (tmp_path / f"{later}.out").read_text() == "ran\n", states
    assert states[first].startswith("CANCELLED") and not (tmp_path / f"{first}.out").exists(), states


@pytest.mark.usefixtures("cluster")
def test_a_retry_of_a_canary_gated_job_starts_whatever_slurm_knows_of_the_canary(tmp_path):
    """A retry (attempts.sh) resubmits the job's own script, which still holds the canary's
    --dependency=afterok and --kill-on-invalid-dep=yes, with no dependency on the command line: it
    starts when the canary's record is there (the canary passed: the job ran) and when Slurm never had
    that job id (a record purged after MinJobAge counts as done: Slurm 22.05, measured here)."""
    env = {"SLURM_CONF": SLURM_CONF, "PATH": "/usr/bin:/bin"}

    def sbatch(script):
        path = tmp_path / f"s{len(list(tmp_path.iterdir()))}.sh"
        path.write_text(script)
        out = subprocess.run(["sbatch", "--parsable", str(path)], capture_output=True, text=True, env=env)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip().split(";")[0]

    head = f"#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --time=00:02:00\n#SBATCH --output={tmp_path}/%j.out\n"
    canary = sbatch(head + "exit 0\n")
    never = str(int(canary) + 100000)  # above every id Slurm has handed out
    retries = [
        sbatch(head + f"#SBATCH --dependency=afterok:{dep}\n#SBATCH --kill-on-invalid-dep=yes\necho ran\n")
        for dep in (canary, never)
    ]
    deadline = time.time() + 120
    while time.time() < deadline:
        states = {j: _slurm_state(j).get("state", "") for j in retries}
        if all(s in ("COMPLETED", "FAILED") or s.startswith("CANCELLED") for s in states.values()):
            break
        time.sleep(2)
    assert _slurm_state(canary).get("state") == "COMPLETED"
    for job in retries:
        assert states[job] == "COMPLETED" and (tmp_path / f"{job}.out").read_text() == "ran\n", states


@pytest.mark.usefixtures("cluster")
def test_through_the_login_host(vl, home):
    """The canary's files staged over SSH, its report and logs read back over SSH."""
    write(
        home / "clusters" / "pyxis-canary-ssh.toml",
        f'''
        extends = "pyxis-canary"
        job_root = "{STATE}/jobs"
        [slurm]
        login_host = "local-slurm-login"
        ssh_config = "{STATE}/etc/ssh_config"
        ''',
    )
    sub = _submit(VL, "-c", "pyxis-canary-ssh", "dataset.path=/nonexistent/clevr2", *vl[1:])
    st = _wait(sub["run_id"], timeout=600)
    assert st["state"] == "FAILED", (st, run_cli("logs", sub["run_id"]).out[-4000:])
    assert st["reason"].startswith(
        "canary failed at data: dataset.path /nonexistent/clevr2 does not exist in the container (mounts: "
    ), st
    _never_started(st)
    logs = run_cli("logs", sub["run_id"]).out
    assert "bridge-launch canary: FAIL at data: dataset.path /nonexistent/clevr2" in logs
