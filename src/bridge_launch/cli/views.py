"""Presentation: text and JSON views of jobs, runs, recipes and clusters.

Plain text when stdout is not a terminal (fast, pipeable); rich tables and syntax
highlighting only on a terminal, imported on that path alone."""

from __future__ import annotations

import json
import os
import sys
import time

from bridge_launch.backends.base import Artifact
from bridge_launch.core import pyxis, upstream
from bridge_launch.core.errors import UsageError


def is_tty() -> bool:
    return sys.stdout.isatty() and os.environ.get("TERM") != "dumb"


def dump_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def _model(job):
    """The model description the rules checked (models.py), for Megatron-Bridge jobs."""
    if job.workload != "megatron-bridge":
        return None
    from bridge_launch.spec import models

    return models.facts_for(job)


def job_view(job, artifact: Artifact) -> dict:
    """The --dry-run --output json object (and the basis of the text view)."""
    model = _model(job)
    return {
        "recipe": job.recipe,
        "upstream": job.upstream,
        "bridge_commit": job.bridge_commit,
        "core_commit": upstream.revision(job.bridge_commit).core if job.bridge_commit else None,
        "mode": job.mode,
        "workload": job.workload,
        "cluster": job.cluster,
        "backend": job.backend,
        "overlays": job.overlays,
        "nodes": job.nodes,
        "gpus_per_node": job.gpus_per_node,
        "world_size": job.world_size,
        "gpu_type": job.gpu_type,
        "container": job.container,
        "mounts": job.mounts,
        "run_dir": job.run_dir,
        "config": job.config,
        "env": job.env,
        "secrets": job.secrets,
        "secret_sources": job.secret_sources,
        "scheduler": job.scheduler,
        "provenance": job.provenance,
        "missing_inputs": job.missing_inputs,
        "model": model.as_dict() if model else None,
        "artifact": artifact.to_dict(),
        "warnings": job.warnings,
        "errors": job.errors,
        "upstream_status": job.upstream_status,
        "bridge_recipe_module": job.bridge_recipe_module,
    }


def fmt(value) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value)


def _table(rows: list[tuple[str, str, str]], indent: str = "  ", widest: int = 40) -> list[str]:
    """Three columns; a value longer than `widest` pushes its own row's third column out."""
    if not rows:
        return [indent + "(none)"]
    w = min(max(len(r[0]) for r in rows), 48)
    v = min(max(len(r[1]) for r in rows), widest) if any(r[2] for r in rows) else 0  # no column to line up
    return [f"{indent}{k:<{w}}  {val:<{v}}  {src}".rstrip() for k, val, src in rows]


def limit_lines(job) -> list[str]:
    """The save before the time limit and (--until-done) the chain, in words: the signal path,
    the resume rule, the stops, the estimates and what they rest on."""
    ls = job.limit_save
    out = [
        f"Time limit USR1 {ls['signal_lead']} s ({ls['lead_source']}) before it -> SIG{ls['exit_signal']} to the "
        "training processes on every node (torchrun is left alone), which save at the end of their step and "
        "exit (train.exit_signal_handler=true)"
    ]
    c = job.chain
    if c:
        cap = f", at most {c['max_segments']} segments" if c.get("max_segments") else ""
        out += [
            f"Until done segments resubmit themselves until train_iters={c['train_iters']}{cap}",
            f"           each segment loads the newest complete checkpoint ({', '.join(c['complete_files'])} in "
            "iter_N)",
            f"           stops after {c['max_no_progress']} segments in a row without a new checkpoint or "
            f"{c['max_restarts']} restarts after failures",
            "           measures its step and save times from its log and, where they need a longer lead, asks "
            "for the save that much earlier itself (status shows the figures)",
        ]
    else:
        out.append("           status says STOPPED (iteration N of M); `bridge-launch resume RUN` continues")
    e = ls.get("estimate") or {}
    parts = []
    if e.get("step_s"):
        parts.append(f"~{e['step_s']:.0f} s a step ({e['step_source']})")
    else:
        parts.append(f"step time unknown ({e.get('step_unknown') or 'unknown'}; --step-time)")
    if e.get("save_s"):
        parts.append(f"~{e['save_s']:.0f} s a save ({e['save_source']})")
    if e.get("save_async"):  # plan/sizing: async_save
        parts.append(
            "checkpoint.async_save: a periodic save blocks a step only for its copy to host memory; the save "
            "before the limit is finished before the trainer exits, so the lead holds all of it"
        )
    if e.get("eval_s"):
        parts.append(f"~{e['eval_s']:.0f} s an evaluation")
    if e.get("segments"):
        parts.append(f"about {e['segments']} segments to train_iters")
    out.append("           estimate: " + ", ".join(parts))
    return out


