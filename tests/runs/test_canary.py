"""The canary: its settings, the Slurm canary job and the gated real job (rendered), the first step of
Lepton and DGX Cloud jobs (the script run here with a stand-in torchrun), and the in-job checks
(workloads/cluster_checks.py) that need no Megatron-Bridge: checkpoints in Bridge's layout, a
HuggingFace cache, the verdicts, an entry of the user's own, an image without Megatron-Bridge. The
checks against the real Megatron-Bridge are in e2e/test_cluster_checks_e2e.py, the runs on the local
Slurm cluster with containers in e2e/test_canary_e2e.py."""

import json
import os
import subprocess
import sys

import pytest

from canary_jobs import _spec, subcheck
from conftest import WORKLOADS, run_cli, write
from launch_jobs import step_words

VL_ARGS = ["dataset.path=/lustre/clevr2", "checkpoint.pretrained_checkpoint=/lustre/ckpt"]


@pytest.fixture
def canary_mod(monkeypatch):
    monkeypatch.syspath_prepend(str(WORKLOADS))
    import cluster_checks

    return cluster_checks


def _dry(*args):
    r = run_cli("submit", *args, "--dry-run", "-o", "json")
    assert r.code == 0, r.err
    return r.json()


FAKE_TORCHRUN = """#!/bin/bash
# records what it was asked to run; the canary fails when CANARY_RC says so
echo "$*" >> "$CALLS"
case "$*" in
  *--rdzv-id=*-canary*)
    echo "bridge-launch canary: FAIL at data: dataset.path /x does not exist in the container; report r"
    exit "${CANARY_RC:-0}";;
  *) echo "training ran"; exit 0;;
esac
"""


@pytest.mark.usefixtures("home")
def test_slurm_canary_is_a_short_job_in_the_same_image_the_real_job_waits_for():
    d = _dry("qwen35-vl-sft", "-c", "gb200-32", "--canary", *VL_ARGS)
    main, c = d["artifact"]["text"], d["canary"]
    assert "#SBATCH --dependency=afterok:@CANARY_JOB_ID@\n#SBATCH --kill-on-invalid-dep=yes\n" in main
    text = c["artifact"]["text"]
    assert c["artifact"]["filename"] == "launch/@RUN_ID@-canary.sbatch"
    assert "#SBATCH --nodes=2\n" in text and "#SBATCH --time=00:30:00\n" in text and "--dependency" not in text
    for line in ("#SBATCH --partition=batch", "#SBATCH --exclusive", "#SBATCH --gpus-per-node=4"):
        assert line in main and line in text

    # the same container, mounts, environment and srun flags as the job: only the node count differs
    def shared(script):  # srun's options for both steps, and the training step's environment
        words = [w for w in step_words(script, "step") if not w.startswith("--nodes=")]
        return words, [w for w in step_words(script) if w.startswith("--container-env=")]

    assert shared(main) == shared(text) and "--container-mounts=/lustre/fsw:/lustre/fsw" in shared(text)[0]
    exports = [ln for ln in main.splitlines() if ln.startswith("export ") and "RUN_ID=" not in ln]
    assert exports and all(ln in text for ln in exports)
    assert step_words(text)[-2:] == [
        "/lustre/fsw/bridge-launch/runs/@RUN_ID@/workload/cluster_checks.py",
        "/lustre/fsw/bridge-launch/runs/@RUN_ID@/canary/@RUN_ID@.spec.json",
    ]
    spec = c["spec"]
    tokens = step_words(main)
    at = tokens.index(spec["entry"])
    # bridge-launch's own recipe function: the entry shim and the module it registers come first
    run_dir = "/lustre/fsw/bridge-launch/runs/@RUN_ID@"
    assert tokens[at - 2 : at] == [f"{run_dir}/workload/bridge_recipe_entry.py", spec["recipe_module"]]
    assert spec["recipe_module"] == f"{run_dir}/workload/bridge_recipes/qwen35_vl_gb200.py"
    assert tokens[at + 1 : at + 5] == ["--recipe", spec["recipe"], "--mode", spec["mode"]]
    # the job's exact overrides (job.sh's train_step adds the retry's resume point after them)
    assert spec["args"] == tokens[at + 5 :]
    assert spec["recipe"] == "qwen35_vl_35b_a3b_sft_long_context_32gpu_gb200_bf16_config" and spec["mode"] == "sft"
    assert spec["world_size"] == 32 and spec["dataset"] == {"kind": "energon", "path": "/lustre/clevr2"}
    assert spec["pretrained_checkpoint"] == "/lustre/ckpt"
    assert (
        spec["hf"]["model"] == "Qwen/Qwen3.5-35B-A3B"
        and spec["hf"]["processor_revision"] == spec["hf"]["model_revision"]
    )
    assert spec["schema_source"]["megatron_bridge_version"] == "0.7.0"
    assert spec["schema_source"]["megatron_core_version"] == "0.20.0"
    assert spec["network"]["expected_busbw_gbps"] == 700 and spec["fabric"]["expect_mnnvl"] is True
    assert d["provenance"]["job"]["canary"] == "cli"


