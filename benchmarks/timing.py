"""Timing and verification helpers shared by the suite and its peer subprocesses.

Only numpy and the standard library are imported here, so a peer process (numpy,
PyTorch, JAX) measures with exactly the same method as the main process.

Method: every callable is calibrated to a number of calls per run that lasts at
least `min_run_s` (the calibration is also the warm-up), then the callables are
timed round-robin, one run each per repetition, so that load from other processes
on a shared machine hits them alike. The reported time is the median over the
repetitions of the per-call time. With `settle_s`, each timed run of a round-robin of
several callables starts after that pause: numpy's OpenBLAS leaves its worker threads
spinning for about 0.1 s after its last call (2^28 TSC ticks), and the run after an
eager cell would otherwise share the cores with them (a peer, timed alone in a process
of its own, never pays that).

    >>> t = measure({"copy": lambda: x.copy()}, repeat=5, min_run_s=0.05)
    >>> t["copy"]["ms"]
"""
from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

import numpy as np

__all__ = ["NormTolerance", "Tolerance", "calls_per_run", "compare", "measure"]


def calls_per_run(fn: Callable, min_run_s: float) -> int:
    """How many calls of `fn` one timed run needs to last at least `min_run_s`."""
    fn()  # warm-up: caches, page faults, lazy compilation
    number = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        elapsed = time.perf_counter() - t0
        if elapsed >= min_run_s:
            return number
        if elapsed <= 0:
            number *= 10
            continue
        # Aim a little above min_run_s, and at least double, so this ends quickly.
        number = max(number * 2, math.ceil(number * 1.2 * min_run_s / elapsed))


def measure(fns: dict[str, Callable], repeat: int, min_run_s: float,
            settle_s: float = 0.0) -> dict[str, dict]:
    """Median per-call time of each callable, timed round-robin; see the module doc.

    Returns {name: {"ms", "samples_ms", "q1_ms", "q3_ms", "calls_per_run", "repeat"}}.
    """
    numbers = {name: calls_per_run(fn, min_run_s) for name, fn in fns.items()}
    samples: dict[str, list] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            n = numbers[name]
            if settle_s and len(fns) > 1:
                time.sleep(settle_s)
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            samples[name].append((time.perf_counter() - t0) / n)
    out = {}
    for name, s in samples.items():
        ms = [v * 1e3 for v in s]
        q1, q3 = (np.percentile(ms, [25, 75]) if len(ms) > 1 else (ms[0], ms[0]))
        out[name] = {"ms": statistics.median(ms), "samples_ms": ms, "q1_ms": float(q1),
                     "q3_ms": float(q3), "calls_per_run": numbers[name], "repeat": repeat}
    return out


class Tolerance:
    """Elementwise: |got - ref| <= atol + rtol * |ref| at every element."""

    def __init__(self, rtol: float, atol: float):
        self.rtol = rtol
        self.atol = atol

    def __repr__(self):
        return f"rtol={self.rtol:g}, atol={self.atol:g}"


class NormTolerance:
    """Normwise: ||got - ref|| <= rel * ||ref - base||, with `base` the value the reference
    started from (the initial parameters, so an update is compared with an update).

    Used for training steps: after a few steps in float32 a ReLU whose input is within
    rounding of zero can switch, which changes a few gradient elements by O(1) relative
    to themselves but not the tensor; an elementwise bound would flag rounding, not bugs.
    """

    def __init__(self, rel: float):
        self.rel = rel

    def __repr__(self):
        return f"normwise rel={self.rel:g}"


def compare(got: dict[str, np.ndarray], ref: dict[str, np.ndarray], tol: dict,
            bases: dict[str, np.ndarray] | None = None, free: dict | None = None) -> dict:
    """Check every reference entry; returns {"verified", "detail", "max_err"}.

    `tol` maps an entry's name, or the part before "[" ("param" for "param[2]"), to a
    Tolerance or NormTolerance. "max_err" holds the largest absolute error per entry
    (and, for normwise entries, the relative norm error). `free` maps a normwise entry's
    name to (mask, bound): the elements under the mask have an exact gradient of zero, so
    their float32 update is set by rounding (trainrefs.adam_move_bound); they are left out
    of the normwise comparison and each must have moved at most `bound` from its base.
    """
    problems = []
    max_err = {}
    bases = bases or {}
    free = free or {}
    for name, r in ref.items():
        if name not in got:
            problems.append(f"{name}: missing from the output")
            continue
        g = np.asarray(got[name])
        r = np.asarray(r, dtype=np.float64)
        if g.shape != r.shape:
            problems.append(f"{name}: shape {g.shape} != reference {r.shape}")
            continue
        t = tol.get(name, tol.get(name.split("[")[0]))
        g64 = g.astype(np.float64)
        finite = np.isfinite(g64)
        if not finite.all():
            problems.append(f"{name}: {int(np.sum(~finite))} non-finite values")
            continue
        err = np.abs(g64 - r)
        max_err[name] = float(err.max()) if err.size else 0.0
        if isinstance(t, NormTolerance):
            moved = r - bases.get(name, 0.0)
            if name in free:
                mask, bound = free[name]
                worst = float(np.abs(g64 - bases.get(name, 0.0))[mask].max(initial=0.0))
                max_err[name + " (rounding-set part, moved)"] = worst
                if not worst <= bound:
                    problems.append(f"{name}: an element whose exact gradient is zero moved "
                                    f"{worst:.3g}, more than Adam can move it ({bound:.3g})")
                err, moved = err[~mask], moved[~mask]
            scale = float(np.linalg.norm(moved))
            rel = float(np.linalg.norm(err)) / scale if scale else float(err.max(initial=0) > 0)
            max_err[name + " (normwise)"] = rel
            if not rel <= t.rel:
                problems.append(f"{name}: normwise relative error {rel:.3g} > {t.rel:g}")
            continue
        limit = t.atol + t.rtol * np.abs(r)
        bad = err > limit
        if bad.any():
            i = np.unravel_index(int(np.argmax(err - limit)), err.shape) if err.ndim else ()
            problems.append(f"{name}: {int(bad.sum())} of {bad.size} elements off ({t}); "
                            f"worst at {tuple(int(k) for k in i)}: got {float(g64[i])!r}, "
                            f"reference {float(r[i])!r}")
    return {"verified": not problems, "detail": "; ".join(problems), "max_err": max_err}
