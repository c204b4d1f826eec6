"""Hardware facts: GPU generations and compute capabilities, and Megatron-Bridge's NVLink segment rule."""

from __future__ import annotations

# GPU type -> architecture generation, for precision checks.
GPU_ARCH = {
    "gb300": "blackwell",
    "b300": "blackwell",
    "gb200": "blackwell",
    "b200": "blackwell",
    "rtx-pro-6000": "blackwell",
    "vr200": "rubin",
    "h100": "hopper",
    "h200": "hopper",
    "gh200": "hopper",
    "h20": "hopper",
    "a100": "ampere",
    "a10g": "ampere",
    "l40s": "ada",
    "cpu": "cpu",
}


# GPU type -> CUDA compute capability (NVIDIA's CUDA GPUs table, developer.nvidia.com/cuda-gpus), for
# the checks Transformer Engine and Megatron-Bridge make against it. None: not known here.
GPU_CC = {
    "gb300": (10, 3),
    "b300": (10, 3),
    "gb200": (10, 0),
    "b200": (10, 0),
    "rtx-pro-6000": (12, 0),
    "vr200": None,
    "h100": (9, 0),
    "h200": (9, 0),
    "gh200": (9, 0),
    "h20": (9, 0),
    "a100": (8, 0),
    "a10g": (8, 6),
    "l40s": (8, 9),
    "cpu": None,
}


def segment_size(nodes: int, domain: int) -> int:
    """Megatron-Bridge's rule (067f987 scripts/performance/utils/executors.py:168-176): all nodes
    if they fit in one NVLink domain, else the largest divisor of the node count that does. The
    jobs use plan/topology.segment_rule, which keeps NVLink-bound groups whole; this is its
    fallback where the rank groups cannot be built."""
    if domain <= 0 or nodes <= domain:
        return nodes
    return max(d for d in range(1, domain + 1) if nodes % d == 0)
