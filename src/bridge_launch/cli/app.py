"""The bridge-launch command line. Thin: parse, call, print. Heavy modules load inside
the command that needs them, so --help, recipes, status and --dry-run stay fast."""

from __future__ import annotations

import inspect
import sys
import types
import typing
from enum import Enum
from typing import List, Optional

import typer
from typer.core import TyperCommand as _TyperCommand

try:  # typer >= 0.20 carries its own copy of click
    from typer._click.exceptions import ClickException as _ClickException
    from typer._click.exceptions import NoArgsIsHelpError as _NoArgsIsHelp
except ImportError:  # pragma: no cover - older typer, click installed beside it
    from click.exceptions import ClickException as _ClickException
    from click.exceptions import NoArgsIsHelpError as _NoArgsIsHelp

from bridge_launch import __version__
from bridge_launch.core.errors import INTERRUPTED, BridgeLaunchError, missing_extra
from bridge_launch.core.errors import UsageError as BridgeLaunchUsage
from bridge_launch.judge import rule_sources  # data only (compare --help cites every rule's source)
from bridge_launch.resolve import options as job_options  # data only: submit's job-shaping options

app = typer.Typer(
    name="bridge-launch",
    help="Turn a Megatron-Bridge recipe and a cluster profile into a running, resumable job.",
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    add_completion=False,  # ours below take the shell as a value (Typer's print the current shell's script)
    context_settings={"help_option_names": ["-h", "--help"]},
)
recipes_app = typer.Typer(help="List and show recipes.", no_args_is_help=True)
overlays_app = typer.Typer(help="List and show overlays (named partial overrides).", no_args_is_help=True)
clusters_app = typer.Typer(help="List and show cluster profiles.", no_args_is_help=True)
app.add_typer(recipes_app, name="recipes")
app.add_typer(overlays_app, name="overlays")
app.add_typer(clusters_app, name="clusters")
image_app = typer.Typer(help="Container images: import one into a cluster's image cache.", no_args_is_help=True)
app.add_typer(image_app, name="image")
from bridge_launch.cli.datasets import app as data_app  # noqa: E402  (no heavy imports at its top)

app.add_typer(data_app, name="data", help="Prepare and inspect datasets (Energon shards, packing report).")


class Output(str, Enum):
    text = "text"
    json = "json"


RULES_HELP = "The rule set judging loss, timing and memory (thresholds in each report line). " + (
    rule_sources.help_text()
)


class CompareRules(str, Enum):
    """compare's rule sets (judge/rulesets.py NAMES)."""

    bridge_launch = "bridge-launch"
    megatron_bridge = "megatron-bridge"
    megatron_lm = "megatron-lm"


OUTPUT = typer.Option(Output.text, "--output", "-o", help="text or json.")


def _version(value: bool):
    if value:
        typer.echo(f"bridge-launch {__version__}")
        raise typer.Exit()


def _show_completion(value: Optional[str]):
    if value:
        from bridge_launch.cli import completion

        typer.echo(completion.script(value))
        raise typer.Exit()


def _install_completion(value: Optional[str]):
    if value:
        from bridge_launch.cli import completion

        shell, path = completion.install(value)
        typer.echo(f"{shell} completion installed in {path}; it takes effect in a new shell")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
    show_completion: Optional[str] = typer.Option(
        None,
        "--show-completion",
        metavar="[SHELL]",
        callback=_show_completion,
        is_eager=True,
        expose_value=False,
        help="Print the completion script for SHELL (bash, zsh, fish, powershell; default: this shell).",
    ),
    install_completion: Optional[str] = typer.Option(
        None,
        "--install-completion",
        metavar="[SHELL]",
        callback=_install_completion,
        is_eager=True,
        expose_value=False,
        help="Install completion for SHELL (default: this shell).",
    ),
):
    """Recipes x clusters -> validated, exactly printed, resumable jobs."""


# TAB completion (completion.py): names a user can use, run ids, override keys from the schema.
def _complete_recipe(incomplete: str):
    from bridge_launch.cli import completion

    return completion.recipes(incomplete)


