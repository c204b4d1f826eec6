"""What every multi-node torchrun launch adds (Slurm, Lepton, DGX Cloud): per-rank log files in
the run dir, a rendezvous that waits for nodes starting minutes apart, NCCL hang triage on, and
a rendezvous port outside the kernel's ephemeral range. One place for each value; the backends
only place them in their artifacts. Nothing here imports torch.

Sources (torch 2.13.0, git cf30153c, as installed in .venv):
- torch/distributed/run.py: `--log-dir` ("a unique job-level sub-directory is created with rdzv_id
  as the prefix"); `--tee 3` then writes each worker's stdout/stderr to
  <log-dir>/<rdzv id>_<random>/attempt_<n>/<local rank>/{stdout,stderr}.log, and a failing worker's
  traceback to error.json beside them. Without --log-dir these go to a mkdtemp under /tmp inside
  the container, lost with it.
- torch/distributed/elastic/rendezvous/dynamic_rendezvous.py create_handler: `join_timeout`
  defaults to 600 s ("the total time within which the rendezvous is expected to complete").
- torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py _create_tcp_store: the store
  client's `read_timeout` defaults to 60 s, and it is also how long a node waits for the head
  node's store to accept its connection: a node whose torchrun starts more than 60 s before the
  head node's fails however long join_timeout is. `is_host` overrides the guess of which node
  hosts the store (utils._matches_machine_hostname compares the endpoint with this machine's
  hostname and the addresses its hostname resolves to; given an IP while the hostname resolves
  to a loopback address through /etc/hosts, no node would host it).
- Flight recorder: FlightRecorder.hpp:111 reads the ring buffer size from TORCH_FR_BUFFER_SIZE, then
  TORCH_NCCL_TRACE_BUFFER_SIZE (default 2000 in 2.13; 0, i.e. off, before pytorch #142260,
  2024-12); Utils.hpp getCvarInt warns once per process for the second name ("Environment variable
  TORCH_NCCL_TRACE_BUFFER_SIZE is deprecated; use TORCH_FR_BUFFER_SIZE instead", seen on every rank
  of a local-slurm job), so the first is set. TORCH_NCCL_DUMP_ON_TIMEOUT (ProcessGroupNCCL.hpp:73;
  false in older releases, true in recent ones) keeps its name. The dump goes to
  <TORCH_NCCL_DEBUG_INFO_TEMP_FILE><global rank> (default /tmp/nccl_trace_rank_, lost with the
  container): 2.13's libtorch_cpu.so reads TORCH_FR_DUMP_TEMP_FILE first, then this name, which
  every release with a flight recorder reads; the default writer that reads it is made when the
  first dump is launched (FlightRecorder.hpp, DebugInfoWriter: "If users don't register before
  calling launchAsyncDebugDump ... the default writer will be auto-registered"), so a newer torch's
  deprecation note for this name appears only with a dump. Set explicitly so the container's
  torch does not decide. Read a dump with `torchfrtrace <dir> -p rank_`
  (torch.distributed.flight_recorder.fr_trace: "one trace file per rank, named with
  <prefix>_<rank>"). Megatron-Bridge 067f987 (training/initialize.py
  _setup_flight_recorder_env) keeps values already in the environment; its dist.flight_recorder_*
  keys, when a job sets them, are passed on here instead.
"""

from __future__ import annotations

# The per-job rendezvous port: 20000 + job id mod 12000, i.e. 20000-31999, below the range.
RDZV_PORT_BASE = 20000
RDZV_PORT_SPAN = 12000
# The health step's fabric store (node_health.py --fabric): 32000 + job id mod 700, i.e. 32000-32699,
# between the rendezvous ports and the ephemeral ones, so that the health step of one job never takes
# the rendezvous port of the next (job ids are consecutive; a "+ 1" would).
HEALTH_PORT_BASE = 32000
HEALTH_PORT_SPAN = 700

JOIN_TIMEOUT_S = 600  # torch's own default, written out: nodes start within seconds of each other
# A job whose nodes each pull and convert the image: docs/how-to/image-cache.md measures 126-170 s on two nodes
# here and estimates 3-20 minutes for a 30 GB image on 64 nodes; the first node up waits for the last.
JOIN_TIMEOUT_PULL_S = 1800

LOG_SUBDIR = "logs/torchrun"  # per-node torchrun log dirs, under the run dir
TRACE_SUBDIR = "nccl-trace"  # flight-recorder dumps, under the run dir: <job>/rank_<global rank>
TRACE_PREFIX = "rank_"
TRACE_FILE_VAR = "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"
TRACE_BUFFER = 2000  # entries; torch 2.13's default, explicit for older torch in the image
BUFFER_VAR = "TORCH_FR_BUFFER_SIZE"
_FLIGHT_KEYS = {  # Megatron-Bridge DistributedInitConfig field -> the variable it sets
    "dist.flight_recorder_trace_buffer_size": BUFFER_VAR,
    "dist.flight_recorder_dump_on_timeout": "TORCH_NCCL_DUMP_ON_TIMEOUT",
}


def pulls_image(job) -> bool:
    """Whether every node imports the job's image itself (a registry reference) rather than
    mounting a squashfs file (an `image import` cache entry or a path)."""
    c = job.container or ""
    return bool(c) and not c.startswith(("/", "."))


def join_timeout(job) -> int:
    """Seconds a node waits in the rendezvous for the others: the profile's rdzv_join_timeout,
    else long enough for nodes that pull the image minutes apart."""
    stated = int(job.profile.get("rdzv_join_timeout") or 0)
    if stated > 0:
        return stated
    if job.backend in ("lepton", "dgxcloud") or pulls_image(job):
        return JOIN_TIMEOUT_PULL_S
    return JOIN_TIMEOUT_S


def rdzv_conf(job, is_host: str) -> str:
    """torchrun --rdzv-conf: the join and store-connect timeouts (the same: the head node may be
    the late one) and which node hosts the store (`is_host`, a shell expression giving 1 or 0)."""
    t = join_timeout(job)
    return f"join_timeout={t},read_timeout={t},is_host={is_host}"


def log_dir(job) -> str:
    return f"{job.run_dir}/{LOG_SUBDIR}"


def trace_dir(job) -> str:
    return f"{job.run_dir}/{TRACE_SUBDIR}"


def triage_env(job) -> dict:
    """The flight recorder's buffer size and TORCH_NCCL_DUMP_ON_TIMEOUT (the dump path is per job
    and set by the backend). A job's dist.flight_recorder_* values win over the defaults, a value
    the job's environment already gives (under either buffer name) wins over both."""
    out = {BUFFER_VAR: str(TRACE_BUFFER), "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}
    if "TORCH_NCCL_TRACE_BUFFER_SIZE" in job.env:
        out.pop(BUFFER_VAR)
    for key, var in _FLIGHT_KEYS.items():
        value = job.config.get(key)
        if isinstance(value, bool):
            out[var] = "1" if value else "0"
        elif isinstance(value, int):
            out[var] = str(value)
    return {k: v for k, v in out.items() if k not in job.env}


def sets_trace_file(job) -> bool:
    """False when the job names the dump file itself (its environment, or Megatron-Bridge's
    dist.flight_recorder_dump_path, which Bridge exports when the variable is unset)."""
    return (
        TRACE_FILE_VAR not in job.env
        and "TORCH_FR_DUMP_TEMP_FILE" not in job.env
        and not job.config.get("dist.flight_recorder_dump_path")
    )
