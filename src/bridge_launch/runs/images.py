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

import json
import os
import re
import time

from bridge_launch.core import paths
from bridge_launch.core.errors import UsageError

RECORD = "images.json"
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def is_path(ref: str) -> bool:
    return ref.startswith(("/", "."))


def _split_registry(ref: str):
    """(registry, rest) of a Docker-style reference; registry None for Docker Hub names."""
    first, sep, rest = ref.partition("/")
    if sep and (any(c in first for c in ".:") or first == "localhost"):
        return first, rest
    return None, ref


def pyxis_ref(ref: str) -> str:
    """The reference as pyxis and enroot expect it: REGISTRY#IMAGE[:TAG], or a path as it is."""
    if is_path(ref) or "#" in ref or "://" in ref:
        return ref
    if ref.endswith((".sqsh", ".squashfs")):
        raise UsageError(f"container image {ref!r} looks like a squashfs file; give its absolute path "
                         "(pyxis reads a name without a leading '/' or '.' as a registry image)")
    registry, rest = _split_registry(ref)
    return f"{registry}#{rest}" if registry else ref


def docker_ref(ref: str) -> str:
    """The reference as Docker, Lepton and Run:ai expect it: REGISTRY/IMAGE[:TAG]."""
    if is_path(ref):
        raise UsageError(f"container image {ref!r} is a file path; this platform pulls images from a registry")
    if "#" not in ref:
        return ref
    head, _, image = ref.partition("#")
    return f"{head.rpartition('@')[2]}/{image}"  # [USER@]REGISTRY#IMAGE: the user is pyxis/enroot's own


# --- the local record ---------------------------------------------------------------------------

def _record_path():
    return paths.state_dir() / RECORD


