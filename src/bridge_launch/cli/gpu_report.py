"""`report RUN|EXPERIMENT` and the GPU-hour lines of `status RUN`: the account runs/accounting.py
computes, as a one-page summary (text or JSON) with a plot: a stacked bar per job (per run for an
experiment) drawn with matplotlib (the `plot` extra: PNG, SVG or an HTML page holding the SVG), or
a chart in the terminal without it."""

from __future__ import annotations

import sys
import time

from bridge_launch.cli import views
from bridge_launch.core.errors import UsageError
from bridge_launch.runs.accounting import CATEGORIES, LABELS  # data only: the module imports nothing heavy

MARKS = {"startup": "-", "training": "#", "redone": "r", "lost": "x", "checkpointing": "c"}
COLORS = {
    "startup": "#9e9e9e",
    "training": "#2e7d32",
    "redone": "#f9a825",
    "lost": "#c62828",
    "checkpointing": "#1565c0",
}
LOST_CAUSES = {"failed": "failed jobs", "canary": "canary", "health": "health steps"}


def hours(v: float) -> str:
    """GPU-hours, readable from a CPU smoke run's thousandths to a pretraining run's thousands."""
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}" if v else "0"


def _secs(v) -> str:
    return "" if v is None else f"{v:.0f}s" if v < 600 else _clock(v)


def _clock(v: float) -> str:
    v = int(round(v))
    return f"{v // 3600}:{v % 3600 // 60:02d}:{v % 60:02d}"


def _lost_text(acc: dict) -> str:
    parts = [f"{LOST_CAUSES.get(k, k)} {hours(v)}" for k, v in acc.get("lost_by", {}).items() if v]
    return f" ({', '.join(parts)})" if parts else ""


def _unit(acc: dict) -> str:
    if acc.get("gpu_type") == "cpu":
        return f"a CPU cluster: {acc.get('gpus_per_node')} processes per node counted as GPUs"
    return ""


def split_line(acc: dict) -> str:
    pct = acc["percent"]
    return "  ".join(f"{LABELS[k]} {hours(acc['gpu_hours'][k])} ({pct[k]:.1f}%)" for k in CATEGORIES)


def status_account(reg, run) -> dict:
    """`status RUN -o json`'s "accounting": the run's account, or {"error": why not}."""
    from bridge_launch.core.errors import BridgeLaunchError
    from bridge_launch.runs import accounting

    try:
        return accounting.run_account(reg, run)
    except BridgeLaunchError as exc:
        return {"error": str(exc)}


def status_lines(reg, run) -> list[str]:
    """`status RUN`'s GPU-hour lines; none for a run whose backend keeps no allocation times."""
    if run.backend != "slurm" or not run.job_ids:
        return []
    acc = status_account(reg, run)
    if "error" in acc:
        return [f"gpu-hours   not accounted: {acc['error']}"]
    unit = _unit(acc)
    head = f"gpu-hours   {hours(acc['gpu_hours']['total'])} in {len(acc['jobs'])} job(s)"
    head += f" ({unit})" if unit else ""
    lines = [head, "            " + split_line(acc)]
    extra = []
    if acc["lost_by"]:
        extra.append("lost to " + _lost_text(acc).strip(" ()"))
    if acc["redone_steps"]:
        extra.append(f"{acc['redone_steps']} step(s) trained again")
    if extra:
        lines.append("            " + "; ".join(extra))
    return lines


# ------------------------------------------------------------------------------------------------
# report
# ------------------------------------------------------------------------------------------------
def report(ref: str, *, plot: str | None, output: str) -> int:
    from bridge_launch.cli import plot as plots
    from bridge_launch.runs import accounting
    from bridge_launch.runs import lifecycle as launch
    from bridge_launch.runs.registry import Registry

    if plot not in (None, "-"):
        plots.check_path(plot)
    reg = Registry()
    group = reg.experiment(ref)
    if group:
        runs = launch.refresh(reg, [r for r, _ in group["runs"]])
        labels = {r.run_id: label for r, label in group["runs"]}
        group = dict(group, runs=[(r, labels[r.run_id]) for r in runs])
        acc = accounting.experiment_account(reg, group)
        bars = [(a["run_id"], a["gpu_hours"]) for a in acc["runs"]]
        title = f"experiment {acc['experiment']}: GPU-hours by use"
    else:
        run = launch.refresh(reg, [launch.find_run(reg, ref)])[0]
        acc = accounting.run_account(reg, run)
        bars = [(_job_label(j), j["gpu_hours"]) for j in acc["jobs"]]
        title = f"{acc['run_id']} ({acc['recipe']} on {acc['cluster']}): GPU-hours by use"
    if plot is None and output != "json":
        plot = f"{acc.get('run_id') or acc.get('experiment')}-gpu-hours.png" if plots.have_matplotlib() else "-"
    drawn = None
    if plot not in (None, "-"):
        if not plots.have_matplotlib():
            raise UsageError(
                f"--plot {plot}: drawing a file needs matplotlib (pip install 'bridge-launch[plot]'); "
                "--plot - draws in the terminal"
            )
        draw(plot, bars, acc["gpu_hours"], title)
        drawn = plot
    if output == "json":
        views.dump_json(dict(acc, plot=drawn))
        return 0
    lines = experiment_page(acc) if group else run_page(acc)
    sys.stdout.write("\n".join(lines) + "\n\n")
    if drawn:
        print(f"plot         {drawn}")
    else:
        sys.stdout.write(terminal(bars, acc["gpu_hours"]))
    return 0


def _job_label(j: dict) -> str:
    return f"{j['kind']} {j['number']} (job {j['job_id']})" if j["kind"] != "canary" else f"canary (job {j['job_id']})"


