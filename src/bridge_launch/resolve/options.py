"""The job-shaping options, declared once: everything the command line can say about a job besides
the recipe name. Each field of Options is what resolve reads; its flag is how submit spells it.
submit's parameters (cli/app.py), each side of diff and each run of an experiment are all made from
these fields, so a new option is a field here (and its use in resolve), nowhere else.

Data only, standard library only: `submit --help` reads it."""

from __future__ import annotations

from dataclasses import Field, dataclass, field, fields
from typing import Any, Mapping


@dataclass(frozen=True)
class Flag:
    """How the command line spells one field of Options."""

    decls: tuple[str, ...]  # click's declarations ("--nodes", "-N"); () for the positional overrides
    help: str
    negated: bool = False  # --no-memory-check: the flag says the field's opposite
    complete: str | None = None  # what TAB offers: "cluster", "overlay" or "override" (cli/completion.py)


def _flag(default: Any, *decls: str, help: str, negated: bool = False, complete: str | None = None) -> Any:  # noqa: A002
    return field(default=default, metadata={"flag": Flag(decls, help, negated, complete)})


@dataclass(frozen=True)
class Options:
    """Everything the command line can say about a job besides the recipe name. A field with a flag
    is one of submit's parameters (in this order); one without comes from elsewhere (bad_nodes, measured)."""

    cluster: str = _flag("local", "--cluster", "-c", help="Cluster profile.", complete="cluster")
    overlays: tuple[str, ...] = _flag(
        (), "--overlay", help="Overlay to apply (repeatable, in order).", complete="overlay"
    )
    overrides: tuple[str, ...] = _flag(
        (), help="Hydra overrides: key=value, +key=value, ++key=value, ~key.", complete="override"
    )
    nodes: int | None = _flag(None, "--nodes", "-N", help="Node count (overrides the cluster/recipe).")
    time: str | None = _flag(None, "--time", "-t", help="Slurm time limit, e.g. 04:00:00.")
    partition: str | None = _flag(None, "--partition", "-p", help="Slurm partition.")
    account: str | None = _flag(None, "--account", "-A", help="Slurm account.")
    container: str | None = _flag(None, "--container", help="Container image (overrides recipe and cluster).")
    env: tuple[str, ...] = _flag((), "--env", "-e", help="Extra environment NAME=VALUE (not for secrets).")
    secrets: tuple[str, ...] = _flag(  # NAME, or NAME=SOURCE
        (),
        "--secret",
        help="A secret by name (repeatable); on Slurm NAME=file:PATH or NAME=netrc:MACHINE reads it from a file on "
        "the cluster, never through sbatch.",
    )
    bridge_src: str | None = _flag(  # packed at submit (runs/codepack.py), mounted over the container's copy
        None,
        "--bridge-src",
        help="A local Megatron-Bridge git checkout: packed (tracked files, uncommitted edits included), staged in the "
        "run dir and mounted over the container's copy.",
    )
    segment_size: str | None = _flag(  # None: the profile's [slurm]/[lepton] segment_size
        None,
        "--segment-size",
        help="NVLink-domain segments: 'domain' keeps a job that fits one domain in it (Megatron-Bridge's rule, the "
        "default); 'smallest' takes the smallest segment that keeps TP/EP groups whole (starts sooner on racks with "
        "few free nodes, other collectives cross racks).",
    )
    until_done: bool = _flag(
        False, "--until-done", help="Slurm: continue across time limits and flaky failures until train_iters."
    )
    # flaky failures retried per Slurm run, chain or not (time-limit continuations and attempts that
    # saved a newer checkpoint do not count)
    max_restarts: int = _flag(
        3, "--max-restarts", help="Flaky failures a Slurm job retries (without the node at fault; 0: none)."
    )
    # None: sized (plan/sizing.lead)
    signal_lead: int | None = _flag(
        None,
        "--signal-lead",
        help="Slurm: seconds before the time limit that the trainers are told to save (default: 120, or more "
        "where a step and a save need it).",
    )
    max_segments: int | None = _flag(None, "--max-segments", help="With --until-done: stop after this many segments.")
    step_time: float | None = _flag(  # else plan's estimate
        None, "--step-time", help="Slurm: seconds per step, for sizing the save before the limit (default: plan's)."
    )
    force: bool = _flag(
        False, "--force", help="Submit even when sizing finds that no save can land before the time limit."
    )
    canary: bool | None = _flag(  # None: the profile's [canary] enabled
        None,
        "--canary/--no-canary",
        help="First check on the cluster, in the job's image, what no local check can (recipe and overrides, data, "
        "checkpoint, HF cache, NVLink, busbw); the job waits for it. Default: the profile's [canary] enabled.",
    )
    memory_check: bool = _flag(  # plan's memory estimate above 100% of the GPU is an error (else a warning)
        True,
        "--no-memory-check",
        help="Submit even when plan's memory estimate exceeds the GPU (a warning, not an error).",
        negated=True,
    )
    # ((node, why), ...): the cluster's bad-node list (runs/bad_nodes.py), excluded on Slurm; no flag
    bad_nodes: tuple[tuple[str, str], ...] = ()
    # ((run_id, step shape, step_s, save_s), ...), newest first: what past runs of the recipe on the
    # cluster measured (runs/measured.py); sizing takes the first of the job's own shape. No flag
    measured: tuple[tuple[str, str, float | None, float | None], ...] = ()


def flagged() -> list[Field]:
    """The fields the command line sets, in submit's order."""
    return [f for f in fields(Options) if "flag" in f.metadata]


def param_name(f: Field) -> str:
    """The name click gives the field's parameter (what a parsed command's params hold)."""
    return f"no_{f.name}" if f.metadata["flag"].negated else f.name


def param_names() -> list[str]:
    return [param_name(f) for f in flagged()]


def from_params(params: Mapping[str, Any], **more: Any) -> Options:
    """Options from submit's parsed parameters (click's names); `more` sets fields without a flag."""
    kw: dict[str, Any] = {}
    for f in flagged():
        value = params.get(param_name(f))
        if value is None:
            continue
        if f.metadata["flag"].negated:
            value = not value
        elif isinstance(value, (list, tuple)):
            value = tuple(value)
        kw[f.name] = value
    return Options(**kw, **more)
