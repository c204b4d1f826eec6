"""The failure classes: one table, each row a class, what it is, an extended regular expression and
where the pattern comes from; the Slurm batch script reads it (staged as one file, rows in order,
backends/slurm/render.py) and the log reader alike. A failed attempt or segment takes the class of the
first class whose patterns match its logs, in this order:

- deterministic: the job itself is wrong; never retried (running it again fails the same way).
- node: a node's own hardware; retried without that node (culprit.sh finds it).
- flaky: the network, the fabric, a transient fault; retried up to --max-restarts. At least
  Megatron-Bridge's allowlist (is_flaky_failure, 067f987 scripts/performance/setup_experiment.py:
  352-384, plain substrings there), narrowed where this project's settings make a pattern
  deterministic: the HuggingFace hub's "couldn't connect" is a cache miss, not the network, when the
  job runs with the hub offline (HF_HUB_OFFLINE=1, as every GB200 profile sets).
- hang: a job that stopped making progress (the hang watchdog's own line); retried.
- unknown: nothing matched; not retried unless the attempt saved a newer checkpoint (progress
  decides, as upstream's long runs do: setup_experiment.py:463) or the profile says so
  ([slurm] retry_unknown)."""

from __future__ import annotations

import re
from typing import NamedTuple

from bridge_launch.workloads import node_facts

CLASSES = ("deterministic", "node", "flaky", "hang")  # in order; "unknown": no row matched
UNKNOWN = "unknown"
UPSTREAM = "Megatron-Bridge 067f987 scripts/performance/setup_experiment.py"


class Row(NamedTuple):
    cls: str
    what: str
    pattern: str
    source: str
    offline_cls: str = ""  # the class where the job runs with the HuggingFace hub offline


def _literal(*texts: str) -> str:
    """Plain substrings (upstream matches with `in`) as one ERE alternation."""
    return "|".join(re.sub(r"([][.*+?(){}|^$\\])", r"\\\1", t) for t in texts)


ROWS: tuple[Row, ...] = (
    Row(
        "deterministic",
        "out of memory",
        r"CUDA out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|oom-kill",
        "torch's OutOfMemoryError; cuBLAS; the kernel's oom-kill",
    ),
    Row(
        "deterministic",
        "invalid configuration",
        r"OverridesError|ConfigCompositionException|smoke\.py: error:|AssertionError: .*(must|should) be|"
        r"ValueError: .*(must|should|invalid)",
        "Hydra's override errors; Megatron-Bridge's validate() assertions",
    ),
    Row(
        "deterministic",
        "recipe not found",
        r"AttributeError: Recipe '[^']*' (not found in megatron\.bridge|is indexed but not callable)",
        "Megatron-Bridge 987244934 scripts/training/run_recipe.py:250-255; 067f987 recipe_runner.py:255-260",
    ),
    Row(
        "deterministic",
        "missing data or file",
        r"FileNotFoundError|No such file or directory: |Dataset path .* does not exist|not a valid Energon dataset",
        "Python's FileNotFoundError; Megatron-Energon's dataset checks",
    ),
    Row("deterministic", "import error", r"ModuleNotFoundError|ImportError: ", "Python's import errors"),
    Row(
        "node",
        "ECC error",
        r"ECC error|uncorrectable ECC|" + node_facts.XID_PATTERN,
        f"the CUDA runtime's cudaErrorECCUncorrectable; the kernel's GPU-fault Xids; {UPSTREAM}:361",
    ),
    Row(
        "flaky",
        "hub unreachable",
        _literal("We couldn't connect to 'https://huggingface.co'")
        + "|Cannot find the requested files in the disk cache and outgoing traffic has been disabled"
        + "|offline mode is enabled",
        f"{UPSTREAM}:377 (flaky there); transformers utils/hub.py:507-517, huggingface_hub file_download.py:1944"
        " and utils/_http.py:283: with the hub offline, a cache miss (deterministic)",
        offline_cls="deterministic",
    ),
    Row(
        "flaky",
        "NCCL timeout",
        r"Watchdog caught collective operation timeout|NCCL (communicator|operation).*timed? ?out|HYBRID-EP .*TIMEOUT|"
        + _literal("Some NCCL operations have failed or timed out."),
        f"torch's ProcessGroupNCCL watchdog; {UPSTREAM}:360, 367",
    ),
    Row(
        "flaky",
        "NCCL error",
        r"NCCL error|ncclInternalError|ncclSystemError|ncclRemoteError|torch\.distributed\.DistBackendError",
        f"NCCL's result codes; {UPSTREAM}:365-366",
    ),
    Row(
        "flaky",
        "lost node",
        r"Node failure|NODE_FAIL|srun: error: .*: task .*: Killed|lost connection to node",
        "srun's node-failure handler (srun_job.c, step_launch.c)",
    ),
    Row(
        "flaky",
        "network error",
        r"DistNetworkError|RendezvousConnectionError|Connection reset by peer|Socket Timeout|Broken pipe|"
        + _literal(
            "The server socket has failed to listen on any local network address.",
            "zmq.error.ZMQError: Address already in use",
        ),
        f"torch.distributed's rendezvous and store; {UPSTREAM}:359, 364, 373, 376",
    ),
    Row(
        "flaky",
        "GPU or memory fault",
        _literal(
            "illegal memory access",
            "illegal instruction",
            "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
            "Call to CUDA function failed.",
            "unspecified launch failure",
            "Segmentation fault",
            "Segfault encountered",
            "double free or corruption",
            "invalid pointer",
            "malloc(): unaligned tcache chunk detected",
            "free(): corrupted unsorted chunks",
            "Fatal glibc error",
        ),
        f"{UPSTREAM}:362-363, 368, 370-372, 374-375, 379-382",
    ),
    Row(
        "flaky",
        "NaN or truncated data",
        _literal("found NaN in", "Unpack failed: incomplete input", "EOFError: No data left in file"),
        f"{UPSTREAM}:369, 378, 383",
    ),
    Row(
        "hang",
        "no progress",
        r"bridge-launch: hang: ",
        "the hang watchdog's own line (issue 40)",
    ),
)


