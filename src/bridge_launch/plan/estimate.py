"""`bridge-launch plan`: rank topology, NVLink domains, memory per GPU and GPU-hours of a
resolved job, before it waits hours in a queue.

Three estimates from one ResolvedJob:

1. Rank layout. Which global ranks form each TP, CP, EP, PP and DP group, computed by
   megatron-core's own RankGenerator (the one initialize_model_parallel uses, order
   "tp-cp-ep-dp-pp"), and which nodes and NVLink domains each group spans (topology.py). Ranks
   are laid out as torchrun numbers them: node n holds ranks n*G .. n*G+G-1 (G GPUs per node).
   A node's NVLink domain is its Slurm segment (`--segment`, the value the Slurm backend
   requests), which Slurm places inside one domain. megatron-core costs seconds to import, so
   only this module imports it, and only inside `plan()`; submit places the same groups with
   topology.py's arithmetic, and both report the same findings (findings.py).

2. Memory per GPU on the most loaded pipeline stage: BF16 parameters, gradients (FP32 when
   gradients are reduced in FP32), and the optimizer's FP32 master weights and Adam moments,
   sharded by the distributed optimizer over the data-parallel (x context-parallel) group for
   dense parameters and over the expert-data-parallel group for experts (Megatron-LM
   docs/user-guide/features/dist_optimizer.md: 18 bytes/parameter, or 6 + 12/d with the
   distributed optimizer). Activations follow the accounting of Korthikanti et al. 2022,
   "Reducing Activation Recomputation in Large Transformer Models" (arXiv 2205.05198,
   Table 2: sbh(34 + 5as/h) per layer), tensor by tensor, so that GQA, gated MLPs, MoE,
   Gated DeltaNet and Mamba blocks, flash attention, sequence parallelism and Megatron's
   recompute modules each change the terms they touch. The architecture comes from the model
   description (models.py: models.toml, every number with its source, and the job's own
   model.* keys on top), the same one rules.py checks Megatron's rules against.

3. Throughput: tokens per step, steps and GPU-hours for the job's token budget (steps x
   global batch x sequence length, typically an overlay's), from the model's FLOPs per token
   (counted as Megatron-Bridge's training/utils/flop_utils.py counts them, so its published
   "model TFLOP/s" figures apply) and an achieved TFLOP/s per GPU measured at the job's
   precision on its GPU type (models.toml [[throughput]], with its source); with no such
   measurement plan says so and gives no GPU-hours rather than borrow another precision's.

Everything is an estimate: ASSUMPTIONS lists what it leaves out.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

from bridge_launch.core.errors import UsageError
from bridge_launch.plan import rules as validate
from bridge_launch.plan.topology import ORDER, Parallel, parallel_of
from bridge_launch.spec import models
from bridge_launch.spec.config_keys import int_value as _int

WARN_FRACTION = 0.90  # memory per GPU above this fraction is a warning (findings)
GIB = 1024**3
MAX_LAYERS = 100_000  # larger models are not estimated (the layer list is built layer by layer)

PLAN_EXTRA = "bridge-launch plan needs the 'plan' extra: pip install 'bridge-launch[plan]'"

ASSUMPTIONS = (
    "parameters are BF16; FP8/MXFP8 weight copies kept by Transformer Engine are not counted",
    "Adam: FP32 master weights and two FP32 moments (12 bytes/parameter, plus 4 for FP32 main "
    "gradients when gradients are BF16), sharded by the distributed optimizer when it is on",
    "activations are BF16 and counted for one microbatch per in-flight pipeline slot; MoE routing "
    "is balanced and dropless; memory-allocator fragmentation, NCCL buffers, CUDA graphs and "
    "kernel workspaces are not counted (the 90% warning leaves room for them)",
    "the output layer stores 4*s*b*(h + V) bytes for the logits and loss (Megatron-LM "
    "theoretical_memory_usage.py), once per MTP head as well",
    "FLOPs per token use the full sequence length in attention; packed sequences do less work",
)


# ------------------------------------------------------------------------------------------
# rank groups (megatron-core) and where they land (topology.py, shared with submit)


def _rank_generator():
    """megatron-core's RankGenerator class and version, imported here and nowhere else."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Transformer Engine and Apex are not installed" and the like
            from megatron.core import package_info
            from megatron.core.parallel_state import RankGenerator
    except ImportError:
        raise UsageError(PLAN_EXTRA) from None
    return RankGenerator, package_info.__version__


