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
import io
import os
import queue
import sys
import types

from eager.nn.module import Module
from eager.optim import Optimizer
from eager.tensor import Tensor

from eager.errors import _is_library_file

from .captures import _global_names
from .discover import (MAX_DEPTH, Recorder, _MODULE_STORES, _OPTIMIZER_STATE,
                       _SKIP_PREFIXES, _named_modules, _plain_object, _user_module)
from .guards import is_scalar

class Snapshot:
    """The entries of the containers and objects reachable before the trace, to find (and
    undo) what the traced function rebound."""

    def __init__(self, roots, sizes: bool = False, functions=()):
        """`sizes`: also note the keys of dicts and the lengths of lists (for the copies of
        container arguments the function gets; appending to an outside list is a Python
        side effect made while tracing only, as documented). `functions`: the traced
        function itself, whose globals and closure variables may be rebound."""
        self.note_sizes = sizes
        self.entries: list = []   # (source, container, key, kind, value before)
        self.sizes: dict = {}     # id -> (list or dict, its length before)
        # (opt.state, {param: (its state dict, a copy of it)}) of each optimizer reached
        self.optimizer_states: list = []
        # streams (files, StringIO, sys.stdin's kind) and random generators reached: what
        # the trace reads from them is seen by tracer.host_random's hook and state check
        self.streams: list = []
        self.generators: list = []  # (source, generator)
        self._seen: set = set()
        for desc, obj in roots:
            self._take(desc, obj, 0)
        for fn in functions:
            self._take(getattr(fn, "__qualname__", "the function"), fn, 0)
        if functions and isinstance(sys.stdin, io.IOBase):
            # (input() or sys.stdin.readline() inside: a StringIO's or a file's position is
            # put back, for the eager run; a terminal's line cannot be: host_random refuses)
            self._take("sys.stdin", sys.stdin, 0)

    def _take_function(self, source, fn, depth):
        """The names a user's function (the step, a helper it calls, a module's hook, a
        method of a user class) binds outside itself: the globals its code names and its
        closure variables, and what they hold. `global COUNTER; COUNTER += 1`, `nonlocal
        n`, a helper's `stats["calls"] += 1` rebind them once while tracing where eager
        does at every call."""
        code = fn.__code__
        if _is_library_file(code.co_filename) or code.co_filename.startswith(_SKIP_PREFIXES):
            return
        where = getattr(fn, "__qualname__", source)
        for var, cell in zip(code.co_freevars, fn.__closure__ or ()):
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            self.entries.append((f"{where}: closure variable {var}", cell, var, "cell", value))
            self._take(var, value, depth + 1)
        # (`def step(x, cache={})`: the function's own state, so a key added is a change)
        defaults = list(enumerate(fn.__defaults__ or ())) + list((fn.__kwdefaults__ or {}).items())
        for k, value in defaults:
            self._take(f"{where}: default {k}", value, depth + 1)
            if isinstance(value, dict):
                self.entries.append((f"{where}: default {k} (a key added or removed)", value,
                                     None, "keys", tuple(value)))
        g = fn.__globals__
        for name in _global_names(code):
            if name in g and not isinstance(g[name], type) and not (
                    isinstance(g[name], types.ModuleType) and not _user_module(g[name])):
                self.entries.append((f"{where}: global {name}", g, name, "item", g[name]))
                self._take(name, g[name], depth + 1)

    def _take_class(self, cls, depth):
        """The functions of a user class (its methods' globals: a forward that counts) and
        its plain class attributes (`Trainer.steps += 1`)."""
        for klass in cls.__mro__:
            if id(klass) in self._seen or not _user_class(klass):
                continue
            self._seen.add(id(klass))
            for k, v in list(vars(klass).items()):
                if isinstance(v, (staticmethod, classmethod)):
                    v = v.__func__
                if isinstance(v, types.FunctionType):
                    self._take(v.__qualname__, v, depth + 1)
                elif not (k.startswith("__") or isinstance(v, (property, type))):
                    self.entries.append((f"{klass.__qualname__}.{k}", klass, k, "class", v))
                    self._take(f"{klass.__qualname__}.{k}", v, depth + 1)

    def _take(self, source, obj, depth):
        if depth > MAX_DEPTH or id(obj) in self._seen:
            return
        if isinstance(obj, types.FunctionType):
            self._seen.add(id(obj))
            self._take_function(source, obj, depth)
            return
        if isinstance(obj, types.MethodType):
            self._take(source, obj.__func__, depth)
            self._take(source, obj.__self__, depth + 1)
            return
        if isinstance(obj, _BUILTIN_METHODS):
            # (`tick = itertools.count().__next__`, `send = gen.send`, `pop = queue.popleft`,
            # `get = cfg.get` made before the call: the object they are bound to is state)
            owner = getattr(obj, "__self__", None)
            if owner is not None and not isinstance(owner, types.ModuleType):
                self._take(f"{source}.__self__", owner, depth + 1)
            return
        if isinstance(obj, _RANDOM_GENERATORS):
            self._seen.add(id(obj))
            self.generators.append((source, obj))
            return
        if isinstance(obj, queue.Queue):
            # (`q.get_nowait()` inside: the stdlib's queue keeps its items in a deque)
            self._seen.add(id(obj))
            self._take(f"{source}.queue", obj.queue, depth + 1)
            return
        if isinstance(obj, io.IOBase):
            # (a file or StringIO made before the call: its position moves as it is read)
            self._seen.add(id(obj))
            self.streams.append(obj)
            self.entries.append((source, obj, None, "stream", _stream_position(obj)))
            return
        if isinstance(obj, functools.partial):
            self._seen.add(id(obj))
            self._take(source, obj.func, depth + 1)
            for i, a in enumerate(obj.args):
                self._take(f"{source}.args[{i}]", a, depth + 1)
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
        if isinstance(obj, type):
            self._take_class(obj, depth)
            return
        if isinstance(obj, types.ModuleType):
            if _user_module(obj) and id(obj) not in self._seen:
                # (`config.calls += 1`, `config.state["m"] = ...` in a module of the user's)
                self._seen.add(id(obj))
                for k, v in list(vars(obj).items()):
                    if not k.startswith("__") and not isinstance(
                            v, (types.ModuleType, type, types.FunctionType)):
                        self.entries.append((f"{source}.{k}", obj, k, "attr", v))
                        self._take(f"{source}.{k}", v, depth + 1)
            return
        if isinstance(obj, Tensor) or is_scalar(obj):
            return
        self._seen.add(id(obj))
        if isinstance(obj, Module):
            for path, m in _named_modules(obj, source):
                self._seen.add(id(m))
                self._take_class(type(m), depth)
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
            else:  # (a traced tensor stored under a new key: `acts["h"] = out.detach()`)
                self.entries.append((f"{source} (a key added)", obj, None, "new keys",
                                     tuple(obj)))
            for k, v in list(obj.items()):
                self.entries.append((f"{source}[{k!r}]", obj, k, "item", v))
                self._take(f"{source}[{k!r}]", v, depth + 1)
        elif _is_iterator(obj) and not hasattr(obj, "__dict__"):
            # (a generator or builtin iterator: a consumed element cannot be put back, so
            # `next(batches)` inside is refused. An iterator of a Python class is a plain
            # object: its attributes are entries, a DataLoader's its sampler's iterator)
            self.entries.append((source, obj, None, "iterator", _position(obj)))
        elif isinstance(obj, (list, collections.deque)):
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
        elif obj.__class__ is set:  # (`s.pop()`, `s.add(k)`: its elements, as one value)
            self.entries.append((f"{source} (its elements)", obj, None, "set", set(obj)))
        elif _plain_object(obj):
            for k, v in list(vars(obj).items()):
                self.entries.append((f"{source}.{k}", obj, k, "attr", v))
                self._take(f"{source}.{k}", v, depth + 1)
            if not isinstance(obj, types.SimpleNamespace):
                self._take_class(type(obj), depth)

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
            if kind == "iterator":
                if _position(obj) != before:
                    out.append(entry)
                continue
            if kind == "stream":
                if _stream_position(obj) != before:
                    out.append(entry)
                continue
            if kind == "set":
                if obj != before:  # (elements removed: see refuse_rebinding)
                    out.append(entry if before <= obj else entry[:3] + ("set shrunk", before))
                continue
            if kind == "new keys":
                old = set(before)
                if any(_traced(v) for k, v in list(obj.items()) if k not in old):
                    out.append(entry)
                continue
            try:
                if kind == "cell":
                    now = obj.cell_contents
                elif kind == "class":
                    now = vars(obj).get(key, _GONE)
                else:
                    now = obj[key] if kind == "item" else obj.__dict__.get(key, _GONE)
            except (KeyError, IndexError, ValueError):
                now = _GONE
            if now is not before and not (is_scalar(now) and is_scalar(before)
                                          and now.__class__ is before.__class__
                                          and now == before):
                out.append(entry)
        return out

    @staticmethod
    def restore(changes):
        for _source, obj, key, kind, before in changes:
            if kind == "iterator":
                continue  # (refuse_rebinding raises: it cannot be undone)
            if kind == "stream":
                if before.__class__ is int:  # (seekable: eager reads again from there)
                    obj.seek(before)
                continue
            if kind in ("set", "set shrunk"):
                obj.clear()
                obj.update(before)
                continue
            if kind == "item" and isinstance(obj, (list, collections.deque)) \
                    and key >= len(obj):  # (shrunk while tracing: q.pop())
                obj.extend([None] * (key + 1 - len(obj)))
            if kind == "cell":
                obj.cell_contents = before
            elif kind == "class":
                setattr(obj, key, before)
            elif kind in ("keys", "new keys"):
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
# A builtin function bound to an object (`counter.__next__`, `gen.send`, `d.get`: a
# `builtin_function_or_method` whose __self__ is not a module) or a slot wrapper bound to one
# (`it.__next__` of a list iterator: a `method-wrapper`).
_BUILTIN_METHODS = (types.BuiltinMethodType, types.MethodWrapperType)


