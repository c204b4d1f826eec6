"""The one log reader (src/bridge_launch/logread.py) on real Megatron-LM / Megatron-Bridge output:
each fixture is quoted from a public issue, pull request or doc, named above it (whitespace as
published; where the quote was cut off in the source, it is cut off here too)."""

from __future__ import annotations

import math
import mmap

import pytest

from bridge_launch.logs import reader as logread
from bridge_launch.logs.reader import Log, first_error, strip_prefix
from bridge_launch.workloads import trainer_protocol as P
from training_logs import every_pass_log, training_log

# NVIDIA-NeMo/Megatron-Bridge docs/training/multi-token-prediction.md:140 (at 067f987): MTP and MoE
# auxiliary losses, no timestamp.
MB_DOCS_MTP = (
    "iteration      100/  300000 | consumed samples:         3200 | elapsed time per iteration (ms): 3738.6 | "
    "learning rate: 6.000000E-05 | global batch size:    32 | lm loss: 7.968678E+00 | load_balancing_loss: "
    "1.329517E+00 | mtp_1 loss: 7.925096E+00 | loss scale: 1.0 | grad norm: 1.040 | number of skipped iterations:   "
    "0 | number of nan iterations:   0 |"
)


# NVIDIA-BioNeMo/bionemo-recipes#1357 ("Evo2 Megatron Bridge Recipe Prototype"): Bridge's Step Time
# line, an iteration line with a stamp without microseconds, and Bridge's memory report (GB).
BIONEMO_1357 = """\
Setting rerun_state_machine.current_iteration to 0...
Starting training loop at iteration 0
Step Time : 7.04s GPU utilization: 24.7MODEL_TFLOP/s/GPU
Number of parameters in transformer layers in billions:  0.86
 [2025-12-05 00:25:41] iteration        1/      10 | consumed samples:          128 | elapsed time per iteration (ms): 7037.3 | learning rate: 3.000000E-05 | global batch size:   128 | lm loss: 6.700717E+00 | loss scale: 1.0 | grad norm: 117.718 | number of skipped iterations:   0 | number of nan iterations:   0 |
Number of parameters in embedding layers in billions: 0.00
Total number of parameters in billions: 0.86
Number of parameters in most loaded shard in billions: 0.8614
Theoretical memory footprints: weight and optimizer=9857.42 MB
[Rank 0] (after 1 iterations) memory (GB) | mem-allocated-gigabytes: 13.367 | mem-active-gigabytes: 13.367 | mem-inactive-gigabytes: 0.42641 | mem-reserved-gigabytes: 14.259 | mem-max-allocated-gigabytes: 13.367 | mem-max-active-gigabytes: 13.367 | mem-max-in"""


# NVIDIA/Megatron-LM#756 ("Training Mixtral 8x7B on 16 x H100 only achieves low throughput"): MoE
# load_balancing_loss, throughput per GPU, num zeros.
MLM_756 = """\
 [2024-04-06 03:02:12] iteration       71/     100 | consumed samples:         9088 | elapsed time per iteration (ms): 5361.6 | throughput per GPU (TFLOP/s/GPU): 243.6 | learning rate: 1.420000E-05 | global batch size:   128 | lm loss: 1.818812E+00 | load_balancing_loss: 1.013377E+00 | loss scale: 1.0 | grad norm: 1.300 | num zeros: 0.0 | number of skipped iterations:   0 | number of nan iterations:   0 |
 [2024-04-06 03:02:18] iteration       72/     100 | consumed samples:         9216 | elapsed time per iteration (ms): 5470.7 | throughput per GPU (TFLOP/s/GPU): 238.7 | learning rate: 1.440000E-05 | global batch size:   128 | lm loss: 1.820313E+00 | load_balancing_loss: 1.019612E+00 | loss scale: 1.0 | grad norm: 1.305 | num zeros: 0.0 | number of skipped iterations:   0 | number of nan iterations:   0 |
 [2024-04-06 03:02:24] iteration       73/     100 | consumed samples:         9344 | elapsed time per iteration (ms): 5829.9 | throughput per GPU (TFLOP/s/GPU): 224.0 | learning rate: 1.460000E-05 | global batch size:   128 | lm loss: 1.798953E+00 | load_balancing_loss: 1.010977E+00 | loss scale: 1.0 | grad norm: 1.539 | num zeros: 0.0 | number of skipped iterations:   0 | number of nan iterations:   0 |
"""