def _complete_cluster(incomplete: str):
    from bridge_launch.cli import completion

    return completion.clusters(incomplete)


def _complete_overlay(incomplete: str):
    from bridge_launch.cli import completion

    return completion.overlays(incomplete)


def _complete_run(incomplete: str):
    from bridge_launch.cli import completion

    return completion.runs(incomplete)


def _complete_override(ctx: typer.Context, incomplete: str):
    from bridge_launch.cli import completion

    return completion.override_keys(incomplete, recipe=ctx.params.get("recipe"))


def _complete_resume_override(incomplete: str):
    from bridge_launch.cli import completion

    return completion.override_keys(incomplete)


def _complete_diff(incomplete: str):
    from bridge_launch.cli import completion

    return completion.runs(incomplete) + completion.recipes(incomplete)


_COMPLETE: dict[str, typing.Callable[..., typing.Any]] = {
    "cluster": _complete_cluster,
    "overlay": _complete_overlay,
    "override": _complete_override,
}


def _cli_type(hint):
    """The annotation Typer reads for a field of resolve.Options: tuple[str, ...] is a repeatable
    Optional[List[str]], X | None is Optional[X]."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is tuple:
        return Optional[List[args[0]]]  # type: ignore[valid-type]
    if origin in (typing.Union, types.UnionType):
        return Optional[next(a for a in args if a is not type(None))]
    return hint


def _with_job_options(fn):
    """fn, whose parameter `job` stands for the job-shaping options (resolve/options.py), as a Typer
    command: one click parameter per field with a flag, in `job`'s place; fn gets them as one Options."""
    hints = typing.get_type_hints(job_options.Options)
    job_params = []
    for f in job_options.flagged():
        flag = f.metadata["flag"]
        # a repeatable option is None when not given; a negated flag (--no-memory-check) is off
        default = False if flag.negated else None if f.default == () else f.default
        complete = _COMPLETE.get(flag.complete or "")
        info = (
            typer.Option(default, *flag.decls, help=flag.help, autocompletion=complete)
            if flag.decls
            else typer.Argument(default, help=flag.help, autocompletion=complete)
        )
        job_params.append(
            inspect.Parameter(
                job_options.param_name(f),
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=info,
                annotation=_cli_type(hints[f.name]),
            )
        )
    names = [p.name for p in job_params]
    sig = inspect.signature(fn, eval_str=True)
    params = [q for p in sig.parameters.values() for q in (job_params if p.name == "job" else [p])]

    def command(**kw):
        return fn(job=job_options.from_params({n: kw.pop(n) for n in names}), **kw)

    command.__name__, command.__doc__ = fn.__name__, fn.__doc__
    command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    return command


# submit's parameters that are not job fields: how to run it, not what runs (diff refuses them on a side)
NOT_JOB = ("dry_run", "follow", "sweep", "experiment", "yes", "output")


@app.command(context_settings={"allow_interspersed_args": True})
@_with_job_options
def submit(
    recipe: str = typer.Argument(
        ..., help="Recipe name or alias (see 'recipes list').", autocompletion=_complete_recipe
    ),
    job: job_options.Options = None,  # type: ignore[assignment]  # the job-shaping options: resolve/options.py
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print the resolved job and the exact launch artifact; submit nothing."
    ),
    follow: bool = typer.Option(False, "--follow", "-f", help="Stream progress until the job ends (Ctrl-C detaches)."),
    sweep: bool = typer.Option(
        False,
        "--sweep",
        help="Expand Hydra sweeps (key=a,b, choice(...), range(...)): one run per combination, as one experiment.",
    ),
    experiment: Optional[str] = typer.Option(
        None,
        "--experiment",
        help="Submit as a named experiment (a group of runs: a sweep, or several recipes given as RECIPE RECIPE...).",
    ),
    yes: bool = typer.Option(
        False,
        "--yes",
        "-y",
        help="Skip the question a terminal gets before a job above the profile's confirm_gpu_hours, or an "
        "experiment of more than its confirm_runs runs.",
    ),
    output: Output = OUTPUT,
):
    """Resolve RECIPE on a cluster, validate it, and submit it (or print it with --dry-run).
    Several recipes (RECIPE RECIPE ...) or --sweep submit an experiment: a named group of runs."""
    from bridge_launch.cli import commands

    run = dict(dry_run=dry_run, follow=follow, output=output.value, yes=yes)
    if sweep or experiment or _more_recipes(list(job.overrides)):
        raise typer.Exit(commands.submit_group(recipe, job, sweep=sweep, experiment=experiment, **run))
    raise typer.Exit(commands.submit(recipe, job, **run))