@pytest.mark.usefixtures("home")
def test_dry_run_text_shows_the_canary_job_and_spec():
    r = run_cli("submit", "qwen35-vl-sft", "-c", "gb200-32", "--canary", *VL_ARGS, "--dry-run")
    assert r.code == 0, r.err
    assert "Canary     a job on 2 nodes of the same partition, time 00:30:00, submitted first" in r.out
    assert (
        "--- canary sbatch: launch/@RUN_ID@-canary.sbatch" in r.out
        and "--- canary spec: canary/@RUN_ID@.spec.json" in r.out
    )
    assert "busbw >= 80% of 700 GB/s (gb200)" in r.out


@pytest.mark.usefixtures("home")
def test_with_until_done_only_the_first_segment_waits_for_the_canary():
    d = _dry("smoke", "-c", "gb200-8", "--canary", "--until-done", "--step-time", "1", "checkpoint.save=/lustre/ck")
    text = d["artifact"]["text"]
    assert "#SBATCH --dependency=afterok:@CANARY_JOB_ID@" in text
    # a segment submits its successor (segment.sh, staged beside the script) with a dependency of its
    # own on the command line, which sbatch takes over the script's #SBATCH line
    (segment,) = (body for rel, body in d["artifact"]["files"].items() if rel.endswith(".segment.sh"))
    assert '--dependency=afterany:"$SLURM_JOB_ID" "$script"' in segment
    assert d["canary"]["spec"]["workload"] == "smoke" and "--until-done" not in d["canary"]["artifact"]["text"]


def test_profile_default_and_no_canary(home):
    write(home / "clusters" / "gb-canary.toml", 'extends = "gb200-32"\n[canary]\nenabled = true\nnodes = 1\n')
    d = _dry("qwen35-vl-sft", "-c", "gb-canary", *VL_ARGS)
    assert d["canary"]["settings"]["nodes"] == 1 and d["provenance"]["job"]["canary"] == "cluster:gb-canary"
    assert "#SBATCH --nodes=1\n" in d["canary"]["artifact"]["text"]
    d = _dry("qwen35-vl-sft", "-c", "gb-canary", "--no-canary", *VL_ARGS)
    assert "canary" not in d and "--dependency" not in d["artifact"]["text"]


@pytest.mark.usefixtures("home")
def test_no_canary_means_no_change_to_the_job():
    plain = _dry("qwen35-vl-sft", "-c", "gb200-32", "--no-canary", *VL_ARGS)
    assert "canary" not in plain and "dependency" not in plain["artifact"]["text"]
    upstream = _dry("qwen35-9b-pretrain", "-c", "gb200-8")  # its function is in its pinned revision
    assert "canary" not in upstream and "dependency" not in upstream["artifact"]["text"]


@pytest.mark.usefixtures("home")
def test_the_canary_is_on_by_default_for_a_recipe_function_bridge_launch_ships():
    # checked against Megatron-Bridge 067f987's source on CPU, never yet against the image's Megatron-Bridge,
    # which the canary's trainer check builds it with
    d = _dry("qwen35-vl-sft", "-c", "gb200-32", *VL_ARGS)
    assert "canary" in d and "#SBATCH --dependency=afterok:@CANARY_JOB_ID@" in d["artifact"]["text"]
    assert d["provenance"]["job"]["canary"] == (
        "on: qwen35_vl_35b_a3b_sft_long_context_32gpu_gb200_bf16_config is bridge-launch's own function "
        "(workload/bridge_recipes/qwen35_vl_gb200.py), checked against Megatron-Bridge 067f987 but not against "
        "the image's; --no-canary turns it off"
    )
    r = run_cli("submit", "qwen35-vl-sft", "-c", "gb200-32", *VL_ARGS, "--dry-run")
    assert "adds before the first step: its own queue wait, then the image pull and the checks" in r.out, r.out
    assert "at most 00:30:00 in all" in r.out
    assert "canary" not in _dry("smoke", "-c", "local-slurm")  # no Megatron-Bridge function to doubt