def rank_groups(par: Parallel) -> tuple[dict, str]:
    """{kind: [[global ranks]...]} for tp, cp, pp, dp, dp_cp (the distributed optimizer's dense
    group), ep, etp, edp, exactly as initialize_model_parallel builds them, and the source."""
    RankGenerator, version = _rank_generator()
    dense = RankGenerator(tp=par.tp, ep=1, dp=par.dp, pp=par.pp, cp=par.cp, order=ORDER)
    expert = RankGenerator(tp=par.etp, ep=par.ep, dp=par.edp, pp=par.pp, cp=1, order=ORDER)
    groups = {
        "tp": dense.get_ranks("tp"),
        "cp": dense.get_ranks("cp"),
        "pp": dense.get_ranks("pp"),
        "dp": dense.get_ranks("dp"),
        "dp_cp": dense.get_ranks("dp-cp"),
        "ep": expert.get_ranks("ep"),
        "etp": expert.get_ranks("tp"),
        "edp": expert.get_ranks("dp"),
    }
    return groups, f"megatron-core {version} RankGenerator (order {ORDER})"


# ------------------------------------------------------------------------------------------
# architecture (from the model description, models.py)


@dataclass(frozen=True)
class Arch:
    """One model's shapes. `layers` has one token per decoder layer ("G+E", "*+-", "M", ...)."""

    name: str
    source: str
    hidden: int
    vocab: int
    tied: bool
    layers: tuple
    mtp_layers: int = 0
    ffn: int | None = None
    gated_mlp: bool = True
    dropout: bool = False
    flash_attention: bool = True
    attention: dict = field(default_factory=dict)
    gdn: dict = field(default_factory=dict)
    mamba: dict = field(default_factory=dict)
    moe: dict = field(default_factory=dict)
    vision: dict = field(default_factory=dict)


class ArchError(ValueError):
    """The model description cannot be turned into an architecture (a value unknown or out of range)."""


def arch_for(job) -> Arch | None:
    """The job's architecture from the model description (models.py: models.toml, the job's own
    model.* values on top); a plain GPT from model.* keys alone; None when nothing is known.
    Raises ArchError when a needed value is unknown (an interpolation, null) or out of range."""
    f = models.facts_for(job)
    if f is None:
        return None
    cfg = job.config
    if f.name == "job config":  # a plain GPT from its model.* keys
        if not all(f.int(k) is not None for k in ("num_layers", "hidden_size", "attention.num_heads", "vocab_size")):
            return None
        base = {
            "layers": "*+-",
            "tied": f.get("tied_embeddings", True),
            "gated_mlp": cfg.get("model.gated_linear_unit") is True,
            "dropout": cfg.get("model.hidden_dropout", 0.1) != 0,
            "flash_attention": True,
        }
    else:
        base = {
            "layers": f.get("layers"),
            "tied": f.get("tied_embeddings", False),
            "gated_mlp": f.get("gated_mlp", True),
            "dropout": f.get("dropout", False),
            "flash_attention": f.get("flash_attention", True),
        }
    for name in ("num_layers", "hidden_size", "vocab_size"):
        v = f.int(name)
        if v is None or v < 1:
            raise ArchError(f"no estimate: {models.KEY_OF.get(name, name)} is {f.get(name)!r} ({f.source(name)})")
    n = f.get("num_layers")
    if n > MAX_LAYERS:
        raise ArchError(f"no estimate: {n:,} layers is beyond what plan estimates (at most {MAX_LAYERS:,})")
    mtp = f.int("mtp_layers") or 0
    if not 0 <= mtp <= MAX_LAYERS:
        raise ArchError(
            f"no estimate: model.mtp_num_layers={mtp} ({f.source('mtp_layers')}) is not between 0 and {MAX_LAYERS:,}"
        )
    groups = {g: f.group(g) for g in ("attention", "gdn", "mamba", "moe", "vision")}
    for g, vals in groups.items():
        for k, v in vals.items():
            if isinstance(v, int) and not isinstance(v, bool) and v < 0:
                raise ArchError(f"no estimate: {models.KEY_OF.get(f'{g}.{k}', f'{g}.{k}')} is {v}")
    unit = str(base["layers"]).split()
    used = {b for layer in unit for b in layer.split("+")}
    for block, (group, need) in _BLOCK_NEEDS.items():
        if block not in used:
            if group in groups:
                groups[group] = {}  # a module the layer pattern does not use
            continue
        vals = groups.get(group, {"ffn": f.get("ffn")} if group == "ffn" else {})
        missing = [k for k in need if not (isinstance(vals.get(k), int) and not isinstance(vals.get(k), bool))]
        if missing or any(vals[k] < 1 for k in need[:1]):
            k = (missing or need[:1])[0]
            key = models.KEY_OF.get(f"{group}.{k}" if group != "ffn" else "ffn", f"{group}.{k}")
            raise ArchError(
                f"no estimate: the model's {_BLOCK_NAMES[block]} layers need {key} >= 1 (it is {vals.get(k)!r})"
            )
    vision = groups["vision"]
    if vision and any(not isinstance(vision.get(k), int) for k in _VISION_NEEDS):
        vision = {}
    att, moe = groups["attention"], groups["moe"]
    return Arch(
        name=f.name,
        source=f.where,
        hidden=f.get("hidden_size"),
        vocab=f.get("vocab_size"),
        tied=bool(base["tied"]),
        layers=tuple(unit[i % len(unit)] for i in range(n)),
        mtp_layers=mtp,
        ffn=f.int("ffn"),
        gated_mlp=bool(base["gated_mlp"]),
        dropout=bool(base["dropout"]),
        flash_attention=bool(base["flash_attention"]),
        attention=att,
        gdn=groups["gdn"],
        mamba=groups["mamba"],
        moe=moe,
        vision=vision,
    )


