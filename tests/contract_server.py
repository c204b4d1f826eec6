"""A loopback stand-in for the DGX Cloud (Run:ai) REST API and the Lepton workspace API:
every endpoint the backends call, request shapes checked against the documented ones,
every request recorded, scripted job phases and failure injection.

Lepton lives under /lepton (LEPTON_WORKSPACE_URL), DGX Cloud under /dgx (base_url).
"""

from __future__ import annotations

import base64
import io
import json
import re
import socket
import tarfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

LEPTON_TOKEN = "lepton-test-token"
DGX_CLIENT = ("dgx-client-id", "dgx-client-secret-value")
DGX_TOKEN = "dgx-access-token"


def _replica_log(replica: str) -> str:
    """What a replica of a Bridge job prints through `torchrun --tee=3` with the job's prefix
    template ("[rankN]: "): rank 0's Step Time line on the first replica, the last rank's
    iteration line on the last (Megatron-Bridge's formats, trainer_protocol.py)."""
    from bridge_launch.workloads import trainer_protocol as P

    if replica.split("-")[-2] == "0":
        return "[rank0]: " + P.step_time_line(2.5, 512.0)
    return "[rank15]: " + P.iteration_line(
        iteration=5,
        train_iters=50,
        consumed=40,
        elapsed_ms=2500.0,
        lr=1e-4,
        global_batch=8,
        losses={"lm loss": 1.234},
        loss_scale=1.0,
        grad_norm=0.5,
        skipped=0,
        nan=0,
        stamp="2026-01-01 12:00:00",
    )


class ShapeError(AssertionError):
    pass


def need(cond, msg):
    if not cond:
        raise ShapeError(msg)


