"""Backends: a backend compiles a verified graph into an executable.

The backend contract
--------------------
A backend is a function ``compile(graph) -> executable`` registered under a name:
``register_backend(name, compile)``, or lazily in `LAZY_BACKENDS` (name -> module path:
the module is imported on first use and registers itself; "numba" is `codegen`). The
tracer asks `get_backend(name)` once per trace and compiles with full garbage collections
held off (`full_collections_held`, TRACEJIT_GC_HOLD=0 turns that off).

What a backend receives: a `tracer.ir.Graph` that `tracer.ir.verify` accepts, optimized
by tracer.passes. Everything it needs is a documented field of the graph:

- ``inputs`` then ``captures``: one Var per array the executable is called with, in order;
- ``consts``: (Var, ndarray) pairs; ``eqns``: registry ops (`eager.ops.OPS`, whose rows
  give each op's numpy implementation) and the control ops ``cond``/``while_loop``, whose
  sub-graphs a backend may run with `run_cond`/`run_while` (the reference interpreter's);
- ``outputs`` then ``updates`` (``graph.results``): what the executable returns, in order;
- ``update_targets``: per update, ``(UpdateKind, index)``: the tensor the tracer writes the
  update into after the call (`tracer.ir.UpdateKind`);
- ``grad_captures``: {capture index of a tensor: capture index of its ``.grad``}, for a
  backend that computes a ``.grad`` update straight into the gradient's memory;
- shapes may hold symbolic sizes (`eager.ops.Dim`), bound from the arguments' shapes at
  each call (`tracer.symbolic.binder`).

What it returns: an executable with

- ``__call__(args, dests=None) -> list``: `args` are numpy arrays (inputs, then captures);
  returns one array per ``graph.results``. It may write an update into the array of the
  capture it updates (``UpdateKind.DATA``) when nothing reads the old value afterwards.
  When a value check raises (an equation `tracer.ir.may_raise` names: a class index out of
  range, an integer divisor 0), it must have changed no tensor yet: the tracer puts the
  random generator back and runs the call eagerly, for eager's error and state. So nothing
  is written into a target before the last equation that may raise. An IndexError of
  an op's numpy implementation (a scatter_add index out of range) reaches the user with
  eager's message (the op, its operands, the user's line) through
  `tracer.errors.step_error`: generated code keeps ``{line number: Eqn}`` of its lines
  under the name `tracer.errors.STEP_LINES` in its module globals;
  `dests`, when given, holds per ``dest_updates`` entry the array that update's target
  (a ``.grad``) holds now, or None: the update may be computed straight into it;
- ``dest_updates``: the update indices whose target arrays ``__call__`` takes in `dests`,
  in order (``()``: none);
- ``kernels``: the compiled kernels (possibly none), each with ``.name`` and ``.source``;
- ``describe() -> str``: what the printout of a ConcreteFunction shows;
- optionally ``call1(array) -> array``, a faster call for one array in and one out (used
  only when the graph has one input, one output and nothing else to do), and
  ``references(slot, array) -> int``, how many references the executable keeps between
  calls to the array of argument `slot` (tracer.ownership tells them from a caller's).

`get_backend` checks the required attributes of what a backend returns (`check_executable`).

>>> import tracer
>>> "interpret" in tracer.available_backends() and "numba" in tracer.available_backends()
True
"""
from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import importlib.util
import logging
import threading
import warnings

from . import settings
from .interpret import compile_interpret, run_cond, run_while  # noqa: F401 - for backends

_BACKENDS = {"interpret": compile_interpret}
# Backends that register themselves when their module is imported, imported on first use
# (name -> module path), so that tracer never imports codegen at module level: codegen
# imports tracer, never the other way round.
LAZY_BACKENDS = {"numba": "codegen"}
# ... and what each needs installed besides (found, not imported: Numba takes 0.15 s)
_REQUIRES = {"numba": ("numba", "llvmlite")}
_warned = set()
log = logging.getLogger("tracer")


