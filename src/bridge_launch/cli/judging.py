"""`check` and `compare`: what the user names (runs, experiments, log files, golden-values files)
turned into logs and series, judged by gate.py and parity.py, shown as text, JSON or a plot."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass

from bridge_launch.cli import views
from bridge_launch.core.errors import UsageError
from bridge_launch.logs.reader import LOSS, Log


@dataclass
class Source:
    kind: str  # run | log | golden
    label: str
    run: object = None
    path: str | None = None
    member: str = ""  # its label within an experiment


def _is_golden(path: str) -> bool:
    if path.endswith(".json"):
        return True
    try:
        with open(path, "rb") as fh:
            return fh.read(64).lstrip().startswith(b"{")
    except OSError:
        return False


def sources(reg, words: list[str], *, expand_experiments: bool = True) -> tuple[list[Source], str | None]:
    """Each word as a run (id or unique prefix), an experiment (its runs, in order), a log file
    or a golden-values file; (sources, the experiment's name when one word named one)."""
    out, group = [], None
    for w in words:
        if os.path.isfile(w):
            out.append(Source("golden" if _is_golden(w) else "log", w, path=w))
            continue
        exp = reg.experiment(w) if reg is not None else None
        if exp is not None and expand_experiments:
            if not exp["runs"]:
                raise UsageError(f"experiment '{w}' has no runs left")
            group = w
            out += [Source("run", r.run_id, run=r, member=label) for r, label in exp["runs"]]
            continue
        if os.sep in w or w.endswith((".log", ".out", ".txt", ".json")):
            raise UsageError(f"{w}: no such file")
        hits = reg.find(w) if reg is not None else []
        if not hits:
            raise UsageError(f"'{w}' is not a run, an experiment or a file; list runs with 'bridge-launch status'")
        from bridge_launch.runs import lifecycle as launch

        run = launch.find_run(reg, w)
        out.append(Source("run", run.run_id, run=run))
    return out, group


def _log_of(reg, src: Source) -> Log:
    if src.kind == "log":
        return Log.of_files([src.path])
    from bridge_launch.runs import monitor

    log = monitor.lineage_log(reg, src.run)
    if not log.raw:  # nothing to judge is not a failure of the run
        gone = "" if os.path.isdir(src.run.run_dir) else f": its run dir {src.run.run_dir} is gone (moved or deleted?)"
        raise UsageError(f"{src.label} ({src.run.state}) has no logs to judge{gone}")
    return log


def _check_metric(log: Log, metric: str, label: str) -> None:
    """--metric must name a value the log's iteration lines carry (a typo is a usage error, not a
    verdict); a log with no iteration lines at all is for the judge to report."""
    have = log.keys()
    if have and metric not in have:
        import difflib

        near = difflib.get_close_matches(metric, have, n=1)
        raise UsageError(
            f"--metric {metric!r}: {label}'s iteration lines have no such value"
            + (f"; did you mean {near[0]!r}?" if near else "")
            + f" (they have: {', '.join(have)})"
        )


def _criteria(values) -> set:
    from bridge_launch.judge.gate import CRITERIA

    out = set()
    for v in values or []:
        for name in v.split(","):
            name = name.strip()
            if not name:
                continue
            if name not in CRITERIA:
                raise UsageError(f"criterion {name!r} is not one of: {', '.join(CRITERIA)}")
            out.add(name)
    return out


# ------------------------------------------------------------------------------------------------
# check
# ------------------------------------------------------------------------------------------------
def check(
    words,
    *,
    steps,
    only,
    skip,
    metric,
    export_golden,
    output,
    straggler_threshold: float | None = None,
    straggler_intervals: int | None = None,
) -> int:
    from bridge_launch.judge import gate
    from bridge_launch.judge import stragglers as strag

    only_set, skip_set = _criteria(only), _criteria(skip)
    if steps is not None and steps < 1:
        raise UsageError(f"--steps {steps}: give the expected number of iterations (1 or more)")
    threshold = strag.THRESHOLD if straggler_threshold is None else straggler_threshold
    intervals = strag.MIN_INTERVALS if straggler_intervals is None else straggler_intervals
    if not 0 < threshold < 10:
        raise UsageError(f"--straggler-threshold {threshold}: a fraction above 0 (0.10 is 10% slower)")
    if intervals < 1:
        raise UsageError(f"--straggler-intervals {intervals}: 1 or more log intervals")
    reg = None
    if any(not os.path.isfile(w) for w in words):  # a log file alone needs no state dir
        from bridge_launch.runs.registry import Registry

        reg = Registry()
    srcs, _ = sources(reg, words)
    if export_golden and len(srcs) != 1:
        raise UsageError(f"--export-golden writes one run's values; {len(srcs)} sources were given")
    if export_golden and not os.path.isdir(os.path.dirname(os.path.abspath(export_golden))):
        raise UsageError(f"--export-golden {export_golden!r}: its folder does not exist")
    verdicts, slow = [], []
    for src in srcs:
        if src.kind == "golden":
            raise UsageError(f"{src.label}: a golden-values file has no log lines to check; check a run or a log")
        finished = None
        if src.kind == "run":
            from bridge_launch.runs import lifecycle as launch

            src.run = launch.refresh(reg, [src.run])[0]
            finished = src.run.finished
        log = _log_of(reg, src)
        if metric != LOSS:  # a log without Megatron's own loss is the gate's to fail, not a typo
            _check_metric(log, metric, src.label)
        label = src.label + (f" ({src.member})" if src.member else "")
        verdicts.append(
            gate.check(log, label, steps=steps, only=only_set or None, skip=skip_set, metric=metric, finished=finished)
        )
        # information, not a criterion: who stays slower than the rest (judge/stragglers.py)
        slow.append(
            strag.find(
                log.stragglers,
                log.timer_reports,
                hosts=lambda log=log: log.rank_hosts,
                threshold=threshold,
                min_intervals=intervals,
            )
        )
        if export_golden:
            data = gate.write_golden(log, export_golden)
            if not data:
                raise UsageError(f"{src.label}: no iteration lines to export")
    passed = all(v.passed for v in verdicts)
    if output == "json":
        results = [{**v.to_dict(), "stragglers": st.to_dict()} for v, st in zip(verdicts, slow, strict=True)]
        views.dump_json({"passed": passed, "results": results})
    else:
        for v, st in zip(verdicts, slow, strict=True):
            sys.stdout.write(gate.render(v))
            print(f"  info {'stragglers':<11} {strag.render(st)}")
        if export_golden:
            print(f"golden values written to {export_golden}")
    return 0 if passed else 1


# ------------------------------------------------------------------------------------------------
# compare
# ------------------------------------------------------------------------------------------------
def compare(
    words,
    *,
    metric,
    rtol,
    atol,
    allowed,
    final_rtol,
    plot,
    output,
    rules: str = "bridge-launch",
    deterministic: bool = False,
) -> int:
    from bridge_launch.cli import plot as plotting
    from bridge_launch.judge import parity, rulesets

    if rules not in rulesets.NAMES:
        raise UsageError(f"--rules {rules!r} is not one of: {', '.join(rulesets.NAMES)}")
    if rules != "bridge-launch":
        given = [
            n
            for n, v in (("--rtol", rtol), ("--atol", atol), ("--allowed", allowed), ("--final-rtol", final_rtol))
            if v is not None
        ]
        if given:
            raise UsageError(
                f"{', '.join(given)}: bridge-launch's own tolerances; --rules {rules} judges by its source's "
                "thresholds (see compare --help)"
            )
    if deterministic and rules != "megatron-lm":
        raise UsageError("--deterministic is a megatron-lm rule (its harness without compare_approximate_results)")
    rtol = 0.02 if rtol is None else rtol
    atol = 0.0 if atol is None else atol
    final_rtol = 0.03 if final_rtol is None else final_rtol
    for name, v in (("--rtol", rtol), ("--final-rtol", final_rtol), ("--atol", atol)):
        if v < 0:
            raise UsageError(f"{name} {v}: a tolerance is 0 or more")
    if allowed is not None and allowed < 0:
        raise UsageError(f"--allowed {allowed}: 0 or more steps")
    if plot and plot != "-":
        plotting.check_path(plot)
    needs_reg = any(not os.path.isfile(w) for w in words)
    reg = None
    if needs_reg:
        from bridge_launch.runs.registry import Registry

        reg = Registry()
    srcs, group = sources(reg, words)
    if len(srcs) < 2:
        what = f"experiment '{group}' has one run" if group else "compare needs two sources"
        raise UsageError(f"{what}: compare A B (runs, log files or golden-values files), or an experiment's name")
    if group is None and len(srcs) > 2:
        raise UsageError("compare takes two sources (A is judged against B), or one experiment's name")
    series, metrics = [], []
    for src in srcs:
        if src.kind == "golden":
            s = parity.golden_series(src.path, metric, src.label)
            series.append(s)
            metrics.append(rulesets.from_golden(src.path, s.values, src.label))
        else:
            label = f"{src.member} [{src.label}]" if src.member else src.label
            log = _log_of(reg, src)
            _check_metric(log, metric, src.label)
            s = parity.log_series(log, metric, label, src.kind)
            series.append(s)
            metrics.append(rulesets.from_log(log, metric, label, src.kind, rules=rules, loss=s.values))
    # A against B; in an experiment every run against its first
    ref = 1 if group is None else 0
    pairs = [(i, ref) for i in range(len(series)) if i != ref]
    results = []
    for i, k in pairs:
        c = parity.compare(
            series[i], series[k], metric=metric, rtol=rtol, atol=atol, allowed=allowed, final_rtol=final_rtol
        )
        results.append((c, rulesets.judge(rules, metrics[i], metrics[k], parity=c, deterministic=deterministic)))
    ok = all(j.passed for _, j in results)
    word = ("parity" if ok else "NO parity") if rules == "bridge-launch" else ("passed" if ok else "FAILED")
    chart = None
    band = rtol if rules == "bridge-launch" else rulesets.MLM_LOSS_RTOL
    if plot:
        title = f"{metric}: experiment {group}" if group else f"{metric}: {series[0].label} vs {series[1].label}"
        title += f"  -  {word}" + ("" if rules == "bridge-launch" else f" ({rules} rules)")
        drawn = [(s.label, s.values) for s in series]
        summary = [
            f"{c.a} vs {c.b}: {'parity' if c.parity else 'no parity'}, {c.outside}/{c.steps} steps outside "
            f"{c.rtol:g} (allowed {c.allowed})"
            if rules == "bridge-launch"
            else f"{j.a} vs {j.b}: {'passed' if j.passed else 'FAILED'} "
            + ", ".join(f"{k} {'-' if x is None else 'ok' if x else 'FAILED'}" for k, x in j.verdicts().items())
            for c, j in results
        ]
        if plot != "-" and plotting.have_matplotlib():
            plotting.draw(plot, drawn, ref, metric, band, title, summary)
        else:
            if plot != "-":
                sys.stderr.write(
                    f"bridge-launch: matplotlib is not installed (pip install 'bridge-launch[plot]'); "
                    f"{plot} not written, a terminal chart instead\n"
                )
            chart = plotting.terminal(drawn, ref, metric)
    if output == "json":
        comparisons = []
        for c, j in results:
            d = j.to_dict()
            comparisons.append({**c.to_dict(), **d} if rules == "bridge-launch" else {**d, "metric": metric})
        views.dump_json(
            {
                "parity": ok,
                "rules": rules,
                "metric": metric,
                "experiment": group,
                "plot": plot if plot and not chart else None,
                "comparisons": comparisons,
            }
        )
        if chart:
            sys.stderr.write(chart)
    else:
        for c, j in results:
            if rules == "bridge-launch":
                text = parity.render(c)
                body, verdict = text.rstrip("\n").rsplit("\n", 1)
                sys.stdout.write(body + "\n" + rulesets.render(j, header=False) + verdict + "\n")
            else:
                sys.stdout.write(rulesets.render(j))
        if chart:
            sys.stdout.write(chart)
        elif plot:
            print(f"plot written to {plot}")
    return 0 if ok else 1


def dump(obj) -> str:
    return json.dumps(obj, indent=2, default=str)
