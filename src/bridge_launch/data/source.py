"""Reading a Nemotron-Image-Training-v3 source tree: integrity manifests, records, media.

Layout (as Megatron-Bridge's tutorials/data/energon/prepare_nemotron_image_v3.py reads it):
`<subset>/<subset>.jsonl`, one record per line `{"id": ..., "messages": [{"role": ..., "content":
[{"type": "text", "text": ...}, {"type": "image", "image": "<relative path>"}]}]}`, and the images
in `<subset>/media/*.tar` (or loose files under the subset when the source is not pinned).
The facts (key = sanitized `subset__id`, split by sha256 of the key, typed ChatML content, video and
audio rejected) follow that converter; the code is this tool's own."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tarfile
from dataclasses import dataclass, field
from json.encoder import encode_basestring as _jstr  # json.dumps' escaping with ensure_ascii=False
from pathlib import Path, PurePosixPath

from bridge_launch import __version__
from bridge_launch.core.errors import UsageError
from bridge_launch.core.paths import state_dir
from bridge_launch.data import tario

DATASETS = {
    "nemotron-image-v3": {
        "id": "nvidia/Nemotron-Image-Training-v3",
        "revision": "7656391d4d4cb11ec3722b34f10d499435de0460",
    },
}
_MANIFEST_DIR = Path(__file__).resolve().parent / "manifests"
_SAFE_KEY = re.compile(r"[^A-Za-z0-9_-]+")


def dataset_info(name: str) -> dict:
    if name not in DATASETS:
        from bridge_launch.core.errors import suggest

        raise UsageError(suggest(name, DATASETS, "dataset"))
    return DATASETS[name]


# ---------------------------------------------------------------- integrity manifests


def user_manifest_path(dataset: str, subset: str) -> Path:
    return state_dir() / "data-manifests" / dataset / f"{subset}.json"


def find_pins(dataset: str, subset: str) -> tuple[dict | None, str]:
    """The pinned files of one subset: {relpath: {size, sha256}} and where the pins came from."""
    shipped = _MANIFEST_DIR / f"{dataset}.json"
    if shipped.is_file():
        pins = json.loads(shipped.read_text())["subsets"].get(subset)
        if pins:
            return pins, f"shipped:{shipped.name}"
    user = user_manifest_path(dataset, subset)
    if user.is_file():
        try:
            data = json.loads(user.read_text())
            return data["files"], f"user:{user}"
        except (ValueError, KeyError) as e:
            raise UsageError(
                f"integrity manifest {user} is unreadable ({e}); delete it and rerun with --write-manifest"
            ) from e
    return None, ""


def write_user_manifest(dataset: str, subset: str, files: list[dict]) -> Path:
    path = user_manifest_path(dataset, subset)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "dataset": DATASETS[dataset]["id"],
        "revision": DATASETS[dataset]["revision"],
        "subset": subset,
        "written_by": f"bridge-launch {__version__} (--write-manifest)",
        "files": {f["path"]: {"size": f["size"], "sha256": f["sha256"]} for f in files},
    }
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
    return path


def sha256_file(path: Path, stop=None) -> str:
    """The file's sha256; `stop` (a threading.Event) set by another thread ends it early with ""."""
    h = hashlib.sha256()
    buf = bytearray(4 << 20)  # one buffer, refilled: no new 4 MiB object per read
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            if stop is not None and stop.is_set():
                return ""
            h.update(view[:n])
    return h.hexdigest()


def verify_pins(source_dir: Path, pins: dict, origin: str, threads: int = 1) -> list[dict]:
    """Check the size of every pinned file, then their sha256 (in `threads` threads; hashlib drops the
    GIL); the first mismatch in path order names the file, and what would move on from it."""
    try:
        return _verify_pins(source_dir, pins, origin, threads)
    except UsageError as e:
        if not origin.startswith("user:"):
            raise
        raise UsageError(
            f"{e}: this machine's own pin (--write-manifest); for another copy of the source pass --write-manifest "
            "to pin it instead, or --skip-source-integrity-check"
        ) from None


