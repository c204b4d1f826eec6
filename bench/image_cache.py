"""Issue 14 image cache: time to the first training step of a 2-node job on local-slurm-pyxis,

  every node pulling and converting the image at the start of the segment (pyxis's own path
  for a registry image: enroot import = download, unpack, mksquashfs; then the container start)
      vs  the same image imported once with `bridge-launch image import` (the squashfs in the
          profile's cache; each node only starts the container from it)

The image is the local torch image (scripts/local-slurm start --containers), served as a
one-layer Docker image (gzip, as registries serve layers) by bench/registry.py from the cluster's
head namespace, so enroot's real pull path runs end to end over the nodes' veths. Each uncached
round starts with the nodes' enroot layer caches emptied (a node that ran the image before would
skip the download: fresh nodes are the case that matters). Prints the medians, the per-segment
saving, and the same arithmetic for a 30 GB image on 64 nodes.

Needs root and the cluster with containers. Run: .venv/bin/python bench/image_cache.py [--repeats N]
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STATE = Path("/var/lib/bridge-launch-slurm")
IMAGE = STATE / "containers" / "images" / "local-torch.sqsh"
LAYOUT = STATE / "bench-registry"
REF = "10.251.0.1:5000/bench/local-torch:1"
CLI = [sys.executable, "-m", "bridge_launch.cli.app"]
FIRST_STEP = re.compile(r"iteration\s+1/")


def sh(*cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def build_layout() -> float:
    """The image as a one-layer Docker image: blobs/<hex> and index.json. Cached by the image's key."""
    key = (IMAGE.parent / "local-torch.sqsh.key").read_text() + str(IMAGE.stat().st_size)
    if (LAYOUT / "key").is_file() and (LAYOUT / "key").read_text() == key:
        return json.loads((LAYOUT / "index.json").read_text())["layer_mb"]
    shutil.rmtree(LAYOUT, ignore_errors=True)
    (LAYOUT / "blobs").mkdir(parents=True)
    work = Path(tempfile.mkdtemp(prefix="bench-layer-", dir=STATE))
    try:
        sh("unsquashfs", "-q", "-n", "-d", str(work / "root"), str(IMAGE), stdout=subprocess.DEVNULL)
        tar = work / "layer.tar"
        sh("tar", "--numeric-owner", "-C", str(work / "root"), "-cf", str(tar), ".")
        diff_id = sha256(tar)
        sh("pigz", "-f", "-k", str(tar))
        gz = Path(str(tar) + ".gz")
        layer = sha256(gz)
        shutil.move(gz, LAYOUT / "blobs" / layer)
        env = [line for line in (work / "root" / "etc" / "environment").read_text().splitlines() if line]
        config = json.dumps(
            {
                "architecture": "amd64",
                "os": "linux",
                "config": {"Env": env},
                "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
            }
        ).encode()
        cfg = hashlib.sha256(config).hexdigest()
        (LAYOUT / "blobs" / cfg).write_bytes(config)
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {
                    "mediaType": "application/vnd.docker.container.image.v1+json",
                    "size": len(config),
                    "digest": f"sha256:{cfg}",
                },
                "layers": [
                    {
                        "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                        "size": (LAYOUT / "blobs" / layer).stat().st_size,
                        "digest": f"sha256:{layer}",
                    }
                ],
            }
        ).encode()
        man = hashlib.sha256(manifest).hexdigest()
        (LAYOUT / "blobs" / man).write_bytes(manifest)
        layer_mb = round((LAYOUT / "blobs" / layer).stat().st_size / 1e6)
        (LAYOUT / "index.json").write_text(
            json.dumps({"name": "bench/local-torch", "tag": "1", "manifest": f"sha256:{man}", "layer_mb": layer_mb})
        )
        (LAYOUT / "key").write_text(key)
        return layer_mb
    finally:
        shutil.rmtree(work, ignore_errors=True)


