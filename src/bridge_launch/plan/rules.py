"""Checks that run before anything is submitted: the job against Megatron's own rules, carried
over from Megatron-Bridge's ConfigContainer.validate() and megatron-core (TransformerConfig,
parallel-state initialisation, the modules that divide the model) at the commits
schema/config_container.json was generated from, plus plan's findings (memory per GPU, rank
groups across nodes and NVLink domains) and warnings about the job's inputs.

Every rule names its source (file:line at the pinned commit) in its `source`, and
docs/validation_rules.md lists them (a test keeps the two in step), together with the source's
checks that are left for the job and why.

Each rule returns one-line messages: what is wrong, the values involved, what would be valid.
A value given as an interpolation falls back to nothing (the rule is skipped); a key the job
does not set falls back to Megatron's default where the source has one (1 for every parallel
size) and otherwise skips the rule, since the recipe function's own value is not known here.
"""

from __future__ import annotations

import math
import os

from bridge_launch.core import upstream
from bridge_launch.core.hardware import GPU_CC
from bridge_launch.spec.config_keys import (
    CP,
    DATA_SEQ,
    DATA_SEQUENCE,
    EP,
    ETP,
    EVAL_CP,
    FP8_RECIPE,
    GBS,
    MBS,
    MODEL_SEQ,
    PACKING_BUFFER,
    PP,
    PRECISION,
    SEQ_KEYS,
    SP,
    TP,
    VPP,
)
from bridge_launch.spec.config_keys import bool_value as _bool
from bridge_launch.spec.config_keys import int_value as _int
from bridge_launch.spec.config_keys import sizes as _sizes

MB_COMMIT = upstream.short(upstream.BRIDGE_MAIN)
MC_COMMIT = upstream.short(upstream.CORE_OF_MAIN)
MB = f"Megatron-Bridge@{MB_COMMIT}"
MC = f"megatron-core@{MC_COMMIT}"


# Dataset kinds (ResolvedJob.dataset_kind; pretrain recipes without one build GPTDatasetConfig)
# and the ConfigContainer.validate() checks that depend on the dataset class.
SFT_COLLATE_KINDS = ("energon", "direct-hf-sft", "mock-vlm-sft")  # config.py:1364-1368
SEQ_EQUAL_KINDS = ("gpt", "gpt-sft", "energon", "direct-hf-sft", "mock-vlm-sft")  # config.py:1633-1641
FINETUNE_MODES = ("sft", "lora", "dora")


# ------------------------------------------------------------------------------------------
# rule registry


class Rule:
    """One carried-over rule (a plain class: this module is on every --dry-run's path)."""

    __slots__ = ("id", "family", "level", "source", "fn", "world", "megatron")

    def __init__(self, rule_id, family, level, source, fn, world=False, megatron=True):
        # level: error | warning
        self.id, self.family, self.level, self.source, self.fn = rule_id, family, level, source, fn
        self.world = world  # restates the GPU count: left out when the count itself is wrong
        self.megatron = megatron  # applies to Megatron-Bridge jobs only (not the smoke workload)

    def __repr__(self) -> str:
        return f"Rule({self.id!r}, {self.level})"


RULES: list = []


def rule(rule_id: str, family: str, source: str, *, level: str = "error", world: bool = False, megatron: bool = True):
    def deco(fn):
        RULES.append(Rule(rule_id, family, level, source, fn, world, megatron))
        return fn

    return deco


# ------------------------------------------------------------------------------------------
# the job's values


def dataset_kind(job) -> str | None:
    """The dataset config class the job builds: the recipe's dataset_kind, else 'gpt' for
    pretraining (GPTDatasetConfig, mock or real), else unknown."""
    if job.workload != "megatron-bridge":
        return None
    if job.dataset_kind:
        return job.dataset_kind
    return "gpt" if job.mode == "pretrain" else None


class Ctx:
    """What every rule reads: the job, its parallel sizes (None: an interpolation), its model
    facts (models.ModelFacts or None) and its dataset kind."""

    __slots__ = ("job", "cfg", "tp", "pp", "cp", "ep", "etp", "vpp", "sp", "facts", "kind")

    def __init__(self, **kw):
        for k in self.__slots__:
            setattr(self, k, kw[k])

    @property
    def sizes_ok(self) -> bool:
        return all(isinstance(v, int) and v >= 1 for v in (self.tp, self.pp, self.cp, self.ep, self.etp))

    @property
    def world_ok(self) -> bool:
        w = self.job.world_size
        return self.sizes_ok and w % (self.tp * self.pp * self.cp) == 0 and w % (self.etp * self.ep * self.pp) == 0

    @property
    def dp(self) -> int:
        return self.job.world_size // (self.tp * self.pp * self.cp)


def context(job) -> Ctx:
    from bridge_launch.spec import models

    cfg = job.config
    tp, pp, cp, ep, etp = _sizes(cfg, job.bridge_commit)
    facts = models.facts_for(job) if job.workload == "megatron-bridge" else None
    return Ctx(
        job=job,
        cfg=cfg,
        tp=tp,
        pp=pp,
        cp=cp,
        ep=ep,
        etp=etp,
        vpp=_int(cfg, VPP, None),
        sp=cfg.get(SP) is True,
        facts=facts,
        kind=dataset_kind(job),
    )


# ------------------------------------------------------------------------------------------
# parallel sizes and the world size


@rule(
    "parallel-sizes",
    "sizes",
    f"{MC} megatron/core/parallel_state.py:814-823 (world size divided by TP*PP*CP; "
    "0 raises ZeroDivisionError), :870-884 (by ETP*EP*PP), :827-831 (VPP)",
    megatron=False,
)
def rule_parallel_sizes(c: Ctx) -> list:
    errs = []
    for key in (TP, PP, CP, EP, ETP, VPP, EVAL_CP):
        v = c.cfg.get(key)
        if v is None or (isinstance(v, str) and "${" in v):
            continue  # unset or null (Megatron's default) or resolved in the job
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            errs.append(
                f"{key}={v!r}: parallel sizes must be integers >= 1 (Megatron divides the world size "
                f"by them); use 1 to turn this parallelism off"
            )
    return errs


# parallel_state.py:814-823 (world % TP*PP*CP) [RuntimeError]; Bridge config.py:1019-1026 asserts the same.
@rule(
    "world-tp-pp-cp",
    "sizes",
    f"{MC} megatron/core/parallel_state.py:814-823; {MB} src/megatron/bridge/training/config.py:1019-1026",
    world=True,
    megatron=False,
)
def rule_world(c: Ctx) -> list:
    if not c.sizes_ok:
        return []
    mp = c.tp * c.pp * c.cp
    if c.job.world_size % mp:
        j = c.job
        return [
            f"world size {j.world_size} ({j.nodes} node{'s' if j.nodes != 1 else ''} x {j.gpus_per_node}) is not "
            "divisible by "
            f"TP*PP*CP = {c.tp}*{c.pp}*{c.cp} = {mp}; use a GPU count that is a multiple of {mp} or change the "
            "parallel sizes"
        ]
    return []