def _more_recipes(words: list[str]) -> bool:
    """Whether the positional words name more recipes (an experiment of several recipes)."""
    bare = [w for w in words if "=" not in w and not w.startswith(("~", "+"))]
    if not bare:
        return False
    from bridge_launch.runs.experiments import looks_like_recipe

    return any(looks_like_recipe(w) for w in bare)


@app.command()
def status(
    run: Optional[str] = typer.Argument(
        None, help="A run id (or a unique prefix), or an experiment's name.", autocompletion=_complete_run
    ),
    all_: bool = typer.Option(False, "--all", "-a", help="All runs, not only the 50 most recent."),
    state: Optional[str] = typer.Option(None, "--state", help="Only runs in this state (e.g. RUNNING)."),
    recipe: Optional[str] = typer.Option(None, "--recipe", help="Only runs of this recipe."),
    watch: bool = typer.Option(
        False,
        "--watch",
        "-w",
        help='Refresh until every run shown has ended (with -o json: one line per refresh, {"time", "runs"}, '
        "runs as status -o json prints them).",
    ),
    interval: float = typer.Option(5.0, "--interval", help="With --watch: seconds between refreshes."),
    output: Output = OUTPUT,
):
    """Show recent runs and their states; with RUN, its live metrics (step, loss, grad norm, speed,
    ETA, the last checkpoint, the first error line)."""
    from bridge_launch.cli import commands

    raise typer.Exit(
        commands.status(
            run, all_runs=all_, state=state, recipe=recipe, output=output.value, watch=watch, interval=interval
        )
    )


@app.command()
def logs(
    run: str = typer.Argument(..., help="A run id (or a unique prefix).", autocompletion=_complete_run),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing until the run ends."),
    rank: Optional[int] = typer.Option(None, "--rank", "-r", help="Only this rank's lines (by their [rankN]: prefix)."),
    grep: Optional[str] = typer.Option(None, "--grep", "-g", help="Only lines matching this regular expression."),
    tail: Optional[int] = typer.Option(None, "--tail", "-n", help="Only the last N (matching) lines."),
):
    """Print a run's output."""
    from bridge_launch.cli import commands

    raise typer.Exit(commands.logs(run, follow=follow, rank=rank, grep=grep, tail=tail))


@app.command()
def report(
    run: str = typer.Argument(
        ..., help="A run id (or a unique prefix), or an experiment's name.", autocompletion=_complete_run
    ),
    plot: Optional[str] = typer.Option(
        None,
        "--plot",
        help="Where to draw the GPU-hour split: FILE.png, .svg or .html (the 'plot' extra), or - for a terminal "
        "chart [default: RUN-gpu-hours.png with matplotlib, else the terminal chart; none with -o json].",
    ),
    output: Output = OUTPUT,
):
    """One page on a run (or an experiment): recipe, cluster, state, steps, and its GPU-hours split into
    start-up, training, redone steps, lost (failed jobs, canary, health steps) and checkpointing, from
    Slurm's accounting (sacct) and the logs; each job (attempt, segment, canary) with its times."""
    from bridge_launch.cli import gpu_report as report_view

    raise typer.Exit(report_view.report(run, plot=plot, output=output.value))


