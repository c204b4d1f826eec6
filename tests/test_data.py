"""data prepare / inspect / packing report (issue 4).

Fast tests: validation, integrity, record errors, visual-token and packing arithmetic (no Energon).
Slow tests: a real conversion indexed by megatron-energon and loaded back with Energon's loader."""

from __future__ import annotations

import hashlib
import json
import pickle
import tarfile
from pathlib import Path

import pytest

from bridge_launch.core.errors import UsageError

np = pytest.importorskip("numpy")
pytest.importorskip("PIL")

from bridge_launch.data import packing, prepare, shards, source, synthetic, tokens  # noqa: E402

DS = "nemotron-image-v3"


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("BRIDGE_LAUNCH_HOME", str(tmp_path / "home"))


@pytest.fixture
def src(tmp_path):
    return synthetic.make_source(tmp_path / "src", n=24, seed=1, noisy_every=5)


def _prep(srcdir, out, **kw):
    kw.setdefault("subsets", ["clevr_2"])
    kw.setdefault("skip_integrity", True)
    kw.setdefault("validation_fraction", 0.25)
    kw.setdefault("max_samples_per_tar", 5)
    kw.setdefault("num_workers", 1)
    return prepare.prepare(DS, srcdir, out, **kw)


# ---------------------------------------------------------------- fast: input checks


def test_split_is_deterministic_by_key():
    keys = [f"clevr_2__k{i}" for i in range(2000)]
    a = [source.sample_split(k, 0.05) for k in keys]
    assert a == [source.sample_split(k, 0.05) for k in keys]
    v = int.from_bytes(hashlib.sha256(keys[0].encode()).digest()[:8], "big") / 2**64
    assert a[0] == ("val" if v < 0.05 else "train")
    assert 40 < a.count("val") < 170  # ~5 %
    assert all(source.sample_split(k, 0.0) == "train" for k in keys)


def test_refuses_non_empty_output(src, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "stale.tar").write_bytes(b"x")
    with pytest.raises(UsageError, match=r"not empty \(stale.tar\)"):
        _prep(src, out)
    assert (out / "stale.tar").read_bytes() == b"x"


def test_unpinned_subset_needs_a_flag(src, tmp_path):
    with pytest.raises(UsageError, match="no integrity manifest.*--write-manifest"):
        _prep(src, tmp_path / "out", skip_integrity=False)
    assert not (tmp_path / "out").exists()


def test_bad_arguments(src, tmp_path):
    for kw, msg in [
        ({"validation_fraction": 1.0}, "validation-fraction"),
        ({"max_samples_per_tar": 0}, "max-samples-per-tar"),
        ({"num_workers": 0}, "num-workers"),
        ({"subsets": ["nope"]}, "subset directory .*nope"),
    ]:
        with pytest.raises(UsageError, match=msg):
            _prep(src, tmp_path / "out", **kw)
    with pytest.raises(UsageError, match="unknown dataset"):
        prepare.prepare("nemotron-image-v9", src, tmp_path / "o", subsets=["clevr_2"])


def test_missing_image_names_file_and_line(src, tmp_path):
    jl = src / "clevr_2" / "clevr_2.jsonl"
    lines = jl.read_text().splitlines()
    rec = json.loads(lines[6])
    rec["messages"][0]["content"][0]["image"] = "images/not_there.png"
    lines[6] = json.dumps(rec)
    jl.write_text("\n".join(lines) + "\n")
    with pytest.raises(UsageError, match=rf"{jl}:7: image 'images/not_there.png' not found"):
        _prep(src, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob(".out.partial-*"))


@pytest.mark.parametrize(
    "bad,msg",
    [
        ("{not json", "malformed JSON"),
        (json.dumps({"id": "", "messages": []}), "'id' must be"),
        (
            json.dumps({"id": "x", "messages": [{"role": "user", "content": [{"type": "video", "video": "a.mp4"}]}]}),
            "video content",
        ),
        (json.dumps({"id": "x", "messages": [{"role": "user", "content": "text only"}]}), "no image"),
    ],
)
def test_malformed_record_names_line(src, tmp_path, bad, msg):
    jl = src / "clevr_2" / "clevr_2.jsonl"
    lines = jl.read_text().splitlines()
    lines.insert(3, bad)
    jl.write_text("\n".join(lines) + "\n")
    with pytest.raises(UsageError, match=rf"{jl}:4: .*{msg}"):
        _prep(src, tmp_path / "out")