# layer block -> (fact group, the facts its formulas need; the first must be >= 1)
_BLOCK_NEEDS = {
    "*": ("attention", ("num_heads",)),
    "G": ("gdn", ("key_heads", "value_heads", "key_head_dim", "value_head_dim", "conv_kernel")),
    "M": ("mamba", ("num_heads", "head_dim", "state_dim", "num_groups", "conv_kernel")),
    "E": ("moe", ("num_experts", "topk", "expert_ffn")),
    "-": ("ffn", ("ffn",)),
}
_BLOCK_NAMES = {"*": "attention", "G": "Gated DeltaNet", "M": "Mamba", "E": "MoE", "-": "MLP"}
_VISION_NEEDS = (
    "depth",
    "hidden_size",
    "ffn",
    "patch_size",
    "temporal_patch_size",
    "spatial_merge_size",
    "num_position_embeddings",
    "out_hidden_size",
)


def padded_vocab(vocab: int, tp: int, divisible_by: int = 128) -> int:
    """Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by * TP."""
    m = divisible_by * tp
    return -(-vocab // m) * m


# ------------------------------------------------------------------------------------------
# parameters


def _attn_dims(arch: Arch) -> tuple[int, int, int, int]:
    a = arch.attention
    hd = a.get("head_dim") or arch.hidden // a["num_heads"]
    return a["num_heads"], a.get("num_query_groups") or a["num_heads"], hd, a["num_heads"] * hd


def block_params(arch: Arch, block: str) -> tuple[int, int]:
    """(dense, routed-expert) parameters of one block, its pre-norm included."""
    h, glu = arch.hidden, 2 if arch.gated_mlp else 1
    if block == "*":
        _, g, hd, q = _attn_dims(arch)
        gate = q if arch.attention.get("output_gate") else 0
        qk_norm = 2 * hd if arch.attention.get("qk_norm") else 0
        return h + h * (q + gate) + 2 * h * g * hd + q * h + qk_norm, 0
    if block == "G":
        d = arch.gdn
        qk, v, nv = d["key_heads"] * d["key_head_dim"], d["value_heads"] * d["value_head_dim"], d["value_heads"]
        return h + h * (2 * qk + 2 * v + 2 * nv) + (2 * qk + v) * d["conv_kernel"] + 2 * nv + d[
            "value_head_dim"
        ] + v * h, 0
    if block == "M":
        m = arch.mamba
        din, gs, nh = m["num_heads"] * m["head_dim"], m["num_groups"] * m["state_dim"], m["num_heads"]
        return h + h * (2 * din + 2 * gs + nh) + (din + 2 * gs) * (m["conv_kernel"] + 1) + 3 * nh + din + din * h, 0
    if block == "-":
        return h + h * arch.ffn * glu + arch.ffn * h, 0
    if block == "E":
        e = arch.moe
        fs = e.get("shared_expert_ffn") or 0
        shared = h * fs * glu + fs * h + (h if e.get("shared_expert_gate") and fs else 0)
        return h + h * e["num_experts"] + shared, e["num_experts"] * (h * e["expert_ffn"] * glu + e["expert_ffn"] * h)
    raise ValueError(f"unknown block {block!r}")


def layer_params(arch: Arch, layer: str) -> tuple[int, int]:
    dense = expert = 0
    for block in layer.split("+"):
        d, e = block_params(arch, block)
        dense, expert = dense + d, expert + e
    return dense, expert


def vision_params(arch: Arch) -> int:
    """Qwen3-VL-style vision tower: Conv3d patch embedding, learned position embedding, pre-LN
    ViT blocks with biases and a GELU MLP, and a 2x2 patch merger into the language model."""
    v = arch.vision
    if not v:
        return 0
    hv, f, m2 = v["hidden_size"], v["ffn"], v["spatial_merge_size"] ** 2
    patch = 3 * v["temporal_patch_size"] * v["patch_size"] ** 2 * hv + hv
    block = 4 * hv + 3 * hv * hv + 3 * hv + hv * hv + hv + hv * f + f + f * hv + hv
    merger = 2 * hv + (m2 * hv) ** 2 + m2 * hv + m2 * hv * v["out_hidden_size"] + v["out_hidden_size"]
    return patch + v["num_position_embeddings"] * hv + v["depth"] * block + merger


def mtp_params(arch: Arch) -> tuple[int, int]:
    """MTP heads: a copy of the last layer plus the embedding/hidden projection and three norms."""
    d, e = layer_params(arch, arch.layers[-1])
    return arch.mtp_layers * (d + 2 * arch.hidden * arch.hidden + 3 * arch.hidden), arch.mtp_layers * e


def total_params(arch: Arch, vocab: int | None = None) -> dict:
    """Whole-model parameter counts (unpadded vocabulary unless given)."""
    vocab = vocab or arch.vocab
    dense = sum(layer_params(arch, t)[0] for t in arch.layers)
    expert = sum(layer_params(arch, t)[1] for t in arch.layers)
    md, me = mtp_params(arch)
    emb = vocab * arch.hidden * (1 if arch.tied else 2) + arch.hidden
    vis = vision_params(arch)
    return {
        "total": dense + expert + md + me + emb + vis,
        "decoder_dense": dense,
        "decoder_experts": expert,
        "mtp": md + me,
        "embeddings": emb,
        "vision": vis,
        "experts": expert + me,
    }


# ------------------------------------------------------------------------------------------
# activations


@dataclass(frozen=True)
class Term:
    """One saved tensor: bytes per token of the local sequence shard (s*b/CP tokens).
    shard "tp": split across TP ranks; "sp": split only with sequence parallelism.
    removed_by: recompute modules that discard it (Megatron TransformerConfig.recompute_modules)."""

    name: str
    bytes: float
    shard: str
    removed_by: frozenset = frozenset()


def block_terms(arch: Arch, block: str, seq: int, etp: int = 1) -> list[Term]:
    """The tensors one block saves for its backward pass, after Korthikanti et al. 2022 sec. 4.1:
    attention saves the QKV input (2sbh), Q and K (4sbh), V (2sbh), the softmax output and
    dropout (5as^2b, gone with flash attention), the projection input (2sbh) and a dropout mask
    (sbh); the MLP its input (2sbh), the two 4h-wide activations (16sbh) and a dropout mask; each
    pre-norm its input (2sbh): 34sbh + 5as^2b per GPT layer."""
    h, glu = arch.hidden, 2 if arch.gated_mlp else 1
    terms = [Term("norm_in", 2 * h, "sp")]
    drop = [Term("dropout_mask", h, "sp")] if arch.dropout else []
    if block == "*":
        a, g, hd, q = _attn_dims(arch)
        terms += [
            Term("qkv_in", 2 * h, "sp", frozenset({"layernorm"})),
            Term("q_k", 2 * (q + g * hd), "tp"),
            Term("v", 2 * g * hd, "tp"),
        ]
        if not arch.flash_attention:  # softmax output (+ dropout mask and output): a*s per token each
            terms.append(Term("scores", (5 if arch.dropout else 2) * a * seq, "tp", frozenset({"core_attn"})))
        if arch.attention.get("output_gate"):
            terms.append(Term("gate", 2 * q, "tp"))
        terms += [Term("proj_in", 2 * q, "tp")] + drop
    elif block == "-":
        terms += [
            Term("fc1_in", 2 * h, "sp", frozenset({"layernorm"})),
            Term("fc1_out", 2 * arch.ffn * glu, "tp", frozenset({"mlp"})),
            Term("act_out", 2 * arch.ffn, "tp", frozenset({"mlp"})),
        ] + drop
    elif block == "E":
        e = arch.moe
        k, f, fs = e["topk"], e["expert_ffn"], e.get("shared_expert_ffn") or 0
        moe = frozenset({"moe"})
        terms += [
            Term("router_in", 2 * h, "sp", frozenset({"layernorm"})),
            Term("router", 8 * e["num_experts"], "sp", moe),  # FP32 logits and probabilities
            Term("expert_in", 2 * h * k * etp, "sp", moe),  # k permuted copies, gathered over expert TP
            Term("expert_fc1_out", 2 * f * glu * k, "sp", moe),
            Term("expert_act_out", 2 * f * k, "sp", frozenset({"moe", "moe_act"})),
            Term("expert_out", 2 * h * k, "sp", moe),
        ]  # weighted by the router probabilities on combine
        if fs:
            shared = frozenset({"moe", "shared_experts"})
            terms += [Term("shared_fc1_out", 2 * fs * glu, "tp", shared), Term("shared_act_out", 2 * fs, "tp", shared)]
        terms += drop
    elif block == "G":
        d = arch.gdn
        qk, v, nv = d["key_heads"] * d["key_head_dim"], d["value_heads"] * d["value_head_dim"], d["value_heads"]
        terms += [
            Term("in_proj_in", 2 * h, "sp", frozenset({"layernorm"})),
            Term("in_proj_out", 2 * (2 * qk + 2 * v + 2 * nv), "tp"),  # q, k, v, z, beta, alpha
            Term("conv_out", 2 * (2 * qk + v), "tp"),
            Term("core_out", 2 * v, "tp"),
            Term("norm_out", 2 * v, "tp", frozenset({"gdn_norm_out"})),
        ] + drop
    elif block == "M":
        m = arch.mamba
        din, gs, nh = m["num_heads"] * m["head_dim"], m["num_groups"] * m["state_dim"], m["num_heads"]
        terms += [
            Term("in_proj_in", 2 * h, "sp", frozenset({"layernorm"})),
            Term("in_proj_out", 2 * (2 * din + 2 * gs + nh), "tp"),
            Term("conv_out", 2 * (din + 2 * gs), "tp"),
            Term("ssm_out", 2 * din, "tp"),
            Term("norm_out", 2 * din, "tp"),
        ] + drop
    else:
        raise ValueError(f"unknown block {block!r}")
    return terms


def layer_activation_bytes(
    arch: Arch, layer: str, *, seq: int, tp: int = 1, sp: bool = False, recompute: frozenset = frozenset(), etp: int = 1
) -> float:
    """Bytes one layer saves per token of the local sequence shard on one GPU."""
    total = 0.0
    for block in layer.split("+"):
        for t in block_terms(arch, block, seq, etp):
            if t.removed_by & recompute:
                continue
            total += t.bytes / (tp if t.shard == "tp" or sp else 1)
    return total


@dataclass(frozen=True)
class Recompute:
    granularity: str | None  # None | "selective" | "full"
    modules: frozenset = frozenset()
    method: str | None = None  # full: "uniform" | "block"
    num_layers: int = 1

    def describe(self) -> str:
        if self.granularity == "selective":
            return "selective: " + ", ".join(sorted(map(str, self.modules)))
        if self.granularity == "full":
            return f"full ({self.method}, {self.num_layers} layer{'s' if self.num_layers != 1 else ''})"
        return "none"


def recompute_of(cfg: dict) -> Recompute:
    gran = cfg.get("model.recompute_granularity")
    if gran == "selective":
        mods = cfg.get("model.recompute_modules")
        return Recompute("selective", frozenset(mods if isinstance(mods, list) else ["core_attn"]))
    if gran == "full":
        n = cfg.get("model.recompute_num_layers")
        return Recompute(
            "full",
            method=cfg.get("model.recompute_method") or "uniform",
            num_layers=n if isinstance(n, int) and n > 0 else 1,
        )
    return Recompute(None)


def stage_layers(arch: Arch, pp: int) -> list[list[str]]:
    """Decoder layers per pipeline stage (even split, the first stages taking any remainder);
    MTP layers go on the last stage."""
    n, out, start = len(arch.layers), [], 0
    for i in range(pp):
        size = n // pp + (1 if i < n % pp else 0)
        out.append(list(arch.layers[start : start + size]))
        start += size
    out[-1] += [arch.layers[-1]] * arch.mtp_layers
    return out


def stage_activation_bytes(
    arch: Arch, layers: list, rc: Recompute, *, seq: int, tp: int, sp: bool, etp: int
) -> tuple[float, float]:
    """(bytes kept per token for one microbatch, transient bytes per token while one recomputed
    group runs its backward) for a stage's layers."""

    def full(layer):
        return layer_activation_bytes(arch, layer, seq=seq, tp=tp, sp=sp, etp=etp)

    if rc.granularity == "full":
        layer_in = 2 * arch.hidden / (tp if sp else 1)  # a checkpointed group keeps only its input
        n = rc.num_layers
        if rc.method == "block":
            kept = layers[n:]
            return len(layers[:n]) * layer_in + sum(full(t) for t in kept), max(
                (full(t) for t in layers[:n]), default=0
            )
        groups = [layers[i : i + n] for i in range(0, len(layers), n)]
        return len(groups) * layer_in, max((sum(full(t) for t in g) for g in groups), default=0)
    kept = sum(layer_activation_bytes(arch, t, seq=seq, tp=tp, sp=sp, recompute=rc.modules, etp=etp) for t in layers)
    return kept, 0.0


# ------------------------------------------------------------------------------------------
# memory


def _flag(cfg: dict, keys, default):
    for key in keys:
        if isinstance(cfg.get(key), bool):
            return cfg[key]
    return default


def bytes_per_param(*, distributed: bool, shard: int, fp32_grads: bool) -> dict:
    """Megatron-LM dist_optimizer.md: BF16 parameters with FP32 gradients cost 18 bytes, or
    6 + 12/d with the distributed optimizer; BF16 gradients cost 20, or 4 + 16/d."""
    grad = 4 if fp32_grads else 2
    opt = 12 + (0 if fp32_grads else 4)  # FP32 master weights, Adam m and v (+ FP32 main grads)
    d = shard if distributed else 1
    return {"param": 2, "grad": grad, "optimizer": opt / d, "total": 2 + grad + opt / d}


def memory(job, arch: Arch, par: Parallel) -> dict:
    cfg = job.config
    seq = _int(cfg, "dataset.seq_length") or _int(cfg, "model.seq_length")
    mbs = _int(cfg, validate.MBS) or 1
    gbs = _int(cfg, validate.GBS)
    distributed = _flag(cfg, ("ddp.use_distributed_optimizer", "optimizer.use_distributed_optimizer"), False)
    fp32_grads = _flag(cfg, ("ddp.grad_reduce_in_fp32", "mixed_precision.grad_reduce_in_fp32"), True)
    dense_b = bytes_per_param(distributed=distributed, shard=par.dp * par.cp, fp32_grads=fp32_grads)
    expert_b = bytes_per_param(distributed=distributed, shard=par.edp, fp32_grads=fp32_grads)
    vocab = padded_vocab(arch.vocab, par.tp, _int(cfg, "model.make_vocab_size_divisible_by") or 128)
    rc = recompute_of(cfg)
    nmb = gbs // (mbs * par.dp) if gbs and gbs % (mbs * par.dp) == 0 else None
    tokens = seq * mbs / par.cp if seq else None
    stages = stage_layers(arch, par.pp)
    extra = models.table().get("recipes", {}).get(job.recipe, {})

    best = None
    for i, layers in enumerate(stages):
        last = i == par.pp - 1
        dense = sum(layer_params(arch, t)[0] for t in layers) / par.tp
        expert = sum(layer_params(arch, t)[1] for t in layers) / (par.ep * par.etp)
        if last and arch.mtp_layers:
            dense += arch.mtp_layers * (2 * arch.hidden * arch.hidden + 3 * arch.hidden) / par.tp
        if i == 0:
            dense += vocab * arch.hidden / par.tp + vision_params(arch) / par.tp
        if last:
            dense += arch.hidden / par.tp
            if not arch.tied or par.pp > 1:
                dense += vocab * arch.hidden / par.tp
        states = {k: dense * dense_b[k] + expert * expert_b[k] for k in ("param", "grad", "optimizer")}

        act = {}
        if tokens:
            in_flight = min(par.pp - i, nmb) if nmb else par.pp - i
            if par.vpp and i == 0:
                in_flight = math.ceil(par.pp * (1 + (par.pp - 1) / (par.pp * par.vpp)))
            kept, transient = stage_activation_bytes(arch, layers, rc, seq=seq, tp=par.tp, sp=par.sp, etp=par.etp)
            act["layers"] = kept * tokens * in_flight
            act["recompute_transient"] = transient * tokens
            if i == 0:
                act["embedding"] = (8 + (arch.hidden if arch.dropout else 0)) * tokens * in_flight / par.tp
                act["vision"] = _vision_activation(arch, cfg, extra, par)
            if last:  # logits and loss: 4*s*b*(h + V), divided over TP (Megatron-LM)
                act["output"] = 4 * tokens * (arch.hidden + vocab) * (1 + arch.mtp_layers) / par.tp
        total = sum(states.values()) + sum(act.values())
        if best is None or total > best["total"]:
            best = {
                "stage": i,
                "total": total,
                "states": states,
                "act": act,
                "dense": dense,
                "expert": expert,
                "in_flight": in_flight if tokens else None,
            }

    capacity = float(job.profile.get("gpu_memory_gib") or 0) or None
    total_gib = best["total"] / GIB
    counts = total_params(arch)
    return {
        "model": arch.name,
        "model_source": arch.source,
        "stage": best["stage"],
        "params_gib": _r(best["states"]["param"] / GIB),
        "grads_gib": _r(best["states"]["grad"] / GIB),
        "optimizer_gib": _r(best["states"]["optimizer"] / GIB),
        "activations_gib": _r(sum(best["act"].values()) / GIB) if tokens else None,
        "activations": {k: _r(v / GIB) for k, v in best["act"].items()},
        "total_gib": _r(total_gib),
        "capacity_gib": capacity,
        "fraction": round(total_gib / capacity, 3) if capacity else None,
        "parameters": {
            "total": counts["total"],
            "experts": counts["experts"],
            "per_gpu": round(best["dense"] + best["expert"]),
            "dense_per_gpu": round(best["dense"]),
            "expert_per_gpu": round(best["expert"]),
        },
        "bytes_per_param": {
            "dense": round(dense_b["total"], 3),
            "expert": round(expert_b["total"], 3),
            "distributed_optimizer": distributed,
            "fp32_grads": fp32_grads,
            "dense_shard": par.dp * par.cp if distributed else 1,
            "expert_shard": par.edp if distributed else 1,
        },
        "tokens_per_microbatch": tokens,
        "microbatches_in_flight": best["in_flight"],
        "recompute": rc.describe(),
        "assumptions": list(ASSUMPTIONS),
    }


def _vision_activation(arch: Arch, cfg: dict, extra: dict, par: Parallel) -> float:
    """An upper bound for the vision tower: every packed sample at its visual-token cap
    (dataset.task_encoder.max_visual_tokens x packing buffer x micro batch). With full
    recompute (the recipe's own setting, see models.toml [recipes]) each ViT layer keeps
    its input and one layer runs at a time; otherwise every layer keeps its activations."""
    v = arch.vision
    cap = _int(cfg, "dataset.task_encoder.max_visual_tokens")
    if not v or not cap:
        return 0.0
    patches = (
        cap * (_int(cfg, validate.PACKING_BUFFER) or 1) * (_int(cfg, validate.MBS) or 1) * v["spatial_merge_size"] ** 2
    )
    hv, f = v["hidden_size"], v["ffn"]
    # pre-LN ViT block with flash attention: norm inputs, QKV input, Q/K/V, projection input,
    # MLP input and its two 4304-wide activations, in BF16 (split over TP, as the tower is)
    layer = (2 + 2 + 6 + 2 + 2 + 2) * hv + 2 * f + 2 * f
    if extra.get("vision_recompute") == "full":
        return (v["depth"] * 2 * hv + layer) * patches / par.tp
    return v["depth"] * layer * patches / par.tp


def _r(x: float) -> float:
    return round(x, 2)


# ------------------------------------------------------------------------------------------
# FLOPs and throughput


def flops_per_token(arch: Arch, seq: int, tp: int = 1, divisible_by: int = 128) -> float:
    """Training FLOPs (forward + backward) per token, counted as Megatron-Bridge's
    num_floating_point_operations counts them: 6 FLOPs per weight per token for every GEMM,
    6*q*s for causal core attention, Gated DeltaNet and Mamba-2 mixers by its formulas, the
    logits once per MTP head, vision tower excluded."""
    h, glu = arch.hidden, 3 if arch.gated_mlp else 2
    per_block = {}
    if arch.attention:
        _, g, hd, q = _attn_dims(arch)
        gate = q if arch.attention.get("output_gate") else 0
        per_block["*"] = 6 * (h * (q + 2 * g * hd + gate) + q * h) + 6 * q * seq
    if arch.gdn:
        d = arch.gdn
        qk, v, nv = d["key_heads"] * d["key_head_dim"], d["value_heads"] * d["value_head_dim"], d["value_heads"]
        per_block["G"] = 6 * (
            h * (2 * qk + 2 * v + 2 * nv) + d["conv_kernel"] * (2 * qk + v) + nv * d["value_head_dim"] ** 2 * 4 + h * v
        )
    if arch.mamba:  # Megatron-Bridge's mamba_layer_flops takes the inner width as 2h
        m, din = arch.mamba, 2 * h
        per_block["M"] = 3 * (
            2 * h * (2 * din + 2 * m["num_groups"] * m["state_dim"] + m["num_heads"])
            + 7 * din * m["state_dim"]
            + 2 * din * h
        )
    if arch.ffn:
        per_block["-"] = 6 * h * arch.ffn * glu
    if arch.moe:
        e = arch.moe
        per_block["E"] = 6 * h * (e["expert_ffn"] * e["topk"] + (e.get("shared_expert_ffn") or 0)) * glu
    layers = list(arch.layers) + [arch.layers[-1]] * arch.mtp_layers
    total = sum(per_block[b] for t in layers for b in t.split("+"))
    total += 6 * arch.mtp_layers * (3 * h + 2 * h * h)
    total += 6 * h * padded_vocab(arch.vocab, tp, divisible_by) * (1 + arch.mtp_layers)
    return float(total)


def tflops_assumption(job) -> dict:
    """The achieved TFLOP/s per GPU for the job's precision on its GPU type: the recipe's own
    [assumptions] (when they name no other precision or GPU), else a measurement in models.toml
    for the model (or the one it extends) at this precision on this GPU type. Without one,
    tflops_per_gpu is None and `why` says which measurements exist and why none applies."""
    from bridge_launch.spec import recipes

    prec, gpu = validate.precision_of(job.config), job.gpu_type
    try:
        own = recipes.load(job.recipe).get("assumptions") or {}
    except UsageError:  # the recipe file went away since resolve: fall back to the table
        own = {}
    if (
        isinstance(own.get("tflops_per_gpu"), (int, float))
        and own.get("precision", prec) == prec
        and own.get("gpu", gpu) == gpu
    ):
        return {
            "tflops_per_gpu": float(own["tflops_per_gpu"]),
            "source": own.get("tflops_source", "recipe [assumptions]"),
            "caveat": own.get("tflops_caveat"),
            "precision": prec,
            "gpu": gpu,
            "why": None,
        }
    name = models.entry_for(job.recipe, job.hf_model)
    rows = [r for n in (models.lineage(name) if name else []) for r in models.table().get("throughput", {}).get(n, [])]
    for r in rows:
        if r["precision"] == prec and r["gpu"] == gpu:
            return {
                "tflops_per_gpu": float(r["tflops_per_gpu"]),
                "source": r["source"],
                "caveat": r.get("caveat"),
                "precision": prec,
                "gpu": gpu,
                "why": None,
            }
    have = "; ".join(f"{r['precision'].upper()} on {r['gpu']}: {r['tflops_per_gpu']:g}" for r in rows)
    why = (
        f"no {prec.upper()} measurement on {gpu} for this model"
        + (
            f" (measured: {have} TFLOP/s/GPU; a figure for another precision or GPU does not carry over)"
            if have
            else ""
        )
        + ": GPU-hours unknown; --tflops gives a figure to assume"
    )
    return {"tflops_per_gpu": None, "source": None, "caveat": None, "precision": prec, "gpu": gpu, "why": why}


def job_throughput(job) -> tuple[dict | None, int, str]:
    """(throughput() of the job as resolved, its world size, why there is none): what `check
    --expect-plan` and `status RUN` hold a run's speed against."""
    arch = arch_for(job)
    if arch is None:
        return None, job.world_size, f"no architecture known for recipe '{job.recipe}'"
    par = parallel_of(job)
    thr = throughput(job, arch, par)
    if not thr or not thr["tflops_assumption"]:
        return None, par.world, (thr or {}).get("no_assumption") or "no sequence length or global batch size"
    return thr, par.world, ""


def throughput(
    job, arch: Arch, par: Parallel, *, tflops_per_gpu: float | None = None, token_budget: int | None = None
) -> dict | None:
    """Tokens per step, steps (train.train_iters, or enough steps for token_budget) and, given
    an achieved TFLOP/s per GPU, seconds per step and GPU-hours."""
    cfg = job.config
    seq = _int(cfg, "dataset.seq_length") or _int(cfg, "model.seq_length")
    gbs = _int(cfg, validate.GBS)
    if not seq or not gbs:
        return None
    tokens_per_step = gbs * seq
    fpt = flops_per_token(arch, seq, par.tp, _int(cfg, "model.make_vocab_size_divisible_by") or 128)
    if token_budget:
        steps, budget_source = math.ceil(token_budget / tokens_per_step), f"a budget of {token_budget:,} tokens"
    else:
        steps = _int(cfg, "train.train_iters")
        budget_source = job.provenance.get("config", {}).get("train.train_iters") if steps else None
    assumed = (
        {
            "tflops_per_gpu": float(tflops_per_gpu),
            "source": "given for this plan",
            "caveat": None,
            "why": None,
            "precision": validate.precision_of(cfg),
            "gpu": job.gpu_type,
        }
        if tflops_per_gpu
        else tflops_assumption(job)
    )
    out = {
        "tokens_per_step": tokens_per_step,
        "flops_per_token": fpt,
        "flops_per_step": fpt * tokens_per_step,
        "steps": steps,
        "tokens": steps * tokens_per_step if steps else None,
        "budget_source": budget_source,
        "precision": assumed["precision"],
        "gpu": assumed["gpu"],
        "tflops_assumption": assumed["tflops_per_gpu"],
        "source": assumed["source"],
        "caveat": assumed["caveat"],
        "no_assumption": assumed["why"],
        "step_seconds": None,
        "gpu_hours": None,
        "wall_hours": None,
    }
    if assumed["tflops_per_gpu"]:
        step = fpt * tokens_per_step / (par.world * assumed["tflops_per_gpu"] * 1e12)
        out["step_seconds"] = round(step, 3)
        if steps:
            out["wall_hours"] = round(step * steps / 3600, 2)
            out["gpu_hours"] = round(step * steps * par.world / 3600, 1)
    return out


# ------------------------------------------------------------------------------------------
# the command


# ------------------------------------------------------------------------------------------
# text report