@app.command()
def check(
    sources: List[str] = typer.Argument(..., help="Runs (id or prefix), experiments, or log files."),
    steps: Optional[int] = typer.Option(
        None, "--steps", help="The expected number of iterations (default: the total the iteration lines print)."
    ),
    only: Optional[List[str]] = typer.Option(
        None,
        "--only",
        help="Only these criteria (repeatable or comma-separated): steps, finite, skipped, nan, checkpoint, "
        "validation, test, no-signal, throughput (with an --expect-* option).",
    ),
    skip: Optional[List[str]] = typer.Option(None, "--skip", help="Leave these criteria out (as --only)."),
    metric: str = typer.Option("lm loss", "--metric", help="The loss that must be on every iteration line."),
    export_golden: Optional[str] = typer.Option(
        None,
        "--export-golden",
        help="Also write the run's values as Megatron-LM golden values (JSON); of several runs, their noise bands "
        "(per-step min/max/mean/std and the recommended tolerance, as compute_golden_statistics.py computes them).",
    ),
    confidence_multiplier: Optional[float] = typer.Option(
        None,
        "--confidence-multiplier",
        help="--export-golden of several runs: the recommended tolerance is this times the largest observed "
        "deviation from the mean [default: 1.5, compute_golden_statistics.py's].",
    ),
    straggler_threshold: float = typer.Option(
        0.10,
        "--straggler-threshold",
        help="Stragglers: how much slower than the rest a rank must be in an interval (0.10: 10%).",
    ),
    straggler_intervals: int = typer.Option(
        5, "--straggler-intervals", help="Stragglers: in at least this many log intervals."
    ),
    expect_tflops: Optional[float] = typer.Option(
        None, "--expect-tflops", help="Throughput criterion: the TFLOP/s per GPU the run should reach."
    ),
    expect_step_time: Optional[float] = typer.Option(
        None, "--expect-step-time", help="Throughput criterion: the seconds per step the run should take."
    ),
    expect_golden: Optional[str] = typer.Option(
        None,
        "--expect-golden",
        help="Throughput criterion: the median iteration-time of a golden-values file (check --export-golden).",
    ),
    expect_plan: bool = typer.Option(
        False,
        "--expect-plan",
        help="Throughput criterion, for runs: the TFLOP/s per GPU `plan` expects for the run's job (the "
        "recipe's measured figure for its GPU and precision), and its FLOPs per step and MFU.",
    ),
    throughput_tolerance: float = typer.Option(
        0.20, "--throughput-tolerance", help="Throughput criterion: how much slower than expected fails (0.20: 20%)."
    ),
    plot: Optional[str] = typer.Option(
        None,
        "--plot",
        help="Draw the ranks' round-trip time per log interval from the straggler lines (the fastest rank and each "
        "rank a line names slowest, and how much slower): FILE.png, .svg or .html, or - for a terminal chart.",
    ),
    output: Output = OUTPUT,
):
    """The hardware gate: last iteration equals its total, every loss and grad norm finite, no
    skipped or NaN iterations, a checkpoint at the last iteration, validation and test lines, no
    SIGTERM exit; with an --expect-* option, throughput: the median TFLOP/s per GPU (or step time)
    after the first tenth of the steps (evaluate.py:368-373) no more than --throughput-tolerance
    slower, with MFU where the GPU's peak is known and, when slower, where the time went (the
    timers' forward-backward, data wait, optimizer; checkpoint saves). Each criterion with its
    evidence; exit 0 passes, 1 fails.

    Also reported, not judged: stragglers, the ranks that stay slower than the rest, read from
    Megatron-LM's StragglerDetector lines (--log-straggler; megatron/core/utils.py:1814-1843 @ 2a75ac12c)
    and per-rank timer lines (--timing-log-option all; megatron/core/timers.py:338-376)."""
    from bridge_launch.cli import judging as judge

    raise typer.Exit(
        judge.check(
            sources,
            steps=steps,
            only=only,
            skip=skip,
            metric=metric,
            export_golden=export_golden,
            output=output.value,
            straggler_threshold=straggler_threshold,
            straggler_intervals=straggler_intervals,
            multiplier=confidence_multiplier,
            expect={
                "tflops": expect_tflops,
                "step_time": expect_step_time,
                "golden": expect_golden,
                "plan": expect_plan,
                "tolerance": throughput_tolerance,
            },
            plot=plot,
        )
    )


