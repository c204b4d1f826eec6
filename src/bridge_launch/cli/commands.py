"""What each CLI command does, given parsed arguments. Returns the exit code."""

from __future__ import annotations

import os
import re
import sys
import time

from bridge_launch.cli import views
from bridge_launch.core.errors import UsageError
from bridge_launch.job.resolved import RUN_ID_PLACEHOLDER, replace_text


def _err(msg: str) -> None:
    sys.stderr.write(f"bridge-launch: error: {msg}\n")


def submit(recipe, opts, *, dry_run, follow, output, yes=False) -> int:
    """One job: `opts` is resolve.Options (the job-shaping options, resolve/options.py)."""
    from bridge_launch import backends
    from bridge_launch.resolve import resolver as resolve

    job = _checked(recipe, opts)
    if dry_run:
        artifact = backends.render(job)
        if output == "json":
            view = views.job_view(job, artifact)
            if job.canary:
                from bridge_launch.runs import canary as _canary

                view["canary"] = _canary.view(job, artifact)
            views.dump_json(view)
        elif job.errors:
            for e in job.errors:
                _err(e)
        else:
            views.print_job(job, artifact, resolve.RUN_ID_PLACEHOLDER)
            if job.canary:
                from bridge_launch.runs import canary as _canary

                sys.stdout.write(_canary.dry_run_text(job, artifact))
            sys.stdout.write(views.closing_text(job, artifact))
        return 2 if job.errors else 0
    if job.refusals:  # the same job the dry run shows; some of its warnings block a submit
        return _refused(job.refusals, output)
    hours, line = views.reservation(job)
    threshold = job.profile.get("confirm_gpu_hours") or 0
    if threshold and hours is not None and hours > threshold and not _confirmed(yes, output, [line], "Submit it?"):
        return 1
    from bridge_launch.runs import lifecycle as launch

    return _submitted(launch.submit(job), job, follow, output)


def _checked(recipe, opts):
    """The resolved job, with the cluster's bad nodes left out, its save before the limit sized on
    what past runs of its step shape measured, and --bridge-src checked: what one submit and each run
    of an experiment go through alike."""
    import dataclasses

    from bridge_launch.resolve import resolver as resolve
    from bridge_launch.runs import measured

    opts = dataclasses.replace(
        opts, bad_nodes=_bad_nodes(opts.cluster), measured=measured.candidates(recipe, opts.cluster)
    )
    job = resolve.resolve(recipe, opts)
    if job.bridge_src:
        from bridge_launch.runs import codepack

        # one clear line now, not after the run is reserved; a recipe upstream lacks must be in the checkout
        codepack.checkout(
            job.bridge_src,
            needs=job.upstream if job.upstream_status else None,
            commit=job.bridge_commit if job.needs_bridge_src else None,
        )
    return job


def _refused(errors: list, output: str) -> int:
    """A job that is not submitted: its errors, one line each on stderr, and in JSON mode the
    object every error is on stdout."""
    for e in errors:
        _err(e)
    if output == "json":
        views.dump_json({"error": errors[0], "errors": errors, "exit_code": 2})
    return 2


def _bad_nodes(cluster: str) -> tuple:
    from bridge_launch.runs import bad_nodes

    return bad_nodes.exclusions(cluster)


def _confirmed(yes: bool, output: str, lines: list[str], question: str) -> bool:
    """On a terminal (and not in JSON mode, and without --yes), the summary and a [y/N] question;
    elsewhere yes, as sky jobs launch does. A no prints that nothing was submitted."""
    if yes or output == "json" or not sys.stdin.isatty():
        return True
    for line in lines:
        print(line)
    sys.stdout.write(f"{question} (--yes skips this question) [y/N] ")
    sys.stdout.flush()
    if sys.stdin.readline().strip().lower() in ("y", "yes"):
        return True
    print("nothing submitted")
    return False


def resume(run_ref, overrides, *, follow, output) -> int:
    from bridge_launch.runs import lifecycle as launch
    from bridge_launch.runs.registry import Registry

    reg = Registry()
    old = launch.find_run(reg, run_ref)
    run = launch.resume(reg, old, overrides)
    return _submitted(run, launch.load_job(reg, run), follow, output)


def _run_json(run, **extra) -> dict:
    return {
        "run_id": run.run_id,
        "job_ids": run.job_ids,
        "state": run.state,
        "run_dir": run.run_dir,
        "cluster": run.cluster,
        "recipe": run.recipe,
        "resumed_from": run.resumed_from,
        "chain": run.chain,
        **extra,
    }


