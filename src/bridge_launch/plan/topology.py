"""Rank layout of a resolved job with plain arithmetic: which global ranks form each TP, CP, EP,
PP and DP group, and which nodes and NVLink domains each group spans.

megatron-core's RankGenerator (parallel_state.py) builds the groups from the parallel sizes and
the order "tp-cp-ep-dp-pp" with generate_masked_orthogonal_rank_groups; `orthogonal_groups`
below is that computation in plain Python, so that `submit --dry-run` can place the groups
without importing megatron-core or torch. tests/plan/test_topology.py holds it equal to
megatron-core's RankGenerator over many layouts; `plan` still asks megatron-core itself.

Ranks are laid out as torchrun numbers them: node n holds ranks n*G .. n*G+G-1 (G GPUs per
node). A node's NVLink domain is its Slurm segment (`--segment`, the value the Slurm backend
requests), which Slurm places inside one domain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from bridge_launch.core.errors import UsageError
from bridge_launch.core.hardware import segment_size  # Megatron-Bridge's rule, where the groups are unknown
from bridge_launch.plan import rules as validate

ORDER = "tp-cp-ep-dp-pp"  # Megatron's default rank order (initialize_model_parallel)
MAX_RANKS = 65536  # larger worlds are not enumerated (groups are listed rank by rank)
KINDS = ("tp", "cp", "pp", "dp", "dp_cp", "ep", "etp", "edp")


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

    def at_world(self, world: int) -> "Parallel | None":
        """The same model-parallel sizes on another world size (data parallelism absorbs the
        difference); None where no rank layout exists there."""
        if world % (self.tp * self.pp * self.cp) or world % (self.etp * self.ep * self.pp):
            return None
        return replace(
            self, world=world, dp=world // (self.tp * self.pp * self.cp), edp=world // (self.etp * self.ep * self.pp)
        )

    def as_dict(self) -> dict:
        return {
            "tp": self.tp,
            "pp": self.pp,
            "cp": self.cp,
            "ep": self.ep,
            "etp": self.etp,
            "dp": self.dp,
            "edp": self.edp,
            "vpp": self.vpp,
            "sp": self.sp,
        }


def parallel_of(job) -> Parallel:
    """The job's parallel sizes, checked the way initialize_model_parallel checks them."""
    tp, pp, cp, ep, etp = validate._sizes(job.config, job.bridge_commit)
    for name, v in (("TP", tp), ("PP", pp), ("CP", cp), ("EP", ep), ("ETP", etp)):
        if v is None or v < 1:
            raise UsageError(
                f"plan needs integer parallel sizes >= 1; {name} is {v!r} (an interpolation or invalid value)"
            )
    world = job.world_size
    if world % (tp * pp * cp):
        raise UsageError(f"world size {world} is not divisible by TP*PP*CP = {tp * pp * cp}; no rank layout exists")
    if world % (etp * ep * pp):
        raise UsageError(
            f"world size {world} is not divisible by ETP*EP*PP = {etp * ep * pp}; no expert rank layout exists"
        )
    vpp = job.config.get(validate.VPP)
    vpp = vpp if isinstance(vpp, int) and not isinstance(vpp, bool) and vpp > 1 else None
    return Parallel(
        world=world,
        tp=tp,
        pp=pp,
        cp=cp,
        ep=ep,
        etp=etp,
        dp=world // (tp * pp * cp),
        edp=world // (etp * ep * pp),
        vpp=vpp,
        sp=job.config.get(validate.SP) is True,
    )


def orthogonal_groups(sizes: list, mask: list) -> list:
    """The rank groups of the masked dimensions, as megatron-core's
    generate_masked_orthogonal_rank_groups(world, sizes, mask) returns them: dimension i has
    stride prod(sizes[:i]); a group holds every combination of the masked dimensions' indices
    (the first dimension fastest), one group per combination of the others (likewise ordered)."""
    strides = [math.prod(sizes[:i]) for i in range(len(sizes))]

    def offsets(dims):
        out = [0]
        for size, stride in dims:
            out = [o + i * stride for i in range(size) for o in out]
        return out

    inside = offsets([(s, d) for s, d, m in zip(sizes, strides, mask, strict=False) if m])
    bases = offsets([(s, d) for s, d, m in zip(sizes, strides, mask, strict=False) if not m])
    return [[b + o for o in inside] for b in bases]


