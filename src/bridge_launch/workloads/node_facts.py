"""What one node shows of itself, read without torch: the IMEX channels multi-node NVLink needs, and
the GPUs' health as `nvidia-smi -q` reports it. Shared by the smoke's preflight (fabric_checks.py),
the canary (cluster_checks.py) and the health step (node_health.py)."""

from __future__ import annotations

import os
import re

# The line each node of the health step prints (node_health.py), "bridge-launch health: NODE ok|FAIL
# check: detail; ...", which the Slurm backend reads from the batch output.
HEALTH_MARK = "bridge-launch health:"

# The health step's checks whose failure is the node's own fault (it is left out of a retry and goes
# on the bad-node list) unless every node of the job fails it (the batch script's rule: then it is
# the job's, e.g. an image too new for the site's driver); paths and fabric failures name no node.
NODE_OWN_CHECKS = ("gpu", "driver", "xid", "imex")

# Xid codes of a GPU or GPU-memory fault (NVIDIA's Xid catalog: 48 double-bit ECC, 63/64 row-remapping
# event/failure, 74 NVLink error, 79 fallen off the bus, 92 high single-bit ECC rate, 94/95 contained/
# uncontained ECC error), as the kernel logs them: "NVRM: Xid (PCI:0000:1b:00): 79, pid=..., GPU has
# fallen off the bus." One list for the health step (kernel log) and the log reader (logs/failures.py).
FATAL_XIDS = (48, 63, 64, 74, 79, 92, 94, 95)
XID_PATTERN = r"Xid( \([^)]*\))?[ :]+(" + "|".join(str(x) for x in FATAL_XIDS) + r")\b"
HEALTH_RE = re.compile(r"bridge-launch health: (\S+) (ok|FAIL) (.*)$", re.M)

# The line every node's launcher prints into that node's log before it starts torchrun: the log's
# rank-prefixed lines ("[rankN]: ", backends/base.py RANK_PREFIX_TEMPLATE) then belong to that host,
# which is how the log reader names a straggler's node (torchrun's c10d rendezvous, not the node
# index, decides which ranks a node gets).
NODE_LINE = "bridge-launch: node {host} starts torchrun"
NODE_LINE_MARK = "bridge-launch: node "
NODE_LINE_RE = re.compile(r"bridge-launch: node (\S+) starts torchrun")

# Multi-node NVLink (MNNVL) memory is shared through IMEX channels: a process needs a channel
# device, /dev/nvidia-caps-imex-channels/channel<N>, to import another node's memory. enroot bind-
# mounts that directory into the container from 4.0.0 on (NVIDIA/enroot 48c750e, "Add support for
# IMEX channels in hook 98-nvidia.sh", 2025-09-29; conf/hooks/98-nvidia.sh, only when
# NVIDIA_DRIVER_CAPABILITIES includes compute, `nofail`: silently absent where the host has none);
# enroot 3.x does not, and then NCCL cannot use MNNVL inside the container.
IMEX_CHANNELS = "/dev/nvidia-caps-imex-channels"
IMEX_HINT = (
    "enroot mounts it only from 4.0 (hook 98-nvidia.sh, with NVIDIA_DRIVER_CAPABILITIES including "
    "compute); with older enroot add it to the profile's container_mounts, and the host needs the IMEX "
    "daemon's channels"
)


def imex_channels(root: str = IMEX_CHANNELS) -> dict:
    """Whether the IMEX channel directory is visible here (in the container) and its channels."""
    try:
        names = sorted(n for n in os.listdir(root) if n.startswith("channel"))
    except FileNotFoundError:
        return {"visible": False, "channels": []}
    except OSError as exc:
        return {"visible": False, "channels": [], "error": exc.strerror or str(exc)}
    return {"visible": True, "channels": names}


# `nvidia-smi -q` (the driver's text report; NVML's fields): one block per GPU, opened by a line
# "GPU 00000000:01:00.0", with "Product Name : NVIDIA GB200", an "ECC Errors" section whose
# "Volatile" and "Aggregate" counts include "... Uncorrectable : N" (SRAM/DRAM on Hopper and later,
# "Double Bit ... Total" on older drivers) and a "Remapped Rows" section with "Pending : Yes|No" and
# "Remapping Failure Occurred : Yes|No" (NVIDIA's GPU memory error management guide, "User Visible
# Statistics": a pending remap wants a GPU reset, a remapping failure an RMA).
_GPU_BLOCK = re.compile(r"^GPU ([0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$", re.M)
_FIELD = re.compile(r"^(\s*)([^:\n]+?)\s*:\s*(.*?)\s*$")


def _sections(block: str) -> list[tuple[tuple[str, ...], str, str]]:
    """(section path, field, value) for each "Name : value" line, the path from the indentation."""
    out, stack = [], []  # stack of (indent, name)
    for line in block.splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        while stack and stack[-1][0] >= indent:
            stack.pop()
        m = _FIELD.match(line)
        if m and m.group(3) != "":
            out.append((tuple(n for _, n in stack), m.group(2).strip(), m.group(3)))
        else:
            stack.append((indent, line.strip().rstrip(":").strip()))
    return out


def gpu_health(report: str) -> list[dict]:
    """Per GPU of an `nvidia-smi -q` report: {"bus", "name", "problems": [...]} (empty when healthy)."""
    starts = list(_GPU_BLOCK.finditer(report))
    out = []
    for i, m in enumerate(starts):
        block = report[m.end() : starts[i + 1].start() if i + 1 < len(starts) else len(report)]
        fields = _sections(block)
        name = next((v for path, k, v in fields if not path and k == "Product Name"), "?")
        problems = []
        for path, key, value in fields:
            # since the driver loaded (Volatile) judges; the Aggregate counts are the GPU's lifetime's
            uncorrectable = "Uncorrectable" in key or ("Double Bit" in path and key == "Total")
            if path and path[0] == "ECC Errors" and "Volatile" in path and uncorrectable:
                if value.isdigit() and int(value) > 0:
                    problems.append(f"{' '.join(path[1:])} {key} ECC errors: {value}")
            if path and path[0] == "Remapped Rows":
                if key == "Pending" and value.lower() == "yes":
                    problems.append("a row remap is pending (the GPU needs a reset)")
                if key == "Remapping Failure Occurred" and value.lower() == "yes":
                    problems.append("row remapping failed (the GPU needs replacing)")
        out.append({"bus": m.group(1), "name": name, "problems": problems})
    return out