# NVIDIA/nccl#743 ("Megatron-LM pretrain_bert_distributed.sh example get stuck"): fp16, the first
# interval all skipped while the loss scale settles, so no loss and no grad norm on its line; the
# quote of the second line ends mid-field.
NCCL_743 = """\
[before the start of training step] datetime: 2022-10-31 08:35:51 
 iteration       10/ 1000000 | consumed samples:           40 | elapsed time per iteration (ms): 356.2 | learning rate: 0.000E+00 | global batch size:     4 | loss scale: 8388608.0 | number of skipped iterations:  10 | number of nan iterations:   0 |
time (ms) | forward-compute: 193.77 | backward-compute: 73.02 | backward-params-all-reduce: 20.10 | backward-layernorm-all-reduce: 0.02 | backward-embedding-all-reduce: 0.04 | backward-reduce-model-grads: 20.22 | optimizer-copy-to-main-grad: 12.19 | optimizer-unscale-and-check-inf: 50.71 | optimizer: 63.01 | batch-generator: 25.27
 iteration       20/ 1000000 | consumed samples:           80 | elapsed time per iteration (ms): 140.6 | learning rate: 2.020E-08 | global batch size:     4 | lm loss: 1.005022E+01 | sop loss: 8.174902E-01 | loss scale: 32768.0 | grad norm: 217.199 | number of skipp"""


# bigscience-workshop/Megatron-DeepSpeed#396 ("...what does the "grad norm: nan" mean?"): a fork's
# line with extra fields, no loss printed, grad norm nan.
MDS_396 = (
    " iteration     5426/  250000 | consumed samples:        43408 | consumed tokens:     88899584 | elapsed time per "
    "iteration (ms): 4247.9 | learning rate: 2.999E-04 | global batch size:     8 | loss scale: 1.0 | grad norm: nan | "
    "actual seqlen:  2048 | number of skipped iterations:   0 | number of nan iterations:   0 | samples per second: "
    "1.886 | TFLOPs: 78.46 |"
)


# epfLLM/Megatron-LLM#11: Megatron-LM's 2023 format (learning rate "{:.3E}", no stamp).
EPFL_11 = """\
 iteration      201/  250000 | consumed samples:       205824 | elapsed time per iteration (ms): 139113.4 | learning rate: 1.507E-05 | global batch size:  1024 | lm loss: 2.373574E+00 | loss scale: 1.0 | grad norm: 0.811 | number of skipped iterations:   0 | number of nan iterations:   0 |
 iteration      202/  250000 | consumed samples:       206848 | elapsed time per iteration (ms): 139221.4 | learning rate: 1.515E-05 | global batch size:  1024 | lm loss: 2.413736E+00 | loss scale: 1.0 | grad norm: 0.567 | number of skipped iterations:   0 | number of nan iterations:   0 |
"""


# NVIDIA-NeMo/Speech#14348 (a NeMo-Run launch): a launcher prefix, torchrun's "[default2]:" and torch's
# "[rank2]: " in front of megatron-core's NaN check (rerun_state_machine.py:518-535), iteration -1.
NEMO_14348 = (
    "i.pretrain/0 [default2]:[rank2]: RuntimeError: Rank 2, node dcfai-xe9680-01, device 2, iteration -1: "
    "Unexpected result nan (message='found NaN in local grad norm for bucket #0 in backward pass before "
    "data-parallel communication collective')"
)


def test_every_field_of_bridges_line_with_mtp_and_moe_losses():
    its = Log([MB_DOCS_MTP]).iterations
    assert [(i.step, i.total) for i in its] == [(100, 300000)]
    f = its[0].fields
    assert f["consumed samples"] == 3200 and f["elapsed time per iteration (ms)"] == 3738.6
    assert f["learning rate"] == 6e-05 and f["global batch size"] == 32 and f["loss scale"] == 1.0
    assert its[0].losses == {"lm loss": 7.968678, "load_balancing_loss": 1.329517, "mtp_1 loss": 7.925096}
    assert its[0].grad_norm == 1.04 and its[0].skipped == 0 and its[0].nan == 0


