#!/usr/bin/env python3
"""bridge-launch canary: what no local check can see, checked on the cluster, in the job's own image,
with the job's mounts and environment, before the job starts.

bridge-launch stages this directory into the run dir with the smoke workload and starts

    torchrun ... workload/cluster_checks.py canary/<run id>.spec.json

on one or two nodes of the job's partition (Slurm: a short job the real job depends on with
afterok), or on every node as the first step of the job itself (Lepton, DGX Cloud). The spec (JSON,
written at submit, no secrets) holds the job's recipe, overrides, paths and the expected bus
bandwidth. Checks, in report order:

- image: the image was pulled and started on every node (on Slurm, a pull failure is read from
  pyxis' and enroot's lines by the launcher, since nothing in the image runs);
- trainer: the image's Megatron-Bridge builds the job's recipe with the job's exact overrides along
  run_recipe.py's own path (its main(): recipe lookup by name, Hydra override application, the
  runner's syncs) up to run_config, where instead of training it runs runtime_config_update, which
  ends in ConfigContainer.validate() (Megatron-Bridge 067f987 scripts/training/run_recipe.py:455-530,
  recipe_runner.py:498-545, src/megatron/bridge/training/config.py:1992-2032), for the job's world
  size, in a subprocess, no GPU work; it reports the image's megatron.bridge and megatron.core
  versions next to the ones bridge-launch's schema/ was generated from. For a recipe whose function
  bridge-launch ships (the spec's recipe_module), the module is first registered in
  megatron.bridge.recipes as the job's entry does it (bridge_recipe_entry.py);
- data: dataset.path exists in the container; an Energon dataset is opened with the image's own
  megatron-energon and its dataset.yaml's sample type, and one sample is read (a subprocess: the
  trainer check's, after it, when both run, so the image's libraries are imported once);
- checkpoint: checkpoint.pretrained_checkpoint as Bridge opens it (trainer_protocol.py): its tracker,
  the iteration directory it names, the format files and metadata.json;
- hf_cache: the recipe's HuggingFace model and processor revisions are in the offline cache the
  profile sets (HF_HOME, HF_HUB_OFFLINE=1), as huggingface_hub's try_to_load_from_cache finds files;
- fabric: IMEX channels visible in the container and the NVLink fabric state (nvidia-smi) on every
  node, judged when the profile expects multi-node NVLink;
- network: an all-reduce bus-bandwidth sweep across all canary ranks (the smoke workload's,
  fabric_checks.py), judged against the profile's expected figure for its GPU type.

Rank 0 writes the report (JSON, rewritten after every check) to the spec's `report` path and prints
one line per check and a verdict line; it exits 1 when any check fails. Standard library and torch
only, plus what it imports lazily from the image (megatron.bridge, megatron.energon); never
bridge_launch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import traceback

import image_revision
import recipe_build
import trainer_protocol as P

CHECKS = ("image", "trainer", "data", "checkpoint", "hf_cache", "fabric", "network")
PREFIX = "bridge-launch canary"
RESULT_MARK = "@@bridge-launch-canary-result "
# huggingface_hub 2.4.0 file_download.py:747-755 (repo_folder_name: "models--org--name"),
# :1523-1600 (try_to_load_from_cache: refs/<revision> holds the commit, snapshots/<commit>/<file>);
# constants.py:160-185 (HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, else
# $XDG_CACHE_HOME/huggingface/hub).
# The files transformers reads first (transformers utils/__init__.py: CONFIG_NAME, and for a
# processor FEATURE_EXTRACTOR_NAME or PROCESSOR_NAME).
HF_MODEL_FILES = ("config.json",)
HF_PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")
_TRUE = ("1", "true", "yes", "on")


def _result(check: str, status: str, detail: str, **data) -> dict:
    out = {"check": check, "status": status, "detail": detail}
    if data:
        out["data"] = data
    return out


def _error(exc: BaseException, limit: int = 400) -> str:
    """One readable line for an exception: its type and the first lines of its message."""
    text = " ".join(line.strip() for line in str(exc).strip().splitlines()[:3] if line.strip())
    text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _size(n: int) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


# --------------------------------------------------------------------------------------------
# image
# --------------------------------------------------------------------------------------------
def check_image(spec: dict, hosts: list) -> dict:
    import torch

    nodes = sorted(set(hosts))
    return _result(
        "image",
        "ok",
        f"{spec.get('container') or 'no container (bare processes)'} started on "
        f"{len(nodes)} node(s) ({', '.join(nodes)}): python {sys.version.split()[0]}, torch {torch.__version__}",
        container=spec.get("container"),
        hosts=nodes,
        python=sys.executable,
        torch=torch.__version__,
    )


# --------------------------------------------------------------------------------------------
# trainer: run_recipe.py's own path, up to run_config, in a subprocess
# --------------------------------------------------------------------------------------------
def image_versions() -> dict:
    """The image's megatron.bridge and megatron.core: version, file, and commit when a checkout."""
    out = {}
    for key, name in (("megatron_bridge", "megatron.bridge"), ("megatron_core", "megatron.core")):
        try:
            mod = __import__(name, fromlist=["__version__"])
        except Exception as exc:  # noqa: BLE001 - any import failure is the finding
            out[key] = {"error": _error(exc)}
            continue
        info = {"version": getattr(mod, "__version__", None), "file": getattr(mod, "__file__", None)}
        commit = image_revision.git_commit(info["file"]) if info["file"] else None
        if commit:
            info["commit"] = commit
        out[key] = info
    return out


