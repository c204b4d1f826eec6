"""The import table of docs/explanation/architecture.md, from the AST (imports inside functions count): no cycle between
modules, no import a folder's row does not allow, one module per name."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PKG_DIR = Path(__file__).resolve().parents[1] / "src" / "bridge_launch"
PKG = "bridge_launch"

ARCHITECTURE = PKG_DIR.parents[1] / "docs" / "explanation" / "architecture.md"


def _import_table() -> dict[str, set[str]]:
    """folder -> the folders it may import (besides itself), from the architecture page's table (its one
    copy); the root package counts as core, "nothing..." allows none, "everything" every other folder."""
    text = ARCHITECTURE.read_text()
    rows = text[text.index("| folder | may import |") :].split("\n\n", 1)[0].splitlines()[2:]
    table = {}
    for row in rows:
        folder, allowed = (cell.strip() for cell in row.strip("|").split("|"))
        table[folder] = set() if allowed.startswith("nothing") else {a.strip() for a in allowed.split(",")}
    for folder, allowed in table.items():
        if allowed == {"everything"}:
            table[folder] = set(table) - {folder}
    return table


ALLOWED = _import_table()


def _name(path: Path) -> str:
    parts = list(path.relative_to(PKG_DIR.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in PKG_DIR.rglob("*.py")}


def _target(dotted: str) -> str | None:
    while dotted and dotted not in MODULES:
        dotted = dotted.rpartition(".")[0]
    return dotted or None


def imports(module: str) -> dict[str, int]:
    """The package modules `module` imports (anywhere in it), each with the first line that does."""
    path = MODULES[module]
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: len(module.split(".")) - node.level + (path.name == "__init__.py")]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" for a in node.names]
        for dotted in targets:
            if dotted.split(".")[0] != PKG:
                continue
            t = _target(dotted)
            if t and t != module:
                found.setdefault(t, node.lineno)
    return found


GRAPH = {m: imports(m) for m in MODULES}


def folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in ALLOWED) else "core"


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def disallowed(graph: dict[str, dict[str, int]]) -> list[str]:
    bad = []
    for m, targets in sorted(graph.items()):
        for t, line in sorted(targets.items()):
            src, dst = folder(m), folder(t)
            if src != dst and dst not in ALLOWED[src]:
                bad.append(f"{MODULES[m].relative_to(PKG_DIR.parent)}:{line}: {m} -> {t} ({src} may not import {dst})")
    return bad


def test_every_folder_has_a_row():
    assert {folder(m) for m in MODULES} <= set(ALLOWED)


def test_no_import_cycle():
    found = cycles(GRAPH)
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_no_import_the_table_does_not_allow():
    bad = disallowed(GRAPH)
    assert not bad, "\n".join(bad)


def test_module_names_are_unique():
    names = defaultdict(list)
    for m in MODULES:
        if not m.endswith("__init__") and m.count(".") >= 1 and MODULES[m].name != "__init__.py":
            names[m.rsplit(".", 1)[1]].append(m)
    assert not {n: ms for n, ms in names.items() if len(ms) > 1}


def test_the_checks_see_a_cycle_and_an_upward_import():
    graph = {"bridge_launch.core.a": {"bridge_launch.cli.b": 3}, "bridge_launch.cli.b": {"bridge_launch.core.a": 1}}
    assert cycles(graph) == [["bridge_launch.cli.b", "bridge_launch.core.a"]]
    saved = dict(MODULES)
    MODULES.update({m: PKG_DIR / "core" / "a.py" for m in graph})
    try:
        assert [b.split(": ", 1)[1] for b in disallowed(graph)] == [
            "bridge_launch.core.a -> bridge_launch.cli.b (core may not import cli)"
        ]
    finally:
        MODULES.clear()
        MODULES.update(saved)


def _prints(tree: ast.AST) -> list[int]:
    """Lines that print: print(...) or any use of sys.stdout / sys.stderr."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
            out.append(node.lineno)
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in ("stdout", "stderr")
            and isinstance(node.value, ast.Name)
            and node.value.id == "sys"
        ):
            out.append(node.lineno)
    return sorted(out)


def test_only_the_cli_prints():
    # the architecture page: backends render and submit and print nothing; what a user should know comes back as
    # data or notes (Backend.notes) and cli says it. workloads/ runs inside the job: its output is the job's.
    found = {
        f"{name}:{line}"
        for name, path in MODULES.items()
        if name.split(".")[1:2] not in (["cli"], ["workloads"])
        for line in _prints(ast.parse(path.read_text()))
    }
    assert found == set()


def test_the_print_finder_finds_prints():
    assert _prints(ast.parse("import sys\nprint(1)\nsys.stderr.write('x')\nx = sys.stdout\n")) == [2, 3, 4]
