"""Exhaustive float32 accuracy of codegen.vmath: every one of the 2**32 inputs.

    python -m benchmarks.vmath_accuracy [--every=N] [op ...]      (default: every float32 op)

For each unary op, runs the vmath function inlined into a kernel compiled with the kernels'
fast-math flags (as generated code calls it) over all float32 bit patterns, 2**24 at a
time, against numpy/scipy in float64 rounded to float32, and prints the largest error
in ULP, where it occurs, how many inputs exceed the bound in ``VMATH_MAX_ULP``, and
whether NaN goes to NaN exactly where the reference's does. Exits 1 if any op exceeds its
bound. About a minute per op on this machine; the test suite re-checks a subsample.
atan2, of two operands, runs every float32 y once, each with a different x (a permutation
of the bit patterns), not all 2**64 pairs; `--every=N` checks 1/N of the inputs of the
trigonometric ops. Binary ops (hypot, logaddexp) are measured on 2**27 random bit-pattern pairs and two
4096 x 4096 grids instead (`check_binary`).
"""
import functools
import math
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
             "hypot": np.hypot, "logaddexp": np.logaddexp,
             # trig.py; atan2 pairs each float32 y with one x (an odd multiple of y's bits
             # mod 2**32, a permutation): all 2**32 y values, each against some x
             "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin,
             "acos": np.arccos, "atan": np.arctan, "atan2": np.arctan2}
PAIRED = {"atan2"}
_PAIR = np.uint32(0x9E3779B1)  # odd: y -> y * _PAIR mod 2**32 is a permutation
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


# The trigonometric functions are checked with their reference in the same Numba loop
# (libm's float64 function through Numba's math module, rounded to float32) and the ULP
# distances in a second loop: about 3x faster than the numpy passes above, which matters
# on a shared machine. No fast-math flags: the generated kernels use none (and a caller's
# flags do not change vmath's results, tests/codegen/test_vmath.py).
FUSED = {"sin": math.sin, "cos": math.cos, "tan": math.tan, "asin": math.asin,
         "acos": math.acos, "atan": math.atan, "atan2": math.atan2}


def _fused_kernel(fn, ref, binary):
    if binary:
        @njit(error_model="numpy")
        def k2(x, y, out, want):
            for i in range(x.shape[0]):
                out[i] = fn(x[i], y[i])
                want[i] = np.float32(ref(np.float64(x[i]), np.float64(y[i])))
        return k2

    @njit(error_model="numpy")
    def k1(x, y, out, want):
        for i in range(x.shape[0]):
            out[i] = fn(x[i])
            want[i] = np.float32(ref(np.float64(x[i])))
    return k1


@functools.cache
def _fused_kernel_of(op):
    return _fused_kernel(V.VMATH[(op, "float32")], FUSED[op], op in PAIRED)


@njit
def _compare_bits(got, want, bound, acc):
    """got, want: int32 bit patterns; acc: int64 [worst, its index, count over bound, NaN
    mismatches] (the worst of this call)."""
    acc[0] = 0
    acc[1] = 0
    for i in range(got.shape[0]):
        g, w = np.int64(got[i]), np.int64(want[i])
        g_nan = (g & 0x7FFFFFFF) > 0x7F800000
        w_nan = (w & 0x7FFFFFFF) > 0x7F800000
        if g_nan != w_nan:
            acc[3] += 1
            continue
        if g_nan:
            continue
        go = -(g & 0x7FFFFFFF) if g < 0 else g
        wo = -(w & 0x7FFFFFFF) if w < 0 else w
        d = abs(go - wo)
        if d > acc[0]:
            acc[0] = d
            acc[1] = i
        if d > bound:
            acc[2] += 1


def check_fused(op: str, begin: int = 0, stop: int = 1 << 32) -> dict:
    binary = op in PAIRED
    k = _fused_kernel_of(op)
    n = min(CHUNK, stop - begin)
    base = np.arange(n, dtype=np.uint32)
    bits, other_bits = np.empty(n, np.uint32), np.zeros(n, np.uint32)
    x, other = bits.view(np.float32), other_bits.view(np.float32)
    out, want = np.empty(n, np.float32), np.empty(n, np.float32)
    acc = np.zeros(4, np.int64)
    bound = V.VMATH_MAX_ULP[(op, "float32")]
    worst, worst_x = 0, None
    for start in range(begin, stop, n):
        np.add(base, np.uint32(start), out=bits)
        if binary:
            np.multiply(bits, _PAIR, out=other_bits)
        k(x, other, out, want)
        _compare_bits(out.view(np.int32), want.view(np.int32), bound, acc)
        if acc[0] > worst:
            i = int(acc[1])
            worst, worst_x = int(acc[0]), (float(x[i]), float(other[i])) if binary else float(x[i])
    return {"op": op, "max_ulp": worst, "at": worst_x, "bound": bound, "over_bound": int(acc[2]),
            "nan_mismatch": int(acc[3])}


def check_sampled(op: str, every: int) -> dict:
    """check_fused on 1/every of the inputs: from each binade of each sign (2**23 patterns,
    NaN and inf included) a block of 2**23/every consecutive patterns at a varying offset,
    so that every exponent and sign is covered, for a shared machine's budget."""
    size = (1 << 23) // every
    total = {"op": op, "max_ulp": 0, "at": None, "over_bound": 0, "nan_mismatch": 0}
    for b in range(1 << 9):
        begin = (b << 23) + ((b * 0x9E3779B1) % every) * size
        r = check_fused(op, begin, begin + size)
        if r["max_ulp"] > total["max_ulp"]:
            total["max_ulp"], total["at"] = r["max_ulp"], r["at"]
        total["over_bound"] += r["over_bound"]
        total["nan_mismatch"] += r["nan_mismatch"]
        total["bound"] = r["bound"]
    return total


def main(argv=None) -> int:
    argv = list(argv if argv is not None else sys.argv[1:])
    every = 1
    if argv and argv[0].startswith("--every="):   # a sample: 1/N of the inputs (fused ops)
        every = int(argv.pop(0).split("=", 1)[1])
    ops = argv or [op for (op, dt) in V.VMATH_MAX_ULP if dt == "float32"]
    failed = False
    for op in ops:
        t0 = time.perf_counter()
        if op in BINARY:
            r = check_binary(op)
        elif op in FUSED:
            r = check_sampled(op, every) if every > 1 else check_fused(op)
        else:
            r = check(op)
        bad = r["over_bound"] or r["nan_mismatch"]
        failed |= bool(bad)
        print(f"{op:8s} max {r['max_ulp']} ULP at x={r['at']!r} (bound {r['bound']:g}): "
              f"{r['over_bound']} inputs over the bound, {r['nan_mismatch']} NaN "
              f"mismatches  [{time.perf_counter() - t0:.0f} s]", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
