"""The two kinds of failure the CLI reports, each as one line.

UsageError -> exit code 2 (bad input: names, overrides, validation).
LaunchError -> exit code 1 (runtime: a backend refused, a job failed).
"""

from __future__ import annotations

import difflib

# Every exit code a command ends with (docs/reference/exit-codes.md is generated from this table).
EXIT_CODES = {
    0: "Done: the command did what it was asked; a verdict (`check`, `compare`) passed; a followed run "
    "(`--follow`) ended COMPLETED.",
    1: "Runtime failure: a backend refused or failed, a followed run ended otherwise than COMPLETED, a verdict failed.",
    2: "Bad input, nothing submitted: a name, an option, an override or a file is wrong, the job fails "
    "validation, or an optional extra it needs is not installed (the line says which).",
    130: "Interrupted (Ctrl-C): what was being written is left as it was before.",
}
INTERRUPTED = 130


class BridgeLaunchError(Exception):
    exit_code = 1


class UsageError(BridgeLaunchError):
    exit_code = 2


class LaunchError(BridgeLaunchError):
    exit_code = 1


# What lists each kind of name, for the hint in an "unknown X" line.
LISTED_BY = {
    "recipe": "bridge-launch recipes list",
    "cluster": "bridge-launch clusters list",
    "overlay": "bridge-launch overlays list",
}


def suggest(name: str, choices, what: str, canonical: dict | None = None) -> str:
    """'unknown X 'name'; did you mean ...? (valid: ...)' as one line. With `canonical` ({spelling:
    name}, aliases included) the close spellings are offered as the names they stand for, each
    once, and only those names are counted and listed."""
    canon = dict(canonical) if canonical is not None else {c: c for c in choices}
    names = sorted(set(canon.values()))
    close = difflib.get_close_matches(name, sorted(canon), n=6, cutoff=0.5)
    close = list(dict.fromkeys(canon[c] for c in close))[:3]
    msg = f"unknown {what} '{name}'"
    if close:
        msg += "; did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
    listing = LISTED_BY.get(what)
    if len(names) <= 12 or not listing:
        msg += " (valid: " + ", ".join(names) + ")"
    else:
        msg += f" ({len(names)} known; list them with '{listing}')"
    return msg


# The optional extras (pyproject's [project.optional-dependencies]) by the module each distribution
# installs: a command that meets one missing says which extra to install, in one line (exit 2).
EXTRA_MODULES = {
    "torch": ("local", "torch"),
    "numpy": ("local", "numpy"),
    "nemo_run": ("cloud", "nemo-run"),
    "leptonai": ("cloud", "leptonai"),
    "requests": ("cloud", "requests"),
    "megatron.energon": ("data", "megatron-energon"),
    "submitit": ("data", "submitit"),
    "PIL": ("data", "pillow"),
    "tokenizers": ("data", "tokenizers"),
    "megatron.core": ("plan", "megatron-core"),
    "matplotlib": ("plot", "matplotlib"),
}


def missing_extra(exc: ImportError) -> str | None:
    """The one line for an import of an extra's module that failed; None for any other import."""
    name = getattr(exc, "name", None) or ""
    module = next((m for m in EXTRA_MODULES if name == m or name.startswith(m + ".")), None)
    return extra_line(module, str(exc)) if module else None


def extra_line(module: str, why: str = "") -> str:
    """'this needs DIST, of the EXTRA extra (WHY): pip install ...' for a module of EXTRA_MODULES."""
    extra, dist = EXTRA_MODULES[module]
    why = why or f"No module named {module!r}"
    return f"this needs {dist}, of the '{extra}' extra ({why}): pip install 'bridge-launch[{extra}]'"
