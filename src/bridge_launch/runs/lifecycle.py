"""Submitting a resolved job and managing the run afterwards (backend-independent)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from bridge_launch import backends
from bridge_launch.backends.base import Tree, needs_workload, workload_files
from bridge_launch.core import paths
from bridge_launch.core.errors import UsageError
from bridge_launch.resolve.resolver import BRIDGE_SRC_DIR, ResolvedJob, amend
from bridge_launch.runs.records import job_json as job_json
from bridge_launch.runs.records import load_job as load_job
from bridge_launch.runs.registry import TERMINAL, Registry, Run
from bridge_launch.spec import clusters, config_keys


def _launch(
    reg: Registry, job: ResolvedJob, run: Run, *, new_dir: bool, code: dict | None = None, info: dict | None = None
) -> Run:
    """Stage the run's files in its run dir (through the backend: the dir may be on a remote
    cluster), hand the artifact to the backend, record the job ids. On any failure the
    record (and a run dir this call created) is removed again."""
    secrets = {n: os.environ[n] for n in job.secrets if n in os.environ}
    be = backends.backend(job.backend)
    created = False
    try:
        artifact = backends.render(job)  # the one render of this submit
        files = {f"launch/{run.run_id}.json": job_json(job), **artifact.staged()}
        if artifact.waits_for:  # it waits for the canary: staged once its id is filled in (runs/canary.py)
            del files[artifact.filename]
        # a chain's segments measure with step_times.py; the health step is node_health.py; a recipe
        # whose function bridge-launch ships starts at bridge_recipe_entry.py; a Megatron-Bridge job on
        # Slurm says which revision its image runs (image_revision.py)
        if needs_workload(job):
            files.update(workload_files())
        if job.canary:  # its spec and (Slurm) its own script
            from bridge_launch.runs import canary

            files.update(canary.files(job, artifact))
        if job.bridge_src and new_dir:  # a resume runs the tree already in the run dir
            from bridge_launch.runs import codepack

            packed = codepack.pack(job.bridge_src)
            files[BRIDGE_SRC_DIR] = Tree(packed.tar)
            code = {
                "bridge_src": job.bridge_src,
                "bridge_commit": packed.commit,
                "bridge_dirty": packed.dirty,
                "bridge_files": packed.files,
            }
        paths.write_private(reg.jobs_dir() / f"{run.run_id}.json", job_json(job))
        be.stage(job, files, new_dir=new_dir)
        created = new_dir
        run = reg.update(run.run_id, run_dir=job.run_dir)
        extra: dict = {}
        if job.canary:  # Slurm: the canary first, the job waiting for it; elsewhere its first step
            job_ids, extra = canary.submit(be, job, run, artifact, secrets)
        else:
            job_ids = be.submit(job, run, artifact, secrets)
    except BaseException:
        reg.delete(run.run_id)
        (reg.jobs_dir() / f"{run.run_id}.json").unlink(missing_ok=True)
        if created:
            be.unstage(job)
        raise
    state = "RUNNING" if job.backend == "local" else "PENDING"
    info = dict(run.info, **(info or {}), container=job.container, **(code or {}), **extra)
    if be.notes:  # the backend's warnings and notes of this submit, for the CLI to say
        info["submit_notes"] = list(be.notes)
    if job.image:
        info.update(image=job.image["ref"], image_digest=job.image["digest"])
    run = reg.update(run.run_id, state=state, job_ids=job_ids, info=info)
    _write_record(run)
    return run


RECORD_SUFFIX = ".run.json"  # launch/<run id>.run.json: the run's registry record, for `import`


def _write_record(run: Run) -> None:
    """The run's registry record beside its resolved job, where the run dir is on this machine's
    filesystem, so `bridge-launch import RUN_DIR` can register it again after a prune."""
    launch_dir = Path(run.run_dir) / "launch"
    if launch_dir.is_dir():
        try:
            paths.write_private(launch_dir / f"{run.run_id}{RECORD_SUFFIX}", json.dumps(run.to_dict(), indent=2) + "\n")
        except OSError:
            pass  # the run is submitted; only a later import would miss its job ids


def import_run_dir(reg: Registry, run_dir: str) -> list[tuple[str, str]]:
    """Register the runs a run dir holds (launch/<run id>.json, the resolved job each was submitted
    with, and the record submit wrote beside it) that the registry does not know, e.g. after a
    prune; then ask their backend for their state. Returns [(run id, what happened)]."""
    root = Path(run_dir).expanduser().resolve()
    jobs = (
        sorted(
            (p for p in (root / "launch").glob("*.json") if not p.name.endswith(RECORD_SUFFIX)),
            key=lambda p: p.stat().st_mtime,
        )
        if (root / "launch").is_dir()
        else []
    )
    if not jobs:
        raise UsageError(
            f"{run_dir} is not a run dir: it has no launch/<run id>.json (a run dir is "
            "<job_root>/<run id>, as 'bridge-launch status RUN' shows)"
        )
    out, added, previous = [], [], None
    for path in jobs:
        run_id = path.stem
        try:
            job = ResolvedJob.from_dict(json.loads(path.read_text()))
        except (OSError, ValueError, TypeError) as exc:
            raise UsageError(f"{path}: not a resolved job bridge-launch wrote ({exc})") from None
        record_path = path.with_name(run_id + RECORD_SUFFIX)
        try:
            record = json.loads(record_path.read_text())
        except (OSError, ValueError):
            record = {
                "state": "UNKNOWN",
                "job_ids": [],
                "info": {},
                "resumed_from": previous,
                "chain": root.name,
                "created": path.stat().st_mtime,
            }
        record.update(run_id=run_id, recipe=job.recipe, cluster=job.cluster, backend=job.backend, run_dir=str(root))
        previous = run_id
        if reg.get(run_id):
            out.append((run_id, "already registered"))
            continue
        paths.write_private(reg.jobs_dir() / f"{run_id}.json", path.read_text())
        reg.insert(record)
        info = record.get("info") or {}
        if info.get("experiment"):  # its experiment comes back with it (prune forgets an emptied one)
            reg.ensure_experiment(info["experiment"], record.get("created") or time.time())
            reg.add_to_experiment(info["experiment"], run_id, int(info.get("position", 0)), info.get("member", ""))
        added.append((run_id, record.get("updated") or 0.0))
    be_runs = refresh(reg, [reg.get(i) for i, _ in added])
    for run, (_, updated) in zip(be_runs, added, strict=True):
        # its age is the run's, not the import's: the record's, or its logs' last write if later
        mtimes = [updated]
        try:
            logs = log_files(backends.backend(run.backend), run)
        except Exception:  # noqa: BLE001 - a remote cluster out of reach: the record's time stands
            logs = []
        for f in logs:
            try:
                mtimes.append(os.path.getmtime(f))
            except (OSError, TypeError):
                continue
        reg.set_updated(run.run_id, max(mtimes) or time.time())
        out.append((run.run_id, f"imported ({run.state})"))
    return out


def _check_secrets(job: ResolvedJob) -> None:
    if job.backend in ("lepton", "dgxcloud"):
        return  # there secrets are references to the platform's own secret store, not local values
    sourced = getattr(job, "secret_sources", None) or {}  # read on the cluster, not from here
    missing = [n for n in job.required_secrets if n not in sourced and not os.environ.get(n)]
    if missing:
        raise UsageError(f"secret {missing[0]} is required by cluster '{job.cluster}' but not set in your environment")


def submit(job: ResolvedJob, registry: Registry | None = None, *, member: dict | None = None) -> Run:
    """Submit a new run; `member` ({"experiment", "member", "position"}) makes it an experiment's,
    in the registry and in the record an import reads back."""
    if job.refusals:
        raise UsageError(job.refusals[0])
    _check_secrets(job)
    reg = registry or Registry()
    run = reg.reserve(job.recipe, job.cluster, job.backend)
    run = _launch(reg, job.with_run_id(run.run_id), run, new_dir=True, info=member)
    if member:
        reg.add_to_experiment(member["experiment"], run.run_id, member["position"], member["member"])
    return run


def resume(reg: Registry, run: Run, overrides=()) -> Run:
    """The same resolved job again (plus overrides), loading the run's own checkpoints,
    in the same run dir, as a new run in the same chain. Refused while any run of the
    chain is queued or running; of two concurrent resumes exactly one wins."""
    chain = refresh(reg, reg.chain(run.chain))
    old = load_job(reg, run)
    job = amend(old, overrides)
    if job.refusals:
        raise UsageError(job.refusals[0])
    _check_resumable(run, chain, old, job)
    if job.dataset_kind == "energon" and data_parallel(old) != data_parallel(job):
        raise UsageError(
            f"resume would change the data-parallel size from {data_parallel(old)} to "
            f"{data_parallel(job)}; Energon's saved loader state needs the same DP size"
        )
    _check_secrets(job)
    new = reg.reserve(job.recipe, job.cluster, job.backend, resumed_from=run.run_id, chain=run.chain)
    code = {k: v for k, v in run.info.items() if k.startswith("bridge_")} or None
    return _launch(reg, job.for_run(new.run_id), new, new_dir=False, code=code)


def reached(run: Run, chain: list[Run], job: ResolvedJob) -> tuple[int | None, str]:
    """The iteration a resume would start from, and how it is known: the checkpoint tracker where
    the run dir is readable here; else the furthest step a completed run of the chain logged."""
    from bridge_launch.workloads import trainer_protocol as P

    save = job.config.get("checkpoint.save")
    if isinstance(save, str) and save and os.path.isdir(run.run_dir):
        try:
            text = (Path(save) / P.TRACKER).read_text().strip()
        except OSError:
            return 0, "no checkpoint"
        return (int(text), "its newest checkpoint") if text.isdigit() else (None, "")
    ended = [r for r in chain if r.state in ("COMPLETED", "STOPPED")]
    done = [r.info.get("step") for r in ended if isinstance(r.info.get("step"), int)]
    return (max(done), "the last step it logged") if done else (None, "")


def _check_resumable(run: Run, chain: list[Run], old: ResolvedJob, job: ResolvedJob) -> None:
    """Before a resume is submitted: refuse one that would train nothing (the checkpoints already
    reach train.train_iters) and one whose overrides change the model's shape (no checkpoint of
    the run would load: trainer_protocol.shape_keys)."""
    from bridge_launch.workloads import trainer_protocol as P

    keys = P.shape_keys(old.config, learned_positions=old.workload == "smoke")
    for key in keys:
        if old.config.get(key) != job.config.get(key):
            was = old.config.get(key, "(unset)")
            raise UsageError(
                f"resume {run.run_id}: {key}={job.config.get(key, '(unset)')} changes the model's shape "
                f"(its checkpoints hold {key}={was}), so no checkpoint of the run would load; submit a "
                f"new run for a new shape, or resume without that override"
            )
    iters = job.config.get("train.train_iters")
    if old.backend == "local" and not os.path.isdir(run.run_dir):
        raise UsageError(
            f"resume {run.run_id}: its run dir {run.run_dir} is gone (moved or deleted), and with it its "
            f"checkpoints; a resume would train from scratch. Move it back, or submit {run.recipe} again"
        )
    step, how = reached(run, chain, old)
    if step == 0 and how == "no checkpoint" and all(r.finished for r in chain):  # else the chain is busy
        raise UsageError(
            f"resume {run.run_id}: no checkpoint in {old.config.get('checkpoint.save')} (the run ended "
            f"before its first save), so a resume would train from scratch; submit {run.recipe} again instead"
        )
    if isinstance(iters, int) and step is not None and step >= iters:
        raise UsageError(
            f"resume {run.run_id}: the run already reached iteration {step} ({how}) and "
            f"train.train_iters={iters}, so a resume would train nothing; to train further, raise it: "
            f"bridge-launch resume {run.run_id} train.train_iters=N (N > {step})"
        )


def data_parallel(job: ResolvedJob) -> int | None:
    tp, pp, cp, _, _ = config_keys.sizes(job.config)
    if None in (tp, pp, cp) or job.world_size % (tp * pp * cp):
        return None
    return job.world_size // (tp * pp * cp)


def find_run(reg: Registry, ref: str) -> Run:
    hits = reg.find(ref)
    if not hits:
        raise UsageError(f"no run '{ref}'; list runs with 'bridge-launch status'")
    if len(hits) > 1:
        raise UsageError(f"'{ref}' matches several runs ({', '.join(r.run_id for r in hits[:4])}); give more of the id")
    return hits[0]


def failure_reason(st: dict) -> str:
    """A failed run's reason leads with the first error line of the failing rank (logread, read by
    the backend's status from the run's logs) rather than a bare exit code."""
    reason, error = st.get("reason", ""), st.get("error")
    if st.get("state") != "FAILED" or not error or error in reason:
        return reason
    if not reason or reason.startswith("exit code"):
        return f"{error} ({reason})" if reason else error
    return reason


def refresh(reg: Registry, runs: list[Run]) -> list[Run]:
    """Ask each backend once for the state of its unfinished runs; record changes."""
    by_backend: dict[str, list[Run]] = {}
    for run in runs:
        if run.state not in TERMINAL and run.state != "SUBMITTING":
            by_backend.setdefault(run.backend, []).append(run)
    changed = {}
    for name, group in by_backend.items():
        current = {r.run_id: r for r in group}
        be = backends.backend(name)
        jobs = {r.run_id: load_job(reg, r) for r in group}
        for run_id, st in be.status([(r, jobs[r.run_id]) for r in group]).items():
            bad = st.pop("bad_node", None)
            found = [bad] if bad and st.get("state") == "FAILED" else []  # a node's own fault
            found += st.pop("bad_nodes", [])  # the nodes a retried job's attempts left out
            recorded = list(current[run_id].info.get("bad_nodes_recorded", []))
            for b in found:  # later submits leave them out; each recorded once per run
                if b["node"] in recorded:
                    continue
                from bridge_launch.runs import bad_nodes

                hours = jobs[run_id].profile.get("bad_node_hours", clusters.BAD_NODE_HOURS)
                bad_nodes.record(current[run_id].cluster, b["node"], b["evidence"], run_id, hours)
                recorded.append(b["node"])
            if recorded:
                st["bad_nodes_recorded"] = recorded
            if bad and bad in found:
                st["bad_node"] = bad["node"]
            if current[run_id].info.get("canary"):  # the canary's verdict; FAILED when it failed
                from bridge_launch.runs import canary

                st = canary.settle(be, current[run_id], st)
            extra = {"job_ids": st["job_ids"]} if "job_ids" in st else {}
            info = dict(
                current[run_id].info, **{k: v for k, v in st.items() if k not in ("state", "reason", "job_ids")}
            )
            changed[run_id] = reg.update(run_id, state=st["state"], reason=failure_reason(st), info=info, **extra)
    return [changed.get(r.run_id, r) for r in runs]


def cancel(reg: Registry, run: Run) -> Run:
    run = refresh(reg, [run])[0]  # a chain may have queued segments since we last looked
    if run.state in TERMINAL:
        return run
    info = dict(run.info, cancelled=True)
    reg.update(run.run_id, info=info)
    be = backends.backend(run.backend)
    if run.info.get("canary"):
        from bridge_launch.runs import canary

        canary.cancel(be, run)
    job = load_job(reg, run)
    be.cancel(reg.get(run.run_id), job)
    try:  # record what the backend now says of each job (segments), under the run's final state
        st = be.status([(reg.get(run.run_id), job)]).get(run.run_id, {})
        info = dict(info, **{k: v for k, v in st.items() if k not in ("state", "reason", "job_ids")})
    except Exception:  # noqa: BLE001 - the cancel itself succeeded; details can wait for the next status
        pass
    run = reg.update(run.run_id, state="CANCELLED", reason="cancelled by user", info=info)
    _write_record(run)  # an import later knows it was cancelled, not failed
    return run


def log_files(be, run) -> list:
    """The run's logs; with a canary on Slurm, the canary's first."""
    if run.info.get("canary"):
        from bridge_launch.runs import canary

        return canary.log_files(be, run)
    return be.log_files(run, load_job(Registry(), run))


class Tail:
    """Follows a run's log files, yielding new complete lines. `files` is a callable, asked
    again on every read, so logs that appear later (other nodes, later segments) are picked up."""

    def __init__(self, files):
        self.files = files
        self.pos = {}

    def lines(self):
        for path in self.files():
            try:
                with open(path, "rb") as fh:
                    fh.seek(self.pos.get(path, 0))
                    data = fh.read()
            except FileNotFoundError:
                continue
            cut = data.rfind(b"\n") + 1
            self.pos[path] = self.pos.get(path, 0) + cut
            for line in data[:cut].decode("utf-8", "replace").splitlines():
                yield line


def wait_until_done(
    reg: Registry, run: Run, on_line=None, poll: float = 0.5, status_every: float = 2.0, tail: Tail | None = None
) -> Run:
    """Stream the run's log lines to on_line until it reaches a final state. Logs are read
    every `poll` seconds; the backend (squeue, an API) is asked every `status_every`. `tail`:
    a Tail that already read part of the logs (their lines are not sent again)."""
    be = backends.backend(run.backend)
    tail = tail or Tail(lambda: log_files(be, reg.get(run.run_id)))
    emit = on_line or (lambda _line: None)
    asked = 0.0
    while True:
        for line in tail.lines():
            emit(line)
        if time.monotonic() - asked >= status_every:
            asked = time.monotonic()
            run = refresh(reg, [reg.get(run.run_id)])[0]
            if run.state in TERMINAL:
                for line in tail.lines():
                    emit(line)
                return run
        time.sleep(poll)
