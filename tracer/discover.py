"""What a trace read from the Python world, found while it runs, turned into guards.

`Recorder` watches the trace with `sys.settrace`: every user code object that ran (the
decorated function, helpers, `forward` methods, nested functions, cond branches), its globals
and closure, and every Module called. `collect_guards` then walks from those roots:

- globals and closure variables each user function names: by value (numbers, str, None,
  tuples of them), by identity otherwise;
- entries of dicts, lists, tuples, namespaces, plain objects and user classes reached from
  them whose name the user's code mentions: numbers by value, captured tensors by identity;
- plain attributes of every Module reached (`training`, `p`, `eps`): by value, and the names
  each such module has (attributes, submodules, parameters, buffers: one added later was not
  there to guard), checked when eager.protocol.STRUCTURE_EPOCH moves (attribute writes and
  deletions move it, and train()/eval() when a module's mode changes).

`Snapshot` records the same containers before the trace so that state the traced function
rebinds (`self.total = self.total + x`, `state["m"] = ...`) is found, undone and reported.
"""
from __future__ import annotations

import collections
import functools
import gc
import importlib.util
import operator
import os
import sys
import sysconfig
import types

import numpy as np

from eager.errors import _is_library_file
from eager.nn.module import Module
from eager.optim import Optimizer
from eager.tensor import Tensor

from .captures import _global_names
from .guards import Guard, is_scalar

MAX_DEPTH = 6
# Benchmarks only (benchmarks/guard_cost.py): False makes collect_guards find nothing, to
# measure what the guards found while tracing cost per call. Never for real use: unsound.
COLLECT = [True]
_MODULE_CALL = Module.__call__.__code__
_MODULE_SETATTR = Module.__setattr__.__code__
_SKIP_PREFIXES = tuple({p for p in (sysconfig.get_paths().get(k) for k in (
    "stdlib", "platstdlib", "purelib", "platlib")) if p})


