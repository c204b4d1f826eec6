"""Checks of a finished local-slurm job that the slow Slurm and container tests share."""

import os
import re
import subprocess
from pathlib import Path


def check_torchrun_artifacts(run_dir, job_id, conf, nodes=("node1", "node2")):
    """What the rendered script adds around torchrun (backends/torchrun_opts.py), as it ran:
    per-rank files under <run dir>/logs/torchrun/<job>/node<N> (torchrun's --log-dir with --tee 3),
    the flight-recorder dump dir, the rendezvous on the first node's address resolved once in the
    batch script, and no per-rank deprecation note for the flight-recorder variables."""
    run_dir = Path(run_dir)
    for i, host in enumerate(nodes):
        files = sorted((run_dir / "logs" / "torchrun" / job_id / f"node{i}").glob(f"{job_id}_*/attempt_0/*/stdout.log"))
        assert len(files) == 2, files  # one per local rank
        assert f"host={host}" in files[0].read_text()
    assert (run_dir / "nccl-trace" / job_id).is_dir()
    out = (run_dir / "logs" / f"sbatch-{job_id}.out").read_text()
    addr = re.search(
        r"NodeAddr=(\S+)",
        subprocess.run(
            ["scontrol", "show", "node", nodes[0]],
            capture_output=True,
            text=True,
            env=dict(os.environ, SLURM_CONF=conf),
        ).stdout,
    ).group(1)
    m = re.search(r"bridge-launch: rendezvous on (\S+):(\d+) \((\S+) hosts the store\)", out)
    assert m and m.group(1) == addr and m.group(3) == nodes[0], out[-2000:]
    assert 20000 <= int(m.group(2)) < 32768
    node_logs = "".join(p.read_text() for p in (run_dir / "logs").glob(f"{job_id}-*.log"))
    assert "is deprecated" not in node_logs, node_logs[-2000:]
