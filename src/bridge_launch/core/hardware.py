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


# How a job is cut into NVLink-domain segments (Slurm's --segment, Lepton's count_per_segment;
# plan/topology.segment_rule): "domain", Megatron-Bridge's rule (a job that fits one domain stays in
# it, its data-parallel collectives on multi-node NVLink; a larger one in the largest segments that
# fit); "smallest", the smallest segment that keeps the NVLink-bound rank groups whole (a job that
# starts sooner on racks with few free nodes each, its other collectives across racks).
SEGMENT_SIZES = ("domain", "smallest")


def segment_size(nodes: int, domain: int) -> int:
    """Megatron-Bridge's rule (067f987 scripts/performance/utils/executors.py:168-176): all nodes
    if they fit in one NVLink domain, else the largest divisor of the node count that does. The
    jobs use plan/topology.segment_rule, which keeps NVLink-bound groups whole; this is its
    fallback where the rank groups cannot be built."""
    if domain <= 0 or nodes <= domain:
        return nodes
    return max(d for d in range(1, domain + 1) if nodes % d == 0)


# Peak dense tensor TFLOP/s per GPU, for MFU. NVIDIA's datasheets state sparse figures for
# Blackwell; dense is half. GB200 NVL72 datasheet: FP8/FP6 720 PFLOPS and BF16 360 PFLOPS for 72
# GPUs, with sparsity -> 5,000 and 2,500 dense per GPU; H100 SXM datasheet: BF16 989.4, FP8 1,978.9
# dense. MXFP8 runs on the FP8 tensor cores. A GPU or precision not here has no MFU.
PEAK_DENSE_TFLOPS = {
    ("gb200", "bf16"): 2500.0,
    ("gb200", "fp8"): 5000.0,
    ("h100", "bf16"): 989.4,
    ("h100", "fp8"): 1978.9,
}


def peak_tflops(gpu: str | None, precision: str | None) -> float | None:
    if not gpu or not precision:
        return None
    prec = "fp8" if "fp8" in precision.lower() else "bf16" if precision.lower() in ("bf16", "bf16_mixed") else None
    return PEAK_DENSE_TFLOPS.get((gpu.lower(), prec)) if prec else None
