"""Inputs several CLI test modules give: the VL recipe's required inputs and shell-completion calls."""

from conftest import run_cli

VL_INPUTS = ("dataset.path=/lustre/clevr2", "checkpoint.pretrained_checkpoint=/lustre/ckpt")


def _complete(words: str, env=None):
    """What TAB offers after `words` (bash's protocol: COMP_WORDS / COMP_CWORD)."""
    parts = words.split(" ")
    full = {"_BRIDGE_LAUNCH_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(len(parts) - 1)}
    r = run_cli(env={**full, **(env or {})})
    assert r.code == 0, r.err
    return r.out.split()