class Contract:
    def __init__(self):
        self.requests = []  # (method, path, query, headers, body)
        self.errors = []  # shape violations seen by the server
        self.phases = {}  # job/workload id -> remaining phases (the last one sticks)
        self.script = ["Queueing", "Running", "Completed"]  # phases a new training job goes through
        self.replica_log = None  # what a Lepton replica logged ("{replica}" filled in); None: _replica_log
        self.inject = []  # [(method, path regex, action)] action: int status or ("hang", seconds); used once
        self.jobs = {}
        self.deleted = set()
        self.suspended = set()
        self.staged = {}  # run dir -> {file: text} reassembled from data-mover commands
        self.pods = {}  # DGX Cloud workload id -> pods it creates (master + workers)
        self._parts = {}
        self.lock = threading.Lock()

    # ---------------------------------------------------------------- helpers
    def calls(self, method=None, pattern=""):
        return [r for r in self.requests if (method is None or r[0] == method) and re.search(pattern, r[1])]

    def _phase(self, jid, dgx=False):
        seq = self.phases.setdefault(jid, list(self.script))
        phase = seq.pop(0) if len(seq) > 1 else seq[0]
        return {"Queueing": "Pending"}.get(phase, phase) if dgx else phase

    def _unpack(self, cmd: str):
        """Replay a data-mover shell command: collect the tarball and unpack it in memory."""
        m = re.match(r"mkdir -p (\S+) && echo (\S+) \| base64 -d \| tar -xzf - -C \S+$", cmd)
        if m:
            return self._untar(m.group(1), m.group(2))
        m = re.match(r"mkdir -p (\S+) && printf %s (\S+) > (\S+)$", cmd)
        if m:
            self._parts[m.group(3)] = [m.group(1), m.group(2)]
            return
        m = re.match(r"printf %s (\S+) >> (\S+)$", cmd)
        if m:
            need(m.group(2) in self._parts, "append to a part that was never started")
            self._parts[m.group(2)][1] += m.group(1)
            return
        m = re.match(r"base64 -d (\S+) \| tar -xzf - -C (\S+) && rm -f \S+$", cmd)
        need(m, f"unexpected data-mover command {cmd[:80]!r}")
        d, b64 = self._parts.pop(m.group(1))
        self._untar(d, b64)

    def _untar(self, d, b64):
        with tarfile.open(fileobj=io.BytesIO(base64.b64decode(b64)), mode="r:gz") as tar:
            files = {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers()}
        self.staged.setdefault(d, {}).update(files)

    # ---------------------------------------------------------------- Lepton
    def lepton(self, method, path, body, auth):
        if auth != f"Bearer {LEPTON_TOKEN}":
            return 401, {"code": "Unauthorized", "message": "invalid token"}
        if method == "GET" and path == "/dedicated-node-groups":
            return 200, [
                {"metadata": {"id": "ng-gb200-1", "name": "gb200-nodegroup"}, "spec": {}, "status": {}},
                {"metadata": {"id": "ng-cpu", "name": "cpu-pool"}, "spec": {}, "status": {}},
            ]
        m = re.fullmatch(r"/dedicated-node-groups/([^/]+)/nodes", path)
        if method == "GET" and m:
            need(m.group(1) == "ng-gb200-1", f"nodes asked for unknown node group {m.group(1)}")
            return 200, [
                {"metadata": {"id": f"node-{i}"}, "spec": {"unschedulable": False}, "status": None} for i in range(2)
            ]
        if method == "POST" and path == "/jobs":
            self._check_lepton_job(body)
            jid = body["metadata"]["id"]
            need(jid not in self.jobs, f"job {jid} exists")
            self.jobs[jid] = body
            if jid.startswith("bl-stage"):
                self._unpack(body["spec"]["container"]["command"][2])
                self.phases[jid] = ["Running", "Completed"]
            return 200, {**body, "status": {"state": "Queueing"}}
        m = re.fullmatch(r"/jobs/([^/]+)", path)
        if m and method in ("GET", "DELETE"):
            jid = m.group(1)
            if jid not in self.jobs or jid in self.deleted:
                return 404, {"code": "NotFound", "message": f"job {jid} not found"}
            if method == "DELETE":
                self.deleted.add(jid)
                return 200, {}
            state = self._phase(jid)
            n = self.jobs[jid]["spec"]["completions"]
            ready = n if state == "Running" else 0
            return 200, {**self.jobs[jid], "status": {"state": state, "ready": ready, "active": n}}
        m = re.fullmatch(r"/jobs/([^/]+)/replicas", path)
        if m and method == "GET":
            jid = m.group(1)
            n = self.jobs[jid]["spec"]["completions"]
            return 200, [{"metadata": {"id": f"{jid}-{i}-abcde"}, "id": f"{jid}-{i}-abcde"} for i in range(n)]
        m = re.fullmatch(r"/jobs/([^/]+)/replicas/([^/]+)/log", path)
        if m and method == "GET":
            if self.replica_log is not None:
                return 200, self.replica_log.format(replica=m.group(2)).encode()
            return 200, (_replica_log(m.group(2)) + "\n").encode()
        return 404, {"message": f"no endpoint {method} {path}"}

    def _check_lepton_job(self, body):
        need(set(body) <= {"metadata", "spec"}, f"unknown top-level keys {set(body)}")
        need(re.fullmatch(r"[a-z0-9-]{1,35}", body["metadata"]["id"] or ""), "metadata.id must be a k8s name <= 35")
        spec = body["spec"]
        need(spec.get("resource_shape"), "spec.resource_shape")
        aff = spec.get("affinity", {})
        need(aff.get("allowed_dedicated_node_groups") == ["ng-gb200-1"], f"affinity node group {aff}")
        need(aff.get("allowed_nodes_in_node_group") == ["node-0", "node-1"], f"affinity nodes {aff}")
        c = spec["container"]
        need(isinstance(c.get("image"), str) and isinstance(c.get("command"), list), "container image/command")
        need(spec["completions"] == spec["parallelism"] >= 1, "completions == parallelism")
        for e in spec.get("envs", []):
            need(("value" in e) != ("value_from" in e), f"env {e.get('name')} needs exactly one of value/value_from")
            if "value_from" in e:
                need(set(e["value_from"]) == {"secret_name_ref"}, "value_from.secret_name_ref")
        for mnt in spec.get("mounts", []):
            need({"path", "mount_path", "from"} <= set(mnt), f"mount {mnt}")
        seg = spec.get("segment_config")
        if seg is not None:  # leptonai 0.27.3 cli/job.py --segment-count: 1 <= count < workers, count divides workers
            need(set(seg) == {"count_per_segment"}, f"segment_config {seg}")
            per, n = seg["count_per_segment"], spec["completions"]
            need(
                isinstance(per, int) and n > 1 and per > 1 and n % per == 0 and 1 <= n // per < n,
                f"segment_config count_per_segment={per} for {n} workers",
            )
        if not body["metadata"]["id"].startswith("bl-stage"):
            need(spec.get("intra_job_communication") is True, "intra_job_communication")
            need(all("wget" not in a and "curl" not in a for a in c["command"]), "the job must not download anything")

    # ---------------------------------------------------------------- DGX Cloud
    def dgx(self, method, path, body, auth):
        if method == "POST" and path == "/token":
            need(body.get("grantType") == "client_credentials", "grantType")
            if (body.get("clientId"), body.get("clientSecret")) != DGX_CLIENT:
                return 401, {"code": 401, "message": "invalid client credentials"}
            return 200, {"accessToken": DGX_TOKEN}
        if auth != f"Bearer {DGX_TOKEN}":
            return 401, {"code": 401, "message": "unauthorized"}
        if method == "GET" and path == "/org-unit/projects":
            return 200, {
                "projects": [
                    {"name": "other", "id": "p-0", "clusterId": "c-0"},
                    {"name": "bridge-launch", "id": "p-42", "clusterId": "c-7"},
                ]
            }
        m = re.fullmatch(r"/workloads/(workspaces|trainings|distributed)", path)
        if method == "POST" and m:
            kind = m.group(1)
            self._check_dgx(kind, body)
            wid = f"{kind[:4]}-{len(self.jobs):04d}"
            self.jobs[wid] = (kind, body)
            if kind == "distributed":  # a master pod plus numWorkers worker pods (dgxcloud.distributed_pods)
                self.pods[wid] = 1 + body["spec"]["numWorkers"]
            elif kind == "trainings":
                self.pods[wid] = 1
            if kind == "workspaces":
                need(body["spec"]["command"] == "sh -c", "data mover command")
                args = body["spec"]["args"]
                need(args.startswith("'") and args.endswith("'"), "args quoted")
                need(len(args) <= 10000, f"args over the API limit ({len(args)})")
                self._unpack(args[1:-1])
                self.phases[wid] = ["Running", "Completed"]
            return 202, {"workloadId": wid, "name": body["name"], "actualPhase": "Creating"}
        m = re.fullmatch(r"/workloads/(workspaces|trainings|distributed)/([^/]+)", path)
        if m and method in ("GET", "DELETE"):
            kind, wid = m.groups()
            if wid not in self.jobs or self.jobs[wid][0] != kind or wid in self.deleted:
                return 404, {"message": f"workload {wid} not found"}
            if method == "DELETE":
                self.deleted.add(wid)
                return 202, {}
            phase = "Stopped" if wid in self.suspended else self._phase(wid, dgx=True)
            return 200, {"workloadId": wid, "actualPhase": phase}
        m = re.fullmatch(r"/workloads/(trainings|distributed)/([^/]+)/suspend", path)
        if m and method == "POST":
            if m.group(2) not in self.jobs:
                return 404, {"message": "not found"}
            self.suspended.add(m.group(2))
            return 202, {}
        return 404, {"message": f"no endpoint {method} {path}"}

    def _check_dgx(self, kind, body):
        base = {"name", "useGivenNameAsPrefix", "projectId", "clusterId", "spec"}
        # DistributedCreationRequest (Run:ai REST reference; runapy models) adds the master's spec
        extra = {"masterSpecSameAsWorker", "masterSpec"} if kind == "distributed" else set()
        need(base <= set(body) <= base | extra, f"keys {set(body)}")
        need((body["projectId"], body["clusterId"]) == ("p-42", "c-7"), "project/cluster ids")
        need(len(body["name"]) <= 34, "name <= 34 characters")
        spec = body["spec"]
        need(isinstance(spec.get("command"), str) and isinstance(spec.get("image"), str), "command/image")
        for p in spec.get("storage", {}).get("pvc", []):
            need({"name", "path", "existingPvc", "claimName"} <= set(p), f"pvc {p}")
        if kind == "workspaces":
            return
        need(spec["compute"]["gpuDevicesRequest"] >= 1, "compute.gpuDevicesRequest")
        for e in spec.get("environmentVariables", []):
            need(("value" in e) != ("secret" in e), f"env {e.get('name')}: value or secret")
            if "secret" in e:
                need(set(e["secret"]) == {"name", "key"}, "secret {name, key}")
        if kind == "distributed":
            need(spec["distributedFramework"] == "PyTorch", "distributedFramework")
            need(isinstance(spec.get("numWorkers"), int) and spec["numWorkers"] >= 1, "numWorkers >= 1")
            # "masterSpecSameAsWorker ... in this case, masterSpec should not be specified"
            need(
                not (body.get("masterSpecSameAsWorker") and "masterSpec" in body),
                "masterSpec with masterSpecSameAsWorker",
            )
            # The pod count must not depend on Run:ai's default for an unstated master (the UI offers
            # "Workers & master" and "Workers only"): a request states it.
            need(
                body.get("masterSpecSameAsWorker") is True or "masterSpec" in body,
                "the master pod is left to Run:ai's default (state masterSpecSameAsWorker or masterSpec)",
            )
            for k in ("minReplicas", "maxReplicas"):  # limits on the worker pods, when given
                if k in spec:
                    need(isinstance(spec[k], int), k)
            if "minReplicas" in spec and "maxReplicas" in spec:
                need(
                    spec["minReplicas"] <= spec["numWorkers"] <= spec["maxReplicas"],
                    "numWorkers within min/maxReplicas",
                )
        else:
            need("numWorkers" not in spec, "trainings take no numWorkers")


