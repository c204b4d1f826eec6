"""Checks that run before anything is submitted: topology, batch, sequence, precision.

Each rule returns error strings (one line each: what is wrong, the values involved, what
would be valid). A value given as an interpolation or missing falls back to Megatron's
default (1 for every parallel size) or, where there is none, skips the rule.
"""

from __future__ import annotations

from .clusters import ARCH_RANK

TP = "model.tensor_model_parallel_size"
PP = "model.pipeline_model_parallel_size"
CP = "model.context_parallel_size"
EP = "model.expert_model_parallel_size"
ETP = "model.expert_tensor_parallel_size"
SP = "model.sequence_parallel"
GBS = "train.global_batch_size"
MBS = "train.micro_batch_size"
SEQ_KEYS = ("dataset.seq_length", "model.seq_length")
EXPERTS = "model.num_moe_experts"
PRECISION = "mixed_precision"
FP8_RECIPE = "mixed_precision.fp8_recipe"
# Native sequence packing of the VLM/Energon path: setting a packing buffer turns it on
# (EnergonDatasetConfig.packing_buffer_size; upstream requires micro batch 1).
PACKING_BUFFER = "dataset.packing_buffer_size"


def _int(cfg: dict, key: str, default=None):
    v = cfg.get(key, default)
    if v is None:
        return default
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _sizes(cfg):
    tp, pp, cp = _int(cfg, TP, 1), _int(cfg, PP, 1), _int(cfg, CP, 1)
    ep = _int(cfg, EP, 1)
    etp = _int(cfg, ETP, None)
    if cfg.get(ETP) is None:
        etp = tp  # Megatron: expert TP defaults to TP
    return tp, pp, cp, ep, etp


def rule_world(job) -> list:
    tp, pp, cp, _, _ = _sizes(job.config)
    if None in (tp, pp, cp):
        return []
    for name, v in (("TP", tp), ("PP", pp), ("CP", cp)):
        if v < 1:
            return [f"{name} must be >= 1, got {v}"]
    mp = tp * pp * cp
    if job.world_size % mp:
        return [f"world size {job.world_size} ({job.nodes} node{'s' if job.nodes != 1 else ''} x {job.gpus_per_node}) is not divisible by "
                f"TP*PP*CP = {tp}*{pp}*{cp} = {mp}; use a GPU count that is a multiple of {mp} or change the parallel sizes"]
    return []


def rule_experts(job) -> list:
    tp, pp, cp, ep, etp = _sizes(job.config)
    if None in (pp, ep, etp) or (ep == 1 and etp == tp):
        return []
    if ep < 1 or etp < 1:
        return [f"EP and ETP must be >= 1, got EP={ep} ETP={etp}"]
    block = etp * ep * pp
    errs = []
    if job.world_size % block:
        errs.append(f"world size {job.world_size} is not divisible by ETP*EP*PP = {etp}*{ep}*{pp} = {block}; "
                    f"expert parallelism needs the GPU count to be a multiple of {block}")
    experts = _int(job.config, EXPERTS)
    if experts and experts % ep:
        errs.append(f"{EXPERTS}={experts} is not divisible by EP={ep}; valid EP values divide {experts}")
    return errs


def rule_batch(job) -> list:
    tp, pp, cp, _, _ = _sizes(job.config)
    gbs, mbs = _int(job.config, GBS), _int(job.config, MBS)
    if None in (tp, pp, cp, gbs, mbs) or job.world_size % (tp * pp * cp):
        return []
    if gbs < 1 or mbs < 1:
        return [f"{GBS} and {MBS} must be >= 1, got {gbs} and {mbs}"]
    dp = job.world_size // (tp * pp * cp)
    if gbs % (mbs * dp):
        return [f"{GBS}={gbs} is not divisible by {MBS}*DP = {mbs}*{dp} = {mbs * dp} (DP = world {job.world_size} / "
                f"TP*PP*CP {tp * pp * cp}); use a multiple of {mbs * dp}"]
    return []


def rule_sequence(job) -> list:
    tp, _, cp, _, _ = _sizes(job.config)
    sp = job.config.get(SP) is True
    errs = []
    if sp and tp is not None and tp <= 1:
        errs.append(f"{SP}=true needs TP > 1 (got TP={tp}); set {SP}=false or raise {TP}")
    if tp is None or cp is None:
        return errs
    div = (2 * cp if cp > 1 else 1) * (tp if sp else 1)
    if div == 1:
        return errs
    why = " and ".join(x for x in ((f"2*CP={2 * cp}" if cp > 1 else ""), (f"TP={tp} (sequence parallel)" if sp else "")) if x)
    for key in SEQ_KEYS:
        seq = _int(job.config, key)
        if seq is not None and seq % div:
            errs.append(f"{key}={seq} is not divisible by {div} ({why}); use a multiple of {div}")
    return errs


def precision_of(cfg: dict) -> str:
    """'nvfp4' | 'mxfp8' | 'fp8' | 'bf16' | ... from the mixed_precision recipe name or fields."""
    name = str(cfg.get(PRECISION) or "").lower()
    recipe = str(cfg.get(FP8_RECIPE) or "").lower()
    if "nvfp4" in name or "fp4" in name or cfg.get("mixed_precision.fp4"):
        return "nvfp4"
    if "mxfp8" in name or "fp8_mx" in name or recipe == "mxfp8":
        return "mxfp8"
    if "fp8" in name or recipe or cfg.get("mixed_precision.fp8"):
        return "fp8"
    return name or "default"


def rule_precision(job) -> list:
    prec = precision_of(job.config)
    arch = job.profile["arch"]
    need = {"nvfp4": "blackwell", "mxfp8": "blackwell", "fp8": "hopper"}.get(prec)
    if need and ARCH_RANK.get(arch, 0) < ARCH_RANK[need]:
        return [f"{prec.upper()} needs a {need.capitalize()} GPU or newer, but cluster '{job.cluster}' has "
                f"gpu_type {job.gpu_type} ({arch}); use a GB200/B200 cluster or a bf16 recipe"]
    return []


def rule_packing(job) -> list:
    mbs = _int(job.config, MBS)
    if job.config.get(PACKING_BUFFER) not in (None, 0) and mbs is not None and mbs != 1:
        return [f"{PACKING_BUFFER}={job.config[PACKING_BUFFER]} turns on native packing, which needs {MBS}=1 "
                f"(got {mbs}); set {MBS}=1 or ~{PACKING_BUFFER}"]
    return []


RULES = (rule_world, rule_experts, rule_batch, rule_sequence, rule_precision, rule_packing)
WORLD_RULES = (rule_world, rule_experts, rule_batch)  # they follow from the GPU count


def check(job, gpu_count_ok: bool = True) -> list:
    """Every rule's errors. When the GPU count itself is wrong (already one error), the rules
    that only restate it (world size vs the parallel sizes) are left out."""
    errors: list = []
    for rule in RULES:
        if gpu_count_ok or rule not in WORLD_RULES:
            errors.extend(rule(job))
    return errors
