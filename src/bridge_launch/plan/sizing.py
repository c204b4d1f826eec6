"""Sizing the save before a Slurm time limit (every job that has one, and every --until-done
chain): how long a step, a save and an evaluation take (plan's estimates, or --step-time), the
signal lead that holds them, whether a periodic save lands before the limit, and how many
segments a chain needs.

A job is refused (unless --force) only when no save can land before its limit: the lead cannot
hold a step and a save (the trainer acts on the signal at the end of its step,
trainer_protocol.SIGNAL_CHECK, then saves) and no periodic save fits either. What is not known
(no step time for the model, its precision and GPU) is said, not guessed.
"""

from __future__ import annotations

import math

from bridge_launch.core.errors import UsageError
from bridge_launch.job.step_shape import step_shape
from bridge_launch.plan import estimate as plan
from bridge_launch.plan import topology
from bridge_launch.workloads import trainer_protocol as P

# What a torch_dist save of Megatron's distributed optimizer holds per parameter: bf16 weights
# (2 bytes), fp32 main weights (4) and Adam's two fp32 moments (8).
CKPT_BYTES_PER_PARAM = 14
# An evaluation step is a forward pass: 2 of the 6 FLOPs per weight per token of a training step.
FORWARD_SHARE = 1 / 3
# checkpoint.async_save (Megatron-LM's default False, training_config.py:516 at 2a75ac12c; no seed
# recipe sets it): Megatron-Bridge accepts it with torch_dist or fsdp_dtensor (config.py:1281-1284 at
# 987244934 and dd81e664e, :1536-1539 at 067f987) and the persistent worker (:668-670; :601-603); a
# periodic save then blocks the step only for the copy to host memory, but the save on the exit
# signal is finalized, blocking, before the trainer exits (train.py:767,783; :793,809), so the lead
# still holds a whole save. bridge-launch leaves it as the recipe has it; the dry run says which.
# The lead rule is the one the segments apply to what they measure (workloads/step_times.py).
DEFAULT_LEAD, LEAD_MARGIN, UNKNOWN_STEP_ALLOWANCE = P.DEFAULT_LEAD, P.LEAD_MARGIN, P.UNKNOWN_STEP_ALLOWANCE


