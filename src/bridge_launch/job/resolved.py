"""The resolved job: everything a backend needs to render and submit one run, with where each value came from."""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field

from bridge_launch.core import upstream

RUN_ID_PLACEHOLDER = "@RUN_ID@"


BRIDGE_SRC_DIR = "bridge-src"  # where --bridge-src's packed tree is staged, under the run dir


@dataclass(frozen=True)
class ResolvedJob:
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
    warnings: list
    errors: list
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

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "ResolvedJob":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

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