@app.command()
def compare(
    sources: List[str] = typer.Argument(
        ...,
        help="A B (runs, log files or Megatron-LM golden-values JSON; A is judged against B), or an experiment's name; "
        "with --golden: A REF [REF ...] (or A EXPERIMENT).",
    ),
    golden: bool = typer.Option(
        False,
        "--golden",
        help="Judge A against the noise band of its references (two or more runs, logs or golden files, an "
        "experiment, or a bands file from check --export-golden): per-step min/max/mean/std, each step within "
        "[min, max] widened by the tolerance Megatron-LM's compute_golden_statistics.py recommends "
        "(compute_golden_statistics.py:413-614 @ 2a75ac12c). A bands file as B is judged this way without --golden.",
    ),
    confidence_multiplier: Optional[float] = typer.Option(
        None,
        "--confidence-multiplier",
        help="--golden: the recommended tolerance is this times the largest observed deviation from the mean "
        "[default: 1.5, compute_golden_statistics.py:689-696].",
    ),
    metric: str = typer.Option("lm loss", "--metric", help="The iteration-line field to compare."),
    rules: CompareRules = typer.Option(
        CompareRules.bridge_launch,
        "--rules",
        help=RULES_HELP,
        case_sensitive=False,
    ),
    deterministic: bool = typer.Option(
        False,
        "--deterministic",
        help="megatron-lm rules: also require the deterministic (exact) tests, as the harness does without "
        "compare_approximate_results (common.py:224-228).",
    ),
    rtol: Optional[float] = typer.Option(
        None, "--rtol", help="bridge-launch rules: relative tolerance of each aligned step [default: 0.02]."
    ),
    atol: Optional[float] = typer.Option(
        None, "--atol", help="bridge-launch rules: absolute tolerance added to it (as numpy.isclose) [default: 0]."
    ),
    allowed: Optional[int] = typer.Option(
        None,
        "--allowed",
        help="bridge-launch rules: steps allowed outside the tolerance (default: min(max(N//100, 1), 50), "
        "Megatron-LM's).",
    ),
    final_rtol: Optional[float] = typer.Option(
        None, "--final-rtol", help="bridge-launch rules: relative tolerance of the final value [default: 0.03]."
    ),
    plot: Optional[str] = typer.Option(
        None,
        "--plot",
        help="Draw the curves and their relative difference: FILE.png, .svg or .html (the 'plot' extra), or - for a "
        "terminal chart.",
    ),
    output: Output = OUTPUT,
):
    """Judge A against the reference B under a rule set: loss (aligned per-step comparison,
    correlation, final difference, first step out of tolerance), timing and memory where the logs
    carry them; each rule with its source in the report. With --golden, against the noise band of
    several reference runs instead, naming the steps outside it and by how much. Exit 0 when it
    passes, 1 not."""
    from bridge_launch.cli import judging as judge

    raise typer.Exit(
        judge.compare(
            sources,
            metric=metric,
            rtol=rtol,
            atol=atol,
            allowed=allowed,
            final_rtol=final_rtol,
            plot=plot,
            output=output.value,
            rules=rules.value,
            deterministic=deterministic,
            golden=golden,
            multiplier=confidence_multiplier,
        )
    )


@app.command()
def cancel(run: str = typer.Argument(..., help="A run id (or a unique prefix).", autocompletion=_complete_run)):
    """Cancel a run (idempotent)."""
    from bridge_launch.cli import commands

    raise typer.Exit(commands.cancel(run))


