"""Secrets on Slurm (backends/slurm_secrets.py): the source syntax, the profile keys, and the
reader the job runs in its first lines and before each step, executed here by bash itself. The
end-to-end tests on the local cluster are in test_slurm_secrets_e2e.py."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from bridge_launch import backends
from bridge_launch.backends.slurm import secrets as S
from bridge_launch.core import secret_ref
from bridge_launch.core.errors import UsageError
from bridge_launch.resolve import resolver as resolve
from conftest import write
from launch_jobs import step_words


def _file(path: Path, text: str, mode: int) -> str:
    path.write_text(text)
    os.chmod(path, mode)
    return str(path)


def _check(sources: dict, home_dir) -> dict:
    specs = {n: {"source": src, "optional": False, "from": "cli"} for n, src in sources.items()}
    proc = subprocess.run(
        ["bash", "-s"],
        input=S.check_script(specs),
        capture_output=True,
        text=True,
        env=dict(os.environ, HOME=str(home_dir)),
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return proc.stdout, S.parse_check(proc.stdout)


class _Job:
    def __init__(self, run_dir, sources, chain=False):
        self.secret_sources, self.run_dir, self.run_id = sources, str(run_dir), "r-1"
        self.chain = {"x": 1} if chain else None


def _batch(tmp_path, sources, body, env=None, chain=False):
    """The secret lines of a batch script, then `body`, as the batch shell runs them."""
    run_dir = tmp_path / "run"
    (run_dir / "exit").mkdir(parents=True, exist_ok=True)
    job = _Job(run_dir, sources, chain)
    reader = run_dir / S.reader_path(job)  # staged beside the script, as submit stages it
    reader.parent.mkdir(parents=True, exist_ok=True)
    reader.write_text(S.reader_file(job))
    text = "set -uo pipefail\n" + "\n".join(S.script_lines(job)) + "\n" + body
    full = {k: v for k, v in os.environ.items() if k not in ("T", "U")}
    full.update(SLURM_JOB_ID="77", HOME=str(tmp_path), **(env or {}))
    proc = subprocess.run(["bash", "-c", text], capture_output=True, text=True, env=full)
    return proc, run_dir


# `scontrol show config` as Slurm 22.05 prints it (src/api/config_info.c: AccountingStoreFlags is
# job_comment,job_env,job_script joined by commas, (null) when none; MinJobAge "%u sec").
CONFIG = """Configuration data as of 2026-12-01T05:08:06
AccountingStorageType   = accounting_storage/slurmdbd
AccountingStoreFlags    = job_comment,job_env
MinJobAge               = 300 sec
StateSaveLocation       = /var/spool/slurmctld
SLURM_VERSION           = 22.05.8
"""


@pytest.mark.parametrize(
    "text,kind,path,machine",
    [
        ("file:/etc/x/token", "file", "/etc/x/token", ""),
        ("file:~/.cache/huggingface/token", "file", "~/.cache/huggingface/token", ""),
        ("netrc:api.wandb.ai", "netrc", "~/.netrc", "api.wandb.ai"),
        ("netrc:api.wandb.ai:/shared/me/netrc", "netrc", "/shared/me/netrc", "api.wandb.ai"),
    ],
)
def test_sources_parse(text, kind, path, machine):
    assert secret_ref.parse(text, "here") == secret_ref.Source(kind, path, machine)


@pytest.mark.parametrize(
    "text,says",
    [
        ("hunter2", "a secret source is file:PATH"),
        ("file:token", "must be absolute or start with ~/"),
        ("file:~", "must be absolute or start with ~/"),
        ("file:~/", "must be absolute or start with ~/"),
        ("netrc:", "names no machine"),
        ("netrc:two words", "names no machine"),
        ("env:HF_TOKEN", "never a value"),
    ],
)
def test_bad_sources_are_one_clear_line(text, says):
    with pytest.raises(UsageError) as e:
        secret_ref.parse(text, "--secret T")
    assert says in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith("--secret T: ")
    if not text.startswith(("file:", "netrc:")):
        assert text not in str(e.value)  # perhaps a value typed where a source belongs: not echoed


def test_shell_paths_expand_home_on_the_cluster_and_quote_the_rest():
    assert secret_ref.Source("file", "~/.cache/hf token").shell_path() == "\"$HOME\"/'.cache/hf token'"
    assert secret_ref.Source("file", "/a/$(x)").shell_path() == "'/a/$(x)'"


@pytest.mark.usefixtures("home")
def test_a_bad_secret_is_refused_with_one_line(cli):
    cases = [
        (["-c", "local-slurm", "--secret", "T=file:relative/path"], "the path must be absolute or start with ~/"),
        (["-c", "local-slurm", "--secret", "T=hf_value123"], "never a value"),
        (["-c", "local-slurm", "--secret", "MY-T=hf_value123"], "--secret 'MY-T': expected an environment variable"),
        (["-c", "local", "--secret", "T=file:/x"], "uses the local backend: pass it by name (--secret T)"),
        (["-c", "lepton-gb200", "--secret", "T=file:/x"], "uses the lepton backend"),
        (["-c", "local-slurm", "--secret", "1T"], "expected an environment variable name"),
    ]
    for args, says in cases:
        r = cli("submit", "smoke", "--dry-run", *args)
        lines = r.err.strip().splitlines()
        assert r.code == 2 and len(lines) == 1 and says in lines[0], (args, r.err)
        assert "hf_value123" not in r.err


def test_profile_keys_are_checked(cli, home):
    write(home / "clusters" / "bad-src.toml", 'extends = "local-slurm"\n[slurm]\nsecret_sources = { T = "file:tok" }\n')
    write(home / "clusters" / "bad-policy.toml", 'extends = "local-slurm"\n[slurm]\nenv_secrets = "maybe"\n')
    for name, says in (
        ("bad-src", "[slurm] secret_sources T: secret source 'file:tok'"),
        ("bad-policy", "env_secrets must be one of warn, refuse"),
    ):
        r = cli("clusters", "show", name)
        assert r.code == 2 and says in r.err and len(r.err.strip().splitlines()) == 1, r.err


@pytest.mark.usefixtures("home")
def test_dry_run_shows_each_secrets_source_and_no_value(cli):
    value = "s3cr3t-never-shown"
    r = cli(
        "submit",
        "smoke",
        "-c",
        "local-slurm",
        "--dry-run",
        "--secret",
        "TOK=file:~/.tok",
        "--secret",
        "OTHER",
        env={"TOK": value, "OTHER": value},
    )
    assert r.code == 0, r.err
    assert value not in r.out + r.err
    rows = r.out.split("\nSecrets (by name; values are written nowhere)\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert rows == [
        "  TOK    file:~/.tok: read on the cluster when each step starts  cli",
        "  OTHER  from your environment at submit: set",
    ], rows
    assert "OTHER: no source on cluster 'local-slurm'" in r.out and "hash.N/job.N/environment" in r.out
    assert "# Secrets passed by name from the submitting environment: OTHER\n" in r.out  # TOK is not
    assert 'v=$(bl_secret TOK file "$HOME"/.tok); case $? in 0) export TOK="$v";; 4) ;; *) rc=1;; esac' in r.out
    assert "\ntrain=(\n    with_secrets srun " in r.out
    d = cli(
        "submit",
        "smoke",
        "-c",
        "local-slurm",
        "--dry-run",
        "-o",
        "json",
        "--secret",
        "TOK=file:~/.tok",
        env={"TOK": value},
    ).json()
    assert d["secret_sources"] == {"TOK": {"source": "file:~/.tok", "optional": False, "from": "cli"}}
    assert value not in json.dumps(d)


@pytest.mark.usefixtures("home")
def test_profile_sources_make_profile_secrets_optional_and_cli_ones_required():
    job = resolve.resolve("smoke", resolve.Options(cluster="gb200-8", secrets=("WANDB_API_KEY", "X=file:/x")))
    assert job.secret_sources == {
        "HF_TOKEN": {"source": "file:~/.cache/huggingface/token", "optional": True, "from": "cluster:gb200-8"},
        "WANDB_API_KEY": {"source": "netrc:api.wandb.ai", "optional": False, "from": "cluster:gb200-8"},
        "X": {"source": "file:/x", "optional": False, "from": "cli"},
    }
    assert not any("no source" in w for w in job.warnings)


def test_a_required_secret_with_a_source_needs_no_value_here(home, monkeypatch):
    write(
        home / "clusters" / "req.toml",
        """
        extends = "local-slurm"
        required_secrets = ["NEEDED"]
        [slurm]
        secret_sources = { NEEDED = "file:/somewhere/needed" }
        """,
    )
    monkeypatch.delenv("NEEDED", raising=False)
    job = resolve.resolve("smoke", resolve.Options(cluster="req"))
    assert job.refusals == [] and job.secret_sources["NEEDED"]["optional"] is False


def test_a_profile_can_refuse_values_from_the_environment(cli, home):
    write(
        home / "clusters" / "strict.toml",
        """
        extends = "local-slurm"
        secrets = ["OPTIONAL_ONE"]
        [slurm]
        env_secrets = "refuse"
        """,
    )
    r = cli("submit", "smoke", "-c", "strict", "--secret", "MINE", env={"MINE": "v"})
    assert r.code == 2 and 'env_secrets = "refuse"' in r.err and "--secret MINE=file:PATH" in r.err, r.err
    d = cli("submit", "smoke", "-c", "strict", "--dry-run", "-o", "json", env={"OPTIONAL_ONE": "v"}).json()
    assert d["secrets"] == [] and any("OPTIONAL_ONE is left out" in w for w in d["warnings"])
    ok = cli("submit", "smoke", "-c", "strict", "--dry-run", "--secret", "MINE=file:/x")
    assert ok.code == 0, ok.err


def test_the_reader_refuses_what_others_may_read_and_says_why(tmp_path):
    netrc = (
        "machine other.example login machine password not-this-one\n"
        "default login x password nor-this\n"
        "machine api.wandb.ai\n  login user\n  password KEY-42\n"
    )
    files = {
        "OK": _file(tmp_path / "ok", "tok-1\n\n", 0o600),
        "GROUP": _file(tmp_path / "group", "tok-2\n", 0o640),
        "OTHERS": _file(tmp_path / "others", "tok-3\n", 0o604),
        "GWRITE": _file(tmp_path / "gwrite", "tok-4\n", 0o620),
        "EMPTY": _file(tmp_path / "empty", "\n", 0o600),
        "NETRC": _file(tmp_path / "netrc", netrc, 0o600),
    }
    (tmp_path / "link").symlink_to(tmp_path / "ok")
    (tmp_path / "dir").mkdir(mode=0o700)
    out, got = _check(
        {
            "OK": f"file:{files['OK']}",
            "GROUP": f"file:{files['GROUP']}",
            "OTHERS": f"file:{files['OTHERS']}",
            "GWRITE": f"file:{files['GWRITE']}",
            "EMPTY": f"file:{files['EMPTY']}",
            "LINK": f"file:{tmp_path}/link",
            "DIR": f"file:{tmp_path}/dir",
            "GONE": f"file:{tmp_path}/gone",
            "HOMED": "file:~/ok",
            "WANDB": f"netrc:api.wandb.ai:{files['NETRC']}",
            "NOHOST": f"netrc:nowhere.example:{files['NETRC']}",
        },
        tmp_path,
    )
    assert got["OK"] == got["LINK"] == got["HOMED"] == got["WANDB"] == (0, "")
    assert got["GROUP"] == (
        1,
        f"secret GROUP: {files['GROUP']} is readable by group or others (mode 0640); chmod 600 {files['GROUP']}",
    )
    assert "is readable by group or others (mode 0604)" in got["OTHERS"][1]
    assert "is writable by group or others (mode 0620)" in got["GWRITE"][1]
    assert got["EMPTY"] == (1, f"secret EMPTY: {files['EMPTY']} is empty")
    assert got["DIR"] == (1, f"secret DIR: {tmp_path}/dir is not a readable file")
    assert got["GONE"] == (S.MISSING, f"secret GONE: {tmp_path}/gone does not exist")
    assert got["NOHOST"] == (S.MISSING, f"secret NOHOST: {files['NETRC']} has no password for machine nowhere.example")
    for value in ("tok-1", "tok-2", "KEY-42", "not-this-one"):
        assert value not in out  # the check says why, never what


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
def test_the_reader_refuses_a_file_owned_by_someone_else(tmp_path):
    path = _file(tmp_path / "theirs", "tok\n", 0o600)
    os.chown(path, 65534, 65534)
    _, got = _check({"T": f"file:{path}"}, tmp_path)
    assert got["T"][0] == 1 and "is not owned by" in got["T"][1]


def test_each_step_gets_the_value_and_the_batch_shell_never_holds_it(tmp_path):
    value = "a b'c\"$(touch canary)`touch canary2` \\n $HOME"
    _file(tmp_path / "tok", value + "\n", 0o600)
    proc, _ = _batch(
        tmp_path,
        {"T": {"source": "file:~/tok", "optional": False, "from": "cli"}},
        'with_secrets printenv T; echo "[batch:${T-unset}]"; sbatch_env=$(env); '
        "[[ $sbatch_env == *touch* ]] && echo LEAK; exit 0",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == value + "\n[batch:unset]\n"  # byte for byte, and only inside the step's subshell
    assert not (tmp_path / "canary").exists() and not (tmp_path / "canary2").exists()


def test_a_source_that_became_unsafe_stops_the_job_in_its_first_lines(tmp_path):
    _file(tmp_path / "tok", "v\n", 0o644)
    proc, run_dir = _batch(
        tmp_path, {"T": {"source": "file:~/tok", "optional": False, "from": "cli"}}, "echo STARTED", chain=True
    )
    assert proc.returncode == 1 and "STARTED" not in proc.stdout
    assert f"bridge-launch: secret T: {tmp_path}/tok is readable by group or others (mode 0644)" in proc.stderr
    assert (run_dir / "exit" / "77").read_text() == "1\n"
    stopped = (run_dir / "chain" / "r-1" / "stopped").read_text()
    assert stopped.startswith("secret T: ") and "mode 0644" in stopped


def test_an_optional_source_that_is_gone_leaves_the_secret_out_or_to_sbatchs_value(tmp_path):
    sources = {
        "T": {"source": "file:~/gone", "optional": True, "from": "cluster:x"},
        "U": {"source": "netrc:api.wandb.ai:~/gone", "optional": True, "from": "cluster:x"},
    }
    proc, _ = _batch(tmp_path, sources, "with_secrets bash -c 'echo \"[${T-unset}] [${U-unset}]\"'")
    assert proc.returncode == 0 and proc.stdout == "[unset] [unset]\n", proc.stderr
    assert "bridge-launch: note: secret T: " in proc.stderr and "the job runs without it" in proc.stderr
    proc, _ = _batch(tmp_path, sources, "with_secrets bash -c 'echo \"[${T-unset}]\"'", env={"T": "from-sbatch"})
    assert proc.stdout == "[from-sbatch]\n" and "the value from sbatch's environment is used" in proc.stderr


def test_no_sources_no_lines(tmp_path):
    assert S.script_lines(_Job(tmp_path, {})) == []


def test_scontrol_config_is_read_and_job_env_is_named():
    conf = S.parse_config(CONFIG)
    assert conf == {
        "AccountingStorageType": "accounting_storage/slurmdbd",
        "AccountingStoreFlags": "job_comment,job_env",
        "MinJobAge": "300 sec",
        "StateSaveLocation": "/var/spool/slurmctld",
        "SLURM_VERSION": "22.05.8",
    }
    assert S.stores_job_env(conf)
    assert not S.stores_job_env(S.parse_config(CONFIG.replace("job_comment,job_env", "(null)")))
    text = S.env_warning(["MY_TOKEN"], conf, "1234", chain=True)
    assert "slurmctld keeps it in /var/spool/slurmctld/hash.4/job.1234/environment" in text
    assert "(MinJobAge, 300 s after the job ends)" in text and "AccountingStoreFlags=job_env" in text
    assert "sacct --env-vars" in text and "every segment of the chain" in text
    assert "HF_TOKEN is read from files on the cluster and not in it" in S.job_env_note(["HF_TOKEN"])


@pytest.mark.usefixtures("home")
def test_the_cluster_config_is_asked_once_a_day(monkeypatch):
    calls = []

    def run(_s, argv, **_kw):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, CONFIG, "")

    s = {"login_host": "login1", "slurm_conf": "/etc/slurm/slurm.conf"}
    assert S.cluster_config(s, run)["StateSaveLocation"] == "/var/spool/slurmctld"
    assert S.cluster_config(s, run)["MinJobAge"] == "300 sec" and len(calls) == 1
    assert S.cluster_config({"login_host": "login2"}, run) and len(calls) == 2  # another cluster
    now = __import__("time").time()
    monkeypatch.setattr(S.time, "time", lambda: now + S.CONFIG_TTL + 1)
    S.cluster_config(s, run)
    assert len(calls) == 3
    failed = S.cluster_config({"login_host": "down"}, lambda _s, a, **_kw: subprocess.CompletedProcess(a, 1, "", "x"))
    assert failed == {}


def test_status_reads_the_first_lines_failure():
    log = (
        "bridge-launch: note: secret U: /h/.netrc does not exist; the job runs without it\n"
        "bridge-launch: secret T: /h/tok is readable by group or others (mode 0644); chmod 600 /h/tok\n"
    )
    assert S.failure(["", log]) == "secret T: /h/tok is readable by group or others (mode 0644); chmod 600 /h/tok"
    assert S.failure(["[rank0]: training"]) is None


@pytest.mark.usefixtures("home")
def test_render_reads_only_sourced_secrets_and_keeps_every_name_in_container_env():
    job = resolve.resolve("smoke", resolve.Options(cluster="gb200-8", secrets=("MINE",)))
    text = backends.render(job).text
    env_arg = next(w for w in step_words(text) if w.startswith("--container-env="))  # the training step's
    assert {"HF_TOKEN", "WANDB_API_KEY", "MINE"} <= set(env_arg.split("=", 1)[1].split(","))
    assert "export HF_TOKEN=" in text and "MINE" not in text.split("load_secrets() {")[1].split("}")[0]
    assert "# Secrets passed by name from the submitting environment: MINE\n" in text