def _random_generators() -> tuple:
    import random

    import numpy as np

    return (random.Random, np.random.Generator, np.random.RandomState)


_RANDOM_GENERATORS = _random_generators()


def _stream_position(obj):
    """Where a stream made before the call stands: its offset where it can tell (a file, a
    StringIO), else its identity (unseen reads of a pipe or a terminal are the hook's)."""
    try:
        return obj.tell() if not obj.closed and obj.seekable() else ("closed", obj.closed)
    except (OSError, ValueError):  # (a text file iterated with next(): tell() refuses)
        return ("unknown",)


def _is_iterator(obj) -> bool:
    """An iterator (or generator) whose position a call can move: not a container."""
    kind = type(obj)
    return hasattr(kind, "__next__") and getattr(kind, "__iter__", None) is not None \
        and not isinstance(obj, (Tensor, Module))



def _position(obj, depth=0):
    """What tells where iterator `obj` stands: a generator's frame (its next instruction
    and its locals, by identity), a builtin iterator's pickled state (a list iterator's
    index, itertools.count's next number), nested iterators' positions in turn."""
    if depth > 3:
        return id(obj)
    if isinstance(obj, types.GeneratorType):
        frame = obj.gi_frame
        if frame is None:
            return ("done",)
        return (frame.f_lasti, tuple((k, id(v)) for k, v in frame.f_locals.items()))
    try:
        reduced = obj.__reduce__()
    except Exception:  # noqa: BLE001 - (not picklable: its identity only)
        return id(obj)
    if not isinstance(reduced, tuple):
        return id(obj)
    out = []
    for part in reduced[1:3]:
        items = part if isinstance(part, tuple) else (part,)
        out.append(tuple(_position(x, depth + 1) if _is_iterator(x)
                         else (x if is_scalar(x) else id(x)) for x in items))
    return tuple(out)


