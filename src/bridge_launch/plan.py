"""`bridge-launch plan`: rank topology, NVLink domains, memory per GPU and GPU-hours of a
resolved job, before it waits hours in a queue.

Three estimates from one ResolvedJob:

1. Rank layout. Which global ranks form each TP, CP, EP, PP and DP group, computed by
   megatron-core's own RankGenerator (the one initialize_model_parallel uses, order
   "tp-cp-ep-dp-pp"), and which nodes and NVLink domains each group spans. Ranks are laid out
   as torchrun numbers them: node n holds ranks n*G .. n*G+G-1 (G GPUs per node). A node's
   NVLink domain is its Slurm segment (`--segment`, the value the Slurm backend requests),
   which Slurm places inside one domain. megatron-core costs seconds to import, so only
   this module imports it, and only inside `plan()`.

2. Memory per GPU on the most loaded pipeline stage: BF16 parameters, gradients (FP32 when
   gradients are reduced in FP32), and the optimizer's FP32 master weights and Adam moments,
   sharded by the distributed optimizer over the data-parallel (x context-parallel) group for
   dense parameters and over the expert-data-parallel group for experts (Megatron-LM
   docs/user-guide/features/dist_optimizer.md: 18 bytes/parameter, or 6 + 12/d with the
   distributed optimizer). Activations follow the accounting of Korthikanti et al. 2022,
   "Reducing Activation Recomputation in Large Transformer Models" (arXiv 2205.05198,
   Table 2: sbh(34 + 5as/h) per layer), tensor by tensor, so that GQA, gated MLPs, MoE,
   Gated DeltaNet and Mamba blocks, flash attention, sequence parallelism and Megatron's
   recompute modules each change the terms they touch. The architecture comes from
   plan_models.toml (a small table per recipe, every number with its source) or, for a
   plain GPT, from the job's own model.* keys.

3. Throughput: tokens per step, steps and GPU-hours for the job's token budget (steps x
   global batch x sequence length, typically an overlay's), from the model's FLOPs per token
   (counted as Megatron-Bridge's training/utils/flop_utils.py counts them, so its published
   "model TFLOP/s" figures apply) and an achieved TFLOP/s per GPU that the recipe states as an
   assumption with its source.

Everything is an estimate: ASSUMPTIONS lists what it leaves out.
"""

from __future__ import annotations

import copy
import math
import tomllib
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from . import validate
from .errors import UsageError

PLAN_EXTRA = "bridge-launch plan needs the 'plan' extra: pip install 'bridge-launch[plan]'"
ORDER = "tp-cp-ep-dp-pp"  # Megatron's default rank order (initialize_model_parallel)
WARN_FRACTION = 0.90
GIB = 1024**3

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

# Megatron's recompute modules this model knows (TransformerConfig.recompute_modules).
RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mlp", "moe", "shared_experts", "gdn_norm_out")


# ------------------------------------------------------------------------------------------
# parallel sizes


@dataclass(frozen=True)
class Parallel:
    world: int
    tp: int
    pp: int
    cp: int
    ep: int
    etp: int
    dp: int  # world / (tp * pp * cp)
    edp: int  # world / (etp * ep * pp)
    vpp: int | None
    sp: bool

    def as_dict(self) -> dict:
        return {"tp": self.tp, "pp": self.pp, "cp": self.cp, "ep": self.ep, "etp": self.etp,
                "dp": self.dp, "edp": self.edp, "vpp": self.vpp, "sp": self.sp}


