"""Jobs through the real container path: pyxis and enroot on the local two-node Slurm cluster
(`scripts/local-slurm start --containers`), the local torch image, the local-slurm-pyxis profile."""

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import realbridge  # scripts/bridge: on the path tests/conftest.py sets
from test_slurm_e2e import _wait_state

from bridge_launch.core import upstream
from conftest import FAST, REPO, files_holding, run_cli, write
from launch_checks import check_torchrun_artifacts

pytestmark = [pytest.mark.slow, pytest.mark.slurm]


def _sources_missing() -> str | None:
    vendor = REPO.parent / "shared" / "vendor"
    for var, name in (("PYXIS_SRC", "pyxis-0.24.0.tar.gz"), ("ENROOT_SRC", "enroot-8ea147d.tar.gz")):
        path = Path(os.environ.get(var) or vendor / name)
        if not path.exists():
            return f"container tests need the pyxis and enroot sources: {path} is missing (set {var})"
    return None


if os.geteuid() != 0:
    pytest.skip("the local Slurm cluster needs root", allow_module_level=True)


if _sources_missing():
    pytest.skip(_sources_missing(), allow_module_level=True)


SCRIPT = REPO / "scripts" / "local-slurm"


STATE = Path("/var/lib/bridge-launch-slurm")


IMAGE = STATE / "containers" / "images" / "local-torch.sqsh"


NANO_PIN = "98724493411ca166e09ea8bed8959c1129252703"  # the seed's Nemotron 3 Nano code (PR #4871's head)


@pytest.fixture(scope="module")
def cluster():
    """The container-capable cluster: started with --containers only when it is not already up
    with pyxis wired and the image built (a restart would disturb others' jobs)."""
    status = subprocess.run([str(SCRIPT), "status"], capture_output=True, text=True, timeout=120)
    if status.returncode or "pyxis wired" not in status.stdout or "(missing)" in status.stdout:
        started = subprocess.run([str(SCRIPT), "start", "--containers"], capture_output=True, text=True, timeout=1800)
        assert started.returncode == 0, started.stdout + started.stderr
    else:  # the image this checkout builds (cached: about a second when it is current; no daemon restarts)
        built = subprocess.run([str(SCRIPT), "build-containers"], capture_output=True, text=True, timeout=1800)
        assert built.returncode == 0, built.stdout + built.stderr
    return str(STATE / "etc" / "slurm.conf")


def _wait(run_id, states=("COMPLETED", "FAILED", "CANCELLED"), timeout=600):
    return _wait_state(run_id, set(states), timeout=timeout)


def _submit(*args, env=None):
    r = run_cli("submit", *args, "-o", "json", env=env, timeout=300)
    assert r.code == 0, r.err
    return r.json()


@pytest.fixture(scope="module")
def real_mb():
    """What makes the local image hold the real Megatron-Bridge 067f987 (main) at /opt/Megatron-Bridge,
    with the cached Python 3.12 venv first on PATH: (mounts, environment) for a profile. The image has
    none baked in; the training loop is the only stand-in (scripts/bridge/probe_trainer.py)."""
    env = realbridge.environment()
    return realbridge.container(env, upstream.revision(upstream.BRIDGE_MAIN))


def mb_profile(home, name: str, real_mb, *, mounts=(), extra: str = "", env: dict | None = None) -> str:
    """A profile over local-slurm-pyxis whose jobs see the real Megatron-Bridge (real_mb)."""
    all_mounts, variables = real_mb
    body = f'extends = "local-slurm-pyxis"\ncontainer_mounts = {json.dumps([*all_mounts, *mounts])}\n{extra}\n[env]\n'
    body += "".join(f"{k} = {json.dumps(v)}\n" for k, v in {**variables, **(env or {})}.items())
    write(home / "clusters" / f"{name}.toml", body)
    return name


