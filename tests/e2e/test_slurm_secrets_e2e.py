"""Secrets on the local Slurm cluster (scripts/local-slurm), directly and through its SSH login
host: a secret with a source reaches every process of the job, and afterwards a byte scan finds
its value in no file written during the test under the cluster's state, spool and logs
(/var/lib/bridge-launch-slurm), the state dir, the run dir or /tmp; a source others may read is
refused at submit, or, if it changed since, in the job's first lines. Secrets given only as
values in the submitting environment still work, and land exactly where the warning says."""

import hashlib
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from test_slurm_e2e import _wait_state as _wait

from conftest import FAST, files_holding, run_cli, write

pytestmark = [pytest.mark.slow, pytest.mark.slurm]


if os.geteuid() != 0:
    pytest.skip("the local Slurm cluster needs root", allow_module_level=True)


STATE = Path("/var/lib/bridge-launch-slurm")


SPOOL = STATE / "spool" / "slurmctld"


PROBE = """import hashlib, json, os, socket
out = {"host": socket.gethostname(), "rank": os.environ.get("RANK"),
       "secrets": {k: hashlib.sha256(os.environ[k].encode()).hexdigest() if k in os.environ else None
                   for k in os.environ.get("BRIDGE_LAUNCH_SECRET_NAMES", "").split(",") if k}}
d = os.path.join(os.environ["BRIDGE_LAUNCH_RUN_DIR"], "probe")
os.makedirs(d, exist_ok=True)
with open(os.path.join(d, f"{out['host']}-{out['rank']}.json"), "w") as fh:
    json.dump(out, fh)
seen = sorted(k for k, v in out["secrets"].items() if v)
print(f"probe: rank {out['rank']} on {out['host']} sees {seen}", flush=True)
"""


def _probe_recipe(home, tmp_path):
    """A recipe whose entry reports, from every process, a hash of each secret it sees."""
    probe = write(tmp_path / "probe.py", PROBE)
    write(
        home / "recipes" / "secret-probe.toml",
        f'''
        name = "secret-probe"
        description = "reports a hash of each secret every process sees"
        upstream = "probe_config"
        mode = "pretrain"
        container = "nvcr.io/nvidia/nemo:26.10"  # required of a recipe; bare-process profiles ignore it
        entry = "{probe}"
        [config]
        train.train_iters = 1
        ''',
    )


def _secret_file(path: Path, value: str, mode: int = 0o600) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    path.write_text(value + "\n")
    os.chmod(path, mode)
    return path


def _probes(run_dir):
    return [json.loads(p.read_text()) for p in sorted((Path(run_dir) / "probe").glob("*.json"))]


def _sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _slurm_env_file(job_id: str) -> Path:
    """Where slurmctld keeps the environment sbatch sent (Slurm 22.05 job_mgr.c: hash.<id % 10>/job.<id>)."""
    return SPOOL / f"hash.{int(job_id) % 10}" / f"job.{job_id}" / "environment"


def _scontrol(*args) -> str:
    return subprocess.run(
        ["scontrol", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, SLURM_CONF=str(STATE / "etc" / "slurm.conf")),
    ).stdout


def _nowhere(values, since, run_dirs=(), skip=()):
    roots = [STATE, os.environ["BRIDGE_LAUNCH_HOME"], "/tmp", *run_dirs]
    for value in values:
        hits = files_holding(value, roots, since, skip=skip)
        assert hits == [], f"{value[:12]}... found in {hits}"


