"""Exhaustive float32 accuracy of codegen.vmath: every one of the 2**32 inputs.

    python -m benchmarks.vmath_accuracy [op ...]      (default: every float32 op)

For each unary op, runs the vmath function inlined into a kernel compiled with the kernels'
fast-math flags (as generated code calls it) over all float32 bit patterns, 2**24 at a
time, against numpy/scipy in float64 rounded to float32, and prints the largest error
in ULP, where it occurs, how many inputs exceed the bound in ``VMATH_MAX_ULP``, and
whether NaN goes to NaN exactly where the reference's does. Exits 1 if any op exceeds its
bound. About a minute per op on this machine; the test suite re-checks a subsample.
Binary ops (hypot, logaddexp) are measured on 2**27 random bit-pattern pairs and two
4096 x 4096 grids instead (`check_binary`).
"""
import sys
import time

import numpy as np
import scipy.special as sp
from numba import njit

from codegen import vmath as V

REFERENCE = {"exp": np.exp, "expm1": np.expm1, "log": np.log, "log1p": np.log1p,
             "tanh": np.tanh, "sigmoid": sp.expit, "erf": sp.erf,
             "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh,
             "atanh": np.arctanh, "log2": np.log2, "log10": np.log10, "exp2": np.exp2,
             "hypot": np.hypot, "logaddexp": np.logaddexp}
CHUNK = 1 << 24
# Binary ops cannot be exhaustive (2**64 pairs): `check_binary` measures random bit
# patterns and a grid. logaddexp's error is in ULP of max(|result|, 1/2): near a result
# of 0, max + log1p(exp(-|a-b|)) cancels (numpy's own float32 loop as much).
BINARY = {"hypot": 0.0, "logaddexp": 0.5}  # op -> the floor of |result| an ULP is taken at


def _kernel(fn):
    @njit(fastmath=V.FASTMATH_FLAGS)
    def k(x, out):
        for i in range(x.shape[0]):
            out[i] = fn(x[i])
    return k


def _ordered(bits: np.ndarray) -> np.ndarray:
    i = bits.astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


@njit
def _compare(got, ref, bound):
    """(largest ULP distance, its index, how many exceed `bound`, NaN mismatches) of two
    float32 arrays, in one pass (numpy's temporaries made the check memory-bound)."""
    worst, at, over, nan_mismatch = 0, 0, 0, 0
    bits_got, bits_ref = got.view(np.int32), ref.view(np.int32)
    for i in range(got.shape[0]):
        g_nan, r_nan = got[i] != got[i], ref[i] != ref[i]
        if g_nan or r_nan:
            nan_mismatch += g_nan != r_nan
            continue
        g, r = np.int64(bits_got[i]), np.int64(bits_ref[i])
        g = -(g & 0x7FFFFFFF) if g < 0 else g
        r = -(r & 0x7FFFFFFF) if r < 0 else r
        d = abs(g - r)
        over += d > bound
        if d > worst:
            worst, at = d, i
    return worst, at, over, nan_mismatch


def check(op: str) -> dict:
    k = _kernel(V.VMATH[(op, "float32")])
    ref_fn = REFERENCE[op]
    base = np.arange(CHUNK, dtype=np.uint32)
    bits = np.empty(CHUNK, np.uint32)
    x = bits.view(np.float32)
    out, ref = np.empty(CHUNK, np.float32), np.empty(CHUNK, np.float32)
    wide = np.empty(CHUNK, np.float64)
    worst, worst_x, over, nan_mismatch = 0, None, 0, 0
    bound = V.VMATH_MAX_ULP[(op, "float32")]
    for start in range(0, 1 << 32, CHUNK):
        np.add(base, np.uint32(start), out=bits)
        k(x, out)
        with np.errstate(all="ignore"):
            wide[...] = x
            ref_fn(wide, out=wide)
            ref[...] = wide
        w, i, n_over, n_nan = _compare(out, ref, bound)
        if w > worst:
            worst, worst_x = int(w), float(x[i])
        over += int(n_over)
        nan_mismatch += int(n_nan)
    return {"op": op, "max_ulp": worst, "at": worst_x, "bound": bound, "over_bound": over,
            "nan_mismatch": nan_mismatch}


def _kernel2(fn):
    @njit(fastmath=V.FASTMATH_FLAGS)
    def k(x, y, out):
        for i in range(x.shape[0]):
            out[i] = fn(x[i], y[i])
    return k


def _binary_inputs(chunks: int):
    """(x, y) float32 chunks: random bit patterns (both signs, denormals, inf, nan), then
    a 4096 x 4096 grid of every 2**20-th bit pattern, then a grid on [-40, 40]^2."""
    rng = np.random.default_rng(0)
    for _ in range(chunks):
        yield (rng.integers(0, 1 << 32, CHUNK, dtype=np.uint64).astype(np.uint32).view(np.float32),
               rng.integers(0, 1 << 32, CHUNK, dtype=np.uint64).astype(np.uint32).view(np.float32))
    axis = (np.arange(4096, dtype=np.uint64) << np.uint64(20)).astype(np.uint32).view(np.float32)
    yield np.repeat(axis, 4096), np.tile(axis, 4096)
    axis = np.linspace(-40, 40, 4096).astype(np.float32)
    yield np.repeat(axis, 4096), np.tile(axis, 4096)


def check_binary(op: str, chunks: int = 8) -> dict:
    """As `check`, for a binary op on a sample: `chunks` * 2**24 random pairs + two grids."""
    k = _kernel2(V.VMATH[(op, "float32")])
    floor = np.float32(BINARY[op])
    worst, worst_x, over, nan_mismatch = 0.0, None, 0, 0
    bound = V.VMATH_MAX_ULP[(op, "float32")]
    for x, y in _binary_inputs(chunks):
        out = np.empty_like(x)
        k(x, y, out)
        with np.errstate(all="ignore"):
            ref = REFERENCE[op](x.astype(np.float64), y.astype(np.float64)).astype(np.float32)
        got_nan, ref_nan = np.isnan(out), np.isnan(ref)
        nan_mismatch += int(np.count_nonzero(got_nan != ref_nan))
        d = np.abs(_ordered(out.view(np.int32)) - _ordered(ref.view(np.int32))).astype(np.float64)
        if floor:  # below the floor: the error in ULP of the floor
            low = np.abs(ref) < floor
            with np.errstate(all="ignore"):
                d[low] = (np.abs(out[low].astype(np.float64) - ref[low])
                          / float(np.spacing(floor)))
        d[got_nan | ref_nan] = 0
        i = int(np.argmax(d))
        if d[i] > worst:
            worst, worst_x = float(d[i]), (float(x[i]), float(y[i]))
        over += int(np.count_nonzero(d > bound))
    return {"op": op, "max_ulp": worst, "at": worst_x, "bound": bound, "over_bound": over,
            "nan_mismatch": nan_mismatch}


def main(argv=None) -> int:
    ops = (argv if argv is not None else sys.argv[1:]) or [
        op for (op, dt) in V.VMATH_MAX_ULP if dt == "float32"]
    failed = False
    for op in ops:
        t0 = time.perf_counter()
        r = check_binary(op) if op in BINARY else check(op)
        bad = r["over_bound"] or r["nan_mismatch"]
        failed |= bool(bad)
        print(f"{op:8s} max {r['max_ulp']} ULP at x={r['at']!r} (bound {r['bound']:g}): "
              f"{r['over_bound']} inputs over the bound, {r['nan_mismatch']} NaN "
              f"mismatches  [{time.perf_counter() - t0:.0f} s]", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