@pytest.mark.parametrize(
    "body,message",
    [
        ('[canary]\ntime = "soon"\n', "[canary]: time 'soon' is not a Slurm time"),
        ("[canary]\nbusbw_sizes = []\n", "[canary]: busbw_sizes must be a list of byte counts"),
        ("[canary]\nbusbw_min_fraction = 1.5\n", "[canary]: busbw_min_fraction must be in (0, 1]"),
        ("[canary]\nbusbw_gbs = 3\n", "unknown [canary] key 'busbw_gbs'"),
    ],
)
def test_bad_canary_settings_are_one_line(home, body, message):
    write(home / "clusters" / "bad.toml", 'extends = "gb200-32"\n' + body)
    r = run_cli("submit", "qwen35-vl-sft", "-c", "bad", *VL_ARGS, "--dry-run")
    assert r.code == 2 and message in r.err and len(r.err.strip().splitlines()) == 1, r.err
    assert "Traceback" not in r.err


def test_local_backend_has_no_canary(home):
    r = run_cli("submit", "smoke", "--canary", "--dry-run")
    assert r.code == 2 and "cluster 'local' runs torchrun on this machine" in r.err and "Traceback" not in r.err
    write(home / "clusters" / "loc.toml", 'extends = "local"\n[canary]\nenabled = true\n')
    r = run_cli("submit", "smoke", "-c", "loc", "--dry-run")
    assert r.code == 2 and "[canary] enabled: the local backend" in r.err


@pytest.mark.parametrize("cluster", ["lepton-gb200", "dgxc-gb200"])
@pytest.mark.parametrize("canary_rc", [0, 1])
def test_cloud_jobs_run_the_canary_first_and_stop_when_it_fails(home, tmp_path, cluster, canary_rc):
    from bridge_launch.backends import cloud, lepton
    from bridge_launch.resolve import resolver as resolve

    write(home / "clusters" / "c.toml", f'extends = "{cluster}"\njob_root = "{tmp_path}/runs"\n')
    job = resolve.resolve("smoke", resolve.Options(cluster="c", nodes=2, canary=True)).with_run_id("r1")
    script = cloud.job_script(job, lepton.RANK_PRELUDE)
    bindir = tmp_path / "bin"
    write(bindir / "torchrun", FAKE_TORCHRUN).chmod(0o755)
    calls = tmp_path / "calls"
    env = dict(
        os.environ,
        PATH=f"{bindir}:{os.environ['PATH']}",
        CALLS=str(calls),
        CANARY_RC=str(canary_rc),
        LEPTON_JOB_WORKER_INDEX="0",
        MASTER_PORT="29400",
    )
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60)
    ran = calls.read_text().splitlines()
    assert "--rdzv-id=r1-canary" in ran[0] and "workload/cluster_checks.py" in ran[0]
    assert "--rdzv-endpoint=127.0.0.1:29401" in ran[0]  # the canary's rendezvous one port above the job's
    assert "--nnodes=2" in ran[0]  # every node of the job runs it
    if canary_rc:
        assert proc.returncode == canary_rc and len(ran) == 1, (proc.stdout, proc.stderr)
        assert "the canary failed (exit 1): training not started" in proc.stderr
        assert (tmp_path / "runs" / "r1" / "exit" / "r1").read_text().strip() == "1"
    else:
        assert proc.returncode == 0 and len(ran) == 2 and "--rdzv-id=r1 " in ran[1], (proc.stdout, proc.stderr)


