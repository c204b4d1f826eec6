"""Cluster profiles: where a job runs (clusters/*.toml plus the user's config dir)."""

from __future__ import annotations

import re
from functools import lru_cache

from bridge_launch.core import paths, pyxis, secret_ref, slurm_time
from bridge_launch.core.errors import UsageError, suggest
from bridge_launch.core.hardware import GPU_ARCH, SEGMENT_SIZES
from bridge_launch.core.ports import EPHEMERAL_PORTS, port_in_ephemeral_range
from bridge_launch.spec.catalog import Catalog, where

BACKENDS = ("local", "slurm", "lepton", "dgxcloud")


# key -> (type or tuple of types, default). None default = optional / unset.
BAD_NODE_HOURS = 24  # how long a node stays on the bad-node list unless the profile says otherwise
_TOP: dict = {
    "name": (str, None),  # the profile's name, for --cluster (default: the file's stem)
    "description": (str, ""),  # one line, shown by `clusters list`
    "aliases": (list, []),  # other names --cluster accepts for it (not inherited through extends)
    # a profile this one builds on: its values (tables merged key by key) where this file sets none
    "extends": (str, None),
    "abstract": (bool, False),  # a base for other profiles: submit refuses it (not inherited)
    "backend": (str, None),  # where jobs run: local (torchrun on this machine), slurm, lepton or dgxcloud
    # the GPU model, a key of core/hardware.GPU_ARCH (gb200, h100, ...; "cpu": none), for the precision checks
    "gpu_type": (str, "cpu"),
    "gpus_per_node": (int, 1),  # GPUs per node: torchrun's --nproc-per-node (on "cpu": worker processes)
    # memory per GPU (GiB) that plan's memory estimate is held against (0: not known, no memory check)
    "gpu_memory_gib": ((int, float), 0),
    # a fixed size: every job gets this many nodes (--nodes overrides it, with a warning); unset: the
    # recipe's gpus / gpus_per_node
    "nodes": (int, None),
    "max_nodes": (int, None),  # the most nodes a job may have (default: nodes; both unset: no limit)
    # nodes per NVLink domain (GB200 NVL72: 18), for segments, rank-group placement and the IMEX checks; 0: none
    "nvlink_domain_nodes": (int, 0),
    # where run dirs go, on a filesystem every node sees ("": the state dir's runs/, e.g. $BRIDGE_LAUNCH_HOME/runs)
    "job_root": (str, ""),
    # checkpoint write bandwidth per node (GB/s), to size the save before the time limit (0: not known)
    "checkpoint_write_gbps_per_node": ((int, float), 0),
    # checkpoints a job that saves keeps (checkpoint.most_recent_k, unless the job sets it); -1: all
    "checkpoint_most_recent_k": (int, -1),
    # submit on a terminal shows a summary and asks above this many GPU-hours (0: never asks)
    "confirm_gpu_hours": ((int, float), 0),
    # ... and before an experiment of more runs than this (0: never asks)
    "confirm_runs": (int, 20),
    # hours a node whose own fault failed a run stays out of later submits (runs/bad_nodes.py)
    "bad_node_hours": ((int, float), BAD_NODE_HOURS),
    # what a GPU-hour costs, for that summary (0: not known)
    "gpu_hour_cost": ((int, float), 0),
    # seconds a node waits in torchrun's rendezvous for the others (0: derived, backends/torchrun.py)
    "rdzv_join_timeout": (int, 0),
    # bare processes: the interpreter that runs torchrun ("": the one running bridge-launch); unused in a container
    "python": (str, ""),
    "container_image": (str, ""),  # the image jobs run in, over the recipe's container (--container overrides it)
    # Slurm: pyxis --container-mounts entries ("SRC:DST"); job_root and hf_home are added where none covers them
    "container_mounts": (list, []),
    # numactl-bind each torchrun worker to NUMA node LOCAL_RANK / (gpus_per_node / 2) (GB200: 2 GPUs per Grace)
    "numa_bind": (bool, False),
    "containers": (bool, True),  # false: bare processes, no image (--container is refused)
    # Hugging Face cache dir: the job's HF_HOME, with HF_HUB_OFFLINE=1 and TRANSFORMERS_OFFLINE=1, mounted into the
    # container ("": none of them set)
    "hf_home": (str, ""),
    # environment variables of every job (strings or numbers; true/false: 1/0), over the recipe's and overlays'
    "env": (dict, {}),
    # environment variable names the job gets as secrets, by name only (values: your environment at submit, or
    # [slurm] secret_sources, or the platform's secret store through secret_refs)
    "secrets": (list, []),
    "required_secrets": (list, []),  # as secrets, but on local and Slurm submit refuses while one has no value
    # Megatron-Bridge config keys for every job here, over the recipe's and overlays' (the command line's win)
    "config": (dict, {}),
    "slurm": (dict, {}),  # [slurm]: the Slurm backend's settings (below)
    "lepton": (dict, {}),  # [lepton]: the DGX Cloud Lepton backend's settings (below)
    "dgxcloud": (dict, {}),  # [dgxcloud]: the DGX Cloud (Run:ai) backend's settings (below)
    "canary": (dict, {}),  # runs/canary.py: the checks before the job (submit --canary)
}
# a word of `lfs setstripe`'s options: an option, a count, a size (16M), a pool or OST list
_STRIPE_WORD = re.compile(r"-{1,2}[A-Za-z][\w-]*|-?\d+[KkMmGg]?|[\w.,:-]+")
_SLURM = {
    "account": (str, ""),  # sbatch --account (--account overrides it; "": none given)
    "partition": (str, ""),  # sbatch --partition (--partition overrides it; "": the cluster's default)
    "qos": (str, ""),  # sbatch --qos ("": none given)
    "time": (str, "01:00:00"),  # sbatch --time, the job's time limit in Slurm's format (--time overrides it)
    "reservation": (str, ""),  # sbatch --reservation ("": none)
    "exclude": (list, []),  # node names for sbatch --exclude; the bad-node list's are added to them
    "exclusive": (bool, False),  # sbatch --exclusive: whole nodes, shared with no other job
    "mem": (str, ""),  # sbatch --mem, per node ("0": all of each node's memory; "": the site's default)
    "request_gpus": (bool, False),  # sbatch --gpus-per-node=<gpus_per_node>
    # sbatch --segment=<size> on jobs of several nodes, to keep them in NVLink domains (Slurm >= 24.05.3 with
    # TopologyPlugin=topology/block)
    "segment": (bool, False),
    # which segment (core/hardware.SEGMENT_SIZES): "domain" (Megatron-Bridge's rule) or "smallest"
    "segment_size": (str, "domain"),
    "sbatch_args": (list, []),  # more sbatch options ("--name=value" or "--flag"), written as #SBATCH lines
    "srun_args": (list, []),  # more srun options for every step of the job (image, health, training)
    # retries (logs/failures.py): an unknown failure is retried only when it saved a newer checkpoint;
    # true retries it as a flaky one
    "retry_unknown": (bool, False),
    # the health step (workloads/node_health.py): one task per node before torchrun, in the job's image; a node
    # that fails it stops the job and is left out of later submits (bad_node_hours)
    "health_check": (bool, False),
    # its own --time in minutes, counted from its checks' start (the image step before it unpacks the image)
    "health_minutes": (int, pyxis.HEALTH_MINUTES),
    # free space enroot's data path needs for a job's image (checked on every node before it is unpacked)
    "image_space_gb": ((int, float), pyxis.IMAGE_SPACE_GB),
    # and then, on jobs of several nodes, all-reduces over the allocation (judged by the [canary] figures)
    "health_fabric": (bool, True),
    "slurm_conf": (str, ""),  # SLURM_CONF for the Slurm commands bridge-launch runs ("": their default)
    # run the Slurm commands, and create run dirs, over SSH on this host ("": on this machine)
    "login_host": (str, ""),
    "ssh_port": (int, 22),  # ssh -p for login_host
    "ssh_user": (str, ""),  # the user on login_host (user@host; "": ssh's default)
    "ssh_identity": (str, ""),  # ssh -i: the private key for login_host ("": ssh's default)
    "ssh_config": (str, ""),  # ssh -F: an ssh_config file for login_host ("": ssh's default)
    # torchrun's rendezvous port, 1024 up to Linux's ephemeral range (0: derived from the job id); the health
    # step's all-reduces use the next one
    "rdzv_port": (int, 0),
    # sbatch --signal; a job with a time limit gets B:USR1@<signal lead> instead (the save before the limit)
    "signal": (str, ""),
    # srun --mpi: torchrun needs no MPI, so none unless the profile asks (pmix, pmi2, ...)
    "mpi": (str, "none"),
    # pyxis image cache: a shared directory `bridge-launch image import` fills (one squashfs per digest)
    "image_cache": (str, ""),
    "image_import_time": (str, "01:00:00"),  # sbatch --time of `bridge-launch image import`'s one-node job
    # secrets: NAME -> "file:PATH" | "netrc:MACHINE[:PATH]", read on the cluster (backends/secret_ref.py);
    # a secret without one goes through sbatch's environment: "warn" (default) or "refuse"
    "secret_sources": (dict, {}),
    # a secret with no source: "warn" passes it through sbatch's environment, "refuse" never does
    "env_secrets": (str, "warn"),
    # srun --cpu-bind: none, so that a site's task autobind does not pin the one task per node
    # (and every worker under it) to a core before the NUMA wrapper binds each worker; "" leaves
    # the flag out (the site's default)
    "cpu_bind": (str, "none"),
    # the cluster's TopologyPlugin, when stated here instead of read once with `scontrol show config`
    "topology_plugin": (str, ""),
    # the checkpoint directory's Lustre layout: `lfs setstripe` options ("-c -1 -S 16M"), set by the
    # batch script before training (job.sh stripe_checkpoints); "" leaves the file system's default
    "checkpoint_stripe": (str, ""),
}
_LEPTON = {
    "resource_shape": (str, ""),  # the job spec's resource_shape, each worker's (e.g. "gpu.4xgb200")
    # the dedicated node group (name or id) jobs run in; its id and its nodes' ids are looked up at submit
    "node_group": (str, ""),
    "node_reservation": (str, ""),  # reservation_config.reservation_id ("": no reservation)
    "image_pull_secrets": (list, []),  # Lepton registry secrets for pulling the image (image_pull_secrets)
    # the spec's mounts, tables {path, mount_path, from}, for the job and the data mover
    "mounts": (list, []),
    "shared_memory_size": (int, 0),  # the spec's shared_memory_size in MiB (0: 65536)
    # queue_config.can_be_preempted: the job may be preempted (sent with queue_priority)
    "can_be_preempted": (bool, False),
    "queue_priority": (str, ""),  # queue_config.priority_class, sent only with can_be_preempted ("": mid-4000)
    # the environment variable holding the workspace id (unset: `lep login`'s record)
    "workspace_env": (str, "LEPTON_WORKSPACE_ID"),
    "token_env": (str, "LEPTON_WORKSPACE_TOKEN"),  # the environment variable holding the workspace token
    # secret name -> the Lepton workspace secret it references (secret_name_ref); unlisted: its own name
    "secret_refs": (dict, {}),
    # resource shape of the busybox data-mover job that writes the run's files into the run dir
    "mover_resource_shape": (str, "cpu.small"),
    "request_timeout": ((int, float), 30),  # seconds each API request may take
    "retries": (int, 3),  # tries in all of an API call that fails transiently (5xx, timeout, connection error)
    "retry_wait": ((int, float), 2.0),  # seconds before the first retry, doubled after each
    "poll_interval": ((int, float), 5.0),  # seconds between checks of the data-mover job's state
    "mover_timeout": ((int, float), 600),  # seconds the data-mover job may take before the submit fails
    # segment_config: workers of one segment share an NVL72 domain (same rule as Slurm's --segment)
    "segment": (bool, True),
    "segment_size": (str, "domain"),  # as [slurm] segment_size
}
_DGXC = {
    "base_url": (str, ""),  # the Run:ai REST API's base URL (.../api/v1): token, projects, workloads
    # not read by bridge-launch (DGXCloudExecutor's field of that name; every call goes to base_url)
    "kube_apiserver_url": (str, ""),
    # the Run:ai project jobs go to, its id and cluster id looked up at submit ("": the first one listed)
    "project_name": (str, ""),
    # the workloads' storage.pvc entries, tables {name, path, existingPvc, claimName}, for the job and the data mover
    "pvcs": (list, []),
    "client_id_env": (str, "DGXC_CLIENT_ID"),  # the environment variable holding the API client id
    # the environment variable holding the client secret (sent only in the token request)
    "client_secret_env": (str, "DGXC_CLIENT_SECRET"),
    "distributed_framework": (str, "PyTorch"),  # distributedFramework of a workload of several nodes
    # not read by bridge-launch: nvcr.io credentials are the Run:ai project's registry credential, not in the request
    "pull_secret": (str, ""),
    # secret name -> "k8s-secret[:key]" in the project's namespace (key: the variable's name); unlisted:
    # the secret named like the variable in lower case with "-" for "_" (HF_TOKEN: hf-token)
    "secret_refs": (dict, {}),
    # job_root as mounted on this machine, where `bridge-launch logs` reads runs' logs ("": not mounted here)
    "local_job_root": (str, ""),
    "request_timeout": ((int, float), 30),  # seconds each API request may take
    "retries": (int, 3),  # tries in all of an API call that fails transiently (5xx, timeout, connection error)
    "retry_wait": ((int, float), 2.0),  # seconds before the first retry, doubled after each
    "poll_interval": ((int, float), 5.0),  # seconds between checks of the data-mover workload's phase
    "mover_timeout": ((int, float), 600),  # seconds the data-mover workload may take before the submit fails
}
# The profile's [canary] section (validated with these types and defaults; the canary's checks: runs/canary.py).
CANARY_KEYS = {
    "enabled": (bool, False),  # a profile may turn it on for every submit (--no-canary turns it off)
    "nodes": (int, 2),  # Slurm: nodes of the job's partition (at most the job's)
    "time": (str, "00:30:00"),  # Slurm: the canary job's time limit (an image pull included)
    "busbw_gbps": ((int, float), 0),  # expected all-reduce bus bandwidth at the largest size (0: report only)
    # the health step's all-reduce between NVLink domains (one GPU per node; 0: report only)
    "busbw_cross_rack_gbps": ((int, float), 0),
    "busbw_min_fraction": ((int, float), 0.8),  # below this fraction of busbw_gbps the network check fails
    "busbw_sizes": (list, [1 << 20, 16 << 20, 256 << 20]),  # bytes per all-reduce
    "busbw_iters": (int, 20),  # timed all-reduces per size (after 2 warm-up ones)
    "check_timeout": (int, 900),  # seconds for the trainer check and for the data check
}
_SECTIONS: dict[str, dict] = {"slurm": _SLURM, "lepton": _LEPTON, "dgxcloud": _DGXC, "canary": CANARY_KEYS}