def test_bridge_step_time_memory_and_stamp_without_microseconds():
    log = Log([BIONEMO_1357])
    it = log.last
    assert (it.step, it.total, it.loss, it.grad_norm) == (1, 10, 6.700717, 117.718)
    assert log.step_times == [(7.04, 24.7)] and log.last_step_time == (7.04, 24.7)
    assert log.memory[0]["rank"] == 0 and log.memory[0]["step"] == 1 and log.memory[0]["unit"] == "GB"
    assert log.memory[0]["values"]["mem-allocated-gigabytes"] == 13.367
    assert log.stamp_of(it).isoformat() == "2025-12-05T00:25:41"
    assert [e.step for e in log.events if e.kind == "starting"] == [0]
    p = log.progress()
    assert p["step"] == 1 and p["loss"] == 6.700717 and p["step_time_s"] == pytest.approx(7.0373)
    assert p["tflops_per_gpu"] == 24.7 and p["global_batch"] == 128


def test_megatron_lm_moe_lines_with_throughput_and_num_zeros():
    log = Log([MLM_756])
    assert [i.step for i in log.iterations] == [71, 72, 73]
    last = log.last
    assert last.fields["throughput per GPU (TFLOP/s/GPU)"] == 224.0 and last.fields["num zeros"] == 0.0
    assert last.losses == {"lm loss": 1.798953, "load_balancing_loss": 1.010977}
    assert log.series("load_balancing_loss") == {71: 1.013377, 72: 1.019612, 73: 1.010977}
    assert log.progress()["tflops_per_gpu"] == 224.0


def test_microsecond_stamps_of_megatron_lm():
    # MC training/training.py:2959 stamps with '%Y-%m-%d %H:%M:%S.%f'
    line = " [2026-02-03 04:05:06.789012] " + MB_DOCS_MTP
    log = Log([line])
    assert log.last.step == 100
    assert log.stamp_of(log.last).isoformat() == "2026-02-03T04:05:06.789012"


def test_fp16_skips_without_loss_fields_and_a_cut_line():
    log = Log([NCCL_743])
    its = log.iterations
    assert [i.step for i in its] == [10, 20]
    assert its[0].losses == {} and its[0].grad_norm is None and its[0].skipped == 10
    assert its[1].losses == {"lm loss": 10.05022, "sop loss": 0.8174902} and its[1].grad_norm == 217.199
    assert log.series("lm loss") == {20: 10.05022}


def test_grad_norm_nan_and_a_forks_extra_fields():
    it = Log([MDS_396]).last
    assert it.step == 5426 and math.isnan(it.grad_norm) and it.losses.get("lm loss") is None
    assert it.fields["consumed tokens"] == 88899584 and it.fields["TFLOPs"] == 78.46
    assert not it.clean()


def test_old_megatron_format():
    log = Log([EPFL_11])
    assert log.series() == {201: 2.373574, 202: 2.413736}
    assert log.last.fields["learning rate"] == 1.515e-05


def test_rank_prefixes_are_stripped():
    # torchrun --tee with bridge-launch's template, torchrun's default, srun --label, and NeMo-Run's chain
    assert strip_prefix("[rank7]:  [2025-12-05 00:25:41] iteration 1/2 |") == (
        7,
        " [2025-12-05 00:25:41] iteration 1/2 |",
    )
    assert strip_prefix("[default3]:hello") == (3, "hello")
    assert strip_prefix(" 3: hello") == (3, "hello")
    assert strip_prefix("11: [rank5]: x") == (5, "x")
    assert strip_prefix(NEMO_14348)[0] == 2
    assert strip_prefix("no prefix here") == (None, "no prefix here")
    prefixed = "\n".join(f"[rank3]: {line}" for line in MLM_756.splitlines())
    assert Log([prefixed]).series() == Log([MLM_756]).series()
    labelled = "\n".join(f"{i % 12:2d}: [default0]:{line}" for i, line in enumerate(BIONEMO_1357.splitlines()))
    assert Log([labelled]).last.loss == 6.700717 and Log([labelled]).last_step_time == (7.04, 24.7)


