"""Experiments: a named group of runs submitted together — one per combination of a sweep over
overrides (Hydra's `key=a,b`, `choice(...)`, `range(...)`, only with --sweep), or one per recipe
(`submit qwen35-vl-sft qwen35-vl-sft-mxfp8 --overlay validation-run`) — then shown together in
`status NAME` and compared together in `compare NAME`.

Membership is kept in the run registry (runs.Registry: tables `experiments` and
`experiment_runs`, added beside `runs`; each member's info also names its experiment)."""

from __future__ import annotations

import itertools
import re
import secrets as _random
import time
from dataclasses import dataclass

from bridge_launch.core.errors import UsageError

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass
class Member:
    recipe: str
    overrides: list  # without sweeps
    label: str  # what sets it apart: the recipe and/or the swept values


def _range_items(start, stop, step) -> list:
    """Hydra's range(start, stop, step): like Python's, floats allowed (hydra/_internal/
    core_plugins/basic_sweeper.py expands RangeSweep through `range`/a float loop)."""
    if step == 0:
        raise UsageError("range(): step must not be 0")
    out, v = [], start
    while (v < stop) if step > 0 else (v > stop):
        out.append(v)
        v = v + step
        if len(out) > 10000:
            raise UsageError("range(): more than 10,000 values")
    return out


def sweep_values(text: str) -> tuple[str, str, list] | None:
    """(op, key, [values]) of a sweep override, or None if `text` is not a sweep."""
    from bridge_launch.spec.overrides import OverrideError, parse_override

    try:
        ov = parse_override(text)
    except OverrideError as exc:
        raise UsageError(str(exc)) from None
    if not ov.is_sweep:
        return None
    sw = ov.value
    where = f"override '{text}'"
    if sw.kind == "choice":
        values = list(sw.items)
        if any(type(v).__name__ == "Sweep" for v in values):
            raise UsageError(f"{where}: nested sweeps cannot be expanded")
    elif sw.kind == "range":
        values = _range_items(*sw.items)
    elif sw.kind == "interval":
        raise UsageError(
            f"{where}: interval() is a continuous range that only a sampler can draw from; "
            "give the values as a choice, e.g. key=0.1,0.2"
        )
    else:
        raise UsageError(f"{where}: {sw.kind} sweeps select config groups, which bridge-launch does not have")
    if not values:
        raise UsageError(f"{where}: the sweep has no values")
    return ov.op, ov.key, values


def expand(recipes: list[str], overrides: list[str], *, sweep: bool) -> list[Member]:
    """One member per recipe x combination of swept values (Hydra's BasicSweeper order: the
    cartesian product, the first sweep varying slowest). Without `sweep` a sweep is an error."""
    from bridge_launch.spec.overrides import format_override

    fixed: list[tuple[int, str]] = []
    axes: list[tuple[int, list[str], list[str]]] = []  # (position, tokens, labels)
    for i, text in enumerate(overrides):
        sv = sweep_values(text)
        if sv is None:
            fixed.append((i, text))
            continue
        if not sweep:
            raise UsageError(
                f"override '{text}': sweeps submit one run per value; add --sweep to do that "
                "(without it, a comma is an error: quote it, key='a,b', for a string)"
            )
        op, key, values = sv
        tokens = [format_override(key, v, op) for v in values]
        axes.append((i, tokens, [t.lstrip("+") for t in tokens]))
    members = []
    combos = list(itertools.product(*[a[1] for a in axes])) if axes else [()]
    for recipe in recipes:
        for combo in combos:
            chosen = dict(fixed)
            chosen.update({axes[k][0]: tok for k, tok in enumerate(combo)})
            ordered = [chosen[i] for i in sorted(chosen)]
            swept = [tok.lstrip("+") for tok in combo]
            label = " ".join(([recipe] if len(recipes) > 1 else []) + swept) or recipe
            members.append(Member(recipe, ordered, label))
    if len(members) > 256:
        raise UsageError(f"the sweep makes {len(members)} runs; at most 256 are submitted at once")
    return members


def split_recipes(first: str, words: list[str]) -> tuple[list[str], list[str]]:
    """Recipe names among the positional words (a word with no '=' that names a recipe), and the rest."""
    from bridge_launch.spec import recipes as catalog

    cat = catalog.catalog()
    recipes, rest = [first], []
    for w in words:
        if "=" not in w and not w.startswith(("~", "+")) and looks_like_recipe(w, cat):
            recipes.append(w)
        else:
            rest.append(w)
    return recipes, rest


def looks_like_recipe(word: str, cat=None) -> bool:
    from bridge_launch.spec import recipes as catalog

    cat = cat or catalog.catalog()
    try:
        cat.get(word)
    except UsageError:
        return False
    return True


def new_name(recipe: str) -> str:
    stem = recipe[:20].strip("-")
    return f"{stem}-x{time.strftime('%m%d')}-{_random.token_hex(2)}"


def check_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise UsageError(
            f"--experiment {name!r}: use letters, digits, '.', '_' and '-' (at most 64, starting "
            "with a letter or digit)"
        )
    return name
