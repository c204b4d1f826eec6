from __future__ import annotations

import re
import subprocess

import pytest

from bridge_launch.logs import reader as logread
from bridge_launch.logs.reader import first_error, first_error_detail
from bridge_launch.workloads import trainer_protocol as P

# what a rank on another node raises when its peer died first: gloo on CPU (as the smoke workload
# saw it in CI, torch 2.13), NCCL under the real trainer (logread._COLLATERAL cites the sources)
PEER_DIED = {
    "gloo": [
        "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection "
        "closed by peer [10.251.0.12]:48282. This is typically caused by a remote worker crashing. Check the "
        "logs of the remote worker before reporting an error."
    ],
    "nccl": [
        "RuntimeError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, remote process "
        "exited or there was a network error, NCCL version 2.27.5",
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
        "Last error:",
        "socketProgress: Connection closed by remote peer n2<41234>",
    ],
}


def test_first_error_is_the_failing_ranks_not_the_collateral():
    # rank 3 runs out of memory; rank 0 then sees its peers vanish; torchrun names rank 3
    rank3 = "\n".join(
        [
            "[rank0]:  [2026-01-01 00:00:00] iteration        4/     100 | consumed samples: 32 |",
            "[rank0]: Traceback (most recent call last):",
            '[rank0]:   File "train.py", line 9, in <module>',
            "[rank0]: torch.distributed.DistBackendError: NCCL communicator was aborted on rank 0.",
            "[rank3]: Traceback (most recent call last):",
            '[rank3]:   File "train.py", line 9, in <module>',
            "[rank3]:     loss.backward()",
            "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        ]
    )
    torchrun = "\n".join(
        [
            "Root Cause (first observed failure):",
            "[0]:",
            "  time      : 2026-01-01_00:00:01",
            "  host      : node2",
            "  rank      : 3 (local_rank: 1)",
            "  exitcode  : 1 (pid: 4242)",
        ]
    )
    err = first_error_detail([rank3, torchrun])
    assert (err.rank, err.kind, err.what) == (3, "deterministic", "out of memory")
    assert str(err) == "rank 3: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    # without torchrun's summary: the first rank whose error is not a consequence of another's
    assert first_error([rank3]) == str(err)
    # a plain exception at the end of a traceback, no prefixes (the local backend before --tee)
    tb = 'Traceback (most recent call last):\n  File "x.py", line 1\nInjectedFailure: smoke.fail_at_step=2\n'
    assert first_error([tb]) == "InjectedFailure: smoke.fail_at_step=2"
    # the benign exit of a signal save is no error (trainer_protocol.BENIGN_EXIT_RE)
    assert first_error([P.PRETRAIN_FAILED.format(rank=0, kind="SystemExit", error=0) + "\nSystemExit: 0\n"]) is None
    assert first_error(["all good\n", None, b""]) is None


@pytest.mark.parametrize("backend", sorted(PEER_DIED))
def test_a_peer_that_exited_because_another_node_failed_is_not_the_cause(backend):
    # two nodes, one torchrun each: rank 1 (node 1) exits 1 because rank 2 (node 2) failed first;
    # both torchruns print a root cause with exit code 1
    def torchrun(rank):
        return "\n".join(
            [
                "Root Cause (first observed failure):",
                "[0]:",
                "  time      : 2026-01-01_00:00:01",
                "  host      : n",
                f"  rank      : {rank} (local_rank: 1)",
                "  exitcode  : 1 (pid: 42)",
            ]
        )

    node1 = "\n".join(
        [
            "1: [rank1]: Traceback (most recent call last):",
            '1: [rank1]:   File "smoke.py", line 9, in <module>',
            *(f"1: [rank1]: {ln}" for ln in PEER_DIED[backend]),
            torchrun(1),
        ]
    )
    node2 = "\n".join(
        [
            "2: [rank2]: Traceback (most recent call last):",
            '2: [rank2]:   File "smoke.py", line 9, in <module>',
            "2: [rank2]: InjectedFailure: smoke.fail_at_step=3: injected failure on rank 2",
            torchrun(2),
        ]
    )
    want = "rank 2: InjectedFailure: smoke.fail_at_step=3: injected failure on rank 2"
    assert first_error([node1, node2]) == want
    assert first_error([node2, node1]) == want
    # alone, the peer's line is still what is reported: it only yields to a rank with a cause
    assert first_error([node1]).startswith("rank 1: RuntimeError: ")


def test_failures_classify_reads_through_the_reader():
    assert logread.classify("[rank1]: torch.OutOfMemoryError: CUDA out of memory.") == (
        "deterministic",
        "out of memory",
    )
    assert logread.classify("[rank0]: Watchdog caught collective operation timeout: WorkNCCL(...)") == (
        "flaky",
        "NCCL timeout",
    )
    assert logread.classify("nothing wrong") is None


@pytest.mark.parametrize(
    "line,what",
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "out of memory"),
        ("RuntimeError: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle)", "out of memory"),
        ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=12.0", "out of memory"),
        ("hydra.errors.ConfigCompositionException: Could not override 'x'", "invalid configuration"),
        ("FileNotFoundError: [Errno 2] No such file or directory: '/lustre/x'", "missing data or file"),
        ("ValueError: Dataset path /lustre/clevr2 does not exist", "missing data or file"),
        ("ValueError: micro_batch_size must be a divisor of global_batch_size", "invalid configuration"),
        ("ModuleNotFoundError: No module named 'megatron'", "import error"),
        ("[E ProcessGroupNCCL.cpp:1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9)", "NCCL timeout"),
        (
            "torch.distributed.DistBackendError: NCCL error in: x.cpp:1, unhandled system error, ncclSystemError",
            "NCCL error",
        ),
        ("NVRM: Xid (PCI:0000:1b:00): 79, pid=1, GPU has fallen off the bus.", "ECC error"),
        ("srun: error: node2: task 1: Killed", "lost node"),
        ("torch.distributed.DistNetworkError: Connection reset by peer", "network error"),
    ],
)
def test_every_failure_class_is_found_behind_its_rank_prefix(line, what):
    err = first_error_detail(["[rank5]: some output\n", f"[rank5]: {line}\n"])
    assert err is not None and err.rank == 5 and err.what == what, err


