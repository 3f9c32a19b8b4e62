"""codegen: fusion and Numba lowering; registers itself as tracer's "numba" backend.

>>> import codegen
>>> codegen.clear_cache()      # empty the on-disk kernel cache
"""
import os as _os
import warnings as _warnings

import numba as _numba

# Parallel kernels run between BLAS calls on the same cores. OpenMP's worker threads spin
# after a parallel region and steal the cores OpenBLAS's threads need next (measured on the
# 256x1024 training step: 1.4x slower than with the workqueue layer); the workqueue layer
# sleeps. A user's NUMBA_THREADING_LAYER still wins.
if "NUMBA_THREADING_LAYER" not in _os.environ:
    _numba.config.THREADING_LAYER = "workqueue"

from tracer.backends import register_backend

from .build import cache_dir, clear_cache, compile_stats, reset_stats
from .lower import LOWERING
from .runtime import Kernel, Program, compile_numba

register_backend("numba", compile_numba)

# As in eager and tracer: numpy steps of a compiled program (matmul, fallback kernels)
# computing inf/nan are not warnings; the "could not build kernel" warning still shows.
_warnings.filterwarnings(
    "ignore", message=r"(invalid value|divide by zero|overflow|underflow) encountered",
    category=RuntimeWarning, module=r"codegen(\.|$)")

__all__ = ["compile_numba", "Program", "Kernel", "LOWERING", "cache_dir", "clear_cache",
           "compile_stats", "reset_stats"]
