"""Which Megatron-Bridge and Megatron-LM the job's image (or --bridge-src) really runs, against the
revisions the recipe pins: the first line of every Megatron-Bridge job, from its first node, and the
canary's trainer check. Upstream's launcher prints the same facts before training
(Megatron-Bridge scripts/performance/utils/executors.py:178-179 at 067f987 runs
docker/common/print_sha.sh: `git log -1` of /opt/Megatron-Bridge and its 3rdparty/Megatron-LM on
rank 0); this reads them without git and without importing either package (importlib finds the
package; the commit comes from the checkout's .git files, the version from package_info.py).

    python3 image_revision.py --bridge PIN --core PIN [--report FILE]

Prints one line and exits 0 whatever it finds: a different revision is the user's to judge (an image
with a cherry-pick may be what they want), and the line says what runs. Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import sys

MARK = "bridge-launch: image revision:"


def git_commit(start: str) -> str | None:
    """The commit of the checkout a megatron package file lies in, read from files: its root is
    the directory holding the top-level `megatron` package (one more up when that is `src`, as in
    Megatron-Bridge's layout); only a .git directory right there counts, so a package installed
    somewhere inside another repository is not given that repository's commit."""
    d = os.path.dirname(os.path.abspath(start))
    while os.path.basename(d) != "megatron":
        if d == os.path.dirname(d):
            return None
        d = os.path.dirname(d)
    root = os.path.dirname(d)
    if os.path.basename(root) == "src":
        root = os.path.dirname(root)
    git = os.path.join(root, ".git")
    head = os.path.join(git, "HEAD")
    if not os.path.isfile(head):
        return None
    ref = open(head, encoding="utf-8").read().strip()
    if not ref.startswith("ref: "):
        return ref
    name = ref[5:]
    loose = os.path.join(git, name)
    if os.path.isfile(loose):
        return open(loose, encoding="utf-8").read().strip()
    with contextlib.suppress(OSError):
        for line in open(os.path.join(git, "packed-refs"), encoding="utf-8"):
            parts = line.split()
            if len(parts) == 2 and parts[1] == name:
                return parts[0]
    return None


def _version(package_dir: str) -> str | None:
    """MAJOR.MINOR.PATCH[PRE_RELEASE] from the package's package_info.py (both packages keep it there)."""
    try:
        text = open(os.path.join(package_dir, "package_info.py"), encoding="utf-8").read()
    except OSError:
        return None
    parts = {k: re.search(rf"^{k} = ['\"]?([^'\"\n]*)['\"]?$", text, re.M) for k in ("MAJOR", "MINOR", "PATCH")}
    if not all(parts.values()):
        return None
    pre = re.search(r"^PRE_RELEASE = ['\"]([^'\"]*)['\"]", text, re.M)
    return ".".join(m.group(1) for m in parts.values() if m) + (pre.group(1) if pre else "")


def find(name: str) -> dict:
    """{"path", "version", "commit"} of an installed package, or {"error"}; nothing of it is run."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    if spec is None or not spec.origin:
        return {"error": "not installed"}
    package_dir = os.path.dirname(spec.origin)
    return {"path": package_dir, "version": _version(package_dir), "commit": git_commit(spec.origin)}


def compare(found: dict, pin: str) -> str:
    """'same' / 'different' / 'unknown' for a found package against a pinned full or short hash."""
    commit = found.get("commit")
    if not commit or not pin:
        return "unknown"
    n = min(len(commit), len(pin))
    return "same" if n >= 7 and commit[:n] == pin[:n] else "different"


def describe(label: str, found: dict, pin: str) -> str:
    if "error" in found:
        return f"{label} not found ({found['error']}); the recipe pins {pin[:9]}"
    what = f"{label} {found.get('version') or '?'}"
    commit = found.get("commit")
    what += f" @ {commit[:9]}" if commit else " (no git checkout: its commit is unknown)"
    verdict = compare(found, pin)
    return (
        what
        + {
            "same": f" = the pin {pin[:9]}",
            "different": f", NOT the pin {pin[:9]}",
            "unknown": f"; the recipe pins {pin[:9]}",
        }[verdict]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="image_revision.py")
    ap.add_argument("--bridge", required=True, help="the Megatron-Bridge commit the recipe pins")
    ap.add_argument("--core", required=True, help="the megatron-core commit that revision pins")
    ap.add_argument("--report", default="", help="also write the findings here as JSON")
    args = ap.parse_args(argv)
    found = {"megatron_bridge": find("megatron.bridge"), "megatron_core": find("megatron.core")}
    verdicts = {
        k: compare(found[k], pin) for k, pin in (("megatron_bridge", args.bridge), ("megatron_core", args.core))
    }
    line = (
        f"{MARK} {describe('Megatron-Bridge', found['megatron_bridge'], args.bridge)}; "
        f"{describe('megatron-core', found['megatron_core'], args.core)}"
    )
    if "different" in verdicts.values():
        line += " (the job runs the image's code, not the pinned revision: --bridge-src at the pin runs that)"
    print(line, flush=True)
    if args.report:
        with contextlib.suppress(OSError):
            os.makedirs(os.path.dirname(args.report) or ".", exist_ok=True)
            with open(args.report, "w", encoding="utf-8") as fh:
                json.dump({"found": found, "pins": {"bridge": args.bridge, "core": args.core}, **verdicts}, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
