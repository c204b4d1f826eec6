import json
import os
import subprocess
import sys
import textwrap

import pytest

from bridge_launch.plan import estimate as plan
from plan_jobs import par

pytest.importorskip("megatron.core")


CHECK_SCRIPT = textwrap.dedent("""
    import json, sys, warnings
    warnings.filterwarnings("ignore")
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    dist.init_process_group("gloo")
    out = []
    for tp, cp, ep, etp, pp in json.loads(sys.argv[2]):
        ps.initialize_model_parallel(
            tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, context_parallel_size=cp,
            expert_model_parallel_size=ep, expert_tensor_parallel_size=etp, create_gloo_process_groups=False)
        ranks = dist.get_process_group_ranks
        mine = {
            "tp": ranks(ps.get_tensor_model_parallel_group()),
            "cp": ranks(ps.get_context_parallel_group()),
            "pp": ranks(ps.get_pipeline_model_parallel_group()),
            "dp": ranks(ps.get_data_parallel_group()),
            "dp_cp": ranks(ps.get_data_parallel_group(with_context_parallel=True)),
            "ep": ranks(ps.get_expert_model_parallel_group()),
            "etp": ranks(ps.get_expert_tensor_parallel_group()),
            "edp": ranks(ps.get_expert_data_parallel_group()),
        }
        every = [None] * dist.get_world_size()
        dist.all_gather_object(every, mine)
        out.append(every)
        ps.destroy_model_parallel()
    if dist.get_rank() == 0:
        with open(sys.argv[1], "w") as f:
            json.dump(out, f)
    dist.destroy_process_group()
""")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_groups_match_megatron_parallel_state_on_gloo(tmp_path):
    """8 CPU processes run megatron-core's initialize_model_parallel with gloo for several
    layouts; every group each rank belongs to must be one that plan() reports, and the union
    must be all of them."""
    layouts = [  # (TP, CP, EP, ETP, PP)
        (2, 2, 4, 1, 1),
        (2, 1, 2, 2, 2),
        (1, 2, 2, 1, 2),
    ]
    script, out = tmp_path / "groups.py", tmp_path / "groups.json"
    script.write_text(CHECK_SCRIPT)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "8",
            str(script),
            str(out),
            json.dumps(layouts),
        ],
        capture_output=True,
        text=True,
        timeout=220,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    measured = json.loads(out.read_text())
    for (tp, cp, ep, etp, pp), every in zip(layouts, measured, strict=False):
        ours, _ = plan.rank_groups(par(8, tp=tp, cp=cp, ep=ep, etp=etp, pp=pp))
        for kind, groups in ours.items():
            seen = sorted({tuple(rank[kind]) for rank in every})
            assert seen == sorted(map(tuple, groups)), (kind, (tp, cp, ep, etp, pp))
