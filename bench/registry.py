"""A read-only Docker registry (the pull half of the Registry HTTP API V2) serving one image from
a directory, for bench/image_cache.py. Run it where the nodes can reach it: the local cluster's
head namespace (`scripts/local-slurm exec python3 bench/registry.py DIR`), so enroot on the
nodes pulls from 10.251.0.1:PORT over the namespaces' veths (ENROOT_ALLOW_HTTP=yes).

DIR holds what bench/image_cache.py writes: index.json ({"name", "tag", "manifest": digest}) and
blobs/<sha256 hex> (the manifest, the config, the layers). It answers exactly what enroot 4.1.2
asks (src/docker.sh): HEAD/GET /v2/<name>/manifests/<tag or digest> with Content-Type and
Docker-Content-Digest, GET /v2/<name>/blobs/sha256:<hex>; no authentication (no
WWW-Authenticate header: enroot then proceeds anonymously).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"


def serve(root: str, host: str, port: int) -> None:
    index = json.load(open(os.path.join(root, "index.json")))

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet
            pass

        def _send(self, code, body=b"", headers=None, path=None):
            self.send_response(code)
            size = os.path.getsize(path) if path else len(body)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            if self.command == "GET":
                if path:
                    with open(path, "rb") as fh:
                        shutil.copyfileobj(fh, self.wfile, 1 << 20)
                else:
                    self.wfile.write(body)

        def do_GET(self):
            p = self.path.split("?")[0]
            if p in ("/v2", "/v2/"):
                return self._send(200, b"{}", {"Content-Type": "application/json"})
            m = re.fullmatch(r"/v2/(.+)/(manifests|blobs)/([^/]+)", p)
            if not m or m.group(1) != index["name"]:
                return self._send(404, b'{"errors":[{"code":"NAME_UNKNOWN"}]}', {"Content-Type": "application/json"})
            kind, ref = m.group(2), m.group(3)
            if kind == "manifests":
                digest = index["manifest"] if ref in (index["tag"], index["manifest"]) else None
                if digest is None:
                    return self._send(
                        404, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}', {"Content-Type": "application/json"}
                    )
                return self._send(
                    200,
                    headers={"Content-Type": MANIFEST_TYPE, "Docker-Content-Digest": digest},
                    path=os.path.join(root, "blobs", digest.split(":")[1]),
                )
            path = os.path.join(root, "blobs", ref.split(":")[-1])
            if not re.fullmatch(r"sha256:[0-9a-f]{64}", ref) or not os.path.isfile(path):
                return self._send(404, b'{"errors":[{"code":"BLOB_UNKNOWN"}]}', {"Content-Type": "application/json"})
            return self._send(
                200, headers={"Content-Type": "application/octet-stream", "Docker-Content-Digest": ref}, path=path
            )

        do_HEAD = do_GET

    ThreadingHTTPServer((host, port), Handler).serve_forever()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root")
    ap.add_argument("--host", default="10.251.0.1")
    ap.add_argument("--port", type=int, default=5000)
    a = ap.parse_args()
    serve(a.root, a.host, a.port)
