"""scripts/derive-upstream's rewriting of a recipe's [upstream_config] (the real-function part runs in
tests/e2e/test_real_bridge_e2e.py)."""

from __future__ import annotations

import importlib.machinery
import importlib.util

import pytest
import tomllib

from conftest import REPO

_loader = importlib.machinery.SourceFileLoader("derive_upstream", str(REPO / "scripts" / "derive-upstream"))
_spec = importlib.util.spec_from_loader("derive_upstream", _loader)
derive = importlib.util.module_from_spec(_spec)
_loader.exec_module(derive)

TEXT = """name = "r"
[config]
model.apply_rope_fusion = true  # the seed's
[upstream_config]
# model
model.apply_rope_fusion_x = false
model.init_method_std = 0.02  # from the card
model.cuda_graph_modules = ["attn"]
[upstream_env]
A = "1"
"""


@pytest.mark.parametrize(
    "key,value,expect",
    [
        ("model.init_method_std", 0.0173, 0.0173),
        ("model.apply_rope_fusion_x", True, True),
        ("model.cuda_graph_modules", ["attn", "mlp"], ["attn", "mlp"]),
    ],
)
def test_a_value_is_rewritten_in_place_keeping_its_comment_and_the_other_tables(key, value, expect):
    out = derive.rewrite(TEXT, key, derive.toml_value(value))
    data = tomllib.loads(out)
    section, leaf = key.split(".", 1)
    assert data["upstream_config"][section][leaf] == expect
    assert data["config"]["model"]["apply_rope_fusion"] is True  # the seed's table is not touched
    assert data["upstream_env"] == {"A": "1"}
    assert "# from the card" in out and "# the seed's" in out
    assert out.count("\n") == TEXT.count("\n")


def test_a_key_not_in_the_upstream_table_is_a_key_error():
    with pytest.raises(KeyError):
        derive.rewrite(TEXT, "model.apply_rope_fusion", "false")  # only in [config]


def test_null_has_no_toml_text():
    assert derive.toml_value(None) is None
    assert derive.toml_value("fused") == '"fused"' and derive.toml_value(1e-8) == "1e-08"


@pytest.mark.usefixtures("home")
def test_a_recipe_whose_function_bridge_launch_ships_is_built_through_its_module(monkeypatch, capsys):
    # what derive-upstream asks realcheck.py for (the real run is in tests/e2e/test_real_bridge_e2e.py):
    # the function with the module that defines it, and every [upstream_config] value compared
    from bridge_launch.spec import recipes

    rec = recipes.load("qwen35-vl-sft")
    asked = []

    def run(_env, _rev, _hf, jobs, _tmp):
        asked.extend(jobs)
        values = dict(rec["upstream_config"], **{"optimizer.lr": 1.0})
        return {j["id"]: {"ok": True, "values": values} for j in jobs}

    monkeypatch.setattr(derive.realbridge, "environment", lambda: {})
    monkeypatch.setattr(derive.realbridge, "hf_home", lambda root: str(root))
    monkeypatch.setattr(derive.realbridge, "run", run)
    assert derive.main(["qwen35-vl-sft"]) == 1
    assert asked == [{"id": "qwen35-vl-sft", "function": rec["upstream"], "module": rec["bridge_recipe_module"]}]
    assert asked[0]["module"].endswith("workloads/bridge_recipes/qwen35_vl_gb200.py")
    # the value is named in the file of the chain that sets it (qwen35-vl-sft extends qwen35-vl-sft-common)
    assert capsys.readouterr().out == "qwen35-vl-sft-common.toml: optimizer.lr = 0.0003, the function sets 1.0\n"
