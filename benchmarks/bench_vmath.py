"""Benchmark codegen.vmath against numpy, libm-in-numba and a memory copy.

    python benchmarks/bench_vmath.py [--n LOG2N] [--repeat R] [--threads T]
    python benchmarks/bench_vmath.py --trig [--n LOG2N] [--repeat R]

Times, on 2**24 float32 values (64 MiB in, 64 MiB out):
  * x.copy() and np.copyto(out, x)   (memory-bandwidth yardsticks)
  * numpy np.exp / np.tanh (out= preallocated)
  * numba loop calling math.exp / math.tanh (scalar libm, not vectorized)
  * numba loop calling vmath exp_f32 / tanh_f32 (vectorized)
  * fused GELU (tanh approximation) loop with tanh_f32 vs numpy expression
  * the vmath loops with prange on T threads (default 2)
Cases are run round-robin R times (default 7); prints median and min per case
and ratios.  --trig instead prints ns per element of sin, cos, tan, asin, acos, atan and
atan2 in float32 and float64: numpy's ufunc, a numba loop calling libm (what kernels did
before codegen/vmath/trig.py) and a numba loop calling the vmath function (what kernels do).  On a shared machine, load from other processes shows up mostly
in the prange (2-thread) numbers.
"""

import argparse
import functools
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numba  # noqa: E402
from numba import njit, prange  # noqa: E402

from codegen.vmath import FASTMATH_FLAGS, exp_f32, tanh_f32  # noqa: E402

FM = FASTMATH_FLAGS
F32 = np.float32
HALF, ONE = F32(0.5), F32(1.0)
GELU_C, GELU_K = F32(0.7978845608028654), F32(0.044715)


# --- numba kernels ---------------------------------------------------------

@njit(fastmath=FM)
def exp_libm(x, out):
    for i in range(x.shape[0]):
        out[i] = math.exp(x[i])


@njit(fastmath=FM)
def tanh_libm(x, out):
    for i in range(x.shape[0]):
        out[i] = math.tanh(x[i])


@njit(fastmath=FM)
def exp_vm(x, out):
    for i in range(x.shape[0]):
        out[i] = exp_f32(x[i])


@njit(fastmath=FM)
def tanh_vm(x, out):
    for i in range(x.shape[0]):
        out[i] = tanh_f32(x[i])


@njit(fastmath=FM)
def gelu_vm(x, out):
    for i in range(x.shape[0]):
        v = x[i]
        out[i] = HALF * v * (ONE + tanh_f32(GELU_C * (v + GELU_K * v * v * v)))


@njit(fastmath=FM)
def gelu_libm(x, out):
    for i in range(x.shape[0]):
        v = x[i]
        out[i] = HALF * v * (ONE + math.tanh(GELU_C * (v + GELU_K * v * v * v)))


@njit(fastmath=FM, parallel=True)
def exp_vm_par(x, out):
    for i in prange(x.shape[0]):
        out[i] = exp_f32(x[i])


@njit(fastmath=FM, parallel=True)
def tanh_vm_par(x, out):
    for i in prange(x.shape[0]):
        out[i] = tanh_f32(x[i])


@njit(fastmath=FM, parallel=True)
def gelu_vm_par(x, out):
    for i in prange(x.shape[0]):
        v = x[i]
        out[i] = HALF * v * (ONE + tanh_f32(GELU_C * (v + GELU_K * v * v * v)))


@njit(parallel=True)
def copy_par(x, out):
    for i in prange(x.shape[0]):
        out[i] = x[i]


def gelu_numpy(x, out):
    t = x * x
    t *= x
    t *= GELU_K
    t += x
    t *= GELU_C
    np.tanh(t, out=t)
    t += ONE
    t *= x
    np.multiply(t, HALF, out=out)


# --- trigonometric functions (--trig) ---------------------------------------

TRIG = {"sin": (np.sin, math.sin), "cos": (np.cos, math.cos), "tan": (np.tan, math.tan),
        "asin": (np.arcsin, math.asin), "acos": (np.arccos, math.acos),
        "atan": (np.arctan, math.atan), "atan2": (np.arctan2, math.atan2)}


def _loop(fn, binary):
    if binary:
        @njit(fastmath=set(), error_model="numpy")  # the generated kernels' flags
        def k2(x, y, out):
            for i in range(x.shape[0]):
                out[i] = fn(x[i], y[i])
        return k2

    @njit(fastmath=set(), error_model="numpy")
    def k1(x, y, out):
        for i in range(x.shape[0]):
            out[i] = fn(x[i])
    return k1


def trig_table(n, repeat):
    from codegen import vmath as V

    rng = np.random.default_rng(0)
    print("ns per element, n = 2**%d, best of %d; x uniform in [-1, 1] (asin, acos) or "
          "[-10, 10], atan2's y likewise\n" % (n.bit_length() - 1, repeat))
    print("%-6s %-8s %8s %11s %8s %9s" % ("op", "dtype", "numpy", "numba libm", "vmath",
                                         "numpy/vm"))
    for op, (np_fn, libm) in TRIG.items():
        for dt in (np.float32, np.float64):
            lim = 1.0 if op in ("asin", "acos") else 10.0
            x = rng.uniform(-lim, lim, n).astype(dt)
            y = rng.uniform(-lim, lim, n).astype(dt)
            out = np.empty_like(x)
            binary = op == "atan2"
            vm, lm = _loop(V.VMATH[(op, np.dtype(dt).name)], binary), _loop(libm, binary)
            args = (x, y) if binary else (x,)
            cases = {"numpy": functools.partial(np_fn, *args, out=out),
                     "libm": functools.partial(lm, x, y, out),
                     "vmath": functools.partial(vm, x, y, out)}
            for fn in cases.values():
                fn()
            ts = {k: [] for k in cases}
            for _ in range(repeat):
                for k, fn in cases.items():
                    t0 = time.perf_counter()
                    fn()
                    ts[k].append((time.perf_counter() - t0) / n * 1e9)
            med = {k: float(np.min(v)) for k, v in ts.items()}  # the least disturbed run
            note = "" if V.VMATH_VECTORIZES[(op, np.dtype(dt).name)] else "  (vmath = libm)"
            print("%-6s %-8s %8.2f %11.2f %8.2f %8.2fx%s" % (
                op, np.dtype(dt).name, med["numpy"], med["libm"], med["vmath"],
                med["numpy"] / med["vmath"], note))