def _submitted(run, job, follow, output) -> int:
    for w in job.submit_warnings:
        sys.stderr.write(f"bridge-launch: warning: {w}\n")
    for note in run.info.get("submit_notes", []):  # the backend's, from the submit (runs/lifecycle.py)
        sys.stderr.write(f"bridge-launch: {note}\n")
    what = f"resumed {run.resumed_from} as" if run.resumed_from else "submitted"
    line = f"{what} {run.run_id} ({job.backend} job {', '.join(run.job_ids)}); run dir {run.run_dir}"
    if output == "json":
        if not follow:  # with --follow, one object once the run has ended (logs go to stderr meanwhile)
            views.dump_json(_run_json(run, warnings=job.submit_warnings))
            return 0
        sys.stderr.write(line + "\n")
    else:
        print(line)
    if not follow:
        return 0
    return _follow(run, job, output)


def _segment_text(seg: dict) -> str:
    """One segment of a chain: Slurm's state, and the chain's own outcome where it differs."""
    text = f"{seg['job_id']} {seg['state']}"
    outcome = seg.get("outcome")
    if outcome == "no-progress":
        text += f" (no progress: {seg.get('detail') or 'no new checkpoint'})"
    elif outcome == "continued":
        text += f" (saved iteration {seg.get('checkpoint')})"
    elif outcome in ("failed", "stopped") and seg.get("detail"):
        text += f" ({seg['detail']})"
    return text


def _follow(run, job, output="text") -> int:
    """Stream the run's log lines until it ends; then its final state. In JSON mode the log lines
    go to stderr and stdout gets one JSON object (the run, with its final state and reason)."""
    from bridge_launch.backends.base import last_step
    from bridge_launch.runs import lifecycle as launch
    from bridge_launch.runs.registry import Registry

    reg = Registry()
    total = job.config.get("train.train_iters")
    total = total if isinstance(total, int) else None
    as_json = output == "json"
    try:
        if views.is_tty() and not as_json:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            with Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[loss]}"),
                TimeElapsedColumn(),
            ) as bar:
                task = bar.add_task(run.run_id, total=total, loss="")

                def on_line(line):
                    bar.console.print(line, markup=False, highlight=False)
                    hit = last_step(line)
                    if hit:
                        bar.update(
                            task,
                            completed=hit[0],
                            total=hit[1],
                            loss=f"loss {hit[2]:.4f}" if hit[2] is not None else "",
                        )

                final = launch.wait_until_done(reg, run, on_line)
        else:
            stream = sys.stderr if as_json else sys.stdout

            def on_line(line):
                stream.write(line + "\n")
                stream.flush()

            final = launch.wait_until_done(reg, run, on_line)
    except KeyboardInterrupt:
        sys.stderr.write(
            f"\ndetached from {run.run_id}; it keeps running.\n"
            f"  follow again: bridge-launch logs {run.run_id} -f\n"
            f"  cancel it:    bridge-launch cancel {run.run_id}\n"
        )
        if as_json:
            views.dump_json(_run_json(reg.get(run.run_id) or run, reason="", detached=True))
        return 0
    if as_json:
        views.dump_json(_run_json(final, reason=final.reason, warnings=job.submit_warnings))
    else:
        print(f"{final.run_id}: {final.state}" + (f" ({final.reason})" if final.reason else ""))
    return 0 if final.state == "COMPLETED" else 1