def test_nan_check_error_from_megatron_core():
    log = Log([NEMO_14348])
    (ev,) = log.nan_checks
    assert ev.step == -1 and ev.rank == 2 and ev.data["result"] == "nan"
    assert ev.data["message"].startswith("found NaN in local grad norm for bucket #0")
    assert [e.step for e in log.nan_check_errors] == [-1]
    assert first_error([NEMO_14348]).startswith("rank 2: RuntimeError: Rank 2, node dcfai-xe9680-01")


def test_checkpoint_lines_old_and_new_forms():
    text = "\n".join(
        [
            # Megatron-LM before cbb9c05c06 (May 2024): megatron/training/checkpointing.py:345
            "  successfully saved checkpoint at iteration     500 to /ckpt",
            # Megatron-Bridge 067f987 training/checkpointing.py:1502-1509
            P.saved_line(1000, "/ckpt"),
            # megatron-core 2a75ac12 training/checkpointing.py:1053-1059 (a stamp in front, gtp_remat)
            "  [2026-01-02 03:04:05.678901] successfully saved checkpoint from iteration    1500 to /ckpt "
            "[ t 1/2, gtp_remat 1/1, p 1/1 ]",
            # MC training/checkpointing.py:2900-2906 and MB checkpointing.py:3263-3268
            "  successfully loaded checkpoint from /ckpt [ t 1/2, gtp_remat 1/1, p 1/1 ] at iteration 1500",
        ]
    )
    log = Log([text])
    assert [e.step for e in log.saves] == [500, 1000, 1500]
    assert [(e.step, e.data["path"]) for e in log.of_kind("loaded")] == [(1500, "/ckpt")]


def test_validation_test_and_exit_lines():
    lines = [
        *P.validation_lines("iteration 50", {"lm loss": 2.5}),  # MB eval.py:462-466, in the loop
        # MC training/training.py:4536 with several validation sets: " validation-<name> loss at ..."
        " validation-clevr loss at iteration 50 | lm loss value: 2.400000E+00 | lm loss PPL: 1.102318E+01 | ",
        *P.validation_lines("iteration 100 on validation set", {"lm loss": 2.25}),
        *P.validation_lines("iteration 100 on test set", {"lm loss": 2.3}),
        P.barrier_and_log(P.EXIT_SIGNAL, stamp="2026-09-06 17:57:10"),
        # MC training.py:294-302 print_datetime: microseconds
        "[exiting program at iteration 100] datetime: 2026-09-06 17:57:10.123456 ",
    ]
    log = Log(["\n".join(lines)])
    assert [(e.step, e.data["set"], e.data["losses"]["lm loss"]) for e in log.validations] == [
        (50, "in-loop", 2.5),
        (50, "in-loop", 2.4),
        (100, "validation", 2.25),
        (100, "test", 2.3),
    ]
    assert [e.data["why"] for e in log.exits] == ["signal", "interval"]
    assert log.exits[1].step == 100


def test_segments_and_restarts_are_read_in_order():
    def seg(steps, load=None):
        out = [P.loaded_line("/c", load)] if load is not None else []
        out += [
            P.iteration_line(
                iteration=s,
                train_iters=10,
                consumed=s * 8,
                elapsed_ms=100.0,
                lr=1e-4,
                global_batch=8,
                losses={"lm loss": 10.0 - s + (0.5 if load is None else 0.0)},
                loss_scale=1.0,
                grad_norm=1.0,
                skipped=0,
                nan=0,
                stamp="2026-01-01 00:00:00",
            )
            for s in steps
        ]
        return "\n".join(out)

    # segment 1 reached 7, saved at 5, was killed; segment 2 loaded 5 and ran 6..10
    log = Log([seg(range(1, 8)), seg(range(6, 11), load=5)])
    assert [i.step for i in log.iterations] == list(range(1, 11))
    assert [i.text for i in log.iterations] == [0] * 5 + [1] * 5  # 6 and 7 are the second attempt's
    assert log.series()[6] == 4.0 and log.series()[5] == 5.5
    # a load that came before any new iteration line drops what came after it
    log = Log([seg(range(1, 8)), P.loaded_line("/c", 5)])
    assert log.last.step == 5
    # a restart without a load line (a requeue appended to the same file) is seen by the step going back
    log = Log([seg(range(1, 8)) + "\n" + seg(range(1, 4))])
    assert [i.step for i in log.iterations] == [1, 2, 3] and log.final().step == 3


