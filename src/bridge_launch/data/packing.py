"""Simulate the Qwen-VL recipe's native (Energon) packing over measured sample lengths.

What training does (Megatron-Bridge QwenVLTaskEncoder with enable_energon_packing): Energon fills a
buffer of `dataset.packing_buffer_size` samples in stream order; `select_samples_to_pack` runs
first-fit-decreasing over that buffer with bins of `dataset.seq_length`, each sample's length
rounded up to the CP/SP padding multiple (training/config.py: lcm(2*CP if CP>1, CP*TP with sequence
parallel)); every resulting pack is one sequence, padded to `seq_length` because EP>1 forces
`pad_to_max_length`. So the padding of a pack is seq_length - sum(its aligned lengths).

The simulation is vectorised across buffers: the buffers are rows of a (groups x buffer) array,
sorted descending per row, then items are placed column by column into the first bin with room
(first fit over at most `bins` open bins per row; first fit never has two bins at most half full,
so bins <= 2*sum/seq_length + 1)."""

from __future__ import annotations

import math


def pad_multiple(config: dict) -> int:
    tp = int(config.get("model.tensor_model_parallel_size", 1) or 1)
    cp = int(config.get("model.context_parallel_size", 1) or 1)
    sp = bool(config.get("model.sequence_parallel", False))
    m = [2 * cp if cp > 1 else 1, cp * tp if sp and tp > 1 else 1]
    return math.lcm(*m)


