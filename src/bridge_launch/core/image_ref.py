"""Container image references, in pyxis/enroot's form and in Docker's.

- pyxis/enroot: `[USER@][REGISTRY#]IMAGE[:TAG]` (pyxis args.c, `--container-image` help; enroot's
  `import` help), or a squashfs path, which pyxis recognises by a leading '/' or '.'
  (pyxis_slurmstepd.c: `strspn(image, "./") > 0`). enroot takes `registry/image` only from 4.0;
  older enroot turns it into a Docker Hub lookup, so the Slurm renderer always writes `#`.
- Docker, Lepton, Run:ai: `REGISTRY/IMAGE[:TAG]`.
Users may write either; the first path component is a registry when it has a '.' or ':' or is
`localhost` (Docker's own rule: distribution/reference, splitDockerDomain).
"""

from __future__ import annotations

import re

from bridge_launch.core.errors import UsageError

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


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
        raise UsageError(
            f"container image {ref!r} looks like a squashfs file; give its absolute path "
            "(pyxis reads a name without a leading '/' or '.' as a registry image)"
        )
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