def generator_groups(tp: int, ep: int, dp: int, pp: int, cp: int, token: str, order: str = ORDER) -> list:
    """RankGenerator(tp, ep, dp, pp, cp, order).get_ranks(token), computed here."""
    size = {"tp": tp, "ep": ep, "dp": dp, "pp": pp, "cp": cp}
    names = order.split("-")
    for name, v in size.items():
        if name not in names:
            if v != 1:
                raise ValueError(f"{name}={v} is not in the order {order}")
            names.append(name)
    want = set(token.split("-"))
    return orthogonal_groups([size[n] for n in names], [n in want for n in names])


def rank_groups(par: Parallel) -> dict:
    """{kind: [[global ranks]...]} for tp, cp, pp, dp, dp_cp (the distributed optimizer's dense
    group), ep, etp, edp, as initialize_model_parallel builds them (a dense generator with CP,
    an expert generator with EP, parallel_state.py:858-895)."""
    dense = dict(tp=par.tp, ep=1, dp=par.dp, pp=par.pp, cp=par.cp)
    expert = dict(tp=par.etp, ep=par.ep, dp=par.edp, pp=par.pp, cp=1)
    return {
        "tp": generator_groups(**dense, token="tp"),
        "cp": generator_groups(**dense, token="cp"),
        "pp": generator_groups(**dense, token="pp"),
        "dp": generator_groups(**dense, token="dp"),
        "dp_cp": generator_groups(**dense, token="dp-cp"),
        "ep": generator_groups(**expert, token="ep"),
        "etp": generator_groups(**expert, token="tp"),
        "edp": generator_groups(**expert, token="dp"),
    }


ARITHMETIC_SOURCE = f"rank arithmetic of megatron-core's RankGenerator (order {ORDER})"


# ------------------------------------------------------------------------------------------
# where the groups land


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
            "widest": {"ranks": short(gs[worst]), "nodes": nodes[worst], "domains": domains[worst]},
        }
    return out


def short(ranks: list) -> str:
    """[0, 1, 2, 3] -> '0-3'; [0, 2, 4] -> '0,2,4' (strided groups stay explicit, trimmed)."""
    if len(ranks) > 1 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    text = ",".join(map(str, ranks[:8]))
    return text + (f",... ({len(ranks)} ranks)" if len(ranks) > 8 else "")


def hybrid_ep(cfg: dict) -> bool:
    return (
        cfg.get("model.moe_token_dispatcher_type") == "flex"
        and str(cfg.get("model.moe_flex_dispatcher_backend", "")).lower() == "hybridep"
    )


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


def nvlink_bound(job, par: Parallel) -> list[str]:
    """The kinds of rank group that must stay inside one NVLink domain: TP and expert TP (inside a
    node, so inside any domain), and EP under HybridEP, whose buffers live in multi-node NVLink."""
    return [k for k, size in (("tp", par.tp), ("etp", par.etp)) if size > 1] + (
        ["ep"] if hybrid_ep(job.config) and par.ep > 1 else []
    )


def fitting_segments(nodes: int, domain: int, gpn: int, groups: dict, critical: list) -> list[int]:
    """Every segment size (a divisor of the node count, at most one domain's nodes) that keeps
    every NVLink-bound group inside one segment."""
    return [
        d
        for d in range(1, min(domain, nodes) + 1)
        if nodes % d == 0 and all(_fits(groups[k], gpn, d) for k in critical)
    ]


def segment_rule(job, par: Parallel, groups: dict) -> int | None:
    """The --segment for the job (Slurm's, and Lepton's count_per_segment), by the job's
    segment_size (core/hardware.SEGMENT_SIZES; [slurm]/[lepton] segment_size, --segment-size):
    "domain", Megatron-Bridge's rule (067f987 scripts/performance/utils/executors.py:168-176: all the
    nodes when they fit one domain, so that the data-parallel collectives stay on multi-node NVLink;
    else the largest divisor that fits one), here also keeping every NVLink-bound group inside a
    segment (upstream's largest divisor <= 18 of -N 40 is 10, which splits HybridEP groups of 4 nodes
    across racks; this takes 5); "smallest", the smallest segment that keeps those groups whole, for
    racks with few free nodes each. None: no domains, or no segment keeps the groups inside
    (segment_refusal says so)."""
    return _pick(job.scheduler.get("segment_size"), _segment_sizes(job, par, groups))