def _split_rows(acc: dict) -> list[str]:
    out = []
    for k in CATEGORIES:
        note = ""
        if k == "lost":
            note = _lost_text(acc)
        elif k == "redone" and acc.get("redone_steps"):
            note = f" ({acc['redone_steps']} step(s) trained again)"
        out.append(f"  {LABELS[k]:<14}{hours(acc['gpu_hours'][k]):>10}  {acc['percent'][k]:5.1f}%{note}")
    return out


def run_page(acc: dict) -> list[str]:
    state = acc["state"] + (f": {acc['reason']}" if acc.get("reason") else "")
    step = acc.get("step")
    unit = _unit(acc)
    lines = [
        f"run          {acc['run_id']}" + (f" (resumed from {acc['resumed_from']})" if acc.get("resumed_from") else ""),
        f"recipe       {acc['recipe']}",
        f"cluster      {acc['cluster']}",
        f"state        {state}",
        f"steps        {step if step is not None else '-'}/{acc.get('train_iters') or '?'}",
        f"GPU-hours    {hours(acc['gpu_hours']['total'])}" + (f" ({unit})" if unit else ""),
        *_split_rows(acc),
        "jobs         (the split in GPU-hours)",
    ]
    rows = [
        [
            _job_label(j),
            j["state"],
            j["nodes"],
            str(j["gpus"]),
            _secs(j["queued_s"]),
            _secs(j["elapsed_s"]),
            _secs(j["first_step_s"]),
            f"{j['steps'][0]}-{j['steps'][1]}" if j["steps"] else "",
            *[hours(j["gpu_hours"][k]) for k in CATEGORIES],
        ]
        for j in acc["jobs"]
    ]
    head = ["job", "state", "nodes", "gpus", "queued", "elapsed", "1st step", "steps", *[LABELS[k] for k in CATEGORIES]]
    lines += _plain_table(head, rows)
    lines += [f"note         {n}" for n in acc.get("notes", []) if not (unit and "counted as its GPUs" in n)]
    return lines


def experiment_page(acc: dict) -> list[str]:
    lines = [
        f"experiment   {acc['experiment']}: {len(acc['runs'])} run(s) accounted",
        f"GPU-hours    {hours(acc['gpu_hours']['total'])}",
        *_split_rows(acc),
        "runs         (the split in GPU-hours)",
    ]
    rows = [
        [
            a["run_id"],
            a.get("member", ""),
            a["state"],
            f"{a.get('step') if a.get('step') is not None else '-'}/{a.get('train_iters') or '?'}",
            str(len(a["jobs"])),
            hours(a["gpu_hours"]["total"]),
            *[hours(a["gpu_hours"][k]) for k in CATEGORIES],
        ]
        for a in acc["runs"]
    ]
    lines += _plain_table(["run", "member", "state", "steps", "jobs", "total", *[LABELS[k] for k in CATEGORIES]], rows)
    lines += [f"note         {n}" for n in acc.get("notes", [])]
    return lines


def _plain_table(head: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    out = ["  " + "  ".join(h.upper().ljust(w) for h, w in zip(head, widths, strict=True)).rstrip()]
    out += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return out


# ------------------------------------------------------------------------------------------------
# the plot: a stacked bar per job (or run), and the total
# ------------------------------------------------------------------------------------------------
def terminal(bars: list, total: dict, width: int = 60) -> str:
    """One bar per job (scaled to the largest), each character a share of its GPU-hours by use; the
    total's bar spans the width."""
    legend = "  ".join(f"{MARKS[k]} {LABELS[k]}" for k in CATEGORIES)
    rows = [("total", total, width)]
    biggest = max((sum(h[k] for k in CATEGORIES) for _, h in bars), default=0.0)
    for label, h in bars:
        size = sum(h[k] for k in CATEGORIES)
        rows.append((label, h, max(1, round(width * size / biggest)) if biggest and size else 0))
    pad = max(len(r[0]) for r in rows)
    out = [f"GPU-hours by use ({legend})"]
    for label, h, n in rows:
        out.append(f"{label:>{pad}} |{_bar(h, n)}  {hours(sum(h[k] for k in CATEGORIES))}")
    return "\n".join(out) + "\n"


def _bar(h: dict, n: int) -> str:
    """n characters split by the categories' shares (largest remainders), in CATEGORIES' order."""
    size = sum(h[k] for k in CATEGORIES)
    if not n or not size:
        return ""
    exact = {k: n * h[k] / size for k in CATEGORIES}
    count = {k: int(v) for k, v in exact.items()}
    for k in sorted(CATEGORIES, key=lambda c: exact[c] - count[c], reverse=True)[: n - sum(count.values())]:
        count[k] += 1
    return "".join(MARKS[k] * count[k] for k in CATEGORIES)


def draw(path: str, bars: list, total: dict, title: str) -> None:
    """Horizontal stacked bars (the total first, then each job or run) with matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from bridge_launch.cli.plot import check_path, save

    ext = check_path(path)
    rows = [("total", total), *bars]
    fig = Figure(figsize=(10, 1.6 + 0.45 * len(rows)), dpi=110)
    ax = fig.subplots()
    ys = list(range(len(rows)))[::-1]
    left = [0.0] * len(rows)
    for k in CATEGORIES:
        widths = [h[k] for _, h in rows]
        ax.barh(ys, widths, left=left, color=COLORS[k], label=LABELS[k], height=0.6)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.set_yticks(ys, [label for label, _ in rows], fontsize=8)
    ax.set_xlabel("GPU-hours")
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=8, ncols=len(CATEGORIES), loc="upper center", bbox_to_anchor=(0.5, -0.18 - 0.4 / len(rows)))
    fig.tight_layout()
    save(fig, path, ext, title, [time.strftime("%Y-%m-%d %H:%M")])