@app.command(context_settings={"allow_interspersed_args": True})
def resume(
    run: str = typer.Argument(..., help="The run to resume (id or unique prefix).", autocompletion=_complete_run),
    overrides: Optional[List[str]] = typer.Argument(
        None, help="Extra overrides, e.g. train.train_iters=2000.", autocompletion=_complete_resume_override
    ),
    follow: bool = typer.Option(False, "--follow", "-f", help="Stream progress until the job ends."),
    output: Output = OUTPUT,
):
    """Submit a run's job again from its last checkpoint, in the same run dir and chain."""
    from bridge_launch.cli import commands

    raise typer.Exit(commands.resume(run, overrides or [], follow=follow, output=output.value))


def _submit_command(ctx):
    root = ctx.find_root()
    return root.command.get_command(root, "submit")


class _DiffCommand(_TyperCommand):
    """diff's help lists the options each side takes: submit's own (one list, one parser)."""

    def format_epilog(self, ctx, formatter):
        submit_cmd = _submit_command(ctx)
        job = job_options.param_names()
        records = [
            p.get_help_record(ctx)
            for p in submit_cmd.params
            if p.name in job and getattr(p, "param_type_name", "") == "option"
        ]
        with formatter.section("Options of each side (as for submit)"):
            formatter.write_dl([r for r in records if r])
        super().format_epilog(ctx, formatter)


def _side_parser(ctx):
    """One side of diff, parsed by submit's own parser: {click parameter name: value}."""
    submit_cmd = _submit_command(ctx)

    def parse(words):
        try:
            sub = submit_cmd.make_context("diff", list(words), resilient_parsing=False)
        except _ClickException as exc:
            raise BridgeLaunchUsage(f"diff: {' '.join(words)}: {exc.format_message()}") from None
        return dict(sub.params)

    return parse