# parallel_state.py:870-884: world % (ETP*EP*PP) [RuntimeError].
@rule("world-expert", "sizes", f"{MC} megatron/core/parallel_state.py:870-884", world=True, megatron=False)
def rule_world_expert(c: Ctx) -> list:
    if not c.sizes_ok or (c.ep == 1 and c.etp == c.tp):
        return []
    block = c.etp * c.ep * c.pp
    if c.job.world_size % block:
        return [
            f"world size {c.job.world_size} is not divisible by ETP*EP*PP = {c.etp}*{c.ep}*{c.pp} = {block}; "
            f"expert parallelism needs the GPU count to be a multiple of {block}"
        ]
    return []


# num_microbatches_calculator.py:381-387: GBS % (MBS * DP) [AssertionError]; :390-392 at least one microbatch.
@rule(
    "batch-divisible", "sizes", f"{MC} megatron/core/num_microbatches_calculator.py:381-392", world=True, megatron=False
)
def rule_batch(c: Ctx) -> list:
    gbs, mbs = _int(c.cfg, GBS), _int(c.cfg, MBS)
    if gbs is None or mbs is None:
        return []
    if gbs < 1 or mbs < 1:
        return [f"{GBS} and {MBS} must be >= 1, got {gbs} and {mbs}"]
    if not c.world_ok:
        return []
    dp = c.dp
    if gbs % (mbs * dp):
        return [
            f"{GBS}={gbs} is not divisible by {MBS}*DP = {mbs}*{dp} = {mbs * dp} (DP = world {c.job.world_size} / "
            f"TP*PP*CP {c.tp * c.pp * c.cp}); use a multiple of {mbs * dp}"
        ]
    return []


# config.py:1456-1478: eval_global_batch_size % (eval_micro_batch_size * eval DP), eval DP from
# dist.eval_context_parallel_size when set (eval GBS/MBS default to the training ones, :1432-1442).
@rule("eval-batch-divisible", "sizes", f"{MB} src/megatron/bridge/training/config.py:1432-1442,1456-1478", world=True)
def rule_eval_batch(c: Ctx) -> list:
    cfg = c.cfg
    if (
        not any(
            cfg.get(k) is not None
            for k in ("validation.eval_global_batch_size", "validation.eval_micro_batch_size", EVAL_CP)
        )
        or not c.world_ok
    ):
        return []  # without eval-specific values this is rule batch-divisible
    gbs = _int(cfg, "validation.eval_global_batch_size", _int(cfg, GBS))
    mbs = _int(cfg, "validation.eval_micro_batch_size", _int(cfg, MBS))
    ecp = _int(cfg, EVAL_CP, c.cp)
    if gbs is None or mbs is None or ecp is None or gbs < 1 or mbs < 1 or ecp < 1:
        return []
    emp = c.tp * c.pp * ecp
    if c.job.world_size % emp:
        return [
            f"world size {c.job.world_size} is not divisible by the eval model-parallel size TP*PP*eval CP = "
            f"{c.tp}*{c.pp}*{ecp} = {emp}; change {EVAL_CP}"
        ]
    edp = c.job.world_size // emp
    if gbs % (mbs * edp):
        return [
            f"eval global batch {gbs} is not divisible by eval micro batch * eval DP = {mbs}*{edp} = {mbs * edp}; "
            f"set validation.eval_global_batch_size to a multiple of {mbs * edp}"
        ]
    return []


# ------------------------------------------------------------------------------------------
# heads, query groups and experts against TP / CP / EP / ETP (the model description)


def _model(c: Ctx, *names):
    """The facts' integer values, or None when the model or any of them is unknown."""
    if c.facts is None or not c.sizes_ok:
        return None
    vals = [c.facts.int(n) for n in names]
    return None if any(v is None for v in vals) else vals


# transformer_config.py:1360-1373 divide by the attention heads and query groups (kv_channels =
# hidden_size // num_attention_heads; TP % num_query_groups) [ZeroDivisionError at 0];
# hybrid_layer_allocation.py:91 asserts num_layers > 0.
@rule(
    "model-sizes",
    "heads",
    f"{MC} megatron/core/transformer/transformer_config.py:1360-1373; "
    "megatron/core/models/hybrid/hybrid_layer_allocation.py:91",
)
def rule_model_sizes(c: Ctx) -> list:
    if c.facts is None:
        return []
    return [
        f"{c.facts.cite(n)} must be >= 1"
        for n in ("num_layers", "hidden_size", "attention.num_heads", "attention.num_query_groups")
        if c.facts.int(n) is not None and c.facts.int(n) < 1
    ]


# transformer_config.py:1351-1355: num_attention_heads % TP [ValueError].
@rule("heads-tp", "heads", f"{MC} megatron/core/transformer/transformer_config.py:1351-1355")
def rule_heads(c: Ctx) -> list:
    got = _model(c, "attention.num_heads")
    if not got or got[0] < 1 or got[0] % c.tp == 0:
        return []
    h = got[0]
    return [
        f"{c.facts.cite('attention.num_heads')} is not a multiple of TP={c.tp}; "
        f"valid TP values divide {h}: {_divisors(h)}"
    ]


# transformer_config.py:1366-1373: num_query_groups a multiple or a divisor of TP [ValueError].
@rule("query-groups-tp", "heads", f"{MC} megatron/core/transformer/transformer_config.py:1366-1373")
def rule_query_groups(c: Ctx) -> list:
    got = _model(c, "attention.num_query_groups")
    if not got:
        return []
    g = got[0]
    if g < 1 or g % c.tp == 0 or c.tp % g == 0:
        return []  # below 1: rule model-sizes
    return [
        f"{c.facts.cite('attention.num_query_groups')} is neither a multiple nor a divisor of "
        f"TP={c.tp}; use a TP that divides {g} or a multiple of it"
    ]


# transformer_config.py:1400-1403: Gated DeltaNet value heads % key heads; :1405-1414: key and value
# heads % (TP*CP) [AssertionError].
@rule("gdn-heads-tp-cp", "heads", f"{MC} megatron/core/transformer/transformer_config.py:1400-1414")
def rule_gdn_heads(c: Ctx) -> list:
    got = _model(c, "gdn.key_heads", "gdn.value_heads")
    if not got or min(got) < 1:
        return []
    if got[1] % got[0]:
        return [
            f"{c.facts.cite('gdn.value_heads')} (Gated DeltaNet value heads) is not a multiple of "
            f"{c.facts.cite('gdn.key_heads')}"
        ]
    n = c.tp * c.cp
    return [
        f"{c.facts.cite(f'gdn.{k}')} (Gated DeltaNet {k.replace('_', ' ')}) is not a multiple of TP*CP = "
        f"{c.tp}*{c.cp} = {n}; keep TP*CP a divisor of {v}"
        for k, v in zip(("key_heads", "value_heads"), got, strict=False)
        if v % n
    ]