@pytest.mark.usefixtures("cluster")
@pytest.mark.parametrize("profile", ["local-slurm", "local-slurm-ssh"])
def test_a_file_source_reaches_every_process_and_nothing_slurm_keeps(home, tmp_path, profile):
    t0 = time.time() - 1
    _probe_recipe(home, tmp_path)
    value = "file-s3cr3t-" + os.urandom(8).hex()
    decoy = "env-decoy-" + os.urandom(8).hex()  # the same name set here: not used, and not sent to sbatch
    secret_home = tmp_path / "secret-home"
    src = _secret_file(secret_home / ".token", value)
    env = {"MY_TOKEN": decoy}
    if profile == "local-slurm":  # ~/ is the batch shell's $HOME, which sbatch takes from here
        env["HOME"] = str(secret_home)
        source = "file:~/.token"
    else:
        source = f"file:{src}"
    r = run_cli("submit", "secret-probe", "-c", profile, "--secret", f"MY_TOKEN={source}", "-o", "json", env=env)
    assert r.code == 0, r.err
    # no warning about the secret (the probe recipe's mock-data warning is not about it)
    assert not [ln for ln in r.err.splitlines() if "warning" in ln and "MY_TOKEN" in ln], r.err
    assert value not in r.out + r.err
    sub = r.json()
    job_id = sub["job_ids"][0]
    st = _wait(sub["run_id"], {"COMPLETED", "FAILED"})
    assert st["state"] == "COMPLETED", (st, run_cli("logs", sub["run_id"]).out[-3000:])
    probes = _probes(sub["run_dir"])
    assert len(probes) == 4 and {p["host"] for p in probes} == {"node1", "node2"}, probes
    assert all(p["secrets"] == {"MY_TOKEN": _sha(value)} for p in probes), probes
    # what Slurm keeps of the job: its record, its batch script, the environment sbatch sent
    shown = _scontrol("show", "job", "-dd", job_id) + _scontrol("write", "batch_script", job_id, "-")
    assert job_id in shown and value not in shown and decoy not in shown
    kept = _slurm_env_file(job_id).read_bytes()
    assert b"SLURM_" in kept or b"PATH=" in kept  # the file the scan must cover exists
    assert b"MY_TOKEN=" not in kept
    logs = run_cli("logs", sub["run_id"])  # over SSH this also writes the local copies of the logs
    assert logs.code == 0 and "sees ['MY_TOKEN']" in logs.out, logs.out + logs.err
    if profile.endswith("-ssh"):
        assert list((Path(os.environ["BRIDGE_LAUNCH_HOME"]) / "slurm-logs" / sub["run_id"]).glob("*.log"))
    _nowhere([value, decoy], t0, run_dirs=[sub["run_dir"]], skip=[src])


@pytest.mark.usefixtures("cluster", "home")
@pytest.mark.parametrize("profile", ["local-slurm", "local-slurm-ssh"])
def test_a_source_others_can_read_or_that_is_missing_is_refused_at_submit(tmp_path, profile):
    src = _secret_file(tmp_path / "keys" / "token", "v-" + os.urandom(4).hex(), mode=0o640)
    where = " (checked on local-slurm-login)" if profile.endswith("-ssh") else ""
    cases = [
        (f"file:{src}", f"secret MY_TOKEN: {src} is readable by group or others (mode 0640); chmod 600 {src}{where}"),
        (
            f"file:{tmp_path}/keys/absent",
            f"secret MY_TOKEN: {tmp_path}/keys/absent does not exist{where}; "
            "create it there, readable by you alone (chmod 600)",
        ),
    ]
    for source, says in cases:
        r = run_cli("submit", "smoke", "-c", profile, "--secret", f"MY_TOKEN={source}", *FAST)
        lines = r.err.strip().splitlines()
        assert r.code == 2 and lines == [f"bridge-launch: error: {says}"], r.err
    assert run_cli("status", "-o", "json").json() == []  # nothing recorded, nothing submitted


@pytest.mark.usefixtures("cluster")
def test_a_source_that_changes_before_the_job_starts_stops_it_in_its_first_lines(home, tmp_path):
    write(
        home / "clusters" / "later.toml",
        """
        extends = "local-slurm"
        [slurm]
        sbatch_args = ["--begin=now+15"]
        """,
    )
    src = _secret_file(tmp_path / "keys" / "token", "v-" + os.urandom(4).hex())
    subs = []
    for extra in ([], ["--until-done", "--time", "00:05:00", "train.train_iters=4"]):
        r = run_cli("submit", "smoke", "-c", "later", "--secret", f"MY_TOKEN=file:{src}", "-o", "json", *FAST, *extra)
        assert r.code == 0, r.err
        subs.append(r.json())
    os.chmod(src, 0o644)
    says = f"secret MY_TOKEN: {src} is readable by group or others (mode 0644); chmod 600 {src}"
    for sub in subs:
        st = _wait(sub["run_id"], {"COMPLETED", "FAILED", "CANCELLED"}, timeout=600)
        assert st["state"] == "FAILED" and st["reason"] == says, st
        logs = Path(sub["run_dir"]) / "logs"
        assert f"bridge-launch: {says}" in (logs / f"sbatch-{sub['job_ids'][0]}.out").read_text()
        assert not list(logs.glob("*-node*.log"))  # no step ran
    assert "secret MY_TOKEN" in run_cli("status", subs[1]["run_id"]).out
    assert (Path(subs[1]["run_dir"]) / "chain" / subs[1]["run_id"] / "jobs").exists() is False  # no successor


