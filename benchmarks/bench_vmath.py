"""Benchmark codegen.vmath against numpy, libm-in-numba and a memory copy.

    python benchmarks/bench_vmath.py [--n LOG2N] [--repeat R] [--threads T]

Times, on 2**24 float32 values (64 MiB in, 64 MiB out):
  * x.copy() and np.copyto(out, x)   (memory-bandwidth yardsticks)
  * numpy np.exp / np.tanh (out= preallocated)
  * numba loop calling math.exp / math.tanh (scalar libm, not vectorized)
  * numba loop calling vmath exp_f32 / tanh_f32 (vectorized)
  * fused GELU (tanh approximation) loop with tanh_f32 vs numpy expression
  * the vmath loops with prange on T threads (default 2)
Prints the median of R runs (default 7) and ratios.
"""

import argparse
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


# --- timing ----------------------------------------------------------------

def median_time(fn, repeat):
    fn()  # warm up (page faults, compilation)
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=24, help="log2 of element count")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

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

    rows = []

    def bench(name, fn):
        t = median_time(fn, args.repeat)
        rows.append((name, t))
        print("%-36s %9.2f ms  %6.1f GB/s" % (name, t * 1e3, nbytes / t / 1e9),
              flush=True)
        return t

    print("n = 2**%d float32, median of %d runs, %d thread(s) for prange\n"
          % (args.n, args.repeat, numba.get_num_threads()))
    t_copy = bench("x.copy()", lambda: x.copy())
    t_copyto = bench("np.copyto(out, x)", lambda: np.copyto(out, x))
    t_copy_par = bench("numba prange copy", lambda: copy_par(x, out))
    t_np_exp = bench("numpy np.exp", lambda: np.exp(x, out=out))
    t_libm_exp = bench("numba loop math.exp", lambda: exp_libm(x, out))
    t_vm_exp = bench("numba loop vmath exp_f32", lambda: exp_vm(x, out))
    t_vm_exp_p = bench("numba prange vmath exp_f32", lambda: exp_vm_par(x, out))
    t_np_tanh = bench("numpy np.tanh", lambda: np.tanh(x, out=out))
    t_libm_tanh = bench("numba loop math.tanh", lambda: tanh_libm(x, out))
    t_vm_tanh = bench("numba loop vmath tanh_f32", lambda: tanh_vm(x, out))
    t_vm_tanh_p = bench("numba prange vmath tanh_f32", lambda: tanh_vm_par(x, out))
    t_np_gelu = bench("numpy GELU(tanh) expression", lambda: gelu_numpy(x, out))
    t_libm_gelu = bench("numba loop GELU math.tanh", lambda: gelu_libm(x, out))
    t_vm_gelu = bench("numba loop GELU tanh_f32", lambda: gelu_vm(x, out))
    t_vm_gelu_p = bench("numba prange GELU tanh_f32", lambda: gelu_vm_par(x, out))

    print("\nratios (time / time):")
    for label, a, b in [
        ("exp:  numpy / vmath", t_np_exp, t_vm_exp),
        ("exp:  math.exp loop / vmath", t_libm_exp, t_vm_exp),
        ("exp:  vmath / x.copy()", t_vm_exp, t_copy),
        ("exp:  vmath / np.copyto", t_vm_exp, t_copyto),
        ("exp:  vmath prange / prange copy", t_vm_exp_p, t_copy_par),
        ("tanh: numpy / vmath", t_np_tanh, t_vm_tanh),
        ("tanh: math.tanh loop / vmath", t_libm_tanh, t_vm_tanh),
        ("tanh: vmath / x.copy()", t_vm_tanh, t_copy),
        ("tanh: vmath / np.copyto", t_vm_tanh, t_copyto),
        ("tanh: vmath prange / prange copy", t_vm_tanh_p, t_copy_par),
        ("gelu: numpy / vmath loop", t_np_gelu, t_vm_gelu),
        ("gelu: math.tanh loop / vmath loop", t_libm_gelu, t_vm_gelu),
        ("gelu: vmath loop / x.copy()", t_vm_gelu, t_copy),
        ("gelu: vmath loop / np.copyto", t_vm_gelu, t_copyto),
        ("gelu: vmath prange / prange copy", t_vm_gelu_p, t_copy_par),
    ]:
        print("  %-36s %6.2fx" % (label, a / b))


if __name__ == "__main__":
    main()
