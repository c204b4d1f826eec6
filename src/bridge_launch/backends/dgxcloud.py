"""The `dgxcloud` backend: DGX Cloud (Run:ai) workloads over its REST API, with the
endpoints and payload nemo-run's DGXCloudExecutor uses (token, org-unit/projects,
workloads/workspaces as the data mover, workloads/distributed or workloads/trainings).

Differences from DGXCloudExecutor, on purpose:
- the workload command is a self-contained script given inline (`command`/`args` in the
  spec, as DGXCloudExecutor's `custom_spec` would override them), so no launch script has
  to be copied first; the run's files still go through a workspace data mover;
- the payload is rendered here (instant) and sent as is; tests check it is what
  DGXCloudExecutor.create_training_job sends for the same settings except the pod count
  (distributed_pods: nemo-run's numWorkers = nodes makes one pod too many);
- timeouts on every request, retries on 5xx / connection errors, one clear error on a
  rejected login; the client secret only ever travels in the token request body and is
  never logged (DGXCloudExecutor logs payloads and, in a dry run, prints the executor);
- cancel is `POST .../suspend` (Run:ai's documented method; nemo-run sends GET).

Credentials: the client id and secret come from the environment variables the profile
names (client_id_env / client_secret_env); never command-line flags.
"""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

from bridge_launch.backends import cloud
from bridge_launch.backends.base import Artifact, header, read_log_files
from bridge_launch.core import paths
from bridge_launch.core.errors import LaunchError, UsageError

# The Run:ai PyTorch (Kubeflow training operator) sets these in every pod: PET_* for
# torchrun, MASTER_ADDR/MASTER_PORT for the master pod, RANK = pod index.
RANK_PRELUDE = [
    'export NODE_RANK="${PET_NODE_RANK:-${RANK:-0}}"',
    'export MASTER_ADDR="${PET_MASTER_ADDR:-${MASTER_ADDR:-127.0.0.1}}"',
    'export MASTER_PORT="${PET_MASTER_PORT:-${MASTER_PORT:-29500}}"',
    "unset RANK WORLD_SIZE",  # torchrun sets them per worker
]

PROJECT_ID = cloud.LOOKUP.format("project-id")
CLUSTER_ID = cloud.LOOKUP.format("cluster-id")
MAX_ARGS_CHARS = 9500  # the API's limit on a workload's args (DGXCloudExecutor.MAX_ARGS_CHARS)

_STATES = {
    "Creating": "PENDING",
    "Initializing": "PENDING",
    "Resuming": "PENDING",
    "Pending": "PENDING",
    "Unknown": "PENDING",
    "Running": "RUNNING",
    "Updating": "RUNNING",
    "Stopping": "RUNNING",
    "Terminating": "RUNNING",
    "Deleting": "CANCELLED",
    "Stopped": "CANCELLED",
    "Degraded": "FAILED",
    "Failed": "FAILED",
    "Completed": "COMPLETED",
}


def _secret_env(job) -> list:
    """Secrets by reference: a Kubernetes secret (name, key) per variable. A profile ref is
    'secret-name' or 'secret-name:key' (key defaults to the variable's name). The entry is Run:ai's
    EnvironmentVariable schema, {"name", "value" | "secret": {"name", "key"}, "exclude"}, as its REST
    reference (api-docs.run.ai, 2.18 and latest, environment assets) shows it."""
    out = []
    for var, ref in cloud.secret_refs(job).items():
        name, _, key = ref.partition(":")
        if name == var:
            name = var.lower().replace("_", "-")
        out.append({"name": var, "secret": {"name": name, "key": key or var}})
    return out


def secret_origins(job) -> dict:
    mapped = job.scheduler.get("secret_refs") or {}
    return {
        e["name"]: (
            f"Kubernetes secret {e['secret']['name']}, key {e['secret']['key']}: read by Run:ai when the "
            "workload starts",
            f"cluster:{job.cluster} secret_refs" if e["name"] in mapped else "",
        )
        for e in _secret_env(job)
    }