def _user_class(klass) -> bool:
    """A class defined in the user's code (not a library's, numpy's or the builtins')."""
    module = sys.modules.get(klass.__module__)
    filename = getattr(module, "__file__", None) or "<>"
    if klass.__module__ == "builtins" or _is_library_file(filename):
        return False
    return not filename.startswith(_SKIP_PREFIXES)


def _traced(value) -> bool:
    from .trace import TracedValue

    return isinstance(value, Tensor) and value._data.__class__ is TracedValue


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


class StreamRead(Exception):
    """The traced function read from a file or stream made before the call (its position
    was put back): tracer.function runs that signature eagerly, for good (TracingError
    under fullgraph=True)."""


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

    consumed = [c for c in changes if c[3] == "iterator"]
    if consumed:
        raise TracingError(
            f"{_where_defined(fn)}: {name} takes the next element of {consumed[0][0]} (an "
            f"iterator or generator made outside it): a trace would take one element and "
            f"every compiled call would reuse it, and the element it took cannot be put back. "
            f"Take the element outside and pass it as an argument (for x, y in loader: "
            f"step(x, y))")
    popped = [c for c in changes if c[3] == "set shrunk"]
    if popped:
        raise TracingError(
            f"{_where_defined(fn)}: {name} removes elements of {popped[0][0]}, a set made "
            f"outside it (s.pop(), s.discard(k)): a trace would make that change once, and a "
            f"set.pop() cannot be put back as it was for an eager run (its next element "
            f"moves). Change the set outside the function and pass what you need in")
    read = [c for c in changes if c[3] == "stream"]
    if read:
        raise StreamRead(
            f"{_where_defined(fn)}: {name} reads from (or writes to) {read[0][0]} (a file or "
            f"stream opened outside it) while it is traced; a trace would use what it read at "
            f"every call, or write only once (its position is put back). Read outside the "
            f"function and pass the values in as arguments")
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