def versions_line(found: dict, schema: dict) -> tuple[str, bool]:
    """'image: megatron-bridge X, megatron-core Y; schema/ from megatron-bridge X' (commit), ...' and
    whether the versions agree."""

    def one(label, key):
        info = found.get(key) or {}
        if "error" in info:
            return f"{label} not importable ({info['error']})"
        text = f"{label} {info.get('version') or '?'}"
        return text + (f" @ {info['commit'][:9]}" if info.get("commit") else "")

    image = f"{one('megatron-bridge', 'megatron_bridge')}, {one('megatron-core', 'megatron_core')}"
    ours = (
        f"megatron-bridge {schema.get('megatron_bridge_version', '?')} "
        f"({str(schema.get('megatron_bridge', '?'))[:9]}), "
        f"megatron-core {schema.get('megatron_core_version', '?')} ({str(schema.get('megatron_core', '?'))[:9]})"
    )
    # the same version, and the same commit where the image's is known (a checkout: image_revision.py)
    same = all(
        (found.get(k) or {}).get("version", "").split("+")[0] == schema.get(f"{k}_version")
        and image_revision.compare(found.get(k) or {}, str(schema.get(k) or "")) != "different"
        for k in ("megatron_bridge", "megatron_core")
    )
    return f"image: {image}; schema/ from {ours}", same


def _trainer_in_process(spec: dict) -> dict:
    """Runs inside the subprocess: the entry script's main() stopped where training would start
    (recipe_build.py, either run_recipe.py interface), then runtime_config_update() and validate()."""
    world = int(spec["world_size"])
    entry, recipe, mode, args = spec["entry"], spec["recipe"], spec["mode"], list(spec["args"])
    # the job's exact arguments after the script (job/derived.py entry_argv); older specs: 067f987's form
    argv = list(spec.get("argv") or ["--recipe", recipe, "--mode", mode, *args])
    versions = image_versions()
    vline, same = versions_line(versions, spec.get("schema_source") or {})
    data = {"versions": versions, "versions_match": same, "entry": entry, "recipe": recipe, "mode": mode}
    if not os.path.isfile(entry):
        return _result("trainer", "fail", f"the entry script {entry} is not in the image; {vline}", **data)
    if recipe_build.static_interface(entry) is None and os.path.basename(entry) != "run_recipe.py":
        # a script of the user's own (a run_recipe.py of another shape goes on, and fails as such)
        return _result(
            "trainer",
            "skip",
            f"{entry} is not Megatron-Bridge's run_recipe.py (its main() calls neither run_config() nor "
            "TRAIN_FUNCTIONS[...]; read, not run): the recipe build applies only to that script",
            **data,
        )
    if "error" in (versions.get("megatron_bridge") or {}) and not spec.get("container"):
        return _result(
            "trainer",
            "skip",
            f"megatron-bridge is not importable by the job's Python (a bare-process profile, no image to "
            f"check); {vline}",
            **data,
        )
    try:
        if spec.get("recipe_module"):  # bridge-launch's own recipe function, as the job's entry adds it
            data["recipe_module"] = spec["recipe_module"]
            recipe_build.register_module(spec["recipe_module"])
        mod = recipe_build.load_entry(entry)
        data["interface"] = recipe_build.interface(mod)
        config, built_mode = recipe_build.build(mod, argv, world)
        recipe_build.runtime_update(config)
    except recipe_build.BuildError as exc:
        if exc.stage == "interface":
            why = (
                f"{entry} has no main() calling run_config() or TRAIN_FUNCTIONS (the run_recipe.py interfaces "
                f"of Megatron-Bridge 067f987 and 987244934 this check follows)"
            )
            return _result("trainer", "fail", f"{why}; {vline}", **data)
        if exc.__cause__ is not None:
            data["traceback"] = "".join(traceback.format_exception(exc.__cause__))[-4000:]
        return _result("trainer", "fail", f"{exc.stage} failed: {exc.why}; {vline}", **data)
    data.update(mode=built_mode, data_parallel_size=getattr(config, "data_parallel_size", None))
    return _result(
        "trainer",
        "ok",
        f"recipe {recipe} built with {len(args)} overrides and validated for "
        f"{world} ranks (data-parallel size {data['data_parallel_size']}); {vline}"
        + ("" if same else " (they differ: the overrides were checked by the image's own code)"),
        **data,
    )


