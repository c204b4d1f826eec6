"""Hydra-style ``KEY=VALUE`` / ``+KEY=VALUE`` / ``++KEY=VALUE`` parsing for the in-job workload.

Lenient on purpose: the workload receives exactly the tokens Megatron-Bridge's
``scripts/training/run_recipe.py`` would, records the ones it does not use and never fails on
a value it cannot interpret. Standard library only (this file runs inside the job).
"""

from __future__ import annotations

import re

_INT_RE = re.compile(r"^[+-]?\d[\d_]*$")
_FLOAT_RE = re.compile(r"^[+-]?(?:(?:\d[\d_]*)?\.\d[\d_]*|\d[\d_]*\.?)(?:[eE][+-]?\d+)?$")
_KEY_RE = re.compile(r"^[A-Za-z_][\w\-]*(?:[.@/][\w\-]+)*$")


def _parse_quoted(s: str, i: int):
    """Parse a quoted string starting at s[i]; return (value, index after closing quote)
    or (None, len(s)) when unterminated.  Backslash escapes quotes and backslashes; a backslash
    before any other character is kept literally (Windows-ish paths survive)."""
    quote = s[i]
    out = []
    j = i + 1
    while j < len(s):
        c = s[j]
        if c == "\\" and j + 1 < len(s):
            nxt = s[j + 1]
            if nxt in ("\\", "'", '"'):
                out.append(nxt)
                j += 2
                continue
            out.append(c)
            j += 1
            continue
        if c == quote:
            return "".join(out), j + 1
        out.append(c)
        j += 1
    return None, len(s)


def _split_top_level(s: str):
    """Split the inside of a [...] list on top-level commas; None if unbalanced."""
    items, cur, depth, j = [], [], 0, 0
    while j < len(s):
        c = s[j]
        if c in "'\"":
            val, end = _parse_quoted(s, j)
            if val is None:
                return None
            cur.append(s[j:end])
            j = end
            continue
        if c in "[{(":
            depth += 1
        elif c in "]})":
            depth -= 1
            if depth < 0:
                return None
        if c == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        j += 1
    if depth != 0:
        return None
    items.append("".join(cur))
    if len(items) == 1 and not items[0].strip():
        return []
    return items


def parse_value(text: str):
    """Convert one Hydra override value: int, float, bool, null, quoted string, [list]."""
    s = text.strip()
    if s == "":
        return ""
    if s[0] in "'\"":
        val, end = _parse_quoted(s, 0)
        if val is not None and end == len(s):
            return val
        return s
    if s[0] == "[" and s[-1] == "]":
        items = _split_top_level(s[1:-1])
        if items is not None:
            return [parse_value(x) for x in items]
        return s
    low = s.lower()
    if low == "true":
        return True
    if low == "false":
        return False
    if low == "null":
        return None
    if _INT_RE.match(s):
        return int(s.replace("_", ""))
    if _FLOAT_RE.match(s) and any(ch.isdigit() for ch in s):
        return float(s.replace("_", ""))
    if low in ("inf", "+inf", "-inf", "nan", "+nan", "-nan"):
        return float(low)
    return s


def parse_overrides(tokens):
    """Parse argv tokens.  Returns (overrides: dict key->value, unparsed: list of tokens).
    Leading '+'/'++' are stripped from keys; the last occurrence of a key wins."""
    overrides: dict = {}
    unparsed: list = []
    skip_next = False
    for tok in tokens:
        if skip_next:
            skip_next = False
            continue
        if tok in ("--local-rank", "--local_rank"):  # legacy torch.distributed.launch
            skip_next = True
            continue
        if tok.startswith(("--local-rank=", "--local_rank=")):
            continue
        if "=" not in tok or tok.startswith(("-", "~")):
            unparsed.append(tok)
            continue
        key, _, value = tok.partition("=")
        key = key.strip()
        if key.startswith("++"):
            key = key[2:]
        elif key.startswith("+"):
            key = key[1:]
        if not _KEY_RE.match(key):
            unparsed.append(tok)
            continue
        overrides[key] = parse_value(value)
    return overrides, unparsed
