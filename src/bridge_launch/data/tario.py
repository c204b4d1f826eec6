"""Tar headers without tarfile's per-member cost (data prepare's hot loops).

`scan(path)` lists the regular files of an archive as (name, data offset, size), reading only the
512-byte headers; anything it does not handle itself (sparse files, base-256 sizes, a bad checksum,
a truncated archive) makes it hand the whole archive to tarfile, so the answer, and the errors, are
tarfile's. `header(name, size)` is the header tarfile writes in PAX format for a regular file with
mode 0644, owner 0:0 and no names, mtime 0; long or non-ASCII names go through tarfile itself.
Tests compare both against tarfile member by member and byte by byte."""

from __future__ import annotations

import os
import re
import tarfile
import zlib

BLOCK = 512
RECORD = 20 * BLOCK  # tarfile.RECORDSIZE: the archive is padded to a multiple of this
END = b"\0" * (2 * BLOCK)
_ZERO = b"\0" * BLOCK
_SPACES = b" " * 8
_TERM = (0, 32)  # NUL, space: what ends a numeric field
# a numeric field as tarfile reads it: up to its first NUL, spaces and octal digits (int() takes more:
# anything else goes to tarfile); mode, uid, gid, mtime, devmajor, devminor
_FIELD = re.compile(rb" *[0-7]* *(?:\0|\Z)")
_NUMBERS = ((100, 108), (108, 116), (116, 124), (136, 148), (329, 337), (337, 345))
_REGULAR = (b"0", b"\0", b"7")  # REGTYPE, AREGTYPE, CONTTYPE: tarfile's isfile()
_NO_DATA = (b"1", b"2", b"3", b"4", b"5", b"6")  # links, devices, directories, fifos


class _Fallback(Exception):
    pass


def scan(path) -> list[tuple[str, int, int]]:
    """[(member name, offset of its data, size)] for the regular files of the archive at `path`."""
    try:
        return _scan_fast(path)
    except (_Fallback, ValueError):  # ValueError: a numeric field int() does not take
        with tarfile.open(path, "r:") as tf:  # uncompressed only: the offsets are read in place
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
        if sp < 0 or not data[pos:sp].isdigit():  # tarfile's pattern is ASCII digits (int() takes more)
            raise _Fallback
        length = int(data[pos:sp])
        if length <= 0 or pos + length > len(data) or data[pos + length - 1 : pos + length] != b"\n":
            raise _Fallback
        kv = data[sp + 1 : pos + length - 1]
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
            if pos > total:
                raise _Fallback  # the last member's blocks run past the end: tarfile says "unexpected end"
            hdr = os.pread(fd, BLOCK, pos)
            pending = long_name is not None or pax_size is not None
            if len(hdr) < BLOCK:
                if hdr or pending or pos == 0:
                    raise _Fallback  # truncated, or empty: tarfile says which
                break  # EOF without end blocks: tarfile accepts that
            if hdr == _ZERO:
                if pending:
                    raise _Fallback  # an extended header with no member after it
                break  # end of archive: tarfile stops at the first zero block too
            # The checksum is the byte sum with its own field read as spaces. adler32's low half is
            # 1 + the sum mod 65521; a 256-byte half sums to at most 65280, so two halves give the
            # exact sum, in C (a Python sum() of 512 bytes costs more than the rest of the header).
            chk = int(hdr[148:154], 8) if hdr[154] in _TERM else _octal(hdr[148:156])
            h = hdr[:148] + _SPACES + hdr[156:]
            if (zlib.adler32(h[:256]) & 0xFFFF) + (zlib.adler32(h[256:]) & 0xFFFF) - 2 != chk:
                raise _Fallback  # a bad checksum, or a signed one: tarfile decides
            # mode, uid, gid, mtime, devmajor, devminor: tarfile parses them all; plain octal here,
            # anything else (base-256, junk) goes to tarfile
            for a, b in _NUMBERS:
                if not _FIELD.match(hdr, a, b):
                    raise _Fallback
            kind = hdr[156:157]
            # the usual field: 11 octal digits and a NUL (or space); anything else -> _octal or tarfile
            size = int(hdr[124:135], 8) if hdr[135] in _TERM else _octal(hdr[124:136])
            if size < 0:
                raise _Fallback
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
            raw = hdr[:100].split(b"\0", 1)[0]
            prefix = hdr[345:500].split(b"\0", 1)[0]
            short = (prefix + b"/" + raw if prefix else raw).decode("utf-8", "surrogateescape")
            name = short if long_name is None else long_name
            long_name = pax_size = None
            is_dir = kind == b"\0" and raw.endswith(b"/")  # tarfile: AREGTYPE named "x/" is a directory
            if kind in _REGULAR and not is_dir:
                if name.endswith("/"):
                    raise _Fallback  # a file named like a directory: tarfile's rules differ by header kind
                if data + size > total:
                    raise _Fallback  # truncated member
                out.append((name, data, size))
                pos = data + ((size + 511) & ~511)
            elif kind in _NO_DATA or is_dir:
                pos = data  # tarfile skips no data blocks after links, devices, directories, fifos
            else:
                raise _Fallback  # sparse, multi-volume, global pax, GNU long link, vendor types
    finally:
        os.close(fd)
    return out


_MODE_IDS = b"0000644\x000000000\x000000000\x00"  # mode, uid, gid
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