def test_duplicate_key(src, tmp_path):
    jl = src / "clevr_2" / "clevr_2.jsonl"
    lines = jl.read_text().splitlines()
    jl.write_text("\n".join(lines + [lines[0]]) + "\n")
    with pytest.raises(UsageError, match=r":25: duplicate sample key"):
        _prep(src, tmp_path / "out")


def test_shipped_turing_manifest_and_checksum_mismatch(tmp_path):
    pins, origin = source.find_pins(DS, "turing")
    assert origin.startswith("shipped")
    assert pins["turing/turing.jsonl"] == {
        "size": 3357202,
        "sha256": "c7333e5765ba8ac3ad6dd823c97a0366cc682417cc7ebd6d5374d9f9db1ce3d5",
    }
    srcdir = synthetic.make_source(tmp_path / "s", subset="turing", n=4)
    with pytest.raises(
        UsageError,
        match=r"turing/media/shard_000000.tar has \d+ bytes; the integrity manifest \(shipped:.*\) pins 33269760",
    ):
        prepare.prepare(DS, srcdir, tmp_path / "out", subsets=["turing"])


def test_corrupted_source_against_user_manifest(src, tmp_path):
    files = [
        {"path": str(p.relative_to(src)), "size": p.stat().st_size, "sha256": source.sha256_file(p)}
        for p in [src / "clevr_2/clevr_2.jsonl", src / "clevr_2/media/shard_000000.tar"]
    ]
    source.write_user_manifest(DS, "clevr_2", files)
    tar = src / "clevr_2/media/shard_000000.tar"
    data = bytearray(tar.read_bytes())
    data[2000] ^= 0xFF  # same size, different bytes
    tar.write_bytes(bytes(data))
    with pytest.raises(UsageError, match=r"shard_000000.tar has sha256 [0-9a-f]{64}; the integrity manifest \(user:"):
        _prep(src, tmp_path / "out", skip_integrity=False)


def _lines_src(src, edit):
    jl = src / "clevr_2" / "clevr_2.jsonl"
    lines = jl.read_text().splitlines()
    edit(lines)
    jl.write_text("\n".join(lines) + "\n")
    return jl


def test_parallel_parse_reports_the_first_error_in_file_order(src, tmp_path, monkeypatch):
    monkeypatch.setattr(prepare, "CHUNK_BYTES", 64)  # many byte ranges even for this small file

    def edit(lines):
        lines.insert(3, "")  # a blank line still counts for the line numbers after it
        lines[17] = "{not json"
        lines[9] = json.dumps({"id": "x", "messages": [{"role": "user", "content": "no image"}]})

    jl = _lines_src(src, edit)
    for workers in (1, 3):
        with pytest.raises(UsageError, match=rf"^{jl}:10: record has no image$"):
            _prep(src, tmp_path / f"out{workers}", num_workers=workers)
    # a duplicate before a parse error is reported first, as a serial reader would
    lines = jl.read_text().splitlines()
    lines[9] = lines[0]
    jl.write_text("\n".join(lines) + "\n")
    with pytest.raises(UsageError, match=rf"^{jl}:10: duplicate sample key .*first at {jl}:1\)$"):
        _prep(src, tmp_path / "out", num_workers=3)


def test_without_copy_file_range_the_shards_are_the_same(src, tmp_path, monkeypatch):
    """Another filesystem (EXDEV), then no sendfile either: the same bytes by the slower paths."""
    import errno
    import os

    _prep(src, tmp_path / "a", validation_fraction=0)
    calls = []

    def refuse(*_a, **_k):
        calls.append(1)
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", refuse)
    monkeypatch.setattr(shards, "_COPY", "copy_file_range")
    _prep(src, tmp_path / "b", validation_fraction=0)
    assert calls and shards._COPY == "sendfile"
    monkeypatch.setattr(os, "sendfile", lambda *_a: (_ for _ in ()).throw(OSError(errno.EINVAL, "no")))
    _prep(src, tmp_path / "c", validation_fraction=0)
    assert shards._COPY == "pread"
    ta = sorted(p.name for p in (tmp_path / "a").glob("*.tar*"))
    for n in ta:
        assert (
            (tmp_path / "a" / n).read_bytes() == (tmp_path / "b" / n).read_bytes() == (tmp_path / "c" / n).read_bytes()
        )