def status(run_ref, *, all_runs, state, recipe, output, watch=False, interval=5.0, shown=None) -> int:
    from bridge_launch.runs import lifecycle as launch
    from bridge_launch.runs import monitor
    from bridge_launch.runs.registry import STATES, Registry

    if state and state.upper() not in STATES:
        raise UsageError(f"--state {state!r} is not a state; valid: {', '.join(STATES)}")
    if watch:  # each refresh is this function's output (views.watch_status)
        return views.watch_status(
            lambda out, seen: status(run_ref, all_runs=all_runs, state=state, recipe=recipe, output=out, shown=seen),
            output=output,
            interval=interval,
        )
    reg = Registry()
    group = reg.experiment(run_ref) if run_ref else None  # an experiment's name: its runs
    runs = (
        [r for r, _ in group["runs"]]
        if group
        else [launch.find_run(reg, run_ref)]
        if run_ref
        else reg.recent(None if all_runs else 50, state=state and state.upper(), recipe=recipe)
    )
    if recipe and not runs and not run_ref:
        from bridge_launch.core.errors import suggest
        from bridge_launch.spec import recipes as catalog

        cat = catalog.catalog()
        if recipe not in set(cat.names()) | reg.recipes():  # a typo, not a recipe with no runs yet
            raise UsageError(f"--recipe: {suggest(recipe, set(cat.usable()) | reg.recipes(), 'recipe')}")
    runs = launch.refresh(reg, runs)
    if shown is not None:  # status --watch: which runs this view showed
        shown.extend(runs)
    if output == "json":
        shown_runs = [monitor.run_view(reg, r, metrics=bool(run_ref)) for r in runs]
        if run_ref and not group and runs and runs[0].backend == "slurm" and runs[0].job_ids:
            from bridge_launch.cli import gpu_report as report_view  # GPU-hours: one run only (runs/accounting.py)

            shown_runs[0]["accounting"] = report_view.status_account(reg, runs[0])
        views.dump_json(shown_runs)
        return 0

    def step(r):
        i = r.info
        return f"{i['step']}/{i['train_iters']}" if i.get("step") is not None and i.get("train_iters") else ""

    runs, extra = monitor.group_column(runs, group)  # experiments: a column, their runs next to each other
    rows = [
        [
            r.run_id,
            *extra(r),
            r.state,
            r.recipe,
            r.cluster,
            ",".join(r.job_ids),
            r.info.get("elapsed", ""),
            r.info.get("nodes", ""),
            step(r),
            monitor.loss_text(r),
            r.reason or "",
            time.strftime("%m-%d %H:%M", time.localtime(r.created)),
        ]
        for r in runs
    ]
    views.table(
        "runs",
        [
            "run",
            *extra(None),
            "state",
            "recipe",
            "cluster",
            "job ids",
            "elapsed",
            "nodes",
            "step",
            "loss",
            "reason",
            "submitted",
        ],
        rows,
    )
    if group:
        views.print_group(reg, group, runs)
    elif run_ref and runs:
        r = runs[0]
        lineage = reg.chain(r.chain)
        print(f"run dir     {r.run_dir}")
        if r.info.get("container"):
            print(f"container   {r.info['container']}")
        if r.info.get("image_digest"):
            print(f"image       {r.info.get('image')} @ {r.info['image_digest']} (image cache)")
        if r.info.get("canary"):
            from bridge_launch.runs import canary

            print(f"canary      {canary.status_line(r.info['canary'])}")
        if r.info.get("bridge_src"):
            dirty = " + uncommitted changes" if r.info.get("bridge_dirty") else ""
            print(f"bridge src  {r.info['bridge_src']} @ {r.info.get('bridge_commit') or 'unknown commit'}{dirty}")
        if len(lineage) > 1:
            print("chain       " + " -> ".join(f"{x.run_id} ({x.state})" for x in lineage))
        if r.info.get("segments"):
            job = launch.load_job(reg, r)
            limit = job.chain["max_restarts"] if job.chain else "?"
            print("segments    " + ", ".join(_segment_text(x) for x in r.info["segments"]))
            if r.info.get("checkpoint") is not None:
                print(f"checkpoint  iteration {r.info['checkpoint']} (the newest complete one)")
            print(f"restarts    {r.info.get('restarts', 0)} of {limit}")
        if r.info.get("attempts"):
            job = launch.load_job(reg, r)
            for a in r.info["attempts"]:
                print(f"attempt {a['attempt']:<3} {_attempt_text(a)}")
            print(f"restarts    {r.info.get('restarts', 0)} of {job.retry['max_restarts'] if job.retry else '?'}")
        if r.info.get("measured"):
            print("measured    " + _measured_text(r.info["measured"], "segment" if r.info.get("segments") else "job"))
        from bridge_launch.cli import gpu_report as report_view  # GPU-hours: one run only (runs/accounting.py)

        for line in report_view.status_lines(reg, r):
            print(line)
        views.print_metrics(reg, r)
    return 0


def _attempt_text(a: dict) -> str:
    """One attempt of a retried Slurm job: its job, nodes, state and how it ended (backends/slurm/attempts.py)."""
    text = f"job {a['job_id']}" + (f" on {a['nodes']}" if a.get("nodes") else "") + f": {a.get('state') or '?'}"
    if a.get("outcome"):  # "failed": its detail says why it was not retried
        text += ("" if a["outcome"] == "failed" else f", {a['outcome']}") + (f" ({a['detail']})" if a["detail"] else "")
    if a.get("checkpoint") is not None:
        text += f"; saved iteration {a['checkpoint']}"
    return text


def _measured_text(m: dict, who: str) -> str:
    """What the segments or the job measured (backends/slurm: the slowest log interval and save so far)."""
    parts = [
        f"step {m['step_s']:g} s" if m.get("step_s") else "step not yet",
        f"save {m['save_s']:g} s" if m.get("save_s") else "no save yet",
    ]
    text = ", ".join(parts) + " (the slowest so far)"
    if m.get("lead_s"):
        lead = m.get("job_lead_s")
        more = m["lead_s"] > lead if lead else False
        text += f": they need a lead of {m['lead_s']} s" + (
            f", more than the job's {lead} s: {'each segment asks' if who == 'segment' else 'the job asks'} "
            "for its save that early"
            if more
            else f" (the job's: {lead} s)"
        )
    return text


