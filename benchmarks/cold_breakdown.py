"""Where a cold first call goes: `python -m benchmarks.first_call W10 --breakdown`.

Wraps (from outside: nothing in tracer or codegen changes) the stages of a first call and
records each as a span (start, end, CPU) in the process that ran it: tracing (the user's
function run under the trace, `trace_function` less what follows), the optimization
passes, the backend (`compile_numba`: fusion, kernel source emission, compile-ahead,
the loads, the runner), and each Numba compile (`numbashim._njit_one`: Numba's compile
and its cache files, then the kernel's object file) in whichever process ran it: the
program or a compile-ahead child (forked: it inherits the wrappers, and appends its
spans to the same file). The spans' clock is CLOCK_MONOTONIC (time.perf_counter), one
clock for every process of the machine.

    >>> spans = install("/tmp/spans.jsonl")
    >>> ... the first call ...
    >>> report = summarize(read("/tmp/spans.jsonl"), t0, t1)
"""
from __future__ import annotations

import functools
import json
import os
import time

_FILE = {}


def _record(kind: str, name: str, t0: float, t1: float, cpu: float, **extra) -> None:
    rec = {"kind": kind, "name": name, "t0": t0, "t1": t1, "cpu": cpu, "pid": os.getpid(),
           **extra}
    fd = _FILE.get("fd")
    if fd is not None:
        os.write(fd, (json.dumps(rec) + "\n").encode())   # (O_APPEND: one write a line)


def _timed(kind: str, name_of):
    def wrap(fn):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                _record(kind, name_of(*args, **kwargs), t0, time.perf_counter(),
                        time.thread_time() - c0)
        return timed
    return wrap


def install(path: str) -> None:
    """Wrap the stages; spans go to `path` (JSON lines)."""
    import importlib

    from codegen import ahead, build, gemm, numbashim, program, runner, runner_forms

    # (tracer.function is also the decorator's name: the modules from importlib)
    function, passes, backends, tracing = (importlib.import_module(f"tracer.{m}") for m in
                                           ("function", "passes", "backends", "tracing"))

    _FILE["fd"] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    ahead.CHILD_KEEPS_FDS.add(_FILE["fd"])  # (compile-ahead children write spans too)
    const = (lambda name: lambda *a, **k: name)
    function.trace_function = _timed("trace", const("trace_function"))(tracing.trace_function)
    passes.optimize = _timed("passes", const("optimize"))(passes.optimize)
    backend = backends._BACKENDS["numba"]
    backends._BACKENDS["numba"] = _timed("backend", const("compile_numba"))(backend)
    program.partition = _timed("fusion", const("partition"))(program.partition)
    ahead.emit_all = _timed("emit", const("emit_all"))(ahead.emit_all)
    ahead.start = _timed("ahead_start", const("fork children"))(ahead.start)
    ahead.Ahead.wait = _timed("wait", lambda self, source: "child")(ahead.Ahead.wait)
    build.load_kernel = _timed("load", lambda source, hint: hint)(build.load_kernel)
    gemm.prepare = _timed("gemm_prepare", const("gemm.prepare"))(gemm.prepare)
    runner.generate = _timed("runner", const("runner.generate"))(runner.generate)
    del runner_forms  # (it calls gemm.prepare through the module: wrapped above)
    numbashim._njit_one = _timed(
        "compile", lambda numba, fn, sig, opts: fn.__module__.rpartition(".")[2])(
            numbashim._njit_one)
    numbashim._write_object = _timed(
        "object_write", lambda fn, *a: fn.__module__.rpartition(".")[2])(
            numbashim._write_object)
    numbashim._numba = build._numba = _timed("numba_import", const("import numba"))(
        numbashim._numba)
    ahead._set_up_numba = _timed("numba_setup", const("compiler set-up"))(
        ahead._set_up_numba)


def read(path: str) -> list:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _total(spans, kind, pid=None):
    return sum(s["t1"] - s["t0"] for s in spans
               if s["kind"] == kind and (pid is None or s["pid"] == pid))