def reservation(job) -> tuple[float | None, str]:
    """(GPU-hours the submission may hold, a line saying how: nodes x GPUs x the time limit, and for
    an --until-done chain the segments plan expects, with the profile's cost of a GPU-hour)."""
    gpus = job.nodes * job.gpus_per_node
    size = f"{job.nodes} node{'s' if job.nodes != 1 else ''} x {job.gpus_per_node} GPUs = {gpus} GPUs"
    limit = (job.limit_save or {}).get("time_limit_s")
    if not limit:
        return None, f"{job.recipe} on {job.cluster}: {size}, no time limit"
    hours = gpus * limit / 3600
    text = f"{job.recipe} on {job.cluster}: {size} for up to {_clock(limit)} (the time limit) = {hours:,.0f} GPU-hours"
    segments = ((job.limit_save or {}).get("estimate") or {}).get("segments")
    if job.chain and segments:
        hours *= segments
        text += f"; --until-done: ~{segments:,} such jobs to train_iters (plan's estimate) = ~{hours:,.0f} GPU-hours"
    elif job.chain:
        text += " a segment; --until-done: as many segments as train_iters needs (no step time to count them)"
    cost = job.profile.get("gpu_hour_cost") or 0
    if cost:
        text += f", ~{cost * hours:,.0f} at {cost:g} a GPU-hour"
    return hours, text


def _clock(seconds: float) -> str:
    h, rest = divmod(int(seconds), 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}"


def storage_line(job) -> str | None:
    """The checkpoint storage the run will hold (plan's size of one torch_dist save and
    checkpoint.most_recent_k; Megatron-Bridge deletes the oldest once a new save completes, so
    one more is on disk while a save is written)."""
    gb = ((job.limit_save or {}).get("estimate") or {}).get("checkpoint_gb")
    if not gb:
        return None
    cfg = job.config
    keep = cfg.get("checkpoint.most_recent_k")
    size = f"~{gb:,.0f} GB a checkpoint"
    if isinstance(keep, int) and keep > 0:
        return (
            f"Storage    {size} x {keep} kept (checkpoint.most_recent_k) = ~{gb * keep / 1000:,.1f} TB, "
            f"~{gb * (keep + 1) / 1000:,.1f} TB while a save is written"
        )
    kept = "checkpoint.most_recent_k unset" if keep is None else f"checkpoint.most_recent_k={keep}"
    iters, every = cfg.get("train.train_iters"), cfg.get("checkpoint.save_interval")
    if isinstance(iters, int) and isinstance(every, int) and every > 0:
        saves = iters // every
        return (
            f"Storage    {size}, every one kept ({kept}): {saves} periodic saves to "
            f"train_iters = ~{gb * saves / 1000:,.1f} TB; set checkpoint.most_recent_k to bound it"
        )
    return f"Storage    {size}, every one kept ({kept})"