@app.command(cls=_DiffCommand, context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def diff(
    ctx: typer.Context,
    # Declared for --help and completion; the two sides are parsed from the raw argv (_raw_after).
    args: List[str] = typer.Argument(  # noqa: ARG001
        ...,
        help="RUN_A RUN_B, or RECIPE [OPTIONS] [KEY=VALUE...] -- RECIPE [OPTIONS] [KEY=VALUE...]",
        autocompletion=_complete_diff,
    ),
    all_keys: bool = typer.Option(False, "--all", help="Show equal values too."),
    output: Output = OUTPUT,
):
    """Compare two runs, or two recipe/cluster/option/override sets, with the layer each value came from:
    everything that reaches the job (scheduler options, environment, secrets by name, container, config)."""
    from bridge_launch.cli import commands

    raise typer.Exit(
        commands.diff(
            _raw_after("diff"),
            all_keys=all_keys,
            output=output.value,
            parse_side=_side_parser(ctx),
            not_job=[n for n in NOT_JOB if n != "output"],  # diff's own -o is taken off the line first
        )
    )


@app.command(context_settings={"allow_interspersed_args": True})
def plan(
    recipe: str = typer.Argument(..., help="Recipe name or alias.", autocompletion=_complete_recipe),
    overrides: Optional[List[str]] = typer.Argument(
        None, help="Hydra overrides, as for submit.", autocompletion=_complete_override
    ),
    cluster: str = typer.Option("local", "--cluster", "-c", help="Cluster profile.", autocompletion=_complete_cluster),
    overlay: Optional[List[str]] = typer.Option(
        None, "--overlay", help="Overlay to apply (repeatable, in order).", autocompletion=_complete_overlay
    ),
    nodes: Optional[int] = typer.Option(None, "--nodes", "-N", help="Node count."),
    tflops: Optional[float] = typer.Option(
        None, "--tflops", help="Achieved TFLOP/s per GPU (overrides the recipe's assumption)."
    ),
    tokens: Optional[float] = typer.Option(None, "--tokens", help="Token budget: steps = tokens / tokens per step."),
    output: Output = OUTPUT,
):
    """Rank groups, NVLink domains, memory per GPU and GPU-hours, before submitting (needs the 'plan' extra)."""
    from bridge_launch.cli import commands

    raise typer.Exit(
        commands.plan(
            recipe,
            overrides or [],
            cluster=cluster,
            overlays=overlay or [],
            nodes=nodes,
            tflops=tflops,
            tokens=tokens,
            output=output.value,
        )
    )


@app.command()
def prune(
    older_than: str = typer.Option("30d", "--older-than", help="Age of finished runs to forget: 1w, 30d, 12h, 90m."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List what would be forgotten; change nothing."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation (asked only on a terminal)."),
):
    """Forget finished runs older than the given age: their records and local log copies (run dirs are
    kept; 'bridge-launch import RUN_DIR' registers one again). Lists them first."""
    from bridge_launch.cli import commands

    raise typer.Exit(commands.prune(older_than, dry_run=dry_run, yes=yes))


@app.command("import")
def import_(
    run_dirs: List[str] = typer.Argument(..., help="Run directories (<job_root>/<run id>) to register again."),
    output: Output = OUTPUT,
):
    """Register the runs a run directory holds (e.g. after prune forgot them), with their lineage and state."""
    from bridge_launch.cli import commands

    raise typer.Exit(commands.import_runs(run_dirs, output.value))


@image_app.command("import")
def image_import(
    image: str = typer.Argument(
        ..., help="REGISTRY/IMAGE[:TAG] (or REGISTRY#IMAGE[:TAG]), or a squashfs path on the cluster."
    ),
    cluster: str = typer.Option(
        ..., "--cluster", "-c", help="Slurm cluster profile with [slurm] image_cache.", autocompletion=_complete_cluster
    ),
    output: Output = OUTPUT,
):
    """Run `enroot import` once, as a job on one compute node, into the profile's image cache (keyed by
    digest); later submits of that image start from the cached squashfs."""
    from bridge_launch.cli import commands

    raise typer.Exit(commands.image_import(image, cluster, output=output.value))


def _raw_after(command: str) -> list[str]:
    """The command's own words as typed (click drops the first '--', which diff needs)."""
    argv = sys.argv[1:]
    return argv[argv.index(command) + 1 :] if command in argv else argv


@recipes_app.command("list")
def recipes_list(output: Output = OUTPUT):
    """List recipes."""
    from bridge_launch.cli import commands

    raise typer.Exit(commands.recipes_list(output.value))


@recipes_app.command("show")
def recipes_show(name: str = typer.Argument(..., autocompletion=_complete_recipe), output: Output = OUTPUT):
    """Show one recipe with every value it sets."""
    from bridge_launch.cli import commands

    raise typer.Exit(commands.recipes_show(name, output.value))


@overlays_app.command("list")
def overlays_list(output: Output = OUTPUT):
    """List overlays."""
    from bridge_launch.cli import commands

    raise typer.Exit(commands.overlays_list(output.value))


@overlays_app.command("show")
def overlays_show(name: str = typer.Argument(..., autocompletion=_complete_overlay), output: Output = OUTPUT):
    """Show one overlay."""
    from bridge_launch.cli import commands

    raise typer.Exit(commands.overlays_show(name, output.value))


@clusters_app.command("list")
def clusters_list(output: Output = OUTPUT):
    """List cluster profiles."""
    from bridge_launch.cli import commands

    raise typer.Exit(commands.clusters_list(output.value))


@clusters_app.command("show")
def clusters_show(name: str = typer.Argument(..., autocompletion=_complete_cluster), output: Output = OUTPUT):
    """Show one cluster profile (after 'extends')."""
    from bridge_launch.cli import commands

    raise typer.Exit(commands.clusters_show(name, output.value))


@clusters_app.command("forget-node")
def clusters_forget_node(
    name: str = typer.Argument(..., autocompletion=_complete_cluster),
    node: str = typer.Argument(..., help="A node on the cluster's bad-node list (clusters show lists them)."),
):
    """Take a node off the cluster's bad-node list, so that submits may use it again."""
    from bridge_launch.cli import commands

    raise typer.Exit(commands.clusters_forget_node(name, node))


def _exit_now(code) -> None:
    """End the process without the interpreter's teardown. Once `plan` has imported megatron-core
    (and with it torch and some 3,000 modules), tearing them down costs about a quarter of the
    command's CPU time (measured: bench/plan_speed.py); nothing of ours runs at exit."""
    import logging
    import os

    logging.shutdown()
    if isinstance(code, str):  # sys.exit("message") prints the message and exits 1
        sys.stderr.write(code + "\n")
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code if isinstance(code, int) else (0 if code is None else 1))


