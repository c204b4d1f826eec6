"""Secrets on Slurm: where each value comes from, and how it reaches the job's processes without
passing through sbatch's environment.

sbatch sends its whole environment to slurmctld, which keeps it with the job record in
`<StateSaveLocation>/hash.<id % 10>/job.<id>/environment` until the record is purged (MinJobAge
after the job ends; Slurm 22.05.8 src/slurmctld/job_mgr.c `_copy_job_desc_to_file`, `get_job_env`),
and, where `AccountingStoreFlags` includes `job_env` (src/common/read_config.c, Slurm 21.08 and
later), in the accounting database, where `sacct --env-vars` shows it. A job step's environment is
not kept: srun's step request to slurmctld carries none (22.05.8 src/common/slurm_protocol_defs.h
`job_step_create_request_msg_t`); only the launch request srun sends to each node's slurmd does, and
pyxis 0.24.0 passes it into the container in memory (pyxis_slurmstepd.c `spank_import_container_env`).

So a secret with a *source* is read on the cluster by the batch shell, from a file only its owner
may read, each time a job step starts, and exported into that srun's environment alone (a subshell
that then execs srun): the tasks inherit it, pyxis' `--container-env` carries it into the
container, and nothing else sees it: not the batch script, sbatch's environment, Slurm's job record,
the accounting database, the run dir or the state dir. A secret without a source still goes through
sbatch's environment (the submitting environment's value), with a warning naming where Slurm keeps
it, unless the profile forbids it (`[slurm] env_secrets = "refuse"`).

Sources: `file:PATH` (the whole file, trailing newlines dropped: `~/.cache/huggingface/token` as
`huggingface-cli login` writes it) and `netrc:MACHINE[:PATH]` (the password of MACHINE in a netrc
file, default `~/.netrc`, where `wandb login` keeps its key for `api.wandb.ai`). PATH is absolute or
starts with `~/` (the home directory on the cluster: `$HOME` of the batch shell there).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from bridge_launch.backends.base import q
from bridge_launch.core.secret_ref import FILE_HINT, parse

# Exit codes of bl_secret (below)
OK, UNUSABLE, MISSING, LEFT_OUT = 0, 1, 3, 4


# --- the shell side: one function for the job's first lines, each job step, and the submit check ---

# The job's secret reader (bash, sourced into every job script that names a secret, and the submit
# check's): one file, so it can be read and shellchecked as the shell it is.
_READER = Path(__file__).with_name("secret_reader.sh").read_text().rstrip("\n")


def _call(name: str, spec: dict, *, optional: bool) -> str:
    src = parse(spec["source"], f"secret {name}")
    args = [name, src.kind, src.shell_path()]
    if src.kind == "netrc" or optional:
        args.append(q(src.machine) if src.machine else "''")
    if optional:
        args.append("optional")
    return "bl_secret " + " ".join(args)


def reader_path(job) -> str:
    """Where the secret reader is staged: launch/<run id>.secret-reader.sh in the run dir."""
    return f"launch/{job.run_id}.secret-reader.sh"


def reader_file(job) -> str:
    """The secret reader as the job's staged file (sourced by the batch script): bl_secret, bl_absent,
    with_secrets and check_secrets."""
    return (
        "#!/bin/bash\n"
        f"# bridge-launch: the secret reader of run {job.run_id}, sourced by its batch script. It reads each\n"
        "# value on the cluster, from a file only its owner can read; no value is in this file.\n"
        f"{_READER}\n"
    )


def script_lines(job) -> list[str]:
    """The batch script's secret lines (none without sources): the reader (sourced: with_secrets, a
    subshell that loads them and execs its arguments, the srun of each step), load_secrets (export
    each value, in the caller's shell), and the check in the job's first lines (check_secrets), in a
    subshell so that the batch shell itself, and the successor a chain segment submits with sbatch,
    never hold a value. A source that is missing or open to group or others fails the job there."""
    sources = getattr(job, "secret_sources", None) or {}
    if not sources:
        return []
    loads = []
    for name, spec in sources.items():
        loads.append(
            f"    v=$({_call(name, spec, optional=spec['optional'])}); "
            f'case $? in 0) export {name}="$v";; 4) ;; *) rc=1;; esac'
        )
    stopped = [q(f"{job.run_dir}/chain/{job.run_id}/stopped")] if job.chain else []  # the chain's own verdict
    return [
        "# Secrets: read here, on the cluster, from files only their owner can read, when each job step starts",
        "# (with_secrets); their values are in neither this script, sbatch's environment nor Slurm's job record.",
        f". {q(job.run_dir + '/' + reader_path(job))} || exit 1  # bl_secret NAME KIND PATH [MACHINE] [optional]",
        "load_secrets() {",
        "    local v rc=0",
        *loads,
        '    return "$rc"',
        "}",
        " ".join(["check_secrets", f'{q(job.run_dir + "/exit")}/"$SLURM_JOB_ID"', *stopped]),
    ]


def check_script(sources: dict) -> str:
    """A bash script (stdin of `bash -s`, here or on the login host) that checks every source with
    the job's own reader and prints `NAME<TAB>CODE<TAB>WHY` per secret; never a value."""
    lines = [
        _READER,
        "check() { local why rc; why=$(\"$@\" 2>&1 >/dev/null); rc=$?; why=${why//$'\\n'/ }; "
        'printf \'%s\\t%s\\t%s\\n\' "$2" "$rc" "${why#bridge-launch: }"; }',
    ]
    for name, spec in sources.items():
        lines.append("check " + _call(name, spec, optional=False))
    return "\n".join(lines) + "\n"


def parse_check(text: str) -> dict:
    out = {}
    for line in text.splitlines():
        parts = line.split("\t", 2)
        if len(parts) == 3 and parts[1].isdigit():
            out[parts[0]] = (int(parts[1]), parts[2].strip())
    return out


_FAILURE = re.compile(r"^bridge-launch: (secret [A-Za-z_][A-Za-z0-9_]*: .*\S)\s*$", re.M)


def failure(texts) -> str | None:
    """Why a job stopped in its first lines: a secret's source could not be used there."""
    for text in texts:
        hit = _FAILURE.search(text or "")
        if hit:
            return hit.group(1)
    return None


# --- what Slurm keeps: `scontrol show config`, asked through the backend and cached ---

CONFIG_KEYS = ("AccountingStoreFlags", "StateSaveLocation", "MinJobAge", "AccountingStorageType", "SLURM_VERSION")
CONFIG_TTL = 24 * 3600


def parse_config(text: str) -> dict:
    """The keys we use from `scontrol show config` (`Name   = value` lines, as Slurm's
    src/api/config_info.c writes them; AccountingStoreFlags is job_comment,job_env,job_script or
    (null))."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        key = key.strip()
        if sep and key in CONFIG_KEYS:
            out[key] = value.strip()
    return out


def stores_job_env(conf: dict) -> bool:
    return "job_env" in [f.strip().lower() for f in conf.get("AccountingStoreFlags", "").split(",")]


def cluster_config(s: dict, run) -> dict:
    """The cluster's settings that decide where a job's environment is kept; {} when scontrol
    cannot say. Cached for a day per login host and slurm.conf in the state dir."""
    from bridge_launch.core import paths

    key = f"{s.get('login_host') or 'local'}:{s.get('ssh_port') or 22}:{s.get('slurm_conf') or ''}"
    cache = paths.state_dir() / "slurm-config.json"
    try:
        data = json.loads(cache.read_text())
    except (OSError, ValueError):
        data = {}
    hit = data.get(key) if isinstance(data, dict) else None
    if isinstance(hit, dict) and time.time() - hit.get("at", 0) < CONFIG_TTL:
        return hit.get("config", {})
    proc = run(s, ["scontrol", "show", "config"], timeout=30)
    if proc.returncode:
        return {}
    conf = parse_config(proc.stdout)
    data = data if isinstance(data, dict) else {}
    data[key] = {"at": time.time(), "config": conf}
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_name(f".{cache.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, cache)
    return conf


def env_warning(names: list, conf: dict, job_id: str, chain: bool) -> str:
    """Where Slurm keeps values that went through sbatch's environment, as precisely as the cluster says."""
    loc = conf.get("StateSaveLocation")
    where = (
        f"{loc}/hash.{int(job_id) % 10}/job.{job_id}/environment"
        if loc and job_id.isdigit()
        else "its StateSaveLocation (hash.N/job.N/environment)"
    )
    age = conf.get("MinJobAge", "").replace(" sec", " s")
    text = (
        f"{', '.join(names)} went to the job through sbatch's environment: slurmctld keeps "
        f"{'it' if len(names) == 1 else 'them'} in {where} until the job record is purged"
        + (f" (MinJobAge, {age} after the job ends)" if age else "")
    )
    if stores_job_env(conf):
        text += (
            ", and this cluster also stores job environments in its accounting database "
            "(AccountingStoreFlags=job_env), where sacct --env-vars shows them for as long as it keeps accounting"
        )
    if chain:
        text += "; every segment of the chain is submitted with them again"
    return text + f"; give each a source on the cluster instead: --secret NAME={FILE_HINT} or [slurm] secret_sources"


def job_env_note(file_names: list) -> str:
    text = (
        "this cluster stores each job's environment (sbatch's: your submitting environment) in its accounting "
        "database (AccountingStoreFlags=job_env), where sacct --env-vars shows it"
    )
    if file_names:
        text += (
            f"; {', '.join(file_names)} {'is' if len(file_names) == 1 else 'are'} "
            "read from files on the cluster and not in it"
        )
    return text
