"""GPU-hours, accounted (runs/accounting.py): the arithmetic over allocations and the lines Megatron-Bridge
prints (written here by trainer_protocol's own line functions, stamps in this machine's time zone), the
sacct rows it reads, and one run's account through the registry with Slurm's answer stood in."""

import re
from pathlib import Path

import pytest

import gpu_hours as G
from bridge_launch.core.errors import UsageError
from bridge_launch.runs import accounting as A
from bridge_launch.workloads import trainer_protocol as P


def _seconds(acc) -> dict:
    return {k: round(v, 6) for k, v in acc.seconds.items()}


# ------------------------------------------------------------------------------------------------
# one allocation
# ------------------------------------------------------------------------------------------------
def test_a_failed_segment_loses_its_start_up_and_its_end_and_keeps_its_steps():
    alloc, log = G.failed_first_segment()
    acc, furthest = A.account_job(alloc, [log], 0)
    assert furthest == 7 and acc.steps == (1, 7) and acc.redone_steps == 0
    # head 20 s and tail 63 s lost; steps 20..37 s less the 3 s save
    assert _seconds(acc) == {"startup": 0, "training": 14, "redone": 0, "lost": 83, "checkpointing": 3}
    assert acc.lost_by == {"failed": 83} and acc.first_step_s == 20


def test_a_resume_counts_the_steps_an_earlier_segment_had_trained_as_redone():
    alloc, log = G.resumed_second_segment()
    acc, furthest = A.account_job(alloc, [log], 7)
    assert furthest == 10 and acc.redone_steps == 3  # 5, 6, 7
    # start-up 28 s; 5-7 redone (6 s); 8-10: 2 + (3 - the 1 s save) + 2 s; the end (49 s) less the final 2 s save
    assert _seconds(acc) == {"startup": 28, "training": 6 + 47, "redone": 6, "lost": 0, "checkpointing": 3}
    assert sum(acc.seconds.values()) == pytest.approx(alloc.elapsed_s)


def test_the_same_segment_without_an_earlier_one_redoes_nothing():
    alloc, log = G.resumed_second_segment()
    acc, _ = A.account_job(alloc, [log], 0)
    assert acc.redone_steps == 0 and acc.seconds["redone"] == 0 and acc.seconds["training"] == pytest.approx(59)


def test_a_log_interval_covering_several_steps_splits_its_time_by_the_steps_trained_before():
    # one line every 4 steps (4 s each interval), resumed from 0 after an earlier job reached 6
    log = G.log({4: 24, 8: 28, 12: 32})
    acc, furthest = A.account_job(G.alloc("3", 0, 40), [log.replace(f"{G.STEP_MS:.1f}", "1000.0")], 6)
    assert furthest == 12 and acc.redone_steps == 6
    assert acc.seconds["startup"] == pytest.approx(20)  # 24 s less 4 steps of 1 s
    assert acc.seconds["redone"] == pytest.approx(4 + 4 * 2 / 4) and acc.seconds["training"] == pytest.approx(2 + 4 + 8)


def test_a_save_between_two_lines_stamped_the_same_second_still_counts_whole():
    # whole-second stamps: steps 2 and 3 print at 24 s although a 1.5 s save lies between them
    log = G.log({1: 22, 2: 24, 3: 24, 4: 26}, saves={2: 1.5})
    acc, _ = A.account_job(G.alloc("4", 0, 40), [log], 0)
    assert _seconds(acc) == {"startup": 20, "training": 4.5 + 14, "redone": 0, "lost": 0, "checkpointing": 1.5}


def test_a_canary_is_lost_whole():
    acc, furthest = A.account_job(G.alloc("10", 0, 40, kind="canary", gpus=4), ["bridge-launch canary: PASS\n"], 3)
    assert furthest == 3 and _seconds(acc)["lost"] == 40 and acc.lost_by == {"canary": 40}
    assert acc.gpu_hours()["lost"] == pytest.approx(40 * 4 / 3600)


