"""Output recycling: large outputs reuse an array the caller has dropped (the executor's
memory; codegen.runner allocates a step's output through `_recycled`)."""

from __future__ import annotations

import math
import sys

import numpy as np

from tracer import settings

# Outputs of at least this many bytes are recycled once the caller has dropped them
# (`_recycled`). glibc maps every allocation past 32 MiB fresh from the OS and unmaps it
# on free, so each call's output page-faults (the kernel zeroes it) as it is written: W1's
# GELU took 10.6 ms into a new 64 MiB array, 5.7 ms into an existing one. Smaller
# arrays come from glibc's heap, which it reuses by itself. TRACEJIT_OUTPUT_POOL_MIN_BYTES
# overrides it (0: never).
OUTPUT_POOL_MIN_BYTES = settings.OUTPUT_POOL_MIN_BYTES.value()
_getrefcount = sys.getrefcount


def _refs_in(ring):
    for o in ring:
        return _getrefcount(o)


# The count `_recycled` sees for an array nothing outside its ring refers to (the ring,
# the loop variable, getrefcount's argument), measured rather than assumed: interpreters
# differ in how many references a running loop holds.
_UNREFERENCED = _refs_in([np.empty(0)])


def _recycles(shape, dtype) -> bool:
    """Whether an output of this (bound) shape goes through `_recycled`."""
    return math.prod(shape) * np.dtype(dtype).itemsize >= OUTPUT_POOL_MIN_BYTES


def _recycled(ring: list, shape: tuple, dtype) -> np.ndarray:
    """An output array for a program step: one this step returned earlier and that
    nothing refers to any more (the caller dropped it, and every view of it), else a new
    one; the ring (per thread and step) keeps the two most recent, so a loop holding the
    previous result while it makes the next one recycles too.

    The caller gets the array object itself, so any reference it keeps (a Tensor, a view,
    a memoryview, an autograd node) counts. Only a weak reference does not: it may see
    the array again, with a later call's values."""
    for o in ring:
        if _getrefcount(o) == _UNREFERENCED and o.shape == shape:
            return o
    o = np.empty(shape, dtype)
    if len(ring) == 2:
        del ring[0]  # the oldest is still the caller's: keep track of recent ones instead
    ring.append(o)
    return o
