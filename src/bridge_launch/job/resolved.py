"""The resolved job: everything a backend needs to render and submit one run, with where each value came from."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from bridge_launch.core import upstream
from bridge_launch.job.frozen import freeze, thaw

RUN_ID_PLACEHOLDER = "@RUN_ID@"


BRIDGE_SRC_DIR = "bridge-src"  # where --bridge-src's packed tree is staged, under the run dir


@dataclass(frozen=True)
class Finding:
    """One thing resolve found about the job, and what it means for a submit. The dry run and the
    submit see the same findings: the dry run shows them all, a submit refuses on any that blocks it."""

    text: str  # as the dry run shows it
    error: bool = False  # the job is wrong as resolved: the dry run fails too (exit 2)
    blocks_submit: bool = False  # a submit refuses the job while it stands (every error does)
    submit_text: str | None = None  # the words a submit refuses with, where they differ from text
    # False: a note only the dry run makes; at submit the backend says it with the platform's own facts
    at_submit: bool = True
    alone: bool = False  # a submit names it only when nothing else blocks it (one line at a time)

    def __post_init__(self):
        if self.error and not self.blocks_submit:
            object.__setattr__(self, "blocks_submit", True)

    @classmethod
    def from_dict(cls, data: dict) -> "Finding":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def errors(texts) -> list:
    return [Finding(t, error=True) for t in texts]


def warnings(texts) -> list:
    return [Finding(t) for t in texts]


@dataclass(frozen=True)
class ResolvedJob:
    """Frozen, deeply: every dict and list in it is read-only (job/frozen.py); a changed job is a new
    one (dataclasses.replace, with_run_id, for_run)."""

    recipe: str
    upstream: str | None
    mode: str | None
    workload: str
    dataset_kind: str | None
    entry: str
    hf_model: str | None
    cluster: str
    backend: str
    overlays: list
    nodes: int
    gpus_per_node: int
    world_size: int
    gpu_type: str
    container: str | None
    config: dict  # dotted key -> value (what the job will run with, as far as we set it)
    args: list  # the KEY=VALUE tokens handed to the entry point, one per key we set
    env: dict  # non-secret environment
    secrets: list  # names only; values are read from the submitting environment at submit
    required_secrets: list
    mounts: list
    job_root: str
    run_id: str  # RUN_ID_PLACEHOLDER until submit allocates it
    run_dir: str  # job_root/<run id>; the id is RUN_ID_PLACEHOLDER until submit allocates it
    python: str
    scheduler: dict  # backend settings after CLI flags (slurm / lepton / dgxcloud section)
    profile: dict  # the resolved cluster profile
    chain: dict | None  # --until-done: see _chain
    provenance: dict  # {"config": {key: source}, "env": {...}, "job": {...}}
    missing_inputs: list
    findings: list  # [Finding], in the order found; errors, warnings and refusals are views of it
    image: dict | None = None  # from the image cache: {"ref", "digest", "squashfs"} (container is the squashfs)
    bridge_src: str | None = None  # the local checkout --bridge-src packs at submit
    # Slurm: {NAME: {"source": "file:PATH" | "netrc:MACHINE[:PATH]", "optional", "from"}}, read on the cluster
    secret_sources: dict = field(default_factory=dict)
    upstream_status: str | None = None  # the recipe's note when its upstream function is not in Megatron-Bridge
    # the recipe's note when its container lacks its bridge_commit: --bridge-src must be at that commit
    needs_bridge_src: str | None = None
    # the file (workloads/bridge_recipes/) of the recipe function bridge-launch ships, for a recipe whose
    # function no Megatron-Bridge revision has; the job's entry is then workload/bridge_recipe_entry.py
    bridge_recipe_module: str | None = None
    canary: dict | None = None  # canary.settings: the checks before the job (None: none)
    bridge_commit: str | None = None  # the Megatron-Bridge revision whose recipe function the job calls
    # Slurm jobs with a time limit (and chains): the save before it; see resolver._limit_save
    limit_save: dict | None = None
    # Slurm jobs that are not chains: the batch script's retry of a flaky failure; see resolver._retry
    retry: dict | None = None

    def recipe_argv(self) -> list:
        """run_recipe.py's arguments for this job, in the interface of the revision it pins
        (core/upstream.py): --recipe, --mode only where that run_recipe.py takes it, the overrides."""
        mode = ["--mode", self.mode] if upstream.revision(self.bridge_commit).takes_mode and self.mode else []
        return ["--recipe", self.upstream, *mode, *self.args]

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "findings":
                value = tuple(x if isinstance(x, Finding) else Finding.from_dict(x) for x in value)
            object.__setattr__(self, f.name, freeze(value))

    @property
    def errors(self) -> list:
        """What is wrong with the job: the dry run fails (exit 2), and a submit refuses it."""
        return [f.text for f in self.findings if f.error]

    @property
    def warnings(self) -> list:
        """The other findings, as the dry run shows them (some of them block a submit: refusals)."""
        return [f.text for f in self.findings if not f.error]

    @property
    def refusals(self) -> list:
        """What a submit refuses the job with (empty: it may be submitted), in the order found."""
        blocking = [f for f in self.findings if f.blocks_submit]
        return [f.submit_text or f.text for f in [f for f in blocking if not f.alone] or blocking]

    @property
    def submit_warnings(self) -> list:
        """The warnings a submit says (the dry run's, less those that block it and its own notes)."""
        return [f.text for f in self.findings if not f.blocks_submit and f.at_submit]

    def to_dict(self) -> dict:
        """Plain dicts and lists (JSON-able), with the findings' texts as "warnings" and "errors"."""
        out: dict = {}
        for f in dataclasses.fields(self):
            if f.name == "findings":
                out["warnings"], out["errors"] = self.warnings, self.errors
                out["findings"] = [dataclasses.asdict(x) for x in self.findings]
            else:
                out[f.name] = thaw(getattr(self, f.name))
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "ResolvedJob":
        """A job to_dict wrote; one written before findings existed has them from its errors and warnings."""
        args = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        if "findings" not in data:
            args["findings"] = [*errors(data.get("errors") or []), *warnings(data.get("warnings") or [])]
        return cls(**args)

    def with_run_id(self, run_id: str) -> "ResolvedJob":
        """The same job with the run id filled in everywhere the placeholder stands."""
        return ResolvedJob.from_dict(replace_text(self.to_dict(), RUN_ID_PLACEHOLDER, run_id))

    def for_run(self, run_id: str) -> "ResolvedJob":
        """The same job (same run dir, checkpoints, logger paths) under another run id: a resume."""
        return dataclasses.replace(self, run_id=run_id)


def replace_text(obj, old: str, new: str):
    if isinstance(obj, str):
        return obj.replace(old, new)
    if isinstance(obj, list):
        return [replace_text(x, old, new) for x in obj]
    if isinstance(obj, dict):
        return {replace_text(k, old, new): replace_text(v, old, new) for k, v in obj.items()}
    return obj
