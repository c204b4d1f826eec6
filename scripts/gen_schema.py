#!/usr/bin/env python3
"""Regenerate ``src/bridge_launch/spec/schema/config_container-<short commit>.json`` for one revision.

The schema lists every override key of Megatron-Bridge's ``ConfigContainer``
(``model.tensor_model_parallel_size``, ``dataset.seq_length``, ...) with a
coarse type, so bridge-launch can tell known keys from typos and check values
before a job is submitted.

It is derived by *reading* the upstream sources with :mod:`ast`; nothing from
Megatron-Bridge or Megatron-Core is imported, built or executed, and only the
standard library is used.

Usage::

    python scripts/gen_schema.py BRIDGE MCORE [-o OUT] [--bridge-rev REV] [--mcore-rev REV]

``BRIDGE`` is a Megatron-Bridge checkout (or bare git repository) and ``MCORE``
a Megatron-LM checkout, a bare git repository, or an unpacked ``megatron-core``
sdist/site-packages directory (anything that contains ``megatron/core``; note
that Bridge also needs ``megatron/training``, which only the Megatron-LM
repository ships).  For a git repository the sources are read from a revision
with ``git cat-file`` (no work tree needed): ``--bridge-rev`` defaults to
``HEAD`` for a bare repository (else the work tree is read), and
``--mcore-rev`` defaults to the ``3rdparty/Megatron-LM`` submodule commit that
the Bridge revision pins.

Type vocabulary: ``int float bool str list dict any``.  ``Optional[X]`` gives
``"nullable": true``; ``Literal``/``Enum`` give ``"choices"``; a union of
several unrelated types gives ``any``; callables, ``torch.dtype`` and other
non-data objects give ``any`` with a ``note``.  Dataclass-typed fields are
flattened into dotted keys and the parent key is kept as ``dict``.  Sections
that may hold one of several classes (``model``, ``dataset``, ``peft``, ...)
get the union of their fields; when classes disagree the looser type wins and
``only_in`` names the classes that declare a field not common to all.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# --------------------------------------------------------------------------
# Which classes make up the union sections.  Everything else is derived from
# the ConfigContainer annotations.  Entries are "module:Class".
# --------------------------------------------------------------------------

CONTAINER = "megatron.bridge.training.config:ConfigContainer"
SCHEMA_DIR = Path(__file__).resolve().parents[1] / "src" / "bridge_launch" / "spec" / "schema"

SECTION_CLASSES: dict[str, list[str]] = {
    # GPT, Mamba/hybrid (Nemotron-H and Nemotron 3 Nano/Super recipes build a
    # HybridModelProvider; Qwen3.5 text / Qwen3.5-MoE / Qwen3-Next bridges
    # return a plain GPTModelProvider) and the Qwen3-VL / Qwen3.5-VL providers.
    "model": [
        "megatron.bridge.models.gpt_provider:GPTModelProvider",
        "megatron.bridge.models.hybrid.hybrid_provider:HybridModelProvider",
        "megatron.bridge.models.mamba.mamba_provider:MambaModelProvider",
        "megatron.bridge.models.qwen_vl.qwen3_vl_provider:Qwen3VLModelProvider",
        "megatron.bridge.models.qwen_vl.qwen3_vl_provider:Qwen3VLMoEModelProvider",
        "megatron.bridge.models.qwen_vl.qwen35_vl_provider:Qwen35VLModelProvider",
        "megatron.bridge.models.qwen_vl.qwen35_vl_provider:Qwen35VLMoEModelProvider",
    ],
    # Dataset configs that recipes of those model families put into cfg.dataset.
    "dataset": [
        "megatron.bridge.training.config:GPTDatasetConfig",
        "megatron.bridge.training.config:MockGPTDatasetConfig",
        "megatron.bridge.training.config:GPTFIMDatasetConfig",
        "megatron.bridge.data.builders.gpt_sft:GPTSFTDatasetConfig",
        "megatron.bridge.data.builders.gpt_sft:FinetuningDatasetConfig",
        "megatron.bridge.data.builders.direct_hf_sft:DirectHFSFTDatasetConfig",
        "megatron.bridge.data.builders.energon:EnergonDatasetConfig",
        "megatron.bridge.data.builders.mock_vlm_sft:MockVLMSFTDatasetConfig",
        # DatasetProvider (the abstract base in ConfigContainer's annotation) only adds the
        # DataloaderConfig fields, which every class above already has.
    ],
}

# Scalar-ish external types.
EXTERNAL_TYPES: dict[str, tuple[str, str | None]] = {
    "builtins.int": ("int", None),
    "builtins.float": ("float", None),
    "builtins.bool": ("bool", None),
    "builtins.str": ("str", None),
    "builtins.bytes": ("str", None),
    "builtins.complex": ("any", "complex"),
    "builtins.object": ("any", None),
    "builtins.list": ("list", None),
    "builtins.tuple": ("list", None),
    "builtins.set": ("list", None),
    "builtins.frozenset": ("list", None),
    "builtins.dict": ("dict", None),
    "builtins.type": ("any", "class object"),
    "builtins.callable": ("any", "callable"),
    "typing.Any": ("any", None),
    "typing.List": ("list", None),
    "typing.Tuple": ("list", None),
    "typing.Set": ("list", None),
    "typing.FrozenSet": ("list", None),
    "typing.Sequence": ("list", None),
    "typing.MutableSequence": ("list", None),
    "typing.Iterable": ("list", None),
    "typing.Collection": ("list", None),
    "collections.abc.Sequence": ("list", None),
    "collections.abc.Iterable": ("list", None),
    "collections.abc.MutableSequence": ("list", None),
    "typing.Dict": ("dict", None),
    "typing.Mapping": ("dict", None),
    "typing.MutableMapping": ("dict", None),
    "typing.OrderedDict": ("dict", None),
    "typing.DefaultDict": ("dict", None),
    "collections.OrderedDict": ("dict", None),
    "collections.defaultdict": ("dict", None),
    "collections.abc.Mapping": ("dict", None),
    "collections.abc.MutableMapping": ("dict", None),
    "typing.Callable": ("any", "callable"),
    "collections.abc.Callable": ("any", "callable"),
    "typing.Type": ("any", "class object"),
    "pathlib.Path": ("str", None),
    "pathlib.PurePath": ("str", None),
    "os.PathLike": ("str", None),
    "signal.Signals": ("any", "signal.Signals (e.g. signal.SIGTERM)"),
    "torch.dtype": ("any", "torch.dtype"),
}
SKIP_ANNOTATIONS = {"typing.ClassVar", "dataclasses.InitVar", "dataclasses.KW_ONLY"}
ENUM_BASES = {"enum.Enum", "enum.IntEnum", "enum.StrEnum", "enum.Flag", "enum.IntFlag"}
ABSTRACT_BASES = {"abc.ABC"}
# ``field(init=False)`` fields are derived values (split_matrix, lr_warmup_steps, ...) that
# finalize()/__post_init__/setup recompute, so an override would be overwritten: they are
# left out unless listed here as "Class.field".
INIT_FALSE_SETTABLE: set[str] = set()
TYPES = ("int", "float", "bool", "str", "list", "dict", "any")
MAX_DEPTH = 6


# --------------------------------------------------------------------------
# Reading source trees (work tree or git revision)
# --------------------------------------------------------------------------


def _git(repo: str, *args: str, input_: bytes | None = None) -> bytes:
    return subprocess.run(
        ["git", "-C", repo, *args], input=input_, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True
    ).stdout


def _is_git(path: str) -> bool:
    try:
        _git(path, "rev-parse", "--git-dir")
        return True
    except (subprocess.CalledProcessError, FileNotFoundError):
        return False


def _is_bare(path: str) -> bool:
    try:
        return _git(path, "rev-parse", "--is-bare-repository").strip() == b"true"
    except (subprocess.CalledProcessError, FileNotFoundError):
        return False


class Tree:
    """Python files under ``megatron/`` of one source tree."""

    def __init__(self, path: str, rev: str | None, want: tuple[str, ...]):
        self.path = path
        self.rev = None
        self.files: dict[str, str] = {}  # module name -> source text
        self.paths: dict[str, str] = {}  # module name -> path in tree
        if rev is not None:
            self.rev = _git(path, "rev-parse", rev + "^{commit}").decode().strip()
            self._load_git(want)
        else:
            self._load_fs(want)

    @staticmethod
    def _module_name(rel: str, root: str) -> str | None:
        if not rel.endswith(".py") or not rel.startswith(root):
            return None
        parts = rel[len(root) : -3].split("/")
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if not parts or any(not p.isidentifier() for p in parts):
            return None
        return ".".join(parts)

    def _keep(self, mod: str, want: tuple[str, ...]) -> bool:
        return any(mod == w or mod.startswith(w + ".") for w in want)

    def _load_git(self, want):
        listing = _git(self.path, "ls-tree", "-r", "--full-tree", self.rev).decode()
        entries = []
        blobs = {}
        for line in listing.splitlines():
            meta, rel = line.split("\t", 1)
            _mode, kind, sha = meta.split()
            if kind == "blob" and rel.endswith(".py"):
                blobs[rel] = sha
        root = self._root(blobs.keys())
        for rel, sha in blobs.items():
            mod = self._module_name(rel, root)
            if mod and self._keep(mod, want):
                entries.append((mod, rel, sha))
        out = _git(self.path, "cat-file", "--batch", input_="".join(f"{s}\n" for _, _, s in entries).encode())
        pos = 0
        for mod, _rel, _sha in entries:
            nl = out.index(b"\n", pos)
            size = int(out[pos:nl].split()[2])
            self.files[mod] = out[nl + 1 : nl + 1 + size].decode("utf-8", "replace")
            self.paths[mod] = rel
            pos = nl + 1 + size + 1

    def _load_fs(self, want):
        base = Path(self.path)
        rels = [str(p.relative_to(base)).replace(os.sep, "/") for p in base.rglob("*.py")]
        root = self._root(rels)
        for rel in rels:
            mod = self._module_name(rel, root)
            if mod and self._keep(mod, want):
                self.files[mod] = (base / rel).read_text(encoding="utf-8", errors="replace")
                self.paths[mod] = rel

    @staticmethod
    def _root(rels) -> str:
        rels = set(rels)
        for root in ("src/", ""):
            if any(r.startswith(root + "megatron/") for r in rels):
                return root
        raise SystemExit("no megatron/ package found in source tree")


# --------------------------------------------------------------------------
# Symbols and resolution
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Sym:
    kind: str  # "class" | "alias" | "module" | "external"
    module: str
    name: str  # class/alias name, module name, or qualified external name

    @property
    def qual(self) -> str:
        return self.name if self.kind in ("module", "external") else f"{self.module}.{self.name}"


@dataclass
class Binding:
    kind: str  # "import_module" | "import_from" | "class" | "alias"
    target: str = ""
    attr: str = ""
    node: ast.AST | None = None


@dataclass
class Module:
    name: str
    is_pkg: bool
    tree: ast.Module | None
    bindings: dict[str, Binding] = field(default_factory=dict)


@dataclass
class FieldInfo:
    name: str
    annotation: ast.AST
    module: str
    owner: str
    init: bool
    default: ast.AST | None = None


class Index:
    def __init__(self, trees: list[Tree]):
        self.sources: dict[str, tuple[Tree, str]] = {}
        for t in trees:
            for mod, text in t.files.items():
                self.sources.setdefault(mod, (t, text))
        self._mods: dict[str, Module] = {}
        self._class_cache: dict[Sym, dict] = {}
        self.warnings: list[str] = []

    # -- modules -------------------------------------------------------------
    def has_module(self, name: str) -> bool:
        return name in self.sources

    def module(self, name: str) -> Module | None:
        if name in self._mods:
            return self._mods[name]
        if name not in self.sources:
            return None
        tree_obj, text = self.sources[name]
        is_pkg = tree_obj.paths[name].endswith("__init__.py")
        try:
            tree = ast.parse(text)
        except SyntaxError as e:  # pragma: no cover - depends on upstream
            self.warnings.append(f"cannot parse {name}: {e}")
            tree = None
        mod = Module(name, is_pkg, tree)
        self._mods[name] = mod
        if tree is not None:
            self._collect(mod, tree.body)
        return mod

    def _abs_module(self, mod: Module, level: int, target: str | None) -> str:
        if level == 0:
            return target or ""
        parts = mod.name.split(".")
        if not mod.is_pkg:
            parts = parts[:-1]
        if level > 1:
            parts = parts[: len(parts) - (level - 1)]
        base = ".".join(parts)
        return f"{base}.{target}" if target else base

    def _bind(self, mod: Module, name: str, b: Binding):
        old = mod.bindings.get(name)
        if old is None or (b.kind == "class" and old.kind != "class"):
            mod.bindings[name] = b

    def _collect(self, mod: Module, body: list[ast.stmt]):
        for st in body:
            if isinstance(st, ast.Import):
                for a in st.names:
                    if a.asname:
                        self._bind(mod, a.asname, Binding("import_module", a.name))
                    else:
                        top = a.name.split(".")[0]
                        self._bind(mod, top, Binding("import_module", top))
            elif isinstance(st, ast.ImportFrom):
                src = self._abs_module(mod, st.level, st.module)
                for a in st.names:
                    if a.name == "*":
                        continue
                    self._bind(mod, a.asname or a.name, Binding("import_from", src, a.name))
            elif isinstance(st, ast.ClassDef):
                self._bind(mod, st.name, Binding("class", node=st))
            elif isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
                self._bind(mod, st.targets[0].id, Binding("alias", node=st.value))
            elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value is not None:
                self._bind(mod, st.target.id, Binding("alias", node=st.value))
            elif isinstance(st, ast.If):
                self._collect(mod, st.body)
                self._collect(mod, st.orelse)
            elif isinstance(st, ast.Try):
                self._collect(mod, st.body)
                for h in st.handlers:
                    self._collect(mod, h.body)
                self._collect(mod, st.orelse)
            elif isinstance(st, ast.With):
                self._collect(mod, st.body)

    # -- names ---------------------------------------------------------------
    def resolve_name(self, modname: str, name: str, _seen=None) -> Sym | None:
        """Resolve ``name`` as seen from module ``modname``."""
        _seen = _seen or set()
        if (modname, name) in _seen:
            return None
        _seen.add((modname, name))
        mod = self.module(modname)
        if mod is None:
            return Sym("external", "", f"{modname}.{name}")
        b = mod.bindings.get(name)
        if b is None:
            sub = f"{modname}.{name}"
            if self.has_module(sub):
                return Sym("module", "", sub)
            if hasattr(builtins, name):
                return Sym("external", "", f"builtins.{name}")
            return None
        if b.kind == "class":
            return Sym("class", modname, name)
        if b.kind == "alias":
            return Sym("alias", modname, name)
        if b.kind == "import_module":
            return Sym("module", "", b.target) if self.has_module(b.target) else Sym("external", "", b.target)
        # import_from
        if self.has_module(b.target):
            r = self.resolve_name(b.target, b.attr, _seen)
            if r is not None:
                return r
            return Sym("external", "", f"{b.target}.{b.attr}")
        sub = f"{b.target}.{b.attr}"
        if self.has_module(sub):
            return Sym("module", "", sub)
        return Sym("external", "", _normalize_external(sub))

    def resolve_expr(self, modname: str, node: ast.AST) -> Sym | None:
        if isinstance(node, ast.Name):
            return self.resolve_name(modname, node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve_expr(modname, node.value)
            if base is None:
                return None
            if base.kind == "module":
                if self.has_module(base.name):
                    return self.resolve_name(base.name, node.attr)
                return Sym("external", "", _normalize_external(f"{base.name}.{node.attr}"))
            if base.kind == "external":
                return Sym("external", "", _normalize_external(f"{base.name}.{node.attr}"))
            return None
        return None

    def alias_node(self, sym: Sym) -> ast.AST:
        return self.module(sym.module).bindings[sym.name].node

    def class_node(self, sym: Sym) -> ast.ClassDef:
        return self.module(sym.module).bindings[sym.name].node

    # -- classes -------------------------------------------------------------
    def deref(self, modname: str, node: ast.AST, depth=0) -> Sym | None:
        """Resolve an expression to a class/external symbol, following plain aliases."""
        sym = self.resolve_expr(modname, node)
        while sym is not None and sym.kind == "alias" and depth < 10:
            target = self.alias_node(sym)
            if not isinstance(target, (ast.Name, ast.Attribute)):
                return sym
            sym = self.resolve_expr(sym.module, target)
            depth += 1
        return sym

    def class_info(self, sym: Sym) -> dict:
        if sym in self._class_cache:
            return self._class_cache[sym]
        node = self.class_node(sym)
        info = {"bases": [], "dataclass": False, "own": [], "enum_members": [], "node": node}
        self._class_cache[sym] = info
        for d in node.decorator_list:
            target = d.func if isinstance(d, ast.Call) else d
            r = self.resolve_expr(sym.module, target)
            if r is not None and r.qual in ("dataclasses.dataclass",):
                info["dataclass"] = True
        for b in node.bases:
            if isinstance(b, ast.Subscript):
                b = b.value
            r = self.deref(sym.module, b)
            if r is not None:
                info["bases"].append(r)
        for st in node.body:
            if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                info["own"].append(st)
            elif isinstance(st, ast.Assign):
                for t in st.targets:
                    if isinstance(t, ast.Name) and not t.id.startswith("_"):
                        info["enum_members"].append((t.id, st.value))
        return info

    def mro(self, sym: Sym) -> list[Sym]:
        """C3 linearisation over resolvable bases (externals kept as leaves)."""

        def lin(s: Sym, stack=()) -> list[Sym]:
            if s.kind != "class" or s in stack:
                return [s]
            bases = self.class_info(s)["bases"]
            seqs = [lin(b, stack + (s,)) for b in bases] + [list(bases)]
            out = [s]
            seqs = [list(x) for x in seqs if x]
            while seqs:
                for seq in seqs:
                    head = seq[0]
                    if not any(head in other[1:] for other in seqs):
                        break
                else:  # inconsistent; fall back to DFS order
                    head = seqs[0][0]
                out.append(head)
                seqs = [[x for x in seq if x != head] for seq in seqs]
                seqs = [x for x in seqs if x]
            return out

        return lin(sym)

    def is_enum(self, sym: Sym) -> bool:
        return any(s.kind == "external" and s.name in ENUM_BASES for s in self.mro(sym))

    def is_dataclass(self, sym: Sym) -> bool:
        return any(s.kind == "class" and self.class_info(s)["dataclass"] for s in self.mro(sym))

    def is_abstract(self, sym: Sym) -> bool:
        return any(s.kind == "external" and s.name in ABSTRACT_BASES for s in self.class_info(sym)["bases"]) or any(
            isinstance(k, ast.keyword) and k.arg == "metaclass" for k in self.class_node(sym).keywords
        )

    def fields(self, sym: Sym) -> dict[str, list[FieldInfo]]:
        """Dataclass fields of ``sym``: name -> declarations, base class first."""
        out: dict[str, list[FieldInfo]] = {}
        for s in reversed(self.mro(sym)):
            if s.kind != "class":
                continue
            info = self.class_info(s)
            if not info["dataclass"]:
                continue
            for st in info["own"]:
                ann = st.annotation
                head = ann.value if isinstance(ann, ast.Subscript) else ann
                if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
                    if ann.value.startswith(("ClassVar", "typing.ClassVar", "InitVar")):
                        continue
                r = self.resolve_expr(s.module, head)
                if r is not None and r.qual in SKIP_ANNOTATIONS:
                    continue
                init = True
                if isinstance(st.value, ast.Call):
                    fr = self.resolve_expr(s.module, st.value.func)
                    if fr is not None and fr.qual == "dataclasses.field":
                        for kw in st.value.keywords:
                            if kw.arg == "init" and isinstance(kw.value, ast.Constant) and kw.value.value is False:
                                init = False
                default = st.value
                if isinstance(default, ast.Call):
                    kw = {k.arg: k.value for k in default.keywords}
                    default = kw.get("default")
                out.setdefault(st.target.id, []).append(FieldInfo(st.target.id, ann, s.module, s.name, init, default))
        return out

    def all_classes(self):
        for name in sorted(self.sources):
            mod = self.module(name)
            if mod is None or mod.tree is None:
                continue
            for bname, b in mod.bindings.items():
                if b.kind == "class" and b.node.name == bname:
                    yield Sym("class", name, bname)

    def subclasses(self, sym: Sym) -> list[Sym]:
        """Transitive subclasses of ``sym`` defined anywhere in the indexed trees."""
        found: list[Sym] = []
        frontier = [sym]
        while frontier:
            cur = frontier.pop()
            for c in self.all_classes():
                if c == sym or c in found:
                    continue
                if not any(cur.name in ast.unparse(b) for b in self.class_node(c).bases):
                    continue
                if cur in self.mro(c)[1:]:
                    found.append(c)
                    frontier.append(c)
        return found


def _normalize_external(q: str) -> str:
    aliases = {"typing_extensions.": "typing.", "torch.types.": "torch.", "collections.abc.Callable": "typing.Callable"}
    for a, b in aliases.items():
        if q.startswith(a):
            q = b + q[len(a) :]
    return q


# --------------------------------------------------------------------------
# Type mapping
# --------------------------------------------------------------------------


@dataclass
class T:
    type: str
    nullable: bool = False
    choices: list | None = None
    notes: list[str] = field(default_factory=list)
    nested: list[Sym] = field(default_factory=list)  # dataclasses to flatten

    def merged(self, other: "T") -> "T":
        """Looser of two types (used for unions of section classes)."""
        if self.type == other.type:
            typ = self.type
        elif {self.type, other.type} == {"int", "float"}:
            typ = "float"
        else:
            typ = "any"
        choices = None
        if typ == self.type == other.type and self.choices is not None and other.choices is not None:
            choices = _uniq(self.choices + other.choices)
        return T(
            typ,
            self.nullable or other.nullable,
            choices,
            _uniq(self.notes + other.notes),
            _uniq(self.nested + other.nested),
        )


def _uniq(xs):
    out = []
    for x in xs:
        if x not in out:
            out.append(x)
    return out


class Mapper:
    def __init__(self, index: Index):
        self.ix = index

    def map(self, modname: str, node: ast.AST, depth: int = 0) -> T:
        if depth > 20:
            return T("any", notes=["type too deep"])
        ix = self.ix
        if node is None:
            return T("any")
        if isinstance(node, ast.Constant):
            if node.value is None:
                return T("any", nullable=True, notes=["__none__"])
            if isinstance(node.value, str):
                try:
                    return self.map(modname, ast.parse(node.value, mode="eval").body, depth + 1)
                except SyntaxError:
                    return T("any", notes=[f"unparsed annotation {node.value!r}"])
            if node.value is Ellipsis:
                return T("any")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self.union(modname, [node.left, node.right], depth)
        if isinstance(node, ast.Subscript):
            head = ix.deref(modname, node.value)
            args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            q = head.qual if head is not None else ""
            if q == "typing.Optional":
                t = self.map(modname, args[0], depth + 1)
                t.nullable = True
                return t
            if q == "typing.Union":
                return self.union(modname, args, depth)
            if q == "typing.Literal":
                return self.literal(modname, args)
            if q in ("typing.Annotated", "typing.Final"):
                return self.map(modname, args[0], depth + 1)
            if head is not None and head.kind == "external" and q in EXTERNAL_TYPES:
                typ, note = EXTERNAL_TYPES[q]
                return T(typ, notes=[note] if note else [])
            # Generic user class (e.g. ModelProviderMixin[X]) -> map the head.
            return self.map(modname, node.value, depth + 1)
        sym = ix.deref(modname, node) if isinstance(node, (ast.Name, ast.Attribute)) else None
        if sym is None:
            return T("any", notes=[f"unresolved type {ast.unparse(node)}"])
        if sym.kind == "external":
            if sym.name in EXTERNAL_TYPES:
                typ, note = EXTERNAL_TYPES[sym.name]
                return T(typ, notes=[note] if note else [])
            if sym.name == "builtins.None" or sym.name == "types.NoneType":
                return T("any", nullable=True, notes=["__none__"])
            return T("any", notes=[f"{sym.name}"])
        if sym.kind == "alias":
            return self.map(sym.module, ix.alias_node(sym), depth + 1)
        if sym.kind == "module":
            return T("any", notes=[f"module {sym.name}"])
        # Indexed class.
        if ix.is_enum(sym):
            return self.enum(sym)
        if ix.is_dataclass(sym):
            return T("dict", notes=[], nested=[sym])
        for base in ix.mro(sym):
            if base.kind == "external" and base.name in EXTERNAL_TYPES and base.name != "builtins.object":
                typ, note = EXTERNAL_TYPES[base.name]
                return T(typ, notes=[f"{sym.name} ({base.name} subclass)"])
        return T("any", notes=[f"class {sym.name}"])

    def literal(self, _modname, args) -> T:
        values = []
        nullable = False
        for a in args:
            try:
                v = ast.literal_eval(a)
            except ValueError:
                v = ast.unparse(a)  # e.g. Literal[SomeEnum.member]
            if v is None:
                nullable = True
            else:
                values.append(v)
        kinds = {type(v) for v in values}
        if kinds == {str}:
            typ = "str"
        elif kinds == {bool}:
            typ = "bool"
        elif kinds <= {int} and kinds:
            typ = "int"
        elif kinds <= {int, float} and kinds:
            typ = "float"
        else:
            typ = "any"
        return T(typ, nullable=nullable, choices=values if values else None)

    def enum(self, sym: Sym) -> T:
        members = self.ix.class_info(sym)["enum_members"]
        names = [n for n, _ in members]
        return T("str", choices=names, notes=[f"Enum {sym.name} (members: {', '.join(names)})"])

    def _members(self, modname, node, depth):
        """Flatten ``A | B | C`` and nested ``Union[...]`` into their members."""
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self._members(modname, node.left, depth) + self._members(modname, node.right, depth)
        if isinstance(node, ast.Subscript):
            head = self.ix.deref(modname, node.value)
            if head is not None and head.qual in ("typing.Union", "typing.Optional"):
                args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
                out = [] if head.qual == "typing.Union" else [ast.Constant(None)]
                for a in args:
                    out += self._members(modname, a, depth)
                return out
        return [node]

    def union(self, modname, args, depth) -> T:
        members = [m for a in args for m in self._members(modname, a, depth)]
        parts = [self.map(modname, a, depth + 1) for a in members]
        nullable = any(p.nullable for p in parts)
        parts = [p for p in parts if "__none__" not in p.notes]
        if not parts:
            return T("any", nullable=True)
        nested = _uniq([n for p in parts for n in p.nested])
        notes = _uniq([n for p in parts for n in p.notes])
        if any(n in ("callable", "class object") for n in notes):
            # e.g. ``ModuleSpec | Callable[..., ModuleSpec]``: code objects, not settable config.
            nested = []
        kinds = _uniq([p.type for p in parts])
        if len(kinds) == 1:
            typ = kinds[0]
            choices = None
            if all(p.choices is not None for p in parts):
                choices = _uniq([c for p in parts for c in p.choices])
            return T(typ, nullable, choices, notes, nested)
        if set(kinds) == {"int", "float"}:
            return T("float", nullable, None, notes, nested)
        scalar = [p for p in parts if not p.nested]
        if nested and len(_uniq([p.type for p in scalar])) == 1 and scalar[0].type in ("int", "float", "bool", "str"):
            # e.g. Union[MixedPrecisionConfig, str]: a recipe name or an instance.
            names = ", ".join(n.name for n in nested)
            t = T(
                scalar[0].type,
                nullable,
                scalar[0].choices if len(scalar) == 1 else None,
                notes + [f"or a {names} instance (its fields are listed as nested keys)"],
                nested,
            )
            return t
        descs, used = [], set()
        for p in parts:
            if p.nested:
                d = "/".join(n.name for n in p.nested)
            elif p.type == "any" and p.notes:
                d = p.notes[0]
                used.add(d)
            else:
                d = p.type
            descs.append(d)
        rest = [n for n in notes if n not in used]
        return T("any", nullable, None, [f"union of {' | '.join(_uniq(descs))}"] + rest, nested)


# --------------------------------------------------------------------------
# Flattening
# --------------------------------------------------------------------------


class Builder:
    def __init__(self, index: Index):
        self.ix = index
        self.mapper = Mapper(index)
        self.fields: dict[str, dict] = {}
        self.sections: dict[str, list[str]] = {}
        self.skipped_init_false: set[str] = set()
        self.absent: list[str] = []  # section classes this revision does not have

    def expand(self, classes: list[Sym]) -> list[Sym]:
        """Abstract or field-less dataclasses stand for their dataclass subclasses."""
        out = []
        for c in classes:
            subs = []
            if self.ix.is_abstract(c) or not self.ix.fields(c):
                subs = [s for s in self.ix.subclasses(c) if self.ix.is_dataclass(s) and not self.ix.is_abstract(s)]
            out.extend(subs if subs else [c])
        return _uniq(out)

    def field_type(self, decls: list[FieldInfo]) -> T:
        """Type of one field of one class, given its declarations along the MRO (base first).

        A subclass that re-annotates an inherited field (``normalization: str = "RMSNorm"``
        over ``Literal["LayerNorm", "RMSNorm"]``) only changes the default: the base class
        still validates the value.  So the kinds are merged (looser wins, nullable if any
        declaration is), and the most-derived ``choices`` are kept, falling back to the
        nearest ancestor's when the subclass gives none for the same kind.
        """
        ts = []
        for fi in decls:
            t = self.mapper.map(fi.module, fi.annotation)
            t.notes = [n for n in t.notes if n != "__none__"]
            ts.append(t)
        out = ts[-1]
        for t in reversed(ts[:-1]):
            m = out.merged(t)
            if out.choices is not None:
                m.choices = out.choices if m.type == out.type else None
            elif t.choices is not None and m.type == t.type:
                m.choices = t.choices
            out = m
        if out.choices is not None:
            # A default outside the choices means a subclass really widened the field.
            for fi in decls:
                try:
                    value = ast.literal_eval(fi.default) if fi.default is not None else None
                except ValueError:
                    continue
                if value is not None and isinstance(value, (str, int, float, bool)) and value not in out.choices:
                    out.choices = None
                    out.notes.append(f"{fi.owner} default {value!r} is outside the inherited Literal")
                    break
        return out

    def add_classes(self, prefix: str, classes: list[Sym], depth: int, stack: tuple = ()):
        per_class = []
        for c in classes:
            per_class.append((c, self.ix.fields(c)))
        names = sorted({n for _, fs in per_class for n in fs})
        for name in names:
            if name.startswith("_"):
                continue
            merged: T | None = None
            owners = []
            init_false = False
            for c, fs in per_class:
                if name not in fs:
                    continue
                if not fs[name][-1].init:
                    if f"{c.name}.{name}" not in INIT_FALSE_SETTABLE:
                        self.skipped_init_false.add(f"{prefix}.{name}")
                        continue
                    init_false = True
                owners.append(c.name)
                t = self.field_type(fs[name])
                merged = t if merged is None else merged.merged(t)
            if merged is None:
                continue
            key = f"{prefix}.{name}"
            if init_false:
                merged.notes.append("declared with field(init=False); settable after construction")
            only_in = owners if len(owners) < len(per_class) else None
            self.emit(key, merged, only_in)
            if merged.nested:
                nested = [n for n in self.expand(merged.nested) if n not in stack]
                if depth >= MAX_DEPTH:
                    self.ix.warnings.append(f"{key}: nesting deeper than {MAX_DEPTH}, not flattened")
                elif nested:
                    self.add_classes(key, nested, depth + 1, stack + tuple(nested))

    def emit(self, key: str, t: T, only_in=None):
        entry: dict = {"type": t.type}
        if t.nullable:
            entry["nullable"] = True
        if t.choices is not None:
            entry["choices"] = t.choices
        notes = [n for n in t.notes if n and n != "__none__"]
        if notes:
            entry["note"] = "; ".join(_uniq(notes))
        if only_in:
            entry["only_in"] = sorted(only_in)
        if key in self.fields:
            prev = self.fields[key]
            a = T(
                prev["type"], prev.get("nullable", False), prev.get("choices"), [prev["note"]] if "note" in prev else []
            )
            m = a.merged(t)
            entry["type"] = m.type
            entry.pop("choices", None)
            if m.choices is not None:
                entry["choices"] = m.choices
            if m.nullable:
                entry["nullable"] = True
            notes = [n for n in m.notes if n and n != "__none__"]
            if notes:
                entry["note"] = "; ".join(_uniq(notes))
        assert entry["type"] in TYPES, (key, entry)
        self.fields[key] = entry


def load_sym(ix: Index, spec: str) -> Sym:
    mod, name = spec.split(":")
    sym = ix.resolve_name(mod, name)
    if sym is None or sym.kind != "class":
        raise SystemExit(f"cannot find class {spec}")
    return sym


def mixed_precision_recipes(ix: Index, modname: str) -> list[str]:
    """Names of the @register-ed recipe factories (both the _ and - spellings are registered)."""
    mod = ix.module(modname)
    out = []
    for st in mod.tree.body:
        if isinstance(st, ast.FunctionDef) and any(
            isinstance(d, ast.Name) and d.id == "register" for d in st.decorator_list
        ):
            out.append(st.name)
            if "_" in st.name:
                out.append(st.name.replace("_", "-"))
    return out


def dict_literal_keys(ix: Index, modname: str, name: str) -> list[str]:
    """String keys of a module-level ``NAME: dict = {...}`` literal."""
    mod = ix.module(modname)
    b = mod.bindings.get(name) if mod else None
    if b is None or b.kind != "alias" or not isinstance(b.node, ast.Dict):
        return []
    return [k.value for k in b.node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]


def annotate_string_conversions(ix: Index, fields: dict) -> None:
    """Bridge's override path turns strings back into dtypes and activation callables."""
    amap = "megatron.bridge.utils.activation_map"
    dtypes = dict_literal_keys(ix, amap, "DTYPE_MAP")
    acts = [k for k in dict_literal_keys(ix, amap, "ACTIVATION_FUNC_MAP") if "." not in k]
    for key, entry in fields.items():
        note = entry.get("note", "")
        if dtypes and note.startswith("torch.dtype"):
            entry["note"] = note.replace(
                "torch.dtype",
                "torch.dtype; an override string is converted by utils/activation_map.py str_to_dtype "
                f"when the current value is a dtype (names: {', '.join(dtypes)})",
                1,
            )
        if acts and key.endswith(".activation_func") and note.startswith("callable"):
            entry["note"] = note.replace(
                "callable",
                f"callable; overrides take a registered name (utils/activation_map.py: {', '.join(acts)})",
                1,
            )