def _trainer_without_running(spec: dict) -> dict | None:
    """The trainer check's result where it needs no process of its own (None: it does)."""
    if spec.get("workload") != "megatron-bridge":
        return _result("trainer", "skip", f"the {spec.get('workload')} workload runs no Megatron-Bridge recipe")
    return None


def check_trainer(spec: dict, spec_path: str) -> dict:
    return _trainer_without_running(spec) or _subprocess_check("trainer", spec, spec_path)


# --------------------------------------------------------------------------------------------
# data: the image's Energon opens the dataset and reads one sample, in a subprocess
# --------------------------------------------------------------------------------------------
def _describe(sample) -> dict:
    out = {"type": type(sample).__name__, "key": getattr(sample, "__key__", None)}
    if dataclasses.is_dataclass(sample):
        for f in dataclasses.fields(sample):
            if f.name.startswith("__"):
                continue
            v = getattr(sample, f.name, None)
            if v is None:
                continue
            if hasattr(v, "shape"):
                out[f.name] = f"tensor {list(v.shape)}"
            elif isinstance(v, (list, tuple)):
                out[f.name] = f"{len(v)} item(s)"
            elif isinstance(v, (str, bytes)):
                out[f.name] = f"{len(v)} {'characters' if isinstance(v, str) else 'bytes'}"
    return out


def _data_in_process(spec: dict) -> dict:
    d = spec.get("dataset") or {}
    path = d["path"]
    try:
        import megatron.energon as energon
    except Exception as exc:  # noqa: BLE001 - the finding
        return _result("data", "fail", f"the image has no megatron.energon to open {path} with ({_error(exc)})")
    try:
        from importlib.metadata import version

        ver = version("megatron-energon")
    except Exception:  # noqa: BLE001 - informational
        ver = getattr(energon, "__version__", "?")
    import logging
    import warnings

    logging.getLogger("megatron.energon").setLevel(logging.ERROR)
    split = d.get("split") or "train"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            wc = energon.WorkerConfig(rank=0, world_size=1, num_workers=0)
            ds = energon.get_val_dataset(path, split_part=split, worker_config=wc, batch_size=None)
            sample = next(iter(energon.get_loader(ds)))
    except StopIteration:
        return _result("data", "fail", f"{path}: the {split} split has no sample (Energon {ver})", energon=ver)
    except BaseException as exc:  # noqa: BLE001 - reported
        return _result(
            "data",
            "fail",
            f"opening {path} with the image's Energon {ver} and reading a {split} sample failed: {_error(exc)}",
            energon=ver,
            traceback=traceback.format_exc()[-4000:],
        )
    desc = _describe(sample)
    return _result(
        "data",
        "ok",
        f"{path} opened with the image's Energon {ver}; one {split} sample read ({desc['type']} {desc.get('key')})",
        energon=ver,
        sample=desc,
    )