def _probe_recipe(home):
    """A Megatron-Bridge library recipe at main, as a user names one; the real run_recipe.py builds and
    validates it, and the training loop's stand-in reports what the process sees."""
    write(
        home / "recipes" / "probe.toml",
        """
        name = "probe"
        description = "reports what the process inside the container sees"
        upstream = "nemotronh_4b_pretrain_1gpu_h100_bf16_config"
        mode = "pretrain"
        container = "nvcr.io/nvidia/nemo:26.10"
        [config]
        train.train_iters = 1
        [env]
        RECIPE_VAR = "from-recipe"
        """,
    )


def _probes(run_dir):
    files = sorted((Path(run_dir) / "probe").glob("*.json"))
    return [json.loads(p.read_text()) for p in files]


def _bridge_checkout(root: Path) -> Path:
    """A Megatron-Bridge checkout of the seed's code (987244934, with the Megatron-LM it pins as
    3rdparty/Megatron-LM), committed, then changed: its run_recipe.py says so on rank 0."""
    tree = realbridge.image_tree(realbridge.environment(), upstream.revision(NANO_PIN))
    mb = root / "Megatron-Bridge"
    shutil.copytree(tree, mb, ignore=shutil.ignore_patterns("__pycache__", ".complete"))
    git = ["git", "-C", str(mb), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "local work"], check=True)
    entry = mb / "scripts" / "training" / "run_recipe.py"
    text = entry.read_text()
    entry.write_text(
        text.replace("def main() -> None:\n", "def main() -> None:\n    print('checkout entry ran', flush=True)\n", 1)
    )
    assert entry.read_text() != text
    return mb


def _containers(node: str) -> set[str]:
    """The containers enroot holds for root on a node (enroot.conf: a data path per host)."""
    data = STATE / "enroot" / "data" / node / "user-0"
    return {p.name for p in data.iterdir()} if data.is_dir() else set()


@pytest.mark.usefixtures("home")
def test_smoke_on_two_nodes_in_containers_with_a_slow_image_and_the_health_step(cluster, home):
    """Production pyxis (use_squashfuse=0) and an image whose unpacking takes longer than the health
    step's bound (the enroot wrapper sleeps 65 s in `enroot create`, a registry import's or a 30-50 GB
    image's stand-in): the image step materialises it once per node, the health step's minute starts
    with its checks, the job trains and completes, and no container outlives it; a stale container
    of a job that no longer runs is swept first, another one left alone."""
    write(
        home / "clusters" / "pyxis-slow.toml",
        'extends = "local-slurm-pyxis"\n[slurm]\nhealth_check = true\nhealth_minutes = 1\nimage_space_gb = 1\n'
        '[env]\nBRIDGE_LAUNCH_TEST_CREATE_DELAY = "65"\n',
    )
    assert "use_squashfuse=0" in (STATE / "etc" / "plugstack.conf").read_text()  # pyxis' default (config.c:41)
    stale, other = "pyxis_bridge-launch.smoke-0101-dead.7", "pyxis_someone-elses"
    for node in ("node1", "node2"):
        for name in (stale, other):
            (STATE / "enroot" / "data" / node / "user-0" / name).mkdir(parents=True, exist_ok=True)
    creates = STATE / "enroot" / "creates.log"
    try:
        sub = _submit("smoke", "-c", "pyxis-slow", *FAST, "train.train_iters=6")
        st = _wait(sub["run_id"])
    finally:
        for node in ("node1", "node2"):
            shutil.rmtree(STATE / "enroot" / "data" / node / "user-0" / other, ignore_errors=True)
    assert st["state"] == "COMPLETED", (st, run_cli("logs", sub["run_id"]).out[-3000:])
    job = sub["job_ids"][0]
    name = f"bridge-launch.{sub['run_id']}.{job}"
    made = [line.split()[1] for line in creates.read_text().splitlines() if line.endswith(f" pyxis_{name}")]
    assert sorted(made) == ["node1", "node2"], made  # once per node, for the image step and both steps after it
    out = (Path(sub["run_dir"]) / "logs" / f"sbatch-{job}.out").read_text()
    took = re.search(rf"the image is in container {re.escape(name)} on every node, in (\d+) s \(image step\)", out)
    assert took and int(took.group(1)) >= 65, out[-3000:]
    assert "bridge-launch health: node1 ok" in out and "bridge-launch health: node2 ok" in out, out[-3000:]
    assert f"removed 1 stale container(s) of jobs that no longer run: {stale}" in out, out[-3000:]
    for node in ("node1", "node2"):  # none of the job's containers is left; the stale one swept
        assert not [c for c in _containers(node) if c.startswith(f"pyxis_bridge-launch.{sub['run_id']}.")]
        assert stale not in _containers(node)
    s = json.loads((Path(sub["run_dir"]) / "summary.json").read_text())
    assert s["world_size"] == 4 and sorted(set(s["hosts"])) == ["node1", "node2"] and s["steps_completed"] == 6
    assert s["python"].startswith("/venv/"), s["python"]  # the image's interpreter, not this machine's
    text = (Path(sub["run_dir"]) / "launch" / f"{sub['run_id']}.sbatch").read_text()
    assert text.count("--container-image=") == 1 and f"--container-image={IMAGE}" in text
    assert text.count('--container-name="$container:no_exec"') == 2 and "--container-writable" in text
    # torchrun's per-rank logs and the flight-recorder dir reach the run dir from inside the container
    check_torchrun_artifacts(sub["run_dir"], job, cluster)
    # the preflight says whether the IMEX channels are visible in the container (no GPUs here: not)
    assert s["imex"] == {"node1": {"visible": False, "channels": []}, "node2": {"visible": False, "channels": []}}
    logs = run_cli("logs", sub["run_id"]).out
    assert re.search(
        r"\[smoke\] imex channels: /dev/nvidia-caps-imex-channels not visible in the container on "
        r"node1, node2 \(enroot mounts it only from 4\.0",
        logs,
    ), logs[-3000:]


