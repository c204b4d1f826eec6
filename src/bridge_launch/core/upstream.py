"""The upstream revisions bridge-launch is checked against, and where the job's image keeps them.

Each Megatron-Bridge revision a recipe can pin, with the megatron-core commit its
`3rdparty/Megatron-LM` submodule pins and the interface of its `scripts/training/run_recipe.py`.
Full commits, once; messages and labels use `short()`. The job-side code (workloads/) cannot
import the package and names the same commits in its docstrings."""

from __future__ import annotations

from dataclasses import dataclass

BRIDGE_IN_CONTAINER = "/opt/Megatron-Bridge"  # the Megatron-Bridge checkout in NeMo's training images
RUN_RECIPE = f"{BRIDGE_IN_CONTAINER}/scripts/training/run_recipe.py"  # the recipes' default entry


@dataclass(frozen=True)
class Revision:
    bridge: str  # Megatron-Bridge commit
    core: str  # megatron-core: the commit of the bridge's 3rdparty/Megatron-LM submodule
    bridge_version: str  # megatron/bridge/package_info.py at that commit
    core_version: str  # megatron/core/package_info.py at the core commit
    # run_recipe.py's interface (workloads/recipe_build.py): "run_config" takes --mode and ends in
    # run_config(); "train_functions" has no --mode (inferred from the recipe name) and calls
    # TRAIN_FUNCTIONS[mode] directly
    run_recipe: str
    what: str  # which branch or pull request the commit is
    # where model.expert_tensor_parallel_size is unset: True where Megatron-Bridge sets it to 1 when EP > 1
    # (067f987 src/megatron/bridge/models/transformer_config.py:80-88, called from finalize at :177, :254, :311);
    # False where megatron-core's default applies, expert TP = TP (model_parallel_config.py:506-507)
    etp_one_with_ep: bool = False

    @property
    def takes_mode(self) -> bool:
        return self.run_recipe == "run_config"


BRIDGE_MAIN = "067f987df03b8355b03192d88d70f1709fedf51a"  # Megatron-Bridge main (the VL recipes' revision)
CORE_OF_MAIN = "2a75ac12c54ba6a42b34024756820bf819a2e25f"  # megatron-core: BRIDGE_MAIN's 3rdparty/Megatron-LM
CORE_OF_R050 = "458c8d0ecafdf6d9e36771600d62ade27f2a67b7"  # megatron-core: the PR #4871 heads' 3rdparty/Megatron-LM

REVISIONS: dict[str, Revision] = {
    r.bridge: r
    for r in (
        Revision(BRIDGE_MAIN, CORE_OF_MAIN, "0.7.0", "0.20.0", "run_config", "main", etp_one_with_ep=True),
        Revision(
            "98724493411ca166e09ea8bed8959c1129252703",
            CORE_OF_R050,
            "0.5.1",
            "0.18.2",
            "train_functions",
            "PR #4871 head for Nemotron 3 Nano (GB200 backport over r0.5.0)",
        ),
        Revision(
            "dd81e664e466a477cc723aed8cb8a80056631be3",
            CORE_OF_R050,
            "0.5.1",
            "0.18.2",
            "train_functions",
            "PR #4871 head for Qwen3.5 (GB200 backport over r0.5.0)",
        ),
    )
}


def short(commit: str) -> str:
    """The 7-character form git prints."""
    return commit[:7]


def revision(commit: str | None) -> Revision:
    """The pinned revision a commit (full or a unique prefix of 7+ characters) names; main for None."""
    if not commit:
        return REVISIONS[BRIDGE_MAIN]
    found = [r for full, r in REVISIONS.items() if len(commit) >= 7 and full.startswith(commit.lower())]
    if len(found) != 1:
        known = ", ".join(f"{short(r.bridge)} ({r.what})" for r in REVISIONS.values())
        raise KeyError(f"Megatron-Bridge {commit} is not a revision bridge-launch knows; known: {known}")
    return found[0]