def _data_without_opening(spec: dict) -> dict | None:
    """The data check's result where it needs no process of its own to open the dataset (None: it does)."""
    d = spec.get("dataset") or {}
    path = d.get("path")
    if not path:
        return _result("data", "skip", "dataset.path is not set")
    if not os.path.exists(path):
        return _result("data", "fail", f"dataset.path {path} does not exist in the container{_mounts_hint(spec)}")
    if not os.access(path, os.R_OK | (os.X_OK if os.path.isdir(path) else 0)):
        return _result("data", "fail", f"dataset.path {path} is not readable in the container (uid {os.getuid()})")
    if d.get("kind") != "energon":
        return _result("data", "ok", f"dataset.path {path} exists and is readable (not an Energon dataset: not opened)")
    if not os.path.isdir(os.path.join(path, ".nv-meta")):
        return _result(
            "data",
            "fail",
            f"dataset.path {path} is not a prepared Energon dataset (no .nv-meta/); "
            "prepare it with 'bridge-launch data prepare'",
        )
    return None


def check_data(spec: dict, spec_path: str) -> dict:
    return _data_without_opening(spec) or _subprocess_check("data", spec, spec_path)


def _mounts_hint(spec: dict) -> str:
    mounts = spec.get("mounts") or []
    return f" (mounts: {', '.join(mounts)})" if mounts else ""


# --------------------------------------------------------------------------------------------
# checkpoint: checkpoint.pretrained_checkpoint as Bridge opens it
# --------------------------------------------------------------------------------------------
def _is_hf_dir(path: str) -> bool:
    if not os.path.isfile(os.path.join(path, P.HF_CONFIG)):
        return False
    if any(os.path.exists(os.path.join(path, f)) for f in P.HF_WEIGHT_FILES):
        return True
    return any(glob.glob(os.path.join(glob.escape(path), g)) for g in P.HF_WEIGHT_GLOBS)


def check_checkpoint(spec: dict) -> dict:
    path = spec.get("pretrained_checkpoint")
    if not path:
        return _result("checkpoint", "skip", "checkpoint.pretrained_checkpoint is not set")
    if not os.path.exists(path):
        return _result(
            "checkpoint",
            "fail",
            f"checkpoint.pretrained_checkpoint {path} does not exist in the container{_mounts_hint(spec)}",
        )
    if not os.path.isdir(path):
        return _result("checkpoint", "fail", f"checkpoint.pretrained_checkpoint {path} is not a directory")
    if any(os.path.exists(os.path.join(path, m)) for m in P.ITERATION_DIR_MARKERS):
        it_dir, where = path, "an iteration directory (loaded as it is)"
    elif _is_hf_dir(path):
        return _result(
            "checkpoint",
            "ok",
            f"{path} is a HuggingFace model directory (config.json and weights): Bridge loads it in hf format",
            format="hf",
        )
    else:
        state, txt = os.path.join(path, P.TRACKER_STATE), os.path.join(path, P.TRACKER)
        release = False
        if os.path.isfile(state):
            import torch

            try:
                step = torch.load(state, map_location="cpu", weights_only=True)["step"]
                it = int(step.item() if hasattr(step, "item") else step)
            except Exception as exc:  # noqa: BLE001 - Bridge: "Unable to load train state file"
                return _result("checkpoint", "fail", f"{state} cannot be read as Bridge reads it: {_error(exc)}")
            tracker = f"{P.TRACKER_STATE} (step {it})"
        elif os.path.isfile(txt):
            text = open(txt, encoding="utf-8", errors="replace").read().strip()
            try:
                it = int(text)
            except ValueError:
                it, release = 0, text == "release"
                if not release:
                    return _result(
                        "checkpoint",
                        "fail",
                        f"{txt} holds {text[:40]!r}, neither an iteration nor "
                        "'release': Bridge prints 'ERROR: Invalid metadata file' and exits",
                    )
            if it <= 0 and not release:
                return _result(
                    "checkpoint",
                    "fail",
                    f"{txt} holds {text!r}: Bridge fails with '{P.TRACKER_PARSE_ERROR.format(path=txt)}'",
                )
            tracker = f"{P.TRACKER} ({text})"
        else:
            return _result(
                "checkpoint",
                "fail",
                f"{path} holds no checkpoint: no tracker ({P.TRACKER_STATE} or "
                f"{P.TRACKER}), none of {', '.join(P.ITERATION_DIR_MARKERS)} and no HuggingFace weights; "
                f"Bridge stops with '{P.NO_CHECKPOINT}'",
            )
        it_dir = os.path.join(path, P.RELEASE_DIR if release else P.iter_dir(it))
        where = f"tracker {tracker} -> {os.path.basename(it_dir)}"
        if not os.path.isdir(it_dir):
            return _result("checkpoint", "fail", f"{path}: the {where}, which does not exist")
    meta_path = os.path.join(it_dir, P.MCORE_METADATA)
    if os.path.isfile(meta_path):
        try:
            meta = json.load(open(meta_path, encoding="utf-8"))
        except (OSError, ValueError) as exc:
            return _result("checkpoint", "fail", f"{meta_path} is not readable JSON: {_error(exc)}")
        fmt, detail = "torch_dist", f"metadata.json {json.dumps(meta, sort_keys=True)}"
    elif os.path.exists(os.path.join(it_dir, P.DIST_METADATA)):
        fmt, meta, detail = "fsdp_dtensor", None, ".metadata only"
    elif _is_hf_dir(it_dir):
        fmt, meta, detail = "hf", None, "config.json and weights"
    else:
        return _result(
            "checkpoint",
            "fail",
            f"{path}: {where}: {P.UNKNOWN_FORMAT.format(path=it_dir)} "
            f"(no {P.MCORE_METADATA}, no {P.DIST_METADATA}, no HuggingFace weights)",
        )
    # the files a complete checkpoint of that format always has, but train_state.pt: a load without it
    # rebuilds the train state from the checkpoint's state dict (MB training/checkpointing.py:3066-3072)
    missing = (
        []
        if fmt == "hf"
        else [f for f in P.complete_files(fmt) if f != P.TRAIN_STATE and not os.path.exists(os.path.join(it_dir, f))]
    )
    if missing:
        return _result(
            "checkpoint",
            "fail",
            f"{path}: {where}: format {fmt} but {', '.join(missing)} is missing in {it_dir} (an incomplete checkpoint)",
            format=fmt,
            metadata=meta,
        )
    return _result(
        "checkpoint", "ok", f"{path}: {where}, format {fmt} ({detail})", format=fmt, metadata=meta, iteration_dir=it_dir
    )


