"""Several processes sharing one kernel cache directory at once, under a bound small enough
that each one's pruning deletes kernels the others are loading or have just written: every
compiled result must still be eager's, with no error and no warning.

    TRACEJIT_CACHE_DIR=/tmp/private-dir python -m benchmarks.cache_sharing \
        [--processes P] [--shapes N] [--max-bytes B]

Each process traces the same function for N row lengths (the same kernels as the others:
same shapes, in another order) and N of its own (different kernels), twice over. Prints one
JSON line per process (its checks and codegen's counters) and a summary line.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

CHILD = r"""
import json, sys, warnings
import numpy as np
import codegen, eager, tracer
from codegen.cache import CacheWarning
warnings.simplefilter("error", CacheWarning)   # (a cache warning fails the run)
warnings.filterwarnings("ignore", ".*has been traced")
import eager.nn.functional as F
rank, shapes = int(sys.argv[1]), int(sys.argv[2])

def step(x):
    return F.softmax(F.gelu(x, approximate="tanh") * 2.0, -1)

shared = [3 + (i * (rank + 1)) % shapes for i in range(shapes)]   # (others' order)
own = [100 + 10 * rank + i for i in range(shapes)]
worst, calls = 0.0, 0
for _ in range(2):
    f = tracer.function(step, max_traces=4)
    for n in shared + own:
        x = eager.from_numpy(np.linspace(-3, 3, 4 * n, dtype=np.float32).reshape(4, n))
        got, want = f(x).numpy(), step(x).numpy()
        worst = max(worst, float(np.max(np.abs(got - want))))
        calls += 1
print(json.dumps({"rank": rank, "calls": calls, "worst": worst,
                  "stats": codegen.compile_stats()}))
"""


def main(argv=None) -> dict:
    p = argparse.ArgumentParser()
    p.add_argument("--processes", type=int, default=4)
    p.add_argument("--shapes", type=int, default=6)
    p.add_argument("--max-bytes", type=int, default=400_000)
    a = p.parse_args(argv)
    env = dict(os.environ, TRACEJIT_CACHE_MAX_BYTES=str(a.max_bytes))
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(r), str(a.shapes)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(a.processes)]
    rows, failures = [], []
    for proc in procs:
        out, err = proc.communicate(timeout=1800)
        if proc.returncode != 0 or err.strip():
            failures.append({"code": proc.returncode, "stderr": err[-2000:]})
        if out.strip():
            rows.append(json.loads(out.strip().splitlines()[-1]))
            print(out.strip().splitlines()[-1], flush=True)
    summary = {"processes": a.processes, "ok": len(rows), "failures": failures,
               "worst": max((r["worst"] for r in rows), default=None),
               "seconds": time.perf_counter() - t0, "load": os.getloadavg()[0]}
    print(json.dumps(summary), flush=True)
    return summary


if __name__ == "__main__":
    main()
