"""plan/sizing.py: the save before a Slurm time limit, on every job that has one and on every
--until-done chain: the lead that holds a step, a save and an evaluation; the refusal when no
save can land before the limit; what is said when no step time is known. The time-limit save on
a real cluster: tests/e2e/test_until_done_e2e.py."""

import math
import re

import pytest

from bridge_launch.backends.slurm import backend as slurm
from bridge_launch.core.errors import UsageError
from bridge_launch.job.step_shape import step_shape
from bridge_launch.plan import sizing
from bridge_launch.resolve import resolver as resolve
from bridge_launch.spec import recipes
from conftest import run_cli, write

VL = ("dataset.path=/lustre/fsw/data/clevr2", "checkpoint.pretrained_checkpoint=/lustre/fsw/ckpt/qwen35")
GB200 = ("gb200-8", "gb200-32", "gb200-64")


def _job(recipe="smoke", cluster="local-slurm", overrides=(), **opts):
    return resolve.resolve(recipe, resolve.Options(cluster=cluster, overrides=tuple(overrides), **opts))


def _signalled(art, sig: str, tmp_path) -> tuple[str, str]:
    """The batch shell of a plain job (its inputs, the staged job.sh and time-limit.sh) with a stand-in training
    step, sent `sig` while the step runs: what it said, and what the stop file holds."""
    import subprocess

    text = art.text
    inputs = text[text.index("\n", text.index("# the batch logic")) + 1 : text.index("\nstop_file=")]
    libraries = [body for rel, body in art.files.items() if rel.endswith((".job.sh", ".time-limit.sh"))]
    stop = tmp_path / f"stop-{sig}"
    script = "\n".join(
        [
            inputs,
            *libraries,
            f"exit_dir={tmp_path} stop_file={stop} SLURM_JOB_ID=1",
            "train=(sleep 3)",
            "single_step &",
            "pid=$!",
            "sleep 1",
            f"kill -{sig} $pid",
            "wait $pid",
        ]
    )
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    return r.stderr, stop.read_text() if stop.exists() else None


@pytest.mark.usefixtures("home")
def test_every_slurm_job_with_a_time_limit_saves_before_it(tmp_path):
    job = _job()  # local-slurm: --time 00:10:00, no --until-done
    assert job.chain is None and job.limit_save["time_limit_s"] == 600
    assert job.config["train.exit_signal_handler"] is True
    assert job.provenance["config"]["train.exit_signal_handler"] == "time-limit save"
    assert job.scheduler["signal"] == "B:USR1@120" and job.scheduler["cancel_signal"] == "USR2"
    art = slurm.render(job)
    assert "#SBATCH --signal=B:USR1@120" in art.text
    # USR1 (the limit): an empty stop file, which status reads as a stop at the limit; USR2: a cancel
    said, stop = _signalled(art, "USR1", tmp_path)
    # the time left to the watch's deadline (no squeue here: the start plus the limit, a second ago)
    assert re.search(r"bridge-launch: time limit in 59[89]s: the training processes are told to save and exit", said)
    assert "bridge-launch: this job reaches its time limit at " in said  # the time-limit watch started
    assert stop == ""
    said, stop = _signalled(art, "USR2", tmp_path)
    assert "bridge-launch: cancelled: SIGTERM to the training processes" in said and stop == "cancel\n"
    assert _job(cluster="local").limit_save is None  # no time limit to save before
    assert "train.exit_signal_handler" not in _job(cluster="local").config


@pytest.mark.usefixtures("home")
def test_a_job_cannot_turn_the_time_limit_save_off_or_size_it_where_there_is_no_limit():
    with pytest.raises(UsageError, match=r"train.exit_signal_handler=false \(from cli\) would let the job run into"):
        _job(overrides=["train.exit_signal_handler=false"])
    with pytest.raises(UsageError, match="--step-time sizes the save before a Slurm time limit; cluster 'local'"):
        _job(cluster="local", step_time=3.0)
    with pytest.raises(UsageError, match="--max-segments caps an --until-done chain"):
        _job(max_segments=3)
    r = run_cli("submit", "smoke", "-c", "local", "--signal-lead", "60", "--dry-run")
    assert r.code == 2 and "--signal-lead sizes the save" in r.err and "Traceback" not in r.err


