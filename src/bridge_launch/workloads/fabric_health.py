"""The fabric part of the health step (node_health.py --fabric): after its own checks, every node of
the allocation joins one process group (one rank per node, its first GPU; gloo where there is no
GPU) and measures all-reduce bus bandwidth over all the nodes, then over one node of each of two
NVLink domains (racks) where the job spans several. Rank 0 judges the figures and reports one line
for the whole allocation.

What each figure is judged against (the profile's [canary] section, the same figures the canary
uses): an all-reduce whose nodes share one NVLink domain against `busbw_gbps`, one that crosses
domains against `busbw_cross_rack_gbps`; a figure below `busbw_min_fraction` of its expectation
fails the step; an expectation of 0 reports the figure only; gloo (CPU processes) is never judged.
The domain of a node is its NVLink clique (`nvidia-smi -q` Fabric: ClusterUUID and CliqueId,
fabric_checks.query_fabric); without nvidia-smi the job's node count against the profile's domain
size decides. One rank per node measures one GPU's path out of each node, not every rail: the
canary's sweep (cluster_checks.py) runs a rank per GPU.

Needs torch, imported by the caller only when --fabric is given (the node checks are stdlib only).
"""

from __future__ import annotations

import datetime
import os

import fabric_checks
import torch
import torch.distributed as dist

INIT_TIMEOUT = 60  # seconds for every node to join; the step itself has --time=2 (minutes)


def expectation(cliques: list, nodes: int, domain_nodes: int, in_rack: float, cross: float) -> tuple[float, str]:
    """(expected GB/s, what the ranks span) for an all-reduce over ranks on nodes of these cliques."""
    known = [c for c in cliques if c is not None]
    if known and len(known) == len(cliques):
        one = len(set(known)) == 1
    elif domain_nodes <= 1:
        return cross, "no NVLink domain in the profile"
    else:  # no clique information: the job's size against the profile's NVLink domain
        one = nodes <= domain_nodes
    return (in_rack, "one NVLink domain") if one else (cross, "across NVLink domains")


def verdict(gbps: float, expected: float, fraction: float, backend: str) -> tuple[bool, str]:
    """(ok, how it compares) for one measured figure."""
    if backend != "nccl":
        return True, f"no verdict on {backend}"
    if expected <= 0:
        return True, "no expected figure in the profile ([canary] busbw_gbps / busbw_cross_rack_gbps)"
    floor = expected * fraction
    if gbps < floor:
        return False, f"below {fraction:.0%} of the expected {expected:g} GB/s"
    return True, f"expected {expected:g} GB/s"


def measure(args) -> tuple[bool, str, dict]:
    """Join the group, measure, and (rank 0) judge: (ok, the line's detail, the report)."""
    rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend,
        init_method=f"tcp://{args.fabric}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=INIT_TIMEOUT),
    )
    try:
        fabric = fabric_checks.query_fabric() or {}
        clique = (fabric.get("cluster_uuid"), fabric.get("clique_id")) if fabric.get("clique_id") else None
        node = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
        gathered: list = [None] * world
        dist.all_gather_object(gathered, (node, clique))
        cliques = [c for _, c in gathered]
        sizes, iters = args.fabric_sizes, args.fabric_iters
        rows = fabric_checks.busbw_sweep(sizes, iters, device, world, dist.barrier)
        report: dict = {"backend": backend, "ranks": [n for n, _ in gathered], "all": rows}
        groups = {}
        for r, c in enumerate(cliques):
            if c is not None:
                groups.setdefault(c, r)
        cross = None
        if len(groups) >= 2:  # the first node of the first two domains
            pair = sorted(groups.values())[:2]
            sub = dist.new_group(pair)
            if rank in pair:
                cross = fabric_checks.busbw_sweep(sizes, iters, device, 2, lambda: dist.barrier(group=sub), group=sub)
            report["cross_rack"] = {"ranks": [gathered[r][0] for r in pair], "rows": cross}
        if rank != 0:
            return True, "", report
        parts, ok = [], True
        expected, span = expectation(cliques, world, args.domain_nodes, args.expect_gbps, args.expect_cross_gbps)
        best = rows[-1]["busbw_gbps"]
        good, how = verdict(best, expected, args.min_fraction, backend)
        ok &= good
        parts.append(f"all-reduce over {world} nodes ({span}): {best:.3g} GB/s busbw at {sizes[-1]} B, {how}")
        if cross:
            good, how = verdict(cross[-1]["busbw_gbps"], args.expect_cross_gbps, args.min_fraction, backend)
            ok &= good
            names = " and ".join(report["cross_rack"]["ranks"])
            parts.append(f"across racks ({names}): {cross[-1]['busbw_gbps']:.3g} GB/s, {how}")
        elif world > 1:
            parts.append(
                "across racks: one NVLink domain"
                if len(groups) == 1 and len(cliques) == len([c for c in cliques if c])
                else "across racks: not measured (no NVLink clique information)"
            )
        report["ok"] = ok
        return ok, "; ".join(parts), report
    finally:
        dist.destroy_process_group()
