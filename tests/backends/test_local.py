import re

import pytest

from bridge_launch.resolve import resolver as resolve
from conftest import REPO


@pytest.mark.usefixtures("home")
def test_local_render_is_rank_prefixed():
    job = resolve.resolve("smoke", resolve.Options())
    from bridge_launch import backends

    text = backends.render(job).text
    assert "--tee=3" in text and "export TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[rank${rank}]: '" in text


def test_local_extra_brings_numpy():
    """torch's wheel does not require numpy, yet `import torch` without it warns in every worker."""
    import tomllib

    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["local"]
    assert any(re.match(r"numpy\b", d) for d in extra), extra