# --------------------------------------------------------------------------------------------
# hf_cache: the model and processor revisions in the offline cache
# --------------------------------------------------------------------------------------------
def hub_cache() -> str:
    home = os.path.expanduser(
        os.environ.get("HF_HOME")
        or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface"
        )
    )
    return os.path.expanduser(
        os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE") or os.path.join(home, "hub")
    )


def cached_snapshot(cache: str, repo: str, revision: str | None) -> tuple[str | None, str]:
    """(snapshot dir or None, why not) as try_to_load_from_cache resolves a revision."""
    rev = revision or "main"
    repo_cache = os.path.join(cache, "--".join(["models", *repo.split("/")]))
    if not os.path.isdir(repo_cache):
        return None, f"no {os.path.basename(repo_cache)} in {cache}"
    ref = os.path.join(repo_cache, "refs", rev)
    if os.path.isfile(ref):
        rev = open(ref, encoding="utf-8").read().strip()
    snap = os.path.join(repo_cache, "snapshots", rev)
    if not os.path.isdir(snap):
        return None, f"no snapshot {rev} in {repo_cache}"
    return snap, ""


def check_hf_cache(spec: dict) -> dict:
    hf = spec.get("hf") or {}
    wanted = []
    if hf.get("model"):
        wanted.append(("model", hf["model"], hf.get("model_revision"), HF_MODEL_FILES, True))
    if hf.get("processor"):
        wanted.append(("processor", hf["processor"], hf.get("processor_revision"), HF_PROCESSOR_FILES, False))
    if not wanted:
        return _result("hf_cache", "skip", "the recipe names no HuggingFace model or processor")
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() not in _TRUE:
        return _result(
            "hf_cache",
            "skip",
            "HF_HUB_OFFLINE is not set: the job may download from the Hub "
            "(the profile's hf_home sets an offline cache)",
        )
    cache = hub_cache()
    found, problems = [], []
    for what, repo, rev, files, need_all in wanted:
        label = f"{what} {repo}@{rev or 'main'}"
        if os.path.isabs(repo):  # a local directory: no revision applies
            snap, why = (repo, "") if os.path.isdir(repo) else (None, "the directory does not exist")
        else:
            snap, why = cached_snapshot(cache, repo, rev)
        if snap is None:
            problems.append(f"{label}: {why}")
            continue
        have = [f for f in files if os.path.isfile(os.path.join(snap, f))]
        if (need_all and len(have) < len(files)) or not have:
            problems.append(f"{label}: {snap} lacks {' and '.join(files) if need_all else ' or '.join(files)}")
            continue
        found.append(f"{label} ({', '.join(have)})")
    if problems:
        return _result(
            "hf_cache",
            "fail",
            f"not in the offline cache {cache} (HF_HUB_OFFLINE=1, so loading fails): "
            + "; ".join(problems)
            + "; download them there first (huggingface-cli download REPO "
            f"--revision REV --cache-dir {cache})",
            cache=cache,
            found=found,
        )
    return _result("hf_cache", "ok", f"in the offline cache {cache}: " + "; ".join(found), cache=cache)


