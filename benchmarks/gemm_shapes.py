"""Matrix products by shape: tracejit's AVX-512 kernel (codegen.gemm) against numpy's BLAS.

    OPENBLAS_NUM_THREADS=1 NUMBA_NUM_THREADS=1 python -m benchmarks.gemm_shapes [--repeat 30]

For each product shape of W9 (GPT step) and W10 (LSTM step): the median time of
`np.matmul` and of `codegen.gemm.matmul` (the call compiled programs make where
`codegen.gemm.use_for` picks it), interleaved in one process, their GFLOP/s, the ratio, and
each one's largest error against a float64 product relative to the largest entry. Run
with one thread for the kernels' own speed; the machine's OPENBLAS_CORETYPE decides which
BLAS kernels numpy runs (the report prints OpenBLAS's core name). Measurements from
these machines: benchmarks/GEMM_NOTES.md.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

# (label, a shape, b shape, b transposed: x @ w.T reads w's rows as columns)
SHAPES = [
    ("W9  x @ w.T  1024x128x512", (1024, 128), (512, 128), True),
    ("W9  h @ w    1024x512x128", (1024, 512), (512, 128), False),
    ("W9  dW a.T   128x1024x512", (1024, 128), (1024, 512), "a"),
    ("W9  qkv      1024x128x384", (1024, 128), (128, 384), False),
    ("W9  attn p@v 64x(64x64x32)", (64, 64, 64), (64, 64, 32), False),
    ("W10 decoder  700x128x1000", (700, 128), (128, 1000), False),
    ("W10 dX       700x1000x128", (700, 1000), (1000, 128), False),
    ("W10 dW a.T   512x700x128", (700, 512), (700, 128), "a"),
    ("W10 step     20x128x512", (20, 128), (128, 512), False),
]


def _median_seconds(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def _operands(a_shape, b_shape, how, rng):
    a = rng.standard_normal(a_shape, dtype=np.float32)
    b = rng.standard_normal(b_shape, dtype=np.float32)
    if how is True:
        b = b.T
    elif how == "a":
        a = a.T
    return a, b


def main(argv=None) -> None:
    from codegen import gemm

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args(argv)
    print(f"OpenBLAS core: {gemm.openblas_core()}; kernel used by compiled programs here: "
          f"{gemm.available()}")
    gemm.prepare()
    rng = np.random.default_rng(0)
    print(f"{'product':28s} {'BLAS ms':>8s} {'GF/s':>6s} {'gemm ms':>8s} {'GF/s':>6s} "
          f"{'ratio':>6s} {'err BLAS':>9s} {'err gemm':>9s}")
    for label, a_shape, b_shape, how in SHAPES:
        a, b = _operands(a_shape, b_shape, how, rng)
        flops = 2.0 * np.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2])) \
            * a.shape[-2] * a.shape[-1] * b.shape[-1]
        ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
        scale = float(np.abs(ref).max())
        out_blas, out_gemm = np.matmul(a, b), gemm.matmul(a, b)
        blas, ours = [], []
        for _ in range(3):  # interleaved rounds: load changes hit both alike
            blas.append(_median_seconds(lambda: np.matmul(a, b, out=out_blas), args.repeat))
            ours.append(_median_seconds(lambda: gemm.matmul(a, b, out=out_gemm), args.repeat))
        tb, tg = float(np.median(blas)), float(np.median(ours))
        eb = float(np.abs(out_blas - ref).max()) / scale
        eg = float(np.abs(out_gemm - ref).max()) / scale
        print(f"{label:28s} {tb * 1e3:8.3f} {flops / tb / 1e9:6.0f} {tg * 1e3:8.3f} "
              f"{flops / tg / 1e9:6.0f} {tb / tg:6.2f} {eb:9.1e} {eg:9.1e}")


if __name__ == "__main__":
    main()