def test_checkpoint_check_follows_bridge(canary_mod, tmp_path):
    import torch

    P = __import__("trainer_protocol")
    check = canary_mod.check_checkpoint

    def spec(path):
        return {"pretrained_checkpoint": str(path)}

    assert check({})["status"] == "skip"
    r = check(spec(tmp_path / "nope"))
    assert r["status"] == "fail" and "does not exist in the container" in r["detail"]
    empty = tmp_path / "empty"
    empty.mkdir()
    r = check(spec(empty))
    assert r["status"] == "fail" and P.NO_CHECKPOINT in r["detail"]

    ck = tmp_path / "ck"
    it = ck / "iter_0000007"
    it.mkdir(parents=True)
    (ck / P.TRACKER).write_text("7")
    r = check(spec(ck))
    assert r["status"] == "fail" and "Unknown checkpoint format" in r["detail"]
    (it / P.MCORE_METADATA).write_text(json.dumps(P.MCORE_METADATA_CONTENT))
    r = check(spec(ck))
    assert r["status"] == "fail" and ".metadata is missing" in r["detail"]
    (it / P.DIST_METADATA).write_bytes(b"x")
    r = check(spec(ck))
    assert r["status"] == "ok" and "-> iter_0000007, format torch_dist" in r["detail"], r
    assert r["data"]["metadata"] == P.MCORE_METADATA_CONTENT
    assert check(spec(it))["detail"].endswith(
        "an iteration directory (loaded as it is), format torch_dist "
        '(metadata.json {"sharded_backend": "torch_dist", "sharded_backend_version": 1})'
    )
    (ck / P.TRACKER).write_text("9")
    r = check(spec(ck))
    assert r["status"] == "fail" and "iter_0000009, which does not exist" in r["detail"]
    for text, why in (("0", "error parsing metadata file"), ("abc", "Invalid metadata file")):
        (ck / P.TRACKER).write_text(text)
        r = check(spec(ck))
        assert r["status"] == "fail" and why in r["detail"], r
    (ck / P.TRACKER).write_text("release")
    (ck / P.RELEASE_DIR).mkdir()
    (ck / P.RELEASE_DIR / P.DIST_METADATA).write_bytes(b"x")
    r = check(spec(ck))
    assert r["status"] == "ok" and "-> release, format fsdp_dtensor" in r["detail"], r
    # Bridge's own tracker first (latest_train_state.pt), as it reads it (weights_only)
    torch.save({"step": torch.tensor(7)}, ck / P.TRACKER_STATE)
    assert "-> iter_0000007" in check(spec(ck))["detail"]
    hf = tmp_path / "hf"
    write(hf / "config.json", "{}")
    write(hf / "model-00001-of-00002.safetensors", "")
    r = check(spec(hf))
    assert r["status"] == "ok" and r["data"]["format"] == "hf"


def test_hf_cache_check_resolves_revisions_as_the_hub_does(canary_mod, tmp_path, monkeypatch):
    rev = "59d61f3ce65a6d9863b86d2e96597125219dc754"
    spec = {
        "hf": {
            "model": "Qwen/Qwen3.5-35B-A3B",
            "model_revision": rev,
            "processor": "Qwen/Qwen3.5-35B-A3B",
            "processor_revision": rev,
        }
    }
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    assert canary_mod.check_hf_cache(spec)["status"] == "skip"
    assert canary_mod.check_hf_cache({"hf": {}})["status"] == "skip"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    r = canary_mod.check_hf_cache(spec)
    assert r["status"] == "fail" and "no models--Qwen--Qwen3.5-35B-A3B in" in r["detail"]
    snap = tmp_path / "hf" / "hub" / "models--Qwen--Qwen3.5-35B-A3B" / "snapshots" / rev
    write(snap / "config.json", "{}")
    r = canary_mod.check_hf_cache(spec)
    assert r["status"] == "fail" and "lacks preprocessor_config.json or processor_config.json" in r["detail"]
    write(snap / "preprocessor_config.json", "{}")
    assert canary_mod.check_hf_cache(spec)["status"] == "ok"
    other = dict(spec, hf=dict(spec["hf"], model_revision="main"))
    r = canary_mod.check_hf_cache(other)
    assert r["status"] == "fail" and "no snapshot main" in r["detail"]
    write(snap.parent.parent / "refs" / "main", rev)  # refs/main names the commit
    assert canary_mod.check_hf_cache(other)["status"] == "ok"


def test_busbw_verdict(canary_mod):
    rows = [{"size_bytes": 1 << 20, "busbw_gbps": 10.0}, {"size_bytes": 1 << 30, "busbw_gbps": 600.0}]

    def judge(expected, fraction=0.8, world=8, nodes=2):
        spec = {"gpu_type": "gb200", "network": {"expected_busbw_gbps": expected, "min_fraction": fraction}}
        return canary_mod.judge_busbw(spec, rows, world, nodes, "nccl")

    ok = judge(700)
    assert ok["status"] == "ok" and ok["detail"].startswith(
        "all-reduce busbw 600.000 GB/s at 1 GiB >= 80% of the expected 700 GB/s"
    )
    bad = judge(800)
    assert (
        bad["status"] == "fail"
        and "is below 80% of the expected 800 GB/s for gb200 (8 ranks on 2 node(s), nccl)" in bad["detail"]
    )
    assert judge(0)["status"] == "warn" and "not judged" in judge(0)["detail"]
    assert "one node only" in judge(700, nodes=1)["detail"]
    assert canary_mod.judge_busbw({}, [], 1, 1, "gloo")["status"] == "skip"