def workload_kind(nodes: int) -> str:
    return "distributed" if nodes > 1 else "trainings"


def request(job) -> dict:
    """The body of POST /workloads/{distributed|trainings}; project and cluster ids are
    looked up at submit."""
    s = job.scheduler
    if not job.container:
        raise UsageError(
            f"cluster '{job.cluster}': DGX Cloud workloads need a container image (container_image or --container)"
        )
    script = cloud.job_script(job, RANK_PRELUDE)
    spec = {
        "command": "bash -c",
        "args": shlex.quote(script),
        "image": job.container,
        "compute": {"gpuDevicesRequest": job.gpus_per_node, "largeShmRequest": True},
        "storage": {"pvc": [dict(p) for p in s.get("pvcs", [])]},
        "environmentVariables": [{"name": k, "value": v} for k, v in cloud.plain_env(job).items()] + _secret_env(job),
    }
    body = {
        "name": cloud.job_name(job.run_id),
        "useGivenNameAsPrefix": True,
        "projectId": PROJECT_ID,
        "clusterId": CLUSTER_ID,
        "spec": spec,
    }
    if job.nodes > 1:
        spec.update(distributed_pods(job.nodes, s.get("distributed_framework") or "PyTorch"))
        body["masterSpecSameAsWorker"] = True
    return body


def distributed_pods(nodes: int, framework: str) -> dict:
    """The spec fields that make a distributed workload exactly `nodes` pods, one torchrun each.

    Run:ai's distributed PyTorch workload is a master pod plus `numWorkers` worker pods: its own
    tutorial (run-ai-docs.nvidia.com self-hosted/tutorials/training-tutorials/distributed-pytorch:
    "Number of workers: 1 - Configured to create two pods (1 master and 1 worker) ... the number
    of workers is set to one fewer than the total number of nodes"; its REST example sends
    "masterSpecSameAsWorker": true with "numWorkers": 1 for two nodes). The Kubeflow training
    operator then numbers the pods for torchrun: the master RANK 0, worker i RANK i+1, WORLD_SIZE
    their total, MASTER_ADDR the master's service (training-operator pkg/controller.v1/pytorch
    envvar.go setPodEnv, master.go), which RANK_PRELUDE reads. So: numWorkers = nodes - 1 and the
    master built from the worker spec (the request's top-level masterSpecSameAsWorker; without a
    master no pod gets RANK). nemo-run 0.11.1's DGXCloudExecutor sends numWorkers = nodes and no
    master field: with the master pod that makes nodes + 1 pods, the extra one a torchrun waiting
    for a node that never joins; stating the master here leaves nothing to Run:ai's default. minReplicas
    and maxReplicas ("the lower/upper limit for the number of worker pods ... set by the
    autoscaler", runapy DistributedSpecSpec, applicable only for PyTorch) are left out: the job
    has a fixed size and the documented request sends neither."""
    return {"distributedFramework": framework, "numWorkers": nodes - 1}


def render(job) -> Artifact:
    body = request(job)
    where = f"{job.scheduler.get('base_url') or '<base_url>'}/workloads/{workload_kind(job.nodes)}"
    text = (
        f"// {header(job)}\n// POST {where}  (project '{job.scheduler.get('project_name')}': "
        "projectId/clusterId are looked up at submit)\n" + cloud.pretty(body, job.secrets)
    )
    return Artifact("dgxc-workload", text, f"launch/{job.run_id}.dgxc.json")


# ---------------------------------------------------------------- the client


