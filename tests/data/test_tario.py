"""data/tario.py against tarfile: the member list of many kinds of archive, and header bytes."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import tarfile

import pytest

from bridge_launch.data import tario


def _members(path):
    with tarfile.open(path) as tf:
        return [(m.name, m.offset_data, m.size) for m in tf if m.isfile()]


def _add(tf, name, data=b"", kind=tarfile.REGTYPE, **kw):
    ti = tarfile.TarInfo(name)
    ti.type = kind
    for k, v in kw.items():
        setattr(ti, k, v)
    if kind in (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE):
        ti.size = len(data)
        tf.addfile(ti, io.BytesIO(data))
    else:
        tf.addfile(ti)


NAMES = [
    "a.jpg",
    "dir/b.png",
    "x" * 99,
    "y" * 100,
    "z" * 101,
    "d/" * 60 + "deep.jpg",
    "ünïcødé/bild.jpg",
    "sp ace/na me.png",
    "./dot/c.jpg",
    "e" * 250 + ".png",
]


def _h(
    name=b"a.jpg",
    size=5,
    kind=b"0",
    mtime=b"00000000000\0",
    prefix=b"",
    chk_delta=0,
    devmajor=b"\0" * 8,
    size_field=None,
):
    h = bytearray(512)
    h[0 : len(name)] = name
    h[100:124] = b"0000644\x000000000\x000000000\x00"
    h[124:136] = size_field or b"%011o\0" % size
    h[136:148] = mtime
    h[156:157] = kind
    h[257:265] = b"ustar\x0000"
    h[329:337] = devmajor
    h[345 : 345 + len(prefix)] = prefix
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\0 " % (sum(h) + chk_delta)
    return bytes(h)


def _pad(b: bytes) -> bytes:
    return b + b"\0" * (-len(b) % 512)


def _pax(*records: bytes) -> bytes:
    body = b"".join(records)
    return _h(b"././@PaxHeader", len(body), b"x") + _pad(body)


END = b"\0" * 1024


A = _h() + _pad(b"hello")


DAMAGED = {
    "no padding after the last member": _h() + b"hello",
    "GNU long name, then the end": A + _h(b"././@LongLink", 6, b"L") + _pad(b"b.jpg\0") + END,
    "pax header, then the end": A + _pax(b"14 path=c.jpg\n") + END,
    "pax length with an underscore": _pax(b"1_5 path=c.jpg\n") + _h(b"short.jpg") + _pad(b"hello") + END,
    "pax length with a plus sign": _pax(b"+15 path=c.jpg\n") + _h(b"short.jpg") + _pad(b"hello") + END,
    "pax path with a trailing slash": _pax(b"15 path=c.jpg/\n") + _h(b"short.jpg") + _pad(b"hello") + END,
    "second member with a non-octal mtime": A + _h(b"b.jpg", mtime=b"zzzzzzzzzzz\0") + _pad(b"world") + END,
    "second member with a bad devmajor": A + _h(b"b.jpg", devmajor=b"9\0\0\0\0\0\0\0") + _pad(b"world") + END,
    "old-style file with only a prefix": _h(b"", kind=b"\0", prefix=b"dir") + _pad(b"hello") + END,
    "checksum off by 65521": A + _h(b"\xff" * 100, prefix=b"\xff" * 155, chk_delta=-65521) + _pad(b"world") + END,
    "negative size": _h(b"neg.jpg", size_field=b"-0000000001\0") + _h(b"b.jpg") + _pad(b"world") + END,
    "base-256 mtime": _h(b"big.jpg", mtime=b"\x80" + b"\0" * 6 + b"\x01" + b"\0" * 4) + _pad(b"hello") + END,
}


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_scan_matches_tarfile(tmp_path, fmt):
    p = tmp_path / "t.tar"
    with tarfile.open(p, "w", format=fmt) as tf:
        for i, n in enumerate(NAMES):
            try:
                _add(tf, n, bytes([i]) * (i * 700 + (i % 3)))
            except ValueError:
                pass  # USTAR cannot hold some of these names
        _add(tf, "emptydir", kind=tarfile.DIRTYPE)
        _add(tf, "link", kind=tarfile.SYMTYPE, linkname="a.jpg")
        _add(tf, "hard", kind=tarfile.LNKTYPE, linkname="a.jpg")
        _add(tf, "fifo", kind=tarfile.FIFOTYPE)
        _add(tf, "empty.jpg", b"")
        _add(tf, "after.jpg", b"tail" * 1000, mtime=5)
    got = tario._scan_fast(p)  # the fast path itself, not its fallback
    assert got == _members(p)
    assert len(got) >= 8


def test_scan_matches_gnu_tar(tmp_path):
    if not shutil.which("tar"):
        pytest.skip("no tar")
    root = tmp_path / "root"
    for n in NAMES:
        f = root / n
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(n.encode() * 3)
    (root / "ln").symlink_to("a.jpg")
    done = []
    for fmt in ("gnu", "posix", "ustar", "v7"):
        p = tmp_path / f"{fmt}.tar"
        r = subprocess.run(["tar", "--format", fmt, "-cf", str(p), "-C", str(root), "."], capture_output=True)
        if r.returncode:
            continue  # ustar/v7 refuse the longest names; the others still count
        assert tario._scan_fast(p) == _members(p), fmt
        done.append(fmt)
    assert {"gnu", "posix"} <= set(done)


def test_scan_hands_bad_archives_to_tarfile(tmp_path):
    p = tmp_path / "t.tar"
    with tarfile.open(p, "w") as tf:
        _add(tf, "a.jpg", b"x" * 5000)
        _add(tf, "b.jpg", b"y" * 5000)
    data = p.read_bytes()
    bad = tmp_path / "bad.tar"
    bad.write_bytes(data[:148] + b"9999999\0" + data[156:])  # wrong checksum in the first header
    with pytest.raises(tarfile.TarError):
        tario.scan(bad)
    trunc = tmp_path / "trunc.tar"
    trunc.write_bytes(data[: 512 + 5120 + 512 + 1000])  # second member cut short
    with pytest.raises(tarfile.TarError):
        tario.scan(trunc)
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"not a tar at all" * 100)
    with pytest.raises(tarfile.TarError):
        tario.scan(junk)
    empty = tmp_path / "empty.tar"
    empty.write_bytes(b"")
    with pytest.raises(tarfile.TarError):
        tario.scan(empty)
    noend = tmp_path / "noend.tar"
    noend.write_bytes(data[: 512 + 5120])  # no end blocks: tarfile accepts it
    assert tario.scan(noend) == _members(noend) == [("a.jpg", 512, 5000)]


@pytest.mark.parametrize("name", ["k.jpgs", "clevr_2__clevr_2_000001.json", "a" * 100, "a" * 101, "ä.json", "b" * 300])
@pytest.mark.parametrize("size", [0, 1, 511, 512, 123456789, 8**11 + 1])
def test_header_is_tarfiles(name, size):
    ti = tarfile.TarInfo(name)
    ti.size, ti.mtime, ti.mode, ti.uid, ti.gid, ti.uname, ti.gname = size, 0, 0o644, 0, 0, "", ""
    assert tario.header(name, size) == ti.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def test_written_archive_is_byte_identical_to_tarfiles():
    members = [(f"k{i:04d}.{ext}", bytes([i % 251]) * (i * 37 % 2000)) for i in range(60) for ext in ("jpgs", "json")]
    ref = io.BytesIO()
    with tarfile.open(fileobj=ref, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for n, d in members:
            ti = tarfile.TarInfo(n)
            ti.size, ti.mtime, ti.mode, ti.uid, ti.gid, ti.uname, ti.gname = len(d), 0, 0o644, 0, 0, "", ""
            tf.addfile(ti, io.BytesIO(d))
    out = bytearray()
    for n, d in members:
        out += tario.header(n, len(d)) + d + tario.padding(len(d))
    out += tario.trailer(len(out))
    assert bytes(out) == ref.getvalue()


@pytest.mark.parametrize("case", DAMAGED, ids=list(DAMAGED))
def test_damaged_archives_get_tarfiles_answer(tmp_path, case):
    p = tmp_path / "t.tar"
    p.write_bytes(DAMAGED[case])
    try:
        want = _members(p)
    except tarfile.TarError as e:
        with pytest.raises(type(e), match=re.escape(str(e))):
            tario.scan(p)
        return
    assert tario.scan(p) == want


def test_compressed_archives_are_not_read_through(tmp_path):
    import gzip

    p = tmp_path / "media.tar"
    p.write_bytes(gzip.compress(_h() + _pad(b"hello") + END))
    with pytest.raises(tarfile.TarError):  # tarfile itself would decompress and give offsets into that
        tario.scan(p)
