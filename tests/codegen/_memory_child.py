"""Child process of test_memory_release: RSS before and after tracing 20 shapes of a small
MLP training step and dropping the function (`del f; gc.collect()`). Prints one JSON line:
the growth in MiB, whether every compiled loss matched eager's, and codegen's counters.

    TRACEJIT_CACHE_DIR=/tmp/some-private-dir python tests/codegen/_memory_child.py [SHAPES]

SHAPES defaults to 20 (the issue's figure); the test runs fewer to stay quick (a cold
shape compiles ~5 kernels).
"""
import gc
import json
import os
import sys

import numpy as np

import codegen
import eager
import eager.nn as nn
import eager.nn.functional as F
import eager.optim as optim
import tracer

SHAPES = int(sys.argv[1]) if len(sys.argv) > 1 else 20


def rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def make(compiled: bool):
    eager.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    return tracer.function(step) if compiled else step


def inputs(n):
    rng = np.random.default_rng(n)
    return (eager.from_numpy(rng.standard_normal((n, 16)).astype(np.float32)),
            eager.from_numpy(rng.integers(0, 4, n).astype(np.int64)))


def run(f, n) -> list:
    x, y = inputs(n)
    return [float(f(x, y).item()) for _ in range(2)]


def main() -> None:
    f = make(True)  # (Numba's, the object loader's and the runtime's one-time set-up)
    run(f, 2)
    del f
    gc.collect()
    before = rss()
    f = make(True)
    got = [run(f, 100 + i) for i in range(SHAPES)]
    traces = f.stats()["traces"]
    del f
    gc.collect()
    after = rss()
    g = make(False)
    want = [run(g, 100 + i) for i in range(SHAPES)]
    same = bool(np.allclose(got, want, rtol=1e-5, atol=1e-6))
    print(json.dumps({"growth_mib": (after - before) / 2 ** 20, "same": same,
                      "traces": traces, "stats": codegen.compile_stats()}))


if __name__ == "__main__":
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # ("traced 8 times")
        main()
