"""`report RUN|EXPERIMENT` and `status RUN`'s GPU-hour lines (cli/gpu_report.py) over runs/accounting.py's
account, Slurm's answers stood in (tests/gpu_hours.py); bad input is one line and exit 2."""

import json
from pathlib import Path

import pytest

import gpu_hours as G
from bridge_launch.cli import commands
from bridge_launch.cli import gpu_report as R
from bridge_launch.runs.registry import Registry
from conftest import run_cli, write


@pytest.fixture
def chain_run(monkeypatch, home):  # noqa: ARG001 - home: an isolated state dir
    """A finished chain on local-slurm: its canary, a segment that failed after a save, its retry."""
    rows, _ = G.stand_in_sacct(monkeypatch)
    reg = Registry()
    run, job = G.slurm_run(
        reg,
        info={
            "canary": {"job_id": "10", "verdict": "pass", "report": "r.json"},
            "segments": [{"job_id": "11", "state": "FAILED"}, {"job_id": "12", "state": "COMPLETED"}],
        },
    )
    rows.update(
        {
            "10": [G.row("10", "COMPLETED", -40, -5, nodes=1)],
            "11": [G.row("11", "FAILED", 0, 100)],
            "12": [G.row("12", "COMPLETED", 110, 200)],
        }
    )
    write(Path(job.run_dir) / "logs" / "11-node2.log", G.failed_first_segment()[1])
    write(Path(job.run_dir) / "logs" / "12-node2.log", G.resumed_second_segment()[1])
    return reg, run, job


def test_the_report_page_has_the_split_the_jobs_and_a_terminal_chart(chain_run, capsys):
    _, run, job = chain_run
    assert R.report(run.run_id[:-1], plot="-", output="text") == 0
    out = capsys.readouterr().out
    gpn = job.gpus_per_node
    total = (35 * gpn + 190 * 2 * gpn) / 3600
    assert f"run          {run.run_id}\n" in out and "cluster      local-slurm\n" in out
    assert f"GPU-hours    {R.hours(total)} (a CPU cluster: {gpn} processes per node counted as GPUs)" in out
    assert f"  {'redone':<14}{R.hours(6 * 2 * gpn / 3600):>10}" in out and "(3 step(s) trained again)" in out
    assert "% (canary " in out and ", failed jobs " in out
    assert "canary (job 10)" in out and "segment 1 (job 11)  FAILED" in out and "segment 2 (job 12)  COMPLETED" in out
    chart = out[out.index("GPU-hours by use") :].splitlines()
    assert chart[1].startswith("             total |") and len(chart[1].split("|")[1].split()[0]) == 60
    assert "x" * 5 in chart[3] and "r" in chart[4] and "x" not in chart[4]  # the failed segment, its retry


def test_the_report_as_json_and_as_a_png(chain_run, capsys, tmp_path):
    pytest.importorskip("matplotlib")
    _, run, _ = chain_run
    png = tmp_path / "split.png"
    assert R.report(run.run_id, plot=str(png), output="json") == 0
    acc = json.loads(capsys.readouterr().out)
    assert acc["plot"] == str(png) and png.read_bytes()[:4] == b"\x89PNG"
    assert [j["job_id"] for j in acc["jobs"]] == ["10", "11", "12"] and acc["redone_steps"] == 3
    assert sum(acc["gpu_hours"][k] for k in R.CATEGORIES) == pytest.approx(acc["gpu_hours"]["total"], abs=1e-5)


def test_status_run_shows_the_split_and_its_json_carries_the_account(chain_run, capsys):
    _, run, _ = chain_run
    commands.status(run.run_id, all_runs=False, state=None, recipe=None, output="text")
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("gpu-hours   "))
    assert " in 3 job(s) (a CPU cluster: " in line, out
    assert "start-up " in out and "redone " in out and "lost to canary " in out and ", failed jobs " in out
    assert "3 step(s) trained again" in out
    commands.status(run.run_id, all_runs=False, state=None, recipe=None, output="json")
    (shown,) = json.loads(capsys.readouterr().out)
    assert shown["accounting"]["redone_steps"] == 3 and len(shown["accounting"]["jobs"]) == 3