def _handler(contract: Contract):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def _go(self):
            url = urlparse(self.path)
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b""
            body = json.loads(raw) if raw else None
            with contract.lock:
                contract.requests.append((self.command, url.path, url.query, dict(self.headers), body))
                action = None
                for i, (meth, pat, act) in enumerate(contract.inject):
                    if meth == self.command and re.search(pat, url.path):
                        action = act
                        del contract.inject[i]
                        break
            if isinstance(action, tuple) and action[0] == "hang":
                time.sleep(action[1])
                return
            if isinstance(action, int):
                return self._send(action, {"message": "injected"})
            try:
                with contract.lock:
                    if url.path.startswith("/lepton/"):
                        code, out = contract.lepton(self.command, url.path[7:], body, self.headers.get("Authorization"))
                    elif url.path.startswith("/dgx/"):
                        code, out = contract.dgx(self.command, url.path[4:], body, self.headers.get("Authorization"))
                    else:
                        code, out = 404, {"message": "unknown API"}
            except ShapeError as exc:
                contract.errors.append(str(exc))
                code, out = 400, {"message": f"contract violation: {exc}"}
            self._send(code, out)

        def _send(self, code, out):
            data = out if isinstance(out, bytes) else json.dumps(out).encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain" if isinstance(out, bytes) else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _go

    return H


class _Httpd(ThreadingHTTPServer):
    """Knows its open connections, so that leaving the server ends them: a client's kept-alive
    connection would otherwise hold a handler thread in the test process for as long as that client
    lives, and the fork tests would find another thread running."""

    daemon_threads = True

    def __init__(self, address, handler):
        super().__init__(address, handler)
        self.open: dict[socket.socket, threading.Thread] = {}
        self.open_lock = threading.Lock()

    def process_request_thread(self, request, client_address):
        with self.open_lock:
            self.open[request] = threading.current_thread()
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self.open_lock:
                self.open.pop(request, None)

    def end_connections(self, wait: float = 5.0) -> None:
        with self.open_lock:
            live = list(self.open.items())
        for sock, _ in live:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # the handler closed it meanwhile
                pass
        for _, thread in live:
            thread.join(wait)


class Server:
    def __init__(self):
        self.contract = Contract()
        self.httpd = _Httpd(("127.0.0.1", 0), _handler(self.contract))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.end_connections()
        self.httpd.server_close()
