"""Child process of the suite: how long the first compiled call takes in a fresh process.

    TRACEJIT_CACHE_DIR=/tmp/empty python -m benchmarks.first_call W1

The clock starts before tracejit (and numpy) are imported. Making the inputs is not
timed. Prints one JSON line: import seconds, first-call seconds (trace + optimize +
codegen + Numba compile or disk-cache load + one run), the same for the second call
(a step that creates state on a first-call-only path traces again there: see `retraced`), and codegen's compile counters,
which tell whether the kernels were compiled or loaded from the disk cache.
"""
import time

_T_START = time.perf_counter()

import json  # noqa: E402
import sys  # noqa: E402

import numpy  # noqa: E402, F401

import codegen  # noqa: E402
import eager  # noqa: E402, F401
import tracer  # noqa: E402, F401

_T_IMPORTED = time.perf_counter()

from .workloads import WORKLOADS, build_compiled  # noqa: E402


def main(argv=None) -> int:
    key = (argv or sys.argv[1:])[0]
    w = WORKLOADS[key]
    inputs = w.inputs()
    runner = build_compiled(w, inputs)
    t0 = time.perf_counter()
    runner.call()
    t1 = time.perf_counter()
    traces_after_first = runner.function.trace_count
    t2 = time.perf_counter()
    runner.call()
    t3 = time.perf_counter()
    traces = runner.function.trace_count
    print(json.dumps({
        "workload": key,
        "import_s": _T_IMPORTED - _T_START,
        "first_call_s": t1 - t0,
        "second_call_s": t3 - t2,
        "retraced": traces != traces_after_first,
        "trace_count": traces,
        "stats": codegen.compile_stats(),
        "cache_dir": str(codegen.cache_dir()),
    }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
