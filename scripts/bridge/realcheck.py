"""Jobs checked by the real Megatron-Bridge on CPU, one process per revision.

    <bridge venv>/bin/python scripts/bridge/realcheck.py REQUEST.json RESULTS.jsonl

REQUEST: {"bridge": Megatron-Bridge checkout, "core": Megatron-LM checkout (the commit the bridge
pins), "hf_home": an offline HF cache holding config.json files, "gpu": "NAME:MAJOR:MINOR",
"jobs": [...]}. A job is either {"id", "function": NAME} (the recipe function itself: what it sets)
or {"id", "argv": [...], "world_size": N} (the job's exact run_recipe.py arguments, through that
revision's own scripts/training/run_recipe.py main(), then runtime_config_update() and validate())
or {"id", "nemo_ci": [...], "world_size": N} (NeMo-CI's command line through that revision's
scripts/performance/run_recipe.py main(), which needs nemo_run for its argument parser, up to the
training call; then the same).
Either may name a "module": a recipe module bridge-launch ships (workloads/bridge_recipes/), whose
functions are first set on megatron.bridge.recipes by workloads/bridge_recipe_entry.py's register(),
the code the job's entry runs.
Writes one JSON line per job to RESULTS (Megatron's loggers own stdout): {"id", "ok", "stage",
"why", "values", "classes", "runtime"}; `classes` names the class of each section (model,
dataset, ...) the function builds; `values` is the flattened config as main() hands it to training (or
as the function returns it), `runtime` the values runtime_config_update() changed.

Runs under Python 3.12 with the bridge venv (scripts/bridge-env); never imports bridge_launch, only
its job-side recipe_build.py, the same code the canary's trainer check runs in the image.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "src" / "bridge_launch" / "workloads"))

import recipe_build  # noqa: E402 - after the path it lives on
import standins  # noqa: E402


def _function(name: str):
    import megatron.bridge.recipes as recipes

    fn = getattr(recipes, name, None)
    if fn is None:
        raise recipe_build.BuildError("recipe lookup", f"megatron.bridge.recipes has no {name}")
    try:
        return fn()
    except BaseException as exc:
        raise recipe_build.BuildError("recipe function", recipe_build.error_text(exc)) from exc


class _Trained(Exception):
    """Raised where NeMo-CI's main() would start training: the config it built is kept."""


def _nemo_ci(bridge: Path, argv: list, world_size: int):
    """The config NeMo-CI's entry, scripts/performance/run_recipe.py at this revision, hands to
    training for `argv`: its own main() (argument parser, library-recipe lookup, set_user_overrides,
    Hydra overrides: 987244934 and dd81e664e :217-236), its pretrain()/finetune() replaced by a catch."""
    import importlib.util

    import megatron.bridge.training.finetune as finetune_module
    import megatron.bridge.training.pretrain as pretrain_module

    perf = bridge / "scripts" / "performance"
    kept: dict = {}

    def catch(config, **_kw):
        kept["config"] = config
        raise _Trained

    saved = (pretrain_module.pretrain, finetune_module.finetune, sys.argv)
    sys.path.insert(0, str(perf))
    os.environ.update(WORLD_SIZE=str(world_size), RANK="0", LOCAL_RANK="0")
    try:
        pretrain_module.pretrain, finetune_module.finetune = catch, catch
        sys.argv = [str(perf / "run_recipe.py"), *argv]
        spec = importlib.util.spec_from_file_location("nemo_ci_run_recipe", perf / "run_recipe.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        try:
            mod.main()
        except _Trained:
            return kept["config"]
        except BaseException as exc:
            raise recipe_build.BuildError("NeMo-CI's run_recipe.py", recipe_build.error_text(exc)) from exc
        raise recipe_build.BuildError("NeMo-CI's run_recipe.py", "main() returned without starting training")
    finally:
        pretrain_module.pretrain, finetune_module.finetune, sys.argv = saved
        sys.path.remove(str(perf))
        for name in [n for n in sys.modules if n == "argument_parser" or n == "utils" or n.startswith("utils.")]:
            del sys.modules[name]  # the script's own modules: another revision's are its own


def one(job: dict, entry: str) -> dict:
    out: dict = {"id": job["id"], "ok": False}
    registered: list = []
    try:
        if job.get("module"):  # a function bridge-launch ships: registered as the job's entry does it
            registered = recipe_build.register_module(job["module"])
        if "function" in job:
            config = _function(job["function"])
            out.update(values=recipe_build.flatten(config), classes=recipe_build.classes(config))
        elif "nemo_ci" in job:
            config = _nemo_ci(Path(entry).parents[2], list(job["nemo_ci"]), int(job["world_size"]))
            before = recipe_build.flatten(config)
            out["values"] = before
            recipe_build.runtime_update(config)
            after = recipe_build.flatten(config)
            out["runtime"] = {k: v for k, v in after.items() if before.get(k, v) != v}
        else:
            mod = recipe_build.load_entry(entry)
            config, mode = recipe_build.build(mod, list(job["argv"]), int(job["world_size"]))
            before = recipe_build.flatten(config)
            out.update(values=before, mode=mode)
            recipe_build.runtime_update(config)
            after = recipe_build.flatten(config)
            out["runtime"] = {k: v for k, v in after.items() if before.get(k, v) != v}
        out["ok"] = True
    except recipe_build.BuildError as exc:
        out.update(stage=exc.stage, why=exc.why)
    except BaseException as exc:  # noqa: BLE001 - one job's failure is that job's result
        out.update(stage="check", why=recipe_build.error_text(exc), traceback=traceback.format_exc()[-3000:])
    finally:  # each job sees only the functions it registers itself
        if registered:
            import megatron.bridge.recipes as recipes

            for name in registered:
                delattr(recipes, name)
    return out


def main(argv: list) -> int:
    request = json.loads(Path(argv[0]).read_text())
    bridge, core = Path(request["bridge"]), Path(request["core"])
    sys.path[:0] = [str(bridge / "src"), str(core)]
    os.environ.update(HF_HOME=request["hf_home"], HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    standins.install()
    standins.fake_gpu(request.get("gpu") or "NVIDIA GB200:10:0")
    entry = str(bridge / "scripts" / "training" / "run_recipe.py")
    with open(argv[1], "w", encoding="utf-8") as out:
        for job in request["jobs"]:
            out.write(json.dumps(one(job, entry), default=str) + "\n")
            out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