def _check(at, data: dict, spec: dict, section: str = "") -> dict:
    out = {}
    for key, value in data.items():
        if key not in spec:
            what = f"[{section.rstrip('.')}] key" if section else "profile key"
            raise UsageError(f"{at(section + key)}: {suggest(key, spec, what)}")
        typ = spec[key][0]
        if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
            names = " or ".join(t.__name__ for t in (typ if isinstance(typ, tuple) else (typ,)))
            raise UsageError(f"{at(section + key)}: '{key}' must be {names}, got {type(value).__name__} {value!r}")
        out[key] = value
    for key, (_, default) in spec.items():
        out.setdefault(key, default if not isinstance(default, (list, dict)) else type(default)(default))
    return out


def _validate(data: dict, path, paths=None) -> dict:
    """The profile with defaults filled in; a bad value is one line naming the file and line that
    set it (`paths`: the files it is built from, head first)."""
    files = paths or [path]

    def at(key: str | None = None) -> str:
        return f"{where(files, key)}: cluster profile '{data.get('name')}'"

    prof = _check(at, data, _TOP)
    for section, spec in _SECTIONS.items():
        prof[section] = _check(at, prof[section], spec, section + ".")
    if prof["backend"] not in BACKENDS:
        raise UsageError(f"{at('backend')}: backend must be one of {', '.join(BACKENDS)}, got {prof['backend']!r}")
    if prof["gpu_type"] not in GPU_ARCH:
        raise UsageError(f"{at('gpu_type')}: {suggest(prof['gpu_type'], GPU_ARCH, 'gpu_type')}")
    if prof["gpus_per_node"] < 1:
        raise UsageError(f"{at('gpus_per_node')}: gpus_per_node must be >= 1")
    for key in ("nodes", "max_nodes"):
        if prof[key] is not None and prof[key] < 1:
            raise UsageError(f"{at(key)}: {key} must be >= 1")
    if prof["nodes"] is not None:
        if prof["max_nodes"] is None:
            prof["max_nodes"] = prof["nodes"]
        elif prof["nodes"] > prof["max_nodes"]:
            raise UsageError(f"{at('nodes')}: nodes ({prof['nodes']}) exceeds max_nodes ({prof['max_nodes']})")
    for key in ("env",):
        for k, v in prof[key].items():
            if not isinstance(v, (str, int, float, bool)):
                raise UsageError(f"{at('env.' + k)}: env {k} must be a string or number")
            prof[key][k] = _env_str(v)
    for key in ("secrets", "required_secrets"):
        for name in prof[key]:
            if not isinstance(name, str) or not name.replace("_", "").isalnum():
                raise UsageError(f"{at(key)}: secrets must be environment variable names, got {name!r}")
            if name in prof["env"]:
                raise UsageError(
                    f"{at(key)}: {name} is listed as a secret and also given a value in [env]; secrets "
                    "are passed by name only"
                )
    mpi = prof["slurm"]["mpi"]
    if not mpi.replace("_", "").isalnum() or any(a.startswith("--mpi") for a in prof["slurm"]["srun_args"]):
        raise UsageError(
            f"{at('slurm.mpi')}: [slurm] mpi must be one MPI plugin name (none, pmix, pmi2, ...), set "
            "there and not as --mpi in srun_args"
        )
    _check_secret_sources(at("slurm.secret_sources"), prof["slurm"])
    if prof["slurm"]["health_minutes"] < 1:
        raise UsageError(
            f"{at('slurm.health_minutes')}: [slurm] health_minutes is the health step's --time in whole "
            f"minutes (Slurm's least), at least 1; got {prof['slurm']['health_minutes']}"
        )
    if prof["slurm"]["image_space_gb"] < 0:
        raise UsageError(
            f"{at('slurm.image_space_gb')}: [slurm] image_space_gb is the free space (GB) enroot's data path "
            f"needs for the image, 0 or more (0: not checked); got {prof['slurm']['image_space_gb']}"
        )
    stripe = prof["slurm"]["checkpoint_stripe"].split()
    if stripe and (not stripe[0].startswith("-") or not all(_STRIPE_WORD.fullmatch(w) for w in stripe)):
        raise UsageError(
            f"{at('slurm.checkpoint_stripe')}: [slurm] checkpoint_stripe is `lfs setstripe`'s options for the "
            f'checkpoint directory, e.g. "-c -1 -S 16M" (no directory, no shell); got '
            f"{prof['slurm']['checkpoint_stripe']!r}"
        )
    for section in ("slurm", "lepton"):
        if prof[section]["segment_size"] not in SEGMENT_SIZES:
            raise UsageError(
                f"{at(section + '.segment_size')}: [{section}] segment_size must be one of "
                f"{', '.join(SEGMENT_SIZES)}, got {prof[section]['segment_size']!r}"
            )
    bind = prof["slurm"]["cpu_bind"]
    if not all(c.isalnum() or c in "_,:.-=" for c in bind) or any(
        a.startswith(("--cpu-bind", "--cpu_bind")) for a in prof["slurm"]["srun_args"]
    ):
        raise UsageError(
            f"{at('slurm.cpu_bind')}: [slurm] cpu_bind must be one srun --cpu-bind value (none, cores, "
            "map_cpu:..., verbose,none; empty for the site's default), set there and not in srun_args"
        )
    port = prof["slurm"]["rdzv_port"]
    if port and (port < 1024 or port > 65535 or port_in_ephemeral_range(port)):
        raise UsageError(
            f"{at('slurm.rdzv_port')}: [slurm] rdzv_port {port} is not usable: choose 1024-{EPHEMERAL_PORTS[0] - 1} "
            f"(Linux gives outgoing connections ports {EPHEMERAL_PORTS[0]}-{EPHEMERAL_PORTS[1]}, "
            "so a rendezvous port there may already be taken)"
        )
    if prof["rdzv_join_timeout"] < 0:
        raise UsageError(f"{at('rdzv_join_timeout')}: rdzv_join_timeout must be >= 0 seconds (0: derived)")
    _check_canary(at("canary"), prof["canary"])
    if prof["canary"]["enabled"] and prof["backend"] == "local":
        raise UsageError(
            f"{at('canary.enabled')}: [canary] enabled: the local backend runs on this machine; a canary checks a "
            "cluster"
        )
    prof["arch"] = GPU_ARCH[prof["gpu_type"]]
    prof["path"] = str(path)
    return prof