# mamba_mixer.py:261, 269: Mamba heads and groups % TP; mamba_context_parallel.py:106-108, 119-130:
# heads per TP rank % CP, and groups per TP rank against CP (one divides the other).
@rule(
    "mamba-heads-tp-cp",
    "heads",
    f"{MC} megatron/core/ssm/mamba_mixer.py:261,269; megatron/core/ssm/mamba_context_parallel.py:106-108,118-130",
)
def rule_mamba(c: Ctx) -> list:
    got = _model(c, "mamba.num_heads", "mamba.num_groups")
    if not got:
        return []
    nh, ng = got
    errs = [
        f"{c.facts.cite(f'mamba.{k}')} is not a multiple of TP={c.tp}; valid TP values divide {v}: {_divisors(v)}"
        for k, v in (("num_heads", nh), ("num_groups", ng))
        if v % c.tp
    ]
    if errs or c.cp == 1:
        return errs
    if (nh // c.tp) % c.cp:
        errs.append(
            f"Mamba heads per TP rank ({nh} / TP {c.tp} = {nh // c.tp}) are not a multiple of CP={c.cp}; "
            f"keep TP*CP a divisor of {nh}"
        )
    g = ng // c.tp
    if g < 1:
        return errs
    if (g < c.cp and c.cp % g) or (g >= c.cp and g % c.cp):
        errs.append(f"Mamba groups per TP rank ({ng} / TP {c.tp} = {g}) and CP={c.cp}: one must divide the other")
    return errs


# transformer_config.py:1500-1501: EP > 1 needs num_moe_experts [ValueError].
@rule("ep-needs-experts", "experts", f"{MC} megatron/core/transformer/transformer_config.py:1500-1501")
def rule_ep_needs_experts(c: Ctx) -> list:
    if c.facts is None or not c.sizes_ok or c.ep <= 1:
        return []
    f = c.facts.facts.get("moe.num_experts")
    if f is None and c.facts.name == "job config":
        return []  # the recipe function may set experts the job does not show
    if f is not None and (f.value is not None or "interpolation" in f.source):
        return []
    return [
        f"{EP}={c.ep} but the model has no experts ({f.source if f else c.facts.where}); num_moe_experts must be "
        f"set to use expert parallelism: set {EP}=1"
    ]


# moe_layer.py:185: num_moe_experts % EP [AssertionError].
@rule(
    "experts-ep",
    "experts",
    f"{MC} megatron/core/transformer/moe/moe_layer.py:185; megatron/core/transformer/transformer_config.py:1583-1584",
)
def rule_experts(c: Ctx) -> list:
    got = _model(c, "moe.num_experts")
    if not got:
        return []
    e = got[0]
    if e < 1:  # transformer_config.py:1583-1584
        return [f"{c.facts.cite('moe.num_experts')}: num_moe_experts must be positive"]
    if e % c.ep:
        return [
            f"{c.facts.cite('moe.num_experts')} is not divisible by EP={c.ep}; valid EP values divide "
            f"{e}: {_divisors(e)}"
        ]
    return []


# extensions/transformer_engine.py:2427-2431 (TEGroupedLinear): the expert FFN is split over ETP with divide().
@rule("expert-ffn-etp", "experts", f"{MC} megatron/core/extensions/transformer_engine.py:2427-2431")
def rule_expert_ffn(c: Ctx) -> list:
    got = _model(c, "moe.expert_ffn")
    if not got or c.etp == 1 or got[0] % c.etp == 0:
        return []
    return [
        f"{c.facts.cite('moe.expert_ffn')} (the expert FFN) is not divisible by ETP={c.etp}; valid ETP values divide "
        f"{got[0]}: {_divisors(got[0])}"
    ]


def _divisors(n: int, limit: int = 12) -> str:
    if n < 1:
        return "none"
    small = [d for d in range(1, min(n, 4096) + 1) if n % d == 0]
    return ", ".join(map(str, small[:limit])) + (", ..." if len(small) > limit else "")


# ------------------------------------------------------------------------------------------
# sequence lengths


# model_parallel_config.py:502-504: sequence parallelism needs TP > 1 [ValueError].
@rule("sp-needs-tp", "sequence", f"{MC} megatron/core/model_parallel_config.py:502-504", megatron=False)
def rule_sp_needs_tp(c: Ctx) -> list:
    if c.sp and c.tp is not None and c.tp <= 1:
        return [f"{SP}=true needs TP > 1 (got TP={c.tp}); set {SP}=false or raise {TP}"]
    return []


def _seq_values(c: Ctx) -> dict:
    """{value: [keys]} for the sequence lengths the job sets (run_recipe.py copies dataset's into
    the model's, recipe_runner.py:471-485, so both are what the model runs with)."""
    out: dict = {}
    for key in SEQ_KEYS:
        v = _int(c.cfg, key)
        if v is not None:
            out.setdefault(v, []).append(key)
    return out


def _data_seq(c: Ctx) -> str:
    """The dataset's sequence-length key this job sets (the pinned revision's name for it)."""
    return DATA_SEQUENCE if DATA_SEQUENCE in c.cfg and DATA_SEQ not in c.cfg else DATA_SEQ


def _seq_text(seq: int, keys: list) -> str:
    return " = ".join(keys) + f" = {seq}"


# config.py:1574-1577: with CP > 1, model.seq_length % (2*CP) [AssertionError]. For the SFT dataset
# kinds rule seq-collate-sft checks a multiple of 2*CP already (model.seq_length follows the dataset's).
@rule("seq-cp", "sequence", f"{MB} src/megatron/bridge/training/config.py:1574-1577", megatron=False)
def rule_seq_cp(c: Ctx) -> list:
    if not isinstance(c.cp, int) or c.cp <= 1:
        return []
    vals = _seq_values(c)
    if c.kind in SFT_COLLATE_KINDS and _int(c.cfg, _data_seq(c)) is not None:
        vals = {v: k for v, k in vals.items() if _data_seq(c) not in k}
    m = collate_multiple(c) if c.kind == "gpt" and c.sizes_ok else None  # with rule seq-sp-gpt's TP*CP
    m = m or 2 * c.cp
    return [
        f"{_seq_text(seq, keys)} is not divisible by 2*CP = {2 * c.cp}; use a multiple of {m}"
        + (f" (with sequence parallelism also of TP*CP = {c.tp * c.cp})" if m != 2 * c.cp else "")
        for seq, keys in vals.items()
        if seq % (2 * c.cp)
    ]


def collate_multiple(c: Ctx) -> int | None:
    """config.py:1354-1361: lcm over CP and eval CP of 2*CP (CP > 1) and, with sequence
    parallelism and TP > 1, TP*CP."""
    cps = {c.cp} | ({_int(c.cfg, EVAL_CP)} if c.cfg.get(EVAL_CP) is not None else set())
    if not all(isinstance(x, int) and x >= 1 for x in cps) or not isinstance(c.tp, int) or c.tp < 1:
        return None
    cp_multiples = [2 * s if s > 1 else 1 for s in cps]
    sp_multiples = [s * c.tp if c.sp and c.tp > 1 else 1 for s in cps]
    return math.lcm(*cp_multiples, *sp_multiples)


# config.py:1354-1372: SFT datasets (Energon, DirectHFSFT, MockVLMSFT): dataset.seq_length % the
# CP/SP collate padding multiple [ValueError].
@rule("seq-collate-sft", "sequence", f"{MB} src/megatron/bridge/training/config.py:1354-1372")
def rule_seq_collate(c: Ctx) -> list:
    data_seq = _data_seq(c)
    seq = _int(c.cfg, data_seq)
    m = collate_multiple(c)
    if c.kind not in SFT_COLLATE_KINDS or seq is None or not m or seq % m == 0:
        return []
    return [
        f"{data_seq}={seq} is not divisible by the CP/SP collate padding multiple {m} "
        f"({_collate_why(c)}); use a multiple of {m}, e.g. {-(-seq // m) * m}"
    ]


def _collate_why(c: Ctx) -> str:
    parts = []
    if c.cp > 1:
        parts.append(f"2*CP = {2 * c.cp}")
    if c.sp and c.tp > 1:
        parts.append(f"TP*CP = {c.tp * c.cp} with sequence parallelism")
    if c.cfg.get(EVAL_CP) is not None:
        parts.append(f"and the same for eval CP {c.cfg[EVAL_CP]}")
    return "lcm of " + ", ".join(parts)


# tensor_parallel/mappings.py:71-74 (_split_along_first_dim): with sequence parallelism each CP
# rank's s/CP tokens are split over TP [AssertionError]; for fixed-length GPT data that is
# seq % (TP*CP) (the SFT kinds pad to the collate multiple above instead).
@rule("seq-sp-gpt", "sequence", f"{MC} megatron/core/tensor_parallel/mappings.py:71-74")
def rule_seq_sp(c: Ctx) -> list:
    if c.kind != "gpt" or not c.sp or not c.sizes_ok or c.tp <= 1:
        return []
    n = c.tp * c.cp
    return [
        f"{_seq_text(seq, keys)}: with sequence parallelism each rank's {seq}/CP tokens are split over "
        f"TP={c.tp}, so the length must be a multiple of TP*CP = {n}; use a multiple of "
        f"{math.lcm(n, 2 * c.cp if c.cp > 1 else 1)}"
        for seq, keys in _seq_values(c).items()
        if seq % n and (c.cp == 1 or seq % (2 * c.cp) == 0)
    ]  # else seq-cp


# config.py:1632-1648: model.seq_length == dataset.seq_length for GPT, GPTSFT, DirectHFSFT, Energon
# and MockVLMSFT datasets [AssertionError].
@rule(
    "seq-equal",
    "sequence",
    f"{MB} src/megatron/bridge/training/config.py:1632-1648 (and scripts/training/recipe_runner.py:471-485)",
)
def rule_seq_equal(c: Ctx) -> list:
    data_seq = _data_seq(c)
    m, d = _int(c.cfg, MODEL_SEQ), _int(c.cfg, data_seq)
    if c.kind not in SEQ_EQUAL_KINDS or m is None or d is None or m == d:
        return []
    return [
        f"{MODEL_SEQ}={m} and {data_seq}={d} differ: ConfigContainer.validate() requires them equal for this "
        f"dataset (run_recipe.py would silently train at {d}); set both to the same value"
    ]


# ------------------------------------------------------------------------------------------
# pipeline and virtual pipeline


def _layouts_set(cfg) -> bool:
    return any(
        cfg.get(k) not in (None, False)
        for k in (
            "model.pipeline_model_parallel_layout",
            "model.num_layers_in_first_pipeline_stage",
            "model.num_layers_in_last_pipeline_stage",
        )
    )


# parallel_state.py:827-831: VPP needs PP > 1 [RuntimeError].
@rule("vpp-needs-pp", "pipeline", f"{MC} megatron/core/parallel_state.py:827-831")
def rule_vpp_needs_pp(c: Ctx) -> list:
    if c.vpp is not None and isinstance(c.pp, int) and c.vpp >= 1 and c.pp <= 1:
        return [f"{VPP}={c.vpp} needs {PP} > 1 (got {c.pp}); unset {VPP} or raise PP"]
    return []


# GPT: transformer_block.py:141-153 (layers, plus one each when the embedding / loss count as
# layers, % PP) and :155-173 (layers per PP rank % VPP) [AssertionError]. Hybrid (Mamba) models
# without '|' in the layer pattern: hybrid_layer_allocation.py:385-391 (no VPP) and :436-441
# (layers % PP) [ValueError].
@rule(
    "layers-pp-vpp",
    "pipeline",
    f"{MC} megatron/core/transformer/transformer_block.py:141-173; "
    "megatron/core/models/hybrid/hybrid_layer_allocation.py:385-391,436-441",
)
def rule_layers_pp(c: Ctx) -> list:
    got = _model(c, "num_layers")
    if not got or c.facts.family not in ("gpt", "hybrid") or _layouts_set(c.cfg):
        return []
    n, pp = got[0], c.pp
    vpp = c.vpp if (c.vpp or 0) >= 1 and pp > 1 else None
    if c.facts.family == "hybrid":
        if "|" in str(c.cfg.get("model.hybrid_layer_pattern") or c.cfg.get("model.hybrid_override_pattern") or ""):
            return []
        if vpp is not None:
            return [
                f"{VPP}={vpp}: the hybrid (Mamba) model's layer pattern has no '|' stage separators, and "
                f"Megatron refuses virtual pipeline stages without them; unset {VPP}"
            ]
        if n % pp:
            return [
                f"{c.facts.cite('num_layers')} is not divisible by PP={pp}; valid PP values divide {n}: {_divisors(n)}"
            ]
        return []
    total = (
        n
        + (c.cfg.get("model.account_for_embedding_in_pipeline_split") is True)
        + (c.cfg.get("model.account_for_loss_in_pipeline_split") is True)
    )
    what = c.facts.cite("num_layers") + (f" (+{total - n} for embedding/loss)" if total != n else "")
    if total % pp:
        return [f"{what} is not divisible by PP={pp}; valid PP values divide {total}: {_divisors(total)}"]
    if vpp is not None and (total // pp) % vpp:
        return [
            f"{what} gives {total // pp} layers per pipeline stage, not divisible by VPP={vpp}; valid VPP values "
            f"divide {total // pp}: {_divisors(total // pp)}"
        ]
    return []


# schedules.py:1142-1151: with VPP, microbatch_group_size_per_vp_stage (default PP,
# model_parallel_config.py) lies in [PP, M] [ValueError]; :1153-1162: the last group has 0 or >= PP
# microbatches [RuntimeError]. M = GBS / (MBS * DP).
@rule("vpp-microbatches", "pipeline", f"{MC} megatron/core/pipeline_parallel/schedules.py:1142-1162")
def rule_vpp_microbatches(c: Ctx) -> list:
    gbs, mbs = _int(c.cfg, GBS), _int(c.cfg, MBS)
    if (
        c.vpp is None
        or c.vpp < 1
        or not c.world_ok
        or c.pp <= 1
        or not gbs
        or not mbs
        or gbs < 1
        or mbs < 1
        or gbs % (mbs * c.dp)
    ):
        return []
    m = gbs // (mbs * c.dp)
    group = _int(c.cfg, "model.microbatch_group_size_per_vp_stage", c.pp)
    if group is None:
        return []
    if group > m or group < c.pp:
        return [
            f"interleaved pipeline: {m} microbatches per step (GBS {gbs} / (MBS {mbs} * DP {c.dp})) and "
            f"microbatch_group_size_per_vp_stage {group} must satisfy PP={c.pp} <= group <= microbatches; "
            f"raise {GBS} to at least {c.pp * mbs * c.dp}"
        ]
    rest = m % group
    if 0 < rest < c.pp:
        return [
            f"interleaved pipeline: {m} microbatches leave a last group of {rest} (< PP={c.pp}) with "
            f"microbatch_group_size_per_vp_stage {group}; use a {GBS} that gives a multiple of {group} "
            f"microbatches, e.g. {(m - rest + group) * mbs * c.dp}"
        ]
    return []


# ------------------------------------------------------------------------------------------
# precision and GPU type

# Megatron-Bridge training/mixed_precision.py @ 067f987: each registered config -> its quantization
# recipe (fp8_recipe, or nvfp4 for fp4); plain bf16/fp16 configs quantize nothing.
_PRECISION_RECIPES = {
    "bf16_mixed": None,
    "fp16_mixed": None,
    "bf16_with_fp8_delayed_scaling_mixed": "delayed",
    "fp16_with_fp8_delayed_scaling_mixed": "delayed",
    "bf16_with_mxfp8_mixed": "mxfp8",
    "fp16_with_mxfp8_mixed": "mxfp8",
    "bf16_with_fp8_current_scaling_mixed": "tensorwise",
    "nemotron_h_bf16_with_fp8_current_scaling_mixed": "tensorwise",
    "fp16_with_fp8_current_scaling_mixed": "tensorwise",
    "nanov2_bf16_with_fp8_current_scaling_mixed": "blockwise",
    "bf16_with_fp8_subchannel_scaling_mixed": "blockwise",
    "fp16_with_fp8_subchannel_scaling_mixed": "blockwise",
    "bf16_with_nvfp4_mixed": "nvfp4",
    "nemotron_3_super_bf16_with_nvfp4_mixed": "nvfp4",
}


def quantization_of(cfg: dict) -> str | None:
    """The job's quantization recipe: 'delayed' | 'tensorwise' | 'blockwise' | 'mxfp8' | 'nvfp4' |
    'custom', or None (no FP8/FP4): the registered mixed_precision config, then its fields."""
    name = cfg.get(PRECISION)
    base = _PRECISION_RECIPES.get(name.replace("-", "_")) if isinstance(name, str) else None
    fp4 = cfg["mixed_precision.fp4"] if "mixed_precision.fp4" in cfg else (base == "nvfp4" or None)
    if fp4:
        return str(cfg.get("mixed_precision.fp4_recipe") or "nvfp4").lower()
    fp8 = cfg["mixed_precision.fp8"] if "mixed_precision.fp8" in cfg else (base not in (None, "nvfp4") or None)
    if not fp8:
        return None
    recipe = cfg.get(FP8_RECIPE) or (
        base if base not in (None, "nvfp4") else "tensorwise"
    )  # MixedPrecisionConfig default
    return str(recipe).lower()


def precision_of(cfg: dict) -> str:
    """'nvfp4' | 'mxfp8' | 'fp8' | 'bf16' | 'fp16' | 'fp32': what the job computes in (plan's
    throughput assumptions are per precision)."""
    q = quantization_of(cfg)
    if q in ("nvfp4", "mxfp8"):
        return q
    if q:
        return "fp8"
    name = cfg.get(PRECISION)
    if isinstance(name, str):
        return "fp16" if name.replace("-", "_").startswith("fp16") else "bf16"
    if cfg.get("mixed_precision.bf16") is True:
        return "bf16"
    if cfg.get("mixed_precision.fp16") is True:
        return "fp16"
    return "bf16" if PRECISION not in cfg else "fp32"


# Transformer Engine transformer_engine/pytorch/quantization.py @ f2b6810 (the check every
# quantized autocast runs, check_recipe_support): compute capability each recipe needs.
_TE_NEEDS = {  # recipe -> (lowest compute capability, first one refused, what TE says)
    "delayed": ((8, 9), None, "FP8 (delayed scaling)", "compute capability 8.9 (Ada) or newer"),
    "tensorwise": ((8, 9), None, "FP8 (current scaling)", "compute capability 8.9 (Ada) or newer"),
    "blockwise": ((9, 0), None, "FP8 (block scaling)", "compute capability 9.0 (Hopper) or newer"),
    "mxfp8": ((10, 0), (12, 0), "MXFP8", "compute capability 10.x or 11.x (Blackwell datacenter GPUs)"),
    "nvfp4": ((10, 0), None, "NVFP4", "compute capability 10.0 (Blackwell) or newer"),
}


@rule(
    "precision-gpu",
    "precision",
    "Transformer Engine transformer_engine/pytorch/quantization.py@f2b6810:46-98 "
    "(check_fp8_support, check_mxfp8_support, check_nvfp4_support, check_fp8_block_scaling_support)",
    megatron=False,
)
def rule_precision(c: Ctx) -> list:
    q = quantization_of(c.cfg)
    cc = GPU_CC.get(c.job.gpu_type)
    if q not in _TE_NEEDS or cc is None:
        return []
    low, high, what, need = _TE_NEEDS[q]
    if cc >= low and (high is None or cc < high):
        return []
    return [
        f"{what} needs {need}, but cluster '{c.job.cluster}' has gpu_type {c.job.gpu_type} (compute capability "
        f"{cc[0]}.{cc[1]}); use a cluster whose GPUs support it or a bf16 recipe"
    ]


# config.py:1487-1498: fp8_param_gather with the MXFP8 recipe (no FSDP) needs
# reuse_grad_buf_for_mxfp8_param_ag [AssertionError].
@rule("mxfp8-param-gather", "precision", f"{MB} src/megatron/bridge/training/config.py:1487-1498")
def rule_mxfp8_param_gather(c: Ctx) -> list:
    cfg = c.cfg
    if (
        quantization_of(cfg) != "mxfp8"
        or cfg.get("ddp.use_megatron_fsdp") is True
        or cfg.get("dist.use_megatron_fsdp") is True
    ):
        return []
    named = isinstance(cfg.get(PRECISION), str) and cfg[PRECISION].replace("-", "_").endswith("mxfp8_mixed")
    gather = cfg.get("mixed_precision.fp8_param_gather", True if named else None)
    reuse = cfg.get("mixed_precision.reuse_grad_buf_for_mxfp8_param_ag", True if named else None)
    if gather is True and reuse is False:
        return [
            "mixed_precision.fp8_param_gather=true with the MXFP8 recipe needs "
            "mixed_precision.reuse_grad_buf_for_mxfp8_param_ag=true; set it, or fp8_param_gather=false"
        ]
    return []


# flex_dispatcher_backend.py:88-109 (validate_flex_dispatcher_backend, called by config.py:1650-1654):
# DeepEP needs compute capability 8.x/9.x or a B200/B300; HybridEP needs 8.x, 9.x or 10.x [ValueError].
@rule("flex-dispatcher-gpu", "precision", f"{MB} src/megatron/bridge/training/flex_dispatcher_backend.py:88-109")
def rule_flex_dispatcher(c: Ctx) -> list:
    cfg = c.cfg
    backend = cfg.get("model.moe_flex_dispatcher_backend")
    cc = GPU_CC.get(c.job.gpu_type)
    if cfg.get("model.moe_token_dispatcher_type") != "flex" or cc is None or not isinstance(backend, str):
        return []
    if backend == "deepep" and not (cc[0] in (8, 9) or c.job.gpu_type in ("b200", "b300")):
        return [
            f"model.moe_flex_dispatcher_backend=deepep runs on Ampere, Hopper, B200 and B300 GPUs, not on "
            f"{c.job.gpu_type} (cluster '{c.job.cluster}'); use hybridep or model.moe_token_dispatcher_type=alltoall"
        ]
    if backend == "hybridep" and cc[0] not in (8, 9, 10):
        return [
            f"model.moe_flex_dispatcher_backend=hybridep runs on compute capability 8.x-10.x GPUs, not on "
            f"{c.job.gpu_type} ({cc[0]}.{cc[1]}); use model.moe_token_dispatcher_type=alltoall"
        ]
    return []


# ------------------------------------------------------------------------------------------
# MTP and packing


def _packing(c: Ctx) -> bool:
    return PACKING_BUFFER in c.cfg and c.cfg[PACKING_BUFFER] is not None


# config.py:1334-1335: Energon native packing refuses MTP [ValueError]. A warning here: the shipped
# VL recipes keep MTP as their seed does, which runs a Megatron-Bridge after 067f987 (see the rule table).
@rule("mtp-packing", "mtp", f"{MB} src/megatron/bridge/training/config.py:1334-1335", level="warning")
def rule_mtp_packing(c: Ctx) -> list:
    mtp = c.facts.get("mtp_layers") if c.facts else _int(c.cfg, "model.mtp_num_layers")
    if not _packing(c) or not isinstance(mtp, int) or mtp <= 0:
        return []
    return [
        f"MTP ({_mtp_where(c, mtp)}) with Energon native packing: Megatron-Bridge {MB_COMMIT} refuses this "
        f"(config.py:1334); the container's Megatron-Bridge must be newer and its megatron-core carry "
        f"Megatron-LM#7611, else set model.mtp_num_layers=0"
    ]


def _mtp_where(c: Ctx, mtp: int) -> str:
    key = "model.mtp_num_layers"
    if key in c.cfg:
        return f"{key}={mtp}, {c.job.provenance.get('config', {}).get(key, 'job')}"
    return f"{mtp} layer{'s' if mtp != 1 else ''}, {c.facts.source('mtp_layers')}"


# transformer_config.py:2803-2807 and Bridge comm_overlap.py:516-518: the EP all-to-all overlap allows at
# most one MTP layer [AssertionError].
@rule(
    "mtp-a2a-overlap",
    "mtp",
    f"{MC} megatron/core/transformer/transformer_config.py:2803-2807; "
    f"{MB} src/megatron/bridge/training/comm_overlap.py:516-518",
)
def rule_mtp_overlap(c: Ctx) -> list:
    on = (
        c.cfg.get("model.overlap_moe_expert_parallel_comm") is True
        or c.cfg.get("comm_overlap.overlap_moe_expert_parallel_comm") is True
    )
    mtp = c.facts.get("mtp_layers") if c.facts else _int(c.cfg, "model.mtp_num_layers")
    if on and isinstance(mtp, int) and mtp > 1:
        return [
            f"overlap_moe_expert_parallel_comm allows at most one MTP layer, the model has {mtp}; "
            f"set model.mtp_num_layers=1 or turn the overlap off"
        ]
    return []


# config.py:1327-1344: Energon native packing needs micro batch 1, per-token loss, no averaging in
# the collective, no CUDA graphs, no pipeline parallelism [ValueError].
@rule(
    "packing",
    "packing",
    f"{MB} src/megatron/bridge/training/config.py:1327-1344 (and scripts/training/recipe_runner.py:350-370)",
)
def rule_packing(c: Ctx) -> list:
    if not _packing(c):
        return []
    cfg, errs = c.cfg, []
    on = f"{PACKING_BUFFER}={cfg[PACKING_BUFFER]} turns on Energon native packing, which needs"
    mbs = _int(cfg, MBS)
    if mbs is not None and mbs != 1:
        errs.append(f"{on} {MBS}=1 (got {mbs}); set {MBS}=1 or ~{PACKING_BUFFER}")
    if not _runner_syncs_cp_loss(c):  # else run_recipe.py sets both (rule runner-cp-loss-sync)
        if _bool(cfg, "model.calculate_per_token_loss") is False:
            errs.append(f"{on} model.calculate_per_token_loss=true")
        if _bool(cfg, "ddp.average_in_collective") is True:
            errs.append(f"{on} ddp.average_in_collective=false")
    graphs = [k for k in ("model.cuda_graph_impl", "model.vision_cuda_graph_impl") if cfg.get(k) not in (None, "none")]
    if graphs:
        errs.append(f"{on} no CUDA graphs; set {' and '.join(f'{k}=none' for k in graphs)}")
    if isinstance(c.pp, int) and c.pp > 1:
        errs.append(f"{on} {PP}=1 (got {c.pp})")
    return errs


# config.py:1319-1325 and :1443-1451: EnergonDatasetConfig.micro_batch_size equals the training and
# (with validation on) the eval micro batch [ValueError].
@rule("energon-micro-batch", "packing", f"{MB} src/megatron/bridge/training/config.py:1319-1325,1443-1451")
def rule_energon_mbs(c: Ctx) -> list:
    if c.kind != "energon":
        return []
    dmbs, mbs = _int(c.cfg, "dataset.micro_batch_size"), _int(c.cfg, MBS)
    if dmbs is None or mbs is None:
        return []
    if dmbs != mbs:
        return [f"dataset.micro_batch_size={dmbs} must equal {MBS}={mbs} for Energon data; set both to the same value"]
    emb = _int(c.cfg, "validation.eval_micro_batch_size", mbs)
    if c.cfg.get("dataset.do_validation") is not False and emb is not None and emb != dmbs:
        return [
            f"dataset.micro_batch_size={dmbs} must equal validation.eval_micro_batch_size={emb} for Energon data "
            f"with validation; set both to the same value"
        ]
    return []


def _runner_syncs_cp_loss(c: Ctx) -> bool:
    """recipe_runner.py:350-370: for fine-tuning datasets with CP (or eval CP) > 1, run_recipe.py
    sets model.calculate_per_token_loss=True and ddp.average_in_collective=False itself."""
    cps = [c.cp, _int(c.cfg, EVAL_CP)]
    return (
        c.job.mode in FINETUNE_MODES
        and c.kind in SFT_COLLATE_KINDS + ("gpt-sft",)
        and any(isinstance(x, int) and x > 1 for x in cps)
    )


# config.py:1578-1596 requires these for SFT with CP > 1; run_recipe.py forces them first
# (recipe_runner.py:350-370), so a value the job sets otherwise is silently replaced.
@rule(
    "runner-cp-loss-sync",
    "packing",
    f"{MB} src/megatron/bridge/training/config.py:1578-1596; scripts/training/recipe_runner.py:350-370",
    level="warning",
)
def rule_runner_cp_loss(c: Ctx) -> list:
    if not _runner_syncs_cp_loss(c):
        return []
    bad = [
        f"{k}={str(v).lower()}"
        for k, v, want in (
            ("model.calculate_per_token_loss", _bool(c.cfg, "model.calculate_per_token_loss"), True),
            ("ddp.average_in_collective", _bool(c.cfg, "ddp.average_in_collective"), False),
        )
        if v is not None and v != want
    ]
    if not bad:
        return []
    return [
        f"{' and '.join(bad)} will be replaced: run_recipe.py sets model.calculate_per_token_loss=true and "
        f"ddp.average_in_collective=false for fine-tuning with CP > 1, as ConfigContainer.validate() requires"
    ]


# ------------------------------------------------------------------------------------------
# checkpoints

ASYNC_FORMATS = ("torch_dist", "fsdp_dtensor")


# checkpoint.async_save: ConfigContainer.validate() asserts the format (config.py:1536-1539; the same
# at 987244934 and dd81e664e, :1281-1284), CheckpointConfig.finalize() the persistent worker
# (:601-603; :668-670); ckpt_format's default is torch_dist (Megatron-LM training_config.py:486).
@rule(
    "async-save",
    "checkpoint",
    f"{MB} src/megatron/bridge/training/config.py:601-603,1536-1539",
)
def rule_async_save(c: Ctx) -> list:
    if c.cfg.get("checkpoint.async_save") is not True:
        return []
    errs = []
    fmt = c.cfg.get("checkpoint.ckpt_format", "torch_dist")
    if fmt not in ASYNC_FORMATS and not (isinstance(fmt, str) and "${" in fmt):
        errs.append(
            f"checkpoint.async_save=true needs checkpoint.ckpt_format torch_dist or fsdp_dtensor, not {fmt}; "
            "Megatron-Bridge refuses it at start-up"
        )
    if c.cfg.get("checkpoint.use_persistent_ckpt_worker") is False:
        errs.append(
            "checkpoint.async_save=true needs checkpoint.use_persistent_ckpt_worker=true (Megatron-Bridge "
            "refuses it at start-up); drop checkpoint.use_persistent_ckpt_worker=false"
        )
    return errs


# ------------------------------------------------------------------------------------------
# the run's length, schedule and loggers: the finalize() checks validate() runs first (067f987
# training/config.py:1403-1406; the same checks at 987244934 and dd81e664e, other lines)


def _given(cfg: dict, key: str, unset=None) -> bool:
    v = cfg.get(key, unset)
    return v is not None and v != unset and not (isinstance(v, str) and "${" in v)


@rule("train-length", "schedule", f"{MB} src/megatron/bridge/training/config.py:469-481")
def rule_train_length(c: Ctx) -> list:
    given = [k for k in ("train.train_iters", "train.train_samples", "train.num_epochs") if _given(c.cfg, k)]
    if len(given) < 2:
        return []
    drop = " or ".join(f"~{k}" for k in given)
    return [
        f"{' and '.join(f'{k}={c.cfg[k]}' for k in given)}: Megatron-Bridge takes exactly one of train_iters, "
        f"train_samples and num_epochs and refuses more at start-up; drop one ({drop})"
    ]


@rule("lr-warmup", "schedule", f"{MB} src/megatron/bridge/training/config.py:418-438")
def rule_lr_warmup(c: Ctx) -> list:
    cfg, errs = c.cfg, []
    iters = [k for k in ("scheduler.lr_decay_iters", "scheduler.lr_wsd_decay_iters") if _given(cfg, k)]
    iters += ["scheduler.lr_warmup_iters"] if _given(cfg, "scheduler.lr_warmup_iters", 0) else []
    samples = [k for k in ("scheduler.lr_decay_samples", "scheduler.lr_wsd_decay_samples") if _given(cfg, k)]
    samples += ["scheduler.lr_warmup_samples"] if _given(cfg, "scheduler.lr_warmup_samples", 0) else []
    if iters and samples:
        errs.append(
            f"{', '.join(f'{k}={cfg[k]}' for k in samples)} with {', '.join(f'{k}={cfg[k]}' for k in iters)}: "
            "Megatron-Bridge refuses iteration- and sample-based schedule fields together at start-up; use one kind"
        )
    if _given(cfg, "scheduler.lr_warmup_fraction"):
        counts = [k for k in ("scheduler.lr_warmup_iters", "scheduler.lr_warmup_samples") if _given(cfg, k, 0)]
        if counts:
            errs.append(
                f"scheduler.lr_warmup_fraction={cfg['scheduler.lr_warmup_fraction']} with "
                f"{', '.join(f'{k}={cfg[k]}' for k in counts)}: Megatron-Bridge takes one warmup and refuses both at "
                f"start-up; add {' '.join(f'{k}=0' for k in counts)} or drop the fraction"
            )
    return errs


@rule("main-params-load", "checkpoint", f"{MB} src/megatron/bridge/training/config.py:598-599")
def rule_main_params_load(c: Ctx) -> list:
    if c.cfg.get("checkpoint.load_main_params_from_ckpt") is not True or c.cfg.get("checkpoint.load_optim") is False:
        return []
    return [
        "checkpoint.load_main_params_from_ckpt=true loads no optimizer state: Megatron-Bridge refuses it with "
        "checkpoint.load_optim true (its default) at start-up; add checkpoint.load_optim=false"
    ]


@rule("logger-names", "logger", f"{MB} src/megatron/bridge/training/config.py:686-687,710-711")
def rule_logger_names(c: Ctx) -> list:
    errs = []
    for on, name, what in (
        ("logger.mlflow_experiment", "logger.mlflow_run_name", "MLFlow"),
        ("logger.comet_project", "logger.comet_experiment_name", "Comet ML"),
    ):
        if c.cfg.get(on) and not c.cfg.get(name):
            errs.append(
                f"{on}={c.cfg[on]} turns {what} logging on without {name}, which Megatron-Bridge refuses at "
                f"start-up; add {name}=NAME"
            )
    return errs


# ------------------------------------------------------------------------------------------
# inputs: mock data and paths no container mount covers (warnings)

DATA_KEYS = (
    "dataset.path",
    "dataset.data_path",
    "dataset.blend",
    "dataset.blend_per_split",
    "dataset.path_to_cache",
    "dataset.per_dataset_sequences_path",
)
CHECKPOINT_KEYS = ("checkpoint.pretrained_checkpoint", "checkpoint.load", "checkpoint.save")


# blended_megatron_dataset_config.py:131-143: GPT data with neither blend nor blend_per_split is
# mock data (Bridge turns dataset.data_path into blend, config.py:305-313), and :137-144 then sets
# dataset.split to "1,1,1" whatever the job gave (the same lines at 2a75ac12 and 458c8d0e).
@rule(
    "mock-data",
    "inputs",
    f"{MC} megatron/core/datasets/blended_megatron_dataset_config.py:131-143; "
    f"{MB} src/megatron/bridge/training/config.py:305-313",
    level="warning",
)
def rule_mock_data(c: Ctx) -> list:
    if c.kind != "gpt" or any(
        c.cfg.get(k) not in (None, "", []) for k in ("dataset.blend", "dataset.blend_per_split", "dataset.data_path")
    ):
        return []
    steps = _int(c.cfg, "train.train_iters")
    split = c.cfg.get("dataset.split")
    runs = (
        f"; with mock data megatron-core runs dataset.split=1,1,1, not the {split} this job states"
        if split not in (None, "1,1,1")
        else ""
    )
    return [
        f"{c.job.recipe} trains on mock data (random tokens){f' for {steps:,} steps' if steps else ''}: no "
        "dataset.data_path, dataset.blend or dataset.blend_per_split is set; give dataset.data_path=PREFIX for real "
        f"data{runs}"
    ]


def container_paths(job) -> list | None:
    """The paths inside the job's container that mounts cover, or None when the job runs bare
    processes (every path of the node is visible)."""
    if not job.container:
        return None
    if job.backend == "lepton":
        return [str(m.get("mount_path")) for m in job.scheduler.get("mounts", []) if m.get("mount_path")]
    if job.backend == "dgxcloud":
        return [str(p.get("path")) for p in job.scheduler.get("pvcs", []) if p.get("path")]
    out = []
    for m in job.mounts:
        src, _, rest = m.partition(":")
        out.append(rest.split(":")[0] or src)
    args = [*job.scheduler.get("srun_args", []), *job.scheduler.get("sbatch_args", [])]
    if job.backend == "slurm" and "--no-container-mount-home" not in args:
        out.append(os.path.expanduser("~"))  # pyxis mounts the user's home unless told not to
    return out


def _paths(value) -> list:
    if isinstance(value, str):
        return [w for w in value.split() if w.startswith("/")]
    if isinstance(value, (list, tuple)):
        return [p for v in value for p in _paths(v)]
    if isinstance(value, dict):
        return [p for v in value.values() for p in _paths(v)]
    return []


def _covered(path: str, roots: list) -> bool:
    p = os.path.normpath(path)
    return any(p == os.path.normpath(r) or p.startswith(os.path.normpath(r).rstrip("/") + "/") for r in roots if r)


@rule(
    "unmounted-paths",
    "inputs",
    "the job's container mounts (Slurm pyxis --container-mounts and home mount, Lepton mounts, DGX Cloud PVCs)",
    level="warning",
    megatron=False,
)
def rule_unmounted(c: Ctx) -> list:
    roots = container_paths(c.job)
    if roots is None:
        return []
    out = []
    for key in DATA_KEYS + CHECKPOINT_KEYS:
        if c.job.provenance.get("config", {}).get(key) == "derived (run dir)":
            continue  # under job_root, which is always mounted
        v = c.cfg.get(key)
        if isinstance(v, str) and "${" in v:
            continue
        for path in _paths(v):
            if not _covered(path, roots):
                out.append(
                    f"{key}={path} is outside every container mount ({', '.join(roots) or 'none'}): the job "
                    f"will not see it; mount it (cluster container_mounts) or use a path under one of them"
                )
    return out


@rule(
    "relative-paths",
    "inputs",
    "where the job runs: local jobs start in their run dir (backends/local.py), Slurm containers in it "
    "(--container-workdir), bare Slurm steps where sbatch ran, none of them the user's directory",
    level="warning",
    megatron=False,
)
def rule_relative(c: Ctx) -> list:
    out = []
    for key in ("dataset.path", "dataset.data_path", "dataset.path_to_cache", *CHECKPOINT_KEYS):
        v = c.cfg.get(key)
        if not isinstance(v, str) or not v or "${" in v or "://" in v or v.split() != [v]:
            continue
        if not v.startswith(("/", "~")):
            out.append(
                f"{key}={v} is a relative path: the job resolves it in its own working directory on the "
                f"cluster (its run dir, in a container), not where you submit; give an absolute path"
            )
    return out


# ------------------------------------------------------------------------------------------


def sequence_errors(cfg: dict, *, kind: str | None) -> list:
    """Errors of the sequence-length rules alone, for a config of dataset kind `kind` (data inspect
    tries shorter lengths with them): they read the parallel sizes, the config and the kind only."""
    tp, pp, cp, ep, etp = _sizes(cfg)
    c = Ctx(
        job=None,
        cfg=cfg,
        tp=tp,
        pp=pp,
        cp=cp,
        ep=ep,
        etp=etp,
        vpp=_int(cfg, VPP, None),
        sp=cfg.get(SP) is True,
        facts=None,
        kind=kind,
    )
    return [e for r in RULES if r.family == "sequence" and r.level == "error" for e in r.fn(c)]


def rule_errors(job) -> list:
    """Errors of the rules alone (no preflight): for trying alternatives cheaply."""
    c = context(job)
    return [
        e
        for r in RULES
        if r.level == "error" and (not r.megatron or job.workload == "megatron-bridge")
        for e in r.fn(c)
    ]