def logs(run_ref, *, follow, rank=None, grep=None, tail=None) -> int:
    from bridge_launch import backends
    from bridge_launch.runs import lifecycle as launch
    from bridge_launch.runs.registry import Registry

    keep = None
    if rank is not None or grep is not None:
        from bridge_launch.runs.monitor import line_filter

        keep = line_filter(rank, grep)
    if tail is not None and tail < 0:
        raise UsageError(f"--tail {tail}: give a number of lines, 0 or more")
    reg = Registry()
    run = launch.find_run(reg, run_ref)
    if rank is not None:
        world = launch.load_job(reg, run).world_size
        if not 0 <= rank < world:
            raise UsageError(f"--rank {rank}: run {run.run_id} has {world} ranks (0-{world - 1})")
    if run.finished and not any(os.path.exists(p) for p in launch.log_files(backends.backend(run.backend), run)):
        gone = "" if os.path.isdir(run.run_dir) else f" (its run dir {run.run_dir} is gone: moved or deleted?)"
        raise UsageError(f"run {run.run_id} ({run.state}) has no log files to show{gone}")
    lines = launch.Tail(lambda: launch.log_files(backends.backend(run.backend), reg.get(run.run_id) or run))
    shown = (line for line in lines.lines() if keep is None or keep(line))
    if tail is not None:
        import collections

        shown = iter(collections.deque(shown, maxlen=tail))
    for line in shown:
        print(line)
    if follow:
        sys.stdout.flush()
        try:
            final = launch.wait_until_done(
                reg, run, lambda line: (keep is None or keep(line)) and print(line, flush=True), tail=lines
            )
        except KeyboardInterrupt:
            return 0
        return 0 if final.state == "COMPLETED" else 1
    return 0


def cancel(run_ref) -> int:
    from bridge_launch.runs import lifecycle as launch
    from bridge_launch.runs.registry import TERMINAL, Registry

    reg = Registry()
    run = launch.find_run(reg, run_ref)
    before = run.state
    run = launch.cancel(reg, run)
    if before in TERMINAL:
        print(f"{run.run_id} already ended ({before}); nothing to cancel")
    else:
        print(f"{run.run_id}: CANCELLED")
    return 0


def _warn_broken(problems: list) -> None:
    """Files a listing left out because they do not load: one line each, on stderr."""
    for p in problems:
        sys.stderr.write(f"bridge-launch: warning: left out: {p}\n")


def recipes_list(output) -> int:
    from bridge_launch.spec import recipes

    problems: list = []
    items = recipes.list_recipes(problems)
    _warn_broken(problems)
    if output == "json":
        views.dump_json(
            [
                {
                    k: r.get(k)
                    for k in (
                        "name",
                        "description",
                        "upstream",
                        "mode",
                        "gpus",
                        "container",
                        "aliases",
                        "workload",
                        "origin",
                    )
                }
                for r in items
            ]
        )
        return 0
    views.table(
        "recipes",
        ["name", "gpus", "mode", "upstream", "description"],
        [
            [
                r["name"],
                r.get("gpus") or "-",
                r.get("mode") or r["workload"],
                r.get("upstream") or "-",
                r.get("description", ""),
            ]
            for r in items
        ],
    )
    return 0


def recipes_show(name, output) -> int:
    from bridge_launch.spec import recipes

    r = recipes.load(name)
    if output == "json":
        views.dump_json(r)
        return 0
    keys = (
        "name",
        "description",
        "upstream",
        "upstream_ref",
        "upstream_status",
        "bridge_recipe_module",
        "bridge_commit",
        "core_commit",
        "mode",
        "workload",
        "gpus",
        "container",
        "hf_model",
        "required",
        "aliases",
        "path",
    )
    for k in keys:
        if r.get(k) not in (None, "", []):
            print(f"{k:<15} {', '.join(r[k]) if isinstance(r[k], list) else r[k]}")
    print("\nconfig (recipe)")
    for k, v in r["config"].items():
        print(f"  {k} = {views.fmt(v)}")
    if r["upstream_config"]:
        who = "bridge-launch's recipe function" if r.get("bridge_recipe_module") else "the recipe function"
        print(f"\nconfig ({recipes.upstream_label(r)}: what {who} sets, the seeds do not state)")
        for k, v in r["upstream_config"].items():
            print(f"  {k} = {views.fmt(v)}")
    if r["env"]:
        print("\nenv")
        for k, v in r["env"].items():
            print(f"  {k}={v}")
    return 0


