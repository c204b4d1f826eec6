"""The Slurm backend: stage, submit (sbatch, locally or through a login host), status (one squeue
and one sacct per cluster, the chain's and attempts' own records), logs and cancel. What it submits
is render.py's script."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from bridge_launch.backends.base import (
    Tree,
    log_tail,
    progress,
    q,
    stage_locally,
)
from bridge_launch.backends.slurm import attempts
from bridge_launch.backends.slurm import secrets as slurm_secrets

# render and secret_origins, render.py's, are this platform module's API too (backends/__init__.py)
from bridge_launch.backends.slurm.render import measure_file, render, secret_origins

__all__ = ["Backend", "render", "secret_origins"]
from bridge_launch.core.errors import LaunchError, UsageError
from bridge_launch.logs.reader import failing_node
from bridge_launch.workloads import node_facts
from bridge_launch.workloads import trainer_protocol as P


def _measured(text: str | None, job_lead) -> dict | None:
    """What a job that saves before its time limit measured (time-limit.sh's step_times.py state:
    a chain's segments', a plain job's attempts') and the lead the figures need."""
    try:
        state = json.loads(text) if text else {}
    except ValueError:
        return None
    step, save = state.get("step_s"), state.get("save_s")
    if not step and not save:
        return None
    need = P.sized_lead(step, save, None, floor=0) if step else None
    return {"step_s": step, "save_s": save, "lead_s": need, "job_lead_s": job_lead}


# What the GPU-hour account reads of each job and step (sacct -o; allocations()).
ALLOCATION_FIELDS = "JobID,State,Submit,Start,End,ElapsedRaw,NNodes,AllocTRES,NodeList,JobName"
_STATES = {
    "PENDING": "PENDING",
    "CONFIGURING": "PENDING",
    "REQUEUED": "PENDING",
    "REQUEUE_HOLD": "PENDING",
    "REQUEUE_FED": "PENDING",
    "SUSPENDED": "PENDING",
    "RESV_DEL_HOLD": "PENDING",
    "RUNNING": "RUNNING",
    "COMPLETING": "RUNNING",
    "STAGE_OUT": "RUNNING",
    "SIGNALING": "RUNNING",
    "RESIZING": "RUNNING",
    "STOPPED": "RUNNING",
    "COMPLETED": "COMPLETED",
    "CANCELLED": "CANCELLED",
    "TIMEOUT": "TIMEOUT",
    "DEADLINE": "TIMEOUT",
    "PREEMPTED": "PREEMPTED",
    "FAILED": "FAILED",
    "NODE_FAIL": "FAILED",
    "BOOT_FAIL": "FAILED",
    "OUT_OF_MEMORY": "FAILED",
    "SPECIAL_EXIT": "FAILED",
    "REVOKED": "CANCELLED",
}
# sbatch --segment: added in 24.05 (SchedMD/slurm 47e72dea, "Add segment_size to slurm_opt_t"), but
# until 24.05.3 its option entry carried --send-libs' code (slurm_opt.c `.val = LONG_OPT_SEND_LIBS`,
# fixed by a3115c60, first in slurm-24-05-3-1).
_MIN_SEGMENT_VERSION = (24, 5, 3)


def _version(text: str) -> tuple:
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else (0, 0, 0)


def stage_stream(files: dict) -> bytes:
    """The run dir's files as one tar stream (PAX): text at its path, a packed tree's members under
    its path. A member whose name is longer than ustar's 100 characters carries it in a PAX `path`
    record, which wins over the header's name on extraction: it is dropped, so the new name holds."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel, text in files.items():
            if isinstance(text, Tree):  # a packed tree: its members under rel/
                with tarfile.open(fileobj=io.BytesIO(text)) as inner:
                    for member in inner:
                        data = inner.extractfile(member) if member.isfile() else None
                        member.name = f"{rel.rstrip('/')}/{member.name}"
                        member.pax_headers = {k: v for k, v in member.pax_headers.items() if k != "path"}
                        tar.addfile(member, data)
                continue
            data = text if isinstance(text, bytes) else text.encode()
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = len(data), 0o600, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class Backend:
    name = "slurm"

    def __init__(self):
        self._ssh_ready: set = set()
        self.notes: list[str] = []  # what a user should know of a submit: "warning: ...", "note: ..."

    # -- transport: local commands or one OpenSSH control master per login host ------------
    def _ssh(self, s: dict) -> list[str]:
        # Control sockets need a short path (108 bytes at most), so not under the state dir.
        ctl = Path(tempfile.gettempdir()) / f"bridge-launch-ssh-{os.getuid()}"
        ctl.mkdir(mode=0o700, exist_ok=True)
        if ctl.stat().st_uid != os.getuid() or ctl.stat().st_mode & 0o077:
            raise LaunchError(f"{ctl} must be a directory only you can use (it holds SSH control sockets)")
        cmd = [
            "ssh",
            "-o",
            "BatchMode=yes",
            "-o",
            "ControlMaster=auto",
            "-o",
            f"ControlPath={ctl}/%C",
            "-o",
            "ControlPersist=120",
            "-o",
            "ConnectTimeout=15",
        ]
        if s.get("ssh_config"):
            cmd += ["-F", s["ssh_config"]]
        if s.get("ssh_port") and s["ssh_port"] != 22:
            cmd += ["-p", str(s["ssh_port"])]
        if s.get("ssh_identity"):
            cmd += ["-i", s["ssh_identity"]]
        host = s["login_host"] if not s.get("ssh_user") else f"{s['ssh_user']}@{s['login_host']}"
        return [*cmd, host]

    def command(
        self,
        s: dict,
        argv: list[str],
        *,
        stdin: str | bytes | None = None,
        env: dict | None = None,
        timeout: float = 120,
        drop=(),
    ) -> subprocess.CompletedProcess:
        """Run a Slurm client command where the profile says: here, or on its login host. `drop`:
        variables (secret names) the command must not have in its environment."""
        conf = s.get("slurm_conf")
        try:
            if s.get("login_host"):
                remote = " ".join(q(a) for a in argv)
                if conf:
                    remote = f"SLURM_CONF={q(conf)} {remote}"
                if drop:
                    remote = f"unset {' '.join(drop)}; {remote}"
                return subprocess.run(
                    [*self._ssh(s), remote],
                    input=stdin,
                    capture_output=True,
                    timeout=timeout,
                    text=not isinstance(stdin, bytes),
                )
            full = dict(os.environ)
            if conf:
                full["SLURM_CONF"] = conf
            full.update(env or {})
            for name in drop:
                full.pop(name, None)
            return subprocess.run(
                argv, input=stdin, capture_output=True, text=not isinstance(stdin, bytes), env=full, timeout=timeout
            )
        except FileNotFoundError:
            raise LaunchError(f"'{argv[0]}' is not installed here; is this a Slurm login node?") from None
        except subprocess.TimeoutExpired:
            raise LaunchError(f"'{' '.join(argv[:2])}' did not answer within {int(timeout)} s") from None

    @staticmethod
    def first_error(proc) -> str:
        text = (proc.stderr or proc.stdout or "").strip()
        lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
        return lines[-1] if lines else f"exit code {proc.returncode}"

    # -- run dir ----------------------------------------------------------------------------
    def stage(self, job, files: dict, *, new_dir: bool) -> None:
        s = job.scheduler
        if not s.get("login_host"):
            stage_locally(job.run_dir, files, new_dir=new_dir)
            return
        # One tar stream over SSH: the run dir lives on the cluster's filesystem.
        d = q(job.run_dir)
        guard = f"if [ -e {d} ]; then echo 'run dir exists: {job.run_dir}' >&2; exit 17; fi; " if new_dir else ""
        script = f"{guard}umask 077; mkdir -p {d}/logs {d}/launch {d}/exit && tar -C {d} -xf -"
        proc = subprocess.run([*self._ssh(s), script], input=stage_stream(files), capture_output=True, timeout=120)
        if proc.returncode:
            raise LaunchError(
                f"could not create the run dir on {s['login_host']}: "
                f"{self.first_error(proc) if isinstance(proc.stderr, str) else proc.stderr.decode().strip()}"
            )

    def unstage(self, job) -> None:
        s = job.scheduler
        if not s.get("login_host"):
            shutil.rmtree(job.run_dir, ignore_errors=True)
        else:
            subprocess.run([*self._ssh(s), f"rm -rf {q(job.run_dir)}"], capture_output=True, timeout=60)

    # -- submit -----------------------------------------------------------------------------
    def submit(self, job, run, artifact, secrets: dict) -> list[str]:  # noqa: ARG002 - the Backend protocol's signature
        s = job.scheduler
        script = f"{job.run_dir}/{artifact.filename}"
        if artifact.segment:
            ver = self.command(s, ["sbatch", "--version"])
            if ver.returncode:  # no Slurm to ask (its configuration, the controller): that, not --segment
                raise LaunchError(f"sbatch does not answer on cluster '{job.cluster}': {self.first_error(ver)}")
            if _version(ver.stdout) < _MIN_SEGMENT_VERSION:
                raise UsageError(
                    f"cluster '{job.cluster}' runs {(ver.stdout or '').strip() or 'an unknown Slurm'}, "
                    "whose sbatch has no working --segment (needs 24.05.3 with topology/block); set "
                    "[slurm] segment = false in the profile"
                )
        from bridge_launch.backends.slurm import topology_plugin as slurm_topology

        warning = slurm_topology.check(self, job, artifact.segment)
        if warning:
            self.notes.append(f"warning: {warning}")
        values = self._secret_values(job, secrets)  # what goes through sbatch's environment: no sourced secret
        hidden = [n for n in job.secrets if n not in values]
        test = self.command(s, ["sbatch", "--test-only", script], drop=job.secrets)
        if test.returncode:
            left_out = s.get("exclude") if job.provenance.get("job", {}).get("exclude") == "bad-node list" else None
            raise UsageError(
                f"Slurm would reject this job: {self.first_error(test)}"
                + (
                    f" (the bad-node list leaves out {', '.join(left_out)}: too few nodes for {job.nodes}; "
                    f"'bridge-launch clusters forget-node {job.cluster} NODE' lets one back in)"
                    if left_out
                    else ""
                )
            )
        if s.get("login_host"):
            # Values travel on the session's standard input, never on a command line; the others are
            # unset, so a value the login shell's own startup files export does not reach sbatch either.
            lines = ["set +x"] + ([f"unset {' '.join(hidden)}"] if hidden else [])
            lines += [f"export {k}={q(v)}" for k, v in values.items()]
            if s.get("slurm_conf"):
                lines.append(f"export SLURM_CONF={q(s['slurm_conf'])}")
            lines.append(f"exec sbatch --parsable {q(script)}")
            proc = subprocess.run(
                [*self._ssh(s), "bash -s"], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120
            )
        else:
            proc = self.command(s, ["sbatch", "--parsable", script], env=values, drop=hidden)
        if proc.returncode:
            raise LaunchError(f"sbatch failed: {self.first_error(proc)}")
        job_id = proc.stdout.strip().splitlines()[-1].split(";")[0] if proc.stdout.strip() else ""
        if not job_id.isdigit():
            raise LaunchError(f"sbatch printed no job id: {proc.stdout.strip()!r}")
        conf = slurm_secrets.cluster_config(s, self.command)
        if values:
            self.notes.append("warning: " + slurm_secrets.env_warning(list(values), conf, job_id, bool(job.chain)))
        elif slurm_secrets.stores_job_env(conf):
            self.notes.append("note: " + slurm_secrets.job_env_note(list(job.secret_sources or {})))
        return [job_id]

    def _secret_values(self, job, secrets: dict) -> dict:
        """Check every secret source where the job will read it (here, or on the login host: one
        call, no value crosses it) and return the values that go through sbatch's environment: those
        without a source, and an optional secret's whose source is not there. A source that is open
        to group or others, or missing for a secret the job needs, is refused here."""
        s, sources = job.scheduler, job.secret_sources or {}
        values = {n: v for n, v in secrets.items() if n in job.secrets and n not in sources}
        if not sources:
            return values
        proc = self.command(s, ["bash", "-s"], stdin=slurm_secrets.check_script(sources), timeout=60)
        got = slurm_secrets.parse_check(proc.stdout)
        where = f" (checked on {s['login_host']})" if s.get("login_host") else ""
        for name, spec in sources.items():
            code, why = got.get(name, (None, ""))
            if code is None:
                raise LaunchError(
                    f"could not check the secret sources{where.replace('checked ', '')}: {self.first_error(proc)}"
                )
            if code == slurm_secrets.OK:
                continue
            if code == slurm_secrets.MISSING and spec["optional"]:
                if name in secrets and s.get("env_secrets") != "refuse":
                    values[name] = secrets[name]
                    self.notes.append(f"note: {why}{where}; {name} comes from your environment instead")
                else:
                    self.notes.append(f"note: {why}{where}; the job runs without {name}")
                continue
            hint = "; create it there, readable by you alone (chmod 600)" if code == slurm_secrets.MISSING else ""
            raise UsageError(f"{why}{where}{hint}")
        return values

    # -- status -----------------------------------------------------------------------------
    def status(self, runs: list) -> dict:
        """{run id: status} for (run, job) pairs: one squeue (and one sacct) per cluster."""
        by_profile: dict = {}
        jobs = {}
        for run, job in runs:
            if run.job_ids:
                by_profile.setdefault(run.cluster, []).append(run)
                jobs[run.run_id] = job
        out = {}
        for group in by_profile.values():
            job = jobs[group[0].run_id]
            s = job.scheduler
            # a retried job's latest attempt is the one its batch script submitted last (attempts.JOBS)
            latest = {r.run_id: self._attempt_ids(s, r, jobs[r.run_id])[-1] for r in group}
            ids = [latest[r.run_id] for r in group]
            seen = self.squeue(s, ids)
            missing = [
                i for i in ids if i not in seen or seen[i]["state"] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")
            ]
            if missing:
                for jid, info in self.sacct(s, missing).items():
                    seen[jid] = info
            for run in group:
                job, jid = jobs[run.run_id], latest[run.run_id]
                info = seen.get(jid)
                if info is None:
                    info = self.exit_marker(s, run, jid)
                st = dict(info)
                st.update(self._progress(s, run))
                if st.get("state") == "FAILED":
                    texts = self.recent_log_texts(s, run)
                    why = (container_failure(texts) if job.container else None) or slurm_secrets.failure(texts)
                    if why:
                        st["reason"] = why
                    health = [m for t in texts if t for m in node_facts.HEALTH_RE.finditer(t) if m.group(2) == "FAIL"]
                    # a node's own fault (its GPUs, its IMEX channels) when it alone has one: the same
                    # failure on every node of a larger job is the profile's or the job's
                    own = [m for m in health if m.group(3).split(":")[0] in node_facts.NODE_OWN_CHECKS]
                    alone = len(own) == 1 and (len(health) < job.nodes or job.nodes == 1)
                    bad = (own[0].group(1), f"health step: {own[0].group(3)}") if alone else None
                    if health:
                        st["reason"] = "health step failed on " + "; ".join(f"{m[1]}: {m[3]}" for m in health)
                    bad = bad or failing_node(self._node_texts(s, run, jid))
                    if bad:  # the runs layer keeps it out of later submits (runs/bad_nodes.py)
                        st["bad_node"] = {"node": bad[0], "evidence": bad[1], "job_id": jid}
                if job.limit_save and not job.chain and st.get("state") == "COMPLETED":
                    st = self._limit_stop(s, run, job, jid, st)
                # what the job measured (time-limit.sh): a chain's segments, a plain job once it has started
                figures = measure_file(job)
                if figures and (job.chain or st.get("state") != "PENDING"):
                    measured = _measured(self.read_file(s, figures), job.limit_save["signal_lead"])
                    if measured:
                        st["measured"] = measured
                if job.chain:
                    st = self._chain_status(s, run, st)
                elif job.retry:
                    st = self._attempt_status(s, run, job, st)
                out[run.run_id] = st
        return out

    def _attempt_ids(self, s, run, job) -> list[str]:
        """The run's job ids, its retried attempts' included (the batch scripts' attempts.JOBS)."""
        if not job.retry:
            return list(run.job_ids)
        later = (self.read_file(s, f"{attempts.attempts_dir(job)}/{attempts.JOBS}") or "").split()
        return list(dict.fromkeys([*run.job_ids, *[x for x in later if x.isdigit()]]))

    def _attempt_status(self, s, run, job, st: dict) -> dict:
        """A retried job: each attempt's state, nodes and why it ended (the batch scripts' records),
        the nodes left out and the restarts used; the run's state is its latest attempt's."""
        ids = self._attempt_ids(s, run, job)
        records = attempts.parse(self.read_file(s, f"{attempts.attempts_dir(job)}/{attempts.OUTCOMES}") or "")
        if len(ids) == 1 and not records:
            return st
        states = self.sacct(s, ids[:-1]) if len(ids) > 1 else {}
        states[ids[-1]] = {k: st.get(k) for k in ("state", "nodes")}
        rows = []
        for n, jid in enumerate(ids, 1):
            rec = records.get(jid, {})
            row = {"job_id": jid, "attempt": rec.get("attempt") or n, "state": states.get(jid, {}).get("state")}
            row["nodes"] = rec.get("nodes") or states.get(jid, {}).get("nodes") or ""
            if rec:
                row.update(outcome=rec["outcome"], detail=rec["detail"], left_out=rec["bad"])
                if rec["to"] is not None and rec["from"] is not None and rec["to"] > rec["from"]:
                    row["checkpoint"] = rec["to"]
            rows.append(row)
        out = dict(st, job_ids=ids, attempts=rows)
        used = (self.read_file(s, f"{attempts.attempts_dir(job)}/restarts") or "0").strip()
        out["restarts"] = int(used) if used.isdigit() else 0
        bad = [
            {"node": node, "evidence": r["detail"].split("; retry ")[0], "job_id": r["job_id"]}
            for r in rows
            for node in r.get("left_out", [])
        ]
        if bad:  # the runs layer records each (runs/bad_nodes.py), the run going on or not
            out["bad_nodes"] = bad
        last = rows[-1]
        if last.get("outcome") == "failed" and out.get("state") == "FAILED":
            why = last["detail"].split("; ", 1)[-1]  # "exit 1; not retried: ...": the exit code is the reason's
            out["reason"] = f"{out.get('reason') or 'failed'}; attempt {last['attempt']}: {why}"
        return out

    def _limit_stop(self, s, run, job, jid: str, st: dict) -> dict:
        """A job that ended 0 after its time-limit signal (an empty stop file: the batch shell's
        USR1 trap) stopped there having saved, below train_iters: STOPPED, not COMPLETED."""
        stop = self.read_file(s, f"{run.run_dir}/exit/stop-{jid}")
        iters = job.config.get("train.train_iters")
        step = st.get("step")
        if stop is None or stop.strip() or isinstance(step, int) and isinstance(iters, int) and step >= iters:
            return st
        where = f"iteration {step} of {iters}" if step is not None else f"below train_iters={iters}"
        return dict(st, state="STOPPED", reason=f"stopped at the time limit, {where}; resume continues")

    def _chain_status(self, s, run, st: dict) -> dict:
        """A --until-done run: every segment's state, the restarts used, and the chain's own
        verdict (done / stopped markers the segments write) over the last job's state."""
        chain_dir = f"{run.run_dir}/chain/{run.run_id}"
        # The markers first, the job states after: a segment cancels its spare successor before it
        # writes `done`, so states read after `done` was seen never show that successor pending.
        done = self.read_file(s, f"{chain_dir}/done") is not None
        stopped = self.read_file(s, f"{chain_dir}/stopped")
        later = [x for x in (self.read_file(s, f"{chain_dir}/jobs") or "").split() if x.isdigit()]
        ids = list(dict.fromkeys([*run.job_ids, *later]))
        states = self.squeue(s, ids)
        missing = [i for i in ids if i not in states or states[i]["state"] not in ("PENDING", "RUNNING")]
        if missing:
            states.update(
                {
                    k: v
                    for k, v in self.sacct(s, missing).items()
                    if k not in states or states[k]["state"] not in ("PENDING", "RUNNING")
                }
            )
        outcomes = _outcomes(self.read_file(s, f"{chain_dir}/outcomes") or "")
        segments = [
            {"job_id": i, "state": states.get(i, {}).get("state", "UNKNOWN"), **outcomes.get(i, {})} for i in ids
        ]
        restarts = (self.read_file(s, f"{chain_dir}/restarts") or "0").strip()
        out = dict(st, job_ids=ids, segments=segments, restarts=int(restarts) if restarts.isdigit() else 0)
        left = [ln.split("\t") for ln in (self.read_file(s, f"{chain_dir}/left_out") or "").splitlines()]
        bad = [
            {"node": x[1], "evidence": x[2] or "the failed segment's logs", "job_id": x[0]} for x in left if len(x) == 3
        ]
        if bad:  # the nodes segments left out of their successors: the runs layer records each (runs/bad_nodes.py)
            out["bad_nodes"] = bad
        saved = [x["checkpoint"] for x in segments if x.get("checkpoint")]
        if saved:
            out["checkpoint"] = saved[-1]
        active = [x for x in segments if x["state"] in ("PENDING", "RUNNING")]
        ending = [x["job_id"] for x in active if x["state"] == "RUNNING"]
        if (done or stopped is not None) and ending:
            # The segment that wrote the verdict has yet to end (its last lines, the epilog, Slurm's
            # COMPLETING): it still holds its nodes, and the terminal record, which is not read
            # again, must show every segment's final state. So the verdict waits for it.
            verdict = "done" if done else "stopped"
            out.update(state="RUNNING", reason=f"the chain is {verdict}; job {', '.join(ending)} is ending")
        elif done:
            out.update(state="COMPLETED", reason="")
        elif stopped is not None:
            out.update(state="CANCELLED" if run.info.get("cancelled") else "FAILED", reason=stopped.strip())
        elif any(x["state"] == "RUNNING" for x in active):
            out.update(state="RUNNING", reason="")
        elif active:
            out.update(state="PENDING", reason=states.get(active[0]["job_id"], {}).get("reason", ""))
        elif segments:
            last = segments[-1]["state"]
            out.update(
                state=last if last != "COMPLETED" else "FAILED",
                reason="" if last != "COMPLETED" else "the chain ended below train_iters",
            )
        return out

    def squeue(self, s, ids) -> dict:
        proc = self.command(s, ["squeue", "-h", "--states=all", "-j", ",".join(ids), "-o", "%i|%T|%r|%M|%D|%N"])
        if proc.returncode:
            return {}
        seen = {}
        for line in proc.stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) < 6:
                continue
            jid, state, reason, elapsed, nnodes, nodelist = parts[:6]
            st = _STATES.get(state, "UNKNOWN")
            seen[jid.split("_")[0]] = {
                "state": st,
                "reason": reason if st == "PENDING" and reason != "None" else "",
                "elapsed": elapsed,
                "nodes": nodelist or nnodes,
            }
        return seen

    def sacct(self, s, ids) -> dict:
        proc = self.command(
            s, ["sacct", "-n", "-P", "-X", "-j", ",".join(ids), "-o", "JobID,State,ExitCode,Elapsed,NodeList"]
        )
        if proc.returncode:
            return {}
        seen = {}
        for line in proc.stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) < 5:
                continue
            jid, state, code, elapsed, nodelist = parts[:5]
            word = state.split()[0] if state else ""
            st = _STATES.get(word, "UNKNOWN")
            reason = f"exit code {code.split(':')[0]}" if st == "FAILED" else (state if st == "CANCELLED" else "")
            seen[jid] = {"state": st, "reason": reason, "elapsed": elapsed, "nodes": nodelist}
        return seen

    def allocations(self, s, ids) -> str:
        """sacct's rows of these jobs and their steps (ALLOCATION_FIELDS, `|`-separated, times in epoch
        seconds): when each allocation started and ended, on how many nodes and GPUs, for the GPU-hour
        account (runs/accounting.py). LaunchError when sacct cannot answer."""
        proc = self.command(
            s, ["env", "SLURM_TIME_FORMAT=%s", "sacct", "-n", "-P", "-j", ",".join(ids), "-o", ALLOCATION_FIELDS]
        )
        if proc.returncode:
            raise LaunchError(f"sacct could not say when the run's jobs ran: {self.first_error(proc)}")
        return proc.stdout

    def read_file(self, s, path: str) -> str | None:
        if not s.get("login_host"):
            try:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    return fh.read()
            except OSError:
                return None
        proc = subprocess.run([*self._ssh(s), f"cat {q(path)}"], capture_output=True, text=True, timeout=60)
        return proc.stdout if proc.returncode == 0 else None

    def exit_marker(self, s, run, jid) -> dict:
        """Without squeue or accounting knowing the job: the batch script's own exit marker."""
        text = self.read_file(s, f"{run.run_dir}/exit/{jid}")
        if text is None or not text.strip().lstrip("-").isdigit():
            if run.info.get("cancelled"):
                return {"state": "CANCELLED", "reason": "cancelled by user"}
            return {"state": "UNKNOWN", "reason": "not in squeue, no accounting record, no exit marker"}
        code = int(text.strip())
        if run.info.get("cancelled"):
            return {"state": "CANCELLED", "reason": f"exit code {code}"}
        return {"state": "COMPLETED", "reason": ""} if code == 0 else {"state": "FAILED", "reason": f"exit code {code}"}

    def _stop_training(self, job, jid: str) -> None:
        """USR1 to the batch shell alone (scancel --batch): its trap has every node's launcher signal
        the training processes (a chain's trainers save first); then wait for the job to end."""
        s = job.scheduler
        sig = s.get("cancel_signal", "USR1")  # USR1: a chain's trap, and jobs rendered before USR2
        proc = self.command(s, ["scancel", "--batch", f"--signal={sig}", jid])
        if proc.returncode:
            raise LaunchError(f"scancel --batch --signal={sig} {jid}: {self.first_error(proc)}")
        grace = job.limit_save["signal_lead"] + 30 if job.limit_save else CANCEL_GRACE  # the trainers save first
        deadline = time.time() + grace
        while time.time() < deadline:
            if self.squeue(s, [jid]).get(jid, {}).get("state") != "RUNNING":
                return
            time.sleep(1)

    def _progress(self, s, run) -> dict:
        return progress(self.recent_log_texts(s, run))

    def _node_texts(self, s, run, jid: str) -> dict:
        """{node: the tail of its log} for job `jid` (srun --output=%j-%N.log: one log per node)."""
        if s.get("login_host"):
            named = {n: b.decode("utf-8", "replace") for n, b in self._remote_logs(s, run, tail=65536).items()}
        else:
            named = {p.name: log_tail(p) for p in self._local_logs(run)}
        out = {}
        for name, text in named.items():
            m = re.fullmatch(rf"{re.escape(str(jid))}-(.+)\.log", Path(name).name)
            if m and text:
                out[m.group(1)] = text
        return out

    def recent_log_texts(self, s, run) -> list:
        if s.get("login_host"):  # the last 64 KiB of each log, all in one SSH call
            return [b.decode("utf-8", "replace") for b in self._remote_logs(s, run, tail=65536).values()]
        return [log_tail(p) for p in self._local_logs(run)]

    def log_texts(self, run, job, tail: int | None = None) -> list:
        """The run's logs as texts, in log_files' order; with `tail`, the last `tail` bytes of each
        (over SSH, in one call, without keeping a copy)."""
        s = job.scheduler if run.job_ids else {}
        if tail and s.get("login_host"):
            return list(self._remote_logs(s, run, tail=tail).values())
        out = []
        for path in self.log_files(run, job):
            if tail:
                out.append(log_tail(path, tail))
                continue
            try:
                out.append(Path(path).read_bytes())
            except OSError:
                continue
        return out

    # -- logs and cancel --------------------------------------------------------------------
    def log_files(self, run, job) -> list:
        """The run's logs, batch output first then the per-node logs, job by job. On a login host
        they are fetched (only the bytes not fetched before, in one SSH call) into a local copy."""
        s = job.scheduler if run.job_ids else {}
        return self._sync_logs(s, run) if s.get("login_host") else self._local_logs(run)

    @staticmethod
    def _local_logs(run) -> list:
        logs = Path(run.run_dir) / "logs"
        files = []
        for jid in run.job_ids:
            files.append(logs / f"sbatch-{jid}.out")
            files += sorted(logs.glob(f"{jid}-*.log")) if logs.is_dir() else []
        return files

    def _sync_logs(self, s, run) -> list:
        from bridge_launch.core import paths

        cache = paths.log_copies("slurm-logs", run.run_id)
        have = {p.name: p.stat().st_size for p in cache.iterdir() if _LOG_NAME.match(p.name)}
        for name, data in self._remote_logs(s, run, offsets=have).items():
            with open(cache / name, "ab") as fh:
                fh.write(data)
        names = {p.name for p in cache.iterdir()}
        files = []
        for jid in run.job_ids:
            files += [
                cache / n
                for n in [f"sbatch-{jid}.out", *sorted(n for n in names if n.startswith(f"{jid}-"))]
                if n in names and _LOG_NAME.match(n)
            ]
        return files

    def _remote_logs(self, s, run, *, offsets: dict | None = None, tail: int | None = None) -> dict[str, bytes]:
        """{log name: bytes} from the run's logs dir on the login host: what lies past offsets[name]
        (0 for a log not seen before), or the last `tail` bytes of each. One SSH call."""
        offsets = offsets or {}
        cases = "".join(f"{q(n)}) off={int(o)};; " for n, o in offsets.items())
        globs = " ".join(f"sbatch-{j}.out {j}-*.log" for j in run.job_ids if str(j).isdigit())
        script = (
            f"cd {q(run.run_dir + '/logs')} 2>/dev/null || exit 0; for f in {globs}; do "
            '[ -f "$f" ] || continue; off=0; '
            + (f'case "$f" in {cases}esac; ' if cases else "")
            + 'size=$(stat -c %s -- "$f") || continue; '
            + (f"[ $size -gt {int(tail)} ] && off=$((size-{int(tail)})); " if tail else "")
            + "[ $size -gt $off ] || continue; n=$((size-off)); printf '@@bridge-launch %d %s\\n' $n \"$f\"; "
            'tail -c +$((off+1)) -- "$f" | head -c $n; done'
        )
        try:
            proc = subprocess.run([*self._ssh(s), f"sh -c {q(script)}"], capture_output=True, timeout=120)
        except subprocess.TimeoutExpired:
            raise LaunchError(f"reading the logs on {s['login_host']} took over 120 s") from None
        if proc.returncode:
            err = subprocess.CompletedProcess(proc.args, proc.returncode, "", proc.stderr.decode("utf-8", "replace"))
            raise LaunchError(f"reading the logs on {s['login_host']} failed: {self.first_error(err)}")
        return _frames(proc.stdout)

    def cancel(self, run, job) -> None:
        """Stop the training processes first, as an --until-done segment is stopped and as the local
        backend cancels: torchrun is never signalled (a signalled torchrun forwards the signal, raises
        SignalException with a traceback into the logs and exits non-zero: trainer_protocol.py), then
        scancel whatever is left (the job's shells, queued segments). A plain scancel would signal
        every process of the job's steps at once, torchrun included."""
        if not run.job_ids:
            return
        s = job.scheduler
        ids = list(run.job_ids)
        # a chain, or a job that retries: marked stopped first, so no segment or attempt submits
        # another, then every one of them is cancelled
        mark = f"{run.run_dir}/chain/{run.run_id}" if job.chain else attempts.attempts_dir(job) if job.retry else None
        if mark:
            if not s.get("login_host"):
                os.makedirs(mark, exist_ok=True)
                with open(f"{mark}/stopped", "w") as fh:
                    fh.write("cancelled by user\n")
            else:
                subprocess.run(
                    [*self._ssh(s), f"mkdir -p {q(mark)} && echo 'cancelled by user' > {q(mark + '/stopped')}"],
                    capture_output=True,
                    timeout=60,
                )
            later = (self.read_file(s, f"{mark}/jobs") or "").split()
            ids = list(dict.fromkeys([*ids, *[x for x in later if x.isdigit()]]))
        running = [i for i, st in self.squeue(s, ids).items() if st["state"] == "RUNNING"]
        for jid in running:
            try:
                self._stop_training(job, jid)
            except LaunchError:
                pass  # nothing reached the trainers: scancel below still ends the job
        proc = self.command(s, ["scancel", *ids])
        if proc.returncode and "Invalid job id" not in (proc.stderr or ""):
            raise LaunchError(f"scancel failed: {self.first_error(proc)}")