@pytest.mark.usefixtures("home")
def test_the_lead_is_sized_to_hold_a_step_a_save_and_an_evaluation():
    """plan estimates ~31 s a step for qwen35-vl-sft-mxfp8 on gb200-32 (an MXFP8 figure; it says
    which), ~123 s a save of 35B parameters (no MTP head) from its 8 nodes, and an evaluation: 120 s
    cannot hold them, so the lead is sized; the shipped save_interval of 500 is longer than a 4 h segment."""
    job = _job("qwen35-vl-sft-mxfp8", "gb200-32", VL, until_done=True)
    e, ls = job.limit_save["estimate"], job.limit_save
    assert e["step_source"].startswith("plan's estimate at ") and "TFLOP/s/GPU" in e["step_source"]
    assert 30 < e["step_s"] < 40 and e["save_s"] and e["eval_s"] and 600 < e["segments"] < 800
    need = e["step_s"] + e["save_s"] + e["eval_s"]
    assert ls["signal_lead"] == math.ceil(sizing.LEAD_MARGIN * need / 10) * 10 > 120
    assert ls["lead_source"] == "sized: 1.25 x (a step + a save + an evaluation)"
    assert job.scheduler["signal"] == f"B:USR1@{ls['signal_lead']}" and job.errors == []
    assert not [w for w in job.warnings if w.startswith("--signal-lead")], job.warnings
    save_warn = next(w for w in job.warnings if w.startswith("checkpoint.save_interval=500"))
    fit = int(re.search(r"checkpoint.save_interval=(\d+) saves about twice a segment", save_warn).group(1))
    assert fit * e["step_s"] * 2 <= 4 * 3600  # the suggestion fits twice in a segment
    ok = _job("qwen35-vl-sft-mxfp8", "gb200-32", (*VL, f"checkpoint.save_interval={fit}"), until_done=True)
    assert not [w for w in ok.warnings if "save_interval" in w], ok.warnings
    given = _job("qwen35-vl-sft-mxfp8", "gb200-32", VL, until_done=True, signal_lead=200)  # a step and a save
    assert given.limit_save["signal_lead"] == 200 and given.limit_save["lead_source"] == "--signal-lead"
    warn = next(w for w in given.warnings if w.startswith("--signal-lead 200 s is shorter than one step"))
    assert int(re.search(r"--signal-lead (\d+) fits", warn).group(1)) > need


@pytest.mark.usefixtures("home")
def test_no_save_before_the_limit_is_refused_with_the_values_that_fit():
    """A plain 4 h job of ~31 s steps: the first periodic save (500 steps) is past the limit, and a
    30 s lead cannot hold a step and a save: nothing would be saved; refused, with values that fit."""
    job = _job("qwen35-vl-sft-mxfp8", "gb200-32", VL, signal_lead=30)
    (err,) = job.errors
    assert err.startswith(
        "no save can land before the time limit: --signal-lead 30 s is shorter than a step and a save"
    )
    assert "checkpoint.save_interval=500 x ~31 s is past the limit" in err and "--force submits it anyway" in err
    lead, interval = re.search(r"--signal-lead (\d+) or checkpoint.save_interval=(\d+) fits", err).groups()
    assert _job("qwen35-vl-sft-mxfp8", "gb200-32", VL, signal_lead=int(lead)).errors == []
    fixed = _job("qwen35-vl-sft-mxfp8", "gb200-32", (*VL, f"checkpoint.save_interval={interval}"), signal_lead=30)
    assert fixed.errors == [] and any("cannot finish" in w for w in fixed.warnings)
    forced = _job("qwen35-vl-sft-mxfp8", "gb200-32", VL, signal_lead=30, force=True)
    assert forced.errors == [] and any("(--force submitted it anyway)" in w for w in forced.warnings)
    r = run_cli("submit", "qwen35-vl-sft-mxfp8", "-c", "gb200-32", *VL, "--signal-lead", "30")
    assert r.code == 2 and "no save can land before the time limit" in r.err and "Traceback" not in r.err
    # the step estimate matters: given a 20 s step, 30 s holds neither a step and a save, but
    # checkpoint.save_interval=500 now lands at ~2:47
    assert _job("qwen35-vl-sft-mxfp8", "gb200-32", VL, signal_lead=30, step_time=20.0).errors == []


