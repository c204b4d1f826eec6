import pytest

from bridge_launch.runs.registry import Registry
from cli_inputs import _complete
from conftest import run_cli


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize(
    "shell,marker",
    [
        ("zsh", "#compdef bridge-launch"),
        ("fish", "complete --command bridge-launch"),
        ("bash", "complete -o default -F"),
    ],
)
def test_show_completion_prints_the_named_shells_script(shell, marker):
    r = run_cli("--show-completion", shell)
    assert r.code == 0 and marker in r.out, r.out[:300]
    assert "_BRIDGE_LAUNCH_COMPLETE" in r.out


@pytest.mark.usefixtures("home")
def test_completion_of_names_run_ids_and_override_keys():
    assert "qwen35-vl-sft" in _complete("bridge-launch submit qwen")
    assert "qwen35-vl-sft-common" not in _complete("bridge-launch submit qwen35-vl")  # abstract: never offered
    assert "qwen35-vl-sft-common" not in _complete("bridge-launch recipes show q")
    assert _complete("bridge-launch submit smoke --overlay val") == ["validation-run"]
    assert _complete("bridge-launch plan smoke --overlay nemo") == ["nemo-ci-convergence"]
    assert "model.hidden_size=" in _complete("bridge-launch submit smoke model.hidden")
    assert "model." in _complete("bridge-launch submit smoke mod")
    assert "smoke.busbw_sizes=" in _complete("bridge-launch submit smoke smoke.bus")  # the recipe's own keys
    assert _complete("bridge-launch submit smoke model.sequence_parallel=t") == ["model.sequence_parallel=true"]
    assert "~model.hidden_size" in _complete("bridge-launch submit smoke ~model.hidden_s")
    reg = Registry()
    run = reg.reserve("smoke", "local", "local")
    for cmd in ("status", "logs", "cancel", "resume"):
        assert _complete(f"bridge-launch {cmd} smo") == [run.run_id], cmd
    assert "train.train_iters=" in _complete(f"bridge-launch resume {run.run_id} train.train_it")