def _check_secret_sources(where: str, s: dict) -> None:
    for name, text in s["secret_sources"].items():
        if not name.replace("_", "").isalnum() or name[0].isdigit():
            raise UsageError(f"{where} [slurm] secret_sources: {name!r} is not an environment variable name")
        if not isinstance(text, str):
            raise UsageError(f"{where} [slurm] secret_sources {name}: expected a string, {secret_ref.FILE_HINT}")
        secret_ref.parse(text, f"{where} [slurm] secret_sources {name}")
    if s["env_secrets"] not in secret_ref.ENV_POLICIES:
        raise UsageError(
            f"{where} [slurm] env_secrets must be one of {', '.join(secret_ref.ENV_POLICIES)}, got {s['env_secrets']!r}"
        )


def _env_str(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)


@lru_cache(maxsize=1)
def catalog() -> Catalog:
    return Catalog("cluster", [(paths.data_dir() / "clusters", "shipped"), (paths.config_dir() / "clusters", "user")])


def load(name: str) -> dict:
    cat = catalog()
    entry = cat.get(name)
    prof = _validate(cat.resolved(entry.name), entry.path, [p for p, *_ in cat.chain(entry.name)])
    prof["origin"] = entry.origin
    return prof


def list_profiles(skip_broken: bool = False, problems: list | None = None) -> list[dict]:
    """Every profile. A file that does not load fails the call, unless skip_broken (left out) or
    `problems` is given (left out, its one-line error appended there)."""
    out = []
    if problems is not None:
        problems.extend(catalog().broken())
    for e in catalog().entries():
        try:
            out.append(load(e.name))
        except UsageError as exc:
            if problems is not None:
                problems.append(str(exc))
            elif not skip_broken:
                raise
    return out


