"""Tracked Python state a trace read or wrote: an optimizer's param groups.

User code and optimizers read hyperparameters from dicts (``group["lr"]``) that may
change between calls. eager.dispatch.read_item tells the trace how each read is used:
numbers fed to tensor math become per-call inputs (tracer.trace.LiveScalar); values that
decide what the code does are guarded here, by value or by truth, so a call that sees
another one traces again. Writes the traced code makes (``group["lr"] = lr_now`` inside a
compiled step) are replayed at the end of every call, as running the Python would do.
"""
from __future__ import annotations

import math
from numbers import Number

_MISSING = object()
_get = dict.get


def plain_value(value) -> bool:
    """A Python value a trace may compare and replay: numbers, strings, None, tuples."""
    if value is None or isinstance(value, (bool, str, Number)):
        return not hasattr(value, "_data")
    if isinstance(value, tuple):
        return all(plain_value(v) for v in value)
    return False


def describe_item(container, key) -> str:
    return f"{getattr(container, 'name', None) or 'a dict'}[{key!r}]"


def _same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


class ItemGuard:
    """One read of tracked state the trace depends on: `container[key]` as `how` saw it."""

    __slots__ = ("container", "key", "how", "value", "label", "where", "_plain")

    def __init__(self, container, key, how, value, label, where):
        self.container = container
        self.key = key
        self.how = how
        self.value = value
        self.label = label
        self.where = where
        self._plain = plain_value(value)

    def check_source(self, k: int, ns: dict) -> list:
        """Lines of a generated check (in a function returning `miss` on failure) that pass
        exactly when `failure()` is None; names it needs are put in `ns`."""
        ns.update({f"IC{k}": self.container, f"IK{k}": self.key, f"IV{k}": self.value,
                   "item_get": _get, "item_missing": _MISSING, "item_same": _same})
        get = f"item_get(IC{k}, IK{k}, item_missing)"
        if self.how == "truth":
            test = f"cur is item_missing or {'not ' if self.value else ''}cur"
        elif self._plain:
            test = f"cur is not IV{k} and not item_same(cur, IV{k})"
        else:
            test = f"cur is not IV{k}"
        return [f"    cur = {get}", f"    if {test}:", "        return MISS"]

    def failure(self):
        """None while the current value satisfies the guard, else what changed."""
        current = _get(self.container, self.key, _MISSING)
        if current is _MISSING:
            return f"{self.label} was removed"
        if self.how == "truth":
            if bool(current) != bool(self.value):
                return (f"{self.label} is now {current!r} (the trace took the branch for "
                        f"{self.value!r}, at {self.where})")
            return None
        if self._plain:
            if not _same(current, self.value):
                return f"{self.label}: {self.value!r} -> {current!r} (read at {self.where})"
        elif current is not self.value:
            return f"{self.label} now holds another object (read at {self.where})"
        return None


class ItemState:
    """The guards and writes of one trace's tracked state (empty for most traces)."""

    __slots__ = ("guards", "writes")

    def __init__(self, guards=(), writes=()):
        self.guards = tuple(guards)
        self.writes = tuple(writes)

    def __bool__(self) -> bool:
        return bool(self.guards or self.writes)

    def failure(self):
        for g in self.guards:
            why = g.failure()
            if why is not None:
                return why
        return None

    def replay(self) -> None:
        put = dict.__setitem__
        for container, key, value in self.writes:
            put(container, key, value)


__all__ = ["ItemGuard", "ItemState", "plain_value", "describe_item"]
