"""Tar headers without tarfile's per-member cost (data prepare's hot loops).

`scan(path)` lists the regular files of an archive as (name, data offset, size), reading only the
512-byte headers; anything it does not handle itself (sparse files, base-256 sizes, a bad checksum,
a truncated archive) makes it hand the whole archive to tarfile, so the answer, and the errors, are
tarfile's. `header(name, size)` is the header tarfile writes in PAX format for a regular file with
mode 0644, owner 0:0 and no names, mtime 0; long or non-ASCII names go through tarfile itself.
Tests compare both against tarfile member by member and byte by byte."""

from __future__ import annotations

import os
import tarfile
import zlib

BLOCK = 512
RECORD = 20 * BLOCK  # tarfile.RECORDSIZE: the archive is padded to a multiple of this
END = b"\0" * (2 * BLOCK)
_ZERO = b"\0" * BLOCK
_SPACES = b" " * 8
_TERM = (0, 32)  # NUL, space: what ends a numeric field
_REGULAR = (b"0", b"\0", b"7")  # REGTYPE, AREGTYPE, CONTTYPE: tarfile's isfile()
_NO_DATA = (b"1", b"2", b"3", b"4", b"5", b"6")  # links, devices, directories, fifos


class _Fallback(Exception):
    pass


def scan(path) -> list[tuple[str, int, int]]:
    """[(member name, offset of its data, size)] for the regular files of the archive at `path`."""
    try:
        return _scan_fast(path)
    except (_Fallback, ValueError):  # ValueError: a numeric field int() does not take
        with tarfile.open(path) as tf:
            return [(m.name, m.offset_data, m.size) for m in tf if m.isfile()]


def _octal(field: bytes) -> int:
    if field[:1] in (b"\x80", b"\xff"):
        raise _Fallback  # base-256 (GNU) number
    s = field.split(b"\0", 1)[0].strip(b" ")
    try:
        return int(s, 8) if s else 0
    except ValueError:
        raise _Fallback from None


def _pax_records(data: bytes) -> dict[str, str]:
    out, pos = {}, 0
    while pos < len(data):
        sp = data.find(b" ", pos)
        if sp < 0:
            raise _Fallback
        try:
            length = int(data[pos:sp])
        except ValueError:
            raise _Fallback from None
        if length <= 0 or pos + length > len(data) or data[pos + length - 1:pos + length] != b"\n":
            raise _Fallback
        kv = data[sp + 1:pos + length - 1]
        k, eq, v = kv.partition(b"=")
        if not eq:
            raise _Fallback
        out[k.decode("utf-8", "surrogateescape")] = v.decode("utf-8", "surrogateescape")
        pos += length
    return out


def _scan_fast(path) -> list[tuple[str, int, int]]:
    out = []
    fd = os.open(path, os.O_RDONLY)
    try:
        total = os.fstat(fd).st_size
        pos = 0
        long_name = pax_size = None  # from a GNU 'L' or a pax 'x' header: they apply to the next member
        while True:
            hdr = os.pread(fd, BLOCK, pos)
            if len(hdr) < BLOCK:
                if hdr or long_name is not None or pax_size is not None or pos == 0:
                    raise _Fallback  # truncated, or empty: tarfile says which
                break  # EOF without end blocks: tarfile accepts that
            if hdr == _ZERO:
                break  # end of archive: tarfile stops at the first zero block too
            # The checksum is the byte sum with its own field read as spaces; adler32's low half is
            # (1 + that sum) mod 65521, computed in C (a Python sum() of 512 bytes costs more than the
            # rest of the header). A mismatch, or a signed checksum, goes to tarfile.
            chk = int(hdr[148:154], 8) if hdr[154] in _TERM else _octal(hdr[148:156])
            if (zlib.adler32(hdr[:148] + _SPACES + hdr[156:]) & 0xFFFF) != (1 + chk) % 65521:
                raise _Fallback
            kind = hdr[156:157]
            # the usual field: 11 octal digits and a NUL (or space); anything else -> _octal or tarfile
            size = int(hdr[124:135], 8) if hdr[135] in _TERM else _octal(hdr[124:136])
            data = pos + BLOCK
            if kind in (b"x", b"L"):
                body = os.pread(fd, size, data)
                if len(body) != size:
                    raise _Fallback
                if kind == b"L":
                    long_name = body.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
                else:
                    rec = _pax_records(body)
                    if "hdrcharset" in rec or any(k.startswith("GNU.sparse") for k in rec):
                        raise _Fallback
                    long_name = rec.get("path", long_name)
                    if "size" in rec:
                        pax_size = int(rec["size"])
                pos = data + ((size + 511) & ~511)
                continue
            if pax_size is not None:
                size = pax_size
            if long_name is not None:
                name = long_name
            else:
                raw = hdr[:100].split(b"\0", 1)[0]
                prefix = hdr[345:500].split(b"\0", 1)[0]
                name = (prefix + b"/" + raw if prefix else raw).decode("utf-8", "surrogateescape")
            long_name = pax_size = None
            if kind in _REGULAR and not (kind == b"\0" and name.endswith("/")):
                if data + size > total:
                    raise _Fallback  # truncated member
                out.append((name, data, size))
                pos = data + ((size + 511) & ~511)
            elif kind in _NO_DATA or (kind == b"\0" and name.endswith("/")):
                pos = data  # tarfile skips no data blocks after links, devices, directories, fifos
            else:
                raise _Fallback  # sparse, multi-volume, global pax, GNU long link, vendor types
    finally:
        os.close(fd)
    return out


_MODE_IDS = b"0000644\0" b"0000000\0" b"0000000\0"  # mode, uid, gid
_MTIME = b"00000000000\0"
_REST = b"0" + b"\0" * 100 + b"ustar\x0000" + b"\0" * 64 + b"\0" * 16 + b"\0" * 155 + b"\0" * 12  # type .. end
_CONST_SUM = sum(_MODE_IDS) + sum(_MTIME) + sum(_SPACES) + sum(_REST)


def header(name: str, size: int) -> bytes:
    """The PAX-format header tarfile writes for a regular file (mode 0644, 0:0, mtime 0, no names).

    Only the name and size vary, so the checksum is a constant plus their byte sums."""
    if not name.isascii() or len(name) > 100 or size >= 0o77777777777 or not name:
        ti = tarfile.TarInfo(name)
        ti.size, ti.mtime, ti.mode, ti.uid, ti.gid, ti.uname, ti.gname = size, 0, 0o644, 0, 0, "", ""
        return ti.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    raw = name.encode("ascii")
    sz = b"%011o\0" % size
    chk = b"%06o\0 " % (_CONST_SUM + sum(raw) + sum(sz))
    return b"".join((raw.ljust(100, b"\0"), _MODE_IDS, sz, _MTIME, chk, _REST))


def padding(size: int) -> bytes:
    return b"\0" * (-size % BLOCK)


def trailer(pos: int) -> bytes:
    """End-of-archive blocks plus the padding tarfile adds to a full record, for an archive at `pos`."""
    end = pos + len(END)
    return END + b"\0" * (-end % RECORD)