# --- timing ----------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=24, help="log2 of element count")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--trig", action="store_true", help="the trigonometric functions' table")
    args = ap.parse_args()
    if args.trig:
        with np.errstate(all="ignore"):
            trig_table(1 << args.n, args.repeat)
        return

    n = 1 << args.n
    rng = np.random.default_rng(0)
    x = rng.uniform(-10.0, 10.0, n).astype(np.float32)
    out = np.empty_like(x)
    nbytes = 2 * x.nbytes  # read + write
    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))

    # correctness spot check of the fused kernel
    gelu_vm(x[:4096], out[:4096])
    ref = np.empty(4096, np.float32)
    gelu_numpy(x[:4096], ref)
    assert np.allclose(out[:4096], ref, rtol=1e-5, atol=1e-6)

    cases = [
        ("x.copy()", lambda: x.copy()),
        ("np.copyto(out, x)", lambda: np.copyto(out, x)),
        ("numba prange copy", lambda: copy_par(x, out)),
        ("numpy np.exp", lambda: np.exp(x, out=out)),
        ("numba loop math.exp", lambda: exp_libm(x, out)),
        ("numba loop vmath exp_f32", lambda: exp_vm(x, out)),
        ("numba prange vmath exp_f32", lambda: exp_vm_par(x, out)),
        ("numpy np.tanh", lambda: np.tanh(x, out=out)),
        ("numba loop math.tanh", lambda: tanh_libm(x, out)),
        ("numba loop vmath tanh_f32", lambda: tanh_vm(x, out)),
        ("numba prange vmath tanh_f32", lambda: tanh_vm_par(x, out)),
        ("numpy GELU(tanh) expression", lambda: gelu_numpy(x, out)),
        ("numba loop GELU math.tanh", lambda: gelu_libm(x, out)),
        ("numba loop GELU tanh_f32", lambda: gelu_vm(x, out)),
        ("numba prange GELU tanh_f32", lambda: gelu_vm_par(x, out)),
    ]
    for _, fn in cases:  # warm up: compilation, page faults
        fn()
    # round-robin so that load from other processes hits all cases alike
    times = {name: [] for name, _ in cases}
    for _ in range(args.repeat):
        for name, fn in cases:
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    med = {k: float(np.median(v)) for k, v in times.items()}
    best = {k: float(np.min(v)) for k, v in times.items()}

    print("n = 2**%d float32, %d rounds, %d thread(s) for prange, %d cpus\n"
          % (args.n, args.repeat, numba.get_num_threads(), os.cpu_count()))
    print("%-32s %10s %10s %9s" % ("", "median ms", "min ms", "GB/s(med)"))
    for name, _ in cases:
        print("%-32s %10.2f %10.2f %9.1f"
              % (name, med[name] * 1e3, best[name] * 1e3, nbytes / med[name] / 1e9))

    print("\nratios of medians (min in parentheses):")
    for label, a, b in [
        ("exp:  numpy / vmath", "numpy np.exp", "numba loop vmath exp_f32"),
        ("exp:  math.exp loop / vmath", "numba loop math.exp", "numba loop vmath exp_f32"),
        ("exp:  vmath / x.copy()", "numba loop vmath exp_f32", "x.copy()"),
        ("exp:  vmath / np.copyto", "numba loop vmath exp_f32", "np.copyto(out, x)"),
        ("exp:  vmath prange / prange copy", "numba prange vmath exp_f32", "numba prange copy"),
        ("tanh: numpy / vmath", "numpy np.tanh", "numba loop vmath tanh_f32"),
        ("tanh: math.tanh loop / vmath", "numba loop math.tanh", "numba loop vmath tanh_f32"),
        ("tanh: vmath / x.copy()", "numba loop vmath tanh_f32", "x.copy()"),
        ("tanh: vmath / np.copyto", "numba loop vmath tanh_f32", "np.copyto(out, x)"),
        ("tanh: vmath prange / prange copy", "numba prange vmath tanh_f32", "numba prange copy"),
        ("gelu: numpy / vmath loop", "numpy GELU(tanh) expression", "numba loop GELU tanh_f32"),
        ("gelu: math.tanh loop / vmath loop", "numba loop GELU math.tanh", "numba loop GELU tanh_f32"),
        ("gelu: vmath loop / x.copy()", "numba loop GELU tanh_f32", "x.copy()"),
        ("gelu: vmath loop / np.copyto", "numba loop GELU tanh_f32", "np.copyto(out, x)"),
        ("gelu: vmath prange / prange copy", "numba prange GELU tanh_f32", "numba prange copy"),
    ]:
        print("  %-36s %6.2fx  (%5.2fx)" % (label, med[a] / med[b], best[a] / best[b]))


if __name__ == "__main__":
    main()
