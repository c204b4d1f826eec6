"""Slurm's time grammar, as `sbatch --time` reads it: `MM`, `MM:SS`, `HH:MM:SS`, `D-HH`,
`D-HH:MM`, `D-HH:MM:SS`, or `UNLIMITED` / `INFINITE` (Slurm's src/common/parse_time.c,
time_str2mins)."""

from __future__ import annotations

import math
import re

from bridge_launch.core.errors import UsageError

FORMS = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED"

_SLURM_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def seconds(text: str) -> int | None:
    """Seconds in a Slurm time limit (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S); None if unlimited.
    Raises ValueError for anything Slurm would not accept."""
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    m = _SLURM_TIME.match(text)
    if not m:
        raise ValueError(text)
    days, a, b, c = m.groups()
    # Slurm itself folds overflowing fields (99:99:99 is read as 100:40:39); a field past its clock
    # range is almost always a typo, so it is refused here with what it would have meant.
    if days is not None:  # D-H[:M[:S]]
        h, mi, se = int(a), int(b or 0), int(c or 0)
        total = ((int(days) * 24 + h) * 60 + mi) * 60 + se
        over = h > 23 or mi > 59 or se > 59
    elif c is not None:  # H:M:S
        mi, se = int(b), int(c)
        total, over = (int(a) * 60 + mi) * 60 + se, mi > 59 or se > 59
    elif b is not None:  # M:S
        total, over = int(a) * 60 + int(b), int(b) > 59
    else:
        return int(a) * 60  # M
    if over:
        d, rest = divmod(total, 86400)
        meant = (f"{d}-" if d else "") + f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
        raise ValueError(
            f"hours must be below 24 after a day count, minutes and seconds below 60 (Slurm would read it as {meant})"
        )
    return total


def minutes(text: str) -> int | None:
    """Whole minutes of a Slurm time limit, rounded up as Slurm rounds seconds; None if unlimited."""
    s = seconds(text)
    return None if s is None else math.ceil(s / 60)


def checked(text: str, what: str) -> int | None:
    """seconds(text), or one UsageError line naming `what` (where the value came from) and the valid forms."""
    try:
        return seconds(text)
    except ValueError as exc:
        why = f": {exc}" if str(exc) != text else ""
        raise UsageError(f"time limit {text!r} ({what}) is not a Slurm time{why}; valid: {FORMS}") from None