# --------------------------------------------------------------------------------------------
# fabric and network: every rank
# --------------------------------------------------------------------------------------------
def check_fabric(spec: dict, nodes: dict, cuda: bool) -> dict:
    """nodes: {host: {"imex": ..., "fabric": ...}} from each node's first rank."""
    if not cuda:
        return _result("fabric", "skip", "no GPUs (CPU processes): no NVLink fabric or IMEX channels to check")
    import fabric_checks

    mnnvl, reason = fabric_checks.mnnvl_status({h: n.get("fabric") for h, n in nodes.items()}, len(nodes))
    no_imex = sorted(h for h, n in nodes.items() if not (n.get("imex") or {}).get("channels"))
    imex = f"IMEX channels visible on {len(nodes) - len(no_imex)}/{len(nodes)} node(s)" + (
        f" (none on {', '.join(no_imex)})" if no_imex else ""
    )
    detail = f"{imex}; multi-node NVLink {mnnvl}: {reason}"
    expect = bool((spec.get("fabric") or {}).get("expect_mnnvl")) and len(nodes) > 1
    data = {"mnnvl": mnnvl, "nodes": nodes}
    if expect and (no_imex or mnnvl == "no"):
        return _result("fabric", "fail", f"the profile expects multi-node NVLink, but {detail}", **data)
    if expect and mnnvl != "likely":
        return _result("fabric", "warn", detail, **data)
    return _result("fabric", "ok", detail, **data)


def judge_busbw(spec: dict, rows: list, world: int, nodes: int, backend: str) -> dict:
    net = spec.get("network") or {}
    gpu = spec.get("gpu_type") or "?"
    if world < 2 or not rows:
        return _result("network", "skip", "one process: no collective to measure", rows=rows)
    last = rows[-1]
    got, size = float(last["busbw_gbps"]), int(last["size_bytes"])
    where = f"{world} ranks on {nodes} node(s), {backend}"
    note = "" if nodes > 1 else "; one node only, so no inter-node link was measured"
    expected = float(net.get("expected_busbw_gbps") or 0)
    frac = float(net.get("min_fraction") or 0.8)
    data = {
        "rows": rows,
        "measured_gbps": got,
        "size_bytes": size,
        "expected_gbps": expected or None,
        "min_fraction": frac,
    }
    if not expected:
        return _result(
            "network",
            "warn",
            f"all-reduce busbw {got:.3f} GB/s at {_size(size)} ({where}); no expected "
            f"figure for {gpu} in the profile ([canary] busbw_gbps): not judged{note}",
            **data,
        )
    if got >= expected * frac:
        return _result(
            "network",
            "ok",
            f"all-reduce busbw {got:.3f} GB/s at {_size(size)} >= {frac:.0%} of the "
            f"expected {expected:g} GB/s for {gpu} ({where}){note}",
            **data,
        )
    return _result(
        "network",
        "fail",
        f"all-reduce busbw {got:.3f} GB/s at {_size(size)} is below {frac:.0%} of the "
        f"expected {expected:g} GB/s for {gpu} ({where}){note}",
        **data,
    )


