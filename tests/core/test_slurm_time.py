"""core/slurm_time: the one reading of `sbatch --time` (Slurm's src/common/parse_time.c,
time_str2mins), used by the job's time limit, the until-done chain and `data prepare --cluster`."""

import pytest

from bridge_launch.core import slurm_time
from bridge_launch.core.errors import UsageError
from conftest import run_cli

# every form sbatch --time accepts, with the seconds Slurm means by it
FORMS = [
    ("MM", "30", 30 * 60),
    ("MM", "0", 0),
    ("MM", "90", 90 * 60),  # minutes alone are not bounded by 59
    ("MM:SS", "01:30", 90),
    ("MM:SS", "120:00", 120 * 60),
    ("HH:MM:SS", "04:00:00", 4 * 3600),
    ("HH:MM:SS", "48:00:01", 48 * 3600 + 1),
    ("D-HH", "1-12", (24 + 12) * 3600),
    ("D-HH", "1-2", 26 * 3600),
    ("D-HH:MM", "1-02:30", 26 * 3600 + 30 * 60),
    ("D-HH:MM:SS", "1-00:00:01", 86400 + 1),
    ("D-HH:MM:SS", "0-23:59:59", 86399),
    ("UNLIMITED", "UNLIMITED", None),
    ("UNLIMITED", "unlimited", None),
    ("INFINITE", "INFINITE", None),
    ("INFINITE", "infinite", None),
]


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize(
    "value,ok",
    [
        ("99:99:99", False),
        ("1:60:00", False),
        ("10:61", False),
        ("1-24", False),
        ("1-23:59:59", True),
        ("99:00:00", True),
        ("90", True),
        ("00:30:00", True),
    ],
)
def test_time_limits_past_their_clock_range_are_refused(value, ok):
    r = run_cli("submit", "smoke", "-c", "gb200-8", "-t", value, "--dry-run")
    assert (r.code == 0) == ok, r.err
    if not ok:
        assert "Slurm would read it as" in r.err and len(r.err.strip().splitlines()) == 1


@pytest.mark.parametrize("form,text,seconds", FORMS, ids=[f"{f}:{t}" for f, t, _ in FORMS])
def test_every_sbatch_time_form(form, text, seconds):
    assert slurm_time.seconds(text) == seconds, form


@pytest.mark.parametrize(
    "text,minutes",
    [("30", 30), ("1-12", 2160), ("00:30", 1), ("1:01", 2), ("0:00:59", 1), ("04:00:00", 240), ("INFINITE", None)],
)
def test_minutes_round_seconds_up_as_slurm_does(text, minutes):
    # the two readings issue 21 found in data/slurm: "30" was 1 and "1-12" was 2
    assert slurm_time.minutes(text) == minutes


@pytest.mark.parametrize("text", ["4h", "1:2:3:4", "-5", "", "1-", "1-2:3:4:5", "a-1", "1:", ":30", "1--2", " 30"])
def test_what_sbatch_refuses_is_refused(text):
    with pytest.raises(ValueError):
        slurm_time.seconds(text)


@pytest.mark.parametrize(
    "text,meant",
    [
        ("99:99:99", "4-04:40:39"),  # what Slurm would fold it into, named in the refusal
        ("00:60:00", "01:00:00"),
        ("1:60", "00:02:00"),
        ("1-24", "2-00:00:00"),
        ("1-00:60", "1-01:00:00"),
        ("1-00:00:60", "1-00:01:00"),
    ],
)
def test_a_field_past_its_clock_range_is_refused_with_what_slurm_would_read(text, meant):
    with pytest.raises(ValueError, match=f"would read it as {meant}"):
        slurm_time.seconds(text)


def test_checked_is_one_line_naming_the_source_and_the_valid_forms():
    with pytest.raises(UsageError) as exc:
        slurm_time.checked("4h", "cluster:gb200-32 [slurm] time")
    msg = str(exc.value)
    assert "\n" not in msg and "'4h'" in msg and "cluster:gb200-32 [slurm] time" in msg
    assert msg.endswith("valid: " + slurm_time.FORMS)
    with pytest.raises(UsageError, match="would read it as 01:00:00"):
        slurm_time.checked("00:60:00", "--time")
    assert slurm_time.checked("1-12", "--time") == 2160 * 60
