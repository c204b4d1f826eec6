"""data prepare / inspect / packing report (issue 4).

Fast tests: validation, integrity, record errors, visual-token and packing arithmetic (no Energon).
Slow tests: a real conversion indexed by megatron-energon and loaded back with Energon's loader."""

from __future__ import annotations

import hashlib
import json

import pytest

from bridge_launch.core.errors import UsageError
from bridge_launch.data import prepare, shards, source, synthetic
from data_sources import DS, _prep

# an isolated state dir for every test here
pytestmark = pytest.mark.usefixtures("home")

pytest.importorskip("PIL")


def _lines_src(src, edit):
    jl = src / "clevr_2" / "clevr_2.jsonl"
    lines = jl.read_text().splitlines()
    edit(lines)
    jl.write_text("\n".join(lines) + "\n")
    return jl


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


def test_prepare_summary_rate_is_the_progress_bars(monkeypatch, tmp_path):
    """The bar counts samples written per second of writing; the summary says the same rate, and
    where the rest of the time went."""
    from typer.testing import CliRunner

    from bridge_launch.cli import datasets as dcli
    from bridge_launch.data import prepare as prep

    manifest = {
        "output_dir": str(tmp_path / "out"),
        "counts": {"train": 900, "val": 100},
        "shards": {"train": 9, "val": 1},
        "timings_s": {"plan": 6.0, "write": 0.04, "index": 1.96, "total": 8.0},
        "source_integrity_verified": True,
        "integrity_manifests": {"clevr_2": "user"},
    }
    monkeypatch.setattr(prep, "prepare", lambda *_a, **_k: manifest)
    r = CliRunner().invoke(
        dcli.app,
        [
            "prepare",
            "nemotron-image-v3",
            "--source-dir",
            str(tmp_path),
            "--output-dir",
            str(tmp_path / "out"),
            "--subsets",
            "clevr_2",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "writing 0.0 s at 25,000 samples/s" in r.output and "reading and checking the source 6.0 s" in r.output
    assert "125 samples/s" not in r.output  # not samples over the whole run, which the bar never shows


def test_a_pin_of_this_machines_own_gives_way_when_asked(src, tmp_path):
    """The CLEVR2 workflow twice in one state dir (issue 42, item 7): after --write-manifest pinned one
    copy of the source, a larger copy was refused with no way on, and --skip-source-integrity-check did
    not help; now the refusal says what moves on, and both flags do."""
    m = _prep(src, tmp_path / "a", skip_integrity=False, write_manifest=True)
    assert m["integrity_manifests"] == {"clevr_2": "pinned now (--write-manifest)"}
    jl = src / "clevr_2" / "clevr_2.jsonl"
    lines = jl.read_text().splitlines()
    rec = json.loads(lines[0])
    rec["id"] = rec["id"] + "-more"
    jl.write_text("\n".join([*lines, json.dumps(rec)]) + "\n")
    with pytest.raises(UsageError) as e:
        _prep(src, tmp_path / "b", skip_integrity=False)
    assert "this machine's own pin (--write-manifest)" in str(e.value) and "--skip-source-integrity-check" in str(
        e.value
    )
    m = _prep(src, tmp_path / "c", skip_integrity=True)
    assert m["source_integrity_verified"] is False and m["counts"]["train"] + m["counts"]["val"] == len(lines) + 1
    m = _prep(src, tmp_path / "d", skip_integrity=False, write_manifest=True)
    assert m["integrity_manifests"] == {"clevr_2": "pinned now (--write-manifest)"}  # pinned anew
    assert _prep(src, tmp_path / "e", skip_integrity=False)["source_integrity_verified"] is True
    # the same command again (the data how-to's) verifies the unchanged source against its pin
    m = _prep(src, tmp_path / "f", skip_integrity=False, write_manifest=True)
    assert m["source_integrity_verified"] is True and not m["integrity_manifests"]["clevr_2"].startswith("pinned")
