"""The resolver against the revision a recipe pins: its keys (the schema generated at that commit),
the classes its recipe function builds (`only_in`), its run_recipe.py interface and its labels."""

from __future__ import annotations

import pytest

from bridge_launch.core import upstream
from conftest import run_cli, write

pytestmark = pytest.mark.usefixtures("home")


@pytest.mark.parametrize(
    "recipe,cluster,override,fragment",
    [
        # r0.5.0's GPTDatasetConfig has no Energon path: an unknown key at that revision
        (
            "nemotron-3-nano-pretrain",
            "gb200-8",
            "dataset.path=/x",
            "unknown config key 'dataset.path'; did you mean 'dataset.data_path'",
        ),
        (
            "qwen35-9b-pretrain",
            "gb200-8",
            "dataset.task_encoder.min_pixels=100",
            "unknown config key 'dataset.task_encoder.min_pixels'",
        ),
        # a key of the schema's model section that only the VL providers have
        (
            "qwen35-9b-pretrain",
            "gb200-8",
            "model.vision_cuda_graph_impl=none",
            "qwen35-9b-pretrain's model class is GPTModelProvider (Megatron-Bridge dd81e66), which has no "
            "vision_cuda_graph_impl; only Qwen3VLMoEModelProvider, Qwen3VLModelProvider have it; did you mean "
            "'model.cuda_graph_impl'",
        ),
        (
            "qwen35-vl-sft",
            "gb200-32",
            "dataset.data_path=/z",
            "qwen35-vl-sft's dataset class is EnergonDatasetConfig (Megatron-Bridge 067f987), which has no "
            "data_path; only GPTDatasetConfig, GPTFIMDatasetConfig, MockGPTDatasetConfig have it; did you mean "
            "'dataset.path'",
        ),
        # main's name for the field is not the r0.5.0 pin's
        (
            "nemotron-3-nano-pretrain",
            "gb200-8",
            "dataset.seq_length=4096",
            "unknown config key 'dataset.seq_length'; did you mean 'dataset.sequence_length'",
        ),
    ],
)
def test_keys_the_pinned_revision_would_refuse_are_refused_before_submit(recipe, cluster, override, fragment):
    r = run_cli("submit", recipe, "-c", cluster, "--dry-run", override)
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert f"override '{override}': " in r.err and fragment in r.err, r.err
    assert "Traceback" not in r.err


def test_a_key_of_the_recipes_own_class_passes():
    r = run_cli(
        "submit",
        "qwen35-vl-sft",
        "-c",
        "gb200-32",
        "--dry-run",
        "dataset.path=/x",
        "checkpoint.pretrained_checkpoint=/y",
    )
    assert r.code == 0, r.err
    r = run_cli("submit", "qwen35-9b-pretrain", "-c", "gb200-8", "--dry-run", "model.cuda_graph_impl=none")
    assert r.code == 0, r.err


def test_recipes_show_names_both_pinned_commits_in_full():
    shown = run_cli("recipes", "show", "nemotron-3-nano-pretrain", "-o", "json").json()
    rev = upstream.revision(shown["bridge_commit"])
    assert shown["bridge_commit"] == "98724493411ca166e09ea8bed8959c1129252703"
    assert shown["core_commit"] == rev.core == "458c8d0ecafdf6d9e36771600d62ade27f2a67b7"
    vl = run_cli("recipes", "show", "qwen35-vl-sft", "-o", "json").json()
    assert (vl["bridge_commit"], vl["core_commit"]) == (upstream.BRIDGE_MAIN, upstream.CORE_OF_MAIN)
    text = run_cli("recipes", "show", "qwen35-9b-pretrain").out
    assert "bridge_commit   dd81e664e466a477cc723aed8cb8a80056631be3" in text
    assert "config (upstream@dd81e66: what the recipe function sets" in text


def test_the_dry_run_names_the_revision_and_its_run_recipe_interface():
    nano = run_cli("submit", "nemotron-3-nano-pretrain", "-c", "gb200-8", "--dry-run").out
    assert "(Megatron-Bridge @ 9872449: --recipe nemotron_3_nano_gb200_pretrain_config)" in nano
    assert "--mode" not in nano  # 987244934's run_recipe.py infers the mode from the recipe name
    assert "upstream@9872449" in nano
    vl = run_cli("submit", "qwen35-vl-sft", "-c", "gb200-32", "--dry-run").out
    assert "--recipe qwen35_vl_35b_a3b_sft_long_context_32gpu_gb200_bf16_config --mode sft)" in vl


@pytest.mark.usefixtures("home")
def test_the_vl_dry_run_says_where_the_job_differs_from_the_seeds_run():
    """The recipe's seed_differences: a warning each while the job keeps the recipe's value, none
    where the command line sets the key (whatever it sets: a refused value is refused by its rule)."""
    base = ("submit", "qwen35-vl-sft", "-c", "gb200-32", "--dry-run", "-o", "json", "dataset.path=/lustre/fsw/d")
    warnings = run_cli(*base).json()["warnings"]
    mtp = [w for w in warnings if w.startswith("model.mtp_num_layers=0 differs from the seed's run: MTP is off")]
    assert len(mtp) == 1 and "training/config.py:1334-1335" in mtp[0], warnings
    assert any(
        w.startswith("model.recompute_granularity=selective differs from the seed's run: the vision tower is")
        for w in warnings
    ), warnings
    warnings = run_cli(*base, "model.recompute_granularity=full").json()["warnings"]
    assert not any("recompute_granularity" in w and "seed" in w for w in warnings)
    assert any("MTP is off" in w for w in warnings)


@pytest.mark.parametrize(
    "line,fragment",
    [
        (
            'bridge_commit = "0123456789"',
            "mine.toml:5: recipe 'mine': Megatron-Bridge 0123456789 is not a revision bridge-launch knows; known: "
            "067f987 (main), 9872449 (PR #4871 head for Nemotron 3 Nano",
        ),
        (
            'classes = { model = "NoSuchProvider" }',
            "recipe 'mine': 'NoSuchProvider' is not a model class of Megatron-Bridge 067f987; valid: GPTModelProvider",
        ),
    ],
)
def test_a_bad_pin_in_a_user_recipe_is_one_line(home, line, fragment):
    write(
        home / "recipes" / "mine.toml",
        f'name = "mine"\nupstream = "x_pretrain_config"\nmode = "pretrain"\ncontainer = "c"\n{line}\n',
    )
    r = run_cli("submit", "mine", "--dry-run")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and fragment in r.err, r.err
