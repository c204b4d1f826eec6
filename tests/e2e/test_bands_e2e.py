"""Noise bands on the local two-node Slurm cluster: three repeated smoke runs (an experiment, the
seed varied per repeat: runs with one seed on CPU are bitwise identical) give bands that a fourth
run with another seed passes and a perturbed run (another learning rate) fails, through
`compare RUN EXPERIMENT --golden` and through the golden-values file `check --export-golden`
writes of the three."""

import json
import os
import subprocess
import time

import pytest

from conftest import FAST, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

if os.geteuid() != 0:
    pytest.skip("the local Slurm cluster needs root", allow_module_level=True)

SLURM_CONF = "/var/lib/bridge-launch-slurm/etc/slurm.conf"  # clusters/local-slurm.toml's slurm_conf

# small and quick: 20 steps of a tiny model, a checkpoint at 10 and 20 (the recipe's interval)
SMALL = [
    *FAST,
    "train.train_iters=20",
    "model.hidden_size=32",
    "dataset.seq_length=32",
    "model.vocab_size=64",
    "validation.eval_iters=1",
]


@pytest.fixture(scope="module")
def slurm(request):
    """The local cluster: used as it is when it answers, started (conftest's `cluster`) otherwise."""
    up = os.path.isfile(SLURM_CONF) and (
        subprocess.run(["sinfo", "-h"], env=dict(os.environ, SLURM_CONF=SLURM_CONF), capture_output=True).returncode
        == 0
    )
    return SLURM_CONF if up else request.getfixturevalue("cluster")


def _submit(*args) -> dict:
    r = run_cli("submit", "smoke", "-c", "local-slurm", "-o", "json", *SMALL, *args)
    assert r.code == 0, r.err
    return r.json()


def _wait(run_ids, timeout=900) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        runs = {r["run_id"]: r for r in run_cli("status", "--all", "-o", "json").json()}
        states = {i: runs[i]["state"] for i in run_ids}
        if all(s in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT") for s in states.values()):
            assert set(states.values()) == {"COMPLETED"}, states
            return
        time.sleep(1)
    raise AssertionError(f"not done in {timeout}s: {states}")


@pytest.mark.usefixtures("home", "slurm")
def test_three_repeated_smoke_runs_give_bands_a_fourth_passes_and_a_perturbed_one_fails(tmp_path):
    t0 = time.monotonic()
    exp = _submit("--sweep", "rng.seed=1,2,3", "--experiment", "repeats")
    refs = [r["run_id"] for r in exp["runs"]]
    fourth = _submit("rng.seed=4")["run_id"]
    perturbed = _submit("rng.seed=4", "optimizer.lr=1e-3")["run_id"]  # the recipe's is 3e-3
    _wait([*refs, fourth, perturbed])

    r = run_cli("compare", fourth, "repeats", "--golden", "-o", "json")
    assert r.code == 0, r.out + r.err
    c = r.json()["comparisons"][0]
    assert c["references"] == [f"rng.seed={i} [{run}]" for i, run in enumerate(refs, 1)]
    assert (c["num_samples"], c["steps"], c["outside"]) == (3, 20, 0), c
    r = run_cli("compare", perturbed, "repeats", "--golden")
    assert r.code == 1 and "OUTSIDE THE BAND" in r.out, r.out + r.err
    bad = run_cli("compare", perturbed, "repeats", "--golden", "-o", "json").json()["comparisons"][0]
    assert bad["outside"] > bad["allowed"] and bad["tolerance"] == c["tolerance"]

    # the bands as a golden-values file: check of the three writes it, compare reads it as B
    out = tmp_path / "bands.json"
    r = run_cli("check", "repeats", "--export-golden", out)
    assert r.code == 0 and "noise bands of 3 runs" in r.out, r.out + r.err
    loss = json.loads(out.read_text())["lm loss"]
    assert loss["recommended_tolerance"] == c["tolerance"] and loss["statistics"]["num_samples"] == 3
    last = loss["statistics"]["values"]["20"]["samples"]
    assert len(set(last)) == 3, last  # the seed varied per repeat: three different runs
    assert run_cli("compare", fourth, out).code == 0
    r = run_cli("compare", perturbed, out, "-o", "json")
    assert r.code == 1 and r.json()["comparisons"][0]["outside_steps"] == bad["outside_steps"]
    assert time.monotonic() - t0 < 240