def test_fabric_verdict(canary_mod):
    assert canary_mod.check_fabric({}, {}, cuda=False)["status"] == "skip"
    good = {"state": "Completed", "status": "Success", "clique_id": "7", "cluster_uuid": "u"}
    nodes = {
        "n1": {"imex": {"visible": True, "channels": ["channel0"]}, "fabric": good},
        "n2": {"imex": {"visible": False, "channels": []}, "fabric": good},
    }
    spec = {"fabric": {"expect_mnnvl": True}}
    r = canary_mod.check_fabric(spec, nodes, cuda=True)
    assert r["status"] == "fail" and "IMEX channels visible on 1/2 node(s) (none on n2)" in r["detail"]
    nodes["n2"]["imex"] = {"visible": True, "channels": ["channel0"]}
    r = canary_mod.check_fabric(spec, nodes, cuda=True)
    assert r["status"] == "ok" and "multi-node NVLink likely" in r["detail"]
    nodes["n2"]["fabric"] = dict(good, clique_id="8")
    assert canary_mod.check_fabric(spec, nodes, cuda=True)["status"] == "fail"
    assert canary_mod.check_fabric({"fabric": {"expect_mnnvl": False}}, nodes, cuda=True)["status"] == "ok"


def test_trainer_check_skips_the_smoke_workload(canary_mod):
    assert canary_mod.check_trainer({"workload": "smoke"}, "x")["status"] == "skip"


def test_data_check_refuses_what_it_can_tell_without_opening(canary_mod, tmp_path):
    spec = json.loads(_spec(tmp_path).read_text())
    r = canary_mod.check_data(spec, "unused")
    assert r["status"] == "fail" and r["detail"] == f"dataset.path {tmp_path / 'nope'} does not exist in the container"
    r = canary_mod.check_data(dict(spec, dataset={"kind": "energon", "path": str(tmp_path)}), "unused")
    assert r["status"] == "fail" and "is not a prepared Energon dataset (no .nv-meta/)" in r["detail"]
    assert canary_mod.check_data(dict(spec, dataset={"kind": None, "path": str(tmp_path)}), "x")["status"] == "ok"
    assert canary_mod.check_data(dict(spec, dataset={}), "x")["status"] == "skip"


