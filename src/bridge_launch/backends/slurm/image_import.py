"""The batch job that imports one image into a profile's cache (`enroot import` on one compute
node, under the image's digest), and how its result is read back."""

from __future__ import annotations

import re

from bridge_launch.backends.base import q
from bridge_launch.core.image_ref import DIGEST

MARK = "bridge-launch-import:"


def import_script(ref: str, cache_dir: str) -> str:
    """The batch script of one import: the digest first (a moved tag gets a new file), then the
    squashfs into a private temporary name and a hard link to `<digest>.sqsh`, which either
    appears whole or, when another import of the same digest got there first, fails and is
    dropped. A squashfs path given as the image is hashed and copied the same way."""
    src = q(ref)
    return (
        "\n".join(
            [
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
                '    [ "sha256:$(sha256sum "$tmp" | cut -d\' \' -f1)" = "$digest" ] || { echo "the image changed '
                'while it was copied" >&2; exit 1; }',
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
            ]
        )
        + "\n"
    )


def parse_result(text: str):
    """(digest, path, how) from the import job's output, or None."""
    for line in reversed(text.splitlines()):
        if line.startswith(MARK):
            parts = line[len(MARK) :].split()
            if len(parts) == 3 and DIGEST.match(parts[0]):
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