def test_the_health_step_is_lost_and_start_up_begins_after_it():
    alloc, log = G.resumed_second_segment()
    alloc.health_s = 10.0
    acc, _ = A.account_job(alloc, [log], 7)
    assert acc.lost_by == {"health": 10} and acc.seconds["lost"] == 10 and acc.seconds["startup"] == pytest.approx(18)
    assert acc.first_step_s == pytest.approx(28)


def test_a_job_that_never_reached_a_step_is_lost_unless_it_completed():
    failed, _ = A.account_job(G.alloc("5", 0, 30, state="NODE_FAIL"), ["srun: error: node2: task 1: Killed\n"], 0)
    assert failed.seconds["lost"] == 30 and failed.lost_by == {"failed": 30} and failed.steps is None
    done, _ = A.account_job(G.alloc("6", 0, 30), ["nothing to train\n"], 0)
    assert done.seconds["startup"] == 30 and done.seconds["lost"] == 0
    queued, _ = A.account_job(A.Allocation("7", "segment", 2, "PENDING", 8, None, None, 0.0), [], 0)
    assert sum(queued.seconds.values()) == 0 and queued.queued_s is None


def test_stamps_in_another_time_zone_are_shifted_into_the_allocation():
    alloc, log = G.resumed_second_segment()
    shifted = log
    for at in (140, 142, 144, 146, 149, 151):
        shifted = shifted.replace(G.stamp(at), G.stamp(at - 5 * 3600))  # the container prints UTC-5 here
    acc, _ = A.account_job(alloc, [shifted], 7)
    same, _ = A.account_job(alloc, [log], 7)
    assert _seconds(acc) == _seconds(same) and "shifted by +5 h" in acc.notes[0]


def test_without_stamps_the_steps_own_times_count_and_the_rest_is_start_up():
    alloc, log = G.resumed_second_segment()
    bare = re.sub(r" \[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\]", "", log)
    assert len(P.ITERATION_RE.findall(bare)) == 6 and "2026-" not in bare
    acc, _ = A.account_job(alloc, [bare], 7)
    # 6 steps of 2 s, 3 of them again; the 1 s save inside the loop out of both in proportion, the final
    # 2 s save out of the rest
    assert acc.seconds["redone"] == pytest.approx(5.5) and acc.seconds["training"] == pytest.approx(5.5)
    assert acc.seconds["checkpointing"] == pytest.approx(3) and acc.seconds["startup"] == pytest.approx(90 - 12 - 2)
    assert "no stamps" in acc.notes[0]


def test_a_chain_with_a_failed_segment_and_a_canary_adds_up():
    canary = G.alloc("10", -40, -5, kind="canary", gpus=4)
    (a1, l1), (a2, l2) = G.failed_first_segment(), G.resumed_second_segment()
    accs, furthest = [], 0
    for alloc, texts in ((canary, []), (a1, [l1]), (a2, [l2])):
        acc, furthest = A.account_job(alloc, texts, furthest)
        accs.append(acc)
    total = A.summarize(accs)
    h = total["gpu_hours"]
    assert h["total"] == pytest.approx((35 * 4 + 100 * 8 + 90 * 8) / 3600, abs=1e-6)
    assert sum(h[k] for k in A.CATEGORIES) == pytest.approx(h["total"], abs=1e-5)
    assert h["redone"] == pytest.approx(6 * 8 / 3600, abs=1e-6) and total["redone_steps"] == 3
    assert total["lost_by"] == pytest.approx({"canary": 35 * 4 / 3600, "failed": 83 * 8 / 3600}, abs=1e-6)
    assert h["checkpointing"] == pytest.approx(6 * 8 / 3600, abs=1e-6)
    assert sum(total["percent"].values()) == pytest.approx(100, abs=0.05)


