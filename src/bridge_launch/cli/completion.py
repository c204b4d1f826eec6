"""Shell completion: what TAB offers (recipe, cluster and overlay names, run ids, override keys
from the ConfigContainer schema) and the scripts that wire it into bash, zsh, fish and
PowerShell. Never fails: a broken user file or a missing registry offers nothing."""

from __future__ import annotations

import contextlib

PROG = "bridge-launch"
COMPLETE_VAR = "_BRIDGE_LAUNCH_COMPLETE"
SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")


def _safe(fn):
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception:  # noqa: BLE001 - completion must never print a traceback into the shell
            return []

    return wrapper


@_safe
def recipes(incomplete: str) -> list[str]:
    """Recipes a user can run: the listed names, never the abstract bases."""
    from bridge_launch.spec import recipes as r

    return [n for n in r.catalog().names(listed=True) if n.startswith(incomplete)]


@_safe
def clusters(incomplete: str) -> list[str]:
    from bridge_launch.spec import clusters as c

    return [n for n in c.catalog().names(listed=True) if n.startswith(incomplete)]


@_safe
def overlays(incomplete: str) -> list[str]:
    from bridge_launch.spec import recipes as r

    return [n for n in r.overlay_catalog().names(listed=True) if n.startswith(incomplete)]


@_safe
def runs(incomplete: str) -> list[str]:
    """Recorded run ids, newest first (nothing when no run was ever recorded)."""
    from bridge_launch.core import paths

    if not paths.registry_file().exists():
        return []
    from bridge_launch.runs.registry import Registry

    reg = Registry()
    try:
        return [r.run_id for r in reg.find(incomplete)] if incomplete else [r.run_id for r in reg.recent(50)]
    finally:
        reg.close()


@_safe
def override_keys(incomplete: str, recipe: str | None = None) -> list[str]:
    """KEY=VALUE overrides: keys from the schema (plus the recipe's own), one dotted level at a
    time ("mo" -> "model.", "model.hidden" -> "model.hidden_size="); after '=', the values a key
    accepts when they are few (true/false, its choices). Keeps a +, ++ or ~ prefix."""
    from bridge_launch.spec import schema

    prefix = ""
    for p in ("++", "+", "~"):
        if incomplete.startswith(p):
            prefix, incomplete = p, incomplete[len(p) :]
            break
    if "=" in incomplete:
        key, _, value = incomplete.partition("=")
        spec = schema.lookup(key) or {}
        values = ["true", "false"] if spec.get("type") == "bool" else [str(c) for c in spec.get("choices") or []]
        return [f"{prefix}{key}={v}" for v in values if v.startswith(value)]
    keys = set(schema.fields())
    if recipe:
        with contextlib.suppress(Exception):
            from bridge_launch.spec import recipes as r

            data = r.load(recipe)
            keys |= set(data["config"]) | set(data["upstream_config"])
    out = []
    for key in sorted(keys):
        if not key.startswith(incomplete):
            continue
        dot = key.find(".", len(incomplete))
        out.append(key[: dot + 1] if dot >= 0 else key + ("" if prefix == "~" else "="))
    return [prefix + k for k in dict.fromkeys(out)]


def detect_shell() -> str:
    """The shell this runs under (as Typer finds it), else bash."""
    try:
        import shellingham

        return shellingham.detect_shell()[0]
    except Exception:  # noqa: BLE001 - no shell to detect (e.g. under cron)
        return "bash"


def _check(shell: str) -> str:
    from bridge_launch.core.errors import UsageError

    if shell not in SHELLS:
        raise UsageError(f"unknown shell {shell!r}; valid: {', '.join(SHELLS)}")
    return shell


def script(shell: str) -> str:
    """The completion script for `shell` (Typer's, wired to bridge-launch)."""
    from typer._completion_shared import get_completion_script

    return get_completion_script(prog_name=PROG, complete_var=COMPLETE_VAR, shell=_check(shell))


def install(shell: str):
    from typer._completion_shared import install as typer_install

    return typer_install(shell=_check(shell), prog_name=PROG, complete_var=COMPLETE_VAR)
