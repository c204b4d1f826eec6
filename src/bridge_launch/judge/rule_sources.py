"""The rules of `compare --rules`, as data: each rule's checks, thresholds and source at the pinned
commits (recorded in docs/judging_sources.md). rulesets.py judges by them; `compare --help` cites
them, so this module stays light (no dataclass, nothing of the package).

- Megatron-Bridge 067f987df03b8355b03192d88d70f1709fedf51a, scripts/performance/utils/evaluate.py
- Megatron-LM 2a75ac12c54ba6a42b34024756820bf819a2e25f, tests/functional_tests/python_test_utils/
"""

from __future__ import annotations

import math
from typing import NamedTuple

NAMES = ("bridge-launch", "megatron-bridge", "megatron-lm")
DEFAULT = "bridge-launch"

EVALUATE = "Megatron-Bridge@067f987 scripts/performance/utils/evaluate.py"
MLM_TESTS = "Megatron-LM@2a75ac12c tests/functional_tests/python_test_utils"
PIPELINE = f"{MLM_TESTS}/test_pretraining_regular_pipeline.py"
COMMON = f"{MLM_TESTS}/common.py"

# evaluate.py's function defaults (validate_convergence :172-186, validate_performance :358-361,
# validate_memory :464-466). Its CLI (scripts/performance/argument_parser.py:991-1025) passes other
# defaults for three of them: skip_first_percent_time 0.70, final_loss_tolerance 0.05,
# skip_first_percent_loss 0.20; these are the function's, which the issue and the doc cite.
MB_CORRELATION = 0.95
MB_TOLERANCES = ((2.0, 0.10), (0.5, 0.05), (-math.inf, 0.02))  # golden > 2.0: 10%, 0.5 < g <= 2.0: 5%, else 2%
MB_FINAL = 0.03
MB_MAX_OUTLIER_RATIO = 0.1
MB_OUTLIER_SIGMA = 3.0
MB_SKIP_LOSS = 0.0
MB_SKIP_TIME = 0.1
MB_TIMING = 0.05
MB_MEMORY = 0.05
# Megatron-LM's CHECK_THRESHOLDS (test_pretraining_regular_pipeline.py:14-25)
MLM_LOSS_RTOL = 0.05
MLM_NUM_ZEROS_RTOL = 0.20
MLM_TIME_RTOL = 0.05
MLM_MEMORY_RTOL = 0.05


class Rule(NamedTuple):
    name: str
    kind: str  # loss | timing | memory
    text: str  # what it checks, with its thresholds
    source: str  # file:lines at the pinned commit


RULE_SETS: dict[str, tuple[Rule, ...]] = {
    "bridge-launch": (
        Rule(
            "loss-parity",
            "loss",
            "each aligned step within --rtol (2%) relative (+ --atol), at most min(max(N//100, 1), 50) steps "
            "outside (or --allowed); the final step within --final-rtol (3%)",
            f"bridge-launch judge/parity.py, after {COMMON}:271-282",
        ),
    ),
    "megatron-bridge": (
        Rule(
            "coverage",
            "loss",
            "A has a finite loss at every one of B's steps (evaluate.py fills a missing step with NaN, which none of "
            "its checks can fail on: bridge-launch fails it here)",
            f"bridge-launch, on {EVALUATE}:820",
        ),
        Rule(
            "correlation",
            "loss",
            f"Pearson correlation of A and B over B's steps >= {MB_CORRELATION}",
            f"{EVALUATE}:205-213",
        ),
        Rule(
            "point-wise",
            "loss",
            "|A-B|/|B| within 10% where B > 2.0, 5% where 0.5 < B <= 2.0, 2% where B <= 0.5; "
            f"at most {MB_MAX_OUTLIER_RATIO:.0%} of the steps outside",
            f"{EVALUATE}:217-254",
        ),
        Rule("final-loss", "loss", f"the last step within {MB_FINAL:.0%} of B's", f"{EVALUATE}:261-272"),
        Rule(
            "outliers",
            "loss",
            f"at most {MB_MAX_OUTLIER_RATIO:.0%} of the residuals A-B further than {MB_OUTLIER_SIGMA:g} standard "
            "deviations from their mean",
            f"{EVALUATE}:277-292",
        ),
        Rule("grad-norm", "loss", "no NaN or Inf grad norm in A", f"{EVALUATE}:766-771, :919-921"),
        Rule(
            "gpu-utilization",
            "timing",
            f"mean `GPU utilization:` (MODEL TFLOP/s/GPU) after the first {MB_SKIP_TIME:.0%} of B's steps (at least "
            f"one) within ±{MB_TIMING:.0%} of B's: a drop fails and so does a rise; where a log has no "
            "`GPU utilization:` value above 0, the iteration time (ms) in its place",
            f"{EVALUATE}:331-446 (defaults :358-361, window :368-376, band :379-382)",
        ),
        Rule(
            "memory",
            "memory",
            f"alloc and max_alloc (the first report) and max_reserved (the largest) within ±{MB_MEMORY:.0%} of B's; "
            "not judged when B has no alloc/max_alloc; max_reserved only when B has it",
            f"{EVALUATE}:449-569, :877-879 (values :120-132)",
        ),
    ),
    "megatron-lm": (
        Rule(
            "lm loss",
            "loss",
            f"np.isclose(A, B, rtol={MLM_LOSS_RTOL}) on B's steps, passing when the share close >= "
            "1 - min(max(N//100, 1), 50)/N; the deterministic test (exact) counts only with --deterministic",
            f"{PIPELINE}:18, {COMMON}:224-228, :271-282",
        ),
        Rule("num-zeros", "loss", f"as lm loss at rtol {MLM_NUM_ZEROS_RTOL}", f"{PIPELINE}:21, {COMMON}:271-282"),
        Rule(
            "iteration-time",
            "timing",
            f"the median over steps 5..20 (B ends by step 25) or 30..45 within {MLM_TIME_RTOL:.0%} of B's",
            f"{PIPELINE}:15, {COMMON}:239-258",
        ),
        Rule(
            "mem-allocated-bytes",
            "memory",
            f"as lm loss at rtol {MLM_MEMORY_RTOL}, on the steps B reports",
            f"{PIPELINE}:16",
        ),
        Rule(
            "mem-max-allocated-bytes",
            "memory",
            f"as lm loss at rtol {MLM_MEMORY_RTOL}, on the steps B reports",
            f"{PIPELINE}:17",
        ),
    ),
}


def rule(rules: str, name: str) -> Rule:
    return next(r for r in RULE_SETS[rules] if r.name == name)


SHORT = {EVALUATE: "evaluate.py", PIPELINE: "test_pretraining_regular_pipeline.py", COMMON: "common.py"}


def help_text() -> str:
    """The rule sets for `compare --help`: each rule with its source (file names shortened after the
    first mention of their folders)."""
    out = [
        f"Files: {EVALUATE}; {MLM_TESTS}/{{test_pretraining_regular_pipeline.py, common.py}}; "
        "bridge-launch's src/bridge_launch/judge/parity.py"
    ]
    for name, rs in RULE_SETS.items():
        parts = []
        for r in rs:
            src = r.source
            for full, short in SHORT.items():
                src = src.replace(full, short)
            parts.append(f"{r.name} [{src}]")
        out.append(f"{name}{' (default)' if name == DEFAULT else ''}: " + "; ".join(parts))
    return ". ".join(out) + "."
