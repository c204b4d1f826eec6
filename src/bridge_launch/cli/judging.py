"""`check` and `compare`: what the user names (runs, experiments, log files, golden-values files)
turned into logs and series, judged by gate.py and parity.py, shown as text, JSON or a plot."""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass

from bridge_launch.core.errors import UsageError
from bridge_launch.logs.reader import LOSS, Log, float_columns_of


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


def _log_of(reg, src: Source, *, mapped: bool = False) -> Log:
    """The source's output; `mapped`: a long log file mapped, not read (check and compare search it
    in place and read a few columns)."""
    if src.kind == "log":
        return Log.of_files([src.path], mapped=mapped)
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
    multiplier: float | None = None,
    expect: dict | None = None,
    plot: str | None = None,
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
    _check_expect(expect or {})
    reg = None
    if any(not os.path.isfile(w) for w in words):  # a log file alone needs no state dir
        from bridge_launch.runs.registry import Registry

        reg = Registry()
    srcs, _ = sources(reg, words)
    if plot:
        from bridge_launch.cli import plot as plotting

        if len(srcs) != 1:
            raise UsageError(f"--plot: give one run or log to draw ({len(srcs)} given)")
        if plot != "-":
            plotting.check_path(plot)
    plotted: list = []
    if export_golden and not os.path.isdir(os.path.dirname(os.path.abspath(export_golden))):
        raise UsageError(f"--export-golden {export_golden!r}: its folder does not exist")
    if multiplier is not None and not 0 < multiplier < 100:
        raise UsageError(f"--confidence-multiplier {multiplier}: a factor above 0 (the script's default is 1.5)")
    if multiplier is not None and not (export_golden and len(srcs) > 1):
        raise UsageError("--confidence-multiplier: only with --export-golden of several runs (their noise bands)")
    verdicts, slow, goldens = [], [], []
    for src in srcs:
        if src.kind == "golden":
            raise UsageError(f"{src.label}: a golden-values file has no log lines to check; check a run or a log")
        finished = None
        if src.kind == "run":
            from bridge_launch.runs import lifecycle as launch

            src.run = launch.refresh(reg, [src.run])[0]
            finished = src.run.finished
        log = _log_of(reg, src, mapped=True)
        if metric != LOSS:  # a log without Megatron's own loss is the gate's to fail, not a typo
            _check_metric(log, metric, src.label)
        if gate.reads_lines(only_set, skip_set):
            log.survey(metric)  # the passes the gate and the straggler report make, over two processes
        label = src.label + (f" ({src.member})" if src.member else "")
        exp = _expectation(reg, src, expect or {})
        verdicts.append(
            gate.check(
                log,
                label,
                steps=steps,
                only=only_set or None,
                skip=skip_set,
                metric=metric,
                finished=finished,
                expect=exp,
                tolerance=(expect or {}).get("tolerance"),
            )
        )
        # information, not a criterion: who stays slower than the rest (judge/stragglers.py)
        plotted = log.stragglers
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
            data = gate.golden(log)
            if not data:
                raise UsageError(f"{src.label}: no iteration lines to export")
            goldens.append((label, data))
    if export_golden and len(goldens) == 1:
        gate.write_golden(goldens[0][1], export_golden)
    elif export_golden:  # several runs: their noise bands (judge/bands.py, compute_golden_statistics.py)
        from bridge_launch.judge import bands

        mult = bands.MULTIPLIER if multiplier is None else multiplier
        data = bands.golden_file([g for _, g in goldens], [lbl for lbl, _ in goldens], multiplier=mult)
        gate.write_golden(data, export_golden)
    passed = all(v.passed for v in verdicts)
    chart = None
    if plot:  # the ranks' round-trip time per interval, from the straggler lines (judge/stragglers.py)
        drawn = strag.rank_series(plotted)
        if not drawn:
            raise UsageError(
                f"--plot: {srcs[0].label} has no straggler lines to draw (Bridge's straggler.log_straggler prints them)"
            )
        title = f"round-trip time per rank: {srcs[0].label}  -  {strag.render(slow[0])}"[:160]
        chart = plotting.draw_or_chart(
            plot, drawn, 0, "round-trip time (ms)", threshold, title, [strag.render(slow[0])]
        )
    if output == "json":
        results = [{**v.to_dict(), "stragglers": st.to_dict()} for v, st in zip(verdicts, slow, strict=True)]
        from bridge_launch.cli import views  # lazy: it loads backends.base, which text output does without

        views.dump_json({"passed": passed, "results": results, "plot": plot if plot and not chart else None})
        if chart:
            sys.stderr.write(chart)
    else:
        for v, st in zip(verdicts, slow, strict=True):
            sys.stdout.write(gate.render(v))
            print(f"  info {'stragglers':<11} {strag.render(st)}")
        if chart:
            sys.stdout.write(chart)
        elif plot:
            print(f"plot written to {plot}")
        if export_golden and len(goldens) > 1:
            print(f"golden values with the noise bands of {len(goldens)} runs written to {export_golden}")
        elif export_golden:
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
    golden: bool = False,
    multiplier: float | None = None,
) -> int:
    from bridge_launch.cli import plot as plotting
    from bridge_launch.judge import parity, rulesets

    if rules not in rulesets.NAMES:
        raise UsageError(f"--rules {rules!r} is not one of: {', '.join(rulesets.NAMES)}")
    if multiplier is not None and not 0 < multiplier < 100:
        raise UsageError(f"--confidence-multiplier {multiplier}: a factor above 0 (the script's default is 1.5)")
    if golden or (rules == "bridge-launch" and len(words) == 2 and _is_bands_file(words[1])):
        if rules != "bridge-launch" or deterministic:
            flag = f"--rules {rules}" if rules != "bridge-launch" else "--deterministic"
            raise UsageError(
                f"{flag}: a noise band is judged by its own rule (compute_golden_statistics.py's tolerance); "
                "judge against one reference to use a rule set"
            )
        own = [n for n, v in (("--rtol", rtol), ("--atol", atol), ("--final-rtol", final_rtol)) if v is not None]
        if own:
            raise UsageError(
                f"{', '.join(own)}: a noise band's tolerance is the one compute_golden_statistics.py recommends; "
                "scale it with --confidence-multiplier"
            )
        if allowed is not None and allowed < 0:
            raise UsageError(f"--allowed {allowed}: 0 or more steps")
        return _compare_bands(words, metric=metric, allowed=allowed, multiplier=multiplier, plot=plot, output=output)
    if multiplier is not None:
        raise UsageError("--confidence-multiplier: only for a noise band (--golden, or a bands file as B)")
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
    series, logs = _series_of(reg, srcs, metric)
    metrics = [
        rulesets.from_log(logs[i], metric, s.label, src.kind, loss=lambda s=s: s.values)
        if i in logs
        else rulesets.from_golden(src.path, s.values, src.label)
        for i, (src, s) in enumerate(zip(srcs, series, strict=True))
    ]
    # A against B; in an experiment every run against its first
    ref = 1 if group is None else 0
    pairs = [(i, ref) for i in range(len(series)) if i != ref]
    results = []
    for i, k in pairs:
        c = parity.compare(
            series[i], series[k], metric=metric, rtol=rtol, atol=atol, allowed=allowed, final_rtol=final_rtol
        )
        results.append((c, rulesets.judge(rules, metrics[i], metrics[k], parity=c, deterministic=deterministic)))
    differs = [_config_differences(reg, srcs[i], srcs[k]) for i, k in pairs]
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
        chart = plotting.draw_or_chart(plot, drawn, ref, metric, band, title, summary)
    if output == "json":
        comparisons = []
        for (c, j), diff in zip(results, differs, strict=True):
            d = j.to_dict()
            d = {**c.to_dict(), **d} if rules == "bridge-launch" else {**d, "metric": metric}
            if diff is not None:
                d["config_differences"] = [{"key": key, "a": va, "b": vb} for key, va, vb in diff]
            comparisons.append(d)
        from bridge_launch.cli import views  # lazy: it loads backends.base, which text output does without

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
        for (c, j), diff in zip(results, differs, strict=True):
            if rules == "bridge-launch":
                text = parity.render(c)
                body, verdict = text.rstrip("\n").rsplit("\n", 1)
                sys.stdout.write(body + "\n" + rulesets.render(j, header=False) + verdict + "\n")
            else:
                sys.stdout.write(rulesets.render(j))
            if diff:
                sys.stdout.write(_differences_text(diff, j.a, j.b))
        if chart:
            sys.stdout.write(chart)
        elif plot:
            print(f"plot written to {plot}")
    return 0 if ok else 1


