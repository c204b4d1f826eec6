"""Stragglers from Megatron's straggler-detector and timer lines (docs/judging_sources.md §3):
a rank slowed on purpose is named, with its node where the log gives it; an even run names none."""

from __future__ import annotations

from bridge_launch.judge import stragglers as S
from bridge_launch.logs.reader import Log
from conftest import write
from training_logs import straggler_line, training_log

RANKS = range(8)


def even(s):
    return {r: 1000.0 + 3.0 * ((r + s) % 5) for r in RANKS}  # within 1.2% of each other


def slowed(rank, factor=1.3, since=11):
    return lambda s: {r: v * (factor if r == rank and s >= since else 1.0) for r, v in even(s).items()}


def test_the_reader_parses_straggler_lines_with_their_step_and_bottom_top_lists():
    text = training_log(3, straggler=lambda s: {0: 100.0, 1: 120.0, 2: 101.0} if s >= 2 else None)
    text += "[rank0]: " + straggler_line({0: 100.0, 1: 150.0, 2: 101.0, 3: 99.0}, minmax_count=2) + "\n"
    reps = Log([text]).stragglers
    assert [r.step for r in reps] == [2, 3, 3]
    assert reps[0].values["Rtt"] == ((100.0, 0), (120.0, 1))
    assert reps[0].values["Etpt"] == ((250.0, 1), (300.0, 0))
    assert reps[0].bottom == [] and reps[2].bottom == [(198.0, 1), (294.06, 2)]
    assert reps[2].top[-1] == (300.0, 3)


def test_the_reader_parses_minmax_max_and_all_timer_blocks():
    # Megatron-LM megatron/core/timers.py:338-376 @ 2a75ac12c, as Timers.log prints them (the last rank)
    text = "\n".join(
        [
            training_log(2, validation=False, test=False).rstrip("\n"),
            "[rank7]: (min, max) time across ranks (ms):",
            "[rank7]:     forward-backward ...............................: (100.00, 131.50)",
            "[rank7]:     optimizer ......................................: (10.00, 10.50)",
            "[rank7]: max time across ranks (ms):",
            "[rank7]:     forward-backward ...............................: 131.50",
            "[rank7]: times across ranks (ms):",
            "[rank7]:   forward-backward:",
            "[rank7]:      rank  0: 100.00",
            "[rank7]:      rank  1: 131.50",
            "[rank7]:   optimizer:",
            "[rank7]:      rank  0: 10.00",
            "[rank7]: something else",
        ]
    )
    reps = Log([text]).timer_reports
    assert [(r.option, r.step) for r in reps] == [("minmax", 2), ("max", 2), ("all", 2)]
    assert reps[0].timers == {"forward-backward": (100.0, 131.5), "optimizer": (10.0, 10.5)}
    assert reps[1].timers == {"forward-backward": (None, 131.5)}
    assert reps[2].timers == {"forward-backward": {0: 100.0, 1: 131.5}, "optimizer": {0: 10.0}}


def test_a_timer_block_keeps_its_lines_when_other_ranks_lines_fall_between_them():
    # torchrun's tail threads copy each rank's output line by line (torch tail_log.py:42-46), so rank
    # 0's straggler line can land inside rank 7's timer block (CI of stop 34 met it)
    text = "\n".join(
        [
            training_log(2, validation=False, test=False).rstrip("\n"),
            "[rank7]: (min, max) time across ranks (ms):",
            "[rank7]:     forward-backward ...............................: (100.00, 131.50)",
            "[rank0]: " + straggler_line({0: 100.0, 1: 131.5}, minmax_count=1),
            "[rank3]: some other line",
            "[rank7]:     optimizer ......................................: (10.00, 10.50)",
            "[rank7]:     batch-generator ................................: (1.00, 2.00)",
            "[rank7]: something else",
            "[rank7]:     late-timer .....................................: (1.00, 2.00)",
            "(min, max) time across ranks (ms):",
            "    forward-backward ...............................: (100.00, 131.50)",
            "[rank0]: not a timer line",
            "    optimizer ......................................: (10.00, 10.50)",
        ]
    )
    reps = Log([text + "\n"]).timer_reports
    assert reps[0].timers == {
        "forward-backward": (100.0, 131.5),
        "optimizer": (10.0, 10.5),
        "batch-generator": (1.0, 2.0),
    }
    # without prefixes the lines cannot be told apart: the block ends at the first other line
    assert reps[1].timers == {"forward-backward": (100.0, 131.5)} and len(reps) == 2
    # another rank's lines are passed over 256 in a row at most: then the block has ended
    for others, seen in ((256, {"forward-backward", "optimizer"}), (257, {"forward-backward"})):
        block = ["[rank7]: (min, max) time across ranks (ms):", "[rank7]:     forward-backward ....: (1.00, 2.00)"]
        block += ["[rank0]: another rank's line"] * others + ["[rank7]:     optimizer ....: (1.00, 2.00)"]
        assert set(Log(["\n".join(block) + "\n"]).timer_reports[0].timers) == seen


