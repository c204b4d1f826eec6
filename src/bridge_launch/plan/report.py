"""`bridge-launch plan`'s result: rank groups built by megatron-core (estimate.rank_groups), the
findings submit enforces (findings.py) computed again on those groups, memory per GPU and
throughput (estimate.py), as a JSON-able dict and as the text report."""

from __future__ import annotations

from bridge_launch.plan import findings as preflight
from bridge_launch.plan.estimate import rank_groups, throughput
from bridge_launch.plan.topology import parallel_of
from bridge_launch.plan.topology import short as _short
from bridge_launch.spec import models


def plan(job, *, tflops_per_gpu: float | None = None, token_budget: int | None = None) -> dict:
    """The whole plan of a resolved job as a JSON-able dict (see module docstring). Its errors and
    warnings are the job's, which is what submit reports: resolve computed plan's findings
    (findings.py) with topology.py's arithmetic; here they are computed again on the groups
    megatron-core built, for the group table and the memory breakdown, and tests hold the two equal."""
    par = parallel_of(job)
    groups, source = rank_groups(par)
    found = preflight.findings(job, groups=groups)
    arch, mem, thr = found["arch"], found["memory"], None
    notes = list(found["notes"])
    if arch is None and not notes:
        notes.append(
            f"no architecture known for recipe '{job.recipe}' ({job.hf_model or 'no hf_model'}): "
            "add it to src/bridge_launch/models.toml for memory and GPU-hour estimates"
        )
    if arch is not None:
        try:
            thr = throughput(job, arch, par, tflops_per_gpu=tflops_per_gpu, token_budget=token_budget)
        except (OverflowError, ValueError) as exc:
            notes.append(f"no throughput estimate for these values ({exc})")
    return {
        "recipe": job.recipe,
        "cluster": job.cluster,
        "nodes": job.nodes,
        "gpus_per_node": job.gpus_per_node,
        "world_size": job.world_size,
        "parallel": par.as_dict(),
        "groups": groups,
        "spans": found["spans"],
        "segment": found["domains"]["segment"],
        "domains": found["domains"],
        "model": models.facts_for(job).as_dict() if arch is not None else None,
        "memory": mem,
        "throughput": thr,
        "errors": list(job.errors),
        "warnings": list(job.warnings),
        "notes": notes,
        "source": source,
    }


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
    lines = [
        f"plan: {result['recipe']} on {result['cluster']}: {nodes} x {result['gpus_per_node']} GPUs "
        f"= {result['world_size']} ranks",
        "parallel: "
        + "  ".join(f"{k.upper()}={p[k]}" for k in ("tp", "cp", "pp", "dp", "ep", "etp", "edp"))
        + (f"  VPP={p['vpp']}" if p["vpp"] else "")
        + ("  SP" if p["sp"] else ""),
        f"ranks: {result['source']}",
    ]
    dom = d["nvlink_domain_nodes"]
    if result["segment"]:
        lines.append(
            f"NVLink: domains of {dom} nodes; segment {result['segment']} nodes"
            + ("" if d["segment_requested"] else " (not requested by this cluster)")
            + ("; HybridEP" if d["hybrid_ep"] else "")
        )
    else:
        lines.append("NVLink: " + (f"domains of {dom} nodes; the job fits in one node" if dom else "within each node"))
    lines.append("")
    lines.append(f"  {'group':6} {'size':>4} {'count':>5} {'nodes':>5} {'domains':>7}  ranks")
    for kind in ("tp", "cp", "ep", "etp", "pp", "dp", "dp_cp", "edp"):
        s = result["spans"][kind]
        flag = (
            " !"
            if (s["crosses_nodes"] and kind in ("tp", "etp")) or (s["crosses_domains"] and kind in d["nvlink_groups"])
            else ""
        )
        lines.append(
            f"  {kind:6} {s['size']:>4} {s['groups']:>5} {s['max_nodes']:>5} {s['max_domains']:>7}  "
            f"{_groups_line(result['groups'][kind])}{flag}"
        )
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
        lines.append(
            f"  {_num(pc['total'])} parameters ({_num(pc['experts'])} in experts), {_num(pc['per_gpu'])} per GPU; "
            f"{bp['dense']:.2f} bytes/param dense, {bp['expert']:.2f} expert"
            + (
                f" (distributed optimizer over {bp['dense_shard']} and {bp['expert_shard']} ranks)"
                if bp["distributed_optimizer"]
                else " (no distributed optimizer)"
            )
        )
        if mem["tokens_per_microbatch"]:
            lines.append(
                f"  activations for {mem['tokens_per_microbatch']:.0f} tokens per microbatch, "
                f"{mem['microbatches_in_flight']} in flight"
            )
    thr = result["throughput"]
    if thr:
        lines += [
            "",
            "throughput:",
            f"  {thr['tokens_per_step']:,} tokens/step, {_flops(thr['flops_per_token'])}/token, "
            f"{_flops(thr['flops_per_step'])}/step",
        ]
        if thr["steps"]:
            src = thr["budget_source"] or ""
            why = f"--tokens: {src}" if src.startswith("a budget of") else f"train.train_iters from {src or 'the job'}"
            lines.append(f"  {thr['steps']:,} steps = {_num(thr['tokens'])} tokens ({why})")
        if thr["tflops_assumption"]:
            lines.append(
                f"  at {thr['tflops_assumption']:g} TFLOP/s per GPU: {thr['step_seconds']:.2f} s/step"
                + (f", {thr['wall_hours']:,.1f} h wall, {thr['gpu_hours']:,.0f} GPU-hours" if thr["gpu_hours"] else "")
            )
            lines.append(f"  assumption: {thr['source']}")
            if thr["caveat"]:
                lines.append(f"  caveat: {thr['caveat']}")
        else:
            lines.append(f"  {thr['no_assumption']}")
    if result["notes"]:
        lines += [""] + [f"note: {n}" for n in result["notes"]]
    if result["warnings"]:
        lines += [""] + [f"warning: {w}" for w in result["warnings"]]
    if result["errors"]:
        lines += [""] + [f"error: {e}" for e in result["errors"]]
    return "\n".join(lines) + "\n"