def _config_differences(reg, a: Source, b: Source) -> list[tuple[str, object, object]] | None:
    """The config keys two runs set differently (their run ids aside), for a verdict between runs of
    different configurations; None unless both are runs whose resolved jobs are on record."""
    if a.kind != "run" or b.kind != "run" or reg is None:
        return None
    from bridge_launch.cli.commands import without_run_id
    from bridge_launch.core.errors import LaunchError
    from bridge_launch.runs.records import load_job

    try:
        ja, jb = (without_run_id(load_job(reg, s.run)).config for s in (a, b))
    except (LaunchError, ValueError, KeyError, TypeError):
        return None
    unset = "(unset)"
    keys = dict.fromkeys([*ja, *jb])
    return [(k, ja.get(k, unset), jb.get(k, unset)) for k in keys if ja.get(k, unset) != jb.get(k, unset)]


def _differences_text(diff: list, a: str, b: str, listed: int = 10) -> str:
    """What the two runs' configurations differ in, below their verdict."""
    lines = [f"config: {len(diff)} key(s) differ between {a} and {b}:"]
    lines += [f"  {k}: {va} vs {vb}" for k, va, vb in diff[:listed]]
    if len(diff) > listed:
        lines.append(f"  ... and {len(diff) - listed} more (compare -o json lists them all)")
    return "\n".join(lines) + "\n"