HUB_TRUE = {"1", "ON", "YES", "TRUE"}  # huggingface_hub constants.ENV_VARS_TRUE_VALUES


def rows(env: dict | None = None) -> list[Row]:
    """The table for a job: a row's class as the job's environment makes it (the hub offline)."""
    env = env or {}
    # huggingface_hub's own rule (constants.py:194, _is_true): HF_HUB_OFFLINE, else TRANSFORMERS_OFFLINE
    offline = str(env.get("HF_HUB_OFFLINE") or env.get("TRANSFORMERS_OFFLINE") or "").upper() in HUB_TRUE
    return [r._replace(cls=r.offline_cls) if offline and r.offline_cls else r for r in ROWS]


def table_text(env: dict | None = None) -> str:
    """The table as the batch script reads it: CLASS<TAB>WHAT<TAB>ERE, a row a line, in order of class."""
    ordered = sorted(rows(env), key=lambda r: CLASSES.index(r.cls))
    return "".join(f"{r.cls}\t{r.what}\t{r.pattern}\n" for r in ordered)


def _of(cls: str) -> dict[str, str]:
    return {r.what: r.pattern for r in ROWS if r.cls == cls}


DETERMINISTIC = _of("deterministic")
FLAKY = {**_of("node"), **_of("flaky"), **_of("hang")}  # retried (a node fault: without the node)

# What names the node a failure came from, as grep -E patterns (the batch script's retry reads
# them; backends/slurm/batch/culprit.sh): a node fault in that node's own log (the node rows above);
# srun's "Node failure on NODELIST" (src/srun/srun_job.c / step_launch.c `_node_fail_handler`:
# error("Node failure on %s", msg->nodelist)); and the peer NCCL's remote errors name, as
# ncclSocketToString prints it, "HOST<PORT>" (a name, or the address with numericHostForm):
# src/transport/net_ib.cc WARN("NET/IB: Got completion from peer %s with status=..."),
# src/misc/socket.cc WARN("socketProgress: Connection closed by remote peer %s", ..., 0).
NODE_FAULT = "|".join(_of("node").values())
LOST_NODE = r"Node failure on [^ ]+"
NCCL_PEER = r"(Got completion from peer|Connection closed by remote peer) [^ <]+<"


def known_re() -> re.Pattern:
    """Every class's pattern in one regex (what the log reader looks for first)."""
    global _KNOWN
    if _KNOWN is None:
        _KNOWN = re.compile("|".join(f"(?:{r.pattern})" for r in ROWS))
    return _KNOWN


_KNOWN = None


def classify_line(line: str, env: dict | None = None) -> tuple[str, str] | None:
    """(class, what) for one log line, the first class in order whose pattern matches; else None."""
    for r in sorted(rows(env), key=lambda r: CLASSES.index(r.cls)):
        if re.search(r.pattern, line):
            return r.cls, r.what
    return None
