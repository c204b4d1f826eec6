"""The two kinds of failure the CLI reports, each as one line.

UsageError -> exit code 2 (bad input: names, overrides, validation).
LaunchError -> exit code 1 (runtime: a backend refused, a job failed).
"""

from __future__ import annotations

import difflib


class BridgeLaunchError(Exception):
    exit_code = 1


class UsageError(BridgeLaunchError):
    exit_code = 2


class LaunchError(BridgeLaunchError):
    exit_code = 1


def suggest(name: str, choices, what: str) -> str:
    """'unknown X 'name'; did you mean ...? (valid: ...)' as one line."""
    choices = sorted(set(choices))
    close = difflib.get_close_matches(name, choices, n=3, cutoff=0.5)
    msg = f"unknown {what} '{name}'"
    if close:
        msg += "; did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
    if len(choices) <= 12:
        msg += " (valid: " + ", ".join(choices) + ")"
    else:
        msg += f" ({len(choices)} known; list them with 'bridge-launch {what}s list')"
    return msg
