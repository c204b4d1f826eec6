"""--bridge-src: pack a local Megatron-Bridge git checkout for the job.

What goes in is what git tracks, as it is in the working tree: the committed files plus the
uncommitted diff (staged or not), and the files of checked-out submodules (Megatron-Bridge
keeps Megatron-LM at 3rdparty/Megatron-LM as one). Untracked and ignored files stay out, as in
NeMo-Run's GitArchivePackager (`git archive` of the ref plus `git submodule foreach --recursive
git archive`), which however packs committed code only; here the working tree's version of each
tracked file is taken, so an edit need not be committed to be tried. The commit and whether the
tree differed from it are recorded with the run, and in the tree itself as git records a detached
head, `.git/HEAD` holding the commit: the job's first line (workloads/image_revision.py, which reads
a checkout's commit from there) then names it against the recipe's pin.
"""

from __future__ import annotations

import io
import os
import stat
import subprocess
import tarfile
from dataclasses import dataclass

from bridge_launch.core.errors import UsageError


@dataclass(frozen=True)
class Packed:
    tar: bytes  # an uncompressed tar of the tree, paths relative to its top
    commit: str
    dirty: bool
    files: int


def _git(path: str, *args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", "-C", path, *args], capture_output=True, timeout=120)
    except FileNotFoundError:
        raise UsageError("--bridge-src needs git on this machine") from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"--bridge-src {path}: git {args[0]} took over 120 s") from None


def checkout(path: str, needs: str | None = None, commit: str | None = None) -> str:
    """The top of the git checkout at `path` (which must be that top), or one clear error. With
    `needs`, a recipe function name upstream Megatron-Bridge lacks (recipes' upstream_status): the
    checkout's tracked files under src/, as they are in the working tree (what pack() ships), must
    name it, or run_recipe.py --recipe would find nothing in the job. With `commit`, the revision a
    recipe pins that its image lacks (recipes' needs_bridge_src): HEAD must be that commit, so that the
    job runs the pinned code (uncommitted edits on top are shipped, and status says so)."""
    if not os.path.isdir(path):
        raise UsageError(f"--bridge-src {path}: no such directory on this machine")
    top = _git(path, "rev-parse", "--show-toplevel")
    if top.returncode:
        raise UsageError(f"--bridge-src {path}: not a git checkout (give the top of a Megatron-Bridge clone)")
    top_dir = top.stdout.decode().strip()
    if os.path.realpath(top_dir) != os.path.realpath(path):
        raise UsageError(f"--bridge-src {path}: inside the checkout {top_dir}; give its top directory")
    head = _git(path, "rev-parse", "--verify", "-q", "HEAD")
    if head.returncode:
        raise UsageError(f"--bridge-src {path}: the checkout has no commit yet")
    at = head.stdout.decode().strip()
    if commit and not at.startswith(commit[:40]) and not commit.startswith(at):
        raise UsageError(
            f"--bridge-src {path}: HEAD is {at[:9]}, but the recipe runs Megatron-Bridge {commit[:9]}; "
            f"check out {commit[:9]} there (git -C {path} checkout {commit[:9]})"
        )
    if needs:
        found = _git(top_dir, "grep", "-q", "-w", "-F", "-e", needs, "--", "src")
        if found.returncode == 1:
            raise UsageError(
                f"--bridge-src {path}: no file under src/ names the recipe function {needs}, which "
                "upstream Megatron-Bridge does not have; give a checkout that carries it"
            )
        if found.returncode:
            raise UsageError(f"--bridge-src {path}: git grep failed: {found.stderr.decode().strip()[:200]}")
    return top_dir


def pack(path: str) -> Packed:
    top = checkout(path)
    commit = _git(top, "rev-parse", "HEAD").stdout.decode().strip()
    status = _git(top, "status", "--porcelain", "--untracked-files=no", "--ignore-submodules=none")
    if status.returncode:
        raise UsageError(f"--bridge-src {path}: git status failed: {status.stderr.decode().strip()[:200]}")
    listed = _git(top, "ls-files", "-z", "--recurse-submodules")
    if listed.returncode:
        raise UsageError(f"--bridge-src {path}: git ls-files failed: {listed.stderr.decode().strip()[:200]}")
    buf = io.BytesIO()
    count = 0
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in sorted(set(p for p in listed.stdout.decode("utf-8", "surrogateescape").split("\0") if p)):
            full = os.path.join(top, rel)
            try:
                st = os.lstat(full)
            except FileNotFoundError:
                continue  # deleted in the working tree: the diff removes it
            info = tarfile.TarInfo(rel)
            info.mtime = int(st.st_mtime)
            if stat.S_ISLNK(st.st_mode):
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(full)
                tar.addfile(info)
            elif stat.S_ISREG(st.st_mode):
                info.size = st.st_size
                info.mode = 0o755 if st.st_mode & 0o111 else 0o644
                with open(full, "rb") as fh:
                    tar.addfile(info, fh)
            else:
                continue
            count += 1
        head = (commit + "\n").encode()
        info = tarfile.TarInfo(".git/HEAD")
        info.size, info.mode = len(head), 0o644
        tar.addfile(info, io.BytesIO(head))
    return Packed(buf.getvalue(), commit, bool(status.stdout.strip()), count)
