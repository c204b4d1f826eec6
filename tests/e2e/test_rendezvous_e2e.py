import os
import socket
import subprocess
import sys
import time

import pytest

from bridge_launch.backends import torchrun as torchrun_opts

_WORKER = "import os, sys; print('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'], flush=True)\n"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(tmp_path, port, conf):
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes=2",
            "--nproc-per-node=1",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{port}",
            f"--rdzv-id=t-{port}",
            f"--rdzv-conf={conf}",
            "--monitor-interval=0.5",
            str(script),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )


@pytest.mark.slow
@pytest.mark.parametrize("read_timeout,ok", [(3, False), (None, True)])
def test_a_node_that_starts_before_the_store_host_waits_read_timeout(tmp_path, read_timeout, ok):
    """torch 2.13 (c10d_rendezvous_backend._create_tcp_store): a node that is not the store host
    gives up connecting after read_timeout (default 60 s), whatever join_timeout says; with the
    two timeouts equal, as rendered, it waits for a host that starts later. is_host chooses the
    host explicitly, as the Slurm script does for node 0."""
    from types import SimpleNamespace

    port = _free_port()
    # the string the renderers write (torchrun_opts.rdzv_conf), for a profile's rdzv_join_timeout
    job = SimpleNamespace(profile={"rdzv_join_timeout": 90}, backend="slurm", container=None)
    conf = torchrun_opts.rdzv_conf(job, is_host="0")
    assert conf == "join_timeout=90,read_timeout=90,is_host=0"
    if not ok:  # torch's own split: join_timeout alone, read_timeout short
        conf = f"join_timeout=60,read_timeout={read_timeout},is_host=0"
    early = _torchrun(tmp_path, port, conf)
    if not ok:  # it gives up before any host comes: none is started (under load, torch's import alone
        # can outlast the 8 s below, and the early node would meet the host after all)
        out_early, _ = early.communicate(timeout=240)
        assert early.returncode != 0 and "RendezvousConnectionError" in out_early, out_early[-2000:]
        return
    time.sleep(8)  # the store host starts late (its image was slower to arrive)
    host = _torchrun(tmp_path, port, torchrun_opts.rdzv_conf(job, is_host="1"))
    try:
        out_early, _ = early.communicate(timeout=240)
        out_host, _ = host.communicate(timeout=240)
        assert early.returncode == 0 and host.returncode == 0, out_early[-2000:] + out_host[-2000:]
        assert "rank 1 of 2" in out_early + out_host and "rank 0 of 2" in out_early + out_host
    finally:
        for p in (early, host):
            if p.poll() is None:
                p.kill()
                p.wait()