def register_backend(name: str, compile_fn) -> None:
    """Register `compile_fn(graph) -> executable` (see the contract above) as `name`."""
    _BACKENDS[name] = compile_fn


# Full collections of Python's cyclic garbage collector are held off while a backend
# compiles. Compiling allocates a great many objects (Numba's typing and lowering, and on
# the first compile its registries, which stay), and allocations alone trigger
# collections: on W5's first call (a training step, 7 kernels) 2 full ones walked every
# object in the process for 0.11-0.13 s of a ~1.5 s compile, finding little. Young
# collections still run, so the compile's own cyclic garbage is freed as it goes. (With
# the collector disabled outright instead, the one young collection after the compile
# walked everything it had made: 0.05-0.09 s.) A full collection that falls due happens
# after the compile. Nested and concurrent compiles share one hold; the thresholds are
# restored to what they were, and a collector the program disabled stays disabled.
_gc_lock = threading.Lock()
_gc_depth = 0
_gc_thresholds = None


@contextlib.contextmanager
def full_collections_held():
    """Full collections held off while the block runs (not with TRACEJIT_GC_HOLD=0)."""
    global _gc_depth, _gc_thresholds
    if not settings.GC_HOLD:
        yield
        return
    with _gc_lock:
        if _gc_depth == 0:
            _gc_thresholds = gc.get_threshold()
            t0, t1 = _gc_thresholds[:2]
            gc.set_threshold(t0, t1, 1 << 30)
        _gc_depth += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_depth -= 1
            if _gc_depth == 0:
                gc.set_threshold(*_gc_thresholds)


_REQUIRED = ("__call__", "dest_updates", "kernels", "describe")


def check_executable(name: str, program):
    """`program` as backend `name` returned it, if it has what the contract requires."""
    missing = [a for a in _REQUIRED if not hasattr(program, a)]
    if missing:
        raise TypeError(f"backend {name!r} returned a {type(program).__name__} without "
                        f"{', '.join(missing)}; an executable needs {', '.join(_REQUIRED)} "
                        f"(see tracer.backends)")
    return program


def _holding_full_collections(name: str, compile_fn):
    @functools.wraps(compile_fn)
    def compile_held(graph, *args, **kwargs):
        with full_collections_held():
            return check_executable(name, compile_fn(graph, *args, **kwargs))
    return compile_held


def _import_lazy(name: str) -> None:
    """Import the module that registers backend `name` (see LAZY_BACKENDS)."""
    try:
        importlib.import_module(LAZY_BACKENDS[name])
    except ImportError as exc:  # pragma: no cover - codegen ships with tracejit
        if f"{name}-import" not in _warned:
            _warned.add(f"{name}-import")
            warnings.warn(f"tracer: the {name} backend is unavailable ({exc}); using the "
                          f"interpreter", RuntimeWarning, stacklevel=4)


def get_backend(name: str):
    """The compile function of backend `name` (importing its module on first use)."""
    if name not in _BACKENDS and name in LAZY_BACKENDS:
        _import_lazy(name)
    if name not in _BACKENDS:
        if name == "numba":
            if "numba" not in _warned:
                _warned.add("numba")
                log.info("tracer: the numba backend is not available yet; graphs run "
                         "through the reference interpreter")
            return _BACKENDS["interpret"]
        raise ValueError(f"unknown backend {name!r}; available: {sorted(_BACKENDS)}")
    return _holding_full_collections(name, _BACKENDS[name])


def available() -> list:
    """Every backend that is registered or installed (its module found), without importing
    the latter: ``tracer.available_backends()``."""
    lazy = [name for name, module in LAZY_BACKENDS.items()
            if all(_installed(m) for m in (module,) + _REQUIRES.get(name, ()))]
    return sorted(set(_BACKENDS) | set(lazy))


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
