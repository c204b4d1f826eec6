"""Container image references and the image cache (`bridge-launch image import`).

Reference forms:
- pyxis/enroot: `[USER@][REGISTRY#]IMAGE[:TAG]` (pyxis args.c, `--container-image` help; enroot's
  `import` help), or a squashfs path, which pyxis recognises by a leading '/' or '.'
  (pyxis_slurmstepd.c: `strspn(image, "./") > 0`). enroot takes `registry/image` only from 4.0;
  older enroot turns it into a Docker Hub lookup, so the Slurm renderer always writes `#`.
- Docker, Lepton, Run:ai: `REGISTRY/IMAGE[:TAG]`.
Users may write either; the first path component is a registry when it has a '.' or ':' or is
`localhost` (Docker's own rule: distribution/reference, splitDockerDomain).

The cache: `image import` runs `enroot import` once, as a job on one compute node, into the
directory the profile names (`[slurm] image_cache`), under the image's digest. The result is
recorded here ($BRIDGE_LAUNCH_HOME/images.json); resolve reads that record alone, so a dry run
never touches the cluster.
"""

from __future__ import annotations

import time

from bridge_launch.backends.slurm.image_import import failure_line, import_script, parse_result
from bridge_launch.core.errors import UsageError
from bridge_launch.core.image_cache import remember
from bridge_launch.core.image_ref import is_path, pyxis_ref

# --- the local record ---------------------------------------------------------------------------


# --- the import job -----------------------------------------------------------------------------


def import_image(image: str, cluster: str, *, timeout: float = 3600, on_start=None) -> dict:
    """Run the import job on the cluster and record the result. Returns the record entry.
    `on_start()` is called once the request is valid, as the job is about to start."""
    from bridge_launch.backends.slurm.backend import Backend
    from bridge_launch.core.errors import LaunchError
    from bridge_launch.spec import clusters

    prof = clusters.load(cluster)
    if prof["backend"] != "slurm" or not prof["containers"]:
        raise UsageError(
            f"image import runs enroot on a Slurm cluster with pyxis; cluster '{prof['name']}' "
            f"{'uses the ' + prof['backend'] + ' backend' if prof['backend'] != 'slurm' else 'runs bare processes'}"
        )
    s = prof["slurm"]
    cache_dir = s.get("image_cache", "").rstrip("/")
    if not cache_dir.startswith("/"):
        raise UsageError(
            f"cluster '{prof['name']}' names no image cache; set [slurm] image_cache to a directory on "
            "the shared filesystem that every node sees"
        )
    ref = pyxis_ref(image)
    if is_path(ref) and not ref.startswith("/"):
        raise UsageError(f"image {image!r}: give a squashfs file as an absolute path on the cluster's filesystem")
    if on_start:
        on_start()
    be = Backend()
    logs = f"{cache_dir}/.import-logs"
    mk = be.command(s, ["mkdir", "-p", logs])
    if mk.returncode:
        raise LaunchError(f"could not create {logs}: {be.first_error(mk)}")
    argv = [
        "sbatch",
        "--parsable",
        "--wait",
        "--nodes=1",
        "--ntasks=1",
        "--job-name=bridge-launch-import",
        f"--output={logs}/import-%j.out",
    ]
    for key in ("partition", "account", "qos", "reservation"):
        if s.get(key):
            argv.append(f"--{key}={s[key]}")
    argv.append(f"--time={s.get('image_import_time') or '01:00:00'}")
    t0 = time.monotonic()
    proc = be.command(s, argv, stdin=import_script(ref, cache_dir), timeout=timeout)
    elapsed = time.monotonic() - t0
    job_id = (proc.stdout or "").strip().splitlines()[0].split(";")[0] if (proc.stdout or "").strip() else ""
    if not job_id.isdigit():
        raise LaunchError(f"sbatch refused the import job: {be.first_error(proc)}")
    out = be.read_file(s, f"{logs}/import-{job_id}.out") or ""
    result = parse_result(out)
    if proc.returncode or result is None:
        raise LaunchError(f"importing {ref} failed (job {job_id}): {failure_line(out)}")
    digest, path, how = result
    entry = {
        "digest": digest,
        "squashfs": path,
        "cache_dir": cache_dir,
        "source": ref,
        "job_id": job_id,
        "how": how,
        "imported_at": int(time.time()),
        "seconds": round(elapsed, 1),
    }
    remember(prof["name"], ref, entry)
    return entry