@pytest.mark.usefixtures("home")
def test_the_save_against_the_lead_needs_no_step_time():
    """BF16 qwen35-vl-sft: plan has no BF16 throughput on GB200 (it says so and borrows no MXFP8
    figure), but the save's size and the profile's write bandwidth give the save time."""
    job = _job("qwen35-vl-sft", "gb200-32", VL)
    e, ls = job.limit_save["estimate"], job.limit_save
    assert e["step_s"] is None and "no BF16 measurement on gb200" in e["step_unknown"]
    assert "MXFP8" in e["step_unknown"]  # the figure that exists is named, not borrowed
    assert e["save_s"] and ls["signal_lead"] >= sizing.LEAD_MARGIN * e["save_s"] + sizing.UNKNOWN_STEP_ALLOWANCE
    assert ls["lead_source"].endswith("+ 60 s for a step of unknown length") and job.errors == []
    short = _job("qwen35-vl-sft", "gb200-32", (*VL, "~checkpoint.save_interval"), signal_lead=20)
    assert any(x.startswith("--signal-lead 20 s cannot hold a save") for x in short.errors), short.errors
    kept = _job("qwen35-vl-sft", "gb200-32", VL, signal_lead=20)
    assert kept.errors == [] and any("only checkpoint.save_interval=500 can save" in w for w in kept.warnings)
    chain = _job("qwen35-vl-sft", "gb200-32", VL, until_done=True)  # a chain says what it does not know
    assert any(w.startswith("no step time for this segment: no BF16 measurement") for w in chain.warnings)
    smoke = _job(until_done=True, signal_lead=10)  # plan knows no throughput for the smoke workload
    assert smoke.errors == [] and smoke.limit_save["estimate"]["step_s"] is None
    given = _job(until_done=True, signal_lead=10, step_time=15.0)  # the periodic saves still land
    assert given.errors == [] and any("the save at the time limit cannot finish" in w for w in given.warnings)
    bare = _job(overrides=["~checkpoint.save_interval"], until_done=True, signal_lead=10, step_time=15.0)
    assert bare.errors and bare.errors[0].startswith("no save can land before the time limit")


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize("cluster", GB200)
@pytest.mark.parametrize("until_done", [False, True])
def test_no_shipped_recipe_on_a_gb200_profile_can_time_out_without_a_save(cluster, until_done):
    """Acceptance: every shipped recipe on every GB200 Slurm profile, plain and chained, resolves
    to a job whose lead holds a step (where known) and a save: none loses an allocation to
    'no save before the limit'."""
    seen = 0
    for rec in recipes.list_recipes():
        name = rec["name"]
        if rec["workload"] != "megatron-bridge":
            continue
        try:
            job = _job(name, cluster, VL if "-vl-" in name else (), until_done=until_done)
        except UsageError as exc:  # a size the profile cannot host says so and is not this test's
            assert "node" in str(exc), exc
            continue
        ls = job.limit_save
        e = ls["estimate"]
        assert ls["time_limit_s"] and job.scheduler["signal"] == f"B:USR1@{ls['signal_lead']}"
        assert ls["signal_lead"] >= (e["step_s"] or sizing.UNKNOWN_STEP_ALLOWANCE) + (e["save_s"] or 0), name
        assert not [x for x in job.errors if "save" in x], (name, job.errors)
        seen += 1
    assert seen >= 4


