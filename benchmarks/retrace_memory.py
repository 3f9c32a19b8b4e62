"""A long-lived process retracing one function whose input shape keeps changing: what it
keeps (RSS, threads, open file descriptors, kernels held by codegen) per retrace.

    TRACEJIT_CACHE_DIR=/tmp/private-dir python -m benchmarks.retrace_memory \
        [--mode fresh|cycle] [--retraces N] [--max-traces K] [--every M]

`fresh`: every call has a new shape (N distinct shapes: each trace has kernels of its own,
as literal shapes make them); `cycle`: 3*K shapes called in turn, so that every call
retraces (max_traces K evicts) shapes whose kernels were loaded before. Run it twice with
the same cache directory to measure a warm process (kernels loaded from object files, no
compile). Prints one line per M retraces and a JSON summary line.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import threading
import time
import warnings

import numpy as np


def rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def held() -> dict:
    """What codegen holds for the process: kernel entries, modules, object-loader kernels."""
    import sys

    from codegen import kernelfiles
    objload = sys.modules.get("codegen.objload")
    engine = getattr(objload, "_ENGINE", None)
    return {"entries": len(kernelfiles._ENTRIES), "modules": len(kernelfiles._MODULES),
            "engine_kernels": len(getattr(objload, "_LOADED", None) or getattr(engine, "loaded", ())),
            "engines": _engines()}


def _engines() -> int:
    import sys

    objload = sys.modules.get("codegen.objload")
    count = getattr(objload, "live_engines", None)
    return count() if count is not None else int(getattr(objload, "_ENGINE", None) is not None)


def make(max_traces: int):
    import eager
    import eager.nn.functional as F
    import tracer

    w = eager.from_numpy(np.linspace(-1, 1, 8 * 8, dtype=np.float32).reshape(8, 8))

    def step(x):
        h = F.gelu(x @ w, approximate="tanh")
        # (a row softmax over the varying length: kernels whose code holds that length)
        return (h * h).sum(dim=1).softmax(dim=0) + x.T.softmax(dim=1).sum(dim=0)

    return tracer.function(step, max_traces=max_traces), step


def main(argv=None) -> dict:
    import eager

    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("fresh", "cycle"), default="fresh")
    p.add_argument("--retraces", type=int, default=400)
    p.add_argument("--max-traces", type=int, default=8)
    p.add_argument("--every", type=int, default=100)
    p.add_argument("--first", type=int, default=3, help="smallest row count")
    a = p.parse_args(argv)
    f, plain = make(a.max_traces)
    sizes = (list(range(a.first, a.first + a.retraces)) if a.mode == "fresh"
             else [a.first + i % (3 * a.max_traces) for i in range(a.retraces)])
    rng = np.random.default_rng(0)
    inputs = {n: eager.from_numpy(rng.standard_normal((n, 8)).astype(np.float32))
              for n in set(sizes)}
    worst = 0.0
    for n in sizes[:a.max_traces]:  # warm-up: one-time set-ups, first traces
        f(inputs[n])
    gc.collect()
    base_rss, base_threads, base_fds = rss(), threading.active_count(), fds()
    t0 = time.perf_counter()
    rows = []
    for i, n in enumerate(sizes[a.max_traces:], 1):
        got = f(inputs[n]).numpy()
        want = plain(inputs[n]).numpy()
        worst = max(worst, float(np.max(np.abs(got - want))))
        if i % a.every == 0 or i == len(sizes) - a.max_traces:
            gc.collect()
            row = {"retraces": i, "rss_mib": (rss() - base_rss) / 2 ** 20,
                   "threads": threading.active_count() - base_threads,
                   "fds": fds() - base_fds, "seconds": time.perf_counter() - t0, **held()}
            rows.append(row)
            print(json.dumps(row), flush=True)
    last = rows[-1]
    out = {"mode": a.mode, "retraces": last["retraces"], "traces": f.stats()["traces"],
           "evictions": f.stats()["evictions"],
           "rss_kib_per_retrace": last["rss_mib"] * 1024 / max(last["retraces"], 1),
           "worst_abs_diff": worst, "final": last}
    print(json.dumps(out), flush=True)
    return out


if __name__ == "__main__":
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # ("traced 8 times")
        main()
