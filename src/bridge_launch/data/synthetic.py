"""A small source tree in the Nemotron-Image-Training-v3 layout, with real PNG/JPEG images.

Used by the tests and bench/data_speed.py (no download is possible here)."""

from __future__ import annotations

import io
import json
import random
import tarfile
from pathlib import Path


def make_image(rng: random.Random, fmt: str, size: tuple[int, int], noisy: bool = False) -> bytes:
    """A small picture; `noisy` fills it with random pixels instead (incompressible: a 200x200 PNG is
    about 120 kB, like a real photo, where the flat ones stay far below 64 KiB)."""
    from PIL import Image

    if noisy:
        buf = io.BytesIO()
        Image.frombytes("RGB", size, rng.randbytes(size[0] * size[1] * 3)).save(buf, format=fmt)
        return buf.getvalue()
    img = Image.new("RGB", size, (rng.randrange(256), rng.randrange(256), rng.randrange(256)))
    # a few shapes so JPEG sizes are not trivial
    from PIL import ImageDraw

    d = ImageDraw.Draw(img)
    for _ in range(3):
        x, y = rng.randrange(size[0]), rng.randrange(size[1])
        d.ellipse([x, y, x + size[0] // 4, y + size[1] // 4], fill=(rng.randrange(256), 0, rng.randrange(256)))
    buf = io.BytesIO()
    img.save(buf, format=fmt, **({"quality": 85} if fmt == "JPEG" else {}))
    return buf.getvalue()


def make_source(
    root: Path,
    subset: str = "clevr_2",
    n: int = 40,
    *,
    seed: int = 0,
    max_images: int = 2,
    sizes=((64, 48), (320, 240), (1024, 768)),
    images_per_tar: int | None = None,
    distinct_images: int | None = None,
    noisy_every: int | None = None,
) -> Path:
    """Write <root>/<subset>/<subset>.jsonl and <root>/<subset>/media/shard_NNNNNN.tar; returns root.

    distinct_images: encode only this many images and reuse them (fast for large benches);
    noisy_every: every Nth image is random noise at 200x200 (large, incompressible)."""
    rng = random.Random(seed)
    sdir = Path(root) / subset
    (sdir / "media").mkdir(parents=True, exist_ok=True)
    records, images = [], []
    cache = []
    for i in range(n):
        content = []
        for j in range(rng.randint(1, max_images)):
            name = f"images/{i:06d}_{j}.{'png' if (i + j) % 2 else 'jpg'}"
            if distinct_images and len(cache) >= distinct_images:
                data = cache[(i + j) % len(cache)]
            else:
                noisy = bool(noisy_every) and len(cache) % noisy_every == noisy_every - 1
                data = make_image(
                    rng,
                    "PNG" if (i + j) % 2 else "JPEG",
                    (200, 200) if noisy else sizes[rng.randrange(len(sizes))],
                    noisy,
                )
                cache.append(data)
            images.append((name, data))
            content.append({"type": "image", "image": name})
        words = " ".join(
            rng.choice(["cube", "sphere", "red", "blue", "how", "many", "objects", "left"])
            for _ in range(rng.randint(3, 30))
        )
        content.append({"type": "text", "text": f"Question {i}: {words}?"})
        records.append(
            {
                "id": f"{subset}_{i:06d}",
                "messages": [
                    {"role": "user", "content": content},
                    {"role": "assistant", "content": [{"type": "text", "text": str(rng.randint(0, 10))}]},
                ],
            }
        )
    with open(sdir / f"{subset}.jsonl", "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    per = images_per_tar or len(images) or 1
    for t, start in enumerate(range(0, max(len(images), 1), per)):
        with tarfile.open(sdir / "media" / f"shard_{t:06d}.tar", "w") as tf:
            for name, data in images[start : start + per]:
                ti = tarfile.TarInfo(name)
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
    return Path(root)
