"""The `lepton` backend: DGX Cloud Lepton batch jobs through the leptonai SDK client
(the client nemo-run's LeptonExecutor uses), with the same job spec LeptonExecutor builds
(resource shape, node-group affinity, completions = parallelism = nodes, intra-job
communication, envs, mounts, image pull secrets, secrets as `secret_name_ref`).

Differences from LeptonExecutor, on purpose:
- the container command is a self-contained script (rank variables from Lepton's own
  environment); nothing is fetched from the internet at start;
- the spec is rendered here as a plain dict (instant, no import), and submit posts exactly
  that dict through the SDK's APIClient after validating it with the SDK's LeptonJob model;
- every call has a timeout and transient failures (5xx, connection errors) are retried;
- no nemo-run Experiment: nothing is written to NEMORUN_HOME (no `.lepton_jobs.json`).

Credentials: LEPTON_WORKSPACE_ID / LEPTON_WORKSPACE_TOKEN / LEPTON_WORKSPACE_URL (names
configurable in the profile) or the `lep login` record; never command-line flags.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from bridge_launch.backends import cloud
from bridge_launch.backends.base import Artifact, header, read_log_files
from bridge_launch.core import paths
from bridge_launch.core.errors import LaunchError, UsageError
from bridge_launch.plan import topology

# Lepton sets these in every worker of a job with intra-job communication: the worker index and
# the stable DNS name of worker 0. Lepton's own launch script (leptonai/scripts
# lepton_env_to_pytorch.sh, which nemo-run 0.11.1's LeptonExecutor downloads at start) builds it
# as ${LEPTON_JOB_WORKER_PREFIX}-0.${LEPTON_SUBDOMAIN} since 55412730 (2025-07-21, "update lepton
# preset environment variables"); before that (f67164d2 and earlier) as
# ${LEPTON_JOB_SERVICE_PREFIX:-$LEPTON_JOB_NAME}-0.${LEPTON_SUBDOMAIN:-$LEPTON_JOB_NAME-job-svc}
# .ws-${LEPTON_WORKSPACE_ID}.svc.cluster.local. The current names come first, the old ones are
# the fallback (older workspaces); inlined, so that nothing is downloaded at start.
RANK_PRELUDE = [
    'export NODE_RANK="${LEPTON_JOB_WORKER_INDEX:-0}"',
    'if [ -n "${LEPTON_JOB_WORKER_PREFIX:-}" ] && [ -n "${LEPTON_SUBDOMAIN:-}" ]; then',
    '  export MASTER_ADDR="${LEPTON_JOB_WORKER_PREFIX}-0.${LEPTON_SUBDOMAIN}"',
    'elif [ -n "${LEPTON_JOB_SERVICE_PREFIX:-${LEPTON_JOB_NAME:-}}" ]; then',
    '  service_prefix="${LEPTON_JOB_SERVICE_PREFIX:-$LEPTON_JOB_NAME}"',
    '  subdomain="${LEPTON_SUBDOMAIN:-${LEPTON_JOB_NAME:-}-job-svc}"',
    '  export MASTER_ADDR="${service_prefix}-0.${subdomain}'
    '${LEPTON_WORKSPACE_ID:+.ws-${LEPTON_WORKSPACE_ID}.svc.cluster.local}"',
    "else",
    '  export MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"  # a single worker outside Lepton',
    "fi",
    'export MASTER_PORT="${MASTER_PORT:-29400}"',
]

NODE_GROUP_ID = cloud.LOOKUP.format("node-group-id")
NODE_IDS = cloud.LOOKUP.format("node-ids")

_STATES = {
    "Queueing": "PENDING",
    "Awaiting": "PENDING",
    "Starting": "PENDING",
    "PendingRetry": "PENDING",
    "Restarting": "PENDING",
    "Running": "RUNNING",
    "Completed": "COMPLETED",
    "Failed": "FAILED",
    "Stopping": "RUNNING",
    "Stopped": "CANCELLED",
    "Deleting": "CANCELLED",
    "Deleted": "CANCELLED",
}


def _mounts(s: dict) -> list:
    return [dict(m) for m in s.get("mounts", [])]


def segment_config(job) -> dict | None:
    """Lepton's NVL72 placement: "Workers within the same segment are scheduled into one NVL72
    domain" (leptonai 0.27.3 cli/job.py --segment-count; spec field LeptonJobSegmentConfig
    count_per_segment, api/v1/types/job.py). The segment size follows the same rule as Slurm's
    --segment (plan/topology.segment_rule: every NVLink-bound group inside one segment). The CLI
    accepts only a segment count
    in [1, workers) that divides the workers, i.e. a segment of 2 or more workers; a job of one
    worker, or one whose only fitting divisor is 1 (a prime worker count above the domain size),
    gets none: no placement keeps its workers together."""
    domain = int(job.profile.get("nvlink_domain_nodes") or 0)
    if not job.scheduler.get("segment", True) or domain <= 1 or job.nodes <= 1:
        return None
    size = topology.segment_of(job)
    return {"count_per_segment": size} if size and size > 1 else None


def request(job) -> dict:
    """The body of POST /jobs, with node-group lookups as placeholders."""
    s = job.scheduler
    if not job.container:
        raise UsageError(
            f"cluster '{job.cluster}': Lepton jobs need a container image (container_image or --container)"
        )
    envs = [{"name": k, "value": v} for k, v in cloud.plain_env(job).items()]
    envs += [{"name": k, "value_from": {"secret_name_ref": ref}} for k, ref in cloud.secret_refs(job).items()]
    spec = {
        "resource_shape": s["resource_shape"],
        "affinity": {"allowed_dedicated_node_groups": [NODE_GROUP_ID], "allowed_nodes_in_node_group": [NODE_IDS]},
        "container": {"image": job.container, "command": ["/bin/bash", "-c", cloud.job_script(job, RANK_PRELUDE)]},
        "shared_memory_size": s.get("shared_memory_size") or 65536,
        "completions": job.nodes,
        "parallelism": job.nodes,
        "envs": envs,
        "mounts": _mounts(s),
        "image_pull_secrets": list(s.get("image_pull_secrets", [])),
        "intra_job_communication": True,
    }
    segment = segment_config(job)
    if segment:
        spec["segment_config"] = segment
    if s.get("can_be_preempted"):
        spec["queue_config"] = {"priority_class": s.get("queue_priority") or "mid-4000", "can_be_preempted": True}
    if s.get("node_reservation"):
        spec["reservation_config"] = {"reservation_id": s["node_reservation"]}
    name = cloud.job_name(job.run_id)
    return {"metadata": {"id": name, "name": name}, "spec": spec}


def secret_origins(job) -> dict:
    mapped = job.scheduler.get("secret_refs") or {}
    return {
        name: (
            f"Lepton secret {ref!r} (secret_name_ref): read by the platform when the job starts",
            f"cluster:{job.cluster} secret_refs" if name in mapped else "",
        )
        for name, ref in cloud.secret_refs(job).items()
    }


def render(job) -> Artifact:
    body = request(job)
    text = (
        f"// {header(job)}\n// POST {{workspace}}/jobs  (node group '{job.scheduler['node_group']}': its id and node "
        "ids "
        f"are looked up at submit)\n" + cloud.pretty(body, job.secrets)
    )
    return Artifact("lepton-job", text, f"launch/{job.run_id}.lepton.json")


# ---------------------------------------------------------------- the client


def _client(s: dict):
    from leptonai.api.v2.client import APIClient

    ws = os.environ.get(s.get("workspace_env") or "LEPTON_WORKSPACE_ID")
    tok = os.environ.get(s.get("token_env") or "LEPTON_WORKSPACE_TOKEN")
    url = os.environ.get("LEPTON_WORKSPACE_URL")
    try:
        client = APIClient(workspace_id=ws, auth_token=tok, url=url)
    except Exception as exc:  # noqa: BLE001 - the SDK raises several kinds for "not logged in"
        raise LaunchError(
            f"Lepton credentials: {exc} (set LEPTON_WORKSPACE_ID/LEPTON_WORKSPACE_TOKEN or run `lep login`)"
        ) from None
    client._timeout = float(s.get("request_timeout") or 30)
    return client


def _transient(exc):
    import requests
    from leptonai.api.v1.api_resource import ClientError, ServerError

    if isinstance(exc, ServerError):
        return f"HTTP {exc.response.status_code}"
    if isinstance(exc, requests.Timeout):
        return "request timed out"
    if isinstance(exc, requests.ConnectionError):
        return f"connection failed ({type(exc).__name__})"
    if isinstance(exc, ClientError):
        code = exc.response.status_code
        if code in (401, 403):
            raise LaunchError(
                f"Lepton rejected the workspace credentials (HTTP {code}); check LEPTON_WORKSPACE_TOKEN "
                "or run `lep login` again"
            ) from None
        raise LaunchError(f"Lepton refused the request (HTTP {code}): {exc.response.text[:300]}") from None
    return None


class Backend:
    name = "lepton"

    def __init__(self):
        self.notes: list[str] = []

    def _call(self, s, what, fn):
        return cloud.retrying(
            f"Lepton {what}",
            fn,
            retries=int(s.get("retries") or 3),
            wait=float(s.get("retry_wait", 2.0)),
            transient=_transient,
        )

    def _lookups(self, client, s) -> dict:
        groups = self._call(s, "list node groups", client.nodegroup.list_all)
        match = [g for g in groups if g.metadata.name == s["node_group"] or g.metadata.id_ == s["node_group"]]
        if not match:
            names = ", ".join(sorted(g.metadata.name or "?" for g in groups)) or "none"
            raise LaunchError(f"Lepton node group '{s['node_group']}' not found in the workspace (there: {names})")
        gid = match[0].metadata.id_
        nodes = self._call(s, "list nodes", lambda: client.nodegroup.list_nodes(gid))
        return {NODE_GROUP_ID: gid, NODE_IDS: sorted(n.metadata.id_ for n in nodes)}

    def _create(self, client, s, body: dict) -> str:
        from leptonai.api.v1.types.job import LeptonJob

        LeptonJob(**body)  # the SDK's own schema check before anything is sent
        resp = self._call(
            s, "create job", lambda: client.job.ensure_type(client.job._post("/jobs", json=body), LeptonJob)
        )
        return resp.metadata.id_ or body["metadata"]["id"]

    def _wait(self, client, s, job_id: str, timeout: float) -> str:
        deadline = time.time() + timeout
        while True:
            j = self._call(s, "get job", lambda: client.job.get(job_id))
            state = j.status.state.value if j.status and j.status.state else "UNK"
            if state in ("Completed", "Failed", "Stopped", "Deleted"):
                return state
            if time.time() > deadline:
                raise LaunchError(f"Lepton data-mover job {job_id} did not finish within {timeout:.0f}s")
            time.sleep(float(s.get("poll_interval", 5.0)))

    def stage(self, job, files: dict, *, new_dir: bool) -> None:  # noqa: ARG002 - the Backend protocol's signature
        """A busybox data-mover job writes the run's files into the run dir on the shared
        storage (as LeptonExecutor.move_data does, but without deleting the dir)."""
        s = job.scheduler
        client = _client(s)
        looked = self._lookups(client, s)
        self._lookups_cache = looked
        cmd = cloud.stage_commands(job.run_dir, files)[0]
        name = cloud.job_name(job.run_id, "bl-stage")
        body = {
            "metadata": {"id": name, "name": name},
            "spec": {
                "resource_shape": s.get("mover_resource_shape") or "cpu.small",
                "affinity": {
                    "allowed_dedicated_node_groups": [NODE_GROUP_ID],
                    "allowed_nodes_in_node_group": [NODE_IDS],
                },
                "container": {"image": "busybox:1.37.0", "command": ["sh", "-c", cmd]},
                "completions": 1,
                "parallelism": 1,
                "mounts": _mounts(s),
            },
        }
        jid = self._create(client, s, cloud.fill(body, looked))
        state = self._wait(client, s, jid, float(s.get("mover_timeout") or 600))
        try:
            self._call(s, "delete data-mover job", lambda: client.job.delete(jid))
        except LaunchError:
            pass
        if state != "Completed":
            raise LaunchError(f"Lepton data-mover job {jid} ended {state}; the run dir {job.run_dir} was not written")

    def unstage(self, job) -> None:
        pass  # the run dir lives on the platform's storage; a failed submit leaves at most its files there

    def submit(self, job, run, artifact, secrets: dict) -> list[str]:  # noqa: ARG002 - the Backend protocol's signature
        s = job.scheduler
        client = _client(s)
        looked = getattr(self, "_lookups_cache", None) or self._lookups(client, s)
        return [self._create(client, s, cloud.fill(request(job), looked))]

    def status(self, runs: list) -> dict:
        out = {}
        by_profile: dict = {}
        for run, job in runs:
            out[run.run_id] = self._status_one(run, job, by_profile)
        return out

    def _status_one(self, run, job, clients) -> dict:
        if not run.job_ids:
            return {"state": "FAILED", "reason": "no Lepton job id recorded"}
        s = job.scheduler
        client = clients.setdefault(id(s), _client(s))
        try:
            j = self._call(s, "get job", lambda: client.job.get(run.job_ids[-1]))
        except LaunchError as exc:
            if "HTTP 404" in str(exc):
                st = "CANCELLED" if run.info.get("cancelled") else "UNKNOWN"
                return {"state": st, "reason": "the Lepton job no longer exists"}
            raise
        state = j.status.state.value if j.status and j.status.state else "UNK"
        mapped = _STATES.get(state, "UNKNOWN")
        reason = "" if mapped in ("RUNNING", "COMPLETED") else f"Lepton: {state}"
        if state == "Running" and (j.status.ready or 0) < (j.status.active or 0):
            mapped, reason = "PENDING", f"Lepton: Running, {j.status.ready}/{j.status.active} workers ready"
        if mapped == "CANCELLED" and not run.info.get("cancelled"):
            mapped = "FAILED"
        out = {"state": mapped, "reason": reason, "platform_state": state}
        if mapped in ("RUNNING", "COMPLETED", "FAILED"):  # live metrics from the replica logs it serves
            out.update(cloud.log_progress(self, run, job))
        return out

    def log_texts(self, run, job, tail: int | None = None) -> list:
        return read_log_files(self.log_files(run, job), tail)

    def log_files(self, run, job) -> list[Path]:
        """Lepton serves each replica's log over its API: fetch them into the local log
        cache (replica 0 first) and return those files."""
        cache = cloud.log_cache(run.run_id)
        if not run.job_ids:
            return []
        s = job.scheduler
        client = _client(s)
        jid = run.job_ids[-1]
        try:
            replicas = self._call(s, "list replicas", lambda: client.job.get_replicas(jid))
        except LaunchError as exc:
            note = cache / "where.log"
            paths.write_private(note, f"bridge-launch: could not list the replicas of Lepton job {jid}: {exc}\n")
            return [note]
        files = []
        for rep in sorted(replicas, key=lambda r: r.metadata.id_ or ""):
            rid = rep.metadata.id_
            try:
                text = "".join(
                    self._call(
                        s,
                        "get log",
                        lambda rid=rid: list(client.job.get_log(jid, rid, timeout=int(s.get("request_timeout") or 30))),
                    )
                )
            except LaunchError:
                continue
            path = cache / f"{rid}.log"
            paths.write_private(path, text)
            files.append(path)
        return files

    def cancel(self, run, job) -> None:
        if not run.job_ids:
            return
        s = job.scheduler
        client = _client(s)
        try:
            self._call(s, "delete job", lambda: client.job.delete(run.job_ids[-1]))
        except LaunchError as exc:
            if "HTTP 404" not in str(exc):
                raise
