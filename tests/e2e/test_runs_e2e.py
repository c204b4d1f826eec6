import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import run_cli, write

FAST = ["smoke.busbw_sizes=[1024]", "smoke.busbw_iters=1", "train.train_iters=2"]


@pytest.mark.usefixtures("home")
@pytest.mark.slow
def test_two_concurrent_resumes_exactly_one_wins():
    sub = run_cli("submit", "smoke", "--follow", "-o", "json", *FAST, timeout=300)
    assert sub.code == 0, sub.err
    run_id = json.loads(sub.out.split("\n}\n")[0] + "\n}")["run_id"]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: run_cli("resume", run_id, "train.train_iters=3", "-o", "json"), range(2)))
    codes = sorted(r.code for r in results)
    assert codes == [0, 2], [(r.code, r.err) for r in results]
    loser = next(r for r in results if r.code == 2)
    assert "of this chain is" in loser.err
    winner = next(r for r in results if r.code == 0).json()
    chain = [r for r in run_cli("status", "--all", "-o", "json").json()]
    assert len(chain) == 2 and {c["chain"] for c in chain} == {run_id}
    launch_dir = Path(winner["run_dir"]) / "launch"
    assert sorted(p.name for p in launch_dir.iterdir()) == sorted(
        [
            f"{run_id}.json",
            f"{run_id}.sh",
            f"{run_id}.run.json",
            f"{winner['run_id']}.json",
            f"{winner['run_id']}.sh",
            f"{winner['run_id']}.run.json",
        ]
    )
    run_cli("cancel", winner["run_id"])


@pytest.mark.slow
def test_resume_refuses_a_new_data_parallel_size_for_energon(home):
    write(
        home / "recipes" / "smoke-energon.toml",
        """
        extends = "smoke"
        name = "smoke-energon"
        dataset_kind = "energon"
        [config]
        model.tensor_model_parallel_size = 1
    """,
    )
    sub = run_cli("submit", "smoke-energon", "--follow", "-o", "json", *FAST, timeout=300)
    assert sub.code == 0, sub.err
    run_id = json.loads(sub.out.split("\n}\n")[0] + "\n}")["run_id"]
    r = run_cli("resume", run_id, "model.tensor_model_parallel_size=2", "train.train_iters=3")
    assert r.code == 2 and "data-parallel size from 2 to 1" in r.err and "Energon" in r.err
    ok = run_cli("resume", run_id, "train.train_iters=4", "--follow", timeout=300)
    assert ok.code == 0, ok.err