def test_a_rank_slowed_on_purpose_is_named_with_its_node_and_an_even_run_names_none(cli, tmp_path):
    nan_check = (
        "[rank5]: RuntimeError: Rank 5, node gpu-node-17, device 5, iteration 30: Unexpected result nan "
        "(message='found NaN in local forward loss calculation')\n"
    )
    slow = write(tmp_path / "slow.log", training_log(30, straggler=slowed(5), save_at=[30]) + nan_check)
    r = cli("check", slow, "-o", "json")
    st = r.json()["results"][0]["stragglers"]
    assert st["named"] == [5] and st["intervals"] == 30
    (s,) = st["stragglers"]
    assert (s["host"], s["intervals"], s["first_step"], s["last_step"], s["by"]) == (
        "gpu-node-17",
        20,
        11,
        30,
        "round-trip time",
    )
    assert 0.28 < s["typical"] < 0.31
    r = cli("check", slow)
    line = next(ln for ln in r.out.splitlines() if "stragglers" in ln)
    assert "rank 5 on gpu-node-17: 31% slower" in line and "in 20 of 30 intervals, steps 11..30" in line, line
    # an even run: nothing named, and the report says how much it read
    flat = write(tmp_path / "even.log", training_log(30, straggler=even, save_at=[30]))
    r = cli("check", flat, "-o", "json")
    assert r.code == 0 and r.json()["results"][0]["stragglers"]["named"] == []
    assert "none: no rank 10% slower in at least 5 intervals (30 intervals read)" in cli("check", flat).out
    # the thresholds are options; bad values are one line and exit 2
    assert (
        cli("check", slow, "--straggler-threshold", "0.35", "-o", "json").json()["results"][0]["stragglers"]["named"]
        == []
    )
    r = cli("check", slow, "--straggler-intervals", "0")
    assert r.code == 2 and "--straggler-intervals 0" in r.err and len(r.err.strip().splitlines()) == 1


def test_a_rank_slow_in_fewer_than_five_intervals_or_by_less_than_ten_percent_is_not_named():
    def judge(text, **kw):
        log = Log([text])
        return S.find(log.stragglers, log.timer_reports, **kw)

    assert judge(training_log(30, straggler=slowed(2, since=27))).stragglers == []  # 4 intervals
    assert [s.rank for s in judge(training_log(30, straggler=slowed(2, since=26))).stragglers] == [2]  # 5
    assert judge(training_log(30, straggler=slowed(2, factor=1.08))).stragglers == []
    assert [s.rank for s in judge(training_log(30, straggler=slowed(2, factor=1.08)), threshold=0.05).stragglers] == [2]
    assert "no straggler lines" in S.render(judge(training_log(5)))


def test_the_bottom_lists_name_several_slow_ranks_and_per_rank_timers_name_theirs():
    def two_slow(s):
        return {r: v * (1.25 if r in (3, 6) else 1.0) for r, v in even(s).items()}

    lines = [straggler_line(two_slow(s), minmax_count=3) for s in range(10)]
    reps = Log(["\n".join("[rank0]: " + ln for ln in lines) + "\n"]).stragglers
    v = S.find(reps)
    assert sorted(s.rank for s in v.stragglers) == [3, 6]
    assert {s.rank: s.by for s in v.stragglers}[3] in ("round-trip time", "throughput (Etpt)")
    # --timing-log-option all: rank 4's forward-backward 20% over the median of the others, 6 times
    block = ["times across ranks (ms):", "  forward-backward:"]
    block += [f"     rank {r:2d}: {(120.0 if r == 4 else 100.0 + r):.2f}" for r in RANKS]
    text = "\n".join(["[rank7]: " + ln for ln in block] * 6) + "\n"
    log = Log([text])
    v = S.find([], log.timer_reports)
    assert [(s.rank, s.by, s.intervals) for s in v.stragglers] == [(4, "timer forward-backward", 6)]
    assert S.SOURCE_TIMERS in v.sources


def test_check_plot_draws_each_ranks_round_trip_time_against_the_fastest(cli, tmp_path):
    log = write(tmp_path / "slow.log", training_log(30, straggler=slowed(6, since=5), save_at={30}))
    r = cli("check", str(log), "--plot", "-")
    assert r.code == 0, r.err
    chart = r.out[r.out.index("round-trip time (ms) (") :]
    assert "* fastest rank" in chart and "o rank 6" in chart and "|rel diff|" in chart and "(rank 6 vs fastest" in chart
    png = tmp_path / "ranks.png"
    r = cli("check", str(log), "--plot", str(png), "-o", "json")
    if r.json()["plot"]:  # matplotlib installed (the plot extra): the image
        assert png.stat().st_size > 1000
    # nothing to draw, and two sources: one line each
    plain = write(tmp_path / "plain.log", training_log(5))
    r = cli("check", str(plain), "--plot", "-")
    assert r.code == 2 and "has no straggler lines to draw" in r.err
    r = cli("check", str(plain), str(log), "--plot", "-")
    assert r.code == 2 and "--plot: give one run or log to draw (2 given)" in r.err