def _pick(choice: str | None, fits: list[int]) -> int | None:
    """The segment a choice of SEGMENT_SIZES takes among the fitting ones (None: none fits)."""
    if not fits:
        return None
    return min(fits) if choice == "smallest" else max(fits)


def _segment_sizes(job, par: Parallel, groups: dict) -> list[int]:
    domain, nodes = int(job.profile.get("nvlink_domain_nodes") or 0), job.nodes
    if domain <= 1 or nodes <= 1:
        return []
    return fitting_segments(nodes, domain, job.gpus_per_node, groups, nvlink_bound(job, par))


def _fitting_of(job) -> list[int]:
    """_segment_sizes from the job alone; [] where the rank groups cannot be built (non-integer
    sizes, more than MAX_RANKS ranks)."""
    try:
        par = parallel_of(job)
    except UsageError:
        return []
    return _segment_sizes(job, par, rank_groups(par)) if par.world <= MAX_RANKS else []


def segment_of(job) -> int | None:
    """segment_rule from the job alone; Megatron-Bridge's rule (hardware.segment_size) where the
    rank groups cannot be built or none fits."""
    domain = int(job.profile.get("nvlink_domain_nodes") or 0)
    if domain <= 1 or job.nodes <= 1:
        return None
    return _pick(job.scheduler.get("segment_size"), _fitting_of(job)) or segment_size(job.nodes, domain)


def segment_line(job) -> str | None:
    """The dry run's line on the segment the job gets, why, and what the other choice would give;
    None where the job gets none (no domains, one node, or the profile's segment off)."""
    domain = int(job.profile.get("nvlink_domain_nodes") or 0)
    if job.backend not in ("slurm", "lepton") or not job.scheduler.get("segment") or domain <= 1 or job.nodes <= 1:
        return None
    choice = job.scheduler.get("segment_size") or "domain"
    fits = _fitting_of(job)
    size = _pick(choice, fits) or segment_size(job.nodes, domain)
    other = "smallest" if choice == "domain" else "domain"
    alt = _pick(other, fits)
    also = f" (segment_size {other}: segments of {alt})" if alt and alt != size else ""
    if job.backend == "lepton" and size == 1:  # backends/lepton.segment_config: a segment of 2 or more, or none
        return f"no segment_config: segments of one node keep the groups whole, Lepton places the workers freely{also}"
    flag = "--segment" if job.backend == "slurm" else "count_per_segment"
    if size == job.nodes:
        return (
            f"{flag}={size}: all {job.nodes} nodes in one NVLink domain of {domain}, every collective on NVLink; the "
            f"job waits for {size} free nodes in one rack{also}"
        )
    return (
        f"{flag}={size}: {job.nodes} nodes in {job.nodes // size} segments of {size}, each inside an NVLink domain "
        f"of {domain} with its TP/EP groups; the data-parallel collectives cross racks{also}"
    )


def segment_refusal(job, par: Parallel, groups: dict) -> str | None:
    """Why no segment keeps the job's NVLink-bound groups inside one domain, with the node counts
    near the job's that have one; None when one does (or there are no domains)."""
    domain, nodes, gpn = int(job.profile.get("nvlink_domain_nodes") or 0), job.nodes, job.gpus_per_node
    critical = nvlink_bound(job, par)
    if domain <= 1 or nodes <= 1 or not critical or fitting_segments(nodes, domain, gpn, groups, critical):
        return None
    sp = spans(groups, gpn, 1)
    widest = max(critical, key=lambda k: sp[k]["max_nodes"])
    work = []
    for n in sorted(range(max(1, nodes - 24), nodes + 25), key=lambda n: (abs(n - nodes), n)):
        other = par.at_world(n * gpn)
        if other is None or other.world > MAX_RANKS or n == nodes:
            continue
        if n == 1 or fitting_segments(n, domain, gpn, rank_groups(other), critical):
            work.append(n)
        if len(work) == 4:
            break
    return (
        f"no segment of <= {domain} nodes that divides {nodes} keeps every {_LABEL[widest]} group "
        f"({sp[widest]['size']} ranks over {sp[widest]['max_nodes']} nodes) inside one NVLink domain; "
        + (
            f"node counts that work: {', '.join(map(str, sorted(work)))}"
            if work
            else f"no node count does: keep {_LABEL[widest].split()[0]} <= {domain * gpn} ({domain} nodes x {gpn} GPUs)"
        )
    )