def _verify_pins(source_dir: Path, pins: dict, origin: str, threads: int) -> list[dict]:
    files = []
    for rel, want in sorted(pins.items()):
        p = source_dir / rel
        if not p.is_file():
            raise UsageError(f"pinned source file missing: {p} (pinned by {origin})")
        size = p.stat().st_size
        if size != want["size"]:
            raise UsageError(f"source file {p} has {size} bytes; the integrity manifest ({origin}) pins {want['size']}")
        files.append((rel, p, size, want))
    if threads > 1 and len(files) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=threads) as pool:
            digests = list(pool.map(sha256_file, [p for _, p, _, _ in files]))
    else:
        digests = [sha256_file(p) for _, p, _, _ in files]
    out = []
    for (rel, p, size, want), digest in zip(files, digests, strict=False):
        if digest != want["sha256"]:
            raise UsageError(
                f"source file {p} has sha256 {digest}; the integrity manifest ({origin}) pins {want['sha256']}"
            )
        out.append({"path": rel, "size": size, "sha256": digest})
    return out


# ---------------------------------------------------------------- media


@dataclass
class MediaIndex:
    """Where each image reference of one subset lives: a byte range inside a media tar, or a loose file."""

    subset_dir: Path
    allow_loose: bool
    archives: list[Path] = field(default_factory=list)
    members: dict = field(default_factory=dict)  # name -> (archive index, offset, size) or None if ambiguous

    @classmethod
    def build(cls, subset_dir: Path, archives: list[Path], allow_loose: bool) -> "MediaIndex":
        idx = cls(subset_dir.resolve(), allow_loose, [a.resolve() for a in archives])
        members = idx.members
        for ai, a in enumerate(idx.archives):
            try:
                found = tario.scan(a)
            except (tarfile.TarError, OSError) as e:
                kind = _compressed(a)
                if kind:  # members are read in place, at their offsets: the archive must be a plain tar
                    raise UsageError(
                        f"media archive {a} is {kind}-compressed; valid: an uncompressed tar "
                        f"(decompress it in place, keeping the name)"
                    ) from e
                raise UsageError(f"media archive {a} is not a readable tar ({e})") from e
            for name, off, size in found:
                if size < 0:
                    raise UsageError(
                        f"media archive {a}: member {name!r} has a negative size ({size}); the archive is damaged"
                    )
                name = _normalize(name)
                loc = (ai, off, size)
                members[name] = loc if name not in members else None
                base = name.rpartition("/")[2]
                if base != name:
                    members[base] = loc if base not in members else None
        return idx

    def locate(self, ref: str, where: str):
        """('tar', path, offset, size) or ('file', path); errors name the record."""
        if "://" in ref:
            raise UsageError(f"{where}: image {ref!r} is a remote URL; download the media under the subset first")
        norm = _normalize(ref)
        # Tar members first: a dict lookup, where a loose-file probe is a realpath per reference.
        for k in (norm, norm.rpartition("/")[2]):
            if k in self.members:
                loc = self.members[k]
                if loc is None:
                    raise UsageError(f"{where}: image {ref!r} is ambiguous across the media tars; use a unique path")
                ai, off, size = loc
                return ("tar", str(self.archives[ai]), off, size)
        if self.allow_loose:
            root = str(self.subset_dir)
            for rel in (norm, f"media/{norm}"):
                cand = os.path.realpath(os.path.join(root, rel))
                if cand.startswith(root + os.sep) and os.path.isfile(cand):
                    return ("file", cand)
        searched = "media tars" + (" and loose files" if self.allow_loose else "")
        raise UsageError(f"{where}: image {ref!r} not found in {self.subset_dir} ({searched})")


_MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd"}


def _compressed(path: Path) -> str | None:
    try:
        with open(path, "rb") as f:
            head = f.read(6)
    except OSError:
        return None
    return next((kind for magic, kind in _MAGIC.items() if head.startswith(magic)), None)


def _normalize(ref: str) -> str:
    """PurePosixPath(ref with / for \\).as_posix() without its per-call cost: most references are
    already normal and return as they are."""
    if (
        "\\" in ref
        or "//" in ref
        or "/./" in ref
        or ref.startswith("./")
        or ref.endswith(("/", "/."))
        or ref in ("", ".")
    ):
        return PurePosixPath(ref.replace("\\", "/")).as_posix()
    return ref


def read_media(loc) -> bytes:
    """The bytes of a loose image file (a ("file", path) location); prepare reads tar members itself."""
    return Path(loc[1]).read_bytes()


# ---------------------------------------------------------------- records