def _dependency_dirs() -> tuple:
    """The package directories of tracejit's dependencies, wherever they are installed: a
    numpy found through PYTHONPATH (`pip install --target DIR`) is library code too, or its
    helpers' attribute reads during a trace (as_strided's DummyArray.base) would be taken
    for the user's."""
    dirs = []
    for name in ("numpy", "scipy", "numba", "llvmlite"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            dirs += [os.path.join(d, "") for d in spec.submodule_search_locations]
    return tuple(dirs)


_SKIP_PREFIXES += _dependency_dirs()
_MODULE_STORES = ("_parameters", "_buffers", "_modules")


def is_user_file(filename: str) -> bool:
    return not (filename.startswith("<") or _is_library_file(filename)
                or filename.startswith(_SKIP_PREFIXES))


class Recorder:
    """Active only while a trace runs (sys.settrace): which user code ran, with which
    closures; which Modules were called; where user code set a Module attribute."""

    def __init__(self):
        self.codes: dict = {}      # code -> its globals dict
        self.cells: dict = {}      # code -> list of closure-variable values seen
        self.selves: dict = {}     # id -> Module or user object a method ran on
        self.setattr_lines: dict = {}  # (id(module), name) -> "file.py:LINE"
        self._user: dict = {}      # code -> is user code (memo)

    # sys.settrace, not setprofile: its global function sees only "call" events (no C calls,
    # no returns). A debugger's or coverage's tracer that was active is chained, and is back
    # when the trace ends. The per-call part is a closure over locals: it runs for every
    # Python call the trace makes.
    def __enter__(self):
        prev = self._prev = sys.gettrace()
        memo = self._user
        record = self._record

        def event(frame, ev, arg):
            code = frame.f_code
            kind = memo.get(code)
            if kind is None:
                kind = memo[code] = _kind_of(code)
            if kind:
                record(frame, code, kind)
            if prev is not None:
                return prev(frame, ev, arg)
            return None

        sys.settrace(event)
        return self

    def __exit__(self, *exc):
        sys.settrace(self._prev)
        return False

    def _record(self, frame, code, kind):
        if kind == _MODULE_CALL_KIND:
            m = frame.f_locals.get("self")
            self.selves.setdefault(id(m), m)
            return
        if kind == _SETATTR_KIND:
            caller = frame.f_back
            if caller is not None and _kind_of(caller.f_code) == _USER_KIND:
                f_locals = frame.f_locals
                key = (id(f_locals.get("self")), f_locals.get("name"))
                self.setattr_lines.setdefault(
                    key, f"{os.path.basename(caller.f_code.co_filename)}:{caller.f_lineno}")
            return
        self.codes.setdefault(code, frame.f_globals)
        is_method = code.co_argcount and code.co_varnames[0] == "self"
        if code.co_freevars or is_method:
            f_locals = frame.f_locals
            if code.co_freevars:
                self.cells.setdefault(code, []).append(
                    tuple(f_locals.get(v) for v in code.co_freevars))
            if is_method:
                obj = f_locals.get("self")
                self.selves.setdefault(id(obj), obj)

    def names_read(self) -> set:
        """Attribute, global and string-key names the user's code that ran mentions."""
        names = set()
        for code in self.codes:
            _code_names(code, names)
        return names


_USER_KIND, _MODULE_CALL_KIND, _SETATTR_KIND = 1, 2, 3


def _kind_of(code) -> int:
    """What Recorder does with a call of `code`: nothing (0), record user code, note the
    Module called, note where user code set a Module attribute."""
    if code is _MODULE_CALL:
        return _MODULE_CALL_KIND
    if code is _MODULE_SETATTR:
        return _SETATTR_KIND
    return _USER_KIND if is_user_file(code.co_filename) else 0


def _code_names(code, out: set):
    out.update(code.co_names)
    for c in code.co_consts:
        if isinstance(c, str):
            out.add(c)
        elif isinstance(c, tuple):
            out.update(x for x in c if isinstance(x, str))
        elif isinstance(c, types.CodeType):
            _code_names(c, out)


def _functions_of(code, seen_cells, candidates) -> list:
    """The function objects running `code` whose closure holds the values seen: looked for
    among `candidates` first (the decorated function, what globals and closures name), in
    the whole heap only if none is there (gc.get_referrers costs ~50 ms in a big process)."""
    def matches(f):
        if not (isinstance(f, types.FunctionType) and f.__code__ is code and f.__closure__):
            return False
        try:
            values = tuple(c.cell_contents for c in f.__closure__)
        except ValueError:
            return False
        return any(len(v) == len(values) and all(a is b for a, b in zip(v, values))
                   for v in seen_cells)

    found = [f for f in candidates if matches(f)]
    if not found:
        found = [f for f in gc.get_referrers(code) if matches(f)]
    return found


def _candidates(root_fn, recorder) -> list:
    """Function objects reachable by name from the code that ran (see _functions_of)."""
    out = {}
    todo = [root_fn, getattr(root_fn, "__func__", None), getattr(root_fn, "forward", None)]
    for code, g in recorder.codes.items():
        todo.extend(g.get(name) for name in code.co_names)
    while todo:
        f = todo.pop()
        f = getattr(f, "__func__", f)
        if not isinstance(f, types.FunctionType) or id(f) in out:
            continue
        out[id(f)] = f
        for cell in f.__closure__ or ():
            try:
                todo.append(cell.cell_contents)
            except ValueError:
                pass
    return list(out.values())


def _nested_codes(codes) -> set:
    """Code objects defined inside other code that ran: their functions (and cells) are
    made afresh at each call, nothing to guard beyond the enclosing function's."""
    out = set()
    for code in codes:
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                out.add(c)
    return out


# --------------------------------------------------------------------------------------
# walking the reachable state

# (a builtin function or slot wrapper bound to an object: `cfg.get`, `it.__next__`)
_BUILTIN_METHODS = (types.BuiltinMethodType, types.MethodWrapperType)
# Mutable buffers Python reads element by element (`buf[0]`): frozen as numpy arrays are
_RAW_BUFFERS = (bytearray, memoryview) + ((__import__("array").array,))
_GETTERS = (operator.itemgetter, operator.attrgetter, operator.methodcaller)
_OPTIMIZER_STATE = ("param_groups", "state", "defaults")  # (guarded by tokens, or unread)
_MAX_SET = 256  # (a set of more elements is guarded by identity only)


def _literal_key(k) -> bool:
    """A dict key whose repr is a Python literal (for a Guard template): int, float, bool,
    None, and tuples of them and of str."""
    if k.__class__ is tuple:
        return all(isinstance(x, str) or _literal_key(x) for x in k)
    if k.__class__ is float:
        return k == k and abs(k) != float("inf")  # (nan and inf have no literal)
    return k is None or k.__class__ in (int, bool)


def _key(k) -> str:
    """`k` as a literal inside a Guard template (str.format escapes braces)."""
    return repr(k).replace("{", "{{").replace("}", "}}")


def _plain_object(obj) -> bool:
    """A namespace or an instance of a user class: state a user keeps tensors and settings
    in (library objects - threading.Event, loggers - are not walked)."""
    if obj.__class__ is types.SimpleNamespace:
        return True
    # (callable ones too: a user class with __call__ - a transform, a scaler - keeps its
    # settings in attributes as any other; functions are not instances of a user class)
    return hasattr(obj, "__dict__") and not isinstance(
        obj, (type, types.ModuleType, Tensor, Module, Optimizer)) \
        and _user_class(obj.__class__)


def _user_module(module) -> bool:
    """A module of the user's own (a config.py next to the script), not a library's."""
    return is_user_file(getattr(module, "__file__", None) or "<")


def _shadowable(obj, names) -> bool:
    """Whether a user class of `obj` has a plain attribute the code reads by name that the
    instance itself does not hold (one set on the instance later would take its place)."""
    own = obj.__dict__
    for klass in type(obj).__mro__:
        if not _user_class(klass):
            continue
        for k, v in vars(klass).items():
            if k in names and k not in own and not k.startswith("__") and not (
                    callable(v) or isinstance(v, (property, staticmethod, classmethod))):
                return True
    return False


def _user_class(obj) -> bool:
    return isinstance(obj, type) and is_user_file(
        getattr(sys.modules.get(obj.__module__), "__file__", None) or "<")


class _Walker:
    """Guards for the entries reached from roots (bounded depth, each object once)."""

    def __init__(self, names, captured_ids):
        self.names = names
        self.captured = captured_ids
        self.guards: list = []
        self.frozen: list = []     # (source, what) of values that cannot be guarded
        self._seen: set = set()
        self._modules: set = set()
        self.resized: set = set()  # (see collect_guards)

    def entry(self, source, template, anchor, value, depth, epoch=False, named=True,
              indexed=False, sized=True):
        """Guard `value`, found at `template` on `anchor`; walk into it. True if anything
        under it was guarded. `named`: the user's code names it (a global, an attribute, a
        string key); `indexed`: an element of a list or tuple; `sized`: a list's length or
        a dict's keys are guarded (see `walk`)."""
        if is_scalar(value):
            if named:
                self.guards.append(Guard("value", source, template, (anchor,), value, epoch))
            return named
        if isinstance(value, Tensor):
            if id(value) in self.captured:
                self.guards.append(Guard("identity", source, template, (anchor,), value, epoch))
                return True
            return False
        if isinstance(value, np.ndarray):
            # (elements of lists are often only counted - len(arrays) - so not reported)
            if named and not indexed:
                why = ("a numpy array: its contents are read once, at trace time; pass it as a "
                       "tensor argument")
                self.frozen.append((source, why))
            return False
        if isinstance(value, _RAW_BUFFERS) or type(value).__module__ == "ctypes":
            if named and not indexed:
                self.frozen.append((source, f"a {type(value).__name__}: its contents are read "
                                    f"once, at trace time; pass it as a tensor argument"))
            return False
        if isinstance(value, types.ModuleType):
            if _user_module(value) and id(value) not in self._seen:
                # (`import config; config.LR`: a user module's attributes the code names,
                # as a namespace's; a name rebound there between calls traces again)
                self._seen.add(id(value))
                found = False
                for k, v in list(vars(value).items()):
                    if k in self.names and not k.startswith("__") and not isinstance(
                            v, (types.ModuleType, type, types.FunctionType)):
                        found |= self.entry(f"{source}.{k}", "{0}.__dict__[" + _key(k) + "]",
                                            value, v, depth + 1)
                return found
            return self._process_reads(source, value, depth)
        if isinstance(value, os._Environ):  # (`from os import environ`)
            self.guards.append(_environ_guard(source, "{0}._data", value))
            return True
        inner = self.walk(source, value, depth + 1, sized)
        if inner or (named and not isinstance(value, (types.FunctionType, types.BuiltinFunctionType,
                                                        types.MethodType, type))):
            self.guards.append(Guard("identity", source, template, (anchor,), value, epoch))
            return True
        if named and callable(value):
            # A helper function or class rebound (act = relu -> gelu) changes the trace.
            self.guards.append(Guard("identity", source, template, (anchor,), value, epoch))
            return True
        return inner

    def walk(self, source, obj, depth, sized=True) -> bool:
        if id(obj) in self._seen:
            return False
        if depth > MAX_DEPTH:
            if self._names_inside(obj):
                # (a config nested deeper: what the code reads there is not guarded)
                self.frozen.append((source, f"nested more than {MAX_DEPTH} containers deep: "
                                    f"what the function reads inside is read once, at trace "
                                    f"time; keep it nearer the top or pass it as an argument"))
            return False
        self._seen.add(id(obj))
        found = False
        if isinstance(obj, _BUILTIN_METHODS):
            # (`get = cfg.get` made before the call: what it reads is the dict's)
            owner = getattr(obj, "__self__", None)
            if owner is None or isinstance(owner, types.ModuleType):
                return False
            return self.entry(f"{source}.__self__", "{0}.__self__", obj, owner, depth)
        if isinstance(obj, Module):
            self.module(source, obj)
            return True
        if isinstance(obj, Optimizer):
            # Hyperparameters are read live (eager/optim.py); other attributes (a custom
            # optimizer's own settings, a config kept on it) as a user object's.
            for k, v in list(vars(obj).items()):
                if k not in _OPTIMIZER_STATE and not k.startswith("_"):
                    found |= self.entry(f"{source}.{k}", "{0}.__dict__[" + _key(k) + "]", obj,
                                        v, depth, named=k in self.names)
            if _user_class(type(obj)):
                found |= self.walk(type(obj).__name__, type(obj), depth)
            return found
        if obj.__class__ is set and len(obj) <= _MAX_SET and all(map(is_scalar, obj)):
            # (`if "relu" in active:`): its elements, as one value
            self.guards.append(Guard("value", f"{source}'s elements", "frozenset({0})", (obj,),
                                     frozenset(obj)))
            return True
        if sized and (obj.__class__ is dict or obj.__class__ is list or
                      obj.__class__ is collections.deque) and id(obj) not in self.resized:
            # Which entries there are: a key added (`cfg.get("scale", 1.0)`, a loop over the
            # items) or an element appended (`sum(extra)`) changes what the code does, and
            # the container is the same object, so its identity guard cannot see it.
            what, template = ("keys", "tuple({0})") if obj.__class__ is dict \
                else ("length", "len({0})")
            self.guards.append(Guard("value", f"{source}'s {what}", template, (obj,),
                                     tuple(obj) if what == "keys" else len(obj)))
            found = True
        if isinstance(obj, dict):
            for k, v in list(obj.items()):
                if isinstance(k, str) or _literal_key(k):
                    named = not isinstance(k, str) or k in self.names
                    found |= self.entry(f"{source}[{k!r}]", "{0}[" + _key(k) + "]", obj, v, depth,
                                        named=named)
        elif isinstance(obj, (list, tuple, collections.deque)):
            for i, v in enumerate(list(obj)):
                found |= self.entry(f"{source}[{i}]", f"{{0}}[{i}]", obj, v, depth,
                                    indexed=True)
        elif _plain_object(obj):
            for k, v in list(vars(obj).items()):
                found |= self.entry(f"{source}.{k}", "{0}.__dict__[" + _key(k) + "]", obj, v, depth,
                                    named=k in self.names)
            if _shadowable(obj, self.names):
                # (`s.scale = 3.0` set later on an object whose class has `scale`: the
                # instance's attribute then shadows the class's the trace read)
                self.guards.append(Guard("value", f"{source}'s attribute names",
                                         "tuple({0}.__dict__)", (obj,), tuple(vars(obj))))
                found = True
            found |= self.walk(f"{type(obj).__name__}", type(obj), depth)
        elif obj.__class__ is functools.partial:
            # (its keywords are a dict of its own, changeable in place: each one matters)
            kw = obj.keywords
            self.guards.append(Guard("value", f"{source}.keywords' keys", "tuple({0}.keywords)",
                                     (obj,), tuple(kw)))
            for k, v in list(kw.items()):
                self.entry(f"{source}.keywords[{k!r}]", "{0}.keywords[" + _key(k) + "]", obj,
                           v, depth)
            # (and its positional arguments: a tuple, but a list in it changes in place)
            for i, v in enumerate(obj.args):
                self.entry(f"{source}.args[{i}]", "{0}.args[" + str(i) + "]", obj, v, depth,
                           indexed=True)
            found = True
        elif _user_class(obj):
            for k, v in list(vars(obj).items()):
                if not k.startswith("__"):
                    found |= self.entry(f"{obj.__name__}.{k}", "{0}.__dict__[" + _key(k) + "]", obj,
                                        v, depth, named=k in self.names)
        return found

    def _process_reads(self, source, module, depth) -> bool:
        """The process's state read through its module: the environment (`os.environ[k]`,
        `os.getenv(k)`: its contents, all of them, as a dict compare costs ~1 us) and the
        command line (`sys.argv[1]`: as a list a global names), when the user's code names
        them. A trace bakes what it read in, like a global's value."""
        if module is os and not self.names.isdisjoint(_ENVIRON_NAMES):
            self.guards.append(_environ_guard(f"{source}.environ", "{0}.environ._data", os))
            return True
        if module is sys and "argv" in self.names:
            return self.entry(f"{source}.argv", "{0}.argv", sys, sys.argv, depth)
        return False

    def _names_inside(self, obj) -> bool:
        """Whether `obj` is a container with an entry the user's code may read (an element,
        a key that is not a string or one the code names, an attribute it names)."""
        if obj.__class__ in (list, collections.deque):
            return len(obj) > 0
        if obj.__class__ is dict:
            return any(not isinstance(k, str) or k in self.names for k in obj)
        if _plain_object(obj):
            return any(k in self.names for k in vars(obj))
        return False

    def module(self, source, root: Module):
        for path, m in _named_modules(root, source):
            if id(m) in self._modules:
                continue
            self._modules.add(id(m))
            # Which names the module has: an attribute, submodule, parameter or buffer
            # added later (one the code looked for with hasattr/getattr and did not find)
            # must retrace as much as one that changed.
            for store, template in (("attributes", "tuple({0}.__dict__)"),
                                    ("submodules", "tuple({0}._modules)"),
                                    ("parameters", "tuple({0}._parameters)"),
                                    ("buffers", "tuple({0}._buffers)")):
                names = tuple(m.__dict__ if store == "attributes" else m.__dict__[
                    "_" + ("modules" if store == "submodules" else store)])
                self.guards.append(Guard("value", f"{path or 'module'}'s {store} names",
                                         template, (m,), names, True))
            tracked = _tracks_training(m)
            for k, v in list(m.__dict__.items()):
                if k in _MODULE_STORES or k.startswith("__") or (k == "training" and tracked):
                    continue
                # (a list kept on the module that the code never names - a log the
                # training loop appends to - must not retrace every call)
                self.entry(f"{path}.{k}", "{0}.__dict__[" + _key(k) + "]", m, v, 0, epoch=True,
                           sized=k in self.names)
            for k, sub in m.__dict__["_modules"].items():
                # Which module sits under each name: one swapped in under the same name
                # (`seq[1] = nn.Tanh()`, `model.act = nn.GELU()`) must trace again.
                self.guards.append(Guard("identity", f"{path}.{k}",
                                         "{0}._modules[" + _key(k) + "]", (m,), sub, True))
            for store in ("_buffers", "_parameters"):
                for k, b in m.__dict__[store].items():
                    # an empty slot (a loss's weight=None, a Linear without bias) is guarded
                    # too: a tensor assigned to it later must trace again
                    if b is None or (store == "_buffers" and id(b) in self.captured):
                        template = "{0}." + store + "[" + _key(k) + "]"
                        self.guards.append(Guard("identity", f"{path}.{k}", template, (m,), b,
                                                 True))
            if _user_class(type(m)):
                self.walk(type(m).__name__, type(m), 1)


_TRAINING = Module.__dict__["training"]


# Names through which code reads the environment from the os module.
_ENVIRON_NAMES = frozenset({"environ", "environb", "getenv", "getenvb"})


def _environ_guard(source, template, anchor) -> Guard:
    # (its expected value a dict: a guard prints it by its keys, never its values)
    environ = eval(template.format("o"), {"o": anchor})  # (our own template)
    return Guard("value", source, template, (anchor,), dict(environ))


def _tracks_training(m) -> bool:
    """Whether every read of `m.training` goes through Module's property (tracked state,
    guarded by the trace's item guards where it was read, not by the module's attributes):
    not where a subclass put its own `training` on the class."""
    return getattr(type(m), "training", None) is _TRAINING


def _named_modules(root, prefix):
    out = [(prefix, root)]
    for name, m in root.named_modules():
        if name:
            out.append((f"{prefix}.{name}", m))
    return out


def collect_guards(recorder: Recorder, root_fn, captured, extra_roots=(), resized=()):
    """(guards, frozen) for what the trace recorded: see the module docstring. `resized`:
    ids of containers whose size the trace changed (Snapshot.resized)."""
    if not COLLECT[0]:
        return [], []
    names = recorder.names_read()
    names |= _getter_names(recorder)
    walker = _Walker(names, {id(t) for t in captured})
    walker.resized = set(resized)
    root_globals = getattr(root_fn, "__globals__", None)
    candidates = None
    nested = _nested_codes(recorder.codes)
    for code, g in recorder.codes.items():
        prefix = "G" if g is root_globals else f"G[{g.get('__name__', '?')}]"
        for name in _global_names(code):
            if name in g:
                walker.entry(f"{prefix}[{name!r}]", "{0}[" + _key(name) + "]", g, g[name], 0)
        if not code.co_freevars or code in nested:
            continue
        if candidates is None:
            candidates = _candidates(root_fn, recorder)
        for f in _functions_of(code, recorder.cells.get(code, ()), candidates):
            for var, cell in zip(code.co_freevars, f.__closure__):
                try:
                    value = cell.cell_contents
                except ValueError:
                    continue
                walker.entry(var, "{0}.cell_contents", cell, value, 0)
    if candidates is None:
        candidates = _candidates(root_fn, recorder)
    _guard_defaults(walker, candidates, recorder, nested)
    for desc, obj in extra_roots:
        walker.walk(desc, obj, 0)
    for obj in recorder.selves.values():
        if isinstance(obj, Module) or _plain_object(obj):
            walker.walk(f"<{type(obj).__name__} self>", obj, 0)
    return dedupe(walker.guards), walker.frozen


def _getter_names(recorder) -> set:
    """The keys and attribute names held by operator.itemgetter / attrgetter / methodcaller
    objects the code that ran names (globals, closure variables): `ig = itemgetter("lr")`
    made outside reads cfg["lr"] as much as code that spells it."""
    out = set()
    values = [g.get(name) for code, g in recorder.codes.items() for name in code.co_names]
    values += [v for seen in recorder.cells.values() for cells in seen for v in cells]
    for v in values:
        if isinstance(v, _GETTERS):
            for part in v.__reduce__()[1:]:
                for x in (part if isinstance(part, tuple) else (part,)):
                    if isinstance(x, str):
                        out.update(x.split("."))
                    elif isinstance(x, tuple):
                        out.update(y for y in x if isinstance(y, str))
    return out


def _guard_defaults(walker, candidates, recorder, nested):
    """Mutable default arguments of the functions that ran (`def step(x, w=WEIGHTS)`, a
    list changed in place between calls): what is in them, like a global's. (A number or
    tuple default cannot change short of assigning `__defaults__`; tensors are read live.)"""
    functions = list(candidates)
    for obj in recorder.selves.values():
        for klass in type(obj).__mro__:
            functions.extend(v for v in vars(klass).values() if isinstance(v, types.FunctionType))
    for f in functions:
        if f.__code__ not in recorder.codes or f.__code__ in nested:
            continue
        name = f.__qualname__
        for i, value in enumerate(f.__defaults__ or ()):
            if not _immutable(value):
                walker.entry(f"{name}'s default {i}", "{0}.__defaults__[" + str(i) + "]", f,
                             value, 0)
        for k, value in (f.__kwdefaults__ or {}).items():
            if not _immutable(value):
                walker.entry(f"{name}'s default {k}", "{0}.__kwdefaults__[" + _key(k) + "]",
                             f, value, 0)


def _immutable(value) -> bool:
    if value.__class__ is tuple:
        return all(_immutable(v) for v in value)
    return is_scalar(value) or isinstance(value, Tensor) or callable(value)


def dedupe(guards) -> list:
    """Each assumption once: one fetch of one object checked once."""
    seen = set()
    out = []
    for g in guards:
        key = (g.kind, g.template, tuple(id(o) for o in g.objects))
        if key not in seen:
            seen.add(key)
            out.append(g)
    return out
