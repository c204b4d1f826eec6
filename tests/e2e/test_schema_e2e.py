"""Each pinned revision's schema file regenerated from that revision's own sources
(../shared/vendor tarballs, unpacked by scripts/bridge-env --sources) equals the shipped one."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bridge_launch.core import upstream
from bridge_launch.spec import schema
from conftest import REPO

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sources():
    out = subprocess.run(
        [str(REPO / "scripts" / "bridge-env"), "--sources"], capture_output=True, text=True, timeout=600, check=True
    ).stdout
    return dict(line.split("=", 1) for line in out.split())


@pytest.mark.parametrize("commit", sorted(upstream.REVISIONS))
def test_regeneration_matches(sources, tmp_path, commit):
    rev = upstream.revision(commit)
    out = tmp_path / "schema.json"
    subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "gen_schema.py"),
            sources[f"SRC_MEGATRON_BRIDGE_{rev.bridge[:9].upper()}"],
            sources[f"SRC_MEGATRON_LM_{rev.core[:9].upper()}"],
            "--bridge-label",
            rev.bridge,
            "--mcore-label",
            rev.core,
            "-o",
            str(out),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    fresh = json.loads(out.read_text(encoding="utf-8"))
    shipped = json.loads(schema.path(commit).read_text(encoding="utf-8"))
    assert fresh["fields"] == shipped["fields"]
    assert fresh["sections"] == shipped["sections"]
    for key in ("megatron_bridge", "megatron_core", "megatron_bridge_version", "megatron_core_version"):
        assert fresh["source"][key] == shipped["source"][key]
    assert (shipped["source"]["megatron_bridge_version"], shipped["source"]["megatron_core_version"]) == (
        rev.bridge_version,
        rev.core_version,
    )
