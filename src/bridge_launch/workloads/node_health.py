"""The health step: one task per node of the job's own allocation, in the job's image, before
torchrun starts (backends/slurm/backend.py runs it with `srun --ntasks-per-node=1 --time=2`).

Each node checks what would kill the job later, reports one line on its standard output and writes
its report to DIR/<node>.json:

- gpu: `nvidia-smi -q` (node_facts.gpu_health: uncorrectable ECC errors since the driver loaded, a
  pending row remap, a failed remap), the GPU count and model against the profile's; "skipped (no
  nvidia-smi)" where the node has none (CPU processes);
- driver: the driver's newest CUDA (nvidia-smi) against the image's (CUDA_VERSION, the toolkit's
  version.json), passing through the image's cuda-compat libraries where it has them;
- xid (GPU profiles): GPU-fault Xid lines in the node's kernel log over the last day, where the
  log is readable (`dmesg`), "skipped" with the reason where not;
- imex: the IMEX channels multi-node NVLink needs, where the profile has NVLink domains;
- paths: the data and checkpoint paths the job reads exist and are readable here, and the
  checkpoint directory it writes is writable;
- fabric (--fabric HOST:PORT): then every node joins one all-reduce over the allocation, and one
  across NVLink domains where it spans several (fabric_health.py, torch); rank 0 (SLURM_PROCID)
  reports one more line for the whole allocation (its node field: SLURM_JOB_NODELIST) and writes
  DIR/fabric.json.

Exit status 1 when a check failed (the batch script then stops before torchrun), else 0. Standard
library only; never bridge_launch.

    python3 node_health.py --report DIR [--gpus N] [--gpu-model GB200] [--imex]
        [--read KEY=PATH]... [--write KEY=PATH]... [--fabric HOST:PORT --fabric-sizes B,B
        --fabric-iters N --expect-gbps G --expect-cross-gbps G --min-fraction F --domain-nodes N]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

import node_facts

RESULT_MARK = node_facts.HEALTH_MARK
NVIDIA_SMI_TIMEOUT = 45  # seconds; the step itself has --time=2 (minutes)


def _node() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def smi_report() -> tuple[str | None, dict | None]:
    """`nvidia-smi -q`'s report, or the gpu check's result where there is none."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None, {"name": "gpu", "status": "skip", "detail": "skipped (no nvidia-smi)"}
    try:
        proc = subprocess.run([smi, "-q"], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT)
    except subprocess.TimeoutExpired:
        return None, {
            "name": "gpu",
            "status": "fail",
            "detail": f"nvidia-smi -q did not answer in {NVIDIA_SMI_TIMEOUT} s",
        }
    if proc.returncode:
        why = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
        return None, {"name": "gpu", "status": "fail", "detail": f"nvidia-smi -q failed: {why[0]}"}
    return proc.stdout, None


def check_gpu(text: str, expect: int, model: str) -> dict:
    gpus = node_facts.gpu_health(text)
    problems = [f"GPU {g['bus']}: {p}" for g in gpus for p in g["problems"]]
    if expect and len(gpus) != expect:
        problems.append(f"{len(gpus)} GPUs visible, the profile expects {expect}")
    if model:
        other = sorted({g["name"] for g in gpus if model.lower() not in g["name"].lower()})
        if other:
            problems.append(f"GPU model {', '.join(other)}, the profile expects {model}")
    if problems:
        return {"name": "gpu", "status": "fail", "detail": "; ".join(problems)}
    names = sorted({g["name"] for g in gpus})
    return {"name": "gpu", "status": "ok", "detail": f"{len(gpus)} x {', '.join(names)}: no uncorrectable errors"}


def image_cuda(environ=os.environ, root: str = "/usr/local/cuda") -> str:
    """The image's CUDA release (MAJOR.MINOR): NGC images set CUDA_VERSION (e.g. 12.9.1.010); else the
    toolkit's version.json; '' where the image says none."""
    version = environ.get("CUDA_VERSION", "")
    if not version:
        try:
            with open(os.path.join(root, "version.json")) as fh:
                version = json.load(fh).get("cuda", {}).get("version", "")
        except (OSError, ValueError, AttributeError):
            version = ""
    m = re.match(r"(\d+)\.(\d+)", version)
    return f"{m.group(1)}.{m.group(2)}" if m else ""