def overlays_list(output) -> int:
    from bridge_launch.spec import recipes

    problems: list = []
    items = recipes.list_overlays(problems)
    _warn_broken(problems)
    if output == "json":
        views.dump_json([{k: o.get(k) for k in ("name", "description", "gpus", "config", "env")} for o in items])
        return 0
    views.table(
        "overlays",
        ["name", "gpus", "keys", "description"],
        [[o["name"], o.get("gpus") or "-", len(o["config"]), o.get("description", "")] for o in items],
    )
    return 0


def overlays_show(name, output) -> int:
    from bridge_launch.spec import recipes

    o = recipes.load_overlay(name)
    if output == "json":
        views.dump_json(o)
        return 0
    print(f"{o['name']}: {o.get('description', '')}")
    if o.get("gpus"):
        print(f"  gpus = {o['gpus']}")
    for k, v in o["config"].items():
        print(f"  {k} = {views.fmt(v)}")
    for k, v in o["env"].items():
        print(f"  env {k}={v}")
    return 0


def clusters_list(output) -> int:
    from bridge_launch.spec import clusters

    problems: list = []
    items = clusters.list_profiles(problems=problems)
    _warn_broken(problems)
    if output == "json":
        views.dump_json(
            [
                {
                    k: p.get(k)
                    for k in (
                        "name",
                        "description",
                        "backend",
                        "gpu_type",
                        "gpus_per_node",
                        "nodes",
                        "max_nodes",
                        "origin",
                        "path",
                    )
                }
                for p in items
            ]
        )
        return 0
    views.table(
        "clusters",
        ["name", "backend", "gpu", "nodes", "from", "description"],
        [
            [
                p["name"],
                p["backend"],
                f"{p['gpus_per_node']}x {p['gpu_type']}",
                p["nodes"] if p["nodes"] else f"<= {p['max_nodes']}" if p["max_nodes"] else "any",
                p["origin"],
                p.get("description", ""),
            ]
            for p in items
        ],
    )
    return 0


def clusters_show(name, output) -> int:
    from bridge_launch.spec import clusters

    p = clusters.load(name)
    if output == "json":
        from bridge_launch.runs import bad_nodes

        views.dump_json(dict(p, bad_nodes=bad_nodes.active(p["name"])))
        return 0
    for k, v in p.items():
        if k in ("slurm", "lepton", "dgxcloud") and k != p["backend"]:
            continue  # another backend's settings: all defaults, nothing this profile uses
        if isinstance(v, dict):
            shown = {kk: vv for kk, vv in v.items() if vv not in (None, "", [], {})}
            if shown:
                print(f"[{k}]")
                for kk, vv in shown.items():
                    print(f"  {kk} = {views.fmt(vv)}")
        elif v not in (None, "", []):
            print(f"{k:<20} {views.fmt(v)}")
    bad = _bad_nodes(p["name"])
    if bad:
        print("bad nodes (left out of submits until they expire; clusters forget-node C NODE lets one back in)")
        for node, why in bad:
            print(f"  {node:<16} {why}")
    return 0


def clusters_forget_node(name, node) -> int:
    from bridge_launch.runs import bad_nodes
    from bridge_launch.spec import clusters

    p = clusters.load(name)
    if not bad_nodes.forget(p["name"], node):
        live = ", ".join(sorted(bad_nodes.active(p["name"]))) or "none"
        raise UsageError(f"node {node!r} is not on cluster '{p['name']}''s bad-node list (on it: {live})")
    print(f"{node}: off cluster '{p['name']}''s bad-node list; submits may use it again")
    return 0


def without_run_id(job):
    """The job with its run ids (its own and its run dir's, for a resume) back to the placeholder,
    so two runs compare by what they run, not by their names."""
    from bridge_launch.resolve import resolver as resolve

    data = job.to_dict()
    for rid in {job.run_id, job.run_dir.rstrip("/").rsplit("/", 1)[-1]} - {resolve.RUN_ID_PLACEHOLDER, ""}:
        data = replace_text(data, rid, RUN_ID_PLACEHOLDER)
    return resolve.ResolvedJob.from_dict(data)


_PROFILE_KEYS = ("numa_bind", "nvlink_domain_nodes", "containers")
_JOB_KEYS = (
    "recipe",
    "upstream",
    "mode",
    "workload",
    "entry",
    "cluster",
    "backend",
    "nodes",
    "gpus_per_node",
    "world_size",
    "gpu_type",
    "container",
    "image",
    "overlays",
    "mounts",
    "job_root",
    "python",
    "bridge_src",
)


