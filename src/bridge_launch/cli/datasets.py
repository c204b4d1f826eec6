"""`bridge-launch data ...`: prepare Energon shards, inspect a prepared dataset.

Thin, like the main CLI; energon, PIL, numpy, submitit load inside the commands."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer

from bridge_launch.core.errors import UsageError

app = typer.Typer(help="Prepare and inspect Energon datasets.", no_args_is_help=True)


class Output(str, Enum):
    text = "text"
    json = "json"


def _completion():
    from bridge_launch.cli import completion

    return completion


def _subsets(values: List[str]) -> list[str]:
    out = [s.strip() for v in values for s in v.split(",") if s.strip()]
    if not out:
        raise UsageError("--subsets: give one or more subset names (e.g. --subsets clevr_2)")
    return out


@app.command("prepare")
def prepare_cmd(
    dataset: str = typer.Argument(..., help="Source dataset (valid: nemotron-image-v3)."),
    source_dir: Path = typer.Option(
        ..., "--source-dir", help="Root of the downloaded dataset (holds <subset>/<subset>.jsonl)."
    ),
    output_dir: Path = typer.Option(..., "--output-dir", help="Where the shards go; must be empty or absent."),
    subsets: List[str] = typer.Option(..., "--subsets", help="Subset names (repeat or comma-separate), e.g. clevr_2."),
    validation_fraction: float = typer.Option(0.05, "--validation-fraction"),
    max_samples_per_tar: int = typer.Option(1000, "--max-samples-per-tar"),
    num_workers: int = typer.Option(2, "--num-workers", help="Processes parsing the JSONL and writing shards."),
    max_samples: Optional[int] = typer.Option(None, "--max-samples", help="Global cap on records read."),
    skip_integrity: bool = typer.Option(
        False,
        "--skip-source-integrity-check",
        help="Convert a subset without a checksum manifest (verify its provenance first).",
    ),
    write_manifest: bool = typer.Option(
        False,
        "--write-manifest",
        help="Pin the source files of unpinned subsets (sizes + sha256) so later runs verify them; a source "
        "that no longer matches a pin of your own is pinned anew (a shipped pin never is).",
    ),
    cluster: Optional[str] = typer.Option(
        None,
        "--cluster",
        help="Write shards as a Slurm job array on this cluster profile.",
        autocompletion=lambda incomplete: _completion().clusters(incomplete),
    ),
    output: Output = typer.Option(Output.text, "--output", "-o", help="text or json."),
):
    """Convert dataset subsets to Energon-ready WebDataset shards, index them, write manifest.json."""
    from bridge_launch.data import prepare as prep

    quiet = output == Output.json

    def log(msg):
        if not quiet:
            sys.stderr.write(f"{msg}\n")

    progress = _Progress(enabled=not quiet and sys.stderr.isatty())
    try:
        manifest = prep.prepare(
            dataset,
            source_dir,
            output_dir,
            subsets=_subsets(subsets),
            validation_fraction=validation_fraction,
            max_samples_per_tar=max_samples_per_tar,
            num_workers=num_workers,
            max_samples=max_samples,
            skip_integrity=skip_integrity,
            write_manifest=write_manifest,
            cluster=cluster,
            on_plan=progress.start,
            on_progress=progress.advance,
            log=log,
        )
    finally:
        progress.stop()
    if quiet:
        from bridge_launch.cli.views import dump_json

        dump_json(manifest)
        return
    c, t = manifest["counts"], manifest["timings_s"]
    # the same rate as the progress bar's (samples written per second of writing), and where the rest went
    typer.echo(
        f"Prepared {manifest['output_dir']}: {c['train']} train + {c['val']} val samples in "
        f"{manifest['shards']['train']} + {manifest['shards']['val']} shards in {t['total']:.1f} s "
        f"(reading and checking the source {t['plan']:.1f} s; writing {t['write']:.1f} s at "
        f"{sum(c.values()) / max(t['write'], 1e-9):,.0f} samples/s; indexing {t['index']:.1f} s)"
    )
    pinned = all(v.startswith("pinned now") for v in manifest["integrity_manifests"].values())
    said = "verified" if manifest["source_integrity_verified"] else "pinned (later runs verify against it)"
    typer.echo(
        f"Source integrity: {said if manifest['source_integrity_verified'] or pinned else 'NOT verified'} "
        f"({', '.join(f'{k}: {v}' for k, v in manifest['integrity_manifests'].items())})"
    )
    typer.echo(f"Train with: dataset.path={manifest['output_dir']}")


class _Progress:
    """A rich progress bar (samples, samples/s) on stderr when it is a terminal; silent otherwise."""

    def __init__(self, enabled: bool):
        self.enabled, self._p, self._task = enabled, None, None

    def start(self, total: int, shards: int):
        if not self.enabled:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self._p = Progress(
            TextColumn("writing {task.fields[shards]} shards"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
        )
        self._p.start()
        self._task = self._p.add_task("write", total=total, shards=shards, rate="")
        import time

        self._t0 = time.perf_counter()

    def advance(self, n: int):
        if self._p is not None:
            import time

            self._p.advance(self._task, n)
            done = self._p.tasks[0].completed
            self._p.update(
                self._task, rate=f"writing {done / max(time.perf_counter() - self._t0, 1e-9):,.0f} samples/s"
            )

    def stop(self):
        if self._p is not None:
            self._p.stop()
            self._p = None


@app.command("sample-source")
def sample_source_cmd(
    output_dir: Path = typer.Argument(..., help="Where to write the source tree (must not exist yet)."),
    samples: int = typer.Option(40, "--samples", "-n", help="Samples to write."),
    subset: str = typer.Option("clevr_2", "--subset", help="The subset's name."),
    seed: int = typer.Option(0, "--seed", help="Seed of the generated records and images."),
):
    """Write a small source tree in Nemotron-Image-Training-v3's layout (SUBSET/SUBSET.jsonl and
    SUBSET/media/shard_*.tar with real PNG and JPEG images) to try `data prepare` on."""
    from bridge_launch.data import synthetic

    if output_dir.exists():
        raise UsageError(f"{output_dir} exists; give a new directory")
    if samples < 1:
        raise UsageError(f"--samples {samples}: give 1 or more")
    try:
        import PIL  # noqa: F401 - the images are drawn with Pillow
    except ImportError:
        raise UsageError("data sample-source draws its images with Pillow: pip install 'bridge-launch[data]'") from None
    synthetic.make_source(output_dir, subset, samples, seed=seed)
    print(f"{samples} samples of {subset} written under {output_dir}; prepare them with --source-dir {output_dir}")


@app.command("inspect")
def inspect_cmd(
    path: Path = typer.Argument(..., help="A prepared Energon dataset directory."),
    recipe: Optional[str] = typer.Option(
        None,
        "--recipe",
        help="Simulate this recipe's native packing (e.g. qwen35-vl-sft).",
        autocompletion=lambda incomplete: _completion().recipes(incomplete),
    ),
    tokenizer: Optional[str] = typer.Option(
        None, "--tokenizer", help="Local tokenizer directory for exact text token counts."
    ),
    limit: Optional[int] = typer.Option(None, "--limit", help="Read at most this many samples per split."),
    output: Output = typer.Option(Output.text, "--output", "-o", help="text or json."),
):
    """Samples per split, images / text tokens / visual tokens per sample; with --recipe, a packing report."""
    from bridge_launch.data import inspect as insp

    if limit is not None and limit < 1:
        raise UsageError(f"--limit {limit}: valid: an integer >= 1")
    cfg = None
    if recipe:
        from bridge_launch.spec import recipes

        r = recipes.load(recipe)
        cfg = {**r["upstream_config"], **r["config"]}  # every value the recipe runs with (upstream ones too)
    elif not Path(path).exists():
        raise UsageError(f"{path} does not exist; give a dataset prepared with 'bridge-launch data prepare'")
    if not Path(path).is_dir():
        raise UsageError(f"{path} is not a directory; give a dataset prepared with 'bridge-launch data prepare'")
    measured = insp.measure(path, tokenizer=tokenizer, limit=limit, recipe_cfg=cfg)
    rep = insp.report(measured, recipe=recipe, recipe_cfg=cfg)
    if output == Output.json:
        from bridge_launch.cli.views import dump_json

        rep.pop("_pack_padding", None)
        dump_json(rep)
        return
    typer.echo(insp.text_view(rep, measured))