def build(ix: Index) -> "Builder":
    b = Builder(ix)
    container = load_sym(ix, CONTAINER)
    cfields = ix.fields(container)
    for name, decls in sorted(cfields.items()):
        if name.startswith("_"):
            continue
        t = b.field_type(decls)
        if name in SECTION_CLASSES:
            # a revision may lack some of the classes (r0.5.0 has no gpt_sft:GPTSFTDatasetConfig):
            # the section merges those it has, and the source lists the others
            classes = []
            for spec in SECTION_CLASSES[name]:
                sym = ix.resolve_name(*spec.split(":"))
                if sym is not None and sym.kind == "class":
                    classes.append(sym)
                else:
                    b.absent.append(spec)
            t = T("dict", t.nullable, None, [], classes)
        elif t.nested:
            t.nested = b.expand(t.nested)
        if name == "mixed_precision":
            t.choices = mixed_precision_recipes(ix, "megatron.bridge.training.mixed_precision")
            t.notes = [
                "recipe name (registered in training/mixed_precision.py, resolved by "
                "get_mixed_precision_config) or a MixedPrecisionConfig instance whose fields "
                "are listed as mixed_precision.*"
            ]
        if t.nested:
            b.sections[name] = [c.name for c in t.nested]
        else:
            b.sections[name] = []
        b.emit(name, t)
        if t.nested:
            b.add_classes(name, t.nested, 1, tuple(t.nested))
    annotate_string_conversions(ix, b.fields)
    # MixedPrecisionConfig.setup() copies every one of its fields onto same-named fields of
    # model, optimizer and ddp during ConfigContainer finalization.
    mp = load_sym(ix, "megatron.bridge.training.mixed_precision:MixedPrecisionConfig")
    for name in ix.fields(mp):
        for sec in ("model", "optimizer", "ddp"):
            entry = b.fields.get(f"{sec}.{name}")
            if entry is not None:
                note = (
                    f"overwritten by mixed_precision.{name} at finalize when mixed_precision is set "
                    f"(MixedPrecisionConfig.setup)"
                )
                entry["note"] = f"{entry['note']}; {note}" if "note" in entry else note
    return b