@pytest.mark.usefixtures("cluster", "home")
def test_until_done_across_a_time_limit_in_containers():
    """The USR1 before the time limit becomes a SIGTERM to the training processes inside the
    container (the per-node launcher runs there too); they save and exit, and the next segment's
    container loads that checkpoint."""
    sub = _submit(
        "smoke",
        "-c",
        "local-slurm-pyxis",
        "--until-done",
        "--time",
        "00:03:00",  # each segment unpacks the image first (use_squashfuse=0): 15-50 s here, under load
        "--signal-lead",
        "90",
        *FAST,
        "train.train_iters=50",  # a segment trains 20-45 steps of 1.5 s: 3 min less the lead and the image step
        "smoke.step_sleep=1.5",
        "~checkpoint.save_interval",
        "validation.eval_iters=1",
    )
    st = _wait(sub["run_id"], timeout=900)
    assert st["state"] == "COMPLETED", (st, run_cli("logs", sub["run_id"]).out[-3000:])
    logs = Path(sub["run_dir"]) / "logs"
    ran = [s for s in st["info"]["segments"] if s.get("outcome") in ("continued", "done")]
    assert len(ran) >= 2 and ran[0]["outcome"] == "continued", st["info"]["segments"]
    first = "".join(p.read_text(errors="replace") for p in logs.glob(f"{ran[0]['job_id']}-*.log"))
    second = "".join(p.read_text(errors="replace") for p in logs.glob(f"{ran[1]['job_id']}-*.log"))
    assert re.search(r"SIGTERM to the training processes \d+ \d+ \(torchrun \d+ is left alone\)", first), first[-3000:]
    assert "[exiting program after receiving SIGTERM.]" in first and "SignalException" not in first
    saved = ran[0]["checkpoint"]
    assert f"successfully saved checkpoint from iteration {saved:7d}" in first
    assert re.search(rf"successfully loaded checkpoint from \S+ .*at iteration {saved}\b", second), second[-3000:]
    assert re.search(rf"iteration +{saved + 1}/ +50 \|", second)
    s = json.loads((Path(sub["run_dir"]) / "summary.json").read_text())
    assert s["python"].startswith("/venv/") and s["steps_completed"] == 50  # the image's interpreter, to the end