def check_driver(smi_report: str, cuda: str, compat: bool) -> dict:
    """The node's driver against the image's CUDA: `nvidia-smi -q` names the driver and the newest CUDA
    it runs ("CUDA Version"); an image built for a newer CUDA runs only through its forward-compatibility
    libraries (cuda-compat, data-center GPUs). A mismatch on some nodes is theirs (an old driver left
    behind); on every node the batch script sees the job's (node_facts.NODE_OWN_CHECKS)."""
    drv = re.search(r"^Driver Version\s*:\s*(\S+)", smi_report, re.M)
    top = re.search(r"^CUDA Version\s*:\s*(\d+)\.(\d+)", smi_report, re.M)
    if not drv or not top:
        return {"name": "driver", "status": "skip", "detail": "skipped (nvidia-smi names no driver or CUDA version)"}
    if not cuda:
        return {
            "name": "driver",
            "status": "skip",
            "detail": f"driver {drv.group(1)}; the image states no CUDA version",
        }
    has = (int(top.group(1)), int(top.group(2)))
    need = tuple(int(x) for x in cuda.split("."))
    said = f"driver {drv.group(1)} (CUDA {has[0]}.{has[1]}), the image's CUDA {cuda}"
    if need <= has:
        return {"name": "driver", "status": "ok", "detail": said}
    if compat:
        return {"name": "driver", "status": "ok", "detail": f"{said} through its forward-compatibility libraries"}
    return {
        "name": "driver",
        "status": "fail",
        "detail": f"{said}: the driver is too old for the image and the image has no cuda-compat libraries",
    }


XID_HOURS = 24  # a GPU-fault Xid older than this is history (a GPU reset does not clear the kernel log)


def check_xid(now: datetime.datetime | None = None) -> dict:
    """GPU-fault Xids (node_facts.FATAL_XIDS) in the node's kernel log over the last XID_HOURS, as
    `dmesg --time-format iso` shows it; skipped where the log is not readable (a container without
    the right to read it, kernel.dmesg_restrict)."""
    dmesg = shutil.which("dmesg")
    if dmesg is None:
        return {"name": "xid", "status": "skip", "detail": "skipped (no dmesg)"}
    try:
        proc = subprocess.run([dmesg, "--time-format", "iso"], capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"name": "xid", "status": "skip", "detail": f"skipped (dmesg: {exc})"}
    if proc.returncode:
        why = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
        return {"name": "xid", "status": "skip", "detail": f"skipped (the kernel log is not readable here: {why[0]})"}
    now = now or datetime.datetime.now(datetime.timezone.utc)
    pattern = re.compile(node_facts.XID_PATTERN)
    recent, old = [], 0
    for line in proc.stdout.splitlines():
        if "NVRM" not in line or not pattern.search(line):
            continue
        stamp, _, text = line.partition(" ")
        try:
            when = datetime.datetime.fromisoformat(stamp.replace(",", "."))
        except ValueError:
            when = now  # no time: count it as recent
        if now - when <= datetime.timedelta(hours=XID_HOURS):
            recent.append(text.strip())
        else:
            old += 1
    if recent:
        more = f" (+{len(recent) - 1} more)" if len(recent) > 1 else ""
        return {"name": "xid", "status": "fail", "detail": f"kernel log: {recent[-1][:200]}{more}"}
    note = f"; {old} older than {XID_HOURS} h" if old else ""
    return {"name": "xid", "status": "ok", "detail": f"no GPU-fault Xid in the kernel log in {XID_HOURS} h{note}"}


def check_imex() -> dict:
    info = node_facts.imex_channels()
    if not info["visible"]:
        return {
            "name": "imex",
            "status": "fail",
            "detail": f"{node_facts.IMEX_CHANNELS} not visible ({node_facts.IMEX_HINT})",
        }
    if not info["channels"]:
        return {"name": "imex", "status": "fail", "detail": "no IMEX channel (the host's IMEX daemon made none)"}
    return {"name": "imex", "status": "ok", "detail": ", ".join(info["channels"])}