def first_step_seconds(env, *args) -> float:
    """Submit the smoke job; seconds from submit to the first iteration line in its logs."""
    t0 = time.monotonic()
    r = subprocess.run(
        [
            *CLI,
            "submit",
            "smoke",
            "-c",
            "bench-pyxis",
            "-o",
            "json",
            "smoke.busbw_sizes=[1024]",
            "smoke.busbw_iters=1",
            "train.train_iters=2",
            *args,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    if r.returncode:
        sys.exit(f"submit failed: {r.stderr}")
    sub = json.loads(r.stdout)
    deadline = t0 + 900
    while time.monotonic() < deadline:
        for log in glob.glob(f"{sub['run_dir']}/logs/*.log"):
            if FIRST_STEP.search(Path(log).read_text(errors="replace")):
                dt = time.monotonic() - t0
                wait_done(env, sub["run_id"])
                return dt
        st = json.loads(
            subprocess.run(
                [*CLI, "status", sub["run_id"], "-o", "json"], capture_output=True, text=True, env=env, cwd=REPO
            ).stdout
        )[0]
        if st["state"] in ("FAILED", "CANCELLED"):
            sys.exit(f"{sub['run_id']} {st['state']}: {st['reason']}")
        time.sleep(0.2)
    sys.exit(f"{sub['run_id']}: no first step within 900 s")


def wait_done(env, run_id):
    while True:
        st = json.loads(
            subprocess.run(
                [*CLI, "status", run_id, "-o", "json"], capture_output=True, text=True, env=env, cwd=REPO
            ).stdout
        )[0]
        if st["state"] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
            return
        time.sleep(0.5)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (the local cluster)")
    sh(str(REPO / "scripts" / "local-slurm"), "start", "--containers", stdout=subprocess.DEVNULL)
    t0 = time.monotonic()
    layer_mb = build_layout()
    print(f"layout: one gzip layer of {layer_mb} MB ({time.monotonic() - t0:.0f} s to build or reuse)", flush=True)
    # pyxis does not pass ENROOT_ALLOW_HTTP from a job's environment (its enroot_deny_env list,
    # pyxis_slurmstepd.c): allow plain HTTP through an enroot.conf drop-in, for this run only
    dropin = Path("/usr/local/etc/enroot/enroot.conf.d/bench-image-cache.conf")
    dropin.write_text("ENROOT_ALLOW_HTTP yes\n")
    server = subprocess.Popen(
        [
            str(REPO / "scripts" / "local-slurm"),
            "exec",
            sys.executable,
            str(REPO / "bench" / "registry.py"),
            str(LAYOUT),
        ]
    )
    home = Path(tempfile.mkdtemp(prefix="bench-image-cache-"))
    env = dict(
        os.environ,
        BRIDGE_LAUNCH_HOME=str(home / "state"),
        XDG_CONFIG_HOME=str(home / "config"),
        PYTHONPATH=str(REPO / "src"),
    )
    (home / "config" / "bridge-launch" / "clusters").mkdir(parents=True)
    cache = STATE / "bench-enroot-cache"
    (home / "config" / "bridge-launch" / "clusters" / "bench-pyxis.toml").write_text(
        f'extends = "local-slurm-pyxis"\n[slurm]\nimage_cache = "{cache}"\n'
    )
    try:
        time.sleep(1)
        uncached, cached = [], []
        for _ in range(a.repeats):
            for d in glob.glob(str(STATE / "enroot" / "cache" / "*")):  # fresh nodes: no layers cached
                shutil.rmtree(d, ignore_errors=True)
            uncached.append(first_step_seconds(env, "--container", REF))
            print(f"  without cache: {uncached[-1]:.1f} s to the first step", flush=True)
        shutil.rmtree(cache, ignore_errors=True)
        for d in glob.glob(str(STATE / "enroot" / "cache" / "*")):
            shutil.rmtree(d, ignore_errors=True)
        t0 = time.monotonic()
        imp = subprocess.run(
            [*CLI, "image", "import", REF, "-c", "bench-pyxis", "-o", "json"],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
        )
        if imp.returncode:
            sys.exit(f"image import failed: {imp.stderr}")
        import_s = time.monotonic() - t0
        print(f"  image import (once, one node): {import_s:.1f} s -> {json.loads(imp.stdout)['squashfs']}", flush=True)
        for _ in range(a.repeats):
            cached.append(first_step_seconds(env, "--container", REF))
            print(f"  with cache:    {cached[-1]:.1f} s to the first step", flush=True)
    finally:
        server.terminate()
        server.wait()
        dropin.unlink(missing_ok=True)
        shutil.rmtree(home, ignore_errors=True)
    u, c = statistics.median(uncached), statistics.median(cached)
    image_gb = IMAGE.stat().st_size / 1e9
    print(
        f"\ntime to first step, 2 nodes, {image_gb:.2f} GB squashfs ({layer_mb} MB gzip layer), median of {a.repeats}:"
    )
    print(f"  without cache {u:.1f} s   with cache {c:.1f} s   saving {u - c:.1f} s per segment   ratio {c / u:.2f}x")
    print(f"  the import itself: {import_s:.1f} s, once per image digest (not per segment)")
    # On paper (docs/how-to/image-cache.md): the work the cache removes from every node of every segment
    # is the pull plus the conversion; the import measures the conversion alone on one idle node.
    cores = os.cpu_count() or 1
    print(
        f"  conversion cost measured by the import: {import_s * cores / image_gb:.0f} core-seconds per GB of squashfs "
        f"({cores} cores, download over a veth)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
