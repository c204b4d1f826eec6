"""Sizing an --until-done chain before it is submitted: how long a step, a save and an
evaluation take (plan's estimates, or --step-time), whether the segment and the signal lead fit
them, and how many segments the run needs.

Only a lead shorter than one step is refused, and only when an estimate exists: the trainer
acts on the signal at the end of its step (trainer_protocol.SIGNAL_CHECK), so such a segment
could never save. The rest are warnings that name the values that would fit.
"""

from __future__ import annotations

import math

from bridge_launch.core.errors import UsageError
from bridge_launch.plan import estimate as plan
from bridge_launch.plan import topology

# What a torch_dist save of Megatron's distributed optimizer holds per parameter: bf16 weights
# (2 bytes), fp32 main weights (4) and Adam's two fp32 moments (8).
CKPT_BYTES_PER_PARAM = 14
# An evaluation step is a forward pass: 2 of the 6 FLOPs per weight per token of a training step.
FORWARD_SHARE = 1 / 3


def _plan_step_seconds(job) -> tuple[float | None, object]:
    """plan's step time and architecture for this job, or (None, arch) when plan cannot tell."""
    try:
        arch = plan.arch_for(job)
        if arch is None:
            return None, None
        thr = plan.throughput(job, arch, topology.parallel_of(job))
    except (UsageError, KeyError, TypeError, ValueError, ZeroDivisionError):
        return None, None
    return (thr or {}).get("step_seconds"), arch


def _params(arch) -> int | None:
    try:
        return plan.total_params(arch)["total"]
    except (KeyError, TypeError, ValueError):
        return None


def _hms(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def estimate(job) -> dict:
    """The chain's estimates (None where unknown) and where each comes from."""
    c, cfg = job.chain, job.config
    step, source, arch = c.get("step_time"), "--step-time", None
    if step is None:
        step, arch = _plan_step_seconds(job)
        source = "plan's estimate" if step else None
    elif job.workload != "smoke":
        arch = _plan_step_seconds(job)[1]
    save = None
    gbps = job.profile.get("checkpoint_write_gbps_per_node") or 0
    params = _params(arch) if arch is not None else None
    if params and gbps:
        save = params * CKPT_BYTES_PER_PARAM / (gbps * 1e9 * job.nodes)
    evaluation = None
    interval, eval_iters = cfg.get("validation.eval_interval"), cfg.get("validation.eval_iters", 100)
    gbs = cfg.get("train.global_batch_size")
    if (
        step
        and isinstance(interval, int)
        and interval > 0
        and isinstance(eval_iters, int)
        and isinstance(gbs, int)
        and gbs
    ):
        eval_gbs = cfg.get("validation.eval_global_batch_size") or gbs
        evaluation = eval_iters * step * FORWARD_SHARE * eval_gbs / gbs
    limit, lead, iters = c.get("time_limit_s"), c["signal_lead"], c["train_iters"]
    usable = (limit - lead) if limit else None
    segments = math.ceil(iters * step / usable) if step and usable and usable > 0 else None
    return {
        "step_s": round(step, 3) if step else None,
        "step_source": source,
        "save_s": round(save, 1) if save else None,
        "save_source": (
            f"{params / 1e9:.1f}B parameters x {CKPT_BYTES_PER_PARAM} bytes at {gbps} GB/s per node "
            f"(profile checkpoint_write_gbps_per_node)"
        )
        if save
        else None,
        "eval_s": round(evaluation, 1) if evaluation else None,
        "segment_s": usable,
        "segments": segments,
    }


def check(job) -> tuple[list, list]:
    """(warnings, errors) for the chain's sizing."""
    c, cfg, e = job.chain, job.config, job.chain["estimate"]
    step, lead, limit = e["step_s"], c["signal_lead"], c.get("time_limit_s")
    warnings, errors = [], []
    if not step:
        return warnings, errors
    src = e["step_source"]
    if lead < step:
        errors.append(
            f"--signal-lead {lead} s is shorter than one training step (~{step:.0f} s, {src}): the trainer acts "
            f"on the signal only at the end of its step, so no segment could save; use --signal-lead "
            f"{math.ceil(step + (e['save_s'] or 0) + 30)} or more"
        )
        return warnings, errors
    need = step + (e["save_s"] or 0) + (e["eval_s"] or 0)
    if lead < need:
        parts = [f"one step (~{step:.0f} s)"]
        if e["save_s"]:
            parts.append(f"a save (~{e['save_s']:.0f} s)")
        if e["eval_s"]:
            parts.append(
                f"an evaluation (~{e['eval_s']:.0f} s, validation.eval_iters={cfg.get('validation.eval_iters', 100)})"
            )
        warnings.append(
            f"--signal-lead {lead} s is shorter than {' + '.join(parts)} = ~{need:.0f} s: a segment whose "
            f"signal lands on a slow step may not finish its save; --signal-lead {math.ceil(need * 1.2)} fits"
        )
    if limit:
        usable = limit - lead
        per_segment = int(usable // step)
        interval = cfg.get("checkpoint.save_interval")
        np_interval = cfg.get("checkpoint.non_persistent_save_interval") if c.get("non_persistent_dir") else None
        intervals = [x for x in (interval, np_interval) if isinstance(x, int) and not isinstance(x, bool) and x > 0]
        every = min(intervals) if intervals else None
        fit = max(1, per_segment // 2)
        if every is None:
            warnings.append(
                f"no periodic save (checkpoint.save_interval is not set): every segment's progress rests on "
                f"the signal save; checkpoint.save_interval={fit} saves about twice a segment "
                f"(~{per_segment} steps of ~{step:.0f} s fit in {_hms(usable)})"
            )
        elif every * step > usable:
            warnings.append(
                f"checkpoint.save_interval={every} x ~{step:.0f} s a step is {_hms(every * step)}, longer than "
                f"a segment ({_hms(usable)} before the signal): every segment's progress rests on the signal "
                f"save; checkpoint.save_interval={fit} saves about twice a segment"
            )
    return warnings, errors
