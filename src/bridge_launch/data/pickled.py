"""pickle.dumps(list of bytes, protocol=4), byte for byte, without holding the large payloads.

A shard's `<key>.jpgs` member is the pickled list of a sample's image bytes. Python's pickler writes
a payload of 64 KiB or more outside its frames, straight after its opcode, so those bytes can go
from the media tar to the shard inside the kernel (copy_file_range) instead of through three
user-space copies. This module reproduces the C pickler's layout and returns it as segments: bytes,
or the caller's reference for a payload to copy. The layout: PROTO 4; FRAME around everything
else, a frame under 4 bytes left bare, a frame closed when a save() starts with it at 64 KiB or
more; EMPTY_LIST, MEMOIZE, the items, then APPEND (one item) or MARK ... APPENDS in batches of
1000; STOP. A test compares the joined segments with pickle.dumps for many size mixes."""

from __future__ import annotations

import struct

FRAME_TARGET = 64 * 1024  # pickle's _FRAME_SIZE_TARGET
_FRAME_MIN = 4
_BATCH = 1000


def list_of_bytes(items, read) -> list:
    """items: [(size, ref)]; read(ref) -> bytes is called for payloads under FRAME_TARGET (they sit
    inside a frame). Returns [bytes | ref]: with each ref replaced by its bytes, the concatenation is
    pickle.dumps([payload, ...], protocol=4) for payloads that are distinct objects (so 2 bytes or
    longer: CPython shares the empty and 1-byte objects, which the pickler then memoizes)."""
    out: list = [b"\x80\x04"]
    frame: list[bytes] = []
    flen = 0
    framed = False  # a frame is open (possibly empty so far)

    def write(b: bytes) -> None:
        nonlocal flen, framed
        frame.append(b)
        flen += len(b)
        framed = True

    def commit() -> None:
        nonlocal flen, framed
        if framed:
            if flen >= _FRAME_MIN:
                out.append(b"\x95" + struct.pack("<Q", flen))
            out.append(b"".join(frame))
            frame.clear()
            flen, framed = 0, False

    def boundary() -> None:
        if framed and flen >= FRAME_TARGET:
            commit()

    def save(size: int, ref) -> None:
        boundary()  # the pickler starts every save() by closing a frame that reached the target
        if size <= 0xFF:
            head = b"C" + bytes((size,))
        elif size <= 0xFFFFFFFF:
            head = b"B" + struct.pack("<I", size)
        else:
            head = b"\x8e" + struct.pack("<Q", size)
        if size >= FRAME_TARGET:  # outside any frame: the opcode, then the payload itself
            commit()
            out.append(head)
            out.append(ref)
        else:
            write(head)
            write(read(ref))
        write(b"\x94")  # MEMOIZE

    write(b"]\x94")  # EMPTY_LIST, MEMOIZE
    if len(items) == 1:
        save(*items[0])
        write(b"a")  # APPEND
    elif items:
        for i in range(0, len(items), _BATCH):
            write(b"(")  # MARK
            for size, ref in items[i : i + _BATCH]:
                save(size, ref)
            write(b"e")  # APPENDS
    write(b".")  # STOP
    commit()
    return out