def summarize(spans: list, t0: float, t1: float, cpu_s: float | None = None) -> dict:
    """The first call's [t0, t1] (`cpu_s`: the program's CPU seconds in it) in stages of
    the program's process, and every kernel compile (who compiled it, how long).
    "critical_cpu_s" (the program's CPU plus the busiest child's compile CPU) is what the
    call would take on a machine of its own, roughly: less noisy than the wall time."""
    me = os.getpid()
    mine = [s for s in spans if s["pid"] == me and s["t0"] >= t0 and s["t1"] <= t1]
    trace = _total(mine, "trace")
    passes = _total(mine, "passes")
    backend = _total(mine, "backend")
    stages = {
        "call_s": t1 - t0,
        "tracing_s": trace - passes - backend,
        "passes_s": passes,
        "backend_s": backend,
        "  fusion_s": _total(mine, "fusion"),
        "  emit_s": _total(mine, "emit"),
        "  fork_children_s": _total(mine, "ahead_start"),
        "    numba_import_s": _total(mine, "numba_import"),
        "    numba_setup_s": _total(mine, "numba_setup"),
        "  wait_for_children_s": _total(mine, "wait"),
        "  loads_s": _total(mine, "load"),
        "  gemm_prepare_s": _total(mine, "gemm_prepare"),
        "  runner_generate_s": _total(mine, "runner"),
        "compiles_in_program_s": _total(mine, "compile"),
        "after_trace_s": (t1 - t0) - trace,
    }
    children = {}
    kernels = []
    for s in spans:
        if s["kind"] != "compile":
            continue
        who = "program" if s["pid"] == me else f"child {s['pid']}"
        writes = sum(w["t1"] - w["t0"] for w in spans if w["kind"] == "object_write"
                     and w["pid"] == s["pid"] and s["t0"] <= w["t0"] <= s["t1"])
        kernels.append({"kernel": s["name"], "by": who, "s": s["t1"] - s["t0"],
                        "cpu_s": s["cpu"], "object_write_s": writes,
                        "start_s": s["t0"] - t0})
        if s["pid"] != me:
            c = children.setdefault(s["pid"], {"kernels": 0, "first": s["t0"],
                                               "last": s["t1"], "compile_s": 0.0})
            c["kernels"] += 1
            c["first"], c["last"] = min(c["first"], s["t0"]), max(c["last"], s["t1"])
            c["compile_s"] += s["t1"] - s["t0"]
            c["cpu_s"] = c.get("cpu_s", 0.0) + s["cpu"]
    kernels.sort(key=lambda k: -k["s"])
    kids = [{"pid": pid, "kernels": c["kernels"], "compile_s": c["compile_s"],
             "cpu_s": c["cpu_s"],
             "busy_from_s": c["first"] - t0, "busy_until_s": c["last"] - t0}
            for pid, c in sorted(children.items(), key=lambda kv: kv[1]["first"])]
    if cpu_s is not None:
        stages["program_cpu_s"] = cpu_s
        stages["critical_cpu_s"] = cpu_s + max([c["cpu_s"] for c in kids], default=0.0)
    return {"stages": stages, "children": kids, "kernels": kernels}


def text(report: dict) -> str:
    lines = [("cold first call, by stage (seconds, the program's process; indented: part of "
              "the line above):")]
    for k, v in report["stages"].items():
        lines.append(f"  {k[:-2]:<28} {v:7.3f}")
    for c in report["children"]:
        lines.append(f"  compile-ahead child {c['pid']}: {c['kernels']} kernels, "
                     f"{c['compile_s']:.2f} s compiling ({c['cpu_s']:.2f} s CPU), busy "
                     f"{c['busy_from_s']:.2f}"
                     f"-{c['busy_until_s']:.2f} s into the call")
    lines.append("kernel compiles, longest first (s wall, s CPU, object write s, by, "
                 "started s into the call):")
    for k in report["kernels"]:
        lines.append(f"  {k['s']:6.2f} {k['cpu_s']:6.2f} {k['object_write_s']:5.2f}  "
                     f"{k['by']:<14} {k['start_s']:6.2f}  {k['kernel']}")
    return "\n".join(lines)
