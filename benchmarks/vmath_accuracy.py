"""Exhaustive float32 accuracy of codegen.vmath: every one of the 2**32 inputs.

    python -m benchmarks.vmath_accuracy [op ...]      (default: every float32 op)

For each op, runs the vmath function inlined into a kernel compiled with the kernels'
fast-math flags (as generated code calls it) over all float32 bit patterns, 2**24 at a
time, against numpy/scipy in float64 rounded to float32, and prints the largest error
in ULP, where it occurs, how many inputs exceed the bound in ``VMATH_MAX_ULP``, and
whether NaN goes to NaN exactly where the reference's does. Exits 1 if any op exceeds its
bound. About a minute per op on this machine; the test suite re-checks a subsample.
atan2, of two operands, runs every float32 y once, each with a different x (a permutation
of the bit patterns), not all 2**64 pairs.
"""
import sys
import time

import numpy as np
import scipy.special as sp
from numba import njit

from codegen import vmath as V

REFERENCE = {"exp": np.exp, "expm1": np.expm1, "log": np.log, "log1p": np.log1p,
             "tanh": np.tanh, "sigmoid": sp.expit, "erf": sp.erf,
             # trig.py; atan2 pairs each float32 y with one x (an odd multiple of y's bits
             # mod 2**32, a permutation): all 2**32 y values, each against some x
             "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin,
             "acos": np.arccos, "atan": np.arctan, "atan2": np.arctan2}
BINARY = {"atan2"}
_PAIR = np.uint32(0x9E3779B1)  # odd: y -> y * _PAIR mod 2**32 is a permutation
CHUNK = 1 << 24


def _kernel(fn):
    @njit(fastmath=V.FASTMATH_FLAGS)
    def k(x, out):
        for i in range(x.shape[0]):
            out[i] = fn(x[i])
    return k


def _kernel2(fn):
    @njit(fastmath=V.FASTMATH_FLAGS)
    def k(y, x, out):
        for i in range(x.shape[0]):
            out[i] = fn(y[i], x[i])
    return k


def _ordered(bits: np.ndarray) -> np.ndarray:
    i = bits.astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


def check(op: str) -> dict:
    binary = op in BINARY
    k = (_kernel2 if binary else _kernel)(V.VMATH[(op, "float32")])
    ref_fn = REFERENCE[op]
    base = np.arange(CHUNK, dtype=np.uint32)
    bits = np.empty(CHUNK, np.uint32)
    x = bits.view(np.float32)
    other_bits = np.empty(CHUNK, np.uint32)
    other = other_bits.view(np.float32)
    out, ref = np.empty(CHUNK, np.float32), np.empty(CHUNK, np.float32)
    wide = np.empty(CHUNK, np.float64)
    d = np.empty(CHUNK, np.int64)
    worst, worst_x, over, nan_mismatch = 0, None, 0, 0
    bound = V.VMATH_MAX_ULP[(op, "float32")]
    for start in range(0, 1 << 32, CHUNK):
        np.add(base, np.uint32(start), out=bits)
        with np.errstate(all="ignore"):
            if binary:
                np.multiply(bits, _PAIR, out=other_bits)
                k(x, other, out)
                ref_fn(x.astype(np.float64), other.astype(np.float64), out=wide)
            else:
                k(x, out)
                ref_fn(x.astype(np.float64), out=wide)
            ref[...] = wide
        got_nan, ref_nan = np.isnan(out), np.isnan(ref)
        nan_mismatch += int(np.count_nonzero(got_nan != ref_nan))
        np.subtract(_ordered(out.view(np.int32)), _ordered(ref.view(np.int32)), out=d)
        np.abs(d, out=d)
        d[got_nan | ref_nan] = 0
        i = int(np.argmax(d))
        if d[i] > worst:
            worst, worst_x = int(d[i]), (float(x[i]), float(other[i])) if binary else float(x[i])
        over += int(np.count_nonzero(d > bound))
    return {"op": op, "max_ulp": worst, "at": worst_x, "bound": bound, "over_bound": over,
            "nan_mismatch": nan_mismatch}


def main(argv=None) -> int:
    ops = (argv if argv is not None else sys.argv[1:]) or [
        op for (op, dt) in V.VMATH_MAX_ULP if dt == "float32"]
    failed = False
    for op in ops:
        t0 = time.perf_counter()
        r = check(op)
        bad = r["over_bound"] or r["nan_mismatch"]
        failed |= bool(bad)
        print(f"{op:8s} max {r['max_ulp']} ULP at x={r['at']!r} (bound {r['bound']:g}): "
              f"{r['over_bound']} inputs over the bound, {r['nan_mismatch']} NaN "
              f"mismatches  [{time.perf_counter() - t0:.0f} s]", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