CANCEL_GRACE = 60  # seconds the training processes get to exit after a cancel's SIGTERM before scancel


def _outcomes(text: str) -> dict:
    """The chain's own account of each segment (`<job> <outcome> <from> <to> <detail>` lines the
    batch script appends): {job id: {"outcome", "checkpoint", "detail"}}. A segment that ended
    without a new checkpoint is "no-progress", whatever Slurm's state for it says."""
    out = {}
    for line in text.splitlines():
        parts = line.split(" ", 4)
        if len(parts) >= 4 and parts[0].isdigit() and parts[3].isdigit():
            out[parts[0]] = {
                "outcome": parts[1],
                "checkpoint": int(parts[3]),
                "detail": parts[4].strip() if len(parts) > 4 else "",
            }
    return out


_PYXIS_LINE = re.compile(r"\berror: pyxis:\s+(.*\S)")
_ENROOT_ERROR = re.compile(r"curl: \(\d+\)|\[ERROR\]|No such file|mktemp:|[Ee]rror:")


def container_failure(texts) -> str | None:
    """Why pyxis could not start the container, from the step's logs: its own line (e.g. 'failed
    to import docker image: nvcr.io#nvidia/nemo:26.10') and enroot's error line from the enroot
    log pyxis prints after it (e.g. 'curl: (6) Could not resolve host: nvcr.io'); None if the job
    failed for another reason."""
    msgs = [m.group(1) for text in texts if text for m in _PYXIS_LINE.finditer(text)]
    if not msgs:
        return None
    head = next((m for m in msgs if m.startswith(("failed", "[ERROR]", "couldn't"))), msgs[0])
    detail = next((m for m in reversed(msgs) if m is not head and _ENROOT_ERROR.search(m)), None)
    return f"pyxis: {head}" + (f": {detail}" if detail else "")


_LOG_NAME = re.compile(r"^(sbatch-\d+\.out|\d+-[\w.-]+\.log)$")


def _frames(out: bytes) -> dict[str, bytes]:
    """Parse `@@bridge-launch N NAME\\n` + N bytes, repeated. A frame cut short (a log truncated
    between stat and read) ends the parse: what came before it is kept, the rest is read next time."""
    got, pos = {}, 0
    while pos < len(out):
        nl = out.find(b"\n", pos)
        head = out[pos:nl].split(b" ", 2) if nl >= 0 else []
        if len(head) != 3 or head[0] != b"@@bridge-launch" or not head[1].isdigit():
            break
        n, name = int(head[1]), head[2].decode("utf-8", "replace")
        body = out[nl + 1 : nl + 1 + n]
        if len(body) != n or not _LOG_NAME.match(name):
            break
        got[name] = body
        pos = nl + 1 + n
    return got