def test_the_runs_list_computes_no_account(chain_run, capsys, monkeypatch):
    from bridge_launch.runs import accounting

    monkeypatch.setattr(accounting, "run_account", lambda *_a, **_k: pytest.fail("the list accounted a run"))
    commands.status(None, all_runs=False, state=None, recipe=None, output="text")
    assert chain_run[1].run_id in capsys.readouterr().out


def test_an_experiments_report_sums_its_runs(chain_run, capsys):
    reg, run, _ = chain_run
    other, job = G.slurm_run(reg, job_ids=("21",))
    write(Path(job.run_dir) / "logs" / "21-node2.log", G.resumed_second_segment()[1])
    from bridge_launch.backends.slurm import backend as slurm

    rows = {"21": G.row("21", "COMPLETED", 300, 390)}
    earlier = slurm.Backend.command

    def command(self, s, argv, **kw):
        proc = earlier(self, s, argv, **kw)
        ids = argv[argv.index("-j") + 1].split(",")
        proc.stdout += "".join(rows[i] + "\n" for i in ids if i in rows)
        return proc

    slurm.Backend.command = command
    try:
        reg.add_experiment("lr", {})
        reg.add_to_experiment("lr", run.run_id, 0, "lr=1")
        reg.add_to_experiment("lr", other.run_id, 1, "lr=2")
        assert R.report("lr", plot="-", output="json") == 0
    finally:
        slurm.Backend.command = earlier
    acc = json.loads(capsys.readouterr().out)
    assert [r["member"] for r in acc["runs"]] == ["lr=1", "lr=2"]
    assert acc["gpu_hours"]["total"] == pytest.approx(sum(r["gpu_hours"]["total"] for r in acc["runs"]), abs=1e-5)
    assert acc["runs"][1]["redone_steps"] == 0 and acc["redone_steps"] == 3


def test_terminal_bars_share_their_width_by_use():
    bars = [("a", {"startup": 1, "training": 2, "redone": 0, "lost": 1, "checkpointing": 0})]
    total = {"startup": 1, "training": 2, "redone": 0, "lost": 1, "checkpointing": 0}
    lines = R.terminal(bars, total, width=8).splitlines()
    assert lines[1] == "total |--####xx  4.00" and lines[2] == "    a |--####xx  4.00"
    assert R._bar({"startup": 1, "training": 1, "redone": 1, "lost": 0, "checkpointing": 0}, 10) in (
        "----###rrr",
        "---####rrr",
        "---###rrrr",
    )
    assert len(R._bar({"startup": 1, "training": 1, "redone": 1, "lost": 0, "checkpointing": 0}, 10)) == 10


@pytest.mark.usefixtures("home")
def test_bad_input_is_one_line_and_exit_2():
    r = run_cli("report", "no-such-run")
    assert r.code == 2 and r.err.strip().count("\n") == 0 and "no run 'no-such-run'" in r.err, r.err
    r = run_cli("report", "no-such-run", "--plot", "split.txt")
    assert r.code == 2 and "the file must end in .png, .svg, .html" in r.err and r.err.strip().count("\n") == 0


@pytest.mark.usefixtures("home")
def test_a_run_off_slurm_is_refused_in_one_line():
    from run_records import _record

    run = _record(Registry(), "smoke", log="nothing\n")
    r = run_cli("report", run.run_id)
    assert r.code == 2 and "GPU-hours are accounted from Slurm's records (sacct)" in r.err, r.err
    assert r.err.strip().count("\n") == 0


@pytest.mark.usefixtures("home")
def test_an_experiment_with_no_run_on_slurm_is_refused_in_one_line_and_draws_nothing(tmp_path, monkeypatch):
    """report of a local experiment exited 0 with an all-zero page and wrote an empty PNG into the
    current directory (issue 42, item 8): refused like a local run, nothing written."""
    from run_records import _record

    reg = Registry()
    run = _record(reg, "smoke", log="nothing\n")
    reg.add_experiment("local-lr", {})
    reg.add_to_experiment("local-lr", run.run_id, 0, "lr=1")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    r = run_cli("report", "local-lr")
    assert r.code == 2 and r.err.strip().count("\n") == 0, r.err
    assert "experiment local-lr: none of its 1 runs ran on Slurm" in r.err and "(sacct)" in r.err, r.err
    assert list(cwd.iterdir()) == []