def _line(s: int, loss: float | None = None, **extra) -> str:
    return P.iteration_line(
        iteration=s,
        train_iters=20,
        consumed=s * 8,
        elapsed_ms=100.0 + s,
        lr=1e-4,
        global_batch=8,
        losses={} if loss is None else {"lm loss": loss},
        loss_scale=1.0,
        grad_norm=1.0,
        skipped=0,
        nan=0,
        **extra,
    )


def _restarted_texts(binary: bool) -> list:
    """Three texts: a first attempt to 9; a second that loaded 5 and ran 6..12 (with a requeue in its
    own file: the step goes back to 8 and on to 14); a third that started again at 12 with a
    loss that is not a number at 13."""
    first = "\n".join(_line(s, 10.0 - s / 4) for s in range(1, 10))
    second = "\n".join(
        [P.loaded_line("/c", 5)]
        + [_line(s, 9.0 - s / 4) for s in range(6, 13)]
        + ["[rank0]: " + P.step_time_line(0.1, 12.5)]
        + [_line(s, 8.0 - s / 4) for s in range(8, 15)]
    )
    third = "\n".join(
        [P.starting_line(11), _line(12, 7.0), _line(13, 6.0).replace("6.000000E+00", "nan?"), _line(14, 5.0)]
    )
    texts = [first, second, third]
    return [t.encode() for t in texts] if binary else texts


@pytest.mark.parametrize("binary", [True, False])
def test_columns_read_by_findall_equal_the_line_by_line_reading(binary):
    """series / float_series / steps read as columns (two findalls per text, the restarts cut alike)
    give what reading every iteration line gives; a text whose lines do not all carry the field
    is read line by line."""
    texts = _restarted_texts(binary)
    lines = Log(texts)
    by_line = {k: (lines.iterations and lines.series(k)) for k in ("lm loss", P.FIELD_ELAPSED_MS, "nope")}
    assert [i.step for i in lines.iterations] == list(range(1, 15))
    for key, want in by_line.items():
        col = Log(texts)
        assert col._column(key) is not None or key == "nope"
        assert col.series(key) == want, key
        floats = Log(texts).float_series(key)
        assert floats.keys() == want.keys()
        assert all(
            floats[s] == (v if isinstance(v, float) else math.inf if isinstance(v, str) else float(v))
            for s, v in want.items()
        ), key
    assert Log(texts).steps == list(range(1, 15))
    assert Log(texts).series()[13] == "nan?" and math.isinf(Log(texts).float_series()[13])
    # a line without the loss (fp16 skips it until the loss scale settles): line by line, same answer
    gap = texts[:2] + [texts[2] + (b"\n" if binary else "\n") + (_line(15).encode() if binary else _line(15))]
    assert Log(gap)._column("lm loss") is None
    # a field no line of a text carries: that text gives no values, its lines still cut the earlier ones
    other = (b" lm loss: ", b" other: ") if binary else (" lm loss: ", " other: ")
    none = [texts[0], texts[2].replace(*other)]
    want = (lambda x: (x.iterations, x.series())[1])(Log(none))
    assert Log(none)._column("lm loss") is not None and Log(none).series() == want
    assert max(want) == 9 and 12 not in want and Log(none).steps[-1] == 14
    g = Log(gap)
    assert g.series() == (lambda x: (x.iterations, x.series())[1])(Log(gap)) and 15 not in g.series()
    assert Log(gap).steps[-1] == 15


