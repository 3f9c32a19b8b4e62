"""Side effects: state the traced function rebinds (`self.total = self.total + x`,
`state["m"] = ...`, a counter in a custom optimizer's step). `Snapshot` records the entries
of the containers and objects reachable before the trace, so that what the trace rebound is
found, undone and reported (`refuse_rebinding`); `traced_leftovers` finds traced tensors
stored where the snapshot did not look. (Split from tracer.discover, which finds what a
trace read; the walk's rules - which objects, how deep - are that module's.)
"""
from __future__ import annotations

import collections
import functools
import os
import types

from eager.nn.module import Module
from eager.optim import Optimizer
from eager.tensor import Tensor

from .discover import (MAX_DEPTH, Recorder, _MODULE_STORES, _OPTIMIZER_STATE,
                       _named_modules, _plain_object)
from .guards import is_scalar

class Snapshot:
    """The entries of the containers and objects reachable before the trace, to find (and
    undo) what the traced function rebound."""

    def __init__(self, roots, sizes: bool = False):
        """`sizes`: also note the keys of dicts and the lengths of lists (for the copies of
        container arguments the function gets; appending to an outside list is a Python
        side effect made while tracing only, as documented)."""
        self.note_sizes = sizes
        self.entries: list = []   # (source, container, key, kind, value before)
        self.sizes: dict = {}     # id -> (list or dict, its length before)
        # (opt.state, {param: (its state dict, a copy of it)}) of each optimizer reached
        self.optimizer_states: list = []
        self._seen: set = set()
        for desc, obj in roots:
            self._take(desc, obj, 0)

    def _take(self, source, obj, depth):
        if depth > MAX_DEPTH or id(obj) in self._seen:
            return
        if isinstance(obj, Optimizer):
            self._seen.add(id(obj))
            state = obj.__dict__.get("state")
            if isinstance(state, dict):
                self.optimizer_states.append(
                    (state, {p: (s, dict(s)) for p, s in state.items() if isinstance(s, dict)}))
            # (a custom optimizer's own attributes: `self.count += 1` in its step)
            for k, v in list(vars(obj).items()):
                if k not in _OPTIMIZER_STATE and not k.startswith("_"):
                    self.entries.append((f"{source}.{k}", obj, k, "attr", v))
                    self._take(f"{source}.{k}", v, depth + 1)
            return
        if isinstance(obj, (Tensor, types.ModuleType, type)) or is_scalar(obj):
            return
        self._seen.add(id(obj))
        if isinstance(obj, Module):
            for path, m in _named_modules(obj, source):
                self._seen.add(id(m))
                for store in ("_buffers", "_parameters"):
                    for k, v in list(m.__dict__[store].items()):
                        self.entries.append((f"{path}.{k}", m.__dict__[store], k, "item", v))
                for k, v in list(m.__dict__.items()):
                    if k not in _MODULE_STORES:
                        self.entries.append((f"{path}.{k}", m, k, "attr", v))
                        self._take(f"{path}.{k}", v, depth + 1)
        elif isinstance(obj, dict):
            self.sizes[id(obj)] = (obj, len(obj))
            # (its keys too: a key added inside - d["y"] = ... - is a change eager makes
            # at every call)
            if self.note_sizes:
                self.entries.append((f"{source} (a key added or removed)", obj, None,
                                     "keys", tuple(obj)))
            for k, v in list(obj.items()):
                self.entries.append((f"{source}[{k!r}]", obj, k, "item", v))
                self._take(f"{source}[{k!r}]", v, depth + 1)
        elif isinstance(obj, list):
            self.sizes[id(obj)] = (obj, len(obj))
            # (its length first: restored before its items; acc.append(...) changes it)
            if self.note_sizes:
                self.entries.append((f"{source} (its length)", obj, None, "len", len(obj)))
            for i, v in enumerate(list(obj)):
                self.entries.append((f"{source}[{i}]", obj, i, "item", v))
                self._take(f"{source}[{i}]", v, depth + 1)
        elif isinstance(obj, tuple):
            for i, v in enumerate(obj):
                self._take(f"{source}[{i}]", v, depth + 1)
        elif _plain_object(obj):
            for k, v in list(vars(obj).items()):
                self.entries.append((f"{source}.{k}", obj, k, "attr", v))
                self._take(f"{source}.{k}", v, depth + 1)

    def resized(self) -> set:
        """ids of the lists and dicts the traced code itself grew or shrank (`calls.append`):
        a side effect made while tracing only, so their size is no guard of the trace."""
        return {k for k, (obj, n) in self.sizes.items() if len(obj) != n}

    def changes(self) -> list:
        """(source, container, key, kind, value before) of every entry now different."""
        out = []
        for entry in self.entries:
            _source, obj, key, kind, before = entry
            if kind in ("keys", "len"):
                if (tuple(obj) if kind == "keys" else len(obj)) != before:
                    out.append(entry)
                continue
            try:
                now = obj[key] if kind == "item" else obj.__dict__.get(key, _GONE)
            except (KeyError, IndexError):
                now = _GONE
            if now is not before and not (is_scalar(now) and is_scalar(before)
                                          and now.__class__ is before.__class__
                                          and now == before):
                out.append(entry)
        return out

    @staticmethod
    def restore(changes):
        for _source, obj, key, kind, before in changes:
            if kind == "keys":
                for k in [k for k in obj if k not in set(before)]:
                    del obj[k]  # (removed keys come back with their item entries)
            elif kind == "len":
                del obj[before:]
                obj.extend([None] * (before - len(obj)))  # (its items entries refill these)
            elif kind == "item":
                obj[key] = before
            else:
                obj.__dict__[key] = before

    def restore_optimizer_state(self):
        """Each optimizer's state as it was before the trace: the entries a traced first
        step made go, for a call that then raised (eager's failing call makes none)."""
        _restore_optimizer_states(self.optimizer_states)

    def optimizer_undo(self):
        """A callable putting back what the trace added to optimizer state (for its first
        run, if that raises), or None when it added nothing. It holds only the changed
        optimizers' pre-trace entries, not the snapshot: the rest of the state seen before
        the trace (every module attribute, container entry, unchanged optimizer) is free
        to go as soon as the trace is made."""
        # (an optimizer's state changed when the trace added to it: first-step moments)
        changed = [(state, before) for state, before in self.optimizer_states
                   if state.keys() != before.keys() or any(
                       s.keys() != copy.keys() for s, copy in before.values())]
        if not changed:
            return None
        return functools.partial(_restore_optimizer_states, changed)