def _check_expect(expect: dict) -> None:
    """--expect-*: one expectation at most, each a positive figure or a readable golden file."""
    given = [k for k in ("tflops", "step_time", "golden", "plan") if expect.get(k)]
    if len(given) > 1:
        flags = ", ".join("--expect-" + k.replace("_", "-") for k in given)
        raise UsageError(f"{flags}: give one expectation for the throughput criterion")
    for key, flag, example in (("tflops", "--expect-tflops", "700"), ("step_time", "--expect-step-time", "4.2")):
        v = expect.get(key)
        if v is not None and not v > 0:
            raise UsageError(f"{flag} {v:g}: expected a positive number (e.g. {example})")
    tol = expect.get("tolerance")
    if tol is not None and not 0 < tol < 1:
        raise UsageError(f"--throughput-tolerance {tol:g}: a fraction between 0 and 1 (0.20 is 20% slower)")
    golden = expect.get("golden")
    if golden and not (os.path.isfile(golden) and _is_golden(golden)):
        raise UsageError(f"--expect-golden {golden}: not a golden-values file (check --export-golden writes one)")


def _expectation(reg, src, expect: dict):
    """The throughput criterion's expectation for one source (judge/throughput.py), or None."""
    from bridge_launch.judge import throughput as T

    if expect.get("tflops"):
        return T.Expectation(tflops_per_gpu=expect["tflops"], source="--expect-tflops")
    if expect.get("step_time"):
        return T.Expectation(step_s=expect["step_time"], source="--expect-step-time")
    if expect.get("golden"):
        return _golden_expectation(expect["golden"])
    if expect.get("plan"):
        if src.kind != "run":
            raise UsageError(f"--expect-plan: {src.label} is a log file; plan needs a run's job (or --expect-tflops)")
        return _plan_expectation(reg, src.run)
    return None


def _golden_expectation(path: str):
    """The median iteration-time of a golden-values file after its warm-up (parity's golden reader:
    Megatron-LM's layout in seconds, read as ms)."""
    import statistics

    from bridge_launch.judge import parity
    from bridge_launch.judge import throughput as T

    try:
        ms = parity.golden_series(path, "iteration-time").values
    except UsageError as exc:
        raise UsageError(f"--expect-golden {exc}") from None
    steps = sorted(s for s, v in ms.items() if math.isfinite(v))
    if not steps:
        raise UsageError(f"--expect-golden {path}: no iteration-time values in it")
    steady = steps[max(1, int(len(steps) * T.WARMUP_FRACTION)) :] or steps
    return T.Expectation(step_s=statistics.median(ms[s] for s in steady) / 1000.0, source=path)


def _plan_expectation(reg, run):
    from bridge_launch.cli import views  # lazy: it loads backends.base, which text output does without
    from bridge_launch.runs import lifecycle as launch

    exp, why = views.plan_expectation(launch.load_job(reg, run))
    if exp is None:
        raise UsageError(f"--expect-plan: plan has no TFLOP/s figure for {run.run_id} ({why}); give --expect-tflops")
    return exp


def _is_bands_file(path: str) -> bool:
    """A golden-values file that records noise bands (check --export-golden of several runs)."""
    if not (os.path.isfile(path) and _is_golden(path)):
        return False
    from bridge_launch.judge import bands, rulesets

    try:
        return bands.is_bands(rulesets.read_golden(path))
    except UsageError:
        return False  # the caller's own reading says what is wrong with it


def _series_of(reg, srcs: list, metric: str) -> tuple[list, dict]:
    """Each source's series of `metric`, and {index: Log} of the runs and log files among them: the
    logs read together, each after the first in a child of its own where long (float_columns_of)."""
    from bridge_launch.judge import parity

    logs = {}
    for i, src in enumerate(srcs):
        if src.kind != "golden":
            logs[i] = _log_of(reg, src, mapped=True)
            _check_metric(logs[i], metric, src.label)
    columns = dict(zip(logs, float_columns_of(list(logs.values()), metric), strict=True))
    series = []
    for i, src in enumerate(srcs):
        if src.kind == "golden":
            series.append(parity.golden_series(str(src.path), metric, src.label))
        else:
            label = f"{src.member} [{src.label}]" if src.member else src.label
            series.append(parity.Series(label, kind=src.kind, columns=columns[i]))
    return series, logs


