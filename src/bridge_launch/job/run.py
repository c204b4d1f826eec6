"""A run as the registry records it, and the states it goes through."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

# STOPPED: a Slurm job that saved and exited at its time limit, below train_iters (resume continues)
STATES = (
    "SUBMITTING",
    "PENDING",
    "RUNNING",
    "COMPLETED",
    "STOPPED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "PREEMPTED",
    "UNKNOWN",
)


TERMINAL = frozenset({"COMPLETED", "STOPPED", "FAILED", "CANCELLED", "TIMEOUT"})


@dataclass
class Run:
    run_id: str  # RECIPE-MMDD-xxxx, unique in the registry
    created: float  # submit time, seconds since the epoch
    updated: float  # when the registry last refreshed the run's state
    recipe: str  # the recipe's name
    cluster: str  # the cluster profile's name
    backend: str  # local, slurm, lepton or dgxcloud
    state: str  # one of STATES
    reason: str = ""  # why it ended as it did (a failed check, the first error line, the chain's stop)
    job_ids: list = field(default_factory=list)  # the scheduler's ids, in submit order (segments, retries)
    run_dir: str = ""  # where the job writes its logs, checkpoints and records
    resumed_from: str | None = None  # the run this one resumes (`resume`)
    chain: str | None = None  # the first run of its resume chain (itself when it resumes nothing)
    # what submit and status learned: measured step and save times, the canary, attempts, image digest, ...
    info: dict = field(default_factory=dict)

    @classmethod
    def from_row(cls, row) -> "Run":
        d = dict(row)
        d["job_ids"] = json.loads(d["job_ids"])
        d["info"] = json.loads(d["info"])
        return cls(**d)

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL
