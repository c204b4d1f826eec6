"""Lepton and DGX Cloud backends against a loopback contract server (not the live services)."""

import json
import os
import subprocess
import sys

import pytest

from bridge_launch import backends
from bridge_launch.resolve import resolver as resolve
from conftest import REPO, write
from contract_server import DGX_CLIENT, LEPTON_TOKEN, Server
from launch_jobs import _job as _recipe_job

HF_VALUE = "hf_LEAKCHECK_9f8e7d6c5b4a"


@pytest.fixture
def server():
    with Server() as s:
        yield s


@pytest.fixture
def env(home, server, tmp_path, monkeypatch):
    """User profiles pointing at the contract server; credentials in the environment."""
    monkeypatch.setenv("NEMORUN_HOME", str(tmp_path / "nemorun"))
    monkeypatch.setenv("HOME", str(tmp_path / "userhome"))
    monkeypatch.setenv("LEPTON_WORKSPACE_ID", "ws-test")
    monkeypatch.setenv("LEPTON_WORKSPACE_TOKEN", LEPTON_TOKEN)
    monkeypatch.setenv("LEPTON_WORKSPACE_URL", server.url + "/lepton")
    monkeypatch.setenv("DGXC_CLIENT_ID", DGX_CLIENT[0])
    monkeypatch.setenv("DGXC_CLIENT_SECRET", DGX_CLIENT[1])
    monkeypatch.setenv("HF_TOKEN", HF_VALUE)
    fast = "request_timeout = 1\nretries = 3\nretry_wait = 0\npoll_interval = 0\n"
    write(home / "clusters" / "lep.toml", f'name = "lep"\nextends = "lepton-gb200"\n[lepton]\n{fast}')
    write(
        home / "clusters" / "dgx.toml",
        f'name = "dgx"\nextends = "dgxc-gb200"\n[dgxcloud]\nbase_url = "{server.url}/dgx"\n{fast}',
    )
    return server.contract


def _job(cluster, nodes=2):

    return resolve.resolve("smoke", resolve.Options(cluster=cluster, nodes=nodes))


def _submit(cluster, nodes=2):
    from bridge_launch.runs import lifecycle as launch

    return launch.submit(_job(cluster, nodes))


def _refresh(run):
    from bridge_launch.runs import lifecycle as launch
    from bridge_launch.runs.registry import Registry

    return launch.refresh(Registry(), [run])[0]


def _rendered(job, run_id):
    text = __import__("bridge_launch.backends", fromlist=["render"]).render(job.with_run_id(run_id)).text
    return json.loads(text[text.index("\n{") :])


def _scan_for_secrets(contract):
    """Every byte under the state dir and NEMORUN_HOME, and every request but the token
    request, is free of the secret values; HF_TOKEN's value never leaves this process."""
    from bridge_launch.core import paths

    for root in (paths.state_dir(), os.environ["NEMORUN_HOME"]):
        for dirpath, _, names in os.walk(root):
            for n in names:
                data = open(os.path.join(dirpath, n), "rb").read()
                assert HF_VALUE.encode() not in data and DGX_CLIENT[1].encode() not in data, n
    for _method, path, _, headers, body in contract.requests:
        blob = json.dumps(body or {})
        assert HF_VALUE not in blob
        if path != "/dgx/token":
            assert DGX_CLIENT[1] not in blob and DGX_CLIENT[1] not in json.dumps(headers)


@pytest.mark.parametrize("cluster,kind", [("lep", "lepton"), ("dgx", "dgxcloud")])
def test_submit_running_completed_logs(env, cluster, kind, capfd):
    from bridge_launch.runs import lifecycle as launch
    from bridge_launch.runs.registry import Registry

    run = _submit(cluster)
    assert run.state == "PENDING" and run.job_ids
    assert not env.errors
    # the run's files reached the run dir on the platform storage through the data mover
    staged = env.staged[run.run_dir]
    assert {f"launch/{run.run_id}.json", "workload/smoke.py", "workload/trainer_protocol.py"} <= set(staged)
    # the training request is exactly the rendered one, lookups filled in
    if kind == "lepton":
        sent = env.calls("POST", r"^/lepton/jobs$")[-1][4]
        want = _rendered(_job(cluster), run.run_id)
        want["spec"]["affinity"] = {
            "allowed_dedicated_node_groups": ["ng-gb200-1"],
            "allowed_nodes_in_node_group": ["node-0", "node-1"],
        }
        from leptonai.api.v1.types.job import LeptonJob

        LeptonJob(**sent)  # the SDK's model accepts it
    else:
        sent = env.calls("POST", r"^/dgx/workloads/distributed$")[-1][4]
        want = dict(_rendered(_job(cluster), run.run_id), projectId="p-42", clusterId="c-7")
    if sent != want:
        import difflib

        print(
            "\n".join(
                difflib.unified_diff(
                    json.dumps(want, indent=1).splitlines(), json.dumps(sent, indent=1).splitlines(), lineterm=""
                )
            )
        )
    assert sent == want
    from bridge_launch.backends import render

    art = render(_job(cluster).with_run_id(run.run_id))
    assert staged[art.filename] == art.text  # the dry-run text, stored in the run dir
    refreshed = [_refresh(run) for _ in range(3)]
    assert [r.state for r in refreshed] == ["PENDING", "RUNNING", "COMPLETED"]
    if kind == "lepton":  # live metrics from the replica logs the platform serves
        info = refreshed[1].info
        assert (info["step"], info["train_iters"], info["loss"], info["grad_norm"]) == (5, 50, 1.234, 0.5)
        assert info["tflops_per_gpu"] == 512.0
    lines = list(
        launch.Tail(
            lambda: backends.backend(kind).log_files(Registry().get(run.run_id), launch.load_job(Registry(), run))
        ).lines()
    )
    if kind == "lepton":
        assert any("lm loss: 1.234" in ln for ln in lines) and len(lines) == 2  # one per replica
    else:
        assert "only inside the cluster" in lines[0] and f"{run.run_dir}/logs" in lines[0]
    _scan_for_secrets(env)
    out, err = capfd.readouterr()
    assert HF_VALUE not in out + err and DGX_CLIENT[1] not in out + err


def test_dgx_logs_from_reachable_storage(env, tmp_path):
    from bridge_launch.runs.registry import Registry

    root = tmp_path / "pvc"
    write(
        tmp_path / "config/bridge-launch/clusters/dgx2.toml",
        f'name = "dgx2"\nextends = "dgx"\n[dgxcloud]\nlocal_job_root = "{root}"\n',
    )
    from bridge_launch.spec import clusters

    clusters.catalog.cache_clear()
    run = _submit("dgx2", nodes=1)
    assert env.calls("POST", r"^/dgx/workloads/trainings$")
    from bridge_launch.workloads import trainer_protocol as P

    line = P.iteration_line(
        iteration=3,
        train_iters=50,
        consumed=24,
        elapsed_ms=900.0,
        lr=1e-4,
        global_batch=8,
        losses={"lm loss": 2.0},
        loss_scale=1.0,
        grad_norm=0.7,
        skipped=0,
        nan=0,
    )
    write(root / run.run_id / "logs" / f"{run.run_id}-node0.log", f"[default0]:{line}\n")
    from bridge_launch.runs.records import load_job

    files = backends.backend("dgxcloud").log_files(Registry().get(run.run_id), load_job(Registry(), run))
    assert [f.name for f in files] == [f"{run.run_id}-node0.log"]
    states = [_refresh(run) for _ in range(2)]  # live metrics from the PVC, where it is reachable
    assert states[-1].state == "RUNNING" and (states[-1].info["step"], states[-1].info["loss"]) == (3, 2.0)


@pytest.mark.parametrize("cluster", ["lep", "dgx"])
def test_failure(env, cluster):
    env.script = ["Running", "Failed"]
    run = _submit(cluster)
    assert [_refresh(run).state for _ in range(2)] == ["RUNNING", "FAILED"]
    assert "Failed" in _refresh(run).reason


@pytest.mark.parametrize(
    "cluster,method,path",
    [("lep", "DELETE", "^/lepton/jobs/{}$"), ("dgx", "POST", "^/dgx/workloads/distributed/{}/suspend$")],
)
def test_cancel(env, cluster, method, path):
    from bridge_launch.runs import lifecycle as launch
    from bridge_launch.runs.registry import Registry

    env.script = ["Running"]
    run = _submit(cluster)
    done = launch.cancel(Registry(), run)
    assert done.state == "CANCELLED"
    assert env.calls(method, path.format(run.job_ids[0]))


def test_resume_reuses_run_dir(env):
    from bridge_launch.runs import lifecycle as launch
    from bridge_launch.runs.registry import Registry

    env.script = ["Failed"]
    run = _submit("dgx")
    assert _refresh(run).state == "FAILED"
    env.script = ["Running"]
    new = launch.resume(Registry(), Registry().get(run.run_id))
    assert new.run_dir == run.run_dir and new.run_id != run.run_id
    body = env.calls("POST", r"^/dgx/workloads/distributed$")[-1][4]
    assert f"checkpoint.load={run.run_dir}/checkpoints" in body["spec"]["args"]
    assert not any("rm -rf" in (r[4] or {}).get("spec", {}).get("args", "") for r in env.calls("POST", "workspaces"))


def test_dgx_auth_failure_is_one_clear_error(env, monkeypatch):
    from bridge_launch.core.errors import LaunchError

    monkeypatch.setenv("DGXC_CLIENT_SECRET", "wrong-secret-value")
    with pytest.raises(
        LaunchError, match=r"rejected the client credentials from \$DGXC_CLIENT_ID/\$DGXC_CLIENT_SECRET \(HTTP 401\)"
    ) as exc:
        _submit("dgx")
    assert "wrong-secret-value" not in str(exc.value)
    assert len(env.calls("POST", "/dgx/token")) == 1  # a 401 is not retried


@pytest.mark.usefixtures("env")
def test_lepton_auth_failure(monkeypatch):
    from bridge_launch.core.errors import LaunchError

    monkeypatch.setenv("LEPTON_WORKSPACE_TOKEN", "bad-token")
    with pytest.raises(LaunchError, match=r"Lepton rejected the workspace credentials \(HTTP 401\)"):
        _submit("lep")


@pytest.mark.usefixtures("env")
def test_dgx_missing_credentials(monkeypatch):
    from bridge_launch.core.errors import UsageError

    monkeypatch.delenv("DGXC_CLIENT_SECRET")
    with pytest.raises(UsageError, match="set DGXC_CLIENT_ID and DGXC_CLIENT_SECRET"):
        _submit("dgx")


@pytest.mark.parametrize(
    "cluster,method,pattern", [("lep", "POST", r"^/lepton/jobs$"), ("dgx", "POST", r"^/dgx/workloads/distributed$")]
)
def test_5xx_is_retried(env, cluster, method, pattern):
    env.inject.append((method, pattern, 503))
    run = _submit(cluster)
    assert run.job_ids
    assert len(env.calls(method, pattern)) == (3 if cluster == "lep" else 2)  # lep: stage job, the 503, the job


@pytest.mark.parametrize(
    "cluster,pattern", [("lep", r"^/lepton/jobs/bl-[^/]+$"), ("dgx", r"^/dgx/workloads/distributed/")]
)
def test_timeout(env, cluster, pattern):
    from bridge_launch.core.errors import LaunchError

    run = _submit(cluster)
    for _ in range(3):
        env.inject.append(("GET", pattern, ("hang", 3)))
    with pytest.raises(LaunchError, match=r"(timed out|no answer within 1s).*gave up after 3 tries"):
        _refresh(run)


def test_dgx_payload_matches_nemo_run_but_for_the_pod_count(env):
    """nemo-run's DGXCloudExecutor.create_training_job, given our command/args/env through
    custom_spec, sends our body except for the pods: it asks for numWorkers = nodes (plus
    min/maxReplicas) and leaves the master to Run:ai's default, which with the master pod is one
    pod too many; the contract server refuses a request that leaves the master unstated."""
    from nemo_run.core.execution.dgxcloud import DGXCloudExecutor

    from bridge_launch.backends import dgxcloud

    job = _job("dgx").with_run_id("smoke-0101-abcd")
    ours = dgxcloud.request(job)
    spec = ours["spec"]
    ex = DGXCloudExecutor(
        base_url=job.scheduler["base_url"],
        kube_apiserver_url="",
        client_id="x",
        client_secret="y",
        project_name="bridge-launch",
        container_image=job.container,
        pvc_nemo_run_dir="/nemo-workspace",
        nodes=job.nodes,
        gpus_per_node=job.gpus_per_node,
        pvcs=spec["storage"]["pvc"],
        custom_spec={k: spec[k] for k in ("command", "args", "environmentVariables")},
    )
    from contract_server import DGX_TOKEN

    resp = ex.create_training_job(DGX_TOKEN, "p-42", "c-7", ours["name"])
    assert resp.status_code == 400 and "master pod is left to Run:ai's default" in resp.text
    theirs = env.calls("POST", r"^/dgx/workloads/distributed$")[-1][4]
    assert theirs["spec"]["numWorkers"] == job.nodes and "masterSpecSameAsWorker" not in theirs
    fixed = dict(
        theirs,
        projectId="p-42",
        clusterId="c-7",
        masterSpecSameAsWorker=True,
        spec={k: v for k, v in theirs["spec"].items() if k not in ("minReplicas", "maxReplicas")},
    )
    fixed["spec"]["numWorkers"] = job.nodes - 1
    assert fixed == dict(ours, projectId="p-42", clusterId="c-7")


@pytest.mark.parametrize("nodes", [1, 2, 8])
def test_dgx_workload_is_exactly_nodes_pods(env, nodes):
    """A master built from the worker spec plus nodes - 1 workers (trainings for one node): as many
    pods, and so torchruns, as --nnodes says."""
    run = _submit("dgx", nodes=nodes)
    assert not env.errors, env.errors
    assert env.pods[run.job_ids[0]] == nodes
    body = env.jobs[run.job_ids[0]][1]
    assert f"--nnodes={nodes}" in body["spec"]["args"]


@pytest.mark.usefixtures("home")
def test_render_is_light_and_masks():
    code = (
        "import sys; from bridge_launch import backends; from bridge_launch.resolve import resolver as resolve\n"
        "for c in ('lepton-gb200','dgxc-gb200'):\n"
        "    a = backends.render(resolve.resolve('smoke', resolve.Options(cluster=c, nodes=2)))\n"
        "    assert a.kind in ('lepton-job','dgxc-workload')\n"
        "bad = [m for m in ('nemo_run','leptonai','requests') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=dict(os.environ, HF_TOKEN=HF_VALUE)
    )
    assert proc.returncode == 0, proc.stderr
    from bridge_launch.backends import cloud

    assert cloud.mask({"envs": [{"name": "MY_TOKEN", "value": "x"}, {"name": "A", "value": "b"}]}, {"MY_TOKEN"}) == {
        "envs": [{"name": "MY_TOKEN", "value": "****"}, {"name": "A", "value": "b"}]
    }


def test_dry_run_cli_shows_request_without_secrets(cli):
    for c in ("lepton-gb200", "dgxc-gb200"):
        r = cli(
            "submit",
            "smoke",
            "--cluster",
            c,
            "--dry-run",
            "--output",
            "json",
            env={"HF_TOKEN": HF_VALUE, "DGXC_CLIENT_SECRET": DGX_CLIENT[1]},
        )
        assert r.code == 0, r.err
        assert HF_VALUE not in r.out + r.err and DGX_CLIENT[1] not in r.out + r.err
        art = r.json()["artifact"]
        body = json.loads(art["text"][art["text"].index("\n{") :])
        assert "HF_TOKEN" in json.dumps(body)  # referenced by name


