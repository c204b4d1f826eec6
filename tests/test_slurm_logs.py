"""The framing of logs fetched from a Slurm login host (backends/slurm._frames)."""

from bridge_launch.backends.slurm.backend import _frames


def _frame(name: str, body: bytes) -> bytes:
    return b"@@bridge-launch %d %s\n" % (len(body), name.encode()) + body


def test_frames_round_trip_binary_and_newlines():
    a, b = b"line 1\nline 2\n\x00\xff no newline", b"@@bridge-launch 5 fake\n"  # a body may look like a header
    out = _frame("sbatch-12.out", a) + _frame("12-node1.log", b)
    assert _frames(out) == {"sbatch-12.out": a, "12-node1.log": b}


def test_a_short_or_strange_frame_ends_the_parse_keeping_what_came_before():
    good = _frame("sbatch-3.out", b"ok\n")
    assert _frames(good + b"@@bridge-launch 100 3-n.log\nonly this") == {"sbatch-3.out": b"ok\n"}
    assert _frames(good + _frame("../../etc/passwd", b"x")) == {"sbatch-3.out": b"ok\n"}  # not a log name
    assert _frames(good + b"garbage\n") == {"sbatch-3.out": b"ok\n"}
    assert _frames(b"") == {}
