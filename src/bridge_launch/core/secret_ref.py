"""The secret-source grammar: how a profile or `--secret NAME=SOURCE` names where a secret's value
is read on the cluster (`file:PATH`, `netrc:MACHINE[:PATH]`; backends/slurm/secrets.py reads it
there), and the profile's policy for secrets that have none."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from bridge_launch.core.errors import UsageError

ENV_POLICIES = ("warn", "refuse")


DEFAULT_NETRC = "~/.netrc"


_MACHINE = re.compile(r"^[A-Za-z0-9._-]+$")


FILE_HINT = "file:PATH (a file on the cluster that only you can read) or netrc:MACHINE[:PATH]"


@dataclass(frozen=True)
class Source:
    kind: str  # "file" | "netrc"
    path: str  # absolute, or ~/... (the home directory on the cluster)
    machine: str = ""  # netrc: whose password

    def shell_path(self) -> str:
        """The path as the shell on the cluster expands it: ~/ is that shell's $HOME."""
        if self.path.startswith("~/"):
            rest = self.path[2:]
            return '"$HOME"' + (f"/{shlex.quote(rest)}" if rest else "")
        return shlex.quote(self.path)


def parse(text: str, where: str) -> Source:
    """A source as a profile or --secret NAME=SOURCE writes it; one clear line when it is not one."""
    kind, sep, rest = str(text).partition(":")
    if kind == "file" and sep:
        src = Source("file", rest)
    elif kind == "netrc" and sep:
        machine, _, path = rest.partition(":")
        if not _MACHINE.match(machine):
            raise UsageError(
                f"{where}: secret source {text!r} names no machine; valid: netrc:MACHINE[:PATH], "
                "e.g. netrc:api.wandb.ai"
            )
        src = Source("netrc", path or DEFAULT_NETRC, machine)
    else:  # not echoed: it may be a value typed where a source belongs
        raise UsageError(
            f"{where}: a secret source is {FILE_HINT}, e.g. file:~/.cache/huggingface/token or "
            "netrc:api.wandb.ai; never a value (values are not given on command lines or in profiles)"
        )
    if not (src.path.startswith("/") or src.path.startswith("~/")) or src.path in ("/", "~/"):
        raise UsageError(
            f"{where}: secret source {text!r}: the path must be absolute or start with ~/ "
            "(the home directory on the cluster)"
        )
    if any(c in src.path for c in "\0\n"):
        raise UsageError(f"{where}: secret source {text!r}: the path contains a newline or NUL")
    return src
