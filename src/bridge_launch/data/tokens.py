"""Sequence length of one sample as the Qwen-VL task encoder will see it: text tokens + visual tokens.

Visual tokens follow the Qwen2/3-VL image processor's `smart_resize`: each side is rounded to a
multiple of factor = patch_size x spatial_merge_size, then the image is scaled (keeping the aspect
ratio, sides still multiples of factor) into [min_pixels, max_pixels]; tokens = h x w / factor^2.
Processor settings for Qwen3.5-VL: patch_size 16, spatial_merge_size 2, from Megatron-Bridge
src/megatron/bridge/models/qwen_vl/qwen35_vl_provider.py (`patch_size: int = 16`,
`spatial_merge_size: int = 2`), the same values as Qwen3-VL's provider. The per-sample budget
(`max_visual_tokens`) and `max_num_images` make the task encoder skip a sample (QwenVLTaskEncoder
raises SkipSample), so such samples are counted and left out of the packing simulation."""

from __future__ import annotations

import math
from pathlib import Path

from bridge_launch.core.errors import LaunchError, UsageError

QWEN35_VL = {
    "patch_size": 16,
    "spatial_merge_size": 2,
    "source": "Megatron-Bridge models/qwen_vl/qwen35_vl_provider.py: patch_size=16, spatial_merge_size=2",
}
# ChatML as Qwen renders it: "<|im_start|>role\n" ... "<|im_end|>\n" -> about 5 tokens per message,
# and "<|vision_start|>" + image pads + "<|vision_end|>" -> 2 tokens per image besides its visual tokens.
PER_MESSAGE_TOKENS = 5
PER_IMAGE_MARKER_TOKENS = 2
BYTES_PER_TOKEN = 4.0  # the estimate without a tokenizer: ~4 bytes of English per BPE token


def smart_resize(h: int, w: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    if h <= 0 or w <= 0:
        raise ValueError(f"image size {w}x{h} is empty")
    hb = max(factor, round(h / factor) * factor)
    wb = max(factor, round(w / factor) * factor)
    if hb * wb > max_pixels:
        beta = math.sqrt(h * w / max_pixels)
        hb = max(factor, math.floor(h / beta / factor) * factor)
        wb = max(factor, math.floor(w / beta / factor) * factor)
    elif hb * wb < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        hb = math.ceil(h * beta / factor) * factor
        wb = math.ceil(w * beta / factor) * factor
    return hb, wb


def image_tokens(w: int, h: int, *, min_pixels: int, max_pixels: int, patch_size: int = 16, merge_size: int = 2) -> int:
    factor = patch_size * merge_size
    hb, wb = smart_resize(h, w, factor, min_pixels, max_pixels)
    return (hb * wb) // (factor * factor)


def chatml_text(messages) -> str:
    """The conversation's text parts, one message per line (image placeholders dropped)."""
    out = []
    for m in messages:
        parts = m.get("content") if isinstance(m, dict) else None
        parts = parts if isinstance(parts, list) else [parts]
        text = "".join(p.get("text", "") if isinstance(p, dict) else (p or "") for p in parts)
        out.append(f"{m.get('role', '') if isinstance(m, dict) else ''}\n{text}")
    return "\n".join(out)


class TextCounter:
    """Exact with a local tokenizer directory (tokenizer.json, via the `tokenizers` library), else an estimate."""

    def __init__(self, tokenizer: str | None = None):
        self.exact = tokenizer is not None
        self._tok = None
        if tokenizer:
            p = Path(tokenizer)
            f = p / "tokenizer.json" if p.is_dir() else p
            if not f.is_file():
                raise UsageError(f"--tokenizer {tokenizer}: no tokenizer.json there (give a local tokenizer directory)")
            try:
                from tokenizers import Tokenizer
            except ImportError:
                raise LaunchError("--tokenizer needs the 'tokenizers' package: pip install tokenizers") from None
            self._tok = Tokenizer.from_file(str(f))

    def count(self, messages, n_images: int) -> int:
        text = chatml_text(messages)
        if self._tok is not None:
            body = len(self._tok.encode(text, add_special_tokens=False).ids)
        else:
            body = math.ceil(len(text.encode("utf-8")) / BYTES_PER_TOKEN)
        return body + PER_MESSAGE_TOKENS * len(messages) + PER_IMAGE_MARKER_TOKENS * n_images
