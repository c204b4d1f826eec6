import json
import os
import subprocess

import pytest

from bridge_launch import backends
from bridge_launch.plan import topology
from launch_jobs import _job, _profile


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize("nodes,per", [(2, 2), (8, 8), (18, 18), (36, 18), (20, 10), (19, None), (1, None)])
def test_lepton_segments_follow_the_slurm_rule(nodes, per):
    from leptonai.api.v1.types.job import LeptonJob

    job = _job("smoke", "lepton-gb200", nodes=nodes)
    body = json.loads(backends.render(job).text.split("\n", 2)[2])
    assert body["spec"].get("segment_config") == ({"count_per_segment": per} if per else None)
    if per:
        assert topology.segment_of(job) == per
        count = nodes // per  # what `lep job create --segment-count` accepts: 1 <= count < workers, divides them
        assert 1 <= count < nodes and nodes % count == 0
    LeptonJob(**body)  # the SDK's own model takes it


def test_lepton_segments_can_be_turned_off(home):
    _profile(home, "lep-noseg", 'extends = "lepton-gb200"\n[lepton]\nsegment = false\n')
    assert "segment_config" not in backends.render(_job("smoke", "lep-noseg", nodes=8)).text


@pytest.mark.parametrize(
    "env,expected",
    [
        # leptonai/scripts lepton_env_to_pytorch.sh since 55412730 (2025-07-21):
        # ${LEPTON_JOB_WORKER_PREFIX}-0.${LEPTON_SUBDOMAIN}
        ({"LEPTON_JOB_WORKER_PREFIX": "wp", "LEPTON_SUBDOMAIN": "sub", "LEPTON_JOB_WORKER_INDEX": "2"}, "2 wp-0.sub"),
        (
            {
                "LEPTON_JOB_WORKER_PREFIX": "wp",
                "LEPTON_SUBDOMAIN": "sub",
                "LEPTON_JOB_NAME": "j",
                "LEPTON_JOB_SERVICE_PREFIX": "svc",
                "LEPTON_WORKSPACE_ID": "ws1",
                "LEPTON_JOB_WORKER_INDEX": "0",
            },
            "0 wp-0.sub",
        ),  # the current names win
        # the names before it (f67164d2 and earlier), as the fallback
        ({"LEPTON_JOB_NAME": "myjob", "LEPTON_JOB_WORKER_INDEX": "3"}, "3 myjob-0.myjob-job-svc"),
        (
            {
                "LEPTON_JOB_NAME": "j",
                "LEPTON_JOB_SERVICE_PREFIX": "svc",
                "LEPTON_SUBDOMAIN": "sub",
                "LEPTON_JOB_WORKER_INDEX": "1",
            },
            "1 svc-0.sub",
        ),
        (
            {"LEPTON_JOB_NAME": "myjob", "LEPTON_WORKSPACE_ID": "ws1", "LEPTON_JOB_WORKER_INDEX": "1"},
            "1 myjob-0.myjob-job-svc.ws-ws1.svc.cluster.local",
        ),
        ({"LEPTON_JOB_WORKER_PREFIX": "wp", "LEPTON_JOB_NAME": "j", "LEPTON_JOB_WORKER_INDEX": "1"}, "1 j-0.j-job-svc"),
        ({}, "0 127.0.0.1"),  # a single worker outside Lepton
    ],
)
def test_lepton_rank_variables_map_to_torchrun(env, expected):
    """Lepton's worker variables become NODE_RANK / MASTER_ADDR without downloading anything."""
    from bridge_launch.backends.lepton import RANK_PRELUDE

    script = "\n".join(RANK_PRELUDE) + '\necho "$NODE_RANK $MASTER_ADDR"\n'
    out = subprocess.run(
        ["bash", "-c", script], env={"PATH": os.environ["PATH"], **env}, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == expected