def job_text(job, artifact: Artifact, placeholder: str) -> str:
    rev = upstream.revision(job.bridge_commit)
    prov = job.provenance
    jsrc = prov["job"]
    lines = [
        f"Recipe     {job.recipe}"
        + (
            f"  (Megatron-Bridge @ {upstream.short(rev.bridge)}: --recipe {job.upstream}"
            + (f" --mode {job.mode}" if rev.takes_mode else "")
            + ")"
            if job.upstream
            else f"  (workload {job.workload})"
        ),
        *(
            [
                f"Upstream   {job.upstream_status}"
                + (f" Runs from --bridge-src {job.bridge_src} (checked to have it)." if job.bridge_src else "")
            ]
            if job.upstream_status
            else []
        ),
        *(
            [
                f"Function   {job.upstream} is bridge-launch's own "
                f"(workload/bridge_recipes/{job.bridge_recipe_module}, staged in the run dir): "
                f"workload/bridge_recipe_entry.py adds it to megatron.bridge.recipes, then runs {job.entry} "
                "with the arguments below"
            ]
            if job.bridge_recipe_module
            else []
        ),
        f"Cluster    {job.cluster} ({job.backend})",
        f"Size       {job.nodes} node{'s' if job.nodes != 1 else ''} x {job.gpus_per_node} "
        f"{'GPUs' if job.gpu_type != 'cpu' else 'processes'} = {job.world_size}  [{jsrc.get('nodes')}]",
        f"Container  {job.container or '(none: bare processes)'}  [{jsrc.get('container')}]",
    ]
    if job.overlays:
        lines.append(f"Overlays   {', '.join(job.overlays)}")
    model = _model(job)
    if model:
        lines.append(f"Model      {model.summary()}")
    sched = {
        k: job.scheduler[k] for k in ("partition", "account", "qos", "time", "reservation") if job.scheduler.get(k)
    }
    if sched:
        lines.append("Scheduler  " + "  ".join(f"{k}={v} [{jsrc.get(k, 'cluster')}]" for k, v in sched.items()))
    if job.backend in ("slurm", "lepton") and job.scheduler.get("segment"):  # NVLink domains: the segment
        from bridge_launch.plan import topology  # the renderers' import, on the path that shows a segment

        place = topology.segment_line(job)
        if place:
            choice = job.scheduler.get("segment_size") or "domain"
            lines.append(f"Placement  {place}  [segment_size {choice}: {jsrc.get('segment_size', 'cluster')}]")
    lines.append(f"Run dir    {job.run_dir}")
    if job.limit_save:
        lines += limit_lines(job)
    storage = storage_line(job)
    if storage:
        lines.append(storage)
    if job.backend == "slurm" and job.container:
        space = job.scheduler.get("image_space_gb", pyxis.IMAGE_SPACE_GB)
        lines.append(f"Image      {pyxis.materialise_line(job.container, space)}  [cluster:{job.cluster}]")
    if (job.scheduler or {}).get("health_check"):
        imex = (
            ", IMEX channels"
            if job.gpu_type != "cpu" and job.nodes > 1 and job.profile.get("nvlink_domain_nodes", 0) > 1
            else ""
        )
        fabric = ""
        if job.nodes > 1 and job.scheduler.get("health_fabric", True):
            c = job.profile["canary"]
            judged = (
                "not judged on gloo"
                if job.gpu_type == "cpu"
                else f"failing below {c['busbw_min_fraction']:.0%} of {c['busbw_gbps']:g} GB/s in a rack and of "
                f"{c.get('busbw_cross_rack_gbps', 0):g} GB/s across racks; 0: reported only"
            )
            fabric = f"; then an all-reduce over the {job.nodes} nodes and one across racks (one GPU a node, {judged})"
        retry = "the retry and " if job.retry else ("the next segment and " if job.chain else "")
        minutes = job.scheduler.get("health_minutes", pyxis.HEALTH_MINUTES)
        lines.append(
            f"Health     before torchrun, every node checks its GPUs (nvidia-smi -q: ECC, row remapping, count and "
            f"model; GPU-fault Xids in its kernel log){imex} and the paths of the job, in its image, at most "
            f"{minutes} min from the checks' start{fabric}; a failing node is left out of {retry}later submits"
            f"  [cluster:{job.cluster}]"
        )
    if job.retry:
        r = job.retry
        resume = f", resumed from {r['save']}" if r["save"] else ""
        lines.append(
            f"Retries    up to {r['max_restarts']} after flaky failures and node faults (--max-restarts), from the "
            f"batch script: resubmitted without the node the logs or the health step name{resume}; an attempt that "
            "saved a newer checkpoint uses up none; a deterministic failure never retries, an unknown one "
            + (
                "retries as a flaky one ([slurm] retry_unknown)"
                if job.scheduler.get("retry_unknown")
                else "only after it saved a newer checkpoint"
            )
            + " (the classes: logs/failures.py)"
        )
    lines.append(f"\nConfig ({len(job.config)} keys; each is passed to the job explicitly)")
    lines += _table([(k, fmt(v), prov["config"].get(k, "")) for k, v in job.config.items()])
    removed = [k for k, s in prov["config"].items() if s == "cli (removed)"]
    if removed:
        lines.append("  removed on the command line: " + ", ".join(removed))
    lines.append("\nEnvironment")
    lines += _table([(k, v, prov["env"].get(k, "")) for k, v in job.env.items()])
    if job.secrets:
        from bridge_launch import backends

        lines.append("\nSecrets (by name; values are written nowhere)")
        lines += _table([(n, text, src) for n, (text, src) in backends.secret_origins(job).items()], widest=120)
    if job.warnings:
        lines.append("\nWarnings")
        lines += [f"  ! {w}" for w in job.warnings]
    if job.errors:
        lines.append("\nErrors")
        lines += [f"  x {e}" for e in job.errors]
    lines.append(f"\n--- {artifact.kind}: {artifact.filename} (run id {placeholder} is allocated at submit) ---")
    return "\n".join(lines) + "\n"