def _restore_optimizer_states(optimizer_states) -> None:
    for state, before in optimizer_states:
        for p in [p for p in state if p not in before]:
            del state[p]
        for p, (s, copy) in before.items():
            s.clear()
            s.update(copy)
            state[p] = s


_GONE = object()


def traced_leftovers(roots, captured_ids) -> list:
    """Sources of traced tensors stored into reachable state the snapshot did not cover."""
    from .trace import TracedValue

    found = []
    walker_seen = set()

    def visit(source, obj, depth):
        if depth > MAX_DEPTH or id(obj) in walker_seen:
            return
        walker_seen.add(id(obj))
        if isinstance(obj, Tensor):
            if obj._data.__class__ is TracedValue:
                found.append(source)
            return
        if isinstance(obj, Module):
            for path, m in _named_modules(obj, source):
                for store in ("_buffers", "_parameters"):
                    for k, v in m.__dict__[store].items():
                        visit(f"{path}.{k}", v, depth + 1)
        elif isinstance(obj, dict):
            for k, v in list(obj.items()):
                visit(f"{source}[{k!r}]", v, depth + 1)
        elif isinstance(obj, (list, tuple, collections.deque)):
            for i, v in enumerate(list(obj)):
                visit(f"{source}[{i}]", v, depth + 1)
        elif _plain_object(obj):
            for k, v in list(vars(obj).items()):
                visit(f"{source}.{k}", v, depth + 1)

    for desc, obj in roots:
        visit(desc, obj, 0)
    return found


class StateRebound(Exception):
    """The traced function rebinds outside state; `.message` says where (see
    `refuse_rebinding`). Function runs such a call eagerly, or raises a TracingError under
    fullgraph=True."""

    def __init__(self, message):
        super().__init__(message)
        self.message = message


def _where_defined(fn) -> str:
    code = getattr(fn, "__code__", None)
    if code is None:
        code = getattr(getattr(type(fn), "forward", None), "__code__", None)
    if code is None:
        return "<unknown>"
    return f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}"


def refuse_rebinding(fn, name, changes, recorder: Recorder, roots):
    """Raise StateRebound (or TracingError when it cannot be undone) if the trace rebound
    reachable state: a trace would make that change once, eager at every call."""
    from .trace import TracingError

    if changes:
        what = []
        for source, obj, key, _kind, _before in changes[:4]:
            loc = recorder.setattr_lines.get((id(obj), key)) or _where_defined(fn)
            what.append(f"{loc}: {source}")
        raise StateRebound(
            f"{'; '.join(what)}: {name} rebinds this outside state while tracing; a trace "
            f"would make that change only once. These arguments run eagerly (as written). To "
            f"compile it, update the state in place (buf.copy_(new), buf.mul_(0.5).add_(g)) "
            f"or return the new value and assign it outside the function")
    leftovers = traced_leftovers(roots, set())
    if leftovers:
        raise TracingError(
            f"{_where_defined(fn)}: {name} stores a traced tensor into "
            f"{', '.join(leftovers[:4])}, which tracing cannot undo; update the state in "
            f"place (copy_) or return the value")