class Client:
    """A few REST calls with a timeout, retries on transient failures and a cached token."""

    def __init__(self, s: dict):
        self.s = s
        self.base = (s.get("base_url") or "").rstrip("/")
        if not self.base:
            raise UsageError("the dgxcloud profile has no base_url")
        self.timeout = float(s.get("request_timeout") or 30)
        self.retries = int(s.get("retries") or 3)
        self.wait = float(s.get("retry_wait", 2.0))
        self._token = None
        self._project = None

    def _raw(self, method: str, path: str, body=None, token: str | None = None):
        import requests

        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"

        def once():
            r = requests.request(method, self.base + path, json=body, headers=headers, timeout=self.timeout)
            if r.status_code >= 500:
                raise _Transient(f"HTTP {r.status_code}")
            return r

        def transient(exc):
            if isinstance(exc, _Transient):
                return str(exc)
            if isinstance(exc, requests.Timeout):
                return f"no answer within {self.timeout:g}s"
            if isinstance(exc, requests.ConnectionError):
                return f"connection failed ({type(exc).__name__})"
            return None

        return cloud.retrying(
            f"DGX Cloud {method} {path}", once, retries=self.retries, wait=self.wait, transient=transient
        )

    def token(self) -> str:
        if self._token:
            return self._token
        id_env, secret_env = (
            self.s.get("client_id_env") or "DGXC_CLIENT_ID",
            self.s.get("client_secret_env") or "DGXC_CLIENT_SECRET",
        )
        cid, secret = os.environ.get(id_env), os.environ.get(secret_env)
        if not cid or not secret:
            raise UsageError(f"DGX Cloud credentials: set {id_env} and {secret_env} in your environment")
        r = self._raw("POST", "/token", {"grantType": "client_credentials", "clientId": cid, "clientSecret": secret})
        tok = None
        if r.status_code == 200:
            try:
                tok = r.json().get("accessToken")
            except ValueError:
                tok = None
        if not tok:  # the body is not shown: an error page may echo the request
            raise LaunchError(
                f"DGX Cloud rejected the client credentials from ${id_env}/${secret_env} (HTTP {r.status_code})"
            )
        self._token = tok
        return tok

    def call(self, method: str, path: str, body=None, ok=(200, 201, 202)):
        r = self._raw(method, path, body, self.token())
        if r.status_code in (401, 403):
            raise LaunchError(f"DGX Cloud refused {method} {path} (HTTP {r.status_code}): the token is not authorized")
        if r.status_code not in ok:
            raise LaunchError(f"DGX Cloud {method} {path} failed (HTTP {r.status_code}): {r.text[:300]}")
        try:
            return r.json() if r.content else {}
        except ValueError:
            return {}

    def project(self) -> tuple[str, str]:
        if self._project:
            return self._project
        name = self.s.get("project_name")
        for p in self.call("GET", "/org-unit/projects").get("projects", []):
            if not name or p.get("name") == name:
                self._project = (p["id"], p["clusterId"])
                return self._project
        raise LaunchError(f"DGX Cloud project '{name}' not found (or not visible to this client)")


class _Transient(Exception):
    pass


