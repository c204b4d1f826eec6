from __future__ import annotations

import pytest

# an isolated state dir for every test here
pytestmark = pytest.mark.usefixtures("home")

pytest.importorskip("PIL")


def test_cli_has_no_heavy_imports():
    import subprocess
    import sys

    code = (
        "import sys, bridge_launch.cli.datasets; "
        "print([m for m in ('megatron.energon', 'PIL', 'submitit', 'torch', 'numpy') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
