"""BLAS layout tuning: which operand of a small 2-D matmul to copy into the other layout
first, timed once per shape (codegen.runner calls `_matmul_choice`)."""

from __future__ import annotations

import numpy as np

from tracer import settings

# A small matmul whose operands are in different layouts (x @ W.T: C-ordered times the
# transposed view of a C-ordered weight) can be much slower in one layout than another,
# and which one depends on the BLAS and the shapes: OpenBLAS (SkylakeX kernels) took
# 15.3 us for (32,100) @ (128,100).T, 10.1 us with x copied to Fortran order first, yet
# 1.9 against 3.6 us for (32,128) @ (10,128).T. So a program times the choices once per
# shape on this machine, at build time, and its runner keeps the fastest.
# TRACEJIT_AUTOTUNE_MATMUL=0 turns it off (the operands are then used as they come).
AUTOTUNE_MATMUL = settings.AUTOTUNE_MATMUL  # (a Flag: each truth test reads the environment)
AUTOTUNE_MAX_MKN = 1 << 22   # larger products pack their operands anyway: not timed
_MATMUL_CHOICE: dict = {}    # (shapes, dtype, layouts) -> "", "a" or "b"


def _other_layout(x: np.ndarray) -> np.ndarray:
    return np.asfortranarray(x) if x.flags.c_contiguous else np.ascontiguousarray(x)


def _matmul_choice(a_shape, b_shape, dtype, a_layout: str, b_layout: str) -> str:
    """Which operand of a 2-D matmul to copy into the other layout first ("a", "b"), or
    none (""): the fastest of the three by the median of 7 interleaved rounds, when it is
    at least 15% faster than using the operands as they come. Decided once per process."""
    key = (a_shape, b_shape, np.dtype(dtype).str, a_layout, b_layout)
    choice = _MATMUL_CHOICE.get(key)
    if choice is not None:
        return choice
    import time

    rng = np.random.default_rng(0)

    def make(shape, layout):
        x = rng.standard_normal(shape).astype(dtype)
        return np.asfortranarray(x) if layout == "F" else x

    a, b = make(a_shape, a_layout), make(b_shape, b_layout)
    runs = {"": lambda: np.matmul(a, b), "a": lambda: np.matmul(_other_layout(a), b),
            "b": lambda: np.matmul(a, _other_layout(b))}
    mkn = a_shape[0] * a_shape[1] * b_shape[1]
    reps = max(1, min(50, (1 << 20) // max(mkn, 1)))
    times = {k: [] for k in runs}
    for f in runs.values():
        f()
    for _ in range(7):
        for k, f in runs.items():
            t = time.perf_counter()
            for _ in range(reps):
                f()
            times[k].append(time.perf_counter() - t)
    med = {k: sorted(v)[3] for k, v in times.items()}
    best = min(med, key=med.get)
    choice = best if med[best] < 0.85 * med[""] else ""
    _MATMUL_CHOICE[key] = choice
    return choice
