"""Resolving a recipe on a profile and writing user profiles, for the rendering tests of every backend."""

from bridge_launch.resolve import resolver as resolve
from conftest import write


def _job(recipe="smoke", cluster="gb200-8", *overrides, **opts):
    return resolve.resolve(recipe, resolve.Options(cluster=cluster, overrides=tuple(overrides), **opts))


def _profile(home, name, text):
    """A user profile, written and seen (the catalog is cached per process)."""
    from bridge_launch.spec import clusters

    write(home / "clusters" / f"{name}.toml", f'name = "{name}"\n' + text)
    clusters.catalog.cache_clear()
