import pytest

from bridge_launch import backends
from bridge_launch.resolve import resolver as resolve


@pytest.mark.usefixtures("home")
def test_dry_run_artifact_equals_submitted_one_once_the_id_is_filled_in():
    job = resolve.resolve("smoke", resolve.Options(cluster="gb200-32"))
    shown = backends.render(job).text
    real = backends.render(job.with_run_id("smoke-1130-abcd")).text
    assert shown.replace(resolve.RUN_ID_PLACEHOLDER, "smoke-1130-abcd") == real