def _same(a: Source, b: Source) -> bool:
    if a.kind == "run" and b.kind == "run":
        return getattr(a.run, "run_id", None) == getattr(b.run, "run_id", None)
    return a.path is not None and b.path is not None and os.path.realpath(a.path) == os.path.realpath(b.path)


def _compare_bands(words, *, metric, allowed, multiplier, plot, output) -> int:
    """A against the noise band of its references (judge/bands.py): several runs, logs or golden
    files, an experiment, or one bands file."""
    from bridge_launch.cli import plot as plotting
    from bridge_launch.judge import bands, rulesets
    from bridge_launch.logs.reader import finite

    if len(words) < 2:
        raise UsageError(
            "compare --golden A REF [REF ...]: A, then its references (runs, log files, golden-values files, "
            "an experiment, or one bands file)"
        )
    if plot and plot != "-":
        plotting.check_path(plot)
    reg = None
    if any(not os.path.isfile(w) for w in words):
        from bridge_launch.runs.registry import Registry

        reg = Registry()
    a_srcs, _ = sources(reg, words[:1])
    if len(a_srcs) != 1:
        raise UsageError(
            f"compare --golden: A is one run, log or golden-values file; '{words[0]}' is an experiment of "
            f"{len(a_srcs)} runs (name it after A to use its runs as the references)"
        )
    a = a_srcs[0]
    refs, group = sources(reg, words[1:])
    notes = []
    if any(_same(a, r) for r in refs):
        refs = [r for r in refs if not _same(a, r)]
        notes.append(f"A ({a.label}) is left out of its own references")
    files = [str(r.path) for r in refs if r.kind == "golden" and _is_bands_file(str(r.path))]
    if files and len(refs) > 1:
        raise UsageError(
            f"{files[0]}: a bands file is already the band of its runs; give it alone as the reference, "
            "or give the runs"
        )
    if files:
        band = bands.read_band(rulesets.read_golden(files[0]), metric, files[0])
        inside = [x for x in band.sources if x == a.label or x.startswith(a.label + " (")]
        if inside:  # a band made from A holds A's own values: no independent verdict, so none
            raise UsageError(
                f"compare --golden: A ({a.label}) is one of the {len(band.sources)} runs {files[0]} was made from "
                f"(its metadata.result_files: {inside[0]}), so its band cannot judge it; export the band without "
                "A, or give the other runs as the references (A is then left out of them)"
            )
        if multiplier is not None:
            band = band.with_multiplier(multiplier)
    else:
        if len(refs) < 2:
            raise UsageError(
                f"--golden needs two or more references ({len(refs)} given): the band of one run is that run; "
                "compare A B judges against one"
            )
        *series, sa = _series_of(reg, [*refs, a], metric)[0]
        for s in series:
            bad = sum(1 for v in s.values.values() if not finite(v))
            if bad:
                notes.append(
                    f"{s.label}: {bad} values not finite, left out of the band (the script leaves NaN out, "
                    f"{bands.SCRIPT}:264-267)"
                )
        band = bands.band(
            bands.golden_name(metric),
            [s.values for s in series],
            [s.label for s in series],
            multiplier=bands.MULTIPLIER if multiplier is None else multiplier,
        )
        band.label = f"experiment {group}" if group else "the references"
    if files:
        (sa,), _ = _series_of(reg, [a], metric)
    c = bands.judge(sa, band, metric=metric, allowed=allowed)
    c.notes = notes + c.notes
    chart = None
    if plot:
        edges = {s: bands.limits(st, band.tolerance) for s, st in band.steps.items()}
        drawn = [
            (c.a, sa.values),
            (f"band mean ({c.num_samples} runs)", {s: st["mean"] for s, st in band.steps.items()}),
            ("band low (min - tolerance)", {s: e[0] for s, e in edges.items()}),
            ("band high (max + tolerance)", {s: e[1] for s, e in edges.items()}),
        ]
        word = "within the band" if c.parity else "OUTSIDE the band"
        title = f"{metric}: {c.a} vs {c.b}  -  {word}"
        summary = [f"{c.outside}/{c.steps} steps outside (allowed {c.allowed})"]
        chart = plotting.draw_or_chart(plot, drawn, 1, metric, band.tolerance["relative_tolerance"], title, summary)
    if output == "json":
        from bridge_launch.cli import views  # lazy: it loads backends.base, which text output does without

        views.dump_json(
            {
                "parity": c.parity,
                "rules": "bands",
                "metric": metric,
                "experiment": group,
                "plot": plot if plot and not chart else None,
                "comparisons": [c.to_dict()],
            }
        )
        if chart:
            sys.stderr.write(chart)
    else:
        sys.stdout.write(bands.render(c))
        if chart:
            sys.stdout.write(chart)
        elif plot:
            print(f"plot written to {plot}")
    return 0 if c.parity else 1


def dump(obj) -> str:
    return json.dumps(obj, indent=2, default=str)