class Backend:
    name = "dgxcloud"

    def __init__(self):
        self._clients = {}
        self.notes: list[str] = []

    def _client(self, s) -> Client:
        key = (s.get("base_url"), s.get("client_id_env"))
        if key not in self._clients:
            self._clients[key] = Client(s)
        return self._clients[key]

    def _mover(self, c: Client, s: dict, cmd: str, name: str) -> None:
        pid, cid = c.project()
        body = {
            "name": name,
            "useGivenNameAsPrefix": True,
            "projectId": pid,
            "clusterId": cid,
            "spec": {
                "command": "sh -c",
                "args": shlex.quote(cmd),
                "image": "busybox:1.37.0",
                "storage": {"pvc": [dict(p) for p in s.get("pvcs", [])]},
            },
        }
        wid = c.call("POST", "/workloads/workspaces", body)["workloadId"]
        deadline = time.time() + float(s.get("mover_timeout") or 600)
        while True:
            phase = c.call("GET", f"/workloads/workspaces/{wid}").get("actualPhase")
            if phase in ("Completed", "Failed", "Stopped", "Degraded"):
                break
            if time.time() > deadline:
                raise LaunchError(f"DGX Cloud data mover {wid} did not finish in time")
            time.sleep(float(s.get("poll_interval", 5.0)))
        try:
            c.call("DELETE", f"/workloads/workspaces/{wid}", ok=(200, 202, 204, 404))
        except LaunchError:
            pass
        if phase != "Completed":
            raise LaunchError(f"DGX Cloud data mover {wid} ended {phase}; the run dir was not written")

    def stage(self, job, files: dict, *, new_dir: bool) -> None:  # noqa: ARG002 - the Backend protocol's signature
        """Workspace data movers (busybox) write the run's files into the run dir on the
        PVC, in chunks under the API's args limit, without deleting the dir (resume)."""
        s = job.scheduler
        c = self._client(s)
        for cmd in cloud.stage_commands(job.run_dir, files, limit=MAX_ARGS_CHARS):
            self._mover(c, s, cmd, cloud.job_name(job.run_id, "bl-stage"))

    def unstage(self, job) -> None:
        pass

    def submit(self, job, run, artifact, secrets: dict) -> list[str]:  # noqa: ARG002 - the Backend protocol's signature
        s = job.scheduler
        c = self._client(s)
        pid, cid = c.project()
        body = cloud.fill(request(job), {PROJECT_ID: pid, CLUSTER_ID: cid})
        resp = c.call("POST", f"/workloads/{workload_kind(job.nodes)}", body)
        if not resp.get("workloadId"):
            raise LaunchError("DGX Cloud accepted the workload but returned no workloadId")
        return [resp["workloadId"]]

    def status(self, runs: list) -> dict:
        out = {}
        for run, job in runs:
            if not run.job_ids:
                out[run.run_id] = {"state": "FAILED", "reason": "no workload id recorded"}
                continue
            c = self._client(job.scheduler)
            wid = run.job_ids[-1]
            try:
                data = c.call("GET", f"/workloads/{workload_kind(job.nodes)}/{wid}")
            except LaunchError as exc:
                if "HTTP 404" in str(exc) and run.info.get("cancelled"):
                    out[run.run_id] = {"state": "CANCELLED", "reason": "the workload no longer exists"}
                    continue
                raise
            phase = data.get("actualPhase") or data.get("phase") or "Unknown"
            mapped = _STATES.get(phase, "UNKNOWN")
            if mapped == "CANCELLED" and not run.info.get("cancelled"):
                mapped = "FAILED"
            reason = "" if mapped in ("RUNNING", "COMPLETED") else f"DGX Cloud: {phase}"
            out[run.run_id] = {"state": mapped, "reason": reason, "platform_state": phase}
            if mapped in ("RUNNING", "COMPLETED", "FAILED"):  # from the PVC, where it is reachable
                out[run.run_id].update(cloud.log_progress(self, run, job))
        return out

    def log_texts(self, run, job, tail: int | None = None) -> list:
        return read_log_files(self.log_files(run, job), tail)

    def log_files(self, run, job) -> list[Path]:
        """DGX Cloud serves logs only inside the cluster: read them from the PVC when the
        run dir is reachable here (launched from the cluster, or the PVC mounted under
        the profile's local_job_root); otherwise say where they are."""
        s = job.scheduler
        run_dir = Path(run.run_dir)
        if not run_dir.is_dir() and s.get("local_job_root"):
            run_dir = Path(s["local_job_root"]) / run_dir.name
        logs = run_dir / "logs"
        if logs.is_dir():
            return sorted(logs.glob(f"{run.run_id}-node*.log"))
        note = cloud.log_cache(run.run_id) / "where.log"
        paths.write_private(
            note,
            (
                "bridge-launch: DGX Cloud serves workload logs only inside the cluster. This run's logs are on the "
                "PVC at "
                f"{run.run_dir}/logs/{run.run_id}-node<N>.log (workload {', '.join(run.job_ids)}), and in the Run:ai "
                "UI. "
                f"Mount the PVC here and set local_job_root in the profile to read them with `bridge-launch logs`.\n"
            ),
        )
        return [note]

    def cancel(self, run, job) -> None:
        if not run.job_ids:
            return
        c = self._client(job.scheduler)
        c.call("POST", f"/workloads/{workload_kind(job.nodes)}/{run.job_ids[-1]}/suspend", {}, ok=(200, 202, 204, 404))
