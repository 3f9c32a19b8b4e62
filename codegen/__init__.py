"""codegen: fusion and Numba lowering; registers itself as tracer's "numba" backend.

>>> import codegen
>>> codegen.clear_cache()      # empty the on-disk kernel cache
"""
import warnings as _warnings

# Numba itself is imported only when a kernel must be compiled or loaded through it
# (numbashim._numba, which also picks the threading layer): kernels cached as object files load
# without it.
from tracer.backends import register_backend

from .build import cache_dir, clear_cache, compile_stats, reset_stats
from .lower import LOWERING
from .runtime import FallbackWarning, Kernel, Program, compile_numba

register_backend("numba", compile_numba)

# As in eager and tracer: numpy steps of a compiled program (matmul, fallback kernels)
# computing inf/nan are not warnings; the "could not build kernel" warning still shows.
_warnings.filterwarnings(
    "ignore", message=r"(invalid value|divide by zero|overflow|underflow) encountered",
    category=RuntimeWarning, module=r"codegen(\.|$)")

__all__ = ["compile_numba", "Program", "Kernel", "FallbackWarning", "LOWERING", "cache_dir",
           "clear_cache", "compile_stats", "reset_stats"]