# ------------------------------------------------------------------------------------------------
# the scheduler's rows
# ------------------------------------------------------------------------------------------------
SACCT = """\
41|COMPLETED|1000|1010|1040|30|2|billing=2,cpu=2,node=2|node[1-2]
41.batch|COMPLETED|1010|1010|1040|30|1|cpu=1,mem=0,node=1|node1
42|FAILED|1001|1040|1100|60|2|billing=16,cpu=2,gres/gpu=16,node=2|node[1-2]
42.0|COMPLETED|1040|1040|1052|12|2|cpu=2,gres/gpu=16,node=2|node[1-2]
42.1|FAILED|1052|1052|1100|48|2|cpu=2,gres/gpu=16,node=2|node[1-2]
43|CANCELLED by 0|1002|1100|Unknown|20|1|billing=1,cpu=1,node=1|node1
44|PENDING|1003|Unknown|Unknown|0|2||None assigned
99|COMPLETED|1|2|3|1|1|cpu=1|node9
"""


def test_sacct_rows_become_allocations_with_their_gpus_and_health_steps():
    kinds = {"41": ("canary", 1), "42": ("attempt", 1), "43": ("attempt", 2), "44": ("attempt", 3)}
    got = A.parse_sacct(SACCT, kinds, gpus_per_node=4, health=True)
    assert set(got) == {"41", "42", "43", "44"}  # only the run's jobs
    assert (got["41"].kind, got["41"].gpus, got["41"].health_s) == ("canary", 8, 0)  # no health step: a canary
    assert (got["42"].gpus, got["42"].health_s, got["42"].state) == (16, 12, "FAILED")  # gres/gpu where Slurm counts
    assert (got["43"].state, got["43"].end, got["43"].elapsed_s, got["43"].gpus) == ("CANCELLED", None, 20, 4)
    assert (got["44"].start, got["44"].nodes, got["44"].submit) == (None, "", 1003)
    assert A.parse_sacct(SACCT, kinds, gpus_per_node=4, health=False)["42"].health_s == 0


# ------------------------------------------------------------------------------------------------
# a run through the registry (Slurm's answer stood in)
# ------------------------------------------------------------------------------------------------
@pytest.fixture
def sacct(monkeypatch):
    return G.stand_in_sacct(monkeypatch)


@pytest.mark.usefixtures("home")
def test_a_runs_account_reads_its_canary_and_segments_from_sacct_and_their_logs(sacct):
    from bridge_launch.runs.registry import Registry
    from conftest import write

    rows, asked = sacct
    reg = Registry()
    run, job = G.slurm_run(reg, info={"canary": {"job_id": "10"}, "segments": [{"job_id": "11"}, {"job_id": "12"}]})
    rows.update(
        {
            "10": [G.row("10", "COMPLETED", -40, -5, nodes=1)],
            "11": [G.row("11", "FAILED", 0, 100)],
            "12": [G.row("12", "COMPLETED", 110, 200)],
            "13": [f"13|CANCELLED by 0|{int(G.T0)}|Unknown|Unknown|0|2||None assigned"],
        }
    )
    logs = f"{job.run_dir}/logs"
    write(Path(logs) / "11-node2.log", G.failed_first_segment()[1])
    write(Path(logs) / "12-node2.log", G.resumed_second_segment()[1])
    write(Path(logs) / "sbatch-12.out", "bridge-launch: rendezvous on 10.0.0.1:20012\n")
    acc = A.run_account(reg, run)
    assert "SLURM_TIME_FORMAT=%s" in asked[0] and asked[0][asked[0].index("-j") + 1] == "10,11,12,13"
    assert [(j["job_id"], j["kind"], j["number"]) for j in acc["jobs"]] == [
        ("10", "canary", 1),
        ("11", "segment", 1),
        ("12", "segment", 2),
        ("13", "segment", 3),
    ]
    gpn = job.gpus_per_node
    assert acc["gpu_hours"]["total"] == pytest.approx((35 * gpn + 100 * 2 * gpn + 90 * 2 * gpn) / 3600, abs=1e-6)
    assert acc["redone_steps"] == 3 and acc["gpu_hours"]["redone"] == pytest.approx(6 * 2 * gpn / 3600, abs=1e-6)
    assert acc["jobs"][1]["queued_s"] == 5 and acc["jobs"][3]["gpu_hours"]["total"] == 0
    assert any("processes per node are counted as its GPUs" in n for n in acc["notes"])  # a CPU cluster


