"""Child process of the suite: how long the first compiled call takes in a fresh process.

    TRACEJIT_CACHE_DIR=/tmp/empty python -m benchmarks.first_call W1
    TRACEJIT_CACHE_DIR=/tmp/empty python -m benchmarks.first_call W10 --breakdown

The clock starts before tracejit (and numpy) are imported. Making the inputs is not
timed. Prints one JSON line: import seconds, first-call seconds (trace + optimize +
codegen + Numba compile or disk-cache load + one run), the same for the second call
(a step that creates state on a first-call-only path traces again there: see `retraced`), and codegen's compile counters,
which tell whether the kernels were compiled or loaded from the disk cache. With
`--breakdown`, the first call's stages and every kernel compile (benchmarks.cold_breakdown)
are printed to stderr and added to the JSON as "breakdown".
"""
import time

_T_START = time.perf_counter()

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import numpy  # noqa: E402, F401

import codegen  # noqa: E402
import eager  # noqa: E402, F401
import tracer  # noqa: E402, F401

_T_IMPORTED = time.perf_counter()

from .workloads import WORKLOADS, build_compiled  # noqa: E402


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    breakdown = "--breakdown" in args
    key = [a for a in args if not a.startswith("--")][0]
    w = WORKLOADS[key]
    inputs = w.inputs()
    spans = None
    if breakdown:
        import tempfile

        from . import cold_breakdown

        fd, spans = tempfile.mkstemp(suffix=".jsonl", prefix="tracejit-spans-")
        os.close(fd)
        cold_breakdown.install(spans)
    runner = build_compiled(w, inputs)
    c0, t0 = time.process_time(), time.perf_counter()
    runner.call()
    t1, c1 = time.perf_counter(), time.process_time()
    traces_after_first = runner.function.trace_count
    t2 = time.perf_counter()
    runner.call()
    t3 = time.perf_counter()
    traces = runner.function.trace_count
    extra = {}
    if spans is not None:
        extra["breakdown"] = cold_breakdown.summarize(cold_breakdown.read(spans), t0, t1,
                                                       c1 - c0)
        os.unlink(spans)
        print(cold_breakdown.text(extra["breakdown"]), file=sys.stderr)
    print(json.dumps({
        "workload": key,
        "import_s": _T_IMPORTED - _T_START,
        "first_call_s": t1 - t0,
        "second_call_s": t3 - t2,
        "retraced": traces != traces_after_first,
        "trace_count": traces,
        "stats": codegen.compile_stats(),
        "cache_dir": str(codegen.cache_dir()),
        **extra,
    }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