@pytest.mark.usefixtures("cluster")
def test_recipe_profile_and_secret_values_reach_the_container_and_a_mount_works(home, tmp_path, real_mb):
    """Both kinds of secret reach the container through --container-env: MY_TOKEN read from its file
    on the cluster (in no file Slurm, enroot or pyxis write, nor the run or state dir), LEGACY_TOKEN
    from the submitting environment (only in the environment slurmctld keeps, as the warning says)."""
    t0 = time.time() - 1
    _probe_recipe(home)
    data = tmp_path / "data"
    write(data / "in.txt", "hello from the host\n")
    mb_profile(home, "pyxis-data", real_mb, mounts=[f"{data}:/data"], env={"PROFILE_VAR": "from-profile"})
    token = "s3cr3t-" + os.urandom(8).hex()
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o700)
    src = keys / "token"
    src.write_text(token + "\n")
    src.chmod(0o600)
    legacy = "legacy-" + os.urandom(8).hex()
    sub = _submit(
        "probe",
        "-c",
        "pyxis-data",
        "--secret",
        f"MY_TOKEN=file:{src}",
        "--secret",
        "LEGACY_TOKEN",
        "--env",
        "BRIDGE_LAUNCH_PROBE_VARS=RECIPE_VAR,PROFILE_VAR,TOKENIZERS_PARALLELISM,BRIDGE_LAUNCH_IMAGE",
        "--env",
        "PROBE_READ=/data/in.txt",
        "--env",
        "PROBE_WRITE=/data/out",
        env={"LEGACY_TOKEN": legacy},
    )
    st = _wait(sub["run_id"])
    assert st["state"] == "COMPLETED", (st, run_cli("logs", sub["run_id"]).out[-3000:])
    probes = _probes(sub["run_dir"])
    assert len(probes) == 4 and {p["host"] for p in probes} == {"node1", "node2"}
    for p in probes:
        assert p["env"]["RECIPE_VAR"] == "from-recipe"
        assert p["env"]["PROFILE_VAR"] == "from-profile"
        # the image sets "true" in its /etc/environment; --container-env lets the profile's value win
        assert p["env"]["TOKENIZERS_PARALLELISM"] == "false"
        assert p["env"]["BRIDGE_LAUNCH_IMAGE"] == "local-torch"  # set by the image alone: we are inside it
        for name, value in (("MY_TOKEN", token), ("LEGACY_TOKEN", legacy)):
            assert p["secrets"][name] == {
                "present": True,
                "length": len(value),
                "sha256": hashlib.sha256(value.encode()).hexdigest(),
            }
        assert p["read"] == "hello from the host\n"
        assert p["cwd"] == sub["run_dir"]  # --container-workdir
        # the real Megatron-Bridge 067f987 the image holds, through main's run_recipe.py main(argv) and
        # run_config(), under the 3.12 venv; the recipe built and validated for the job's 4 ranks
        assert p["bridge_file"] == "/opt/Megatron-Bridge/src/megatron/bridge/__init__.py"
        assert p["core_file"] == "/opt/Megatron-Bridge/3rdparty/Megatron-LM/megatron/core/__init__.py"
        assert p["interface"] == "run_config" and p["mode"] == "pretrain"
        assert p["python"] == real_mb[1]["PATH"].split(":")[0] + "/python"
        assert p["config"]["train.train_iters"] == 1 and p["config"]["model.num_layers"] == 52
    assert sorted(f.name for f in data.glob("out.*")) == ["out.0", "out.1", "out.2", "out.3"]
    # the first node said which Megatron-Bridge the image runs against the recipe's pin (main here):
    # the image's tree is no git checkout, so its commit is unknown and said so
    said = [ln for ln in run_cli("logs", sub["run_id"]).out.splitlines() if "bridge-launch: image revision: " in ln]
    assert (
        len(said) == 1 and "Megatron-Bridge 0.7.0 (no git checkout: its commit is unknown); the recipe pins " in said[0]
    ), said
    roots = [STATE, os.environ["BRIDGE_LAUNCH_HOME"], sub["run_dir"], "/tmp", str(data)]
    assert files_holding(token, roots, t0, skip=[src]) == []
    jid = sub["job_ids"][0]
    kept = STATE / "spool" / "slurmctld" / f"hash.{int(jid) % 10}" / f"job.{jid}" / "environment"
    assert files_holding(legacy, roots, t0) == [str(kept)]


