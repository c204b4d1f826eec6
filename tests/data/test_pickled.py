"""data/pickled.py reproduces pickle.dumps(list of bytes, protocol=4) byte for byte."""

from __future__ import annotations

import pickle
import random

import pytest

from bridge_launch.data import pickled

T = pickled.FRAME_TARGET


def _payload(i: int, size: int) -> bytes:
    return (bytes([i % 251 + 1]) * 2 + bytes(range(256)) * (size // 256 + 1))[:size]


def _join(sizes):
    data = [_payload(i, s) for i, s in enumerate(sizes)]
    segs = pickled.list_of_bytes([(s, i) for i, s in enumerate(sizes)], lambda i: data[i])
    big = [x for x in segs if isinstance(x, int)]
    assert big == [i for i, s in enumerate(sizes) if s >= T]  # large payloads stay references
    return b"".join(data[x] if isinstance(x, int) else x for x in segs), pickle.dumps(data, protocol=4)


CASES = [
    [2],
    [255],
    [256],
    [T - 1],
    [T],
    [T + 1],
    [300, 70000, 10],
    [100000, 50],
    [50, 100000],
    [30000, 30000, 30000],
    [T - 20, 5, 5, 5, 5],
    [2] * 3,
    [20000] * 10,
    [T, T, T],
    [2**16 * 3, 2, 2**16 * 2],
    [],
    [7] * 1001,
    [40000] * 1002,
]


@pytest.mark.parametrize("sizes", CASES, ids=lambda s: f"{len(s)}x{sorted(set(s))[:3]}")
def test_segments_are_pickle_dumps(sizes):
    ours, ref = _join(sizes)
    assert ours == ref
    assert pickle.loads(ours) == [_payload(i, s) for i, s in enumerate(sizes)]


def test_random_size_mixes():
    rng = random.Random(7)
    for _ in range(300):
        sizes = [
            rng.choice(
                [rng.randint(2, 300), rng.randint(300, T - 1), rng.randint(T - 50, T + 50), rng.randint(T, 3 * T)]
            )
            for _ in range(rng.randint(1, 6))
        ]
        ours, ref = _join(sizes)
        assert ours == ref, sizes
