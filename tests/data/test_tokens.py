from __future__ import annotations

import pytest

from bridge_launch.data import source, tokens

# an isolated state dir for every test here
pytestmark = pytest.mark.usefixtures("home")

pytest.importorskip("PIL")


@pytest.mark.parametrize(
    "ref",
    [
        "a/b.jpg",
        "./a/b.jpg",
        "a//b.jpg",
        "a/./b.jpg",
        "a\\b.jpg",
        "a/b/",
        "/abs/x.png",
        "//net/x",
        "a/..",
        ".",
        "",
        "../up.jpg",
        "a/.hidden",
        "a/b/.",
        "././a",
        "x.jpg",
    ],
)
def test_normalize_is_pure_posix_path(ref):
    from pathlib import PurePosixPath

    assert source._normalize(ref) == PurePosixPath(ref.replace("\\", "/")).as_posix()


def test_smart_resize_and_visual_tokens():
    # 1024x768 = 786432 px > max 401408: scaled down, sides multiples of 32
    h, w = tokens.smart_resize(768, 1024, 32, 200704, 401408)
    assert (h, w) == (
        544,
        704,
    ) and h * w <= 401408  # beta = sqrt(786432/401408); floor(768/beta/32)*32, floor(1024/beta/32)*32
    assert tokens.image_tokens(1024, 768, min_pixels=200704, max_pixels=401408) == 544 * 704 // 1024 == 374
    # 64x48 is scaled up into min_pixels: ceil to multiples of 32
    h, w = tokens.smart_resize(48, 64, 32, 200704, 401408)
    assert h * w >= 200704 and (h, w) == (416, 544)
    # in-bounds image: only rounded to the factor
    assert tokens.smart_resize(480, 640, 32, 200704, 401408) == (480, 640)
    assert tokens.image_tokens(640, 480, min_pixels=200704, max_pixels=401408) == 300
