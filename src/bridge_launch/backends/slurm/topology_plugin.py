"""Whether a Slurm cluster keeps a job's NVLink-bound rank groups inside one NVLink domain.

`--segment=N` asks Slurm to build the allocation from blocks of N nodes, each inside one NVLink
domain, but only the topology plugins that place jobs by blocks read it: in Slurm's source
(SchedMD/slurm at 284c3b95, 2026-08-20) the segment size is read in
src/plugins/topology/block/eval_nodes_block.c (since 24.05), ring/eval_nodes_ring.c and
torus3d/eval_nodes_torus3d.c (since 26.05); topology/tree and topology/flat (what `none` and
`default` are read as, src/common/read_config.c) never look at it, so sbatch accepts --segment and
the job lands wherever the scheduler likes. The plugin is read once per cluster with
`scontrol show config` ("TopologyPlugin = ...", src/api/config_info.c) and cached in the state
dir; a profile can state it instead ([slurm] topology_plugin).

Which groups need one domain comes from plan's own arithmetic (plan.topology: TP and expert TP,
and EP under HybridEP), through nvlink_spans() alone.
"""

from __future__ import annotations

import json
import os
import re
import time

SEGMENT_PLUGINS = ("topology/block", "topology/ring", "topology/torus3d")
CACHE_FILE = "slurm-topology.json"
CACHE_TTL_S = 7 * 86400  # a cluster's topology plugin changes with its slurm.conf, rarely
_LINE = re.compile(r"^\s*TopologyPlugin\s*=\s*(\S+)", re.M)


def normalize(name: str) -> str:
    """'block' / 'topology/block' -> 'topology/block' (what scontrol prints; none, default and
    flat are all plugins that do not read --segment)."""
    n = name.strip().lower()
    return n if n.startswith("topology/") else f"topology/{n}"


def _cache_key(job) -> str:
    s = job.scheduler
    return "|".join([job.cluster, s.get("login_host") or "", s.get("slurm_conf") or ""])


def _cache_path():
    from bridge_launch.core import paths

    return paths.state_dir() / CACHE_FILE


def _read_cache() -> dict:
    try:
        with open(_cache_path(), encoding="utf-8") as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_cache(key: str, plugin: str) -> None:
    data = _read_cache()
    data[key] = {"plugin": plugin, "at": int(time.time())}
    path = _cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{CACHE_FILE}.{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def topology_plugin(backend, job) -> tuple[str | None, str]:
    """(the cluster's TopologyPlugin or None, where that came from: profile / cached / an error)."""
    s = job.scheduler
    if s.get("topology_plugin"):
        return normalize(s["topology_plugin"]), "profile"
    key = _cache_key(job)
    hit = _read_cache().get(key)
    if isinstance(hit, dict) and hit.get("plugin") and time.time() - hit.get("at", 0) < CACHE_TTL_S:
        return hit["plugin"], "cached"
    try:
        proc = backend.command(s, ["scontrol", "show", "config"], timeout=60)
    except Exception as exc:  # noqa: BLE001 - a warning's input, never a reason to refuse the job
        return None, f"scontrol show config failed: {exc}"
    m = _LINE.search(proc.stdout or "") if proc.returncode == 0 else None
    if not m:
        return None, f"scontrol show config gave no TopologyPlugin ({backend.first_error(proc)})"
    plugin = normalize(m.group(1))
    _write_cache(key, plugin)
    return plugin, "scontrol show config"


def nvlink_spans(job) -> list[dict] | None:
    """The job's rank groups that must stay inside one NVLink domain and span more than one node
    ([{"label", "size", "nodes"}]), by plan's arithmetic; None when it cannot tell (the parallel
    sizes are not integers, or the arithmetic's dependencies are missing)."""
    from bridge_launch.core.errors import UsageError
    from bridge_launch.plan import topology

    try:
        par = topology.parallel_of(job)
        sp, facts, _, _ = topology.placement(job, par, topology.rank_groups(par))
    except UsageError:
        return None
    return [
        {"label": topology._LABEL[k], "size": sp[k]["size"], "nodes": sp[k]["max_nodes"]}
        for k in facts["nvlink_groups"]
        if sp[k]["max_nodes"] > 1
    ]


def _groups_text(spans: list[dict]) -> str:
    return " and ".join(f"{g['label']} groups of {g['size']} ranks span {g['nodes']} nodes" for g in spans)


def warning(job, *, segment: int | None, plugin: str | None, source: str, spans) -> str | None:
    """The one warning (or None) for a job on this cluster. `segment`: the --segment the script
    requests (None: none); `spans`: nvlink_spans(job), or a callable giving it (only called when
    the answer matters)."""
    domain = int(job.profile.get("nvlink_domain_nodes") or 0)
    if job.nodes <= 1 or domain <= 1:
        return None  # one node, or no NVLink domain wider than a node: nothing to keep together
    if segment and plugin in SEGMENT_PLUGINS:
        return None
    spans = spans() if callable(spans) else spans
    need = f"; {_groups_text(spans)} and need one NVLink domain each" if spans else ""
    where = (
        f"the cluster's TopologyPlugin is {plugin} ({source})"
        if plugin
        else f"its TopologyPlugin is unknown ({source})"
    )
    if segment:
        if plugin is None and spans == []:
            return None
        head = (
            f"cluster '{job.cluster}': --segment={segment} may be ignored: {where}, and only "
            f"{', '.join(SEGMENT_PLUGINS)} read --segment (Slurm src/plugins/topology/*/eval_nodes_*.c), so "
            f"nothing keeps the job's {job.nodes} nodes inside {domain}-node NVLink domains"
        )
        fix = (
            "ask the admins for topology/block with BlockSizes of the NVLink domain, or state the plugin as "
            "[slurm] topology_plugin in the profile"
            if plugin is None
            else "ask the admins for topology/block with BlockSizes of the NVLink domain"
        )
        return f"{head}{need}; {fix}"
    if not spans:
        return None
    fix = (
        "it runs a block topology: set [slurm] segment = true in the profile (sbatch >= 24.05.3)"
        if plugin in SEGMENT_PLUGINS
        else "nothing else in the request keeps them together"
    )
    return (
        f"cluster '{job.cluster}' requests no --segment ([slurm] segment = false): Slurm may spread the job's "
        f"{job.nodes} nodes over several {domain}-node NVLink domains{need}; {where}: {fix}"
    )


def check(backend, job, segment: int | None) -> str | None:
    """At submit: read the plugin (profile, cache or scontrol) only when it can matter, and warn."""
    domain = int(job.profile.get("nvlink_domain_nodes") or 0)
    if job.nodes <= 1 or domain <= 1:
        return None
    plugin, source = topology_plugin(backend, job)
    return warning(job, segment=segment, plugin=plugin, source=source, spans=lambda: nvlink_spans(job))
