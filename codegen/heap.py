"""Freed memory kept for reuse (glibc): a compiled step allocates and frees the same arrays
at every call, and should not page-fault them in afresh each time.

glibc's malloc maps an allocation past M_MMAP_THRESHOLD from the OS and unmaps it on free,
and returns the top of its heap to the OS whenever more than M_TRIM_THRESHOLD bytes are
free there. Both start low (128 KiB) and rise by themselves (to the largest block freed so
far, and twice that) only while nobody has set them. A training step frees several MiB of
temporaries at its end (W10: cats of the 35 time steps, the one-hot of cross-entropy's
backward, the embedding gradient), more than twice its largest one, so the heap was trimmed
at every call and the next call faulted the same pages in again: 2711 minor faults and
4-6 ms of system time per 20 ms W10 step (one thread), ~0 with the thresholds set.

`keep_freed_memory()` sets them once, when the numba backend first compiles, to where
glibc's own rule would take them for 32 MiB blocks: M_MMAP_THRESHOLD 32 MiB (its maximum;
larger outputs go through codegen.outpool) and M_TRIM_THRESHOLD 64 MiB. So a process keeps
up to 64 MiB of freed heap mapped. Not done when the user tuned malloc through the
environment (MALLOC_*_ variables, GLIBC_TUNABLES), or with TRACEJIT_KEEP_HEAP=0; a no-op
where the C library is not glibc.
"""
from __future__ import annotations

import ctypes
import platform
import threading

from tracer import settings

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 64 << 20
USER_TUNING = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_",
               "MALLOC_MMAP_MAX_", "GLIBC_TUNABLES")

_lock = threading.Lock()
_state = {"tried": False, "applied": False}


def applied() -> bool:
    """Whether this process's malloc thresholds were set by `keep_freed_memory`."""
    return _state["applied"]


def keep_freed_memory() -> bool:
    """Set glibc's trim and mmap thresholds (once per process); True if they are set."""
    with _lock:
        if _state["tried"]:
            return _state["applied"]
        _state["tried"] = True
        if not settings.KEEP_HEAP or any(settings.is_set(n) for n in USER_TUNING):
            return False
        if platform.libc_ver()[0] != "glibc":
            return False
        try:
            mallopt = ctypes.CDLL(None).mallopt
        except (OSError, AttributeError):
            return False
        mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        # (mallopt returns 1 on success; the mmap threshold first: glibc caps it)
        ok = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
        ok = mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 and ok
        _state["applied"] = ok
        return ok


__all__ = ["applied", "keep_freed_memory"]