def closing_text(job, artifact: Artifact) -> str:
    """The dry run's last lines, where a reader who does not page lands: what would be submitted, how
    long the text above is, and the warnings again, those a submit would refuse first."""
    what = f"{job.recipe} on {job.cluster}: {job.nodes} node(s) x {job.gpus_per_node}"
    staged = f" and {len(artifact.files)} staged file(s)" if artifact.files else ""
    lines = [
        f"\n=== dry run: nothing submitted. {what}; the {artifact.kind}{staged} above"
        + (f"; {len(job.warnings)} warning(s):" if job.warnings else "; no warnings")
    ]
    warned = sorted((f for f in job.findings if not f.error), key=lambda f: not f.blocks_submit)
    lines += [f"  ! {f.text}" for f in warned]
    return "\n".join(lines) + "\n"


def print_job(job, artifact: Artifact, placeholder: str) -> None:
    head = job_text(job, artifact, placeholder)
    lexer = "bash" if artifact.kind != "lepton-job" and artifact.kind != "dgxc-workload" else "json"
    # the artifact, then each staged file it calls by name, in full
    parts = [(head, artifact.text, lexer)]
    parts += [(f"\n--- staged: {rel} (in the run dir) ---\n", text, "bash") for rel, text in artifact.files.items()]
    if is_tty():
        from rich.console import Console
        from rich.syntax import Syntax

        console = Console()
        for title, text, lang in parts:
            console.print(title, markup=False, highlight=False, end="")
            console.print(Syntax(text, lang, word_wrap=True))
    else:
        sys.stdout.write("".join(title + text for title, text, _ in parts))


WHOLE = ("run", "experiment", "name", "job ids", "job id")  # names a user copies: never cut on a terminal
PAD_AT_MOST = 40  # off a terminal, a longer value pushes its own row's later columns out, not every row's


def table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    if is_tty():
        from rich.console import Console
        from rich.table import Table

        t = Table(title=title, title_justify="left")
        for i, c in enumerate(columns):
            if c in WHOLE:  # whole, so that it can be copied; the other columns wrap or shrink around it
                t.add_column(c, no_wrap=True, min_width=max([len(c), *(len(str(r[i])) for r in rows)]))
            else:
                t.add_column(c, overflow="fold")
        for r in rows:
            t.add_row(*[str(x) for x in r])
        Console().print(t)
        return
    widths = [
        max([len(c), *(len(str(r[i])) for r in rows if len(str(r[i])) <= PAD_AT_MOST)]) for i, c in enumerate(columns)
    ]
    out = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=False)).rstrip()]
    out += ["  ".join(str(x).ljust(w) for x, w in zip(r, widths, strict=False)).rstrip() for r in rows]
    sys.stdout.write("\n".join(out) + "\n")


# ------------------------------------------------------------------------------------------------
# status RUN: live metrics (runs/monitor.py reads them)
# ------------------------------------------------------------------------------------------------
def print_group(reg, group, runs) -> None:
    from bridge_launch.runs import monitor  # the runs layer: only `status` needs it (speed)

    print(
        f"\nexperiment  {group['name']}: {len(runs)} runs, submitted "
        f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(group['created']))}"
    )
    labels = {r.run_id: label for r, label in group["runs"]}
    for r in runs:
        lines = monitor.metric_lines(monitor.run_metrics(reg, r), r)
        if lines:
            print(f"\n{r.run_id} ({labels.get(r.run_id) or r.recipe})")
            for line in lines:
                print("  " + line)