def _align(L, multiple: int):
    if multiple & (multiple - 1) == 0:  # power of two: a mask instead of an integer division
        return (L + (multiple - 1)) & ~(multiple - 1)
    return -(-L // multiple) * multiple


def simulate(lengths, seq_length: int, buffer_size: int, multiple: int = 1) -> dict:
    """Pack `lengths` (stream order) as training would; returns totals and per-pack arrays."""
    import numpy as np

    if seq_length < 1 or buffer_size < 1 or multiple < 1:
        raise ValueError("seq_length, buffer_size and multiple must be >= 1")
    L = np.asarray(lengths, dtype=np.int64)
    if L.size and L.min() < 1:
        raise ValueError("sample lengths must be >= 1")
    A = _align(L, multiple)
    fits = A <= seq_length
    too_long = int(A.size - np.count_nonzero(fits))
    if too_long:
        A = A[fits]
    n = int(A.size)
    if n == 0:
        return {
            "samples": 0,
            "too_long": too_long,
            "packs": 0,
            "tokens": 0,
            "aligned_tokens": 0,
            "padding": 0,
            "padding_fraction": 0.0,
            "samples_per_pack": 0.0,
            "pack_fill": np.zeros(0),
            "pack_samples": np.zeros(0, np.int64),
        }
    B = buffer_size
    G = -(-n // B)
    M = np.zeros(G * B, dtype=np.int32 if seq_length < 2**31 else np.int64)
    M[:n] = A
    M = M.reshape(G, B)
    # A buffer whose samples fit in one sequence is one pack whatever the order: no sort needed.
    sums = M.sum(axis=1, dtype=np.int64)
    one = sums <= seq_length
    fill_parts = [sums[one] / seq_length]
    # every buffer is full but the last (aligned lengths are >= 1, padding zeros are only there)
    per_buffer = np.full(G, B, dtype=np.int64)
    per_buffer[-1] = n - (G - 1) * B
    count_parts = [per_buffer[one]]
    H = M[~one]
    if H.shape[0]:
        # first-fit decreasing within each overflowing buffer, vectorised across buffers
        H = np.sort(H, axis=1)[:, ::-1]  # descending per buffer; padding zeros go last
        g = H.shape[0]
        K = int(min(B, 2 * int(sums[~one].max()) // seq_length + 2))
        rem = np.full(g * K, seq_length, dtype=np.int64)
        cnt = np.zeros(g * K, dtype=np.int64)
        base = np.arange(g, dtype=np.int64) * K
        for j in range(B):
            x = np.ascontiguousarray(H[:, j])
            if not x.any():
                break
            # first bin with room (an unopened bin always has room); zeros place nothing
            idx = base + np.argmax(rem.reshape(g, K) >= x[:, None], axis=1)
            rem[idx] -= x
            cnt[idx] += x > 0
        used_h = cnt > 0
        fill_parts.append((seq_length - rem[used_h]) / seq_length)
        count_parts.append(cnt[used_h])
    fill = np.concatenate(fill_parts)
    pack_samples = np.concatenate(count_parts)
    used = pack_samples > 0
    fill, pack_samples = fill[used], pack_samples[used]
    packs = int(pack_samples.size)
    aligned = int(A.sum())
    real = int(L[fits].sum()) if too_long else int(L.sum())
    capacity = packs * seq_length
    return {
        "samples": n,
        "too_long": too_long,
        "packs": packs,
        "tokens": real,
        "aligned_tokens": aligned,
        "padding": capacity - real,
        "padding_fraction": (capacity - real) / capacity,
        "samples_per_pack": n / packs,
        "pack_fill": fill,
        "pack_samples": pack_samples,
    }


def summary(sim: dict) -> dict:
    """The JSON-able part of a simulation (per-pack arrays reduced to quantiles and a histogram)."""
    import numpy as np

    pad = 1.0 - sim["pack_fill"]
    out = {k: v for k, v in sim.items() if k not in ("pack_fill", "pack_samples")}
    if sim["packs"]:
        q = np.quantile(pad, [0.0, 0.5, 0.9, 1.0])
        out["pack_padding_fraction"] = {
            "min": float(q[0]),
            "median": float(q[1]),
            "p90": float(q[2]),
            "max": float(q[3]),
            "mean": float(pad.mean()),
        }
        hist, edges = np.histogram(pad, bins=10, range=(0.0, 1.0))
        out["pack_padding_histogram"] = {"edges": [round(float(e), 2) for e in edges], "counts": hist.tolist()}
        out["max_samples_in_a_pack"] = int(sim["pack_samples"].max())
    return out


def suggestions(
    lengths,
    seq_length: int,
    buffer_size: int,
    multiple: int = 1,
    *,
    base: float | None = None,
    max_samples: int = 200_000,
    seq_ok=None,
    seq_keys=("dataset.seq_length",),
) -> dict:
    """Settings that reduce padding: larger buffers, shorter sequences, and the samples a pack needs.
    A shorter sequence is offered only if `seq_ok(length)` (e.g. the job's sequence-length rule
    under CP/SP) and is set on every key of `seq_keys` (dataset.seq_length and model.seq_length
    when the recipe sets both), each row carrying the overrides that apply it."""
    import numpy as np

    L = np.asarray(lengths, dtype=np.int64)
    if L.size > max_samples:  # a prefix is enough to rank settings; keeps the report fast
        L = L[:max_samples]
    if base is None:
        base = simulate(L, seq_length, buffer_size, multiple)["padding_fraction"]
    A = _align(L, multiple)
    mean = float(A.mean()) if A.size else 0.0
    need = math.ceil(seq_length / mean) if mean else 0
    rows = []
    for b in sorted({buffer_size * 2**k for k in range(1, 9)} | {_pow2_at_least(need), _pow2_at_least(2 * need)}):
        if b <= buffer_size or b > 65536:
            continue
        s = simulate(L, seq_length, b, multiple)
        if s["padding_fraction"] < base - 1e-9:
            rows.append(
                {
                    "setting": "dataset.packing_buffer_size",
                    "value": b,
                    "seq_length": seq_length,
                    "buffer_size": b,
                    "padding_fraction": s["padding_fraction"],
                    "samples_per_pack": s["samples_per_pack"],
                    "overrides": [f"dataset.packing_buffer_size={b}"],
                }
            )
    longest = int(A.max()) if A.size else 0
    cand = {seq_length // 2**k for k in range(1, 8)}
    cand.add(max(multiple, -(-int(buffer_size * mean) // multiple) * multiple))
    for sl in sorted(cand, reverse=True):
        if sl >= seq_length or sl < longest or sl % multiple or (seq_ok is not None and not seq_ok(sl)):
            continue
        s = simulate(L, sl, buffer_size, multiple)
        if s["padding_fraction"] < base - 1e-9:
            rows.append(
                {
                    "setting": "dataset.seq_length",
                    "value": sl,
                    "seq_length": sl,
                    "buffer_size": buffer_size,
                    "padding_fraction": s["padding_fraction"],
                    "samples_per_pack": s["samples_per_pack"],
                    "overrides": [f"{k}={sl}" for k in seq_keys],
                }
            )
    rows.sort(key=lambda r: r["padding_fraction"])
    return {
        "mean_aligned_length": mean,
        "longest_aligned_length": longest,
        "samples_to_fill_a_pack": need,
        "note": (
            f"a {seq_length}-token pack needs ~{need} samples of mean length {mean:.0f}; a buffer of "
            f"{buffer_size} caps a pack at {buffer_size} samples"
        )
        if need > buffer_size
        else (f"a {seq_length}-token pack needs ~{need} samples; the buffer ({buffer_size}) can supply them"),
        "settings": rows,
        "simulated_samples": int(L.size),
    }


def _pow2_at_least(x: int) -> int:
    return 1 << max(0, int(x - 1).bit_length()) if x > 1 else 1


def histogram_lines(values, bins: int = 10, width: int = 40, unit: str = "") -> list[str]:
    """A terminal histogram: one line per bin, bars of '#'. Integer values get integer bins: one
    per value when they span at most `bins` values, else whole-number ranges (inclusive)."""
    import numpy as np

    v = np.asarray(values)
    if v.size == 0:
        return ["  (no samples)"]
    if np.issubdtype(v.dtype, np.integer):
        lo, hi = int(v.min()), int(v.max())
        step = max(1, -(-(hi - lo + 1) // bins))
        starts = list(range(lo, hi + 1, step))
        counts = [int(np.count_nonzero((v >= a) & (v < a + step))) for a in starts]
        top = max(max(counts), 1)
        label = (lambda a: f"{a:>10d}") if step == 1 else (lambda a: f"{a:>10d} - {a + step - 1:<10d}")
        return [
            f"  {label(a)}{unit} {'#' * max(0, round(width * c / top)):<{width}} {c}"
            for a, c in zip(starts, counts, strict=False)
        ]
    v = v.astype(np.float64)
    lo, hi = float(v.min()), float(v.max())
    if lo == hi:
        return [f"  {lo:>10.6g}{unit}  {'#' * width} {v.size}"]
    counts, edges = np.histogram(v, bins=bins, range=(lo, hi))
    top = max(int(counts.max()), 1)
    return [
        f"  {edges[i]:>10.6g} - {edges[i + 1]:<10.6g}{unit} {'#' * max(0, round(width * c / top)):<{width}} {int(c)}"
        for i, c in enumerate(counts)
    ]
