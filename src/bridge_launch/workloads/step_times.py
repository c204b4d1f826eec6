"""Step and save times measured from a trainer's own log, and the signal lead they need.

A Slurm job asks its trainers to save `lead` seconds before its time limit (USR1 -> stop file ->
SIGTERM to the training processes; trainer_protocol.SIGNAL_CHECK): the trainer finishes the step it
is in, evaluates if the step is an evaluation step, then saves. The lead must hold that, and plan's
estimate of a step can be far off (its TFLOP/s figure comes from a different setup; or there is
none). So a chain's segment measures, from the log lines Megatron-Bridge itself prints:

- the step: the iteration line's "elapsed time per iteration (ms)" (the average over the log
  interval, printed by the last rank; trainer_protocol.iteration_line), the slowest interval,
  leaving out each log's first one (warm-up: compilation, autotuning, the first batch);
- the save: the "save-checkpoint" timer logged after every save (its max across ranks;
  trainer_protocol.SAVE_TIMER), the slowest one.

Run by the segment's batch shell (stdlib only, the Python of the batch host), incrementally: the
state file keeps each log's offset and the figures so far, so a long log is read once. The lead
rule is trainer_protocol.sized_lead, the one plan's sizing applies to its estimates.

    python3 step_times.py STATE PLANNED_SAVE PLANNED_EVAL LOG...
    -> "LEAD STEP SAVE" on stdout: the lead the figures need (s, whole 10 s; 0 before a step is
       measured), the measured step and save in seconds ("-" where nothing is measured yet; a
       planned save stands in for a missing one in the lead)
"""

from __future__ import annotations

import json
import os
import sys

import trainer_protocol as P


def scan(text: str, skip_first: bool) -> tuple[list[float], list[float]]:
    """Interval step times and persistent save times (seconds) in one piece of log text."""
    steps = []
    for match in P.ITERATION_RE.finditer(text):
        fields = dict(P.FIELD_RE.findall(match.group(3)))
        try:
            steps.append(float(fields[P.FIELD_ELAPSED_MS]) / 1000.0)
        except (KeyError, ValueError):
            continue
    if skip_first and steps:
        steps = steps[1:]
    saves = [float(hi) / 1000.0 for name, _lo, hi in P.TIMER_MINMAX_RE.findall(text) if name == P.SAVE_TIMER]
    return steps, saves


def update(state: dict, logs: list[str]) -> dict:
    """Read what each log gained since the state's offsets (whole lines only) into the figures."""
    files = state.setdefault("files", {})
    for path in logs:
        seen = files.get(path, {"offset": 0, "steps": 0})
        try:
            with open(path, "rb") as fh:
                fh.seek(seen["offset"])
                chunk = fh.read()
        except OSError:
            continue
        end = chunk.rfind(b"\n") + 1  # a line still being written is read next time
        text = chunk[:end].decode("utf-8", "replace")
        steps, saves = scan(text, skip_first=seen["steps"] == 0)
        if seen["steps"] == 0 and P.ITERATION_RE.search(text):
            seen["steps"] = 1  # the warm-up interval is behind
        seen["steps"] += len(steps)
        seen["offset"] += end
        files[path] = seen
        if steps:
            state["step_s"] = round(max([state.get("step_s") or 0.0, *steps]), 3)
        if saves:
            state["save_s"] = round(max([state.get("save_s") or 0.0, *saves]), 3)
    return state


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print("usage: step_times.py STATE PLANNED_SAVE PLANNED_EVAL LOG...", file=sys.stderr)
        return 2
    path, planned_save, planned_eval, logs = argv[0], argv[1], argv[2], argv[3:]
    try:
        with open(path) as fh:
            state = json.load(fh)
    except (OSError, ValueError):
        state = {}
    state = update(state, logs)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(state, fh)
    os.replace(tmp, path)
    step, save = state.get("step_s"), state.get("save_s")
    # no floor: these are measurements, not guesses; no lead at all until a step is measured
    lead = P.sized_lead(step, save or _number(planned_save), _number(planned_eval), floor=0) if step else 0
    print(lead, "-" if step is None else f"{step:g}", "-" if save is None else f"{save:g}")
    return 0


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value > 0 else None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
