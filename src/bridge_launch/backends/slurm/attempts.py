"""Retries for a Slurm job that is not a chain, decided by its own batch script (the launcher is not
running then): a flaky failure is resubmitted without the node the health step or the logs name
(--exclude), an attempt that saved a newer complete checkpoint does not use up --max-restarts and
the next one loads it, a deterministic failure never retries and an unknown one only after it saved
a newer checkpoint (the classes: logs/failures.py). The logic is
batch/attempts.sh; this holds where it records and how its records read.

Each attempt appends one record to ATTEMPTS/outcomes, tab-separated:

    JOB  ATTEMPT  OUTCOME  FROM  TO  NODES  BAD  DETAIL

OUTCOME is completed, stopped (a cancel or the time limit), retried (DETAIL names the next job) or
failed (not retried; DETAIL says why); FROM and TO are the complete checkpoints at its start and
end; BAD the nodes it left out of the next attempt ("-": none). ATTEMPTS/jobs lists the later
attempts' job ids, ATTEMPTS/excluded the nodes left out so far, ATTEMPTS/restarts the budget used;
ATTEMPTS/stopped (written by cancel) keeps an attempt from resubmitting."""

from __future__ import annotations

OUTCOMES = "outcomes"
JOBS = "jobs"
STOPPED = "stopped"
FIELDS = ("job_id", "attempt", "outcome", "from", "to", "nodes", "bad", "detail")


def attempts_dir(job) -> str:
    return f"{job.run_dir}/attempts/{job.run_id}"


def parse(text: str) -> dict:
    """{job id: record} from an outcomes file (the last record of a job id wins: a requeued rerun)."""
    out = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) != len(FIELDS) or not parts[0].isdigit():
            continue
        rec = dict(zip(FIELDS, parts, strict=True))
        for k in ("attempt", "from", "to"):
            rec[k] = int(rec[k]) if rec[k].isdigit() else None
        rec["bad"] = [] if rec["bad"] in ("", "-") else rec["bad"].split(",")
        out[rec["job_id"]] = rec
    return out
