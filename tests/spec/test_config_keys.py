import pytest

from bridge_launch.cli import commands
from bridge_launch.resolve import resolver as resolve
from fuzz_values import KEYS, _fitting, _quiet

pytest.importorskip("megatron.core")


INT_KEYS = [k for k in KEYS if "1" in _fitting(k)]


EXTREMES = ["0", "-1", "99999999999", "1" + "0" * 40]


@pytest.mark.usefixtures("home")
@pytest.mark.timeout(120)
@pytest.mark.parametrize("recipe,cluster", [("qwen35-vl-sft", "gb200-32"), ("nemotron-3-nano-pretrain", "gb200-8")])
def test_every_integer_key_at_its_extremes(recipe, cluster):
    """Each integer key at 0, -1 and huge values, alone: no exception, no unbounded work (the
    fuzz once found model.mtp_num_layers=99999999999 building a list of that many layers)."""
    for key in INT_KEYS:
        for value in EXTREMES:
            ovs = [f"{key}={value}", "dataset.path=/lustre/fsw/d", "checkpoint.pretrained_checkpoint=/lustre/fsw/c"]
            ovs = ovs if recipe.startswith("qwen35-vl") else ovs[:1]
            opts = resolve.Options(cluster=cluster, overrides=tuple(ovs))
            for code in (
                _quiet(commands.submit, recipe, opts, dry_run=True, follow=False, output="json"),
                _quiet(
                    commands.plan,
                    recipe,
                    ovs,
                    cluster=cluster,
                    overlays=[],
                    nodes=None,
                    tflops=None,
                    tokens=None,
                    output="text",
                ),
            ):
                assert code in (0, 2), (key, value)
