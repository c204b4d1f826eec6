"""recipe x cluster x overlays x overrides -> ResolvedJob, with provenance.

Pure: reads the recipe/cluster/overlay files and the shipped schema, nothing else.
Layers apply in this order, later ones winning: upstream defaults the recipe records,
the recipe, overlays (in the order given), the cluster profile, the command line.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import sys
from dataclasses import dataclass, field

from bridge_launch.core import image_cache, image_ref, paths, slurm_time, upstream
from bridge_launch.core.errors import UsageError
from bridge_launch.core.hardware import SEGMENT_SIZES
from bridge_launch.core.upstream import BRIDGE_IN_CONTAINER
from bridge_launch.job import resolved
from bridge_launch.job.resolved import BRIDGE_SRC_DIR as BRIDGE_SRC_DIR
from bridge_launch.job.resolved import RUN_ID_PLACEHOLDER as RUN_ID_PLACEHOLDER
from bridge_launch.job.resolved import Finding
from bridge_launch.job.resolved import ResolvedJob as ResolvedJob
from bridge_launch.plan import findings
from bridge_launch.resolve import secret_plan
from bridge_launch.resolve.options import Options as Options
from bridge_launch.spec import catalog, clusters, recipes, schema
from bridge_launch.spec.overrides import OverrideError, format_override, parse_override
from bridge_launch.workloads import smoke_keys
from bridge_launch.workloads import trainer_protocol as P

_SECRETISH = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL)", re.I)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# Keys that default into the run directory when no layer sets them, so a run keeps its
# checkpoints and logs together and a resumed run finds them.
RUN_DIR_DEFAULTS = {
    "checkpoint.save": "checkpoints",
    "checkpoint.load": "checkpoints",
    "logger.tensorboard_dir": "tensorboard",
    "logger.wandb_save_dir": "wandb",
}


@dataclass
class _Layers:
    values: dict = field(default_factory=dict)
    tokens: dict = field(default_factory=dict)
    source: dict = field(default_factory=dict)

    def set(self, key, value, source, token=None):
        self.values[key] = value
        self.tokens[key] = token if token is not None else format_override(key, value)
        self.source[key] = source


def _check_value(known: schema.Schema, key: str, value, where: str) -> None:
    spec = known.lookup(key)
    if spec is None:
        return
    if isinstance(value, str) and "${" in value:
        return  # interpolation: resolved inside the job
    want = schema.type_error(spec, value)
    if want:
        raise UsageError(f"{where}: {key} expects {want}, got {value!r}")


def _check_file_key(known: schema.Schema, own, key: str, entry: dict, section: str, what: str, earlier) -> None:
    """A key a recipe, overlay or cluster file sets must be one the job's schema (or its workload)
    has, as on the command line: Megatron-Bridge would refuse it in the job, after the queue wait,
    and the smoke workload would drop it."""
    if known.lookup(key) is not None or key in own or key in earlier:
        return
    hints = known.closest(key, extra=[*own, *earlier])
    files = entry.get("files") or ([entry["path"]] if entry.get("path") else [])
    at = catalog.where(files, f"{section}.{key}") if files else what
    raise UsageError(
        f"{at}: {what}: unknown config key '{key}'"
        + (f"; did you mean {' or '.join(repr(h) for h in hints)}?" if hints else "")
        + " (to add a key the schema lacks, pass +KEY=VALUE on the command line)"
    )


def _apply_cli(layers: _Layers, tokens, deleted: list, known_keys: schema.Schema, own=frozenset()) -> None:
    known = set(layers.values) | set(own)
    for text in tokens:
        try:
            ov = parse_override(text)
        except OverrideError as exc:
            raise UsageError(str(exc)) from None
        where = f"override '{text}'"
        if ov.is_sweep:
            raise UsageError(
                f"{where}: sweeps are not supported (one job runs one configuration); give a single value, "
                "or add --sweep to submit one run per value"
            )
        key = ov.key
        in_schema = known_keys.lookup(key) is not None
        if ov.op == "delete":
            if key not in known and not in_schema:
                raise UsageError(f"{where}: cannot remove '{key}': the job does not set it and it is not a known key")
            if key in layers.values:
                del layers.values[key], layers.tokens[key]
                layers.source[key] = "cli (removed)"
            else:
                deleted.append(text)
            continue
        if ov.op == "set" and key not in known and not in_schema:
            hints = known_keys.closest(key, extra=known)
            hint = f"; did you mean {' or '.join(repr(h) for h in hints)}?" if hints else ""
            raise UsageError(f"{where}: unknown config key '{key}'{hint} (prefix with + to add a new key)")
        if ov.op == "add" and (key in layers.values or in_schema):
            raise UsageError(f"{where}: '{key}' already exists; use {key}=... to change it or ++{key}=... to force")
        if in_schema and not ov.has_interpolation:
            _check_value(known_keys, key, ov.value, where)
        layers.set(key, ov.value, "cli", token=text)


def _check_classes(known: schema.Schema, recipe: dict, layers: _Layers) -> None:
    """A key of another class than the one the recipe function builds for its section (the schema's
    only_in): Megatron-Bridge refuses it when it applies the override, after the queue wait."""
    for key, source in layers.source.items():
        found = known.foreign(key, recipe["classes"])
        if found is None:
            continue
        cls, owners = found
        section = key.split(".", 1)[0]
        hints = difflib.get_close_matches(key, known.keys_of(section, cls), n=2, cutoff=0.7)
        where = f"override '{layers.tokens[key]}'" if source == "cli" else f"{key} ({source})"
        raise UsageError(
            f"{where}: {recipe['name']}'s {section} class is {cls} (Megatron-Bridge "
            f"{upstream.short(recipe['bridge_commit'])}), which has no {key.split('.', 1)[1]}; only "
            f"{', '.join(owners)} {'has' if len(owners) == 1 else 'have'} it"
            + (f"; did you mean {' or '.join(repr(h) for h in hints)}?" if hints else "")
        )


def _nodes(recipe: dict, overlays: list, prof: dict, opts: Options, jobsrc: dict, found) -> int:
    """Stage 4a: the node count (recipe or overlay GPUs, the cluster's size, --nodes)."""
    gpn = prof["gpus_per_node"]
    want, want_src = recipe.get("gpus"), "recipe"
    for ov in overlays:
        if ov.get("gpus"):
            want, want_src = ov["gpus"], f"overlay:{ov['name']}"
    if opts.nodes is not None:
        if opts.nodes < 1:
            raise UsageError(f"--nodes must be >= 1, got {opts.nodes}")
        nodes, jobsrc["nodes"] = opts.nodes, "cli"
        if prof["nodes"] is not None and nodes != prof["nodes"]:
            found.warn(
                f"--nodes {nodes} overrides the fixed size of cluster '{prof['name']}' ({prof['nodes']} nodes, "
                f"{prof['nodes'] * gpn} GPUs): this job asks for {nodes * gpn} GPUs ({nodes} x {gpn})"
            )
        if want and nodes * gpn != want:
            found.warn(f"running on {nodes * gpn} GPUs ({nodes} x {gpn}) instead of the {want} that {want_src} states")
        elif not want and prof["nodes"] is not None and nodes != prof["nodes"]:  # gb200-32 --nodes 4: 16 GPUs
            found.warn(
                f"cluster '{prof['name']}' is a fixed size of {_n(prof['nodes'], 'node')} "
                f"({prof['nodes'] * gpn} GPUs); --nodes {nodes} runs on {_n(nodes, 'node')} ({nodes * gpn} GPUs)"
            )
    elif prof["nodes"] is not None:
        nodes, jobsrc["nodes"] = prof["nodes"], f"cluster:{prof['name']}"
        if want and nodes * gpn != want:
            found.error(
                f"{recipe['name']} needs {want} GPUs ({want_src}) but cluster '{prof['name']}' has "
                f"{nodes * gpn} ({_n(nodes, 'node')} x {gpn}); {_size_hint(prof, want)}"
            )
    elif want:
        if want % gpn:
            found.error(
                f"{want} GPUs ({want_src}) is not a whole number of {gpn}-GPU nodes on cluster '{prof['name']}'"
            )
        nodes, jobsrc["nodes"] = max(1, math.ceil(want / gpn)), want_src
    else:
        nodes, jobsrc["nodes"] = 1, "default"
    if prof["max_nodes"] is not None and nodes > prof["max_nodes"]:
        found.error(f"{nodes} nodes exceeds cluster '{prof['name']}' maximum of {prof['max_nodes']}")
    return nodes


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _size_hint(prof: dict, want: int) -> str:
    """What would give `want` GPUs: a profile of that size (same backend and GPU first), and
    --nodes only where this cluster allows that many (its max_nodes)."""
    gpn = prof["gpus_per_node"]
    need = math.ceil(want / gpn)
    fits = [
        p
        for p in clusters.list_profiles(skip_broken=True)
        if not p["abstract"] and p["name"] != prof["name"] and p["nodes"] and p["nodes"] * p["gpus_per_node"] == want
    ]
    fits.sort(key=lambda p: (p["backend"] != prof["backend"], p["gpu_type"] != prof["gpu_type"], p["name"]))
    grow = want % gpn == 0 and (prof["max_nodes"] is None or need <= prof["max_nodes"])
    ways = ([f"--cluster {fits[0]['name']}"] if fits else []) + ([f"--nodes {need}"] if grow else [])
    if grow:
        return "use " + " or ".join(ways)
    why = (
        f"cluster '{prof['name']}' allows at most {_n(prof['max_nodes'], 'node')}"
        if prof["max_nodes"] is not None and need > prof["max_nodes"]
        else f"{want} GPUs is not a whole number of {gpn}-GPU nodes"
    )
    return f"{why}; " + (f"use {ways[0]} ({want} GPUs)" if ways else f"use a cluster with {want} GPUs")


def _mounts(prof: dict, job_root: str) -> list:
    mounts = list(prof["container_mounts"])

    def covered(path):
        for m in mounts:
            src, _, dst = m.partition(":")
            dst = dst.split(":")[0] or src
            if src == dst and (path == src or path.startswith(src.rstrip("/") + "/")):
                return True
        return False

    for path in (job_root, prof["hf_home"]):
        if path and not covered(path):
            mounts.append(f"{path}:{path}")
    return mounts


MAX_NO_PROGRESS = 2  # segments in a row that end without a new complete checkpoint stop the chain


def _chain(opts: Options, prof: dict, layers: _Layers) -> dict:
    """--until-done: segments that continue across time limits, told to save before the limit,
    each resuming from the newest complete checkpoint (trainer_protocol's publication rule)."""
    if prof["backend"] != "slurm":
        raise UsageError(
            f"--until-done runs a chain of Slurm jobs; cluster '{prof['name']}' uses the {prof['backend']} backend"
        )
    if opts.max_segments is not None and opts.max_segments < 1:
        raise UsageError(f"--max-segments must be >= 1, got {opts.max_segments}")
    values = layers.values
    iters, save = values.get("train.train_iters"), values.get("checkpoint.save")
    if not isinstance(iters, int) or not isinstance(save, str) or not save:
        raise UsageError("--until-done needs train.train_iters (an integer) and checkpoint.save (a directory)")
    load = values.get("checkpoint.load") if layers.source.get("checkpoint.load") != "derived (run dir)" else None
    if load not in (None, "") and str(load).rstrip("/") != save.rstrip("/"):
        raise UsageError(
            f"--until-done resumes every segment from checkpoint.save ({save}), but checkpoint.load is "
            f"{load}; drop checkpoint.load or set it to the same directory (start from other weights "
            "with checkpoint.pretrained_checkpoint)"
        )
    if values.get(P.CKPT_STEP_KEY) is not None:
        raise UsageError(
            f"--until-done: {P.CKPT_STEP_KEY}={values[P.CKPT_STEP_KEY]} would load that iteration in every "
            f"segment; remove it (the chain sets it itself when the newest checkpoint is incomplete)"
        )
    layers.set("checkpoint.load", save, "until-done")
    keep = values.get("checkpoint.most_recent_k")
    if keep == 0:
        raise UsageError(
            "--until-done: checkpoint.most_recent_k=0 removes every checkpoint once a save completes "
            "(Megatron-Bridge keeps none), so no segment could resume; use 1 or more, or -1 to keep all"
        )
    np_dir = None
    if values.get("checkpoint.non_persistent_ckpt_type") == "global":
        np_dir = (
            values.get("checkpoint.non_persistent_global_ckpt_dir") or f"{save.rstrip('/')}/{P.NON_PERSISTENT_SUBDIR}"
        )
    return {
        "max_restarts": opts.max_restarts,
        "max_segments": opts.max_segments,
        "max_no_progress": MAX_NO_PROGRESS,
        "train_iters": iters,
        "save": save,
        "non_persistent_dir": np_dir,
        "complete_files": list(P.complete_files(values.get("checkpoint.ckpt_format"))),
    }


def _retention(prof: dict, layers: _Layers) -> None:
    """The profile's checkpoint_most_recent_k for every job that saves checkpoints and keeps them all:
    Megatron-Bridge removes all but the newest most_recent_k iter_* once a save is complete (067f987
    checkpointing.py:1609-1626, 1647-1655; 987244934 :1274-1276); MC's default -1 keeps every one
    (training_config.py:421), hundreds of TB over a long run, a chain's or a plain job's alike."""
    values = layers.values
    if not values.get("checkpoint.save") or prof["checkpoint_most_recent_k"] <= 0:
        return
    if values.get("checkpoint.most_recent_k") in (None, -1):
        layers.set(
            "checkpoint.most_recent_k",
            prof["checkpoint_most_recent_k"],
            f"cluster {prof['name']} (checkpoint_most_recent_k)",
        )


def _retry(opts: Options, prof: dict, layers: _Layers) -> dict | None:
    """A Slurm job that is not a chain retries a flaky failure from its batch script: resubmitted
    without the node its logs or its health step name (--exclude), resumed from checkpoint.save
    when the attempt saved one; an attempt that saved a newer complete checkpoint does not use up
    --max-restarts, a deterministic failure never retries (backends/slurm renders it)."""
    if prof["backend"] != "slurm" or opts.max_restarts == 0:
        return None
    values = layers.values
    save = values.get("checkpoint.save")
    save = save if isinstance(save, str) and save.startswith("/") and "${" not in save else ""
    np_dir = None
    if save and values.get("checkpoint.non_persistent_ckpt_type") == "global":
        np_dir = (
            values.get("checkpoint.non_persistent_global_ckpt_dir") or f"{save.rstrip('/')}/{P.NON_PERSISTENT_SUBDIR}"
        )
    load = values.get("checkpoint.load")
    return {
        "max_restarts": opts.max_restarts,
        "save": save,
        "non_persistent_dir": np_dir,
        "complete_files": list(P.complete_files(values.get("checkpoint.ckpt_format"))),
        # a retry that finds a checkpoint in save loads it: checkpoint.load=save unless it is that already
        "load_from_save": bool(save) and str(load or "").rstrip("/") != save.rstrip("/"),
    }


def _limit_save(opts: Options, prof: dict, layers: _Layers, scheduler: dict, chained: bool) -> dict | None:
    """The save before the time limit, for every Slurm job that has one (and every chain):
    Slurm sends USR1 to the batch shell `lead` seconds before the limit (--signal=B:USR1@lead,
    the B: so that only the shell gets it), whose trap has each node's launcher send
    train.exit_signal to the training processes (torchrun is left alone); with
    train.exit_signal_handler on, Megatron-Bridge saves at the end of that step and exits 0
    (trainer_protocol: Signals). Returns None where there is no limit to save before.
    The lead itself is sized later (plan/sizing.lead), once the job's estimates exist."""
    if prof["backend"] != "slurm":
        for flag, value in (("--signal-lead", opts.signal_lead), ("--step-time", opts.step_time)):
            if value is not None:
                raise UsageError(
                    f"{flag} sizes the save before a Slurm time limit; cluster '{prof['name']}' uses the "
                    f"{prof['backend']} backend"
                )
        return None
    if opts.step_time is not None and not (opts.step_time > 0 and math.isfinite(opts.step_time)):
        raise UsageError(f"--step-time must be a positive number of seconds, got {opts.step_time}")
    if opts.signal_lead is not None and opts.signal_lead < 10:
        raise UsageError(f"--signal-lead must be at least 10 seconds, got {opts.signal_lead}")
    limit = slurm_time.seconds(scheduler["time"]) if scheduler.get("time") else None
    if limit is None and not chained:
        for flag, value in (("--signal-lead", opts.signal_lead), ("--step-time", opts.step_time)):
            if value is not None:
                raise UsageError(f"{flag} sizes the save before a time limit, and this job has none; add --time")
        return None
    if opts.signal_lead is not None and limit is not None and opts.signal_lead >= limit:
        raise UsageError(
            f"--signal-lead {opts.signal_lead}s is not shorter than the time limit {scheduler['time']} "
            f"({limit}s); the trainer would be told to save before it starts"
        )
    if layers.values.get("train.exit_signal_handler") is False and not chained:
        raise UsageError(
            f"train.exit_signal_handler=false (from {layers.source.get('train.exit_signal_handler')}) would let "
            f"the job run into its time limit {scheduler['time']} without a save; drop it (the job turns it on "
            "to save before the limit)"
        )
    # Megatron-Bridge saves and exits on the signal only with its handler on (trainer_protocol).
    layers.set("train.exit_signal_handler", True, "until-done" if chained else "time-limit save")
    exit_signal = layers.values.get("train.exit_signal")
    return {
        "signal_lead": opts.signal_lead,  # None until plan/sizing.lead sets it
        "lead_source": "--signal-lead" if opts.signal_lead is not None else None,
        "exit_signal": _signal_name(exit_signal) if exit_signal is not None else P.DEFAULT_EXIT_SIGNAL[3:],
        "time_limit_s": limit,
        "step_time": opts.step_time,
    }


def _signal_name(value) -> str:
    """train.exit_signal as kill(1) takes it (TERM, USR1, ...)."""
    import signal

    text = str(value).strip().rsplit(".", 1)[-1].upper()
    try:
        sig = (
            signal.Signals(int(text))
            if text.isdigit()
            else signal.Signals[text if text.startswith("SIG") else "SIG" + text]
        )
    except (KeyError, ValueError):
        raise UsageError(f"train.exit_signal={value!r} is not a signal name or number (e.g. SIGTERM, 15)") from None
    return sig.name[3:]


class _Found(list):
    """The findings of one resolve, in the order found (job/resolved.py Finding)."""

    def error(self, text: str) -> None:
        self.append(Finding(text, error=True))

    def warn(self, text: str, **how) -> None:
        self.append(Finding(text, **how))

    def errors(self) -> int:
        return sum(f.error for f in self)


def resolve(recipe_name: str, opts: Options | None = None) -> ResolvedJob:
    """The job, in named stages: the files; the config layers; environment and secrets; size and
    image; scheduler settings; the run dir; the time limit's save, chain and retry; the notes and the
    canary; then a draft job, its findings (plan/findings), and its save before the limit sized
    (plan/sizing), each stage a new frozen job. The dry run and a submit get the same job: a finding
    says whether it blocks a submit (ResolvedJob.refusals)."""
    opts = opts if opts is not None else Options()
    recipe, prof, overlays = _files(recipe_name, opts)
    found, jobsrc = _Found(), {}
    known = schema.at(recipe["bridge_commit"])  # the keys of the revision the recipe pins
    layers, deleted = _config_layers(recipe, overlays, prof, opts, known)
    env, envsrc, secrets, secret_sources, cli_secrets = _environment(recipe, overlays, prof, opts, found)
    for ov in overlays:
        if ov["recipes"] and recipe["name"] not in ov["recipes"]:
            found.warn(
                f"overlay '{ov['name']}' is written for {', '.join(ov['recipes'])}, not recipe '{recipe['name']}': "
                "its values were not validated for this model"
            )
    for key, why in (recipe.get("seed_differences") or {}).items():
        src = layers.source.get(key, "")
        if key in layers.values and src != "cli" and not src.startswith("overlay"):
            found.warn(f"{key}={layers.values[key]} differs from the seed's run: {why}")
    if not opts.memory_check:
        jobsrc["memory_check"] = "off (--no-memory-check)"  # kept for resume, which validates again
    if opts.force:
        jobsrc["force"] = "on (--force)"  # what the job's checks let through (diff shows it)
    before = found.errors()
    nodes = _nodes(recipe, overlays, prof, opts, jobsrc, found)
    gpu_count_ok = found.errors() == before
    container, image = _container(recipe, prof, opts, jobsrc)
    scheduler = _scheduler(prof, opts, jobsrc, found)
    job_root, run_dir, python, mounts, bridge_src = _run_dir(recipe, prof, opts, layers, known, container, jobsrc)
    chain, retry, limit_save = _time_limit(opts, prof, layers, scheduler)
    needs, canary, missing = _notes(
        recipe, prof, opts, layers, container, bridge_src, nodes, jobsrc, secrets, secret_sources, cli_secrets, found
    )
    draft = ResolvedJob(
        recipe=recipe["name"],
        upstream=recipe.get("upstream"),
        bridge_commit=recipe["bridge_commit"] if recipe["workload"] == "megatron-bridge" else None,
        mode=recipe.get("mode"),
        workload=recipe["workload"],
        dataset_kind=recipe.get("dataset_kind"),
        entry=recipe["entry"],
        hf_model=recipe.get("hf_model"),
        cluster=prof["name"],
        backend=prof["backend"],
        overlays=[o["name"] for o in overlays],
        nodes=nodes,
        gpus_per_node=prof["gpus_per_node"],
        world_size=nodes * prof["gpus_per_node"],
        gpu_type=prof["gpu_type"],
        container=container,
        config=dict(layers.values),
        args=list(layers.tokens.values()) + deleted,
        env=env,
        secrets=secrets,
        required_secrets=list(prof["required_secrets"]),
        mounts=mounts,
        job_root=job_root,
        run_id=RUN_ID_PLACEHOLDER,
        run_dir=run_dir,
        python=python,
        scheduler=scheduler,
        profile=prof,
        chain=chain,
        retry=retry,
        limit_save=limit_save,
        provenance={"config": dict(layers.source), "env": envsrc, "job": jobsrc},
        missing_inputs=missing,
        findings=list(found),
        image=image,
        bridge_src=bridge_src,
        secret_sources=secret_sources,
        upstream_status=recipe.get("upstream_status"),
        needs_bridge_src=needs,
        bridge_recipe_module=(
            os.path.basename(recipe["bridge_recipe_module"]) if recipe.get("bridge_recipe_module") else None
        ),
        canary=canary,
    )
    job = _checked(draft, gpu_count_ok=gpu_count_ok, memory_check=opts.memory_check)
    return _sized(job, force=opts.force, measured=opts.measured) if job.limit_save is not None else job


def _files(recipe_name: str, opts: Options) -> tuple[dict, dict, list]:
    """Stage 1: the recipe, the cluster profile and the overlays, as their files say."""
    recipe = recipes.load(recipe_name)
    prof = clusters.load(opts.cluster)
    if prof["abstract"]:
        raise UsageError(f"cluster '{prof['name']}' is a base profile; use one that extends it")
    return recipe, prof, [recipes.load_overlay(n) for n in opts.overlays]


def _config_layers(recipe: dict, overlays: list, prof: dict, opts: Options, known) -> tuple[_Layers, list]:
    """Stage 2: the config, layer by layer (the recipe's, upstream's, overlays', the cluster's, the
    command line's), each key checked against the pinned revision's schema."""
    upstream_label = recipes.upstream_label(recipe)
    layers = _Layers()
    # The seed-stated values first, then the upstream ones the recipe records (disjoint sets).
    own = smoke_keys.OWN_KEYS if recipe["workload"] == "smoke" else frozenset()  # the workload's knobs
    for key, value in recipe["config"].items():
        _check_file_key(known, own, key, recipe, "config", f"recipe '{recipe['name']}'", layers.values)
        _check_value(known, key, value, f"recipe '{recipe['name']}'")
        layers.set(key, value, recipe["sources"]["config"].get(key, "recipe"))  # recipe:<name>: a user's file
    for key, value in recipe["upstream_config"].items():
        _check_file_key(known, own, key, recipe, "upstream_config", f"recipe '{recipe['name']}'", layers.values)
        _check_value(known, key, value, f"recipe '{recipe['name']}'")
        layers.set(key, value, upstream_label)
    for ov in overlays:
        for key, value in ov["config"].items():
            _check_file_key(known, own, key, ov, "config", f"overlay '{ov['name']}'", layers.values)
            _check_value(known, key, value, f"overlay '{ov['name']}'")
            source = ov["sources"].get(key)
            layers.set(
                key,
                value,
                source.format(bridge=upstream.short(recipe["bridge_commit"])) if source else f"overlay:{ov['name']}",
            )
    for key, value in recipes.flatten(prof["config"], keep_dict=known.is_dict_key).items():
        _check_file_key(known, own, key, prof, "config", f"cluster '{prof['name']}'", layers.values)
        _check_value(known, key, value, f"cluster '{prof['name']}'")
        layers.set(key, value, f"cluster:{prof['name']}")
    deleted: list = []
    _apply_cli(layers, opts.overrides, deleted, known, own)
    _check_classes(known, recipe, layers)
    return layers, deleted


def _environment(recipe: dict, overlays: list, prof: dict, opts: Options, found: _Found):
    """Stage 3: the environment (layered like the config), the secrets by name and, on Slurm, the
    source each has on the cluster. Returns (env, its sources, secrets, secret sources, --secret names)."""
    env, envsrc = {}, {}
    for layer_env, src in (
        # [upstream_env] is Megatron-Bridge's environment block at the pinned revision, also for a recipe
        # whose function bridge-launch ships (its function sets no such variable)
        [(recipe["upstream_env"], f"upstream@{upstream.short(recipe['bridge_commit'])}"), (recipe["env"], "recipe")]
        + [(o["env"], f"overlay:{o['name']}") for o in overlays]
        + [(prof["env"], f"cluster:{prof['name']}")]
    ):
        for k, v in layer_env.items():
            env[k], envsrc[k] = v, recipe["sources"]["env"].get(k, src) if src == "recipe" else src
    if prof["hf_home"]:
        for k, v in (("HF_HOME", prof["hf_home"]), ("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1")):
            if k not in env:
                env[k], envsrc[k] = v, f"cluster:{prof['name']}"
    cli_secrets, cli_sources = [], {}
    for item in opts.secrets:  # NAME, or NAME=SOURCE (a file on a Slurm cluster)
        name, sep, source = item.partition("=")
        if not _ENV_NAME.match(name):
            raise UsageError(
                f"--secret {name!r}: expected an environment variable name, or NAME=file:PATH (a file on the cluster)"
            )
        cli_secrets.append(name)
        if sep:
            cli_sources[name] = source
    secrets = list(dict.fromkeys(prof["secrets"] + prof["required_secrets"] + cli_secrets))
    for item in opts.env:
        name, sep, value = item.partition("=")
        if not sep or not _ENV_NAME.match(name):
            raise UsageError(f"--env '{item}': expected NAME=VALUE with a valid variable name")
        if _SECRETISH.search(name):
            raise UsageError(
                f"--env {name}=...: this looks like a secret; pass it by name with --secret {name} "
                "(its value is then taken from your environment at submit and written nowhere)"
            )
        env[name], envsrc[name] = value, "cli"
    for name in secrets:
        if name in env:
            raise UsageError(
                f"{name} is both a secret and a plain environment value ({envsrc[name]}); secrets are passed by name "
                "only"
            )

    secrets, secret_sources, more_errors, more_warnings = secret_plan.plan(
        prof, secrets, prof["required_secrets"], cli_secrets, cli_sources
    )
    for text in more_errors:
        found.error(text)
    for text in more_warnings:
        found.warn(text)
    through_env = [n for n in secrets if n not in secret_sources]
    if prof["backend"] == "slurm" and through_env:  # a submit says it with Slurm's own paths (the backend's note)
        found.warn(secret_plan.env_note(through_env, prof["name"]), at_submit=False)
    return env, envsrc, secrets, secret_sources, cli_secrets


def _container(recipe: dict, prof: dict, opts: Options, jobsrc: dict) -> tuple[str | None, dict | None]:
    """Stage 4b: the image (recipe, cluster, --container), in the platform's form; on Slurm, the
    image cache's squashfs where `image import` put one."""
    container, jobsrc["container"] = recipe.get("container") or None, "recipe"
    if prof["container_image"]:
        container, jobsrc["container"] = prof["container_image"], f"cluster:{prof['name']}"
    if opts.container:
        container, jobsrc["container"] = opts.container, "cli"
    if not prof["containers"]:
        if opts.container:
            raise UsageError(f"--container: cluster '{prof['name']}' runs bare processes (containers = false)")
        container, jobsrc["container"] = None, f"cluster:{prof['name']} (bare processes)"
    image = None
    if container and prof["backend"] in ("lepton", "dgxcloud"):
        container = image_ref.docker_ref(container)  # REGISTRY/IMAGE there (users may write pyxis's #)
    elif container and prof["backend"] == "slurm":
        ref = image_ref.pyxis_ref(container)  # the renderer writes this form; a bare *.sqsh is refused here
        hit = image_cache.cached(prof["name"], prof["slurm"].get("image_cache", "").rstrip("/"), ref)
        if hit:  # `image import` put it in the profile's cache: start from that squashfs
            image = {"ref": ref, "digest": hit["digest"], "squashfs": hit["squashfs"]}
            container, jobsrc["container"] = hit["squashfs"], f"{jobsrc['container']}, image cache {hit['digest'][:19]}"
    return container, image


def _scheduler(prof: dict, opts: Options, jobsrc: dict, found: _Found) -> dict:
    """Stage 5: the backend's section with the command line's --time, --partition, --account,
    --segment-size, and
    the bad-node list left out (--exclude)."""
    section = prof.get(prof["backend"], {}) if prof["backend"] in ("slurm", "lepton", "dgxcloud") else {}
    scheduler = dict(section)
    for flag in ("time", "partition", "account"):
        value = getattr(opts, flag)
        if value is not None:
            if prof["backend"] != "slurm":
                raise UsageError(
                    f"--{flag} applies to Slurm clusters; '{prof['name']}' uses the {prof['backend']} backend"
                )
            scheduler[flag] = value
            jobsrc[flag] = "cli"
        elif flag in scheduler:
            jobsrc[flag] = f"cluster:{prof['name']}"
    if scheduler.get("time"):
        slurm_time.checked(scheduler["time"], jobsrc["time"])
    if opts.segment_size is not None:
        if prof["backend"] not in ("slurm", "lepton"):
            raise UsageError(
                f"--segment-size applies to Slurm and Lepton clusters; '{prof['name']}' uses the {prof['backend']} "
                "backend"
            )
        if opts.segment_size not in SEGMENT_SIZES:
            raise UsageError(f"--segment-size must be one of {', '.join(SEGMENT_SIZES)}, got {opts.segment_size!r}")
        scheduler["segment_size"] = opts.segment_size
        jobsrc["segment_size"] = "cli"
        if not scheduler.get("segment"):
            found.warn(
                f"--segment-size {opts.segment_size} changes nothing: cluster '{prof['name']}' sets no segment "
                f"([{prof['backend']}] segment = false)"
            )
    elif "segment_size" in scheduler:
        jobsrc["segment_size"] = f"cluster:{prof['name']}"
    if opts.bad_nodes and prof["backend"] == "slurm":  # the runs layer's bad-node list: left out, saying why
        excluded = list(scheduler.get("exclude") or [])
        for node, why in opts.bad_nodes:
            if node not in excluded:
                excluded.append(node)
                found.warn(
                    f"node {node} is left out (--exclude): {why}; 'bridge-launch clusters forget-node "
                    f"{prof['name']} {node}' lets it back in"
                )
        scheduler["exclude"] = excluded
        jobsrc["exclude"] = "bad-node list"
    return scheduler


def _run_dir(recipe: dict, prof: dict, opts: Options, layers: _Layers, known, container, jobsrc: dict):
    """Stage 6: the run dir and what defaults into it, the interpreter, the mounts, --bridge-src.
    Returns (job root, run dir, python, mounts, bridge_src)."""
    job_root = (prof["job_root"] or str(paths.state_dir() / "runs")).rstrip("/")
    run_dir = f"{job_root}/{RUN_ID_PLACEHOLDER}"
    for key, sub in RUN_DIR_DEFAULTS.items():
        if key not in layers.source and (
            recipe["workload"] == "smoke"
            and key.startswith("checkpoint.")
            or recipe["workload"] != "smoke"
            and known.lookup(key) is not None
        ):
            layers.set(key, f"{run_dir}/{sub}", "derived (run dir)")
    # Bare processes run the interpreter running bridge-launch unless the profile names one.
    python = prof["python"] or (sys.executable if not container else "python")
    mounts = _mounts(prof, job_root) if container else []
    bridge_src = None
    if opts.bridge_src:
        if prof["backend"] != "slurm":
            raise UsageError(
                f"--bridge-src is staged into the run dir of a Slurm job; cluster '{prof['name']}' uses "
                f"the {prof['backend']} backend"
            )
        if not container:
            raise UsageError(
                f"--bridge-src needs a container to mount into; cluster '{prof['name']}' runs bare processes"
            )
        bridge_src = os.path.abspath(os.path.expanduser(opts.bridge_src))
        mounts.append(f"{run_dir}/{BRIDGE_SRC_DIR}:{BRIDGE_IN_CONTAINER}")
        jobsrc["bridge_src"] = f"cli ({bridge_src}, packed at submit)"
    return job_root, run_dir, python, mounts, bridge_src


def _time_limit(opts: Options, prof: dict, layers: _Layers, scheduler: dict):
    """Stage 7: --until-done's chain, the batch script's retry, the save before the time limit
    (sized in the last stage). Returns (chain, retry, limit_save)."""
    if not opts.until_done and opts.max_segments is not None:
        raise UsageError("--max-segments caps an --until-done chain; add --until-done or drop --max-segments")
    if opts.max_restarts < 0:
        raise UsageError(f"--max-restarts must be >= 0, got {opts.max_restarts}")
    chain = _chain(opts, prof, layers) if opts.until_done else None
    retry = None if chain else _retry(opts, prof, layers)
    _retention(prof, layers)
    limit_save = _limit_save(opts, prof, layers, scheduler, chained=chain is not None)
    if prof["backend"] == "slurm" and chain is None:
        scheduler["cancel_signal"] = "USR2"  # the batch shell's cancel trap; USR1 is the time-limit signal
    return chain, retry, limit_save


def _notes(
    recipe, prof, opts, layers, container, bridge_src, nodes, jobsrc, secrets, secret_sources, cli_secrets, found
):
    """Stage 8: what the recipe's function and image need, the canary, the inputs and secrets a
    submit cannot go without (findings that block a submit, shown by the dry run as warnings).
    Returns (needs_bridge_src, canary settings, missing inputs)."""
    if recipe.get("upstream_status") and not bridge_src:  # the full note: --dry-run's Upstream line, recipes show
        alt = ", or with --bridge-src CHECKOUT that has it" if prof["backend"] == "slurm" and container else ""
        found.warn(
            f"recipe function {recipe.get('upstream')} is not in upstream Megatron-Bridge: the job runs only "
            f"if its image ({container or 'none'}) carries it{alt}"
        )
    needs = recipe.get("needs_bridge_src") if recipe["workload"] == "megatron-bridge" else None
    if needs and not bridge_src:
        pin = upstream.short(recipe["bridge_commit"])
        if jobsrc["container"] == "recipe" and prof["backend"] == "slurm" and container:
            # the recipe's own image cannot run the recipe's own revision: say so before the queue
            found.warn(
                f"recipe '{recipe['name']}' runs Megatron-Bridge {pin}, which its image {recipe['container']} does not "
                f"carry ({needs}): give --bridge-src CHECKOUT at {pin}",
                blocks_submit=True,
                alone=True,
            )
        else:
            alt = ", or give --bridge-src at it" if prof["backend"] == "slurm" else ""
            found.warn(
                f"recipe '{recipe['name']}' runs Megatron-Bridge {pin} ({needs}): the job's image "
                f"({container or 'none'}) must carry that revision{alt}"
            )
    unproven = None
    if recipe["workload"] == "megatron-bridge" and recipe.get("bridge_recipe_module"):
        # bridge-launch's own function: checked on CPU against the pinned revision's source, never yet
        # against the Megatron-Bridge of the job's image, which the canary's trainer check builds it with
        unproven = (
            f"on: {recipe.get('upstream')} is bridge-launch's own function "
            f"(workload/bridge_recipes/{os.path.basename(recipe['bridge_recipe_module'])}), checked against "
            f"Megatron-Bridge {upstream.short(recipe['bridge_commit'])} but not against the image's; "
            "--no-canary turns it off"
        )
    elif recipe.get("upstream_status") and not bridge_src and recipe["workload"] == "megatron-bridge":
        unproven = (
            f"on: {recipe.get('upstream')} is not in Megatron-Bridge {upstream.short(recipe['bridge_commit'])}; "
            "--no-canary turns it off"
        )
    canary = clusters.canary_settings(prof, opts.canary, nodes, jobsrc, unproven)
    missing = [k for k in recipe["required"] if layers.values.get(k) in (None, "")]
    for key in missing:
        found.warn(
            f"required input {key} is not set; give it as {key}=... (the recipe has no default)", blocks_submit=True
        )
    if prof["backend"] in ("local", "slurm"):  # the cloud platforms read their own secret stores
        for name in dict.fromkeys([*prof["required_secrets"], *cli_secrets]):
            if name in secret_sources or os.environ.get(name) or name not in secrets:
                continue
            why = (
                f"is required by cluster '{prof['name']}' but" if name in prof["required_secrets"] else "(--secret) is"
            )
            text = f"secret {name} {why} not set in your environment"
            found.warn(text + ": submit would refuse", blocks_submit=True, submit_text=text)
    return needs, canary, missing


def _checked(job: ResolvedJob, *, gpu_count_ok: bool, memory_check: bool) -> ResolvedJob:
    """Stage 9: the job's findings (plan/findings: Megatron's rules, memory), on a new job."""
    errs, warns = findings.check(job, gpu_count_ok=gpu_count_ok, memory_check=memory_check)
    return dataclasses.replace(job, findings=[*job.findings, *resolved.errors(errs), *resolved.warnings(warns)])


def _sized(job: ResolvedJob, *, force: bool, measured=()) -> ResolvedJob:
    """Stage 10: the save before the time limit sized (plan/sizing): what a past run of the same
    step shape measured (Options.measured), the estimates, the signal lead and Slurm's --signal, a
    chain's segments, and what they let through; each step a new job."""
    from bridge_launch.plan import sizing

    job = dataclasses.replace(job, limit_save={**job.limit_save, "measured": sizing.measured(job, measured)})
    job = dataclasses.replace(job, limit_save={**job.limit_save, "estimate": sizing.estimate(job)})
    lead, lead_source = sizing.lead(job)
    job = dataclasses.replace(
        job,
        limit_save={**job.limit_save, "signal_lead": lead, "lead_source": lead_source},
        scheduler={**job.scheduler, "signal": f"B:USR1@{lead}"},
        provenance={**job.provenance, "job": {**job.provenance["job"], "signal": lead_source}},
    )
    estimate = {**job.limit_save["estimate"], "segments": sizing.segments(job)}
    job = dataclasses.replace(job, limit_save={**job.limit_save, "estimate": estimate})
    more_warnings, more_errors = sizing.check(job, force=force)
    return dataclasses.replace(
        job, findings=[*job.findings, *resolved.warnings(more_warnings), *resolved.errors(more_errors)]
    )


def amend(job: ResolvedJob, overrides=()) -> ResolvedJob:
    """A resolved job with more command-line overrides applied (resume), loading its own
    checkpoints, re-validated."""
    layers = _Layers()
    deleted, token_of = [], {}
    for text in job.args:
        ov = parse_override(text)
        if ov.op == "delete":
            deleted.append(text)
        else:
            token_of[ov.key] = text
    for key, value in job.config.items():
        layers.set(key, value, job.provenance["config"].get(key, ""), token=token_of.get(key))
    _apply_cli(layers, overrides, deleted, schema.at(job.bridge_commit))
    if layers.values.get("checkpoint.save"):
        layers.set("checkpoint.load", layers.values["checkpoint.save"], "resume")
    prov = dict(job.provenance, config={**job.provenance["config"], **layers.source})
    new = dataclasses.replace(
        job,
        config=dict(layers.values),
        args=list(layers.tokens.values()) + deleted,
        provenance=prov,
        findings=[],
    )
    return _checked(new, gpu_count_ok=True, memory_check="memory_check" not in job.provenance.get("job", {}))