def _distributed(spec: dict, rank: int, world: int, local_rank: int):
    """Every rank: one process group, each node's fabric facts gathered, the busbw sweep.
    Returns (hosts, nodes, network result or None on ranks > 0, cuda)."""
    from datetime import timedelta

    import fabric_checks
    import torch
    import torch.distributed as dist

    net = spec.get("network") or {}
    cuda = torch.cuda.is_available() and spec.get("gpu_type") != "cpu"
    if cuda:
        torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    backend = "nccl" if cuda else "gloo"
    host = socket.gethostname()
    node = None
    if local_rank == 0:
        node = {"imex": fabric_checks.imex_channels(), "fabric": fabric_checks.query_fabric() if cuda else None}
    infos = [{"host": host, "node": node}]
    try:
        dist.init_process_group(backend=backend, timeout=timedelta(seconds=int(net.get("timeout_s") or 300)))
        infos = [None] * world
        dist.all_gather_object(infos, {"host": host, "node": node})
        rows = []
        if world > 1:
            rows = fabric_checks.busbw_sweep(
                list(net.get("sizes") or [1 << 20]), int(net.get("iters") or 5), device, world, dist.barrier
            )
        result = None
        hosts = [i["host"] for i in infos]
        if rank == 0:
            result = judge_busbw(spec, rows, world, len(set(hosts)), backend)
    except Exception as exc:  # noqa: BLE001 - the finding
        hosts = [i["host"] for i in infos if i]
        result = _result("network", "fail", f"the {backend} process group across {world} ranks failed: {_error(exc)}")
    finally:
        with contextlib.suppress(Exception):
            if dist.is_initialized():
                dist.destroy_process_group()
    nodes = {i["host"]: i["node"] for i in infos if i and i.get("node") is not None}
    return hosts, nodes, result, cuda


# --------------------------------------------------------------------------------------------
# running a check in a subprocess, and the report
# --------------------------------------------------------------------------------------------
def _check_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "MASTER_", "GROUP_", "ROLE_"))}


def _no_result(name: str, code, stdout: str, stderr: str) -> dict:
    tail = [ln.strip() for ln in (stderr or stdout).splitlines() if ln.strip()]
    return _result(
        name,
        "fail",
        f"the {name} check's process ended (exit {code}) without a result: {tail[-1] if tail else 'no output'}",
        output=(stderr or stdout)[-4000:],
    )


def _subprocess_check(name: str, spec: dict, spec_path: str) -> dict:
    timeout = int(spec.get("check_timeout_s") or 600)
    try:
        proc = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--check", name, spec_path],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=_check_env(),
        )
    except subprocess.TimeoutExpired:
        return _result(name, "fail", f"the {name} check did not finish within {timeout} s")
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK) :])
    return _no_result(name, proc.returncode, proc.stdout, proc.stderr)


def _subprocess_checks(names: list, spec: dict, spec_path: str):
    """The checks in `names`, in order, in ONE process (`--check trainer,data`): the image's
    libraries (torch, megatron.core, megatron.bridge, megatron.energon) are imported once, not once
    per check. Yields each check's result as the process prints it, so the report is rewritten after
    each; each check has its own check_timeout_s from when the one before it ended. A check that
    outlives its timeout, or a process that ends without its result, fails that check as
    _subprocess_check says it; the checks after it then run each in a process of its own."""
    import queue
    import threading

    if len(names) < 2:
        for name in names:
            yield _subprocess_check(name, spec, spec_path)
        return
    timeout = int(spec.get("check_timeout_s") or 600)
    err = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
    try:
        proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--check", ",".join(names), spec_path],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            errors="replace",
            env=_check_env(),
        )
    except OSError:
        err.close()
        for name in names:
            yield _subprocess_check(name, spec, spec_path)
        return
    lines: queue.Queue = queue.Queue()
    out: list = []

    def read() -> None:
        assert proc.stdout is not None
        for ln in proc.stdout:
            out.append(ln)
            if ln.startswith(RESULT_MARK):
                lines.put(ln)
        lines.put(None)  # the process closed its output

    threading.Thread(target=read, daemon=True).start()
    done = 0
    try:
        for name in names:
            try:
                ln = lines.get(timeout=timeout)
            except queue.Empty:
                yield _result(name, "fail", f"the {name} check did not finish within {timeout} s")
                done += 1
                break
            if ln is None:
                try:
                    code = proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    code = "?"
                err.seek(0)
                yield _no_result(name, code, "".join(out), err.read())
                done += 1
                break
            yield json.loads(ln[len(RESULT_MARK) :])
            done += 1
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        err.close()
    for name in names[done:]:
        yield _subprocess_check(name, spec, spec_path)