def sample_key(subset: str, sample_id: str, where: str) -> str:
    key = _SAFE_KEY.sub("_", f"{subset}__{sample_id}").strip("_")
    if not key:
        raise UsageError(f"{where}: cannot derive a sample key from id {sample_id!r}")
    return key


def sample_split(key: str, validation_fraction: float) -> str:
    """'val' when the first 8 bytes of sha256(key), as an integer / 2^64, fall below the fraction."""
    v = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big")
    return "val" if v / 2**64 < validation_fraction else "train"


def parse_record(line: bytes | str, where: str) -> tuple[str, bytes, list[str]]:
    """(id, the typed ChatML messages as JSON, image references in order).

    The messages are [{"role", "content": [{"type": "text", "text"} | {"type": "image"}, ...]}, ...],
    written as the bytes of json.dumps(messages, ensure_ascii=False) but built as text directly (the
    same C string escaping, no dicts to build and walk again): a test holds the two equal."""
    try:
        row = json.loads(line)
    except RecursionError:
        raise UsageError(f"{where}: JSON nested too deeply") from None
    except UnicodeDecodeError as e:
        raise UsageError(
            f"{where}: not UTF-8 (byte 0x{e.object[e.start]:02x} at column {e.start + 1}); valid: UTF-8 JSON"
        ) from e
    except ValueError as e:
        raise UsageError(f"{where}: malformed JSON ({e.args[0] if e.args else e})") from e
    if not isinstance(row, dict):
        raise UsageError(f"{where}: record must be a JSON object, got {type(row).__name__}")
    sid = row.get("id")
    if isinstance(sid, int) and not isinstance(sid, bool):
        sid = str(sid)
    if not isinstance(sid, str) or not sid:
        raise UsageError(f"{where}: record 'id' must be a non-empty string")
    msgs = row.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise UsageError(f"{where}: record 'messages' must be a non-empty list")
    turns, refs = [], []
    for ti, turn in enumerate(msgs):
        if not isinstance(turn, dict) or not isinstance(turn.get("role"), str):
            raise UsageError(f"{where}: message {ti} must be an object with a string 'role'")
        content = turn.get("content")
        parts = content if isinstance(content, list) else [content]
        norm = []
        for pi, part in enumerate(parts):
            if isinstance(part, str):
                norm.append(_TEXT + _jstr(part) + "}")
                continue
            if not isinstance(part, dict):
                raise UsageError(f"{where}: message {ti} content {pi} must be a string or an object")
            kind = part.get("type")
            if kind == "text":
                text = part.get("text")
                if not isinstance(text, str):
                    raise UsageError(f"{where}: message {ti} content {pi}: 'text' must be a string")
                norm.append(_TEXT + _jstr(text) + "}")
            elif kind == "image":
                ref = part.get("image")
                if not isinstance(ref, str) or not ref.strip():
                    raise UsageError(f"{where}: message {ti} content {pi}: 'image' must be a non-empty path")
                refs.append(ref)
                norm.append(_IMAGE)
            elif kind in ("video", "audio"):
                raise UsageError(
                    f"{where}: {kind} content is not supported (image-only subsets; valid types: text, image)"
                )
            else:
                raise UsageError(f"{where}: message {ti} content {pi}: unknown type {kind!r} (valid: text, image)")
        if not norm:
            raise UsageError(f"{where}: message {ti} has no content")
        turns.append('{"role": ' + _jstr(turn["role"]) + ', "content": [' + ", ".join(norm) + "]}")
    if not refs:
        raise UsageError(f"{where}: record has no image")
    try:
        data = ("[" + ", ".join(turns) + "]").encode("utf-8")
    except UnicodeEncodeError as e:
        raise UsageError(
            f"{where}: text holds an unpaired surrogate escape ({e.object[e.start]!a}); valid: Unicode text"
        ) from e
    return sid, data, refs


_TEXT = '{"type": "text", "text": '
_IMAGE = '{"type": "image"}'


def jsonl_path(subset_dir: Path, subset: str) -> Path:
    p = subset_dir / f"{subset}.jsonl"
    if p.is_file():
        return p
    cands = sorted(subset_dir.glob("*.jsonl"))
    if len(cands) == 1:
        return cands[0]
    raise UsageError(f"no {subset}.jsonl (or exactly one *.jsonl) under {subset_dir}")


def media_archives(subset_dir: Path) -> list[Path]:
    return sorted((subset_dir / "media").rglob("*.tar")) if (subset_dir / "media").is_dir() else []