def placement(job, par: Parallel, groups: dict) -> tuple[dict, dict, list, list]:
    """(spans, domain facts, warnings, notes) for the job's placement.

    TP and expert TP must stay inside a node. Under HybridEP an EP group must also stay inside
    one NVLink domain; the domain a node lands in is its Slurm segment (node // segment)."""
    gpn, nodes = job.gpus_per_node, job.nodes
    domain = int(job.profile.get("nvlink_domain_nodes") or 0)
    segment = (segment_rule(job, par, groups) or segment_size(nodes, domain)) if domain > 1 and nodes > 1 else None
    requested = job.backend == "slurm" and bool(job.scheduler.get("segment"))
    unit = segment or 1  # without multi-node NVLink domains, NVLink ends at the node
    sp = spans(groups, gpn, unit)
    hybrid = hybrid_ep(job.config) and par.ep > 1
    critical = nvlink_bound(job, par)
    warns, notes = [], []

    for kind in ("tp", "etp"):
        s, label = sp[kind], _LABEL[kind]
        if s["crosses_nodes"]:
            warns.append(
                f"{label} groups of {s['size']} span {s['max_nodes']} nodes (ranks {s['widest']['ranks']} on "
                f"nodes {short(s['widest']['nodes'])}) but a node has {gpn} GPUs: {label} traffic leaves the "
                f"node on every layer; keep {label} <= {gpn}"
            )

    for kind in critical if segment else ():
        s = sp[kind]
        if not s["crosses_domains"]:
            continue
        need = math.ceil(s["size"] / gpn)
        if need > domain:
            fix = (
                f"a group of {s['size']} ranks needs {need} nodes, more than one {domain}-node NVLink domain; "
                f"keep {_LABEL[kind].split()[0]} <= {domain * gpn}"
            )
        else:
            good = [
                g
                for g in range(min(domain, nodes), 0, -1)
                if nodes % g == 0 and all(_fits(groups[k], gpn, g) for k in critical)
            ]
            fix = (
                f"a segment of {good[0]} nodes (divides {nodes}, <= {domain}) keeps every group inside one domain"
                if good
                else f"no segment of <= {domain} nodes that divides {nodes} keeps them inside one domain"
            )
        warns.append(
            f"{_LABEL[kind]} groups cross NVLink domains: ranks {s['widest']['ranks']} sit on nodes "
            f"{short(s['widest']['nodes'])}, across the {segment}-node segment boundary; {fix}"
        )
    if segment and not requested and any(sp[k]["max_nodes"] > 1 for k in critical):
        notes.append(
            f"cluster '{job.cluster}' does not request --segment: the scheduler may split the job's nodes "
            f"across NVLink domains; the domains above assume {segment} consecutive nodes share one"
        )

    if hybrid:  # HybridEP is told how many EP ranks share a domain
        env = job.env.get("NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN")
        per_domain = max(_largest_share(g, gpn, unit) for g in groups["ep"])
        if env is not None and str(env).isdigit() and int(env) != per_domain:
            warns.append(
                f"NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN={env} but each EP group has {per_domain} ranks "
                f"inside one NVLink domain (EP={par.ep}); set it to {per_domain}"
            )
    facts = {
        "nvlink_domain_nodes": domain or None,
        "segment": segment,
        "segment_requested": requested,
        "hybrid_ep": hybrid,
        "nvlink_groups": critical,
    }
    return sp, facts, warns, notes