@pytest.mark.usefixtures("home")
def test_a_resumed_run_counts_the_steps_its_predecessor_printed_as_redone(sacct):
    from bridge_launch.runs.registry import Registry
    from conftest import write

    rows, _ = sacct
    reg = Registry()
    first, job = G.slurm_run(reg, job_ids=("11",))
    write(Path(job.run_dir) / "logs" / "11-node2.log", G.failed_first_segment()[1])
    second, _ = G.slurm_run(reg, job_ids=("12",), resumed_from=first.run_id, chain=first.chain)
    second = reg.update(second.run_id, run_dir=job.run_dir)
    write(Path(job.run_dir) / "logs" / "12-node2.log", G.resumed_second_segment()[1])
    rows.update({"11": [G.row("11", "FAILED", 0, 100)], "12": [G.row("12", "COMPLETED", 110, 200)]})
    acc = A.run_account(reg, second)
    assert [j["job_id"] for j in acc["jobs"]] == ["12"] and acc["redone_steps"] == 3


@pytest.mark.usefixtures("home", "sacct")
def test_a_job_slurm_has_no_record_of_is_named_and_a_run_off_slurm_is_refused():
    from bridge_launch.runs.registry import Registry

    reg = Registry()
    run, _ = G.slurm_run(reg, job_ids=("11",))
    acc = A.run_account(reg, run)
    assert acc["jobs"] == [] and "no accounting record (sacct) for job 11: not counted" in acc["notes"]
    local = reg.update(reg.reserve("smoke", "local", "local").run_id, state="COMPLETED")
    with pytest.raises(UsageError, match="accounted from Slurm's records"):
        A.run_account(reg, local)


def test_the_health_step_is_found_by_what_it_runs_after_the_image_steps():
    """A container job's steps (backends/slurm/render.py): 0 the host's prepare (bash), 1 the image step
    (true), 2 the health step (python3 node_health.py), 3 the training step (bash node-launch.sh), 4
    the container's removal: the health step is the one that runs Python, not step 0."""
    rows = (
        "50|COMPLETED|1000|1000|1400|400|2|billing=16,cpu=2,gres/gpu=16,node=2|node[1-2]|job\n"
        "50.batch|COMPLETED|1000|1000|1400|400|1|cpu=1|node1|batch\n"
        "50.0|COMPLETED|1000|1000|1001|1|2|cpu=2|node[1-2]|bash\n"
        "50.1|COMPLETED|1001|1001|1181|180|2|cpu=2|node[1-2]|true\n"
        "50.2|COMPLETED|1181|1181|1190|9|2|cpu=2|node[1-2]|python3\n"
        "50.3|COMPLETED|1190|1190|1390|200|2|cpu=2|node[1-2]|bash\n"
        "50.4|COMPLETED|1390|1390|1400|10|2|cpu=2|node[1-2]|bash\n"
    )
    got = A.parse_sacct(rows, {"50": ("attempt", 1)}, gpus_per_node=4, health=True)
    assert got["50"].health_s == 9  # step 2's; the 180 s of unpacking are start-up, not the health step's
    bare = rows.replace("|python3\n", "|/work/venv/bin/python\n")  # a bare-process profile's interpreter
    assert A.parse_sacct(bare, {"50": ("attempt", 1)}, gpus_per_node=4, health=True)["50"].health_s == 9
