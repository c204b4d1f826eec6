"""Loss curves and their relative difference: an image (matplotlib, the optional `plot` extra:
PNG, SVG, or an HTML page holding the SVG) or, without matplotlib, a chart in the terminal."""

from __future__ import annotations

import html
import io
import math
import os

from bridge_launch.core.errors import UsageError
from bridge_launch.logs.reader import finite

FORMATS = (".png", ".svg", ".html")


def check_path(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise UsageError(f"--plot {path!r}: the file must end in {', '.join(FORMATS)}")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"--plot {path!r}: the folder {parent} does not exist")
    return ext


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def draw_or_chart(path: str, series: list, reference: int, metric: str, rtol: float, title: str, summary) -> str | None:
    """`--plot PATH`: the image when matplotlib is installed (None returned), else (or with PATH
    "-") the terminal chart's text, saying on stderr why no image was written."""
    import sys

    if path != "-" and have_matplotlib():
        draw(path, series, reference, metric, rtol, title, summary)
        return None
    if path != "-":
        sys.stderr.write(
            f"bridge-launch: matplotlib is not installed (pip install 'bridge-launch[plot]'); "
            f"{path} not written, a terminal chart instead\n"
        )
    return terminal(series, reference, metric)


def draw(path: str, series: list, reference: int, metric: str, rtol: float, title: str, summary: list[str]) -> None:
    """series: [(label, {step: value})]; the relative difference is drawn against series[reference]."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    ext = check_path(path)
    fig = Figure(figsize=(10, 7), dpi=110)
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    ref_label, ref = series[reference]
    for label, values in series:
        steps = sorted(s for s, v in values.items() if finite(v))
        top.plot(steps, [values[s] for s in steps], label=label, linewidth=1.2)
    top.set_ylabel(metric)
    top.set_title(title, fontsize=10)
    top.grid(True, alpha=0.3)
    top.legend(fontsize=8)
    for i, (label, values) in enumerate(series):
        if i == reference:
            continue
        common = sorted(s for s in set(values) & set(ref) if finite(values[s]) and finite(ref[s]) and ref[s] != 0)
        bottom.plot(
            common,
            [100 * (values[s] - ref[s]) / abs(ref[s]) for s in common],
            label=f"{label} vs {ref_label}",
            linewidth=1.0,
        )
    bottom.axhspan(-100 * rtol, 100 * rtol, color="green", alpha=0.12, label=f"±{100 * rtol:g}% tolerance")
    bottom.axhline(0, color="black", linewidth=0.6)
    bottom.set_ylabel("relative difference (%)")
    bottom.set_xlabel("iteration")
    bottom.grid(True, alpha=0.3)
    bottom.legend(fontsize=8)
    fig.tight_layout()
    save(fig, path, ext, title, summary)


def save(fig, path: str, ext: str, title: str, notes) -> None:
    """A matplotlib figure to PNG or SVG, or to an HTML page holding the SVG, its title and `notes`
    as a list (compare's, check's and report's plots)."""
    if ext != ".html":
        fig.savefig(os.fspath(path), format=ext[1:])
        return
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    svg = buf.getvalue()
    svg = svg[svg.index("<svg") :]
    body = "\n".join(f"<li>{html.escape(s)}</li>" for s in notes)
    page = (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title></head>\n'
        f"<body>\n<h1>{html.escape(title)}</h1>\n{svg}\n<ul>\n{body}\n</ul>\n</body></html>\n"
    )
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(page)


def terminal(series: list, reference: int, metric: str, width: int = 72, height: int = 14) -> str:
    """A text chart: each series with its own mark, then the relative difference to the reference."""
    marks = "*o+x#@%&"
    pts = [(s, v) for _, values in series for s, v in values.items() if finite(v)]
    if not pts:
        return "(nothing to draw)\n"
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    if y1 == y0:
        y1 = y0 + 1.0
    if x1 == x0:
        x1 = x0 + 1
    grid = [[" "] * width for _ in range(height)]
    for i, (_, values) in reversed(list(enumerate(series))):  # the first series drawn last, on top
        for s, v in values.items():
            if not finite(v):
                continue
            c = min(width - 1, int((s - x0) / (x1 - x0) * (width - 1)))
            r = min(height - 1, int((y1 - v) / (y1 - y0) * (height - 1)))
            grid[r][c] = marks[i % len(marks)]
    out = [f"{metric} ({', '.join(f'{marks[i % len(marks)]} {lab}' for i, (lab, _) in enumerate(series))})"]
    for r, row in enumerate(grid):
        label = (
            f"{y1 - (y1 - y0) * r / (height - 1):>10.4g} |" if r in (0, height // 2, height - 1) else " " * 10 + " |"
        )
        out.append(label + "".join(row))
    out.append(" " * 11 + "+" + "-" * width)
    out.append(" " * 12 + f"{x0:<{width // 2}}{x1:>{width - width // 2}}")
    ref_label, ref = series[reference]
    for i, (label, values) in enumerate(series):
        if i == reference:
            continue
        common = sorted(s for s in set(values) & set(ref) if finite(values[s]) and finite(ref[s]) and ref[s] != 0)
        if not common:
            continue
        rels = [(values[s] - ref[s]) / abs(ref[s]) for s in common]
        buckets = [[] for _ in range(width)]
        for s, r in zip(common, rels, strict=False):
            buckets[min(width - 1, int((s - x0) / (x1 - x0) * (width - 1)))].append(abs(r))
        levels = " .:-=+*#%@"
        top = max(max(rels, key=abs), 1e-12, key=abs)
        line = "".join(
            levels[min(len(levels) - 1, int(math.ceil(max(b) / abs(top) * (len(levels) - 1))))] if b else " "
            for b in buckets
        )
        out.append(f"{'|rel diff|':>10} |{line}  ({label} vs {ref_label}, max {100 * abs(top):.2f}%)")
    return "\n".join(out) + "\n"
