"""topology.py places the rank groups with plain arithmetic (the --dry-run path cannot import
megatron-core); here it is held equal to megatron-core's own RankGenerator over many layouts,
and the arithmetic path is shown to import neither megatron nor torch."""

import itertools
import subprocess
import sys
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge_launch.plan import topology

mc = pytest.importorskip("megatron.core.parallel_state")


def _generator():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.parallel_state import RankGenerator
    return RankGenerator


TOKENS = ("tp", "cp", "ep", "dp", "pp", "tp-cp", "dp-cp", "tp-dp", "tp-pp", "tp-cp-ep-dp-pp", "cp-dp-pp", "ep-dp")


def _compare(tp, ep, dp, pp, cp, order=topology.ORDER):
    RankGenerator = _generator()
    theirs = RankGenerator(tp=tp, ep=ep, dp=dp, pp=pp, cp=cp, order=order)
    for token in TOKENS:
        assert topology.generator_groups(tp, ep, dp, pp, cp, token, order) == theirs.get_ranks(token), (
            tp,
            ep,
            dp,
            pp,
            cp,
            token,
        )


# every dense layout (EP 1) and expert layout (CP 1) of up to 64 ranks with sizes from {1, 2, 3, 4, 8}
SIZES = (1, 2, 3, 4, 8)
LAYOUTS = [
    (tp, ep, dp, pp, cp)
    for tp, ep, dp, pp, cp in itertools.product(SIZES, repeat=5)
    if (ep == 1 or cp == 1) and tp * ep * dp * pp * cp <= 64
]


def test_arithmetic_equals_rank_generator_on_the_whole_grid():
    for layout in LAYOUTS:
        _compare(*layout)
    assert len(LAYOUTS) > 500


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(1, 16),
    st.integers(1, 16),
    st.integers(1, 16),
    st.integers(1, 8),
    st.integers(1, 16),
    st.booleans(),
    st.sampled_from(["tp-cp-ep-dp-pp", "tp-dp-pp", "tp-pp-dp", "tp-cp-ep-pp-dp"]),
)
def test_arithmetic_equals_rank_generator_random(tp, ep, dp, pp, cp, expert, order):
    if expert:
        cp = 1
    else:
        ep = 1
    if tp * ep * dp * pp * cp > 4096 or (("cp" not in order and cp > 1) or ("ep" not in order and ep > 1)):
        return
    _compare(tp, ep, dp, pp, cp, order)


def test_rank_groups_of_a_job_layout_match_plans_megatron_groups():
    from bridge_launch.plan import estimate as plan

    for world, tp, pp, cp, ep, etp in [
        (32, 2, 1, 8, 16, 1),
        (144, 1, 1, 1, 16, 1),
        (64, 2, 2, 2, 4, 2),
        (2304, 4, 4, 2, 64, 1),
    ]:
        par = topology.Parallel(
            world=world,
            tp=tp,
            pp=pp,
            cp=cp,
            ep=ep,
            etp=etp,
            dp=world // (tp * pp * cp),
            edp=world // (etp * ep * pp),
            vpp=None,
            sp=False,
        )
        assert topology.rank_groups(par) == plan.rank_groups(par)[0]


@pytest.mark.usefixtures("home")
def test_the_arithmetic_path_imports_no_megatron_or_torch():
    code = (
        "import sys; from bridge_launch.resolve import resolver as resolve; "
        "j = resolve.resolve('qwen35-vl-sft', resolve.Options(cluster='gb200-32')); "
        "from bridge_launch import backends; backends.render(j); "
        "assert j.errors == [], j.errors; "
        "print(sorted(m for m in ('megatron', 'megatron.core', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
