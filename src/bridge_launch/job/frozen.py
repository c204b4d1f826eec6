"""Read-only containers for the resolved job: a dict and a list that refuse every change, deeply.

They are dict and list subclasses, so JSON, `dict(x)`, `{**x}`, `x + [...]` and comparisons with
plain dicts and lists work as before; `thaw` gives back plain, mutable copies (ResolvedJob.to_dict)."""

from __future__ import annotations


class FrozenError(TypeError):
    """A change to a resolved job: build a new one instead (dataclasses.replace)."""


def _refuse(self, *_a, **_k):
    raise FrozenError(f"a resolved job's {type(self).__name__} cannot be changed; build a new job instead")


class FrozenDict(dict):
    """A dict whose values are frozen too and that refuses every change."""

    __slots__ = ()

    def __init__(self, *args, **kwargs):
        dict.__init__(self, *args, **kwargs)
        for key, value in dict.items(self):
            dict.__setitem__(self, key, freeze(value))

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self):  # copy, deepcopy and pickle build a new one rather than filling it in
        return (type(self), (dict(self),))

    def __repr__(self) -> str:
        return dict.__repr__(self)


class FrozenList(list):
    """A list whose items are frozen too and that refuses every change."""

    __slots__ = ()

    def __init__(self, items=()):
        list.__init__(self, (freeze(x) for x in items))

    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = clear = extend = insert = pop = remove = reverse = sort = _refuse

    def __reduce__(self):
        return (type(self), (list(self),))

    def __repr__(self) -> str:
        return list.__repr__(self)


def freeze(value):
    """`value` with every dict and list in it (tuples' items included) read-only."""
    if isinstance(value, (FrozenDict, FrozenList)):
        return value
    if isinstance(value, dict):
        return FrozenDict(value)
    if isinstance(value, list):
        return FrozenList(value)
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(freeze(x) for x in value)
    return value


def thaw(value):
    """A plain, mutable copy of a frozen value (and of plain dicts and lists in it)."""
    if isinstance(value, dict):
        return {thaw(k): thaw(v) for k, v in value.items()}
    if isinstance(value, list):
        return [thaw(x) for x in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(thaw(x) for x in value)
    return value
