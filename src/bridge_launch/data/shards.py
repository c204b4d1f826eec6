"""Writing one shard: a task's images, preaded from their media archives (or given as bytes),
become one tar with fixed member metadata (tario), every member's offset recorded for the index.
prepare.py runs the tasks in local processes; array.py runs them as a Slurm job array."""

from __future__ import annotations

import errno
import os
import pickle
import struct

from bridge_launch.core.errors import LaunchError, UsageError
from bridge_launch.data import pickled, tario
from bridge_launch.data import source as src


class _Sources:
    """The media archives one shard reads, each opened once (pread from it) and closed with the shard."""

    def __init__(self):
        self.fds: dict[str, int] = {}

    def fd(self, path: str) -> int:
        fd = self.fds.get(path)
        if fd is None:
            fd = self.fds[path] = os.open(path, os.O_RDONLY)
        return fd

    def payload(self, ref) -> bytes:
        """The bytes of an image reference: the bytes themselves, or ("tar", path, offset, size)."""
        if isinstance(ref, bytes):
            return ref
        _, path, off, size = ref
        data = os.pread(self.fd(path), size, off)
        if len(data) != size:
            raise _truncated(path, off, size)
        return data

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


def _size(ref) -> int:
    """The length of a segment or image reference: bytes, or ("tar", path, offset, size)."""
    return len(ref) if isinstance(ref, bytes) else ref[3]


def _truncated(path, off, size) -> UsageError:
    return UsageError(f"media archive {path} is truncated (member at byte {off} needs {size} bytes)")


def _copy_range(out: int, src_fd: int, path: str, off: int, size: int) -> None:
    """Bytes off..off+size of a media tar onto `out` at its position, inside the kernel where it can:
    copy_file_range, else sendfile (another filesystem, an old kernel), else pread + write."""
    global _COPY
    done = 0
    while done < size:
        try:
            if _COPY == "copy_file_range":
                n = os.copy_file_range(src_fd, out, size - done, off + done)
            elif _COPY == "sendfile":
                n = os.sendfile(out, src_fd, off + done, size - done)
            else:
                chunk = os.pread(src_fd, min(size - done, 8 << 20), off + done)
                _write_all(out, [chunk])
                n = len(chunk)
        except OSError as e:
            # what these calls return where they cannot work here (another filesystem, an old kernel,
            # a filesystem without them): the next way, for the rest of this prepare in this process
            if _COPY != "pread" and e.errno in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                _COPY = "sendfile" if _COPY == "copy_file_range" else "pread"
                continue  # nothing was copied by the call that failed
            raise
        if n == 0:
            raise _truncated(path, off, size)
        done += n


_BEST_COPY = "copy_file_range" if hasattr(os, "copy_file_range") else "sendfile" if hasattr(os, "sendfile") else "pread"


_COPY = _BEST_COPY


def write_shard(task: tuple) -> tuple:
    """Write one shard: task = (path, [(key, messages_json_bytes, [media location, ...]), ...]).

    Members as webdataset's TarWriter orders them (extensions sorted: .jpgs, the pickled list of the
    sample's images, then .json), each with the header tarfile writes for mode 0644, owner 0:0,
    mtime 0 (tario.header); the .jpgs bytes are pickle.dumps(images, protocol=4), images of 64 KiB or
    more copied by the kernel (pickled.list_of_bytes; byte-equal for images of 2 bytes or more, which
    every real image is, and pickle.loads-equal always). Also writes Energon's
    `<shard>.tar.idx` (the byte offset of every sample, then of the end), and returns what the
    Energon index needs: (path, count, keys, sample offsets + end, [jpgs off, size, json off, size] * count)."""
    path, samples = task
    keys, offs, parts = [], [], []
    pos = 0
    fd = os.open(path + ".part", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    out, media = _Gather(fd), _Sources()
    try:
        for key, msg_json, locs in samples:
            keys.append(key)
            offs.append(pos)
            if all(loc[0] == "tar" and loc[3] < pickled.FRAME_TARGET for loc in locs):
                # every image inside the pickler's frames: C's pickle.dumps is the quicker way
                segs = [pickle.dumps([media.payload(loc) for loc in locs], protocol=4)]
            else:  # loose files are read here; tar members of 64 KiB or more stay references to copy
                refs = [loc if loc[0] == "tar" else src.read_media(loc) for loc in locs]
                segs = pickled.list_of_bytes([(_size(r), r) for r in refs], media.payload)
            size = sum(map(_size, segs))
            h1, h2 = tario.header(f"{key}.jpgs", size), tario.header(f"{key}.json", len(msg_json))
            p1, p2 = tario.padding(size), tario.padding(len(msg_json))
            parts += (pos + len(h1), size)
            pos += len(h1) + size + len(p1)
            parts += (pos + len(h2), len(msg_json))
            pos += len(h2) + len(msg_json) + len(p2)
            out.add(h1)
            for x in segs:
                if isinstance(x, bytes):
                    out.add(x)
                else:
                    out.flush()
                    _copy_range(fd, media.fd(x[1]), x[1], x[2], x[3])
            out.add(p1, h2, msg_json, p2)
        offs.append(pos)
        trailer = tario.trailer(pos)
        out.add(trailer)
        out.flush()
        written = os.lseek(fd, 0, os.SEEK_CUR)
        if written != pos + len(trailer):  # the offsets the index gets would be wrong: never ship that
            raise LaunchError(f"{path}: wrote {written} bytes where the index expects {pos + len(trailer)}")
    finally:
        os.close(fd)
        media.close()
    with open(path + ".idx", "wb") as f:  # Energon's TarIndexWriter format: native uint64 per offset
        f.write(struct.pack(f"{len(offs)}Q", *offs))
    os.replace(path + ".part", path)
    return path, len(samples), keys, offs, parts


class _Gather:
    """Pieces to write, kept by reference and written with one writev per MiB (no copy into a buffer)."""

    def __init__(self, fd: int):
        self.fd, self.bufs, self.size = fd, [], 0

    def add(self, *bufs: bytes) -> None:
        self.bufs += bufs
        self.size += sum(map(len, bufs))
        if self.size >= 1 << 20 or len(self.bufs) >= 512:
            self.flush()

    def flush(self) -> None:
        _write_all(self.fd, self.bufs)
        self.bufs, self.size = [], 0


def _write_all(fd: int, bufs: list) -> None:
    if not bufs:
        return
    n, want = os.writev(fd, bufs), sum(map(len, bufs))
    if n != want:  # a short write (a signal, a full disk): finish it piece by piece, or raise ENOSPC
        rest = memoryview(b"".join(bufs))[n:]
        while rest:
            rest = rest[os.write(fd, rest) :]


def write_shards(tasks: list[tuple]) -> list[tuple]:
    """One Slurm array element's share (also usable in-process)."""
    return [write_shard(t) for t in tasks]
