"""Parallel layouts and resolved jobs for plan's tests."""

from bridge_launch.plan import estimate as plan
from bridge_launch.resolve import resolver as resolve


def par(world, tp=1, pp=1, cp=1, ep=1, etp=None, sp=False, vpp=None):
    etp = tp if etp is None else etp
    return plan.Parallel(
        world=world,
        tp=tp,
        pp=pp,
        cp=cp,
        ep=ep,
        etp=etp,
        dp=world // (tp * pp * cp),
        edp=world // (etp * ep * pp),
        vpp=vpp,
        sp=sp,
    )


def job(recipe, cluster, *overrides, nodes=None, overlays=()):
    return resolve.resolve(
        recipe, resolve.Options(cluster=cluster, overrides=overrides, nodes=nodes, overlays=overlays)
    )
