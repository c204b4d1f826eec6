"""Open a prepared dataset with Energon's own loader and measure what each sample will cost.

The training `.nv-meta/dataset.yaml` names Megatron-Bridge's ChatMLWebdataset (not importable
here), so the same shards and split.yaml are read through Energon's crude mode
(inspect_dataset.yaml, shipped next to this file) with a cooker that yields this module's sample
type; the dataset directory is not modified."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

from bridge_launch.core.errors import LaunchError, UsageError
from bridge_launch.data import packing, tokens

_CRUDE_YAML = Path(__file__).resolve().parent / "inspect_dataset.yaml"


def _splits(path: Path) -> list[str]:
    meta = path / ".nv-meta"
    if not (meta / "split.yaml").is_file() or not ((meta / ".info.json").is_file() or (meta / ".info.yaml").is_file()):
        raise UsageError(
            f"{path} is not a prepared Energon dataset (no .nv-meta/split.yaml and .info.json); "
            "create one with 'bridge-launch data prepare'"
        )
    import yaml

    parts = (yaml.safe_load((meta / "split.yaml").read_text()) or {}).get("split_parts") or {}
    return [s for s in ("train", "val", "test") if parts.get(s)] + sorted(
        s for s in parts if s not in ("train", "val", "test") and parts[s]
    )


def _make_encoder():
    from dataclasses import dataclass
    from typing import Any

    from megatron.energon import Cooker, DefaultTaskEncoder, Sample, basic_sample_keys, stateless

    @dataclass
    class InspectSample(Sample):
        imgs: Any
        conversation: Any

    @stateless
    def cook(crude):
        return InspectSample(**basic_sample_keys(crude), imgs=crude.get("jpgs"), conversation=crude.get("json"))

    class InspectEncoder(DefaultTaskEncoder):
        cookers = [Cooker(cook)]

    return InspectEncoder()


def iter_samples(path: Path, split: str, limit: int | None = None):
    """(key, [image bytes], messages) for each sample of a split, in Energon's (unshuffled) val order."""
    import logging
    import warnings

    from megatron.energon import WorkerConfig, get_loader, get_val_dataset

    logging.getLogger("megatron.energon").setLevel(logging.ERROR)
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = get_val_dataset(
        str(path),
        split_part=split,
        worker_config=wc,
        batch_size=None,
        dataset_config=str(_CRUDE_YAML),
        task_encoder=_make_encoder(),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, s in enumerate(get_loader(ds)):
            if limit is not None and i >= limit:
                return
            imgs = s.imgs
            if isinstance(imgs, (bytes, bytearray)):
                imgs = pickle.loads(imgs)
            conv = s.conversation
            if isinstance(conv, (bytes, bytearray, str)):
                import json

                conv = json.loads(conv)
            yield s.__key__, imgs, conv


def measure(
    path: Path, *, tokenizer: str | None = None, limit: int | None = None, recipe_cfg: dict | None = None
) -> dict:
    """Per split: arrays of images, text tokens, visual tokens per sample (numpy), plus skip counts."""
    import numpy as np
    from PIL import Image

    cfg = recipe_cfg or {}
    min_px = int(cfg.get("dataset.task_encoder.min_pixels", 200704))
    max_px = int(cfg.get("dataset.task_encoder.max_pixels", 401408))
    max_imgs = cfg.get("dataset.task_encoder.max_num_images", 4)
    max_vis = cfg.get("dataset.task_encoder.max_visual_tokens", 2048)
    counter = tokens.TextCounter(tokenizer)
    path = Path(path)
    out = {
        "path": str(path),
        "splits": {},
        "text_tokens_exact": counter.exact,
        "visual_token_settings": {
            "min_pixels": min_px,
            "max_pixels": max_px,
            "patch_size": tokens.QWEN35_VL["patch_size"],
            "spatial_merge_size": tokens.QWEN35_VL["spatial_merge_size"],
            "max_num_images": max_imgs,
            "max_visual_tokens": max_vis,
            "source": tokens.QWEN35_VL["source"],
        },
    }
    for split in _splits(path):
        n_img, n_txt, n_vis = [], [], []
        try:
            for key, imgs, conv in iter_samples(path, split, limit):
                vis = 0
                for b in imgs:
                    try:
                        w, h = Image.open(io.BytesIO(b)).size
                    except Exception as e:
                        raise LaunchError(f"{path} split {split} sample {key}: undecodable image ({e})") from e
                    vis += tokens.image_tokens(
                        w,
                        h,
                        min_pixels=min_px,
                        max_pixels=max_px,
                        patch_size=tokens.QWEN35_VL["patch_size"],
                        merge_size=tokens.QWEN35_VL["spatial_merge_size"],
                    )
                n_img.append(len(imgs))
                n_vis.append(vis)
                n_txt.append(counter.count(conv, len(imgs)))
        except (UsageError, LaunchError):
            raise
        except Exception as e:  # energon reports a broken shard as its own error types
            raise LaunchError(
                f"reading split {split} of {path} with Energon failed: {type(e).__name__}: "
                f"{str(e).splitlines()[0] if str(e) else ''}"
            ) from e
        n_img, n_txt, n_vis = (np.asarray(a, dtype=np.int64) for a in (n_img, n_txt, n_vis))
        skip = np.zeros(n_img.size, dtype=bool)
        if max_imgs is not None:
            skip |= n_img > int(max_imgs)
        if max_vis is not None:
            skip |= n_vis > int(max_vis)
        out["splits"][split] = {"images": n_img, "text_tokens": n_txt, "visual_tokens": n_vis, "skipped": skip}
    return out


def _stats(a) -> dict:
    import numpy as np

    if a.size == 0:
        return {"count": 0}
    q = np.quantile(a, [0.5, 0.9, 0.99])
    return {
        "count": int(a.size),
        "min": int(a.min()),
        "mean": round(float(a.mean()), 2),
        "median": float(q[0]),
        "p90": float(q[1]),
        "p99": float(q[2]),
        "max": int(a.max()),
        "sum": int(a.sum()),
    }


def report(measured: dict, *, recipe: str | None = None, recipe_cfg: dict | None = None) -> dict:
    """The JSON view: per split stats; with a recipe, the packing simulation and suggestions."""
    import numpy as np

    rep = {
        "path": measured["path"],
        "text_tokens": "exact" if measured["text_tokens_exact"] else "estimate",
        "visual_token_settings": measured["visual_token_settings"],
        "splits": {},
    }
    for split, d in measured["splits"].items():
        rep["splits"][split] = {
            "samples": int(d["images"].size),
            "skipped_by_task_encoder": int(d["skipped"].sum()),
            "images_per_sample": _stats(d["images"]),
            "text_tokens_per_sample": _stats(d["text_tokens"]),
            "visual_tokens_per_sample": _stats(d["visual_tokens"]),
            "tokens_per_sample": _stats(d["text_tokens"] + d["visual_tokens"]),
        }
    if recipe:
        cfg = recipe_cfg or {}
        seq = int(cfg.get("dataset.seq_length") or cfg.get("model.seq_length") or 0)
        buf = cfg.get("dataset.packing_buffer_size")
        missing = [
            k
            for k, v in (("dataset.seq_length or model.seq_length", seq), ("dataset.packing_buffer_size", buf))
            if not v
        ]
        if missing:
            raise UsageError(
                f"recipe {recipe!r} sets no {' and no '.join(missing)}"
                + (f" (its sequence length is {seq}; without a packing buffer native packing is off)" if seq else "")
                + "; the packing report needs a recipe with native packing (e.g. qwen35-vl-sft)"
            )
        mult = packing.pad_multiple(cfg)
        from bridge_launch.plan import rules as validate
        from bridge_launch.spec import recipes

        # a shorter sequence must still pass the job's own rule (divisible by 2*CP, and by TP with
        # sequence parallelism) and is set on both sequence lengths the recipe sets
        seq_keys = [k for k in validate.SEQ_KEYS if cfg.get(k)] or ["dataset.seq_length"]

        kind = recipes.load(recipe).get("dataset_kind") if recipe else None

        def seq_ok(sl: int) -> bool:
            return not validate.sequence_errors({**cfg, **{k: sl for k in seq_keys}}, kind=kind)

        split = "train" if "train" in measured["splits"] else next(iter(measured["splits"]))
        d = measured["splits"][split]
        lengths = (d["text_tokens"] + d["visual_tokens"])[~d["skipped"]]
        sim = packing.simulate(lengths, seq, int(buf), mult)
        rep["packing"] = {
            "recipe": recipe,
            "split": split,
            "seq_length": seq,
            "packing_buffer_size": int(buf),
            "pad_multiple": mult,
            **packing.summary(sim),
            "suggestions": packing.suggestions(
                lengths, seq, int(buf), mult, base=sim["padding_fraction"], seq_ok=seq_ok, seq_keys=seq_keys
            ),
        }
        rep["_pack_padding"] = (1.0 - sim["pack_fill"]) if sim["packs"] else np.zeros(0)
    return rep


def text_view(rep: dict, measured: dict) -> str:
    lines = [
        f"Dataset    {rep['path']}",
        f"Tokens     text {rep['text_tokens']}"
        + ("" if rep["text_tokens"] == "exact" else " (no --tokenizer: ~4 bytes per token + ChatML markers)")
        + f"; visual: pixels in [{rep['visual_token_settings']['min_pixels']}, "
        f"{rep['visual_token_settings']['max_pixels']}], "
        f"patch {rep['visual_token_settings']['patch_size']} x merge "
        f"{rep['visual_token_settings']['spatial_merge_size']}",
    ]
    for split, s in rep["splits"].items():
        d = measured["splits"][split]
        lines.append(
            f"\n{split}: {s['samples']} samples"
            + (
                f", {s['skipped_by_task_encoder']} over max_num_images/max_visual_tokens (the task encoder skips them)"
                if s["skipped_by_task_encoder"]
                else ""
            )
        )
        for title, key, arr in (
            ("images per sample", "images_per_sample", d["images"]),
            ("text tokens per sample", "text_tokens_per_sample", d["text_tokens"]),
            ("visual tokens per sample", "visual_tokens_per_sample", d["visual_tokens"]),
        ):
            st = s[key]
            if st["count"]:
                lines.append(
                    f"  {title}: mean {st['mean']}, median {st['median']:g}, p90 {st['p90']:g}, max {st['max']}"
                )
                lines += ["  " + ln for ln in packing.histogram_lines(arr, bins=10)]
    p = rep.get("packing")
    if p:
        lines.append(
            f"\nPacking ({p['recipe']}: seq_length {p['seq_length']}, packing_buffer_size {p['packing_buffer_size']}, "
            f"lengths rounded to {p['pad_multiple']}) over {p['samples']} {p['split']} samples"
        )
        if p["too_long"]:
            lines.append(f"  ! {p['too_long']} samples exceed seq_length and would fail the task encoder")
        if p["packs"]:
            lines.append(
                f"  {p['packs']} packs, {p['samples_per_pack']:.1f} samples per pack (max {p['max_samples_in_a_pack']})"
            )
            lines.append(
                f"  padding: {100 * p['padding_fraction']:.1f}% of all packed tokens; per pack median "
                f"{100 * p['pack_padding_fraction']['median']:.1f}%, max {100 * p['pack_padding_fraction']['max']:.1f}%"
            )
            lines.append("  padding fraction per packed sequence:")
            lines += ["  " + ln for ln in packing.histogram_lines(rep["_pack_padding"], bins=10)]
        sg = p["suggestions"]
        lines.append(f"  {sg['note']}")
        if sg["settings"]:
            lines.append("  settings that reduce padding:")
            width = max(len(" ".join(r["overrides"])) for r in sg["settings"][:8])
            for r in sg["settings"][:8]:
                lines.append(
                    f"    {' '.join(r['overrides']):<{width}}  padding {100 * r['padding_fraction']:5.1f}%  "
                    f"({r['samples_per_pack']:.1f} samples per pack)"
                )
        else:
            lines.append("  no larger buffer or shorter sequence reduces padding")
    return "\n".join(lines)