def diff_rows(a, b) -> list[tuple]:
    """(section, key, A, A's source, B, B's source) for everything that reaches the job: what runs
    where (job), the scheduler's options, the chain, the config, the environment, the secrets by
    name, the cluster profile; and, should two jobs still render different artifacts, the first
    line where they part."""
    from bridge_launch import backends

    a, b = without_run_id(a), without_run_id(b)
    rows = []

    def add(section, da, db, srca=None, srcb=None, missing="(unset)"):
        for key in list(dict.fromkeys([*da, *db])):
            rows.append(
                (
                    section,
                    key,
                    da.get(key, missing),
                    (srca or {}).get(key, ""),
                    db.get(key, missing),
                    (srcb or {}).get(key, ""),
                )
            )

    pa, pb = a.provenance, b.provenance

    def job(j):  # and what the job's checks let through, kept in its provenance (resolver.py)
        checks = {"memory_check": "memory_check" not in j.provenance["job"], "force": "force" in j.provenance["job"]}
        return {
            **{k: getattr(j, k) for k in _JOB_KEYS},
            "until_done": j.chain is not None,
            "canary": j.canary is not None,
            **checks,
        }

    def limit(j):  # the save before the time limit and the chain's rules, without the estimates
        out = {k: v for k, v in (j.limit_save or {}).items() if k != "estimate"}
        return {**out, **{k: v for k, v in (j.chain or {}).items()}}

    def removed(j):
        return {k: "removed" for k, s in j.provenance["config"].items() if s == "cli (removed)"}

    def prof(p):  # what of the profile reaches the job and is not in a section above
        return {k: p.get(k) for k in _PROFILE_KEYS}

    def artifact_lines(j):  # the script, then each staged file it calls, as --dry-run prints them
        art = backends.render(j)
        return "".join([art.text, *(f"\n--- staged: {rel} ---\n{t}" for rel, t in art.files.items())]).splitlines()

    add("job", job(a), job(b), pa["job"], pb["job"])
    add("scheduler", a.scheduler, b.scheduler, pa["job"], pb["job"])
    if a.limit_save and b.limit_save:
        add("time limit", limit(a), limit(b))
    add("retry", a.retry or {}, b.retry or {}, missing="(no retry)")
    if a.canary and b.canary:
        add("canary", a.canary, b.canary)
    add("config", a.config, b.config, pa["config"], pb["config"])
    add(
        "config",
        {k: v for k, v in removed(a).items() if k not in b.config or k in removed(b)},
        {k: v for k, v in removed(b).items() if k not in a.config or k in removed(a)},
    )
    add("env", a.env, b.env, pa["env"], pb["env"])
    add(
        "secrets",
        {n: "passed by name" for n in a.secrets},
        {n: "passed by name" for n in b.secrets},
        missing="(not passed)",
    )
    add("profile", prof(a.profile), prof(b.profile))
    if not any(r[2] != r[4] for r in rows):
        ta, tb = artifact_lines(a), artifact_lines(b)
        for n, (la, lb) in enumerate(zip([*ta, *[""] * len(tb)], [*tb, *[""] * len(ta)], strict=False), 1):
            if la != lb:
                rows.append(("artifact", f"line {n}", la or "(none)", "", lb or "(none)", ""))
                break
    return rows


def diff(argv, *, all_keys, output, parse_side, not_job) -> int:
    """`parse_side(words)` -> submit's parsed parameters for one side (cli/app.py: submit's own parser);
    `not_job`: submit's parameters that say how to submit, not what (a side that sets one is refused)."""
    from bridge_launch.resolve import options
    from bridge_launch.resolve import resolver as resolve
    from bridge_launch.runs import lifecycle as launch
    from bridge_launch.runs.registry import Registry

    words, i = [], 0
    while i < len(argv):  # drop diff's own options, keep the sides' words in order
        a = argv[i]
        if a == "--all":
            all_keys, i = True, i + 1
        elif a in ("--output", "-o") and i + 1 < len(argv):
            output, i = argv[i + 1], i + 2
        elif a.startswith("--output="):
            output, i = a.split("=", 1)[1], i + 1
        else:
            words.append(a)
            i += 1
    if output not in ("text", "json"):
        raise UsageError(f"--output {output!r}: valid: text, json")

    def side(part: list, label: str):
        if not part:
            raise UsageError(f"diff: side {label} needs a recipe name (RECIPE [OPTIONS] [KEY=VALUE...] -- RECIPE ...)")
        params = parse_side(part)
        for name in not_job:
            if params.get(name) not in (None, False):
                raise UsageError(f"diff: --{name.replace('_', '-')} does not describe a job (side {label}); drop it")
        return " ".join(part), resolve.resolve(params["recipe"], options.from_params(params))

    if "--" in words:
        cut = words.index("--")
        (label_a, a), (label_b, b) = side(words[:cut], "A"), side(words[cut + 1 :], "B")
    elif len(words) == 2 and not any("=" in w or w.startswith("-") for w in words):
        reg = Registry()
        runs = [launch.find_run(reg, w) for w in words]
        (label_a, a), (label_b, b) = [(r.run_id, launch.load_job(reg, r)) for r in runs]
    else:
        raise UsageError(
            "diff takes two runs (diff RUN_A RUN_B) or two sets separated by '--' "
            "(diff RECIPE -c CLUSTER [OPTIONS] [KEY=VALUE...] -- RECIPE -c CLUSTER [OPTIONS] [KEY=VALUE...])"
        )
    rows = diff_rows(a, b)
    shown = [r for r in rows if all_keys or r[2] != r[4]]
    if output == "json":
        views.dump_json(
            {
                "a": label_a,
                "b": label_b,
                "differences": [
                    dict(zip(("section", "key", "a", "a_source", "b", "b_source"), r, strict=False)) for r in shown
                ],
            }
        )
        return 0
    print(f"A: {label_a}\nB: {label_b}")
    if not shown:
        print("no differences")
        return 0
    views.table(
        "differences",
        ["section", "key", "A", "A from", "B", "B from"],
        [[r[0], r[1], views.fmt(r[2]), r[3], views.fmt(r[4]), r[5]] for r in shown],
    )
    return 0