@pytest.mark.usefixtures("home")
def test_dry_run_shows_the_mechanism_and_the_estimate():
    r = run_cli(
        "submit", "qwen35-vl-sft-mxfp8", "-c", "gb200-32", *VL, "--until-done", "--max-segments", "900", "--dry-run"
    )
    assert r.code == 0, r.err
    assert re.search(r"Time limit USR1 \d+ s \(sized: .*\) before it -> SIGTERM to the training processes", r.out)
    assert re.search(
        r"estimate: ~3\d s a step \(plan's estimate at [\d.]+ TFLOP/s/GPU, .*\), ~\d+ s a save \(.*\), "
        r"~\d+ s an evaluation, about 6\d\d segments to train_iters",
        r.out,
    )
    assert "at most 900 segments" in r.out and re.search(r"(^| )max_segments=900( |$)", r.out, re.M)
    # the staged files it calls: the launcher signals the training processes; the step loads the resume point
    assert 'kill -s "$sig" "${pids[@]}"' in r.out and '"${train[@]}" "${resume_args[@]}" &' in r.out
    r = run_cli("submit", "smoke", "-c", "local-slurm", "--until-done", "--dry-run")
    assert re.search(r"(^| )max_segments=0( |$)", r.out.split("#!/bin/bash", 1)[1], re.M)  # no fixed segment cap
    assert "estimate: step time unknown (plan has no throughput figure for smoke on cpu; --step-time)" in r.out
    r = run_cli("submit", "smoke", "-c", "local-slurm", "--dry-run")  # a plain job says how it stops
    assert "Time limit USR1 120 s (default) before it" in r.out
    assert "status says STOPPED (iteration N of M); `bridge-launch resume RUN` continues" in r.out
    r = run_cli("submit", "qwen35-vl-sft", "-c", "gb200-32", *VL, "checkpoint.async_save=true", "--dry-run")
    assert r.code == 0 and re.search(
        r"estimate: .*checkpoint\.async_save: a periodic save blocks a step only for its copy to host memory; the "
        r"save before the limit is finished before the trainer exits, so the lead holds all of it",
        r.out,
    ), r.out


@pytest.mark.usefixtures("home")
def test_a_past_runs_measured_step_and_save_size_the_lead_of_a_job_of_its_step_shape():
    """What a past run measured (runs/measured.candidates, here given directly) sizes the lead over
    plan's estimate and the profile's write rate, for a job of the same step shape only: the target,
    the save interval and the paths do not change the shape, the step's own settings do. --step-time
    still wins for the step; the newest candidate of the shape is taken."""
    past = _job(overrides=["train.train_iters=10", "smoke.step_sleep=45"])
    shape = step_shape(past)
    other = step_shape(_job(overrides=["smoke.step_sleep=1"]))
    candidates = (("smoke-new", other, 1.0, 0.1), ("smoke-b", shape, 80.0, 30.0), ("smoke-a", shape, 10.0, 1.0))
    job = _job(
        overrides=["train.train_iters=99", "smoke.step_sleep=45", "checkpoint.save_interval=3"], measured=candidates
    )
    e = job.limit_save["estimate"]
    assert job.limit_save["measured"] == {"run": "smoke-b", "step_s": 80.0, "save_s": 30.0}
    assert (e["step_s"], e["step_source"]) == (80.0, "measured by run smoke-b")
    assert (e["save_s"], e["save_source"]) == (30.0, "measured by run smoke-b, its slowest save")
    assert job.scheduler["signal"] == "B:USR1@140"  # 1.25 x (80 + 30), in whole 10 s
    assert job.limit_save["lead_source"] == "sized: 1.25 x (a step + a save)"
    timed = _job(overrides=["smoke.step_sleep=45"], measured=candidates, step_time=5.0)
    assert timed.limit_save["estimate"]["step_source"] == "--step-time"
    assert timed.limit_save["estimate"]["save_source"] == "measured by run smoke-b, its slowest save"
    unlike = _job(overrides=["smoke.step_sleep=2"], measured=candidates)
    assert unlike.limit_save["measured"] is None and unlike.limit_save["estimate"]["step_s"] is None
    assert _job(nodes=1, overrides=["smoke.step_sleep=45"], measured=candidates).limit_save["measured"] is None


@pytest.mark.usefixtures("home")
def test_size_hint_never_suggests_nodes_the_cluster_refuses_and_plan_agrees():
    r = run_cli("submit", "nemotron-3-nano-pretrain", "--dry-run")
    assert r.code == 2
    assert "--nodes" not in r.err and "allows at most 1 node" in r.err and "--cluster gb200-8" in r.err, r.err
    assert run_cli("submit", "nemotron-3-nano-pretrain", "--cluster", "gb200-8", "--dry-run").code == 0  # it works
    p = run_cli("plan", "nemotron-3-nano-pretrain")
    assert p.code == 2 and p.err == r.err  # the same answer as submit
    r = run_cli("submit", "nemotron-3-nano-pretrain", "-c", "gb200-32", "--dry-run")
    assert "use --cluster gb200-8 or --nodes 2" in r.err
    assert run_cli("submit", "nemotron-3-nano-pretrain", "-c", "gb200-32", "--nodes", "2", "--dry-run").code == 0


