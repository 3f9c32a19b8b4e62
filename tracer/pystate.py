"""Tracked Python state a trace read or wrote: an optimizer's param groups.

User code and optimizers read hyperparameters from dicts (``group["lr"]``) that may
change between calls. eager.dispatch.read_item tells the trace how each read is used (the
trace protocol's read_item event, handled by `read_item` below):
numbers fed to tensor math become per-call inputs (tracer.trace.LiveScalar); values that
decide what the code does are guarded here, by value or by truth, so a call that sees
another one traces again. Writes the traced code makes (``group["lr"] = lr_now`` inside a
compiled step) are replayed at the end of every call, as running the Python would do.
"""
from __future__ import annotations

import math
from numbers import Number

from eager.dispatch import LIVE

from .errors import TracingError, _short_where, _where

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


_UNSET = object()


def read_item(trace, container, key, value, how, dtype, name):
    """A trace's read of tracked state (its protocol's `read_item`, eager.dispatch.read_item):
    a constant if the trace wrote it earlier, a per-call input if LIVE, else guarded."""
    root = trace._root()
    slot = (id(container), key)
    if slot in root.item_writes:  # written earlier in this trace: a constant
        return value
    label = name or describe_item(container, key)
    if how == LIVE:
        if isinstance(value, tuple):
            return tuple(trace.live_scalar(_item_getter(container, key, k), dtype,
                                           f"{label}[{k}]", slot + (k,))
                         for k in range(len(value)))
        return trace.live_scalar(_item_getter(container, key), dtype, label, slot)
    guard = root.item_guards.get(slot + (how,))
    if guard is None:
        root.item_guards[slot + (how,)] = ItemGuard(container, key, how, value, label,
                                                    _short_where())
    return value


def write_item(trace, container, key, value) -> None:
    """A trace's write of tracked state (eager.dispatch.note_item_write): replayed at every
    call; the value before it is put back when the trace ends (restore_items)."""
    root = trace._root()
    slot = (id(container), key)
    if not plain_value(value):
        raise TracingError(
            f"{describe_item(container, key)} is set to {type(value).__name__} inside a "
            f"traced function (at {_where()}); the trace can only write Python numbers, "
            f"strings, None and tuples of them there at every call: set it to a Python value, "
            f"or set it outside the compiled function")
    if slot not in root.item_writes:
        # The value before the trace wrote it: put back when the trace ends, so the
        # first call, like every later one, runs from the state the caller left.
        root.item_entry[slot] = (container, key, dict.get(container, key, _UNSET))
    root.item_writes[slot] = (container, key, value)


def restore_items(trace) -> None:
    """Undo the tracked writes a trace made (they are replayed by every call)."""
    for container, key, value in trace.item_entry.values():
        if value is _UNSET:
            dict.pop(container, key, None)
        else:
            dict.__setitem__(container, key, value)


def _item_getter(container, key, k=None):
    get = dict.__getitem__
    if k is None:
        return lambda: get(container, key)
    return lambda: get(container, key)[k]


__all__ = ["ItemGuard", "ItemState", "plain_value", "describe_item", "read_item",
           "write_item", "restore_items"]
