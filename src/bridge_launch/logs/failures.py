"""How a failed segment is classified from its logs. Flaky failures (the hardware or the
network) are retried up to the run's restart limit; deterministic ones (the job itself is
wrong) stop the chain, since running it again would fail the same way. A failure that
matches neither is treated as flaky. The patterns are extended regular expressions, used
by the batch script's grep -E and by status alike."""

from __future__ import annotations

import re

from bridge_launch.workloads import node_facts

DETERMINISTIC = {
    "out of memory": r"CUDA out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|oom-kill",
    "invalid configuration": r"OverridesError|ConfigCompositionException|smoke\.py: error:|AssertionError: "
    r".*(must|should) be|ValueError: .*(must|should|invalid)",
    "missing data or file": r"FileNotFoundError|No such file or directory: |Dataset path .* does not exist|not a "
    r"valid Energon dataset",
    "import error": r"ModuleNotFoundError|ImportError: ",
}
FLAKY = {
    "NCCL timeout": r"Watchdog caught collective operation timeout|NCCL (communicator|operation).*timed? "
    r"?out|HYBRID-EP .*TIMEOUT",
    "NCCL error": r"NCCL error|ncclInternalError|ncclSystemError|ncclRemoteError",
    # the kernel's "NVRM: Xid (PCI:0000:1b:00): 79, pid=..., GPU has fallen off the bus."
    "ECC error": r"ECC error|uncorrectable ECC|" + node_facts.XID_PATTERN,
    "lost node": r"Node failure|NODE_FAIL|srun: error: .*: task .*: Killed|lost connection to node",
    "network error": r"DistNetworkError|RendezvousConnectionError|Connection reset by peer|Socket Timeout|Broken pipe",
}

# What names the node a flaky failure came from, as grep -E patterns (the batch script's retry reads
# them; backends/slurm/batch/culprit.sh): a node fault in that node's own log (the FLAKY class above);
# srun's "Node failure on NODELIST" (src/srun/srun_job.c / step_launch.c `_node_fail_handler`:
# error("Node failure on %s", msg->nodelist)); and the peer NCCL's remote errors name, as
# ncclSocketToString prints it, "HOST<PORT>" (a name, or the address with numericHostForm):
# src/transport/net_ib.cc WARN("NET/IB: Got completion from peer %s with status=..."),
# src/misc/socket.cc WARN("socketProgress: Connection closed by remote peer %s", ..., 0).
NODE_FAULT = FLAKY["ECC error"]
LOST_NODE = r"Node failure on [^ ]+"
NCCL_PEER = r"(Got completion from peer|Connection closed by remote peer) [^ <]+<"


def known_re() -> re.Pattern:
    """Every class's pattern in one regex (what the log reader looks for first)."""
    global _KNOWN
    if _KNOWN is None:
        _KNOWN = re.compile("|".join(f"(?:{p})" for table in (DETERMINISTIC, FLAKY) for p in table.values()))
    return _KNOWN


_KNOWN = None


def classify_line(line: str) -> tuple[str, str] | None:
    """('deterministic'|'flaky', what) for one log line, else None."""
    for kind, table in (("deterministic", DETERMINISTIC), ("flaky", FLAKY)):
        for what, pattern in table.items():
            if re.search(pattern, line):
                return kind, what
    return None
