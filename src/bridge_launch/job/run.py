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
    run_id: str
    created: float
    updated: float
    recipe: str
    cluster: str
    backend: str
    state: str
    reason: str = ""
    job_ids: list = field(default_factory=list)
    run_dir: str = ""
    resumed_from: str | None = None
    chain: str | None = None
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
