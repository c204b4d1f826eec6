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


def step_words(text: str, array: str = "train") -> list[str]:
    """The words of one of a batch script's steps (`train`, `health`, `image` or `step`: srun's options for
    both), as bash splits them with the batch shell's variables left in place, srun's shared options
    and the container's variable names (env_names) filled in."""
    import re
    import shlex

    def body(name):
        m = re.search(rf"^{name}=\(\n(.*?)\n\)$", text, re.S | re.M) or re.search(rf"^{name}=\((.*)\)$", text, re.M)
        assert m, f"no {name}=( ... ) in the script"
        return shlex.split(m.group(1))

    names = ",".join(v for _, v in re.findall(r"^env_names(\+?)=,?(\S+)$", text, re.M))
    out = []
    for word in body(array):
        if word == "${step[@]}":
            out += body("step")
        else:
            out.append(word.replace("$env_names", names))
    return out