def parallel_of(job) -> Parallel:
    """The job's parallel sizes, checked the way initialize_model_parallel checks them."""
    tp, pp, cp, ep, etp = validate._sizes(job.config)
    for name, v in (("TP", tp), ("PP", pp), ("CP", cp), ("EP", ep), ("ETP", etp)):
        if v is None or v < 1:
            raise UsageError(f"plan needs integer parallel sizes >= 1; {name} is {v!r} (an interpolation or invalid value)")
    world = job.world_size
    if world % (tp * pp * cp):
        raise UsageError(f"world size {world} is not divisible by TP*PP*CP = {tp * pp * cp}; no rank layout exists")
    if world % (etp * ep * pp):
        raise UsageError(f"world size {world} is not divisible by ETP*EP*PP = {etp * ep * pp}; no expert rank layout exists")
    vpp = job.config.get("model.virtual_pipeline_model_parallel_size")
    vpp = vpp if isinstance(vpp, int) and not isinstance(vpp, bool) and vpp > 1 else None
    return Parallel(world=world, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, dp=world // (tp * pp * cp),
                    edp=world // (etp * ep * pp), vpp=vpp, sp=job.config.get(validate.SP) is True)


# ------------------------------------------------------------------------------------------
# rank groups (megatron-core) and where they land


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


def spans(groups: dict, gpus_per_node: int, domain_nodes: int) -> dict:
    """For each kind: how many nodes and NVLink domains its widest group covers. Node n is in
    domain n // domain_nodes (domain_nodes consecutive nodes form one domain)."""
    out = {}
    for kind, gs in groups.items():
        nodes = [sorted({r // gpus_per_node for r in g}) for g in gs]
        domains = [sorted({n // domain_nodes for n in ns}) for ns in nodes]
        worst = max(range(len(gs)), key=lambda i: (len(domains[i]), len(nodes[i])))
        out[kind] = {
            "groups": len(gs),
            "size": len(gs[0]),
            "max_nodes": len(nodes[worst]),
            "max_domains": len(domains[worst]),
            "crosses_nodes": any(len(ns) > 1 for ns in nodes),
            "crosses_domains": any(len(ds) > 1 for ds in domains),
            "widest": {"ranks": _short(gs[worst]), "nodes": nodes[worst], "domains": domains[worst]},
        }
    return out


def _short(ranks: list) -> str:
    """[0, 1, 2, 3] -> '0-3'; [0, 2, 4] -> '0,2,4' (strided groups stay explicit, trimmed)."""
    if len(ranks) > 1 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    text = ",".join(map(str, ranks[:8]))
    return text + (f",... ({len(ranks)} ranks)" if len(ranks) > 8 else "")


def _hybrid_ep(cfg: dict) -> bool:
    return (cfg.get("model.moe_token_dispatcher_type") == "flex"
            and str(cfg.get("model.moe_flex_dispatcher_backend", "")).lower() == "hybridep")


def _fits(groups: list, gpus_per_node: int, unit_nodes: int) -> bool:
    """Whether every group lies inside one block of unit_nodes consecutive nodes."""
    return all(len({(r // gpus_per_node) // unit_nodes for r in g}) == 1 for g in groups)


def _largest_share(group: list, gpus_per_node: int, unit_nodes: int) -> int:
    """The most ranks of one group that sit in a single block of unit_nodes nodes."""
    counts: dict = {}
    for r in group:
        u = (r // gpus_per_node) // unit_nodes
        counts[u] = counts.get(u, 0) + 1
    return max(counts.values())


_LABEL = {"tp": "TP", "etp": "expert TP", "ep": "EP (HybridEP)"}


def topology(job, par: Parallel, groups: dict) -> tuple[dict, dict, list, list]:
    """(spans, domain facts, warnings, notes) for the job's placement.

    TP and expert TP must stay inside a node. Under HybridEP an EP group must also stay inside
    one NVLink domain; the domain a node lands in is its Slurm segment (node // segment)."""
    from .backends.slurm import segment_size  # the value the Slurm backend writes as --segment

    gpn, nodes = job.gpus_per_node, job.nodes
    domain = int(job.profile.get("nvlink_domain_nodes") or 0)
    segment = segment_size(nodes, domain) if domain > 1 and nodes > 1 else None
    requested = job.backend == "slurm" and bool(job.scheduler.get("segment"))
    unit = segment or 1  # without multi-node NVLink domains, NVLink ends at the node
    sp = spans(groups, gpn, unit)
    hybrid = _hybrid_ep(job.config) and par.ep > 1
    critical = [k for k in ("tp", "etp") if sp[k]["size"] > 1] + (["ep"] if hybrid else [])
    warns, notes = [], []

    for kind in ("tp", "etp"):
        s, label = sp[kind], _LABEL[kind]
        if s["crosses_nodes"]:
            warns.append(f"{label} groups of {s['size']} span {s['max_nodes']} nodes (ranks {s['widest']['ranks']} on "
                         f"nodes {_short(s['widest']['nodes'])}) but a node has {gpn} GPUs: {label} traffic leaves the "
                         f"node on every layer; keep {label} <= {gpn}")

    for kind in critical if segment else ():
        s = sp[kind]
        if not s["crosses_domains"]:
            continue
        need = math.ceil(s["size"] / gpn)
        if need > domain:
            fix = (f"a group of {s['size']} ranks needs {need} nodes, more than one {domain}-node NVLink domain; "
                   f"keep {_LABEL[kind].split()[0]} <= {domain * gpn}")
        else:
            good = [g for g in range(min(domain, nodes), 0, -1)
                    if nodes % g == 0 and all(_fits(groups[k], gpn, g) for k in critical)]
            fix = (f"a segment of {good[0]} nodes (divides {nodes}, <= {domain}) keeps every group inside one domain"
                   if good else f"no segment of <= {domain} nodes that divides {nodes} keeps them inside one domain")
        warns.append(f"{_LABEL[kind]} groups cross NVLink domains: ranks {s['widest']['ranks']} sit on nodes "
                     f"{_short(s['widest']['nodes'])}, across the {segment}-node segment boundary; {fix}")
    if segment and not requested and any(sp[k]["max_nodes"] > 1 for k in critical):
        notes.append(f"cluster '{job.cluster}' does not request --segment: the scheduler may split the job's nodes "
                     f"across NVLink domains; the domains above assume {segment} consecutive nodes share one")

    if hybrid:  # HybridEP is told how many EP ranks share a domain
        env = job.env.get("NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN")
        per_domain = max(_largest_share(g, gpn, unit) for g in groups["ep"])
        if env is not None and str(env).isdigit() and int(env) != per_domain:
            warns.append(f"NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN={env} but each EP group has {per_domain} ranks "
                         f"inside one NVLink domain (EP={par.ep}); set it to {per_domain}")
    facts = {"nvlink_domain_nodes": domain or None, "segment": segment, "segment_requested": requested,
             "hybrid_ep": hybrid, "nvlink_groups": critical}
    return sp, facts, warns, notes


# ------------------------------------------------------------------------------------------
# architecture table


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


@lru_cache(maxsize=1)
def table() -> dict:
    return tomllib.loads((Path(__file__).parent / "plan_models.toml").read_text())


def _entry(name: str) -> dict:
    data = copy.deepcopy(table()["models"][name])
    if "extends" in data:
        base = _entry(data["extends"])
        for key, value in data.items():
            base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) else value
        data = base
    return data


# job config key -> table field (a tuple names a field inside a sub-table)
_CONFIG_FIELDS = {
    "model.num_layers": "num_layers", "model.hidden_size": "hidden_size", "model.ffn_hidden_size": "ffn",
    "model.vocab_size": "vocab_size", "model.mtp_num_layers": "mtp_layers",
    "model.share_embeddings_and_output_weights": "tied_embeddings",
    "model.num_attention_heads": ("attention", "num_heads"), "model.num_query_groups": ("attention", "num_query_groups"),
    "model.kv_channels": ("attention", "head_dim"), "model.num_moe_experts": ("moe", "num_experts"),
    "model.moe_router_topk": ("moe", "topk"), "model.moe_ffn_hidden_size": ("moe", "expert_ffn"),
    "model.moe_shared_expert_intermediate_size": ("moe", "shared_expert_ffn"),
}


def arch_for(job) -> Arch | None:
    """The recipe's architecture from plan_models.toml (by recipe name, then hf_model), with
    the job's own model.* values on top; a plain GPT from model.* keys alone; else None."""
    cfg = job.config
    models = table()["models"]
    name = next((n for n, m in models.items() if job.recipe in m.get("recipes", [])), None)
    if name is None and job.hf_model:
        name = next((n for n, m in models.items() if job.hf_model in m.get("hf_ids", [])), None)
    if name is not None:
        data, source = _entry(name), f"plan_models.toml [models.{name}]"
    elif all(isinstance(cfg.get(k), int) for k in ("model.num_layers", "model.hidden_size",
                                                     "model.num_attention_heads", "model.vocab_size")):
        h = cfg["model.hidden_size"]
        data = {"layers": "*+-", "tied_embeddings": True, "gated_mlp": cfg.get("model.gated_linear_unit") is True,
                "dropout": cfg.get("model.hidden_dropout", 0.1) != 0, "ffn": 4 * h,
                "attention": {"head_dim": h // cfg["model.num_attention_heads"]}}
        name, source = "gpt", "job config (model.* keys; plain GPT)"
    else:
        return None
    for key, where in _CONFIG_FIELDS.items():
        value = cfg.get(key)
        want_bool = where == "tied_embeddings"
        if not isinstance(value, (int, bool)) or isinstance(value, bool) != want_bool:
            continue  # unset, an interpolation or the wrong type: keep the table's value
        if isinstance(where, tuple):
            data[where[0]] = {**data.get(where[0], {}), where[1]: value}
        else:
            data[where] = value
    att = data.get("attention", {})
    if att:
        att.setdefault("num_query_groups", att.get("num_heads"))
    unit = data["layers"].split()
    n = data.get("num_layers", len(unit))
    return Arch(
        name=name, source=source, hidden=data["hidden_size"], vocab=data["vocab_size"],
        tied=data.get("tied_embeddings", False), layers=tuple(unit[i % len(unit)] for i in range(n)),
        mtp_layers=data.get("mtp_layers", 0) or 0, ffn=data.get("ffn"), gated_mlp=data.get("gated_mlp", True),
        dropout=data.get("dropout", False), flash_attention=data.get("flash_attention", True),
        attention=att, gdn=data.get("gdn", {}), mamba=data.get("mamba", {}), moe=data.get("moe", {}),
        vision=data.get("vision", {}),
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
        return h + h * (2 * qk + 2 * v + 2 * nv) + (2 * qk + v) * d["conv_kernel"] + 2 * nv + d["value_head_dim"] + v * h, 0
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
    return {"total": dense + expert + md + me + emb + vis, "decoder_dense": dense, "decoder_experts": expert,
            "mtp": md + me, "embeddings": emb, "vision": vis, "experts": expert + me}


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
        terms += [Term("qkv_in", 2 * h, "sp", frozenset({"layernorm"})),
                  Term("q_k", 2 * (q + g * hd), "tp"), Term("v", 2 * g * hd, "tp")]
        if not arch.flash_attention:  # softmax output (+ dropout mask and output): a*s per token each
            terms.append(Term("scores", (5 if arch.dropout else 2) * a * seq, "tp", frozenset({"core_attn"})))
        if arch.attention.get("output_gate"):
            terms.append(Term("gate", 2 * q, "tp"))
        terms += [Term("proj_in", 2 * q, "tp")] + drop
    elif block == "-":
        terms += [Term("fc1_in", 2 * h, "sp", frozenset({"layernorm"})),
                  Term("fc1_out", 2 * arch.ffn * glu, "tp", frozenset({"mlp"})),
                  Term("act_out", 2 * arch.ffn, "tp", frozenset({"mlp"}))] + drop
    elif block == "E":
        e = arch.moe
        k, f, fs = e["topk"], e["expert_ffn"], e.get("shared_expert_ffn") or 0
        moe = frozenset({"moe"})
        terms += [Term("router_in", 2 * h, "sp", frozenset({"layernorm"})),
                  Term("router", 8 * e["num_experts"], "sp", moe),  # FP32 logits and probabilities
                  Term("expert_in", 2 * h * k * etp, "sp", moe),  # k permuted copies, gathered over expert TP
                  Term("expert_fc1_out", 2 * f * glu * k, "sp", moe),
                  Term("expert_act_out", 2 * f * k, "sp", frozenset({"moe", "moe_act"})),
                  Term("expert_out", 2 * h * k, "sp", moe)]  # weighted by the router probabilities on combine
        if fs:
            shared = frozenset({"moe", "shared_experts"})
            terms += [Term("shared_fc1_out", 2 * fs * glu, "tp", shared), Term("shared_act_out", 2 * fs, "tp", shared)]
        terms += drop
    elif block == "G":
        d = arch.gdn
        qk, v, nv = d["key_heads"] * d["key_head_dim"], d["value_heads"] * d["value_head_dim"], d["value_heads"]
        terms += [Term("in_proj_in", 2 * h, "sp", frozenset({"layernorm"})),
                  Term("in_proj_out", 2 * (2 * qk + 2 * v + 2 * nv), "tp"),  # q, k, v, z, beta, alpha
                  Term("conv_out", 2 * (2 * qk + v), "tp"),
                  Term("core_out", 2 * v, "tp"),
                  Term("norm_out", 2 * v, "tp", frozenset({"gdn_norm_out"}))] + drop
    elif block == "M":
        m = arch.mamba
        din, gs, nh = m["num_heads"] * m["head_dim"], m["num_groups"] * m["state_dim"], m["num_heads"]
        terms += [Term("in_proj_in", 2 * h, "sp", frozenset({"layernorm"})),
                  Term("in_proj_out", 2 * (2 * din + 2 * gs + nh), "tp"),
                  Term("conv_out", 2 * (din + 2 * gs), "tp"),
                  Term("ssm_out", 2 * din, "tp"),
                  Term("norm_out", 2 * din, "tp")] + drop
    else:
        raise ValueError(f"unknown block {block!r}")
    return terms


def layer_activation_bytes(arch: Arch, layer: str, *, seq: int, tp: int = 1, sp: bool = False,
                           recompute: frozenset = frozenset(), etp: int = 1) -> float:
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
            return "selective: " + ", ".join(sorted(self.modules))
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
        return Recompute("full", method=cfg.get("model.recompute_method") or "uniform",
                         num_layers=n if isinstance(n, int) and n > 0 else 1)
    return Recompute(None)


def stage_layers(arch: Arch, pp: int) -> list[list[str]]:
    """Decoder layers per pipeline stage (even split, the first stages taking any remainder);
    MTP layers go on the last stage."""
    n, out, start = len(arch.layers), [], 0
    for i in range(pp):
        size = n // pp + (1 if i < n % pp else 0)
        out.append(list(arch.layers[start:start + size]))
        start += size
    out[-1] += [arch.layers[-1]] * arch.mtp_layers
    return out


def stage_activation_bytes(arch: Arch, layers: list, rc: Recompute, *, seq: int, tp: int, sp: bool, etp: int) -> tuple[float, float]:
    """(bytes kept per token for one microbatch, transient bytes per token while one recomputed
    group runs its backward) for a stage's layers."""
    def full(layer):
        return layer_activation_bytes(arch, layer, seq=seq, tp=tp, sp=sp, etp=etp)

    if rc.granularity == "full":
        layer_in = 2 * arch.hidden / (tp if sp else 1)  # a checkpointed group keeps only its input
        n = rc.num_layers
        if rc.method == "block":
            kept = layers[n:]
            return len(layers[:n]) * layer_in + sum(full(t) for t in kept), max((full(t) for t in layers[:n]), default=0)
        groups = [layers[i:i + n] for i in range(0, len(layers), n)]
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
    extra = table().get("recipes", {}).get(job.recipe, {})

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
            best = {"stage": i, "total": total, "states": states, "act": act, "dense": dense, "expert": expert,
                    "in_flight": in_flight if tokens else None}

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
        "parameters": {"total": counts["total"], "experts": counts["experts"],
                       "per_gpu": round(best["dense"] + best["expert"]),
                       "dense_per_gpu": round(best["dense"]), "expert_per_gpu": round(best["expert"])},
        "bytes_per_param": {"dense": round(dense_b["total"], 3), "expert": round(expert_b["total"], 3),
                            "distributed_optimizer": distributed, "fp32_grads": fp32_grads,
                            "dense_shard": par.dp * par.cp if distributed else 1,
                            "expert_shard": par.edp if distributed else 1},
        "tokens_per_microbatch": tokens,
        "microbatches_in_flight": best["in_flight"],
        "recompute": rc.describe(),
        "assumptions": list(ASSUMPTIONS),
    }


def _vision_activation(arch: Arch, cfg: dict, extra: dict, par: Parallel) -> float:
    """An upper bound for the vision tower: every packed sample at its visual-token cap
    (dataset.task_encoder.max_visual_tokens x packing buffer x micro batch). With full
    recompute (the recipe's own setting, see plan_models.toml [recipes]) each ViT layer keeps
    its input and one layer runs at a time; otherwise every layer keeps its activations."""
    v = arch.vision
    cap = _int(cfg, "dataset.task_encoder.max_visual_tokens")
    if not v or not cap:
        return 0.0
    patches = cap * (_int(cfg, validate.PACKING_BUFFER) or 1) * (_int(cfg, validate.MBS) or 1) * v["spatial_merge_size"] ** 2
    hv, f = v["hidden_size"], v["ffn"]
    # pre-LN ViT block with flash attention: norm inputs, QKV input, Q/K/V, projection input,
    # MLP input and its two 4304-wide activations, in BF16 (split over TP, as the tower is)
    layer = (2 + 2 + 6 + 2 + 2 + 2) * hv + 2 * f + 2 * f
    if extra.get("vision_recompute") == "full":
        return (v["depth"] * 2 * hv + layer) * patches / par.tp
    return v["depth"] * layer * patches / par.tp


def _int(cfg: dict, key: str):
    v = cfg.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


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
        per_block["G"] = 6 * (h * (2 * qk + 2 * v + 2 * nv) + d["conv_kernel"] * (2 * qk + v)
                              + nv * d["value_head_dim"] ** 2 * 4 + h * v)
    if arch.mamba:  # Megatron-Bridge's mamba_layer_flops takes the inner width as 2h
        m, din = arch.mamba, 2 * h
        per_block["M"] = 3 * (2 * h * (2 * din + 2 * m["num_groups"] * m["state_dim"] + m["num_heads"])
                              + 7 * din * m["state_dim"] + 2 * din * h)
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


def tflops_assumption(job) -> dict | None:
    """The recipe's stated TFLOP/s per GPU: its own [assumptions], else plan_models.toml."""
    from . import recipes

    try:
        own = recipes.load(job.recipe).get("assumptions") or {}
    except UsageError:  # the recipe file went away since resolve: fall back to the table
        own = {}
    if isinstance(own.get("tflops_per_gpu"), (int, float)):
        return {"tflops_per_gpu": float(own["tflops_per_gpu"]), "source": own.get("tflops_source", "recipe [assumptions]"),
                "caveat": own.get("tflops_caveat")}
    row = table().get("throughput", {}).get(job.recipe)
    if row:
        return {"tflops_per_gpu": float(row["tflops_per_gpu"]), "source": row["source"], "caveat": row.get("caveat")}
    return None


def throughput(job, arch: Arch, par: Parallel, *, tflops_per_gpu: float | None = None,
               token_budget: int | None = None) -> dict | None:
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
    assumed = ({"tflops_per_gpu": float(tflops_per_gpu), "source": "given for this plan", "caveat": None}
               if tflops_per_gpu else tflops_assumption(job))
    out = {"tokens_per_step": tokens_per_step, "flops_per_token": fpt, "flops_per_step": fpt * tokens_per_step,
           "steps": steps, "tokens": steps * tokens_per_step if steps else None, "budget_source": budget_source,
           "tflops_assumption": assumed["tflops_per_gpu"] if assumed else None,
           "source": assumed["source"] if assumed else None, "caveat": assumed["caveat"] if assumed else None,
           "step_seconds": None, "gpu_hours": None, "wall_hours": None}
    if assumed:
        step = fpt * tokens_per_step / (par.world * assumed["tflops_per_gpu"] * 1e12)
        out["step_seconds"] = round(step, 3)
        if steps:
            out["wall_hours"] = round(step * steps / 3600, 2)
            out["gpu_hours"] = round(step * steps * par.world / 3600, 1)
    return out


# ------------------------------------------------------------------------------------------
# the command


def plan(job, *, tflops_per_gpu: float | None = None, token_budget: int | None = None) -> dict:
    """The whole plan of a resolved job as a JSON-able dict (see module docstring)."""
    par = parallel_of(job)
    groups, source = rank_groups(par)
    sp, facts, warns, notes = topology(job, par, groups)
    arch = arch_for(job)
    mem = thr = None
    if arch is None:
        notes.append(f"no architecture known for recipe '{job.recipe}' ({job.hf_model or 'no hf_model'}): "
                     "add it to src/bridge_launch/plan_models.toml for memory and GPU-hour estimates")
    else:
        mem = memory(job, arch, par)
        if mem["fraction"] is not None and mem["fraction"] > WARN_FRACTION:
            verb = "does not fit" if mem["fraction"] > 1 else f"is above {WARN_FRACTION:.0%}"
            warns.append(f"memory: about {mem['total_gib']:.0f} of {mem['capacity_gib']:.0f} GiB per GPU "
                         f"({mem['fraction']:.0%}) on pipeline stage {mem['stage']} {verb}: raise TP/CP/EP/PP, "
                         f"recompute more, or lower the micro batch")
        thr = throughput(job, arch, par, tflops_per_gpu=tflops_per_gpu, token_budget=token_budget)
    return {
        "recipe": job.recipe,
        "cluster": job.cluster,
        "nodes": job.nodes,
        "gpus_per_node": job.gpus_per_node,
        "world_size": job.world_size,
        "parallel": par.as_dict(),
        "groups": groups,
        "spans": sp,
        "segment": facts["segment"],
        "domains": facts,
        "memory": mem,
        "throughput": thr,
        "warnings": warns,
        "notes": notes,
        "source": source,
    }


# ------------------------------------------------------------------------------------------
# text report


def _groups_line(gs: list, limit: int = 4) -> str:
    shown = " ".join(f"[{_short(g)}]" for g in gs[:limit])
    return shown + (f" ... ({len(gs)} groups)" if len(gs) > limit else "")


def _num(x: float) -> str:
    for unit, div in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(x) >= div:
            return f"{x / div:.2f}{unit}"
    return f"{x:g}"


def _flops(x: float) -> str:
    for unit, div in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if abs(x) >= div:
            return f"{x / div:.1f} {unit}FLOP"
    return f"{x:g} FLOP"


def render_text(result: dict) -> str:
    p, d = result["parallel"], result["domains"]
    nodes = f"{result['nodes']} node{'s' if result['nodes'] != 1 else ''}"
    lines = [f"plan: {result['recipe']} on {result['cluster']}: {nodes} x {result['gpus_per_node']} GPUs "
             f"= {result['world_size']} ranks",
             "parallel: " + "  ".join(f"{k.upper()}={p[k]}" for k in ("tp", "cp", "pp", "dp", "ep", "etp", "edp"))
             + (f"  VPP={p['vpp']}" if p["vpp"] else "") + ("  SP" if p["sp"] else ""),
             f"ranks: {result['source']}"]
    dom = d["nvlink_domain_nodes"]
    if result["segment"]:
        lines.append(f"NVLink: domains of {dom} nodes; segment {result['segment']} nodes"
                     + ("" if d["segment_requested"] else " (not requested by this cluster)")
                     + ("; HybridEP" if d["hybrid_ep"] else ""))
    else:
        lines.append("NVLink: " + (f"domains of {dom} nodes; the job fits in one node" if dom else "within each node"))
    lines.append("")
    lines.append(f"  {'group':6} {'size':>4} {'count':>5} {'nodes':>5} {'domains':>7}  ranks")
    for kind in ("tp", "cp", "ep", "etp", "pp", "dp", "dp_cp", "edp"):
        s = result["spans"][kind]
        flag = " !" if (s["crosses_nodes"] and kind in ("tp", "etp")) or (s["crosses_domains"] and kind in d["nvlink_groups"]) else ""
        lines.append(f"  {kind:6} {s['size']:>4} {s['groups']:>5} {s['max_nodes']:>5} {s['max_domains']:>7}  "
                     f"{_groups_line(result['groups'][kind])}{flag}")
    mem = result["memory"]
    if mem:
        lines += ["", f"memory per GPU ({mem['model']}, pipeline stage {mem['stage']}, recompute {mem['recompute']}):"]
        rows = [("parameters", mem["params_gib"]), ("gradients", mem["grads_gib"]), ("optimizer", mem["optimizer_gib"])]
        rows += [(f"activations: {k.replace('_', ' ')}", v) for k, v in mem["activations"].items() if v]
        for name, gib in rows:
            lines.append(f"  {name:34} {gib:8.1f} GiB")
        cap = f" of {mem['capacity_gib']:.0f} GiB ({mem['fraction']:.0%})" if mem["capacity_gib"] else ""
        lines.append(f"  {'total':34} {mem['total_gib']:8.1f} GiB{cap}")
        bp, pc = mem["bytes_per_param"], mem["parameters"]
        lines.append(f"  {_num(pc['total'])} parameters ({_num(pc['experts'])} in experts), {_num(pc['per_gpu'])} per GPU; "
                     f"{bp['dense']:.2f} bytes/param dense, {bp['expert']:.2f} expert"
                     + (f" (distributed optimizer over {bp['dense_shard']} and {bp['expert_shard']} ranks)"
                        if bp["distributed_optimizer"] else " (no distributed optimizer)"))
        if mem["tokens_per_microbatch"]:
            lines.append(f"  activations for {mem['tokens_per_microbatch']:.0f} tokens per microbatch, "
                         f"{mem['microbatches_in_flight']} in flight")
    thr = result["throughput"]
    if thr:
        lines += ["", "throughput:",
                  f"  {thr['tokens_per_step']:,} tokens/step, {_flops(thr['flops_per_token'])}/token, "
                  f"{_flops(thr['flops_per_step'])}/step"]
        if thr["steps"]:
            src = thr["budget_source"] or ""
            why = f"--tokens: {src}" if src.startswith("a budget of") else f"train.train_iters from {src or 'the job'}"
            lines.append(f"  {thr['steps']:,} steps = {_num(thr['tokens'])} tokens ({why})")
        if thr["tflops_assumption"]:
            lines.append(f"  at {thr['tflops_assumption']:g} TFLOP/s per GPU: {thr['step_seconds']:.2f} s/step"
                         + (f", {thr['wall_hours']:,.1f} h wall, {thr['gpu_hours']:,.0f} GPU-hours" if thr["gpu_hours"] else ""))
            lines.append(f"  assumption: {thr['source']}")
            if thr["caveat"]:
                lines.append(f"  caveat: {thr['caveat']}")
        else:
            lines.append("  no achieved TFLOP/s stated for this recipe: GPU-hours unknown")
    if result["notes"]:
        lines += [""] + [f"note: {n}" for n in result["notes"]]
    if result["warnings"]:
        lines += [""] + [f"warning: {w}" for w in result["warnings"]]
    return "\n".join(lines) + "\n"
