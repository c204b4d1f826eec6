"""The batch script's resume point: which checkpoint the trainer will load, decided in bash on the
batch host by trainer_protocol's publication rule (a chain's segment and a retried attempt alike).
The rule is batch/resume-point.sh; this gives it the job's checkpoint settings."""

from __future__ import annotations

from bridge_launch.workloads import trainer_protocol as P


def inputs(c: dict) -> dict:
    """resume-point.sh's inputs, from a job's chain or retry settings: the checkpoint dirs, the
    tracker's name, the files a complete iteration always has (trainer_protocol) and the override
    that loads a given iteration."""
    return {
        "save_dir": c["save"],
        "np_dir": c.get("non_persistent_dir") or "",
        "tracker": P.TRACKER,
        "complete_files": list(c["complete_files"]),
        "ckpt_step_key": P.CKPT_STEP_KEY,
    }
