"""recipes/, clusters/ and each revision's schema ship inside the wheel, and the installed package finds them there."""

import json
import os
import subprocess
import sys
import zipfile

import pytest

from conftest import REPO

pytestmark = pytest.mark.slow


def test_wheel_carries_recipes_and_clusters(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
        check=True,
        capture_output=True,
    )
    wheel = next(tmp_path.glob("bridge_launch-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(p.name for p in (REPO / "recipes").glob("*.toml"))
    for name in shipped:
        assert f"bridge_launch/_data/recipes/{name}" in names
    for p in (REPO / "recipes" / "overlays").glob("*.toml"):
        assert f"bridge_launch/_data/recipes/overlays/{p.name}" in names
    for p in (REPO / "clusters").glob("*.toml"):
        assert f"bridge_launch/_data/clusters/{p.name}" in names
    schemas = sorted(
        p.name for p in (REPO / "src" / "bridge_launch" / "spec" / "schema").glob("config_container-*.json")
    )
    assert len(schemas) == 3  # one per pinned Megatron-Bridge revision (core/upstream.py)
    for name in schemas:
        assert f"bridge_launch/spec/schema/{name}" in names
    assert "bridge_launch/workloads/smoke.py" in names
    assert any(n.endswith("entry_points.txt") for n in names)

    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    env = dict(
        os.environ,
        PYTHONPATH=str(site),
        BRIDGE_LAUNCH_HOME=str(tmp_path / "state"),
        XDG_CONFIG_HOME=str(tmp_path / "cfg"),
    )
    out = subprocess.run(
        [sys.executable, "-c", "import bridge_launch.core.paths as p; print(p.data_dir())"],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    ).stdout.strip()
    assert out == str(site / "bridge_launch" / "_data")
    r = subprocess.run(
        [sys.executable, "-m", "bridge_launch.cli.app", "recipes", "list", "-o", "json"],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    concrete = [p.stem for p in (REPO / "recipes").glob("*.toml") if "abstract = true" not in p.read_text()]
    assert sorted(x["name"] for x in json.loads(r.stdout)) == sorted(concrete)