@pytest.mark.usefixtures("cluster", "home")
def test_every_segment_of_a_chain_reads_the_file_again(tmp_path):
    """The successor a segment submits (sbatch from the batch shell) carries no value either: it
    reads the file itself. A lost node makes the second segment (a retry) deterministically."""
    from test_until_done_e2e import kill_node_when

    t0 = time.time() - 1
    value = "chain-s3cr3t-" + os.urandom(8).hex()
    src = _secret_file(tmp_path / "keys" / "token", value)
    r = run_cli(
        "submit",
        "smoke",
        "-c",
        "local-slurm",
        "--until-done",
        "-o",
        "json",
        *FAST,
        "--secret",
        f"MY_TOKEN=file:{src}",
        "--time",
        "00:05:00",
        "--max-restarts",
        "2",
        "train.train_iters=16",
        "smoke.step_sleep=0.3",
        "checkpoint.save_interval=4",
    )
    assert r.code == 0, r.err
    sub = r.json()
    kill_node_when(sub, sub["job_ids"][0], r"iteration\s+([6-9]|1\d)/")
    st = _wait(sub["run_id"], {"COMPLETED", "FAILED", "CANCELLED"}, timeout=600)
    assert st["state"] == "COMPLETED" and st["info"]["restarts"] == 1, st
    outcomes = [s.get("outcome") for s in st["info"]["segments"]]
    assert outcomes[:2] == ["failed", "done"], st["info"]["segments"]
    summary = json.loads((Path(sub["run_dir"]) / "summary.json").read_text())  # the second segment's rank 0
    assert summary["secrets_present"] == {"MY_TOKEN": True} and summary["steps_completed"] == 16
    for job_id in st["job_ids"]:  # each segment was submitted (the later ones by the batch shell) without it
        assert value not in _scontrol("show", "job", "-dd", job_id)
        assert b"MY_TOKEN=" not in _slurm_env_file(job_id).read_bytes()
    _nowhere([value], t0, run_dirs=[sub["run_dir"]], skip=[src])


@pytest.mark.usefixtures("cluster")
def test_values_from_the_environment_still_work_and_land_where_the_warning_says(home, tmp_path):
    """An optional profile secret whose file is not there falls back to the submitting
    environment's value (with the warning), unless the profile refuses that."""
    t0 = time.time() - 1
    _probe_recipe(home, tmp_path)
    for name, policy in (("lenient", "warn"), ("strict", "refuse")):
        write(
            home / "clusters" / f"{name}.toml",
            f'''
            extends = "local-slurm"
            secrets = ["OPT_TOKEN"]
            [slurm]
            env_secrets = "{policy}"
            secret_sources = {{ OPT_TOKEN = "file:{tmp_path}/absent" }}
            ''',
        )
    strict_value = "refused-" + os.urandom(8).hex()
    r = run_cli("submit", "secret-probe", "-c", "strict", "-o", "json", env={"OPT_TOKEN": strict_value})
    assert r.code == 0, r.err
    assert f"note: secret OPT_TOKEN: {tmp_path}/absent does not exist; the job runs without OPT_TOKEN" in r.err
    strict = r.json()
    value = "legacy-" + os.urandom(8).hex()
    r = run_cli("submit", "secret-probe", "-c", "lenient", "-o", "json", env={"OPT_TOKEN": value})
    assert r.code == 0, r.err
    assert f"note: secret OPT_TOKEN: {tmp_path}/absent does not exist; OPT_TOKEN comes from your environment" in r.err
    lenient = r.json()
    job_id = lenient["job_ids"][0]
    env_file = _slurm_env_file(job_id)
    warning = re.search(r"bridge-launch: warning: (OPT_TOKEN went to the job through sbatch's environment: .*)", r.err)
    assert (
        warning and f"slurmctld keeps it in {env_file} until the job record is purged (MinJobAge, 3600 s" in warning[1]
    )
    assert "AccountingStoreFlags=job_env" not in r.err  # not set on this cluster
    for sub in (strict, lenient):
        assert _wait(sub["run_id"], {"COMPLETED", "FAILED"})["state"] == "COMPLETED"
    assert all(p["secrets"] == {"OPT_TOKEN": None} for p in _probes(strict["run_dir"]))
    assert all(p["secrets"] == {"OPT_TOKEN": _sha(value)} for p in _probes(lenient["run_dir"]))
    assert f"OPT_TOKEN={value}".encode() in env_file.read_bytes()  # the warning told the truth
    _nowhere([strict_value], t0, run_dirs=[strict["run_dir"]])
    hits = files_holding(value, [STATE, os.environ["BRIDGE_LAUNCH_HOME"], lenient["run_dir"]], t0)
    assert hits == [str(env_file)], hits  # Slurm's copy, and no other
    conf = json.loads((Path(os.environ["BRIDGE_LAUNCH_HOME"]) / "slurm-config.json").read_text())
    assert [c["config"]["StateSaveLocation"] for c in conf.values()] == [str(SPOOL)]