def test_a_mapped_log_reads_like_a_read_one(tmp_path):
    text = "\n".join(_line(s, 3.0 - s / 100) for s in range(1, 20)) * 1 + "\n"
    path = tmp_path / "big.log"
    path.write_text(text * (1 + (1 << 20) // len(text)))  # over a MiB: mapped
    mapped, read = Log.of_files([path], mapped=True), Log.of_files([path])
    assert not isinstance(mapped.raw[0], bytes) and isinstance(read.raw[0], bytes)
    assert mapped.float_series() == read.float_series() and mapped.keys() == read.keys()
    assert mapped.texts == read.texts and mapped.final().step == 19
    assert mapped.tally() == read.tally()


def test_the_gate_counts_agree_with_the_lines():
    """The whole-log counts the gate uses on long logs (Log.tally) agree with reading every line."""
    for text in (MB_DOCS_MTP, BIONEMO_1357, MLM_756, NCCL_743, MDS_396, EPFL_11):
        log = Log([text])
        t = log.tally()
        its = log.iterations
        complete = [i for i in its if P.FIELD_SKIPPED in i.fields]
        assert t["counters"] == len(complete)
        assert t["zero_counters"] == sum(1 for i in complete if i.skipped == 0 and i.nan == 0)
        assert bool(t["nonfinite"]) == any(
            not logread.finite(v) for i in its for v in [*i.losses.values(), i.grad_norm] if v is not None
        )
        # bytes and str give the same answers
        assert Log([text.encode()]).tally() == t


def test_last_step_and_progress_keep_their_old_contract():
    from bridge_launch.backends.base import last_step, progress

    assert last_step(MLM_756) == (73, 100, 1.798953)
    assert last_step("nothing") is None
    assert progress([MLM_756, None])["step"] == 73


def test_torchruns_bare_child_failed_line_is_completed_from_its_summary():
    from bridge_launch.logs.reader import first_error

    text = (
        "[rank0]: iteration        3/     100 | lm loss: 2.0\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "============================================================\nsmoke.py FAILED\n"
        "Root Cause (first observed failure):\n[0]:\n  time      : 2026-12-01_10:00:00\n  host      : node1\n"
        "  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 77) SIGKILL\n  error_file: <N/A>\n"
        "  traceback : Signal 9 (SIGKILL) received by PID 77\n"
    )
    err = first_error([text])
    assert err.endswith("ChildFailedError: rank 1 was killed by signal 9 (SIGKILL)"), err


def test_timeline_keeps_every_iteration_line_as_printed_with_its_stamp_and_step_time():
    # GPU-hour accounting counts a step each time it ran: a restart below the furthest step is kept, not cut;
    # stamps with (Megatron-LM) and without (Bridge) microseconds, and none (Megatron-LM before 2024)
    def line(step, stamp, ms):
        return P.iteration_line(
            iteration=step,
            train_iters=9,
            consumed=step,
            elapsed_ms=ms,
            lr=1e-4,
            global_batch=1,
            losses={"lm loss": 2.0},
            loss_scale=1.0,
            grad_norm=1.0,
            skipped=0,
            nan=0,
            stamp=stamp,
        )

    first = "\n".join([line(1, "2026-01-01 12:00:01", 900.0), line(2, "2026-01-01 12:00:02.250000", 1100.5)])
    bare = line(3, "2026-01-01 12:00:03", 80.0).split("] ", 1)[1]  # no stamp: " iteration ..." only
    again = "[rank3]: " + line(2, "2026-01-01 12:01:00", 700.0)
    got = Log([first, bare + "\n" + again]).timeline()
    assert [(s, t.isoformat(sep=" ") if t else None, ms, ti) for s, t, ms, ti in got] == [
        (1, "2026-01-01 12:00:01", 900.0, 0),
        (2, "2026-01-01 12:00:02.250000", 1100.5, 0),
        (3, None, 80.0, 1),
        (2, "2026-01-01 12:01:00", 700.0, 1),
    ]
    assert [it.step for it in Log([first, bare + "\n" + again]).iterations] == [1, 2]  # the reader's own view cuts


# ------------------------------------------------------------------------------------------------
# mapped texts counted piece by piece; the passes of check and compare over two processes
# ------------------------------------------------------------------------------------------------
def _mapped(tmp_path, data: bytes):
    path = tmp_path / "mapped.log"
    path.write_bytes(data)
    with open(path, "rb") as fh:
        return logread._Mapped(fh.fileno(), 0, access=mmap.ACCESS_READ)


@pytest.mark.parametrize("piece", [1, 5, 7, 64])
def test_counts_on_a_mapped_text_equal_bytes_count_across_the_pieces(tmp_path, monkeypatch, piece):
    monkeypatch.setattr(logread, "COUNT_PIECE", piece)
    data = b"aaab | lm loss: 1 | x | lm loss: aaaa\n| lm loss: | lm loss: " * 7
    mm = _mapped(tmp_path, data)
    needles = [b"| lm loss: ", b"lm", b"a", b"aa", b"aaab", b"\n", b"missing"]
    assert logread.counts(mm, needles) == [data.count(n) for n in needles]
    assert mm.count(b"lm loss", 3) == data.count(b"lm loss", 3)
    assert mm.count(b"aa", 2, 40) == data.count(b"aa", 2, 40)


@pytest.fixture
def children(monkeypatch):
    """Two CPUs, no other thread, PARALLEL_MIN 1 byte, and the exit code of every child forked
    (core/forked.py)."""
    from bridge_launch.core import forked

    monkeypatch.setattr(forked, "cpus", lambda: 2)
    monkeypatch.setattr(forked, "_threads", lambda: 1)  # a thread another test may leave running: fork all the same
    monkeypatch.setattr(logread, "PARALLEL_MIN", 1)
    codes: list = []
    reap = forked.Child._reap
    monkeypatch.setattr(forked.Child, "_reap", lambda child: codes.append(reap(child)) or codes[-1])
    return codes


def test_the_survey_in_two_processes_gives_what_reading_each_pass_gives(tmp_path, monkeypatch, children):
    text = every_pass_log(2000)
    path = tmp_path / "run.log"
    path.write_text(text)
    assert path.stat().st_size >= 1 << 20  # mapped by of_files
    for log in (Log([text]), Log([text.encode()]), Log.of_files([path], mapped=True)):
        log.survey("lm loss")
        each = Log([text])  # every pass read when asked, in this process
        assert log.tally() == each.tally() and log.tally()["nonfinite"]
        assert log.nan_check_errors == each.nan_check_errors and log.nan_check_errors
        assert log.stragglers == each.stragglers and log.stragglers
        assert log.timer_reports == each.timer_reports and log.timer_reports
    assert isinstance(log.raw[0], logread._Mapped)
    assert children == [0, 0, 0]  # each survey forked one child, which sent its result
    # a log under PARALLEL_MIN is left to read when asked
    monkeypatch.setattr(logread, "PARALLEL_MIN", len(text) + 1)
    small = Log([text])
    small.survey()
    assert children == [0, 0, 0] and "timer_reports" not in small.__dict__


def test_the_columns_of_several_logs_are_dealt_to_one_child_per_further_cpu(monkeypatch, children):
    from bridge_launch.core import forked

    texts = [training_log(50, loss=lambda s, k=k: 5.0 - s / (10 + k)) for k in range(5)]
    want = [Log([t]).float_columns("lm loss") for t in texts]
    assert logread.float_columns_of([Log([t]) for t in texts], "lm loss") == want
    assert children == [0]  # two CPUs: this process and one child
    monkeypatch.setattr(forked, "cpus", lambda: 3)
    assert logread.float_columns_of([Log([t]) for t in texts], "lm loss") == want
    assert children == [0, 0, 0]  # three CPUs: two children
    assert logread.float_columns_of([Log([texts[0]])], "lm loss") == want[:1] and children == [0, 0, 0]
    assert logread.float_columns_of([], "lm loss") == []


def test_the_root_causes_signal_is_named_not_the_one_torchrun_sent_the_others():
    """Rank 1 killed with SIGKILL (an OOM kill's signature); torchrun then stops rank 0 with SIGTERM
    and lists it first, under "Failures:": the line names rank 1's SIGKILL, as the Root Cause does."""
    from bridge_launch.logs.reader import first_error

    text = (
        "[rank0]: iteration        3/     100 | lm loss: 2.0\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "============================================================\nsmoke.py FAILED\n"
        "------------------------------------------------------------\nFailures:\n[1]:\n"
        "  time      : 2026-12-01_10:00:01\n  host      : node1\n  rank      : 0 (local_rank: 0)\n"
        "  exitcode  : -15 (pid: 76)\n  error_file: <N/A>\n  traceback : Signal 15 (SIGTERM) received by PID 76\n"
        "------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n[0]:\n  time      : 2026-12-01_10:00:00\n  host      : node1\n"
        "  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 77)\n  error_file: <N/A>\n"
        "  traceback : Signal 9 (SIGKILL) received by PID 77\n"
        "============================================================\n"
    )
    err = first_error([text])
    assert err.endswith("ChildFailedError: rank 1 was killed by signal 9 (SIGKILL)"), err
