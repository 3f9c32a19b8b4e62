"""Backend registry: a backend compiles a Graph into an executable program.

An executable is called with a list of numpy arrays (graph inputs, then
captures) and returns the graph's results; it has `.kernels` (possibly empty)
and `.describe()`.  codegen registers "numba" when imported.
"""
from __future__ import annotations

import logging
import warnings

from .interpret import compile_interpret

_BACKENDS = {"interpret": compile_interpret}
_warned = set()
log = logging.getLogger("tracer")


def register_backend(name: str, compile_fn) -> None:
    _BACKENDS[name] = compile_fn


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
    return _BACKENDS[name]


def available() -> list:
    return sorted(_BACKENDS)