def test_data_check_without_the_sample_type_in_the_image(tmp_path, energon_dataset):
    """An image whose Megatron-Bridge lacks the dataset's sample type: Energon cannot open it."""
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}")  # no megatron.bridge on the path
    spec = _spec(tmp_path, dataset={"kind": "energon", "path": str(energon_dataset)})
    proc = subprocess.run(
        [sys.executable, str(WORKLOADS / "cluster_checks.py"), "--check", "data", str(spec)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    r = json.loads(proc.stdout.strip().splitlines()[-1].split(" ", 1)[1])
    assert r["status"] == "fail" and "megatron.bridge" in r["detail"] and "Energon 7.4.1" in r["detail"], r


def test_the_trainer_and_data_checks_share_one_process(canary_mod, tmp_path, energon_dataset, monkeypatch):
    """Both checks that need the image's libraries run in one process (one import of them), each
    result as its own; a process that dies in the trainer check fails that check alone, and the data
    check then runs in a process of its own."""
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # no megatron.bridge on the path
    data = {"kind": "energon", "path": str(energon_dataset)}
    mine = write(tmp_path / "train_mine.py", "def main():\n    pass\n")
    path = _spec(tmp_path, entry=str(mine), dataset=data)
    alone: list = []
    with monkeypatch.context() as m:
        m.setattr(canary_mod, "_subprocess_check", lambda name, *_a: alone.append(name))
        trainer, got = canary_mod._subprocess_checks(["trainer", "data"], json.loads(path.read_text()), str(path))
    assert trainer["status"] == "skip" and "is not Megatron-Bridge's run_recipe.py" in trainer["detail"], trainer
    assert got["status"] == "fail" and "megatron.bridge" in got["detail"] and "Energon 7.4.1" in got["detail"], got
    assert alone == []  # neither ran in a process of its own
    dies = write(tmp_path / "dies" / "run_recipe.py", "import os\nos._exit(3)\n")
    path = _spec(tmp_path, entry=str(dies), container="nvcr.io/x", recipe_module="", dataset=data)
    trainer, got = canary_mod._subprocess_checks(["trainer", "data"], json.loads(path.read_text()), str(path))
    assert (
        trainer["status"] == "fail"
        and "the trainer check's process ended (exit 3) without a result" in (trainer["detail"])
    ), trainer
    assert got["status"] == "fail" and "Energon 7.4.1" in got["detail"], got  # its own process still read it


def test_lepton_run_with_a_canary_stages_it_and_status_names_the_failing_check(home, tmp_path, monkeypatch):
    """Through the Lepton contract server: the canary's files reach the run dir, the job's script
    runs it first, and a job its canary stopped is FAILED with the check in `status`."""
    from bridge_launch.resolve import resolver as resolve
    from bridge_launch.runs import lifecycle as launch
    from bridge_launch.runs.registry import Registry
    from contract_server import LEPTON_TOKEN, Server

    with Server() as server:
        monkeypatch.setenv("HOME", str(tmp_path / "userhome"))
        monkeypatch.setenv("LEPTON_WORKSPACE_ID", "ws-test")
        monkeypatch.setenv("LEPTON_WORKSPACE_TOKEN", LEPTON_TOKEN)
        monkeypatch.setenv("LEPTON_WORKSPACE_URL", server.url + "/lepton")
        write(
            home / "clusters" / "lep.toml",
            'name = "lep"\nextends = "lepton-gb200"\n[lepton]\nrequest_timeout = 1\n'
            "retries = 3\nretry_wait = 0\npoll_interval = 0\n[canary]\nenabled = true\n",
        )
        server.contract.script = ["Queueing", "Running", "Failed"]
        server.contract.replica_log = (
            "bridge-launch canary: data: FAIL: dataset.path /mnt/x does not exist in the container\n"
            "bridge-launch canary: FAIL at data: dataset.path /mnt/x does not exist in the "
            "container; report /mnt/shared/r.json\n"
        )
        job = resolve.resolve("smoke", resolve.Options(cluster="lep", nodes=2))
        run = launch.submit(job)
        staged = server.contract.staged[run.run_dir]
        spec = json.loads(staged[f"canary/{run.run_id}.spec.json"])
        assert spec["report"] == f"{run.run_dir}/canary/{run.run_id}.json" and "workload/cluster_checks.py" in staged
        script = server.contract.calls("POST", r"^/lepton/jobs$")[-1][4]["spec"]["container"]["command"][2]
        assert script.index(f"--rdzv-id={run.run_id}-canary") < script.index(f"--rdzv-id={run.run_id} ")
        reg = Registry()
        states = [launch.refresh(reg, [reg.get(run.run_id)])[0] for _ in range(3)]
        final = states[-1]
        assert [s.state for s in states[:2]] == ["PENDING", "RUNNING"] and final.state == "FAILED"
        assert final.reason == "canary failed at data: dataset.path /mnt/x does not exist in the container"
        assert final.info["canary"]["verdict"] == "fail"
        shown = run_cli("status", run.run_id).out
        assert "canary      first step: FAILED at data: dataset.path /mnt/x does not exist in the container" in shown


def test_trainer_check_skips_an_entry_of_the_users_own_without_running_it(tmp_path):
    ran = tmp_path / "ran"
    entry = write(tmp_path / "train_mine.py", f"open({str(ran)!r}, 'w').write('trained')\ndef main():\n    pass\n")
    r = subcheck("trainer", _spec(tmp_path, entry=str(entry)), real=False)
    assert r["status"] == "skip" and "is not Megatron-Bridge's run_recipe.py" in r["detail"], r["detail"]
    assert not ran.exists()  # read, not run: its import would have trained
    # a run_recipe.py of a shape the check does not know still fails
    odd = write(tmp_path / "odd" / "run_recipe.py", "def main():\n    pass\n")
    r = subcheck("trainer", _spec(tmp_path, entry=str(odd), container="nvcr.io/x", recipe_module=""), real=False)
    assert r["status"] == "fail" and "has no main() calling run_config() or TRAIN_FUNCTIONS" in r["detail"], r


def test_trainer_check_skips_a_bare_process_profile_without_megatron_bridge(tmp_path):
    r = subcheck("trainer", _spec(tmp_path, container=""), real=False)  # no megatron.bridge on the path
    assert r["status"] == "skip" and "megatron-bridge is not importable by the job's Python" in r["detail"], r
    in_image = _spec(tmp_path, container="nvcr.io/nvidia/nemo:26.10")
    assert subcheck("trainer", in_image, real=False)["status"] == "fail"  # an image without it is a finding