def check_paths(reads: list[str], writes: list[str]) -> dict:
    problems = []
    for item in reads:
        key, _, path = item.partition("=")
        if not os.path.exists(path):
            problems.append(f"{key} {path} does not exist here")
        elif not os.access(path, os.R_OK):
            problems.append(f"{key} {path} is not readable here (uid {os.getuid()})")
    for item in writes:
        key, _, path = item.partition("=")
        probe = path
        while probe and not os.path.exists(probe):  # the job creates what is missing below the first that exists
            probe = os.path.dirname(probe.rstrip("/"))
        if not probe or not os.access(probe, os.W_OK):
            problems.append(f"{key} {path} cannot be written here ({probe or '/'} is not writable)")
    if problems:
        return {"name": "paths", "status": "fail", "detail": "; ".join(problems)}
    n = len(reads) + len(writes)
    return {"name": "paths", "status": "ok" if n else "skip", "detail": f"{n} path(s) reachable" if n else "no path"}


def check_fabric(args) -> dict | None:
    """The all-reduces over the allocation (fabric_health.py): a check on rank 0, None elsewhere."""
    rank = os.environ.get("SLURM_PROCID", "0")
    t0 = time.monotonic()
    try:
        import fabric_health  # torch: only this part of the step needs it

        ok, detail, report = fabric_health.measure(args)
        report["seconds"] = round(time.monotonic() - t0, 2)  # torch's import and the group's start included
    except Exception as exc:  # noqa: BLE001 - a fabric that fails in any way is this check's finding
        what = str(exc).strip().splitlines()
        return {"name": "fabric", "status": "fail", "detail": f"{type(exc).__name__}: {what[0] if what else ''}"[:300]}
    if rank != "0":
        return None
    os.makedirs(args.report, exist_ok=True)
    with open(os.path.join(args.report, "fabric.json"), "w") as fh:
        json.dump(report, fh)
    return {"name": "fabric", "status": "ok" if ok else "fail", "detail": detail}


def _sizes(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="node_health.py")
    ap.add_argument("--report", required=True)
    ap.add_argument("--gpus", type=int, default=0)
    ap.add_argument("--gpu-model", default="")
    ap.add_argument("--imex", action="store_true")
    ap.add_argument("--read", action="append", default=[])
    ap.add_argument("--write", action="append", default=[])
    ap.add_argument("--fabric", default="", help="HOST:PORT of rank 0's store: measure the fabric too")
    ap.add_argument("--fabric-sizes", type=_sizes, default=[1 << 20, 16 << 20])
    ap.add_argument("--fabric-iters", type=int, default=5)
    ap.add_argument("--expect-gbps", type=float, default=0.0)
    ap.add_argument("--expect-cross-gbps", type=float, default=0.0)
    ap.add_argument("--min-fraction", type=float, default=0.8)
    ap.add_argument("--domain-nodes", type=int, default=0)
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    text, none = smi_report()
    checks = [none or check_gpu(text or "", args.gpus, args.gpu_model)]
    if text is not None:
        checks.append(check_driver(text, image_cuda(), os.path.isdir("/usr/local/cuda/compat")))
    if args.gpus:  # GPU nodes: their kernel's Xid lines too
        checks.append(check_xid())
    if args.imex:
        checks.append(check_imex())
    checks.append(check_paths(args.read, args.write))
    failed = [c for c in checks if c["status"] == "fail"]
    node = _node()
    report = {"node": node, "status": "fail" if failed else "ok", "seconds": round(time.monotonic() - t0, 2)}
    report["checks"] = checks
    os.makedirs(args.report, exist_ok=True)
    tmp = os.path.join(args.report, f".{node}.json")
    with open(tmp, "w") as fh:
        json.dump(report, fh)
    os.replace(tmp, os.path.join(args.report, f"{node}.json"))
    shown = failed or checks
    print(
        f"{RESULT_MARK} {node} {'FAIL' if failed else 'ok'} " + "; ".join(f"{c['name']}: {c['detail']}" for c in shown),
        flush=True,
    )
    fabric = check_fabric(args) if args.fabric else None
    if fabric:  # one line for the allocation: no node of its own is named
        rank0 = os.environ.get("SLURM_PROCID", "0") == "0"
        where = os.environ.get("SLURM_JOB_NODELIST") or node if rank0 else node  # other ranks: their failure
        print(f"{RESULT_MARK} {where} {'FAIL' if fabric['status'] == 'fail' else 'ok'} fabric: {fabric['detail']}")
    return 1 if failed or (fabric and fabric["status"] == "fail") else 0


if __name__ == "__main__":
    sys.exit(main())