@pytest.mark.usefixtures("home")
def test_chains_keep_the_profiles_most_recent_k_and_the_dry_run_shows_the_storage(home):
    """gb200 profiles keep 3 checkpoints in a chain and in a plain job (Megatron-Bridge deletes the
    oldest once a new save completes); a value the job sets wins; 0 (delete every checkpoint) is
    refused in a chain; the dry run says what that costs."""
    from bridge_launch.cli import views

    write(home / "clusters" / "keep-all.toml", 'extends = "gb200-32"\ncheckpoint_most_recent_k = -1\n')
    chained = _job("qwen35-vl-sft-mxfp8", "gb200-32", VL, until_done=True)
    assert chained.config["checkpoint.most_recent_k"] == 3
    assert chained.provenance["config"]["checkpoint.most_recent_k"] == "cluster gb200-32 (checkpoint_most_recent_k)"
    gb = chained.limit_save["estimate"]["checkpoint_gb"]
    assert gb == pytest.approx(35.1 * 14, rel=0.01)  # 35.1B parameters x 14 bytes (bf16 + fp32 main + Adam)
    assert views.storage_line(chained) == (
        f"Storage    ~{gb:,.0f} GB a checkpoint x 3 kept (checkpoint.most_recent_k) = ~{gb * 3 / 1000:,.1f} TB, "
        f"~{gb * 4 / 1000:,.1f} TB while a save is written"
    )
    own = _job("qwen35-vl-sft-mxfp8", "gb200-32", (*VL, "checkpoint.most_recent_k=5"), until_done=True)
    assert own.config["checkpoint.most_recent_k"] == 5 and own.provenance["config"]["checkpoint.most_recent_k"] == "cli"
    with pytest.raises(UsageError, match="checkpoint.most_recent_k=0 removes every checkpoint"):
        _job("qwen35-vl-sft-mxfp8", "gb200-32", (*VL, "checkpoint.most_recent_k=0"), until_done=True)
    # a plain job that saves keeps the profile's 3 too (issue 38: it kept ~295 TB); a profile of -1 keeps all
    plain = _job("qwen35-vl-sft-mxfp8", "gb200-32", VL)
    assert plain.config["checkpoint.most_recent_k"] == 3
    assert plain.provenance["config"]["checkpoint.most_recent_k"] == "cluster gb200-32 (checkpoint_most_recent_k)"
    plain = _job("qwen35-vl-sft-mxfp8", "keep-all", VL)
    assert plain.config.get("checkpoint.most_recent_k") in (None, -1)
    saves = plain.config["train.train_iters"] // plain.config["checkpoint.save_interval"]
    assert views.storage_line(plain).startswith(f"Storage    ~{gb:,.0f} GB a checkpoint, every one kept (")
    assert f"{saves} periodic saves to train_iters = ~{gb * saves / 1000:,.1f} TB" in views.storage_line(plain)
    assert views.storage_line(_job()) is None  # smoke: plan knows no parameter count


@pytest.mark.usefixtures("home")
def test_a_job_that_cannot_reach_train_iters_in_its_limit_is_told_so_once():
    job = _job("qwen35-vl-sft-mxfp8", "gb200-32", VL)
    step, limit = job.limit_save["estimate"]["step_s"], job.limit_save["time_limit_s"]
    usable = limit - job.limit_save["signal_lead"]
    hits = [w for w in job.warnings if "past the time limit" in w]
    assert len(hits) == 1, job.warnings
    assert f"the job stops near iteration {int(usable // step)}" in hits[0]
    assert f"~{job.config['train.train_iters'] * step / 3600:,.0f} h of training" in hits[0]
    assert "--until-done continues across limits" in hits[0]
    r = run_cli("plan", "qwen35-vl-sft-mxfp8", "-c", "gb200-32")
    assert r.code == 0 and r.out.count("past the time limit") == 1, r.out
    assert not [
        w for w in _job("qwen35-vl-sft-mxfp8", "gb200-32", VL, until_done=True).warnings if "past the time" in w
    ]
    short = _job("qwen35-vl-sft-mxfp8", "gb200-32", (*VL, "train.train_iters=100"))
    assert not [w for w in short.warnings if "past the time" in w]  # 100 steps fit in 4 h
