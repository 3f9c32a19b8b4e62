"""codegen: fusion and Numba lowering; registers itself as tracer's "numba" backend.

>>> import codegen
>>> codegen.clear_cache()      # empty the on-disk kernel cache
"""
from tracer.backends import register_backend

from .build import cache_dir, clear_cache, compile_stats, reset_stats
from .lower import LOWERING
from .runtime import Kernel, Program, compile_numba

register_backend("numba", compile_numba)

__all__ = ["compile_numba", "Program", "Kernel", "LOWERING", "cache_dir", "clear_cache",
           "compile_stats", "reset_stats"]