def dump(doc: dict) -> str:
    """JSON with one line per field, so regenerations diff cleanly."""
    lines = ["{"]
    lines.append('  "source": ' + json.dumps(doc["source"], indent=2).replace("\n", "\n  ") + ",")
    lines.append('  "sections": {')
    items = list(doc["sections"].items())
    for i, (k, v) in enumerate(items):
        lines.append(f"    {json.dumps(k)}: {json.dumps(v)}" + ("," if i < len(items) - 1 else ""))
    lines.append("  },")
    lines.append('  "fields": {')
    items = list(doc["fields"].items())
    for i, (k, v) in enumerate(items):
        lines.append(f"    {json.dumps(k)}: {json.dumps(v)}" + ("," if i < len(items) - 1 else ""))
    lines.append("  }")
    lines.append("}")
    text = "\n".join(lines) + "\n"
    assert json.loads(text) == doc
    return text


def package_version(tree: "Tree", package: str) -> str | None:
    """``__version__`` as ``<package>/package_info.py`` builds it from MAJOR, MINOR, PATCH and
    PRE_RELEASE (read with ast; the "+<git hash>" suffix it adds in a checkout is left out)."""
    text = tree.files.get(f"{package}.package_info")
    if text is None:
        return None
    values = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if isinstance(node.value, ast.Constant):
                values[node.targets[0].id] = node.value.value
    if not all(k in values for k in ("MAJOR", "MINOR", "PATCH")):
        return None
    return f"{values['MAJOR']}.{values['MINOR']}.{values['PATCH']}{values.get('PRE_RELEASE') or ''}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bridge", help="Megatron-Bridge checkout or (bare) git repository")
    ap.add_argument("mcore", help="Megatron-LM checkout, (bare) git repository, or megatron-core source dir")
    ap.add_argument("--bridge-rev", default=None)
    ap.add_argument("--mcore-rev", default=None)
    ap.add_argument(
        "--mcore-label",
        default=None,
        help="value for source.megatron_core when MCORE is not a git repository (e.g. 0.16.1)",
    )
    ap.add_argument(
        "--bridge-label",
        default=None,
        help="value for source.megatron_bridge when BRIDGE is not a git repository (its full commit)",
    )
    ap.add_argument(
        "-o",
        "--output",
        default=None,
        help="default: src/bridge_launch/spec/schema/config_container-<7-character bridge commit>.json",
    )
    args = ap.parse_args(argv)

    bridge_rev = args.bridge_rev
    if bridge_rev is None and _is_bare(args.bridge):
        bridge_rev = "HEAD"
    bridge = Tree(args.bridge, bridge_rev, ("megatron.bridge",))

    mcore_rev = args.mcore_rev
    pinned = None
    if _is_git(args.bridge):
        try:
            line = _git(args.bridge, "ls-tree", bridge_rev or "HEAD", "3rdparty/Megatron-LM").decode().split()
            pinned = line[2] if len(line) >= 3 else None
        except subprocess.CalledProcessError:
            pinned = None
    if mcore_rev is None and _is_git(args.mcore):
        if pinned is not None:
            try:
                _git(args.mcore, "cat-file", "-e", pinned + "^{commit}")
                mcore_rev = pinned
            except subprocess.CalledProcessError:
                print(f"warning: pinned Megatron-LM commit {pinned} not in {args.mcore}; using HEAD", file=sys.stderr)
        if mcore_rev is None and _is_bare(args.mcore):
            mcore_rev = "HEAD"
    mcore = Tree(args.mcore, mcore_rev, ("megatron.core", "megatron.training"))

    ix = Index([bridge, mcore])
    b = build(ix)
    fields, sections = b.fields, b.sections
    bridge_id = bridge.rev or args.bridge_label or "worktree:" + os.path.abspath(args.bridge)
    mcore_id = mcore.rev or args.mcore_label or "worktree:" + os.path.abspath(args.mcore)
    note = (
        "Generated by scripts/gen_schema.py from the ConfigContainer dataclasses by reading the source "
        "with ast (nothing imported). Megatron-Core/megatron.training read at "
        + (
            "the commit pinned by Bridge's 3rdparty/Megatron-LM submodule"
            if mcore.rev and mcore.rev == pinned
            else "the given tree"
        )
        + ". "
        "model merges the providers listed in 'sections' (Qwen3.5/Qwen3.5-MoE/Qwen3-Next text bridges "
        "return GPTModelProvider; Nemotron-H and Nemotron 3 recipes build HybridModelProvider); "
        "GPTModelConfig/HybridModelConfig, T5 and MIMO providers, also allowed by the annotation, are not "
        "merged. Types: int float bool str list dict any; nullable=Optional; "
        "choices=Literal/Enum/registered names; "
        "union sections (model, dataset, ...) merge the fields of the classes in 'sections' and use the "
        "looser type on conflict; 'only_in' lists the declaring classes when not all of them have the key. "
        "Dataclass-typed fields are flattened into dotted keys and also listed as dict. "
        "Omitted as derived (field(init=False), recomputed at finalize/setup): "
        + ", ".join(sorted(b.skipped_init_false))
        + "."
    )
    doc = {
        "source": {
            "megatron_bridge": bridge_id,
            "megatron_core": mcore_id,
            "megatron_bridge_version": package_version(bridge, "megatron.bridge"),
            "megatron_core_version": package_version(mcore, "megatron.core"),
            "note": note,
            **({"absent_classes": b.absent} if b.absent else {}),
        },
        "sections": {k: sections[k] for k in sorted(sections)},
        "fields": {k: fields[k] for k in sorted(fields)},
    }
    if args.output is None and bridge_id.startswith("worktree:"):
        raise SystemExit("gen_schema: give --bridge-rev or --bridge-label (the commit names the output file) or -o")
    out = Path(args.output or SCHEMA_DIR / f"config_container-{bridge_id[:7]}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(dump(doc), encoding="utf-8")
    for w in ix.warnings:
        print("warning:", w, file=sys.stderr)
    print(f"wrote {len(fields)} keys to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
