import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bridge_launch.backends.slurm import image_import
from bridge_launch.core import image_cache
from conftest import run_cli, write
from launch_jobs import step_words

DIGEST = "sha256:" + "ab" * 32


def _run_import(script: str, job_id: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-s"],
        input=script,
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, SLURM_JOB_ID=str(job_id)),
    )


def test_submit_starts_from_the_cached_squashfs(home):
    image_cache.remember(
        "gb200-8",
        "nvcr.io#nvidia/nemo:26.10",
        {
            "digest": DIGEST,
            "squashfs": f"/lustre/fsw/enroot-cache/sha256-{'ab' * 32}.sqsh",
            "cache_dir": "/lustre/fsw/enroot-cache",
            "source": "nvcr.io#nvidia/nemo:26.10",
        },
    )
    d = run_cli("submit", "smoke", "-c", "gb200-8", "--dry-run", "-o", "json").json()
    assert d["container"] == f"/lustre/fsw/enroot-cache/sha256-{'ab' * 32}.sqsh"
    assert "image cache sha256:abab" in d["provenance"]["job"]["container"]
    image = f"--container-image=/lustre/fsw/enroot-cache/sha256-{'ab' * 32}.sqsh"
    assert image in step_words(d["artifact"]["text"], "image")  # the image step; the steps after it start its container
    # the user may write the registry either way; a record for another profile or cache is not used
    same = run_cli(
        "submit", "smoke", "-c", "gb200-8", "--container", "nvcr.io#nvidia/nemo:26.10", "--dry-run", "-o", "json"
    ).json()
    assert same["container"] == d["container"]
    other = run_cli("submit", "smoke", "-c", "gb200-32", "--dry-run", "-o", "json").json()
    assert other["container"] == "nvcr.io/nvidia/nemo:26.10"
    write(home / "clusters" / "gb200-8-moved.toml", 'extends = "gb200-8"\nname = "gb200-8-moved"\n')
    image_cache.remember(
        "gb200-8-moved",
        "nvcr.io#nvidia/nemo:26.10",
        {"digest": DIGEST, "squashfs": "/old/x.sqsh", "cache_dir": "/old", "source": "nvcr.io#nvidia/nemo:26.10"},
    )
    assert (
        run_cli("submit", "smoke", "-c", "gb200-8-moved", "--dry-run", "-o", "json").json()["container"]
        == "nvcr.io/nvidia/nemo:26.10"
    )
    lepton = run_cli("submit", "smoke", "-c", "lepton-gb200", "--dry-run", "-o", "json").json()
    assert lepton["container"] == "nvcr.io/nvidia/nemo:26.10"


@pytest.mark.usefixtures("home")
def test_a_damaged_record_is_one_line():
    (Path(os.environ["BRIDGE_LAUNCH_HOME"])).mkdir(parents=True, exist_ok=True)
    (Path(os.environ["BRIDGE_LAUNCH_HOME"]) / "images.json").write_text("{not json")
    r = run_cli("submit", "smoke", "-c", "gb200-8", "--dry-run")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and "images.json" in r.err


def test_import_job_is_keyed_by_digest_and_safe_when_two_race(tmp_path):
    """The import job's own script (a squashfs file as the image: hash, copy, hard link), run
    eight times at once: every run reports the same digest and file, one file remains, no partials."""
    src = tmp_path / "img.sqsh"
    src.write_bytes(os.urandom(3 << 20))
    cache = tmp_path / "cache"
    script = image_import.import_script(str(src), str(cache))
    with ThreadPoolExecutor(8) as pool:
        procs = list(pool.map(lambda i: _run_import(script, 100 + i), range(8)))
    results = [image_import.parse_result(p.stdout) for p in procs]
    assert all(p.returncode == 0 for p in procs), [p.stderr for p in procs]
    import hashlib

    digest = "sha256:" + hashlib.sha256(src.read_bytes()).hexdigest()
    assert {r[0] for r in results} == {digest} and {r[1] for r in results} == {str(cache / f"sha256-{digest[7:]}.sqsh")}
    assert sum(r[2] == "imported" for r in results) >= 1
    assert sorted(p.name for p in cache.iterdir()) == [f"sha256-{digest[7:]}.sqsh"]
    assert (cache / f"sha256-{digest[7:]}.sqsh").read_bytes() == src.read_bytes()
    again = _run_import(script, 200)
    assert image_import.parse_result(again.stdout)[2] == "cached"
    # a tag that moved is a new digest, so a new file beside the old one
    src.write_bytes(os.urandom(1 << 20))
    moved = image_import.parse_result(_run_import(script, 201).stdout)
    assert moved[0] != digest and len(list(cache.iterdir())) == 2


def test_import_failure_reports_enroots_line():
    out = (
        "[INFO] Querying registry for permission grant\n[INFO] Authenticating with user: <anonymous>\n"
        "curl: (6) Could not resolve host: nvcr.io\n[ERROR] URL https://nvcr.io/v2/ returned error code: 6\n"
        "enroot digest failed\n"
    )
    assert image_import.failure_line(out) == "curl: (6) Could not resolve host: nvcr.io"
    assert image_import.parse_result(out) is None


def test_image_import_refuses_profiles_it_cannot_use(home):
    r = run_cli("image", "import", "nvcr.io/nvidia/nemo:26.10", "-c", "local-slurm")
    assert r.code == 2 and "bare processes" in r.err and len(r.err.strip().splitlines()) == 1  # the error alone
    r = run_cli("image", "import", "nvcr.io/nvidia/nemo:26.10", "-c", "lepton-gb200")
    assert r.code == 2 and "lepton" in r.err
    write(home / "clusters" / "nocache.toml", 'extends = "gb200-8"\n[slurm]\nimage_cache = ""\n')
    r = run_cli("image", "import", "nvcr.io/nvidia/nemo:26.10", "-c", "nocache")
    assert r.code == 2 and "image_cache" in r.err
    r = run_cli("image", "import", "img.sqsh", "-c", "gb200-8")
    assert r.code == 2 and "absolute path" in r.err
