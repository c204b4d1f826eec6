"""The upstream revisions bridge-launch is checked against, and where the job's image keeps them.

Full commits, once; messages and citations use `short()`. The job-side code (workloads/) cannot
import the package and names the same commits in its docstrings."""

from __future__ import annotations

BRIDGE_MAIN = "067f987df03b8355b03192d88d70f1709fedf51a"  # Megatron-Bridge (main, the VL recipes' revision)
CORE_OF_MAIN = "2a75ac12c54ba6a42b34024756820bf819a2e25f"  # megatron-core: BRIDGE_MAIN's 3rdparty/Megatron-LM
BRIDGE_IN_CONTAINER = "/opt/Megatron-Bridge"  # the Megatron-Bridge checkout in NeMo's training images
RUN_RECIPE = f"{BRIDGE_IN_CONTAINER}/scripts/training/run_recipe.py"  # the recipes' default entry


def short(commit: str) -> str:
    """The 7-character form git prints."""
    return commit[:7]
