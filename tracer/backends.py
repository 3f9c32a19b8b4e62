"""Backend registry: a backend compiles a Graph into an executable program.

An executable is called with a list of numpy arrays (graph inputs, then
captures) and returns the graph's results; it has `.kernels` (possibly empty)
and `.describe()`.  codegen registers "numba" when imported.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import logging
import threading
import warnings

from .interpret import compile_interpret

_BACKENDS = {"interpret": compile_interpret}
_warned = set()
log = logging.getLogger("tracer")


def register_backend(name: str, compile_fn) -> None:
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
    global _gc_depth, _gc_thresholds
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


def _holding_full_collections(compile_fn):
    @functools.wraps(compile_fn)
    def compile_held(graph, *args, **kwargs):
        with full_collections_held():
            return compile_fn(graph, *args, **kwargs)
    return compile_held


def get_backend(name: str):
    if name not in _BACKENDS and name == "numba":
        try:
            import codegen  # noqa: F401  (registers itself)
        except ImportError as exc:  # pragma: no cover - codegen ships with tracejit
            if "numba-import" not in _warned:
                _warned.add("numba-import")
                warnings.warn(f"tracer: the numba backend is unavailable ({exc}); using the "
                              f"interpreter", RuntimeWarning, stacklevel=3)
    if name not in _BACKENDS:
        if name == "numba":
            if "numba" not in _warned:
                _warned.add("numba")
                log.info("tracer: the numba backend is not available yet; graphs run "
                         "through the reference interpreter")
            return _BACKENDS["interpret"]
        raise ValueError(f"unknown backend {name!r}; available: {sorted(_BACKENDS)}")
    return _holding_full_collections(_BACKENDS[name])


def available() -> list:
    return sorted(_BACKENDS)
