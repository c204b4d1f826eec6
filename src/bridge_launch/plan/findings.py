"""plan's findings that submit enforces too, computed the same way for both:

- memory per GPU by plan's estimate: above 100% of the GPU is an error (with the estimate and
  what would fit; `--no-memory-check` turns it into a warning), above 90% a warning;
- TP (and expert TP) groups that leave a node, and EP groups under HybridEP that cross an
  NVLink domain: warnings.

`submit` (and --dry-run) place the groups with topology.py's arithmetic; `plan` passes the
groups megatron-core's RankGenerator built. tests/plan/test_topology.py holds the two equal, and
tests/plan/test_findings.py holds plan's findings equal to submit's on the same jobs.
"""

from __future__ import annotations

import dataclasses

from bridge_launch.core.errors import UsageError
from bridge_launch.plan import estimate as plan
from bridge_launch.plan import rules as validate
from bridge_launch.plan import topology
from bridge_launch.plan.estimate import WARN_FRACTION


def estimate(job, par: topology.Parallel):
    """(Arch, memory dict) by plan's estimate, or (Arch | None, None) with a reason in a note."""
    try:
        arch = plan.arch_for(job)
    except plan.ArchError as exc:
        return None, None, str(exc)
    if arch is None:
        return None, None, None
    try:
        return arch, plan.memory(job, arch, par), None
    except (OverflowError, ValueError, ZeroDivisionError) as exc:  # values far outside any real model
        return arch, None, f"no memory estimate for these values ({exc})"


def _fraction_text(mem: dict) -> str:
    return (
        f"about {mem['total_gib']:.0f} of {mem['capacity_gib']:.0f} GiB per GPU ({mem['fraction']:.0%}) on "
        f"pipeline stage {mem['stage']} by plan's estimate"
    )


def what_fits(job, arch, par: topology.Parallel, limit: int = 3) -> list:
    """Single changes that bring the estimate to 100% of the GPU or below and keep the job valid
    by every rule: (overrides text, memory dict), the smallest change first."""
    cfg = job.config
    mbs = validate._int(cfg, validate.MBS) or 1
    cands = []
    if cfg.get("model.recompute_granularity") != "full":
        cands.append(
            {
                "model.recompute_granularity": "full",
                "model.recompute_method": "uniform",
                "model.recompute_num_layers": 1,
            }
        )
    if mbs > 1:
        cands.append({validate.MBS: mbs // 2})
    for key, cur, cap in (
        (validate.CP, par.cp, None),
        (validate.TP, par.tp, job.gpus_per_node),
        (validate.EP, par.ep, None),
        (validate.PP, par.pp, None),
    ):
        for factor in (2, 4):
            v = cur * factor
            if cap is None or v <= cap:
                cands.append({key: v})
    out = []
    for change in cands:
        alt = dataclasses.replace(job, config={**cfg, **change})
        if validate.rule_errors(alt):
            continue
        try:
            apar = topology.parallel_of(alt)
            mem = plan.memory(alt, arch, apar)
        except (UsageError, OverflowError, ValueError, ZeroDivisionError):  # not offered if it cannot be estimated
            continue
        if mem["fraction"] is not None and mem["fraction"] <= 1:
            out.append((" ".join(f"{k}={validate_fmt(v)}" for k, v in change.items()), mem))
        if len(out) >= limit:
            break
    return out


def validate_fmt(v) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def findings(job, *, groups: dict | None = None, memory_check: bool = True) -> dict:
    """Errors, warnings and notes of plan's placement and memory estimate for a job whose parallel
    sizes fit its world size; also the pieces plan reports (parallel sizes, groups, spans, memory)."""
    par = topology.parallel_of(job)
    out = {
        "errors": [],
        "warnings": [],
        "notes": [],
        "parallel": par,
        "groups": groups,
        "spans": None,
        "domains": None,
        "memory": None,
        "arch": None,
    }
    if groups is None and par.world <= topology.MAX_RANKS:
        groups = topology.rank_groups(par)
        out["groups"] = groups
    if groups is not None:
        sp, facts, warns, notes = topology.placement(job, par, groups)
        placed = job.backend == "lepton" or job.backend == "slurm" and job.scheduler.get("segment")
        refusal = topology.segment_refusal(job, par, groups) if placed else None
        if refusal:
            out["errors"].append(refusal)
        out.update(spans=sp, domains=facts)
        out["warnings"] += warns
        out["notes"] += notes
    else:
        out["notes"].append(f"{par.world} ranks: rank groups not placed (more than {topology.MAX_RANKS})")
    arch, mem, why = estimate(job, par)
    out["arch"], out["memory"] = arch, mem
    if why:
        out["notes"].append(why)
    if mem and mem["fraction"] is not None and mem["fraction"] > WARN_FRACTION:
        if mem["fraction"] > 1:
            fits = what_fits(job, arch, par)
            fix = (
                "; would fit: "
                + ", or ".join(f"{t} (about {m['total_gib']:.0f} GiB, {m['fraction']:.0%})" for t, m in fits)
                if fits
                else "; no single change of CP, TP, EP, PP, micro batch or recompute fits: combine them or use more "
                "GPUs"
            )
            msg = f"memory: {_fraction_text(mem)} does not fit{fix}"
            if memory_check:
                out["errors"].append(msg + "; --no-memory-check submits anyway")
            else:
                out["warnings"].append(msg + " (--no-memory-check: submitting anyway)")
        else:
            out["warnings"].append(
                f"memory: {_fraction_text(mem)} is above {WARN_FRACTION:.0%}: allocator "
                f"fragmentation, NCCL buffers and CUDA graphs are not counted; raise TP/CP/EP/PP, "
                f"recompute more, or lower the micro batch"
            )
    return out


def check(job, gpu_count_ok: bool = True, memory_check: bool = True) -> tuple[list, list]:
    """(errors, warnings) of every rule, then plan's findings (memory per GPU, rank groups across
    nodes and NVLink domains; this module). When the GPU count itself is wrong (already one
    error), the rules that only restate it are left out."""
    c = validate.context(job)
    errors: list = []
    warnings: list = []
    for r in validate.RULES:
        if (r.world and not gpu_count_ok) or (r.megatron and job.workload != "megatron-bridge"):
            continue
        (errors if r.level == "error" else warnings).extend(r.fn(c))
    if c.world_ok and gpu_count_ok:
        found = findings(job, memory_check=memory_check)
        errors.extend(found["errors"])
        warnings.extend(found["warnings"])
    return errors, warnings