def print_metrics(reg, run) -> None:
    """The live-metrics block of `status RUN`."""
    from bridge_launch.runs import monitor  # the runs layer: only `status` needs it (speed)

    if run.info.get("experiment"):
        print(f"experiment  {run.info['experiment']} ({run.info.get('member', '')})")
    m, log, job = monitor.run_metrics_and_log(reg, run)
    for line in monitor.metric_lines(m, run):
        print(line)
    for line in judged_lines(m, log, job):
        print(line)


def plan_expectation(job):
    """(What `plan` expects of a job's speed, judge/throughput.py Expectation, or None; why not)."""
    from bridge_launch.core.hardware import peak_tflops
    from bridge_launch.judge import throughput as T
    from bridge_launch.plan import estimate, rules

    thr, world, why = estimate.job_throughput(job)
    if thr is None:
        return None, why
    return T.from_plan(thr, world, peak_tflops(job.gpu_type, rules.precision_of(job.config))), ""


def judged_lines(m: dict, log, job) -> list[str]:
    """What `status RUN` adds from the same log tails: the speed against what `plan` expects (MFU
    where the GPU's peak is known; flagged beyond judge/throughput.py's tolerance) and the ranks
    that stay slower than the rest (judge/stragglers.py)."""
    from bridge_launch.judge import stragglers as strag
    from bridge_launch.judge import throughput as T

    out = []
    exp = None
    if job is not None and m.get("step") is not None:
        exp, _why = plan_expectation(job)
    if exp is not None and exp.tflops_per_gpu:
        now = m.get("tflops_per_gpu")
        if now is None and m.get("step_time_s") and exp.flops_per_step and exp.world:
            now = exp.flops_per_step / (exp.world * m["step_time_s"]) / 1e12
        text = f"plan        {exp.tflops_per_gpu:.4g} TFLOP/s/GPU expected ({exp.source})"
        if now is not None:
            slower = 1 - now / exp.tflops_per_gpu
            mfu = f", MFU {100 * now / exp.peak_tflops:.1f}%" if exp.peak_tflops else ""
            text += f"; now {now:.4g}{mfu}"
            if slower > T.TOLERANCE:
                text += (
                    f": {100 * slower:.0f}% slower, more than {100 * T.TOLERANCE:.0f}% "
                    "(check RUN --expect-plan says where the time went)"
                )
        out.append(text)
    if log is not None and (log.stragglers or any(t.option == "all" for t in log.timer_reports)):
        found = strag.find(log.stragglers, log.timer_reports, hosts=lambda: log.rank_hosts)
        out.append("stragglers  " + strag.render(found) + " (the logs' last 64 KiB)")
    return out


# ------------------------------------------------------------------------------------------------
# status --watch
# ------------------------------------------------------------------------------------------------
def watch_status(show, *, output: str, interval: float) -> int:
    """`status --watch`: show(output, shown) prints one view of status, refreshing the runs it
    shows and adding them to `shown`; repeated until every one of them has ended. With JSON,
    each view is one object on one line: {"time", "runs"}."""
    import contextlib
    import io

    if interval <= 0:
        raise UsageError(f"--interval {interval}: give more than 0 seconds")

    def frame():
        buf, seen = io.StringIO(), []
        with contextlib.redirect_stdout(buf):
            show(output, seen)
        done = all(r.finished for r in seen)
        if output == "json":
            return {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "runs": json.loads(buf.getvalue())}, done
        head = f"{time.strftime('%H:%M:%S')}  every {interval:g}s" + ("" if done else "; Ctrl-C stops") + "\n"
        return head + buf.getvalue(), done

    return watch(frame, interval=interval, json_mode=output == "json")


def watch(frame, *, interval: float, json_mode: bool) -> int:
    """Call frame() -> (text or JSON object, done) every `interval` seconds until done. On a
    terminal the text is redrawn in place; piped, each refresh follows the last; with JSON, each
    refresh is one object on one line."""
    tty = sys.stdout.isatty() and os.environ.get("TERM") != "dumb"
    try:
        while True:
            shown, done = frame()
            if json_mode:
                sys.stdout.write(json.dumps(shown, default=str, separators=(",", ":")) + "\n")
            elif tty:
                sys.stdout.write("\x1b[H\x1b[2J" + shown)
            else:
                sys.stdout.write(shown + ("" if shown.endswith("\n") else "\n") + "\n")
            sys.stdout.flush()
            if done:
                return 0
            time.sleep(interval)
    except KeyboardInterrupt:
        return 0