def _check_canary(where: str, c: dict) -> None:
    """One clear line for a [canary] value that cannot work."""
    if c["nodes"] < 1:
        raise UsageError(f"{where} [canary]: nodes must be >= 1, got {c['nodes']}")
    try:
        slurm_time.seconds(c["time"])
    except ValueError:
        raise UsageError(f"{where} [canary]: time {c['time']!r} is not a Slurm time (e.g. 00:30:00)") from None
    if c["busbw_cross_rack_gbps"] < 0:
        raise UsageError(f"{where} [canary]: busbw_cross_rack_gbps must be >= 0 (0: report the figure only)")
    if c["busbw_gbps"] < 0:
        raise UsageError(f"{where} [canary]: busbw_gbps must be >= 0 (0: report the figure without judging it)")
    if not 0 < c["busbw_min_fraction"] <= 1:
        raise UsageError(f"{where} [canary]: busbw_min_fraction must be in (0, 1], got {c['busbw_min_fraction']}")
    sizes = c["busbw_sizes"]
    if not sizes or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 4 for n in sizes):
        raise UsageError(f"{where} [canary]: busbw_sizes must be a list of byte counts >= 4, got {sizes!r}")
    if c["busbw_iters"] < 1 or c["check_timeout"] < 10:
        raise UsageError(f"{where} [canary]: busbw_iters must be >= 1 and check_timeout >= 10 seconds")


def canary_settings(
    prof: dict, requested: bool | None, nodes: int, jobsrc: dict, unproven: str | None = None
) -> dict | None:
    """The canary's settings for a job (None: no canary). `requested`: --canary / --no-canary, or None
    for the default: the profile's [canary] enabled, or on where `unproven` says why the job's recipe
    function cannot be trusted to exist (not in its pinned Megatron-Bridge revision) on a cluster."""
    section = prof.get("canary") or {}
    on = section.get("enabled", False) if requested is None else requested
    by_default = requested is None and not on and unproven is not None and prof["backend"] != "local"
    if not (on or by_default):
        return None
    if prof["backend"] == "local":
        raise UsageError(
            f"--canary checks a cluster before the job starts; cluster '{prof['name']}' runs torchrun on "
            "this machine (the local backend), where the job itself is the check"
        )
    jobsrc["canary"] = "cli" if requested else unproven if by_default else f"cluster:{prof['name']}"
    full = {k: section.get(k, default) for k, (_, default) in CANARY_KEYS.items()}
    full.pop("enabled")
    # Slurm runs it on its own allocation; on Lepton and DGX Cloud every node of the job runs it
    full["nodes"] = min(full["nodes"], nodes) if prof["backend"] == "slurm" else nodes
    return full