def _json_mode(argv: list[str]) -> bool:
    """-o json / --output json anywhere on the line: then stdout carries JSON only, errors too."""
    return any(
        a in ("--output=json", "-ojson") or a in ("-o", "--output") and nxt == "json"
        for a, nxt in zip(argv, [*argv[1:], ""], strict=False)
    )


def _with_shells(argv: list[str]) -> list[str]:
    """--show-completion / --install-completion take an optional shell: alone, this shell's."""
    out = list(argv)
    for i, a in enumerate(out):
        if a in ("--show-completion", "--install-completion") and (i + 1 == len(out) or out[i + 1].startswith("-")):
            from bridge_launch.cli import completion

            out.insert(i + 1, completion.detect_shell())
            break
    return out


# The commands a command reads from the group at run time: diff parses each side with submit's parser.
_USES = {"diff": ("submit",)}


def _app_for(argv: list[str]) -> typer.Typer:
    """The app holding only the command `argv` names: Typer builds the click parameters of every
    command it holds on each run (about 8 ms of every command here), and one command is all a run
    dispatches to. Anything else (no command, an option first, a name that is not a command) gets
    the whole app, for its help and its "No such command" with the names it knows."""
    import copy

    from typer.main import get_command_name

    if not argv or argv[0].startswith("-"):
        return app
    name = argv[0]
    wanted = {name, *_USES.get(name, ())}
    commands = [
        c
        for c in app.registered_commands
        if (c.name or get_command_name(c.callback.__name__)) in wanted  # type: ignore[union-attr]
    ]
    groups = [g for g in app.registered_groups if g.name == name]
    if not commands and not groups:
        return app
    narrow = copy.copy(app)
    narrow.registered_commands, narrow.registered_groups = commands, groups
    return narrow


def main() -> None:
    import json
    import os

    argv = _with_shells(sys.argv[1:])
    json_mode = _json_mode(argv)

    def fail(message: str, code: int):
        if json_mode:  # the error as JSON on stdout; a human reading stderr still gets the line
            sys.stdout.write(json.dumps({"error": message, "exit_code": code}) + "\n")
        sys.stderr.write(f"bridge-launch: error: {message}\n")
        sys.exit(code)

    if os.environ.get("_BRIDGE_LAUNCH_COMPLETE"):
        from typer._completion_classes import completion_init

        completion_init()  # Typer's bash/zsh/fish/PowerShell completion classes
    cli = app if os.environ.get("_BRIDGE_LAUNCH_COMPLETE") else _app_for(argv)
    try:
        code = cli(args=argv, prog_name="bridge-launch", standalone_mode=False)
    except BridgeLaunchError as exc:
        fail(str(exc), exc.exit_code)
    except _NoArgsIsHelp as exc:  # a group named alone (`recipes`, or nothing): its help, not an error
        exc.show()
        sys.exit(exc.exit_code)
    except _ClickException as exc:  # click's usage errors: one line, and where the help is
        ctx = getattr(exc, "ctx", None)
        message = exc.format_message().replace("\n", " ")
        fail(message + (f" (see '{ctx.command_path} -h')" if ctx else ""), exc.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("bridge-launch: interrupted\n")
        sys.exit(INTERRUPTED)
    except ImportError as exc:  # an optional extra not installed: which one, not a traceback
        line = missing_extra(exc)
        if line is None:
            raise
        fail(line, BridgeLaunchUsage.exit_code)
    code = code if isinstance(code, int) else 0
    if "megatron.core" in sys.modules:  # plan: skip the teardown of torch and megatron-core (_exit_now)
        _exit_now(code)
    sys.exit(code)


if __name__ == "__main__":
    main()