def verdict(results: dict) -> dict:
    ordered = [results[c] for c in CHECKS if c in results]
    failed = [r for r in ordered if r["status"] == "fail"]
    return {
        "verdict": "fail" if failed else "pass",
        "first_failure": failed[0] if failed else None,
        "warnings": [r["check"] for r in ordered if r["status"] == "warn"],
    }


def write_report(path: str, spec: dict, results: dict, started: float, done: bool) -> None:
    report = {
        "run_id": spec.get("run_id"),
        "started": started,
        "elapsed_s": round(time.time() - started, 3),
        "complete": done,
        "checks": [results[c] for c in CHECKS if c in results],
    }
    if done:
        report.update(verdict(results))
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".report-", dir=os.path.dirname(path) or ".")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=1, default=str)
        fh.write("\n")
    os.replace(tmp, path)


def line(result: dict) -> str:
    status = {"ok": "ok", "fail": "FAIL", "skip": "skip", "warn": "warn"}[result["status"]]
    return f"{PREFIX}: {result['check']}: {status}: {result['detail']}"


def run(spec_path: str) -> int:
    spec = json.load(open(spec_path, encoding="utf-8"))
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    started = time.time()
    hosts, nodes, network, cuda = _distributed(spec, rank, world, local_rank)
    if rank != 0:
        return 0
    network["seconds"] = round(time.time() - started, 2)  # the process group, the fabric facts and the sweep
    results: dict = {}
    report = spec["report"]

    def record(result: dict) -> None:
        results[result["check"]] = result
        print(line(result), flush=True)
        write_report(report, spec, results, started, done=False)

    record(check_image(spec, hosts))
    record(check_fabric(spec, nodes, cuda))
    record(network)
    # the trainer and data checks that need the image's libraries share one process (one import)
    known = {"trainer": _trainer_without_running(spec), "data": _data_without_opening(spec)}
    opened = _subprocess_checks([n for n, r in known.items() if r is None], spec, spec_path)
    for name, fn in (
        ("trainer", lambda: known["trainer"] or next(opened)),
        ("data", lambda: known["data"] or next(opened)),
        ("checkpoint", lambda: check_checkpoint(spec)),
        ("hf_cache", lambda: check_hf_cache(spec)),
    ):
        t0 = time.time()
        try:
            result = fn()
        except Exception as exc:  # noqa: BLE001 - a check that crashed is a failed check
            result = _result(name, "fail", f"the check itself failed: {_error(exc)}")
        result["seconds"] = round(time.time() - t0, 2)
        record(result)
    write_report(report, spec, results, started, done=True)
    v = verdict(results)
    if v["verdict"] == "pass":
        warn = f" (warnings: {', '.join(v['warnings'])})" if v["warnings"] else ""
        print(f"{PREFIX}: PASS{warn}; report {report}", flush=True)
        return 0
    ff = v["first_failure"]
    print(f"{PREFIX}: FAIL at {ff['check']}: {ff['detail']}; report {report}", flush=True)
    return 1


def _check_main(names: list, spec_path: str) -> int:
    """The checks in `names`, in order, in this one process: a result line after each."""
    spec = json.load(open(spec_path, encoding="utf-8"))
    here = os.path.dirname(os.path.abspath(__file__))  # the workload's own modules must not shadow the image's
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    for name in names:
        try:
            result = _trainer_in_process(spec) if name == "trainer" else _data_in_process(spec)
        except BaseException as exc:  # noqa: BLE001 - reported
            result = _result(name, "fail", f"the check itself failed: {_error(exc)}")
        sys.stdout.write("\n" + RESULT_MARK + json.dumps(result, default=str) + "\n")
        sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # loaders, threads and atexit hooks of the image's libraries are not waited for


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    names = argv[1].split(",") if len(argv) == 3 and argv[0] == "--check" else []
    if names and all(n in ("trainer", "data") for n in names):
        return _check_main(names, argv[2])
    if len(argv) != 1:
        print(
            "usage: cluster_checks.py SPEC.json  (under torchrun)  |  "
            "cluster_checks.py --check trainer|data|trainer,data SPEC.json",
            file=sys.stderr,
        )
        return 2
    return run(argv[0])


if __name__ == "__main__":
    sys.exit(main())