def test_full_disk_is_one_line_and_leaves_nothing(src, tmp_path, monkeypatch):
    import errno
    import os

    from bridge_launch.core.errors import LaunchError

    def full(*_a):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "writev", full)
    with pytest.raises(
        LaunchError, match=r"^data prepare stopped, nothing was written to .*/out: OSError: .*No space left"
    ):
        _prep(src, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.partial-*"))


def test_truncated_media_archive_is_one_line(src, tmp_path):
    tar = src / "clevr_2" / "media" / "shard_000000.tar"
    data = tar.read_bytes()
    members = source.MediaIndex.build(src / "clevr_2", [tar], False).members
    last = max(v[1] + v[2] for v in members.values() if v)
    tar.write_bytes(data[: last - 100])
    with pytest.raises(UsageError, match=r"media archive .*shard_000000.tar is not a readable tar|truncated"):
        _prep(src, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _normalized(rec: dict) -> list:
    """The messages as parse_record normalizes them, built the plain way."""
    out = []
    for turn in rec["messages"]:
        parts = turn["content"] if isinstance(turn["content"], list) else [turn["content"]]
        out.append(
            {
                "role": turn["role"],
                "content": [
                    {"type": "text", "text": p}
                    if isinstance(p, str)
                    else {"type": "text", "text": p["text"]}
                    if p["type"] == "text"
                    else {"type": "image"}
                    for p in parts
                ],
            }
        )
    return out


_TEXTS = [
    "plain",
    'quote " back \\ slash',
    "tab\tnl\ncr\r\b\f",
    "ctl \x00\x01\x1f\x7f",
    "ünï 漢字 🙂",
    "\u2028\u2029 seps",
    "",
    "</script>",
    "emoji \U0001f600 and \\u escapes",
]


@pytest.mark.parametrize("text", _TEXTS)
def test_parse_record_json_is_json_dumps(text):
    rec = {
        "id": 7,
        "messages": [
            {"role": "user", "content": [{"type": "image", "image": "a.png"}, {"type": "text", "text": text}, text]},
            {"role": "assistant ✓", "content": text},
            {"role": "user", "content": [{"type": "image", "image": "b.jpg", "extra": 1}]},
        ],
    }
    for line in (json.dumps(rec), json.dumps(rec, ensure_ascii=False), json.dumps(rec).encode()):
        sid, msg_json, refs = source.parse_record(line, "f:1")
        assert sid == "7" and refs == ["a.png", "b.jpg"]
        assert msg_json == json.dumps(_normalized(rec), ensure_ascii=False).encode("utf-8")


def test_parse_record_refuses_unpaired_surrogates():
    line = (
        '{"id": "x", "messages": [{"role": "user", "content": [{"type": "image", "image": "a.png"}, "bad \\ud800"]}]}'
    )
    with pytest.raises(UsageError, match=r"^f:3: text holds an unpaired surrogate escape \('\\ud800'\)"):
        source.parse_record(line, "f:3")


def test_parallel_parse_bom_and_invalid_utf8(src, tmp_path, monkeypatch):
    monkeypatch.setattr(prepare, "CHUNK_BYTES", 64)
    jl = src / "clevr_2" / "clevr_2.jsonl"
    data = jl.read_bytes()
    jl.write_bytes(b"\xef\xbb\xbf" + data)  # a UTF-8 BOM, which json.loads(bytes) skips
    m1 = _prep(src, tmp_path / "a", num_workers=1)
    m3 = _prep(src, tmp_path / "b", num_workers=3)
    assert m1["counts"] == m3["counts"] and sum(m1["counts"].values()) == 24
    lines = data.split(b"\n")
    lines[12] = lines[12].replace(b"Question", b"Qu\xffstion")
    jl.write_bytes(b"\n".join(lines))
    for w in (1, 3):
        with pytest.raises(UsageError, match=rf"^{jl}:13: not UTF-8 \(byte 0xff at column \d+\); valid: UTF-8 JSON$"):
            _prep(src, tmp_path / f"c{w}", num_workers=w)


def test_a_wrong_cluster_is_refused_before_any_record_is_read(src, tmp_path):
    jl = src / "clevr_2" / "clevr_2.jsonl"
    jl.write_text("{not json\n" + jl.read_text())  # would fail at line 1 if records were read first
    with pytest.raises(UsageError, match=r"^--cluster local: backend 'local' cannot run job arrays"):
        _prep(src, tmp_path / "out", cluster="local")
    with pytest.raises(UsageError, match=r"^unknown cluster 'nope'"):
        _prep(src, tmp_path / "out", cluster="nope")


def test_byte_ranges_start_at_lines(tmp_path):
    jl = tmp_path / "x.jsonl"
    lines = [b"{}" * (i % 7) for i in range(50)]
    jl.write_bytes(b"\n".join(lines) + b"\n")
    data = jl.read_bytes()
    for n in (1, 2, 3, 7, 50, 200):
        ch = prepare._chunks(jl, n)
        assert ch[0][0] == 0 and ch[-1][1] == len(data) and all(a[1] == b[0] for a, b in zip(ch, ch[1:], strict=False))
        assert all(a == 0 or data[a - 1 : a] == b"\n" for a, _ in ch)
        assert len(ch) == min(n, 50) or n > 1


def _odd_jsonl(src):
    """A later line with a UTF-8 BOM (concatenated files), a line of only a no-break space, a line
    of only ASCII whitespace, a record with Unicode text."""
    jl = src / "clevr_2" / "clevr_2.jsonl"
    lines = jl.read_bytes().split(b"\n")
    lines[5] = b"\xef\xbb\xbf" + lines[5]
    lines.insert(9, "\u00a0".encode())
    lines.insert(12, b" \t\x0b ")
    jl.write_bytes(b"\n".join(lines))
    return jl


def test_every_path_reads_a_line_the_same_way(src, tmp_path, monkeypatch):
    """Whether a JSONL is accepted, and the error, do not depend on --num-workers or --max-samples."""
    monkeypatch.setattr(prepare, "CHUNK_BYTES", 64)
    jl = _odd_jsonl(src)
    outcomes = []
    for kw in ({"num_workers": 1}, {"num_workers": 3}, {"num_workers": 3, "max_samples": 1000}):
        with pytest.raises(UsageError) as e:
            _prep(src, tmp_path / f"o{len(outcomes)}", **kw)
        outcomes.append(str(e.value))
    assert outcomes[0] == outcomes[1] == outcomes[2]
    assert outcomes[0] == f"{jl}:10: malformed JSON (Expecting value: line 1 column 1 (char 0))"  # NBSP is not JSON
    lines = jl.read_bytes().split(b"\n")
    del lines[9]  # without it, the BOM line and the whitespace line are fine on every path
    jl.write_bytes(b"\n".join(lines))
    counts = [
        _prep(src, tmp_path / f"p{w}{m}", num_workers=w, max_samples=m)["counts"] for w in (1, 3) for m in (None, 1000)
    ]
    assert all(c == counts[0] for c in counts) and sum(counts[0].values()) == 24


def test_deep_nesting_compressed_media_and_negative_sizes_are_one_line(src, tmp_path):
    import gzip

    jl = src / "clevr_2" / "clevr_2.jsonl"
    good = jl.read_bytes()
    jl.write_bytes(good + b'{"id": "deep", "messages": ' + b"[" * 100000 + b"]" * 100000 + b"}\n")
    for w in (1, 2):
        with pytest.raises(UsageError, match=rf"^{jl}:25: JSON nested too deeply$"):
            _prep(src, tmp_path / f"deep{w}", num_workers=w)
    jl.write_bytes(good)
    tar = src / "clevr_2" / "media" / "shard_000000.tar"
    plain = tar.read_bytes()
    tar.write_bytes(gzip.compress(plain))
    with pytest.raises(UsageError, match=r"shard_000000.tar is gzip-compressed; valid: an uncompressed tar"):
        _prep(src, tmp_path / "gz")
    bad = bytearray(plain)
    bad[124:136] = b"-0000000001\0"  # the first member's size, with its checksum made right again
    bad[148:156] = b" " * 8
    bad[148:156] = b"%06o\0 " % sum(bad[:512])
    tar.write_bytes(bytes(bad))
    with pytest.raises(UsageError, match=r"shard_000000.tar: member 'images/000000_0.(png|jpg)' has a negative size"):
        _prep(src, tmp_path / "neg")
    assert not list(tmp_path.glob("deep*")) + list(tmp_path.glob("gz")) + list(tmp_path.glob("neg"))


@pytest.mark.parametrize(
    "ref",
    [
        "a/b.jpg",
        "./a/b.jpg",
        "a//b.jpg",
        "a/./b.jpg",
        "a\\b.jpg",
        "a/b/",
        "/abs/x.png",
        "//net/x",
        "a/..",
        ".",
        "",
        "../up.jpg",
        "a/.hidden",
        "a/b/.",
        "././a",
        "x.jpg",
    ],
)
def test_normalize_is_pure_posix_path(ref):
    from pathlib import PurePosixPath

    assert source._normalize(ref) == PurePosixPath(ref.replace("\\", "/")).as_posix()


# ---------------------------------------------------------------- fast: arithmetic


def test_smart_resize_and_visual_tokens():
    # 1024x768 = 786432 px > max 401408: scaled down, sides multiples of 32
    h, w = tokens.smart_resize(768, 1024, 32, 200704, 401408)
    assert (h, w) == (
        544,
        704,
    ) and h * w <= 401408  # beta = sqrt(786432/401408); floor(768/beta/32)*32, floor(1024/beta/32)*32
    assert tokens.image_tokens(1024, 768, min_pixels=200704, max_pixels=401408) == 544 * 704 // 1024 == 374
    # 64x48 is scaled up into min_pixels: ceil to multiples of 32
    h, w = tokens.smart_resize(48, 64, 32, 200704, 401408)
    assert h * w >= 200704 and (h, w) == (416, 544)
    # in-bounds image: only rounded to the factor
    assert tokens.smart_resize(480, 640, 32, 200704, 401408) == (480, 640)
    assert tokens.image_tokens(640, 480, min_pixels=200704, max_pixels=401408) == 300


def test_packing_hand_computed():
    # buffers [60,50,40] and [30,20,10], seq 100: FFD -> [60+40], [50], [30+20+10]
    s = packing.simulate([60, 50, 40, 30, 20, 10], 100, 3)
    assert s["packs"] == 3 and s["tokens"] == 210 and s["padding"] == 90
    assert s["padding_fraction"] == pytest.approx(0.3)
    assert sorted(s["pack_fill"].tolist()) == [0.5, 0.6, 1.0]
    assert sorted(s["pack_samples"].tolist()) == [1, 2, 3]
    # one buffer of 6: FFD -> [60,40], [50,30,20], [10]
    s = packing.simulate([60, 50, 40, 30, 20, 10], 100, 6)
    assert s["packs"] == 3 and sorted(s["pack_fill"].tolist()) == [0.1, 1.0, 1.0]
    # alignment to a multiple counts as padding; too-long samples are counted and left out
    s = packing.simulate([17, 33, 200], 64, 8, multiple=16)
    assert s["too_long"] == 1 and s["aligned_tokens"] == 32 + 48 and s["packs"] == 2
    assert s["padding"] == 2 * 64 - 50
    # the seeds' warning: 8 samples of ~600 tokens in a 131072 pack -> > 95 % padding
    s = packing.simulate([600] * 80, 131072, 8)
    assert (
        s["packs"] == 10 and s["padding_fraction"] == pytest.approx(1 - 4800 / 131072) and s["padding_fraction"] > 0.95
    )


def test_packing_matches_reference_first_fit_decreasing():
    rng = np.random.default_rng(3)
    L = rng.integers(1, 900, size=997)

    def ref(lengths, cap, buf):
        fills = []
        for i in range(0, len(lengths), buf):
            bins = []
            for x in sorted(lengths[i : i + buf], reverse=True):
                for b in bins:
                    if b[0] + x <= cap:
                        b[0] += x
                        break
                else:
                    bins.append([x])
            fills += [b[0] for b in bins]
        return sorted(fills)

    for cap, buf in [(1000, 8), (2048, 16), (4096, 64), (900, 3)]:
        s = packing.simulate(L, cap, buf)
        assert sorted((s["pack_fill"] * cap).round().astype(int).tolist()) == ref(L.tolist(), cap, buf)


def test_pad_multiple_follows_bridge_rule():
    assert (
        packing.pad_multiple(
            {"model.tensor_model_parallel_size": 2, "model.context_parallel_size": 8, "model.sequence_parallel": True}
        )
        == 16
    )
    assert (
        packing.pad_multiple(
            {"model.tensor_model_parallel_size": 4, "model.context_parallel_size": 1, "model.sequence_parallel": True}
        )
        == 4
    )
    assert packing.pad_multiple({}) == 1


def test_suggestions_reduce_padding():
    L = [600] * 4000
    base = packing.simulate(L, 131072, 8)["padding_fraction"]
    sg = packing.suggestions(L, 131072, 8)
    assert sg["samples_to_fill_a_pack"] == 219
    assert sg["settings"] and all(r["padding_fraction"] < base for r in sg["settings"])
    assert {"dataset.packing_buffer_size", "dataset.seq_length"} <= {r["setting"] for r in sg["settings"]}


def test_cli_has_no_heavy_imports():
    import subprocess
    import sys

    code = (
        "import sys, bridge_launch.cli.datasets; "
        "print([m for m in ('megatron.energon', 'PIL', 'submitit', 'torch', 'numpy') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ---------------------------------------------------------------- slow: real conversion + Energon


def _tree_bytes(d: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(d.glob("*.tar"))}


@pytest.mark.slow
def test_convert_load_back_and_determinism(src, tmp_path):
    pytest.importorskip("megatron.energon")
    from bridge_launch.data import inspect as insp

    m1 = _prep(src, tmp_path / "a", num_workers=1)
    m2 = _prep(src, tmp_path / "b", num_workers=3)
    a, b = tmp_path / "a", tmp_path / "b"
    # layout
    assert (a / ".nv-meta" / "split.yaml").is_file() and (a / ".nv-meta" / ".info.json").is_file()
    assert (a / ".nv-meta" / "dataset.yaml").read_text() == prepare.TRAINING_DATASET_YAML
    assert all((a / f"{t.name}.idx").is_file() for t in a.glob("*.tar"))
    assert not list(tmp_path.glob(".*partial*"))
    # same bytes regardless of the number of workers (and across runs)
    assert _tree_bytes(a) == _tree_bytes(b)
    assert (a / ".nv-meta/split.yaml").read_text() == (b / ".nv-meta/split.yaml").read_text()

    def strip(m):
        return {k: v for k, v in m.items() if k not in ("timings_s", "output_dir")}

    assert strip(m1) == strip(m2) == strip(json.loads((a / "manifest.json").read_text()))
    # counts and split membership
    c = m1["counts"]
    assert c["train"] + c["val"] == 24 and c["val"] > 0
    assert sorted(p.name for p in a.glob("*.tar"))[0] == "train-shard-000000.tar"
    assert m1["shards"] == {"train": -(-c["train"] // 5), "val": -(-c["val"] // 5)}
    assert {f["path"] for f in m1["source_files"]} == {"clevr_2/clevr_2.jsonl", "clevr_2/media/shard_000000.tar"}
    jl = src / "clevr_2/clevr_2.jsonl"
    assert next(f for f in m1["source_files"] if f["path"].endswith(".jsonl"))["sha256"] == source.sha256_file(jl)
    # deterministic tar members; .jpgs is exactly pickle.dumps(list of the images) (kernel-copied or not)
    with tarfile.open(a / "train-shard-000000.tar") as tf:
        ms = tf.getmembers()
        assert all(m.mtime == 0 and m.mode == 0o644 and m.uname == "" for m in ms)
        assert [m.name.rsplit(".", 1)[1] for m in ms[:2]] == ["jpgs", "json"]
    sizes = []
    for shard in a.glob("*.tar"):
        with tarfile.open(shard) as tf:
            for m in tf.getmembers()[::2]:
                raw = tf.extractfile(m).read()
                imgs = pickle.loads(raw)
                assert pickle.dumps(imgs, protocol=4) == raw
                sizes += map(len, imgs)
    assert max(sizes) >= 64 * 1024 > min(sizes)  # both sides of the pickler's frame limit
    # loaded back with Energon: every key, in its split, with its images
    records = {json.loads(ln)["id"]: json.loads(ln) for ln in jl.read_text().splitlines()}
    for split in ("train", "val"):
        got = list(insp.iter_samples(a, split))
        assert len(got) == c[split]
        for key, imgs, conv in got:
            assert source.sample_split(key, 0.25) == split
            rec = records[key.split("__", 1)[1]]
            refs = [p["image"] for p in rec["messages"][0]["content"] if p["type"] == "image"]
            assert len(imgs) == len(refs) and imgs[0][:4] in (b"\x89PNG", b"\xff\xd8\xff\xe0")
            assert conv[0]["content"][0] == {"type": "image"}


@pytest.mark.slow
def test_ctrl_c_during_a_parallel_prepare_leaves_nothing(tmp_path):
    """Ctrl-C (SIGINT to the whole foreground process group, workers included) at three moments of
    the write phase: exit 130, no traceback from any process, no output and no partial directory."""
    import os
    import signal
    import subprocess
    import sys
    import time

    srcdir = synthetic.make_source(tmp_path / "src", n=400, seed=3, distinct_images=8, noisy_every=3)
    for i, wait_shards in enumerate((1, 20, 120)):
        out = tmp_path / f"out{i}"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bridge_launch.cli.app",
                "data",
                "prepare",
                DS,
                "--source-dir",
                str(srcdir),
                "--output-dir",
                str(out),
                "--subsets",
                "clevr_2",
                "--skip-source-integrity-check",
                "--max-samples-per-tar",
                "1",
                "--num-workers",
                "2",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        deadline = time.time() + 60
        while time.time() < deadline and proc.poll() is None:
            parts = list(tmp_path.glob(f".out{i}.partial-*"))
            if parts and len(list(parts[0].glob("*.tar"))) >= wait_shards:
                break
            time.sleep(0.01)
        if proc.poll() is not None:
            pytest.fail(f"prepare ended before the interrupt: {proc.returncode} {proc.stderr.read()}")
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert "Traceback" not in err and "Error" not in err, err
        assert not out.exists() and not list(tmp_path.glob(f".out{i}.partial-*")), wait_shards


@pytest.mark.slow
def test_index_equals_energons_own_prepare_dataset(src, tmp_path):
    """The .nv-meta/ and *.tar.idx written from the writers' offsets are what megatron-energon's
    prepare_dataset writes when it scans the same shards (row order aside: Energon's own depends on
    which of its workers finishes first)."""
    pytest.importorskip("megatron.energon")
    import contextlib
    import io
    import shutil
    import sqlite3

    from megatron.energon.flavors.webdataset.base_webdataset import BaseWebdatasetFactory

    a, b = tmp_path / "ours", tmp_path / "energon"
    _prep(src, a, num_workers=2)
    b.mkdir()
    names = sorted(p.name for p in a.glob("*.tar"))
    assert len(names) >= 4
    for n in names:
        shutil.copy(a / n, b / n)
    with contextlib.redirect_stdout(io.StringIO()):
        BaseWebdatasetFactory.prepare_dataset(
            b,
            names,
            split_parts_patterns=[(s, f"{s}-shard-.*") for s in ("train", "val")],
            shuffle_seed=None,
            workers=2,
        )
    for n in names:
        assert (a / f"{n}.idx").read_bytes() == (b / f"{n}.idx").read_bytes(), n
    for f in ("split.yaml", ".info.json"):
        assert (a / ".nv-meta" / f).read_text() == (b / ".nv-meta" / f).read_text(), f
    assert len((a / ".nv-meta/index.uuid").read_text()) == 36

    def rows(d):
        db = sqlite3.connect(d / ".nv-meta/index.sqlite")
        out = {t: sorted(db.execute(f"SELECT * FROM {t}").fetchall()) for t in ("samples", "sample_parts")}
        out["schema"] = sorted(db.execute("SELECT type, name, sql FROM sqlite_master").fetchall())
        db.close()
        return out

    ours, theirs = rows(a), rows(b)
    assert ours == theirs
    assert len(ours["samples"]) == 24 and len(ours["sample_parts"]) == 48


@pytest.mark.slow
def test_write_manifest_then_verified_run_and_cli_report(src, tmp_path):
    pytest.importorskip("megatron.energon")
    from typer.testing import CliRunner

    from bridge_launch.cli.datasets import app

    m = _prep(src, tmp_path / "a", skip_integrity=False, write_manifest=True)
    assert m["source_integrity_verified"] is False
    pins, origin = source.find_pins(DS, "clevr_2")
    assert origin.startswith("user:") and set(pins) == {"clevr_2/clevr_2.jsonl", "clevr_2/media/shard_000000.tar"}
    # later runs verify without a flag
    m2 = _prep(src, tmp_path / "b", skip_integrity=False)
    assert m2["source_integrity_verified"] is True
    r = CliRunner().invoke(app, ["inspect", str(tmp_path / "b"), "--recipe", "qwen35-vl-sft", "--output", "json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["splits"]["train"]["samples"] == m2["counts"]["train"]
    assert rep["text_tokens"] == "estimate"
    p = rep["packing"]
    assert p["seq_length"] == 131072 and p["packing_buffer_size"] == 8 and p["pad_multiple"] == 16
    assert p["padding_fraction"] > 0.95 and p["suggestions"]["settings"]
    r = CliRunner().invoke(app, ["inspect", str(tmp_path / "b"), "--recipe", "qwen35-vl-sft"])
    assert r.exit_code == 0 and "padding:" in r.output and "settings that reduce padding" in r.output


@pytest.mark.slow
def test_exact_text_tokens_with_local_tokenizer(src, tmp_path):
    pytest.importorskip("megatron.energon")
    tk = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers

    tok = tk.Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    (tmp_path / "tok").mkdir()
    tok.save(str(tmp_path / "tok" / "tokenizer.json"))
    from bridge_launch.data import inspect as insp

    _prep(src, tmp_path / "a")
    meas = insp.measure(tmp_path / "a", tokenizer=str(tmp_path / "tok"))
    assert meas["text_tokens_exact"]
    key, imgs, conv = next(insp.iter_samples(tmp_path / "a", "train"))
    words = len(pre_tokenizers.Whitespace().pre_tokenize_str(tokens.chatml_text(conv)))
    assert meas["splits"]["train"]["text_tokens"][0] == words + 5 * len(conv) + 2 * len(imgs)


@pytest.mark.slow
def test_inspect_refuses_unprepared_dir(tmp_path):
    pytest.importorskip("megatron.energon")
    from bridge_launch.data import inspect as insp

    with pytest.raises(UsageError, match="not a prepared Energon dataset"):
        insp.measure(tmp_path)


def _local_slurm_up() -> bool:
    import os
    import shutil
    import subprocess

    conf = "/var/lib/bridge-launch-slurm/etc/slurm.conf"
    if not shutil.which("sinfo") or not os.path.exists(conf):
        return False
    r = subprocess.run(
        ["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env={**os.environ, "SLURM_CONF": conf}
    )
    return r.returncode == 0 and any(s in r.stdout for s in ("idle", "mix", "alloc"))


@pytest.mark.slow
def test_slurm_job_array_writes_the_same_shards(src, tmp_path, monkeypatch):
    pytest.importorskip("submitit")
    pytest.importorskip("megatron.energon")
    if not _local_slurm_up():
        pytest.skip("local Slurm cluster is not running (scripts/local-slurm start)")
    monkeypatch.setenv("SLURM_CONF", "/var/lib/bridge-launch-slurm/etc/slurm.conf")
    m1 = _prep(src, tmp_path / "local", num_workers=2)
    m2 = _prep(src, tmp_path / "slurm", num_workers=2, cluster="local-slurm")
    assert _tree_bytes(tmp_path / "local") == _tree_bytes(tmp_path / "slurm")
    assert m1["counts"] == m2["counts"]
    assert not list(tmp_path.glob(".*submitit"))  # submitit's folder is removed on success


@pytest.mark.slow
def test_slurm_job_array_gets_the_profiles_time_limit_as_slurm_reads_it(src, tmp_path, monkeypatch, home):
    """A profile time of "1-12" is 36 hours for the array's elements (it once became 2 minutes)."""
    import os
    import subprocess

    pytest.importorskip("submitit")
    pytest.importorskip("megatron.energon")
    if not _local_slurm_up():
        pytest.skip("local Slurm cluster is not running (scripts/local-slurm start)")
    monkeypatch.setenv("SLURM_CONF", "/var/lib/bridge-launch-slurm/etc/slurm.conf")
    (home / "clusters" / "long.toml").write_text('extends = "local-slurm"\n[slurm]\ntime = "1-12"\n')
    submitted = []
    _prep(src, tmp_path / "out", num_workers=1, cluster="long", log=submitted.append)
    array = next(line.split()[3] for line in submitted if line.startswith("submitted job array "))
    limits = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-j", array, "-o", "Timelimit"],
        capture_output=True,
        text=True,
        env=dict(os.environ),
    ).stdout.split()
    assert limits and set(limits) == {"1-12:00:00"}, limits


@pytest.mark.slow
def test_slurm_job_array_interrupted_leaves_nothing_running_or_written(src, tmp_path, monkeypatch):
    """Ctrl-C while the array runs: the elements still queued or running are cancelled and waited
    for before the partial directory is deleted, so nothing writes into it afterwards."""
    import os
    import subprocess
    import time

    pytest.importorskip("submitit")
    pytest.importorskip("megatron.energon")
    if not _local_slurm_up():
        pytest.skip("local Slurm cluster is not running (scripts/local-slurm start)")
    monkeypatch.setenv("SLURM_CONF", "/var/lib/bridge-launch-slurm/etc/slurm.conf")

    def interrupt(_n):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _prep(src, tmp_path / "out", num_workers=2, max_samples_per_tar=1, cluster="local-slurm", on_progress=interrupt)
    left = subprocess.run(
        ["squeue", "-h", "-n", "bridge-launch-data-prepare", "-o", "%i %T"],
        capture_output=True,
        text=True,
        env=dict(os.environ),
    ).stdout.strip()
    assert left == "", left
    time.sleep(2)  # anything still writing would show up now
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.partial-*[0-9]"))