# Megatron-Bridge's allowlist of flaky failures, as 067f987 scripts/performance/setup_experiment.py:359-383
# writes it (plain substrings; docs/research/retries-upstream.md quotes the lines)
UPSTREAM_FLAKY = [
    "The server socket has failed to listen on any local network address.",
    "Some NCCL operations have failed or timed out.",
    "uncorrectable ECC error encountered",
    "illegal memory access",
    "illegal instruction",
    "torch.distributed.DistNetworkError",
    "torch.distributed.DistBackendError",
    "ncclRemoteError",
    "Watchdog caught collective operation timeout",
    "Segmentation fault",
    "found NaN in",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    "double free or corruption",
    "Call to CUDA function failed.",
    "Connection reset by peer",
    "invalid pointer",
    "malloc(): unaligned tcache chunk detected",
    "zmq.error.ZMQError: Address already in use",
    "We couldn't connect to 'https://huggingface.co'",
    "Unpack failed: incomplete input",
    "unspecified launch failure",
    "free(): corrupted unsorted chunks",
    "Segfault encountered",
    "Fatal glibc error",
    "EOFError: No data left in file",
]


def test_the_failure_table_holds_upstreams_allowlist_and_narrows_the_hub_when_offline(tmp_path):
    """Every substring of upstream's allowlist is retried here too (flaky, or a node fault, which is
    retried without the node), except the hub's "couldn't connect" when the job runs with the hub
    offline: a cache miss, which no retry fixes. The batch script reads the same table through
    grep -E: every row's pattern must mean there what it means to Python."""
    from bridge_launch.logs import failures

    assert len(UPSTREAM_FLAKY) == 25
    for text in UPSTREAM_FLAKY:
        got = failures.classify_line(f"[rank3]: RuntimeError: {text} (injected)")
        assert got and got[0] in ("flaky", "node"), (text, got)
    hub = "OSError: We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them"
    assert failures.classify_line(hub) == ("flaky", "hub unreachable")
    assert failures.classify_line(hub, {"HF_HUB_OFFLINE": "1"}) == ("deterministic", "hub unreachable")
    # huggingface_hub's reading (constants.py:194): "on" is true; an explicit HF_HUB_OFFLINE=0 shadows
    # TRANSFORMERS_OFFLINE=1 (the hub stays online, as upstream's OFFLINE_BENCHMARK_ENV_VARS run it)
    assert failures.classify_line(hub, {"HF_HUB_OFFLINE": "on"})[0] == "deterministic"
    assert failures.classify_line(hub, {"HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "1"})[0] == "flaky"
    for missing in (
        "AttributeError: Recipe 'qwen35_vl_9b_sft_config' not found in megatron.bridge.recipes.",  # 987244934
        "AttributeError: Recipe 'x' not found in megatron.bridge.recipes or megatron.bridge.perf_recipes.",  # 067f987
    ):
        assert failures.classify_line(missing) == ("deterministic", "recipe not found"), missing
    assert failures.classify_line("InjectedFailure: smoke.fail_at_step=3") is None  # unknown
    assert failures.classify_line("bridge-launch: hang: no step in 600 s") == ("hang", "no progress")
    # the table as staged: rows in order of class, three tab-separated fields; grep -E agrees with re
    lines = failures.table_text({"HF_HUB_OFFLINE": "1"}).splitlines()
    classes = [line.split("\t")[0] for line in lines]
    assert classes == sorted(classes, key=failures.CLASSES.index) and all(line.count("\t") == 2 for line in lines)
    assert classes.count("deterministic") == 6  # the hub row moved up with the hub offline
    samples = tmp_path / "samples.txt"
    samples.write_text("".join(t + "\n" for t in [*UPSTREAM_FLAKY, hub, "InjectedFailure: nothing known"]))
    for line in lines:
        cls, what, ere = line.split("\t")
        out = subprocess.run(["grep", "-E", "--", ere, str(samples)], capture_output=True, text=True)
        assert out.returncode in (0, 1), (what, out.stderr)
        want = [t for t in samples.read_text().splitlines() if re.search(ere, t)]
        assert out.stdout.splitlines() == want, what