def image_import(image, cluster, *, output) -> int:
    from bridge_launch.runs import images

    def started():
        if output == "text":
            sys.stderr.write(f"importing {image} on cluster '{cluster}' (one job on one node)...\n")

    entry = images.import_image(image, cluster, on_start=started)
    if output == "json":
        views.dump_json(entry)
    else:
        what = "already in the cache" if entry["how"] == "cached" else "imported"
        print(
            f"{entry['source']} {what}: {entry['squashfs']} ({entry['digest']}, job {entry['job_id']}, "
            f"{entry['seconds']} s); submits to '{cluster}' now start from it"
        )
    return 0


_AGE_UNITS = {"w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}


def prune(older_than: str, *, dry_run: bool = False, yes: bool = False) -> int:
    import shutil

    from bridge_launch.core import paths
    from bridge_launch.runs.registry import Registry

    m = re.fullmatch(r"(\d+)([wdhms])", older_than.strip())
    if not m:
        raise UsageError(f"--older-than {older_than!r}: expected a number with w, d, h, m or s (e.g. 30d, 1w, 12h)")
    seconds = int(m.group(1)) * _AGE_UNITS[m.group(2)]
    reg = Registry()
    runs = reg.prunable(seconds)
    if not runs:
        print(f"no finished run older than {older_than}; nothing to forget")
        return 0
    views.table(
        "finished runs older than " + older_than,
        ["run", "state", "recipe", "cluster", "last update", "run dir"],
        [
            [
                r.run_id,
                r.state,
                r.recipe,
                r.cluster,
                time.strftime("%Y-%m-%d %H:%M", time.localtime(r.updated)),
                r.run_dir,
            ]
            for r in runs
        ],
    )
    n = len(runs)
    what = f"{n} finished run{'s' if n != 1 else ''}"
    if dry_run:
        print(f"would forget {what} (--dry-run: nothing changed)")
        return 0
    if not yes and not sys.stdin.isatty():
        raise UsageError(f"prune would forget {what}: pass --yes to confirm when not on a terminal")
    if not yes:
        sys.stdout.write(f"Forget {what}? Their run dirs stay on disk. [y/N] ")
        sys.stdout.flush()
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            print("nothing forgotten")
            return 0
    gone = reg.prune(seconds, only=[r.run_id for r in runs])
    for run_id in gone:  # what this machine kept of them: the resolved job, local copies of remote logs
        (reg.jobs_dir() / f"{run_id}.json").unlink(missing_ok=True)
        for kind in paths.LOG_COPIES:
            shutil.rmtree(paths.state_dir() / kind / run_id, ignore_errors=True)
    n = len(gone)
    print(
        f"forgot {n} finished run{'s' if n != 1 else ''} older than {older_than} (run dirs are kept; "
        "'bridge-launch import RUN_DIR' registers one again)"
    )
    return 0


def import_runs(run_dirs: list[str], output: str = "text") -> int:
    from bridge_launch.runs import lifecycle as launch
    from bridge_launch.runs.registry import Registry

    reg = Registry()
    results = [(d, run_id, what) for d in run_dirs for run_id, what in launch.import_run_dir(reg, d)]
    if output == "json":
        views.dump_json([{"run_dir": d, "run_id": i, "result": w} for d, i, w in results])
    else:
        for _, run_id, what in results:
            print(f"{run_id}: {what}")
    return 0


def plan(recipe, overrides, *, cluster, overlays, nodes, tflops, tokens, output) -> int:
    import math

    from bridge_launch.plan import report as planner
    from bridge_launch.resolve import resolver as resolve

    for flag, value in (("--tflops", tflops), ("--tokens", tokens)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise UsageError(
                f"{flag} {value:g}: expected a positive number (e.g. {'250' if flag == '--tflops' else '1e11'})"
            )

    job = resolve.resolve(
        recipe, resolve.Options(cluster=cluster, overlays=tuple(overlays), overrides=tuple(overrides), nodes=nodes)
    )
    try:
        result = planner.plan(job, tflops_per_gpu=tflops, token_budget=int(tokens) if tokens else None)
    except UsageError:
        if not job.errors:
            raise
        for e in job.errors:  # no rank layout exists: what submit says of the job, in the same words
            _err(e)
        if output == "json":
            views.dump_json({"error": job.errors[0], "errors": job.errors, "exit_code": 2})
        return 2
    if output == "json":
        views.dump_json(result)
    else:
        sys.stdout.write(planner.render_text(result))  # the job's errors and warnings included
    return 0


def submit_group(recipe, opts, *, sweep, experiment, follow, output, dry_run, yes=False) -> int:
    """An experiment: one run per recipe x combination of swept values, resolved and validated
    all before any is submitted, recorded as a named group (experiments.py). `opts`: resolve.Options,
    its overrides the words after the first recipe (more recipes among them)."""
    import dataclasses

    from bridge_launch import backends
    from bridge_launch.resolve import resolver as resolve
    from bridge_launch.runs import experiments
    from bridge_launch.runs import lifecycle as launch
    from bridge_launch.runs.registry import Registry

    overrides = list(opts.overrides)
    recipes_, rest = experiments.split_recipes(recipe, overrides)
    members = experiments.expand(recipes_, rest, sweep=sweep)
    name = experiments.check_name(experiment) if experiment else experiments.new_name(recipes_[0])
    if experiment:  # a dry run says what the submit would (add_experiment checks it again)
        Registry().check_new_name(name)
    jobs = []
    for m in members:
        job = _checked(m.recipe, dataclasses.replace(opts, overrides=tuple(m.overrides)))
        blockers = job.errors if dry_run else job.refusals
        if blockers:
            return _refused([f"{m.label}: {e}" for e in blockers], output)
        jobs.append((m, job))
    if dry_run:
        if output == "json":
            views.dump_json(
                {
                    "experiment": name,
                    "runs": [dict(views.job_view(j, backends.render(j)), label=m.label) for m, j in jobs],
                }
            )
            return 0
        print(f"experiment {name}: {len(jobs)} runs")
        for i, (m, j) in enumerate(jobs, 1):
            print(f"\n=== run {i}/{len(jobs)}: {m.label} ===")
            views.print_job(j, backends.render(j), resolve.RUN_ID_PLACEHOLDER)
        return 0
    hours = [views.reservation(j)[0] for _, j in jobs]
    total = sum(h for h in hours if h is not None)
    prof = jobs[0][1].profile
    many = (prof.get("confirm_runs") or 0) and len(jobs) > prof["confirm_runs"]
    big = (prof.get("confirm_gpu_hours") or 0) and total > prof["confirm_gpu_hours"]
    if many or big:
        line = f"experiment {name}: {len(jobs)} runs on {jobs[0][1].cluster}" + (
            f", up to {total:,.0f} GPU-hours in all (each run's time limit)" if total else ""
        )
        if not _confirmed(yes, output, [line], f"Submit {len(jobs)} runs?"):
            return 1
    reg = Registry()
    reg.add_experiment(
        name, {"recipes": recipes_, "overrides": overrides, "sweep": sweep, "labels": [m.label for m, _ in jobs]}
    )
    submitted = []
    try:
        for i, (m, job) in enumerate(jobs):
            run = launch.submit(job, reg, member={"experiment": name, "member": m.label, "position": i})
            submitted.append((m, run))
    finally:
        if not submitted:
            reg.drop_experiment(name)
    if output == "json":
        views.dump_json(
            {
                "experiment": name,
                "runs": [
                    {
                        "run_id": r.run_id,
                        "label": m.label,
                        "job_ids": r.job_ids,
                        "state": r.state,
                        "run_dir": r.run_dir,
                        "recipe": r.recipe,
                    }
                    for m, r in submitted
                ],
            }
        )
    else:
        print(f"experiment {name}: {len(submitted)} runs submitted")
        for m, r in submitted:
            print(f"  {r.run_id}  {m.label}  ({r.backend} job {', '.join(r.job_ids)})")
        print(f"watch them: bridge-launch status {name} --watch   compare them: bridge-launch compare {name}")
    if not follow:
        return 0
    return status(name, all_runs=False, state=None, recipe=None, output=output, watch=True, interval=5.0)