def _plan_step(job) -> tuple[float | None, object, str | None]:
    """plan's step time, the architecture, and where the step time comes from (or why there is
    none) for this job."""
    try:
        arch = plan.arch_for(job)
        if arch is None:
            return None, None, f"plan has no architecture for recipe {job.recipe}"
        thr = plan.throughput(job, arch, topology.parallel_of(job)) or {}
    except (UsageError, KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        return None, None, f"plan cannot estimate this job ({exc})"
    step = thr.get("step_seconds")
    if not step:
        why = thr.get("no_assumption") or f"plan has no throughput figure for {job.recipe} on {job.gpu_type}"
        return None, arch, why
    basis = f"plan's estimate at {thr['tflops_assumption']:g} TFLOP/s/GPU, {thr['source']}"
    if thr.get("caveat"):
        basis += f"; {thr['caveat']}"
    return step, arch, basis


def _params(arch) -> int | None:
    try:
        return plan.total_params(arch)["total"]
    except (KeyError, TypeError, ValueError):
        return None


def _hms(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def measured(job, candidates) -> dict | None:
    """The figures of the newest past run (runs/measured.candidates) of the job's own step shape:
    {"run", "step_s", "save_s"}, or None."""
    shape = step_shape(job)
    for run_id, their_shape, step, save in candidates:
        if their_shape == shape and (step or save):
            return {"run": run_id, "step_s": step, "save_s": save}
    return None


def estimate(job) -> dict:
    """The estimates (None where unknown) and where each comes from: --step-time, else what a past
    run of the same step shape measured (limit_save's "measured"), else plan's estimate; a save as
    measured, else the checkpoint's size at the profile's write rate."""
    ls, cfg, m = job.limit_save, job.config, job.limit_save.get("measured") or {}
    step, source, arch, unknown = ls.get("step_time"), "--step-time", None, None
    if step is None and m.get("step_s"):
        step, source = m["step_s"], f"measured by run {m['run']}"
        arch = _plan_step(job)[1] if job.workload != "smoke" else None
    elif step is None:
        step, arch, said = _plan_step(job)
        source, unknown = (said, None) if step else (None, said)
    elif job.workload != "smoke":
        arch = _plan_step(job)[1]
    save = None
    gbps = job.profile.get("checkpoint_write_gbps_per_node") or 0
    params = _params(arch) if arch is not None else None
    if params and gbps:
        save = params * CKPT_BYTES_PER_PARAM / (gbps * 1e9 * job.nodes)
    save_source = (
        f"{params / 1e9:.1f}B parameters x {CKPT_BYTES_PER_PARAM} bytes at {gbps} GB/s per node x "
        f"{job.nodes} nodes (profile checkpoint_write_gbps_per_node)"
        if save
        else None
    )
    if m.get("save_s"):
        save, save_source = m["save_s"], f"measured by run {m['run']}, its slowest save"
    evaluation = None
    interval, eval_iters = cfg.get("validation.eval_interval"), cfg.get("validation.eval_iters", 100)
    gbs = cfg.get("train.global_batch_size")
    eval_gbs = cfg.get("validation.eval_global_batch_size") or gbs  # a value still to interpolate: unknown
    if (
        step
        and isinstance(interval, int)
        and interval > 0
        and isinstance(eval_iters, int)
        and isinstance(gbs, int)
        and gbs
        and isinstance(eval_gbs, int)
    ):
        evaluation = eval_iters * step * FORWARD_SHARE * eval_gbs / gbs
    return {
        "step_s": round(step, 3) if step else None,
        "step_source": source,
        "step_unknown": unknown,
        "save_s": round(save, 1) if save else None,
        "save_source": save_source,
        "eval_s": round(evaluation, 1) if evaluation else None,
        "checkpoint_gb": round(params * CKPT_BYTES_PER_PARAM / 1e9, 1) if params else None,
        "save_async": cfg.get("checkpoint.async_save") is True,
    }


def lead(job) -> tuple[int, str]:
    """The signal lead and where it comes from: --signal-lead as given; else the larger of
    DEFAULT_LEAD and LEAD_MARGIN x (a step + a save + an evaluation), in whole 10 s (with
    UNKNOWN_STEP_ALLOWANCE for a step nobody can estimate)."""
    ls, e = job.limit_save, job.limit_save["estimate"]
    if ls.get("signal_lead") is not None:
        return ls["signal_lead"], ls.get("lead_source") or "--signal-lead"
    sized = P.sized_lead(e["step_s"], e["save_s"], e["eval_s"])
    if sized <= DEFAULT_LEAD:
        return DEFAULT_LEAD, "default"
    what = " + ".join(
        n for n, v in (("a step", e["step_s"]), ("a save", e["save_s"]), ("an evaluation", e["eval_s"])) if v
    )
    extra = "" if e["step_s"] else f" + {UNKNOWN_STEP_ALLOWANCE} s for a step of unknown length"
    return sized, f"sized: {LEAD_MARGIN:g} x ({what}){extra}"


def segments(job) -> int | None:
    """How many segments a chain needs to reach train_iters (None when the step time is unknown)."""
    ls, c = job.limit_save, job.chain
    step, limit = ls["estimate"]["step_s"], ls.get("time_limit_s")
    usable = (limit - ls["signal_lead"]) if limit else None
    return math.ceil(c["train_iters"] * step / usable) if c and step and usable and usable > 0 else None


def _interval(job) -> int | None:
    """The most frequent periodic save (persistent or, for a chain, non-persistent) in steps."""
    cfg = job.config
    np_interval = (
        cfg.get("checkpoint.non_persistent_save_interval")
        if job.chain and job.chain.get("non_persistent_dir")
        else None
    )
    intervals = [
        x
        for x in (cfg.get("checkpoint.save_interval"), np_interval)
        if isinstance(x, int) and not isinstance(x, bool) and x > 0
    ]
    return min(intervals) if intervals else None


def check(job, force: bool = False) -> tuple[list, list]:
    """(warnings, errors) for the save before the limit; with force, errors become warnings."""
    ls, cfg, e = job.limit_save, job.config, job.limit_save["estimate"]
    step, save, lead_s, limit = e["step_s"], e["save_s"], ls["signal_lead"], ls.get("time_limit_s")
    warnings: list = []
    errors: list = []
    refuse = warnings if force else errors
    tail = " (--force submitted it anyway)" if force else "; --force submits it anyway"
    every = _interval(job)
    what = "segment" if job.chain else "job"
    if not step:
        if job.chain and job.workload == "megatron-bridge":  # a plain job's dry run says it in its estimate line
            warnings.append(
                f"no step time for this {what}: {e['step_unknown']}; "
                f"whether checkpoint.save_interval={every} lands before the limit is unknown; --step-time SECONDS "
                f"sizes it (the signal lead is {lead_s} s, {ls['lead_source']})"
            )
        if save and lead_s < save:
            msg = (
                f"--signal-lead {lead_s} s cannot hold a save (~{save:.0f} s: {e['save_source']}), so the save "
                f"at the time limit cannot finish"
            )
            if every is None:
                refuse.append(
                    f"{msg} and there is no periodic save: no save can land before the limit; "
                    f"--signal-lead {math.ceil(LEAD_MARGIN * save + UNKNOWN_STEP_ALLOWANCE)} or more fits{tail}"
                )
            else:
                warnings.append(f"{msg}; only checkpoint.save_interval={every} can save")
        return warnings, errors
    src = e["step_source"]
    need = step + (save or 0) + (e["eval_s"] or 0)
    usable = (limit - lead_s) if limit else None
    periodic_fits = every is not None and usable is not None and every * step + (save or 0) <= usable
    if limit and job.chain:  # every segment needs its own save: one that fits a segment
        periodic_fits = every is not None and every * step <= usable
    lead_holds_save = lead_s >= step + (save or 0)
    if not lead_holds_save and not periodic_fits:
        fixes = [f"--signal-lead {math.ceil(LEAD_MARGIN * need)}"]
        if usable and usable > step:
            fixes.append(f"checkpoint.save_interval={max(1, int(usable // step) // 2)}")
        refuse.append(
            f"no save can land before the time limit: --signal-lead {lead_s} s is shorter than a step and a save "
            f"(~{step:.0f} s, {src}; + ~{save or 0:.0f} s) and "
            + (
                "there is no periodic save"
                if every is None
                else f"checkpoint.save_interval={every} x ~{step:.0f} s is past the limit"
            )
            + f"; {' or '.join(fixes)} fits{tail}"
        )
        return warnings, errors
    if not lead_holds_save:
        warnings.append(
            f"--signal-lead {lead_s} s is shorter than a step and a save (~{step + (save or 0):.0f} s): the save at "
            f"the time limit cannot finish, and what the {what} trained since its last periodic save "
            f"(checkpoint.save_interval={every}) is lost; --signal-lead {math.ceil(LEAD_MARGIN * need)} fits"
        )
    elif lead_s < need:
        parts = [f"one step (~{step:.0f} s)"]
        if save:
            parts.append(f"a save (~{save:.0f} s)")
        if e["eval_s"]:
            parts.append(
                f"an evaluation (~{e['eval_s']:.0f} s, validation.eval_iters={cfg.get('validation.eval_iters', 100)})"
            )
        warnings.append(
            f"--signal-lead {lead_s} s is shorter than {' + '.join(parts)} = ~{need:.0f} s: a {what} whose "
            f"signal lands on a slow step may not finish its save; --signal-lead {math.ceil(need * 1.2)} fits"
        )
    if limit and job.chain and usable:
        per_segment = int(usable // step)
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
    iters = cfg.get("train.train_iters")
    if limit and not job.chain and usable and usable > 0 and isinstance(iters, int) and iters * step > usable:
        total = iters * step
        wall = f"{total / 3600:,.0f} h" if total > 48 * 3600 else _hms(total)
        warnings.append(
            f"train.train_iters={iters} x ~{step:.3g} s a step ({src.split(',')[0]}) is ~{wall} of training, "
            f"past the time limit ({_hms(limit)}): the job stops near iteration {int(usable // step)}, its "
            f"time-limit save keeping it; --until-done continues across limits "
            f"(~{math.ceil(total / usable):,} jobs), or resume it"
        )
    return warnings, errors
