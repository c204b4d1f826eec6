"""The health step's node checks (workloads/node_health.py, node_facts.py) on `nvidia-smi -q` reports
in the driver's layout (tests/gpu_reports.py). The step inside a real allocation:
tests/e2e/test_slurm_e2e.py::test_the_health_step_finds_the_bad_node_and_the_next_job_leaves_it_out."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys

from conftest import WORKLOADS
from gpu_reports import fake_dmesg, fake_nvidia_smi, report

sys.path.insert(0, str(WORKLOADS))
import node_facts


def test_a_healthy_report_has_no_problem_and_each_fault_is_named():
    healthy = node_facts.gpu_health(report(4))
    assert [g["bus"] for g in healthy] == [f"00000000:0{i}:00.0" for i in range(1, 5)]
    assert all(g["name"] == "NVIDIA GB200" and g["problems"] == [] for g in healthy)
    bad = node_facts.gpu_health(report(4, dram_uncorrectable=2))
    assert bad[0]["problems"] == ["Volatile DRAM Uncorrectable ECC errors: 2"] and bad[1]["problems"] == []
    assert node_facts.gpu_health(report(2, pending="Yes"))[0]["problems"] == [
        "a row remap is pending (the GPU needs a reset)"
    ]
    # the lifetime (Aggregate) count alone is history, not a fault of now
    assert node_facts.gpu_health(report(2, aggregate_uncorrectable=7))[0]["problems"] == []


def _run(tmp_path, *args, path=None):
    env = dict(os.environ, PATH=path if path is not None else os.environ["PATH"], SLURMD_NODENAME="node2")
    proc = subprocess.run(
        [sys.executable, str(WORKLOADS / "node_health.py"), f"--report={tmp_path / 'rep'}", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    return proc, json.loads((tmp_path / "rep" / "node2.json").read_text())


def test_each_node_reports_one_line_and_a_file(tmp_path):
    fake_nvidia_smi(tmp_path / "bin", bad_node="node2")
    fake_dmesg(tmp_path / "bin", [])
    path = f"{tmp_path / 'bin'}:{os.environ['PATH']}"
    data = tmp_path / "data"
    data.mkdir()
    proc, rep = _run(tmp_path, "--gpus=4", "--gpu-model=GB200", f"--read=dataset.path={data}", path=path)
    assert proc.returncode == 1 and proc.stdout.startswith("bridge-launch health: node2 FAIL gpu: GPU 00000000:01:00.0")
    assert "Volatile DRAM Uncorrectable ECC errors: 2" in proc.stdout and len(proc.stdout.splitlines()) == 1
    assert rep["status"] == "fail" and [c["name"] for c in rep["checks"]] == ["gpu", "driver", "xid", "paths"]
    fake_nvidia_smi(tmp_path / "bin", bad_node="node1")  # node2 is healthy now
    proc, rep = _run(tmp_path, "--gpus=8", "--gpu-model=GB200", path=path)
    assert proc.returncode == 1 and "4 GPUs visible, the profile expects 8" in proc.stdout
    proc, rep = _run(tmp_path, "--gpus=4", "--gpu-model=GB200", f"--read=dataset.path={tmp_path}/nope", path=path)
    assert proc.returncode == 1 and f"dataset.path {tmp_path}/nope does not exist here" in proc.stdout
    proc, rep = _run(tmp_path, "--gpus=4", "--gpu-model=GB200", f"--write=checkpoint.save={tmp_path}/ck/a", path=path)
    assert proc.returncode == 0 and proc.stdout.startswith("bridge-launch health: node2 ok gpu: 4 x NVIDIA GB200")


def test_a_node_without_nvidia_smi_skips_the_gpu_check(tmp_path):
    proc, rep = _run(tmp_path, "--gpus=0", path="/usr/bin:/bin")
    assert proc.returncode == 0, proc.stderr
    assert rep["checks"][0] == {"name": "gpu", "status": "skip", "detail": "skipped (no nvidia-smi)"}
    assert "gpu: skipped (no nvidia-smi)" in proc.stdout


def test_a_gpu_fault_xid_of_the_last_day_in_the_kernel_log_fails_the_node(tmp_path):
    fake_nvidia_smi(tmp_path / "bin")
    path = f"{tmp_path / 'bin'}:/usr/bin:/bin"
    now = datetime.datetime.now(datetime.timezone.utc)
    stamp = (now - datetime.timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%S,000000+00:00")
    old = (now - datetime.timedelta(days=3)).strftime("%Y-%m-%dT%H:%M:%S,000000+00:00")
    # the kernel's line as NVIDIA's Xid catalog shows it (logs/failures.py quotes the same form)
    xid79 = "NVRM: Xid (PCI:0000:1b:00): 79, pid=4242, name=python, GPU has fallen off the bus."
    fake_dmesg(tmp_path / "bin", [f"{old} {xid79}", f"{stamp} {xid79}", f"{stamp} usb 1-1: new device"])
    proc, rep = _run(tmp_path, "--gpus=4", "--gpu-model=GB200", path=path)
    assert proc.returncode == 1 and proc.stdout.startswith(f"bridge-launch health: node2 FAIL xid: kernel log: {xid79}")
    # older than a day: history, said but not failed; an Xid of another kind (13: a program's fault) never
    xid13 = "NVRM: Xid (PCI:0000:1b:00): 13, pid=4242, Graphics Exception"
    fake_dmesg(tmp_path / "bin", [f"{old} {xid79}", f"{stamp} {xid13}"])
    proc, rep = _run(tmp_path, "--gpus=4", "--gpu-model=GB200", path=path)
    assert proc.returncode == 0, proc.stdout
    assert rep["checks"][2] == {
        "name": "xid",
        "status": "ok",
        "detail": "no GPU-fault Xid in the kernel log in 24 h; 1 older than 24 h",
    }
    fake_dmesg(tmp_path / "bin", refuse=True)  # a container without the right to read it
    proc, rep = _run(tmp_path, "--gpus=4", "--gpu-model=GB200", path=path)
    assert proc.returncode == 0 and rep["checks"][2]["status"] == "skip"
    assert rep["checks"][2]["detail"] == (
        "skipped (the kernel log is not readable here: dmesg: read kernel buffer failed: Operation not permitted)"
    )


def test_the_driver_against_the_images_cuda(tmp_path):
    """nvidia-smi's CUDA Version is the newest the driver runs (580.65.06: 13.0): an image of CUDA 13.0
    or older passes, a newer one only through its cuda-compat libraries; the node says which driver.
    A node that fails it is at fault on its own unless every node does (the batch script's rule)."""
    import node_health

    text = report(2)
    assert node_health.check_driver(text, "12.9", compat=False) == {
        "name": "driver",
        "status": "ok",
        "detail": "driver 580.65.06 (CUDA 13.0), the image's CUDA 12.9",
    }
    bad = node_health.check_driver(text, "13.1", compat=False)
    assert (
        bad["status"] == "fail"
        and "driver 580.65.06 (CUDA 13.0), the image's CUDA 13.1: the driver is too old" in (bad["detail"])
    )
    assert node_health.check_driver(text, "13.1", compat=True)["status"] == "ok"
    assert node_health.check_driver(text, "", compat=False)["status"] == "skip"
    assert node_health.image_cuda({"CUDA_VERSION": "12.9.1.010"}) == "12.9"
    (tmp_path / "cuda").mkdir()
    (tmp_path / "cuda" / "version.json").write_text('{"cuda": {"name": "CUDA SDK", "version": "13.0.2"}}')
    assert node_health.image_cuda({}, str(tmp_path / "cuda")) == "13.0"
    assert node_health.image_cuda({}, str(tmp_path / "none")) == ""
    assert "driver" in node_facts.NODE_OWN_CHECKS
    # in the step: the image's CUDA from its environment, one line naming the node and the check
    fake_nvidia_smi(tmp_path / "bin", gpus=4)
    fake_dmesg(tmp_path / "bin", [])
    env_path = f"{tmp_path / 'bin'}:{os.environ['PATH']}"
    os.environ["CUDA_VERSION"] = "13.2.0"
    try:
        proc, rep = _run(tmp_path, "--gpus=4", "--gpu-model=GB200", path=env_path)
    finally:
        del os.environ["CUDA_VERSION"]
    assert proc.returncode == 1 and proc.stdout.startswith("bridge-launch health: node2 FAIL driver: driver 580.65.06")
