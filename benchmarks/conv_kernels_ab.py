"""The direct convolution kernels of W8's two convolutions, both variants, timed interleaved.

    OPENBLAS_NUM_THREADS=1 NUMBA_NUM_THREADS=1 python -m benchmarks.conv_kernels_ab [--calls 200]

Each pass (forward, input gradient, weight gradient) of each convolution is built by both
generators (codegen.conv_kernels: all taps of one channel pair per pass over a row;
codegen.conv_blocked: a kernel row for a block of channels per pass), compiled, checked
against the registry's numpy implementation in float64, and called as one piece ([0, n),
the whole batch or all output channels) alternately, call by call, so both see the same
load. Prints the median thread CPU time per call of each (benchmarks/CONV_NOTES.md has
the figures).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

# W8: conv 1 (64x1x28x28 by 6 5x5, padding 2), conv 2 (64x6x14x14 by 16 5x5)
SHAPES = {"conv1": (64, 1, 28, 28, 6, 5, 5, 1, 1, 2, 2, 2, 2, "float32"),
          "conv2": (64, 6, 14, 14, 16, 5, 5, 1, 1, 0, 0, 0, 0, "float32")}


def _case(g, which, rng):
    """(in0, in1, output size, float64 reference) of one pass."""
    from eager.ops_conv_direct import _conv_impl, _input_grad_impl, _weight_grad_impl

    x = rng.standard_normal((g.n, g.c, g.h, g.w)).astype(g.dtype)
    w = rng.standard_normal((g.o, g.c, g.kh, g.kw)).astype(g.dtype)
    geo = ((1, 1), (g.dh, g.dw), ((g.pt, g.pb), (g.pl, g.pr)))
    y = _conv_impl(x.astype(np.float64), w.astype(np.float64), *geo)
    if which == "forward":
        return x, w, y.size, y
    dy = rng.standard_normal(y.shape).astype(g.dtype)
    if which == "input_grad":
        return dy, w, x.size, _input_grad_impl(dy.astype(np.float64), w.astype(np.float64),
                                               (g.h, g.w), *geo)
    return dy, x, w.size, _weight_grad_impl(dy.astype(np.float64), x.astype(np.float64),
                                            (g.kh, g.kw), *geo)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args(argv)
    from codegen import build, conv_blocked, conv_kernels

    variants = {"per_pair": conv_kernels, "blocked": conv_blocked}
    rng = np.random.default_rng(0)
    print(f"load average {os.getloadavg()[0]:.1f}; thread CPU, median of {args.calls} calls")
    for key, shape in SHAPES.items():
        g = conv_kernels.Geometry(*shape)
        for which in ("forward", "input_grad", "weight_grad"):
            a, b, size, want = _case(g, which, rng)
            a, b = a.ravel(), b.ravel()
            runs = {}
            for name, module in variants.items():
                split = getattr(module, which)(g)
                kernel = build.load_kernel(split.source, f"ab_{name}")[0]
                out = np.empty(size, g.dtype)
                assert kernel(a, b, out, 0, split.n) == 0
                err = np.abs(out.reshape(want.shape) - want).max() / np.abs(want).max()
                runs[name] = (kernel, out, split.n, err, [])
            for _ in range(args.calls):
                for kernel, out, n, _, times in runs.values():
                    t = time.thread_time()
                    kernel(a, b, out, 0, n)
                    times.append(time.thread_time() - t)
            line = [f"{key} {which:<11}"]
            for name, (_, _, _, err, times) in runs.items():
                line.append(f"{name} {1e3 * statistics.median(times):6.3f} ms "
                            f"(rel. error {err:.0e})")
            print("  ".join(line))


if __name__ == "__main__":
    main()