def load_record() -> dict:
    try:
        data = json.loads(_record_path().read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise UsageError(f"the image cache record {_record_path()} cannot be read ({exc}); delete it and "
                         "import again") from None
    return data if isinstance(data, dict) else {}


def cached(cluster: str, cache_dir: str, ref: str) -> dict | None:
    """The record of `ref` imported into `cache_dir` for `cluster`, or None."""
    if not cache_dir:
        return None
    entry = load_record().get(cluster, {}).get(ref)
    if not entry or entry.get("cache_dir") != cache_dir or not _DIGEST.match(entry.get("digest", "")):
        return None
    return entry


def remember(cluster: str, ref: str, entry: dict) -> None:
    """Add one import to the record (read-modify-write under a lock, replaced atomically)."""
    import fcntl

    path = _record_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = load_record()
        data.setdefault(cluster, {})[ref] = entry
        tmp = path.with_suffix(f".tmp.{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)


# --- the import job -----------------------------------------------------------------------------

MARK = "bridge-launch-import:"


def import_script(ref: str, cache_dir: str) -> str:
    """The batch script of one import: the digest first (a moved tag gets a new file), then the
    squashfs into a private temporary name and a hard link to `<digest>.sqsh`, which either
    appears whole or, when another import of the same digest got there first, fails and is
    dropped. A squashfs path given as the image is hashed and copied the same way."""
    from bridge_launch.backends.base import q

    src = q(ref)
    return "\n".join([
        "#!/bin/bash",
        "set -uo pipefail",
        f"cache={q(cache_dir)}",
        'mkdir -p "$cache" || exit 1',
        f"if [ -f {src} ]; then",
        f"    digest=sha256:$(sha256sum {src} | cut -d' ' -f1) || exit 1",
        "else",
        f"    digest=$(enroot digest {q('docker://' + ref)}) || {{ echo 'enroot digest failed' >&2; exit 1; }}",
        "fi",
        'case "$digest" in sha256:*) ;; *) echo "unexpected digest: $digest" >&2; exit 1;; esac',
        'final="$cache/${digest/:/-}.sqsh"',
        f'if [ -s "$final" ]; then echo "{MARK} $digest $final cached"; exit 0; fi',
        'tmp="$cache/.${digest/:/-}.sqsh.$SLURM_JOB_ID.$$"',
        "trap 'rm -f \"$tmp\"' EXIT",
        f"if [ -f {src} ]; then",
        f'    cp {src} "$tmp" || exit 1',
        '    [ "sha256:$(sha256sum "$tmp" | cut -d\' \' -f1)" = "$digest" ] || { echo "the image changed while it was copied" >&2; exit 1; }',
        "else",
        f'    enroot import --output "$tmp" {q("docker://" + ref)}"@$digest" || exit 1',
        "fi",
        'chmod 644 "$tmp"',
        'if ln "$tmp" "$final" 2>/dev/null; then',
        f'    echo "{MARK} $digest $final imported"',
        'elif [ -s "$final" ]; then',
        f'    echo "{MARK} $digest $final cached"',
        "else",
        '    echo "could not link $final" >&2; exit 1',
        "fi",
    ]) + "\n"


def parse_result(text: str):
    """(digest, path, how) from the import job's output, or None."""
    for line in reversed(text.splitlines()):
        if line.startswith(MARK):
            parts = line[len(MARK):].split()
            if len(parts) == 3 and _DIGEST.match(parts[0]):
                return parts[0], parts[1], parts[2]
    return None


def failure_line(text: str) -> str:
    """enroot's own error line from a failed import's output (the most specific line)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for pattern in (r"curl: \(\d+\)", r"\[ERROR\]", r"error", r"No such file"):
        hits = [ln for ln in lines if re.search(pattern, ln, re.I)]
        if hits:
            return hits[-1][:300]
    return lines[-1][:300] if lines else "no output"


def import_image(image: str, cluster: str, *, timeout: float = 3600) -> dict:
    """Run the import job on the cluster and record the result. Returns the record entry."""
    from bridge_launch.spec import clusters
    from bridge_launch.backends.slurm.backend import Backend
    from bridge_launch.core.errors import LaunchError

    prof = clusters.load(cluster)
    if prof["backend"] != "slurm" or not prof["containers"]:
        raise UsageError(f"image import runs enroot on a Slurm cluster with pyxis; cluster '{prof['name']}' "
                         f"{'uses the ' + prof['backend'] + ' backend' if prof['backend'] != 'slurm' else 'runs bare processes'}")
    s = prof["slurm"]
    cache_dir = s.get("image_cache", "").rstrip("/")
    if not cache_dir.startswith("/"):
        raise UsageError(f"cluster '{prof['name']}' names no image cache; set [slurm] image_cache to a directory on "
                         "the shared filesystem that every node sees")
    ref = pyxis_ref(image)
    if is_path(ref) and not ref.startswith("/"):
        raise UsageError(f"image {image!r}: give a squashfs file as an absolute path on the cluster's filesystem")
    be = Backend()
    logs = f"{cache_dir}/.import-logs"
    mk = be._run(s, ["mkdir", "-p", logs])
    if mk.returncode:
        raise LaunchError(f"could not create {logs}: {be._first_error(mk)}")
    argv = ["sbatch", "--parsable", "--wait", "--nodes=1", "--ntasks=1", "--job-name=bridge-launch-import",
            f"--output={logs}/import-%j.out"]
    for key in ("partition", "account", "qos", "reservation"):
        if s.get(key):
            argv.append(f"--{key}={s[key]}")
    argv.append(f"--time={s.get('image_import_time') or '01:00:00'}")
    t0 = time.monotonic()
    proc = be._run(s, argv, stdin=import_script(ref, cache_dir), timeout=timeout)
    elapsed = time.monotonic() - t0
    job_id = (proc.stdout or "").strip().splitlines()[0].split(";")[0] if (proc.stdout or "").strip() else ""
    if not job_id.isdigit():
        raise LaunchError(f"sbatch refused the import job: {be._first_error(proc)}")
    out = be._read(s, f"{logs}/import-{job_id}.out") or ""
    result = parse_result(out)
    if proc.returncode or result is None:
        raise LaunchError(f"importing {ref} failed (job {job_id}): {failure_line(out)}")
    digest, path, how = result
    entry = {"digest": digest, "squashfs": path, "cache_dir": cache_dir, "source": ref, "job_id": job_id,
             "how": how, "imported_at": int(time.time()), "seconds": round(elapsed, 1)}
    remember(prof["name"], ref, entry)
    return entry