@pytest.mark.usefixtures("cluster")
def test_bridge_src_is_mounted_over_the_images_copy_through_the_login_host(home, tmp_path, real_mb):
    """The seed's Nemotron 3 Nano code from a checkout: 987244934's run_recipe.py (main() reading
    sys.argv, TRAIN_FUNCTIONS, no --mode) runs over the image's 067f987, through the login host."""
    write(
        home / "recipes" / "nano-probe.toml",
        f"""
        name = "nano-probe"
        upstream = "nemotron_3_nano_gb200_pretrain_config"
        bridge_commit = "{NANO_PIN}"
        mode = "pretrain"
        container = "nvcr.io/nvidia/nemo:26.10"
        [config]
        train.train_iters = 1
        model.expert_model_parallel_size = 4
        """,
    )
    mb_profile(
        home,
        "pyxis-ssh",
        real_mb,
        extra=f'job_root = "{STATE}/jobs"\n[slurm]\nlogin_host = "local-slurm-login"\n'
        f'ssh_config = "{STATE}/etc/ssh_config"',
    )
    mb = _bridge_checkout(tmp_path)
    head = subprocess.run(["git", "-C", str(mb), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    sub = _submit("nano-probe", "-c", "pyxis-ssh", "--bridge-src", str(mb))
    st = _wait(sub["run_id"])
    logs = run_cli("logs", sub["run_id"]).out
    assert st["state"] == "COMPLETED", (st, logs[-3000:])
    assert st["info"]["bridge_commit"] == head and st["info"]["bridge_dirty"] is True
    probes = _probes(sub["run_dir"])
    assert len(probes) == 4
    for p in probes:
        assert p["bridge_file"] == "/opt/Megatron-Bridge/src/megatron/bridge/__init__.py"
        assert p["interface"] == "train_functions" and p["mode"] == "pretrain"
        assert "--mode" not in p["argv"] and p["argv"][:2] == ["--recipe", "nemotron_3_nano_gb200_pretrain_config"]
        assert p["config"]["model.expert_model_parallel_size"] == 4 and p["config"]["train.train_iters"] == 1
    assert "checkout entry ran" in logs  # the checkout's entry script ran, uncommitted change included
    said = [ln for ln in logs.splitlines() if "bridge-launch: image revision: " in ln]
    assert len(said) == 1 and head[:9] in said[0] and NANO_PIN[:9] in said[0], said
    shown = run_cli("status", sub["run_id"]).out
    assert f"@ {head} + uncommitted changes" in shown


@pytest.mark.usefixtures("cluster")
def test_an_image_that_cannot_be_pulled_or_unpacked_fails_fast_with_the_reason(home):
    """The image step fails before the health step and torchrun: with enroot's own line when the
    registry cannot be reached, and with the space check's when no node has room to unpack the
    image (every node: the job's fault, not retried)."""
    write(home / "clusters" / "pyxis-full.toml", 'extends = "local-slurm-pyxis"\n[slurm]\nimage_space_gb = 100000\n')
    t0 = time.time()
    sub = _submit(
        "smoke", "-c", "local-slurm-pyxis", "--container", "nvcr.io/nvidia/nemo:26.10", "--max-restarts", "0", *FAST
    )
    full = _submit("smoke", "-c", "pyxis-full", *FAST)
    st = _wait(sub["run_id"], timeout=120)
    assert st["state"] == "FAILED" and time.time() - t0 < 90, st
    assert "Could not resolve host: nvcr.io" in st["reason"], st
    assert "nvcr.io#nvidia/nemo:26.10" in (Path(sub["run_dir"]) / "launch" / f"{sub['run_id']}.sbatch").read_text()
    st = _wait(full["run_id"], timeout=120)
    assert st["state"] == "FAILED" and len(st["job_ids"]) == 1, st
    (rec,) = [line.split("\t") for line in (Path(full["run_dir"]) / "attempts" / full["run_id"] / "outcomes").open()]
    assert re.match(
        r"image step: node[12]: FAIL space: enroot's data path \S+/enroot/data/node[12]/user-0 has ", rec[7]
    ), rec
    assert "the image needs about 100000 GB" in rec[7] and "not retried: no node of its own is at fault" in rec[7], rec
    assert not list((Path(full["run_dir"]) / "logs").glob("*-node*.log"))  # torchrun never started


@pytest.mark.usefixtures("cluster", "home")
def test_image_import_once_then_submit_starts_from_the_cache():
    cache = STATE / "enroot-cache"

    def imp(_):
        return run_cli("image", "import", str(IMAGE), "-c", "local-slurm-pyxis", "-o", "json", timeout=600)

    with ThreadPoolExecutor(2) as pool:  # two imports of the same image at once
        results = list(pool.map(imp, range(2)))
    assert all(r.code == 0 for r in results), [r.err for r in results]
    entries = [r.json() for r in results]
    digest = "sha256:" + subprocess.run(["sha256sum", str(IMAGE)], capture_output=True, text=True).stdout.split()[0]
    assert {e["digest"] for e in entries} == {digest}
    final = cache / f"sha256-{digest[7:]}.sqsh"
    assert {e["squashfs"] for e in entries} == {str(final)} and final.stat().st_size == IMAGE.stat().st_size
    assert not [p for p in cache.iterdir() if p.name.startswith(".sha256-")]  # no partial left behind
    d = run_cli("submit", "smoke", "-c", "local-slurm-pyxis", "--dry-run", "-o", "json").json()
    assert d["container"] == str(final) and "image cache" in d["provenance"]["job"]["container"]
    # on a site that runs pyxis with use_squashfuse=1 (slurmstepd reads plugstack.conf at each step):
    # the job's named container is unpacked all the same (pyxis_slurmstepd.c:122-127), once a node
    plugstack = STATE / "etc" / "plugstack.conf"
    production = plugstack.read_text()
    assert "use_squashfuse=0" in production
    plugstack.write_text(production.replace("use_squashfuse=0", "use_squashfuse=1"))
    try:
        sub = _submit("smoke", "-c", "local-slurm-pyxis", *FAST, "train.train_iters=2")
        st = _wait(sub["run_id"])
    finally:
        plugstack.write_text(production)
    assert st["state"] == "COMPLETED" and st["info"]["image_digest"] == digest, st
    name = f"pyxis_bridge-launch.{sub['run_id']}.{sub['job_ids'][0]}"
    made = [
        line.split()[1] for line in (STATE / "enroot" / "creates.log").read_text().splitlines() if line.endswith(name)
    ]
    assert sorted(made) == ["node1", "node2"], made
    bad = run_cli("image", "import", "nvcr.io/nvidia/nemo:26.10", "-c", "local-slurm-pyxis", timeout=300)
    assert bad.code == 1 and "Could not resolve host: nvcr.io" in bad.err.strip().splitlines()[-1], bad.err


def test_pyxis_stays_wired_on_a_plain_start(cluster):
    started = subprocess.run([str(SCRIPT), "start"], capture_output=True, text=True, timeout=300)
    assert started.returncode == 0 and "containers on (pyxis" in started.stdout, started.stdout + started.stderr
    help_text = subprocess.run(
        [str(SCRIPT), "exec", "srun", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, SLURM_CONF=cluster),
    ).stdout
    assert "--container-image" in help_text and "--container-env" in help_text
    assert re.search(r"pyxis: version v0\.24\.0", (STATE / "log" / "slurmd-node1.log").read_text())