def test_nemo_run_imports_with_installed_leptonai():
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import nemo_run, leptonai; from nemo_run.core.execution.lepton import LeptonExecutor; "
            "from nemo_run.core.execution.dgxcloud import DGXCloudExecutor; print(leptonai.__version__)",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    major, minor = (int(x) for x in proc.stdout.strip().split(".")[:2])
    assert (major, minor) < (0, 47)


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize("cluster", ["lepton-gb200", "dgxc-gb200"])
def test_cloud_scripts_get_the_same_flags(cluster):
    job = _recipe_job("smoke", cluster, nodes=2).with_run_id("r-9")
    from bridge_launch.backends import cloud, dgxcloud, lepton

    script = cloud.job_script(job, (lepton if cluster.startswith("lepton") else dgxcloud).RANK_PRELUDE)
    assert f'--log-dir={job.run_dir}/logs/torchrun/r-9/"node$NODE_RANK"' in script
    assert (
        '--rdzv-conf="join_timeout=1800,read_timeout=1800,is_host=$([ "$NODE_RANK" = 0 ] && echo 1 || echo 0)"'
        in script
    )
    assert "export TORCH_FR_BUFFER_SIZE=2000\nexport TORCH_NCCL_DUMP_ON_TIMEOUT=1\n" in script
    assert (
        f"export TORCH_NCCL_DEBUG_INFO_TEMP_FILE={job.run_dir}/nccl-trace/r-9/rank_\nmkdir -p "
        f"{job.run_dir}/nccl-trace/r-9\n" in script
    )
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize(
    "cluster,origin",
    [
        ("lepton-gb200", "Lepton secret 'HF_TOKEN' (secret_name_ref): read by the platform when the job starts"),
        ("dgxc-gb200", "Kubernetes secret hf-token, key HF_TOKEN: read by Run:ai when the workload starts"),
    ],
)
def test_the_cloud_dry_runs_say_where_secrets_come_from(cluster, origin):
    from conftest import run_cli

    r = run_cli("submit", "smoke", "-c", cluster, "--secret", "HF_TOKEN", "--dry-run", env={"HF_TOKEN": ""})
    assert r.code == 0, r.err
    line = next(ln for ln in r.out.splitlines() if ln.strip().startswith("HF_TOKEN "))
    assert line.split(None, 1)[1].startswith(origin) and "from your environment" not in r.out
    assert "submit would refuse" not in r.out + r.err


@pytest.mark.usefixtures("home")
def test_a_secret_named_on_the_command_line_must_be_set_on_the_local_backend():
    from conftest import run_cli

    env = {"MY_TOKEN": ""}
    r = run_cli("submit", "smoke", "--secret", "MY_TOKEN", "train.train_iters=1", env=env)
    assert r.code == 2 and "secret MY_TOKEN (--secret) is not set in your environment" in r.err, r.err
    assert len(r.err.strip().splitlines()) == 1
    assert run_cli("status", "-o", "json").json() == []
    r = run_cli("submit", "smoke", "--secret", "MY_TOKEN", "--dry-run", env=env)
    assert r.code == 0 and "  MY_TOKEN  from your environment at submit: not set\n" in r.out
    assert "secret MY_TOKEN (--secret) is not set in your environment: submit would refuse" in r.out + r.err


@pytest.mark.parametrize("cluster", ["lep", "dgx"])
def test_a_recipe_whose_function_bridge_launch_ships_stages_its_entry_and_module(env, cluster):
    from bridge_launch.backends.base import workload_files
    from bridge_launch.runs import lifecycle as launch

    job = resolve.resolve(
        "qwen35-vl-sft",
        resolve.Options(
            cluster=cluster,
            overrides=("dataset.path=/mnt/shared/clevr2", "checkpoint.pretrained_checkpoint=/mnt/shared/ckpt"),
            canary=False,
        ),
    )
    assert job.refusals == [], job.refusals
    run = launch.submit(job)
    staged = env.staged[run.run_dir]
    module = "workload/bridge_recipes/qwen35_vl_gb200.py"
    assert staged["workload/bridge_recipe_entry.py"] == workload_files()["workload/bridge_recipe_entry.py"]
    shipped = REPO / "src" / "bridge_launch" / "workloads" / "bridge_recipes" / "qwen35_vl_gb200.py"
    assert staged[module] == shipped.read_text()
    # the command the platform runs starts the entry with the module staged beside it, then run_recipe.py
    text = json.dumps(_rendered(job, run.run_id))
    assert (
        f"{run.run_dir}/workload/bridge_recipe_entry.py {run.run_dir}/{module} "
        "/opt/Megatron-Bridge/scripts/training/run_recipe.py --recipe "
        "qwen35_vl_35b_a3b_sft_long_context_32gpu_gb200_bf16_config"
    ) in text
