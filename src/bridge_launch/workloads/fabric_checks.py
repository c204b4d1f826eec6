"""Preflight checks of the smoke workload: what the node and the fabric look like, and an
all-reduce bus-bandwidth sweep. Needs only torch (imported by the caller's process)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import node_facts
import torch
import torch.distributed as dist


def nccl_version():
    try:
        v = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001 - best effort
        return None
    if isinstance(v, tuple):
        return ".".join(str(x) for x in v)
    if isinstance(v, int):  # old encoding: 2.x.y -> 2xxyy / 2x0y
        major, rest = divmod(v, 10000) if v >= 10000 else divmod(v, 1000)
        minor, patch = divmod(rest, 100)
        return f"{major}.{minor}.{patch}"
    return str(v)


def parse_fabric(text: str) -> list:
    """Parse the 'Fabric' sections of `nvidia-smi -q` (one dict per GPU)."""
    sections, cur, indent = [], None, 0
    for line in text.splitlines():
        stripped = line.strip()
        ind = len(line) - len(line.lstrip())
        if stripped == "Fabric":
            cur, indent = {}, ind
            sections.append(cur)
            continue
        if cur is None or not stripped:
            continue
        if ind <= indent:
            cur = None
            continue
        if ":" in stripped:
            k, _, v = stripped.partition(":")
            k, v = k.strip(), v.strip()
            if v and k not in cur:
                cur[k] = v
    return sections


def query_fabric():
    """Best-effort GPU fabric state of this node via nvidia-smi; None when unavailable."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "-q"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    sections = parse_fabric(out.stdout)
    if not sections:
        return {"state": "absent"}
    first = sections[0]
    return {
        "state": first.get("State", "unknown"),
        "status": first.get("Status", "unknown"),
        "clique_id": first.get("CliqueId") or first.get("Clique ID"),
        "cluster_uuid": first.get("ClusterUUID") or first.get("Cluster UUID"),
        "uniform": all(s.get("State") == first.get("State") for s in sections),
        "gpus": len(sections),
    }


# IMEX channels: node_facts.py (no torch there: the health step reads them too)
IMEX_CHANNELS, IMEX_HINT, imex_channels = node_facts.IMEX_CHANNELS, node_facts.IMEX_HINT, node_facts.imex_channels


def imex_line(imex_by_host: dict) -> str:
    """The preflight's line: is /dev/nvidia-caps-imex-channels visible on every node, with channels."""
    missing = sorted(h for h, i in imex_by_host.items() if not (i or {}).get("visible"))
    empty = sorted(h for h, i in imex_by_host.items() if (i or {}).get("visible") and not i.get("channels"))
    n = len(imex_by_host)
    if not missing and not empty:
        chans = sorted({c for i in imex_by_host.values() for c in i["channels"]})
        return f"imex channels: {IMEX_CHANNELS} visible on {n}/{n} node(s) ({', '.join(chans)})"
    parts = []
    if missing:
        parts.append(f"not visible in the container on {', '.join(missing)} ({IMEX_HINT})")
    if empty:
        parts.append(f"visible but without a channel on {', '.join(empty)} (the host's IMEX daemon made none)")
    return f"imex channels: {IMEX_CHANNELS} {'; '.join(parts)}: multi-node NVLink needs an IMEX channel"


def mnnvl_status(fabric_by_host: dict, nodes: int, imex_by_host: dict | None = None):
    """Return (status, reason).  status: likely / no / disabled / unknown."""
    env = os.environ.get("NCCL_MNNVL_ENABLE")
    env_desc = f"NCCL_MNNVL_ENABLE={env}" if env is not None else "NCCL_MNNVL_ENABLE unset (NCCL auto)"
    if env is not None and env.strip() == "0":
        return "disabled", "NCCL_MNNVL_ENABLE=0"
    if not fabric_by_host or any(f is None for f in fabric_by_host.values()):
        return "unknown", f"nvidia-smi fabric state unavailable on some node; {env_desc}"
    states = {h: (f.get("state"), f.get("status")) for h, f in fabric_by_host.items()}
    for host, (state, _status) in states.items():
        if state in ("absent", "N/A", "Not Supported", "Not supported"):
            return "no", f"no NVLink fabric (state {state}) on {host}; {env_desc}"
    if all(s == "Completed" and st == "Success" for s, st in states.values()):
        if nodes <= 1:
            return "no", f"single node: NVLink fabric registered but MNNVL needs >1 node; {env_desc}"
        cliques = {(f.get("cluster_uuid"), f.get("clique_id")) for f in fabric_by_host.values()}
        no_imex = sorted(
            h for h, i in (imex_by_host or {}).items() if not ((i or {}).get("visible") and i.get("channels"))
        )
        if len(cliques) == 1 and None not in next(iter(cliques)) and no_imex:
            return "no", (
                f"all {nodes} nodes share NVLink clique {next(iter(cliques))[1]}, but {IMEX_CHANNELS} has no "
                f"channel in the container on {', '.join(no_imex)} (see the imex line); {env_desc}"
            )
        if len(cliques) == 1 and None not in next(iter(cliques)):
            return "likely", (
                f"all {nodes} nodes share NVLink clique {next(iter(cliques))[1]} "
                f"(fabric registered); {env_desc}; confirm with NCCL_DEBUG=INFO (look for MNNVL)"
            )
        return "no", f"nodes are in different NVLink cliques {sorted(map(str, cliques))}; {env_desc}"
    return "unknown", f"fabric states {sorted(set(states.values()))}; {env_desc}"


def busbw_sweep(sizes, iters: int, device, world: int, barrier, group=None) -> list:
    """All-reduce timings per message size, nccl-tests' formula: busbw = algbw * 2(n-1)/n.
    The slowest rank defines each time. `group`: a subgroup of `world` ranks (None: all)."""
    factor = 2.0 * (world - 1) / world
    cuda = device.type == "cuda"
    rows = []
    for size in sizes:
        numel = max(1, size // 4)
        buf = torch.ones(numel, dtype=torch.float32, device=device)
        for _ in range(2):  # warm-up (also creates the NCCL communicator)
            dist.all_reduce(buf, group=group)
        if cuda:
            torch.cuda.synchronize()
        barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf, group=group)
        if cuda:
            torch.cuda.synchronize()
        dt = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64, device=device)
        dist.all_reduce(dt, op=dist.ReduceOp.MAX, group=group)
        t = float(dt.item())
        nbytes = numel * 4
        algbw = nbytes / t / 1e9 if t > 0 else 0.0
        rows.append(
            {
                "size_bytes": nbytes,
                "time_us": round(t * 1e6, 3),
                "algbw_gbps": round(algbw, 6),
                "busbw_gbps": round(algbw * factor, 6),
            }
        )
        del buf
    return rows
