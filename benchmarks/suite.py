"""`python -m benchmarks`: tracejit eager vs compiled, with peers, on W1..W9.

    python -m benchmarks                 # the full suite (a few minutes)
    python -m benchmarks --quick         # under a minute: fewer repeats, no peers
    python -m benchmarks --only W1,W5 --no-peers --json /tmp/r.json

For each workload: verify eager and compiled against a float64 numpy reference, then
time them (medians, round-robin; see `benchmarks.timing`); the first call in fresh
processes, cold (empty kernel cache) and warm (the cache the cold run filled); for the
memory-bound rows a plain `x.copy()` of the same bytes; and the peers (numpy by hand,
PyTorch, torch.compile, jax.jit), each in a process of its own. Then the eager-overhead
ratios of `benchmarks.eager_overhead`, and the traced IR and kernel source of W1.
Writes JSON (default benchmarks/results/latest.json), Markdown next to it, and a PNG
chart when matplotlib is installed. Progress goes to stderr, the report to stdout.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

from . import report
from .peers import PEERS, available
from .timing import measure
from .workloads import WORKLOADS, build_compiled, build_eager

REPO = Path(__file__).resolve().parent.parent
DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "latest.json"
SCHEMA = "tracejit-benchmarks/1"

# settle_s: the pause before each timed run of a row's round-robin (benchmarks.timing)
FULL = {"repeat": 15, "repeat_W7": 9, "min_run_s": 0.2, "fresh_repeat": 3, "settle_s": 0.15}
QUICK = {"repeat": 5, "repeat_W7": 3, "min_run_s": 0.03, "fresh_repeat": 1, "settle_s": 0.0}
QUICK_FRESH = ("W6", "W1")     # --quick measures the fresh-process columns only for these,
# --quick leaves out workloads whose cold compile alone takes minutes; --only runs them.
# (None now: W10's 35 unrolled LSTM steps were 429 kernels and 3.5 min with an empty kernel
# cache; identical kernels are now compiled once, 13 of them, about 6 s of CPU.)
QUICK_SKIP = ()
QUICK_BUDGET_S = 60            # and skips them (and the eager-overhead ratios) when the run
QUICK_COST_S = {"W6": 5, "W1": 9, "overhead": 8}   # would otherwise pass this budget
SUBPROCESS_TIMEOUT_S = 900


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------
# one workload, in this process

def _cell(build, w, inputs) -> tuple:
    """(runner or None, cell): build, run and verify one implementation."""
    try:
        runner = build(w, inputs)
        check = w.verify(runner.collect(), inputs)
        cell = {"verified": check["verified"], "detail": check["detail"],
                "max_err": check["max_err"]}
        return runner, cell
    except Exception as exc:
        return None, {"verified": False,
                      "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300],
                      "traceback": traceback.format_exc(limit=8)}


def run_workload(w, config: dict) -> dict:
    t0 = time.perf_counter()
    inputs = w.inputs()
    eager_runner, eager_cell = _cell(build_eager, w, inputs)
    compiled_runner, compiled_cell = _cell(build_compiled, w, inputs)
    w._expected = None   # free the reference (W1's is 128 MiB)
    cells = {"eager": eager_cell, "compiled": compiled_cell}
    fns = {}
    if eager_runner is not None:
        fns["eager"] = eager_runner.call
    if compiled_runner is not None:
        fns["compiled"] = compiled_runner.call
    if w.memory_bound:
        x = inputs["x"]
        cells["copy"] = {"verified": bool(np.array_equal(x.copy(), x)),
                         "detail": f"x.copy() of {x.nbytes} bytes (read {x.nbytes}, write "
                                   f"{x.nbytes})"}
        fns["copy"] = x.copy
    repeat = config["repeat_W7"] if w.key == "W7" else config["repeat"]
    if fns:
        for name, t in measure(fns, repeat, config["min_run_s"],
                                 config["settle_s"]).items():
            cells[name].update(t)
    row = {"key": w.key, "name": w.name, "shape": w.shape, "kind": w.kind,
           "memory_bound": w.memory_bound, "cells": cells, "notes": []}
    if compiled_runner is not None:
        try:
            row["compiled_info"] = compiled_runner.info()
        except Exception as exc:
            row["compiled_info"] = {"error": f"{type(exc).__name__}: {exc}"}
    summarize(row)
    e, c = cells["eager"], cells["compiled"]
    status = "verified" if row["verified"] else "NOT VERIFIED (see the table)"
    progress(f"[{w.key}] {w.name}: eager {report.format_time(e.get('ms'))}, compiled "
             f"{report.format_time(c.get('ms'))}"
             + (f" ({row['speedup']:.2f}x)" if row.get("speedup") else "")
             + f", {status}; {time.perf_counter() - t0:.1f} s")
    return row


def summarize(row: dict) -> None:
    """The flat fields of a row (eager_ms, speedup, ...) from its cells."""
    cells = row["cells"]

    def ms(name):
        c = cells.get(name) or {}
        return c.get("ms") if not c.get("error") else None

    row["eager_ms"] = ms("eager")
    row["compiled_ms"] = ms("compiled")
    row["eager_verified"] = bool(cells["eager"].get("verified"))
    row["compiled_verified"] = bool(cells["compiled"].get("verified"))
    good = row["eager_verified"] and row["compiled_verified"]
    row["speedup"] = (row["eager_ms"] / row["compiled_ms"]
                      if good and row["eager_ms"] and row["compiled_ms"] else None)
    row["copy_ms"] = ms("copy")
    row["compiled_over_copy"] = (row["compiled_ms"] / row["copy_ms"]
                                 if row["copy_ms"] and row["compiled_ms"]
                                 and row["compiled_verified"] else None)
    measured = [c for c in cells.values() if c and ("ms" in c or "error" in c)]
    row["verified"] = all(c.get("verified") is True for c in measured)


# --------------------------------------------------------------------------------------
# subprocesses: fresh-process first calls and peers

def _child_env(extra: dict) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def _run_child(args: list, env: dict) -> tuple:
    """(stdout, error text or None) of `python -m <args>`."""
    try:
        proc = subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return "", f"timed out after {SUBPROCESS_TIMEOUT_S} s"
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return proc.stdout, f"exit status {proc.returncode}: {tail[:300]}"
    return proc.stdout, None


_BYTECODE: list = []


def _write_bytecode() -> str:
    """Write tracejit's own .pyc files, once. A warm start is a later run of the same
    install, and the first import on a normal machine writes them (a wheel install
    writes them at install time); with PYTHONDONTWRITEBYTECODE set, as on some CI
    machines, Python would compile tracejit's sources again in every new process
    (about 0.08 s here) although it still reads .pyc files that exist."""
    if not _BYTECODE:
        import compileall

        ok = all(compileall.compile_dir(str(REPO / pkg), quiet=2)
                 for pkg in ("eager", "tracer", "codegen", "benchmarks"))
        _BYTECODE.append("written" if ok else "could not be written (imports compile sources)")
    return _BYTECODE[0]


def fresh_process(key: str, repeat: int = 1) -> dict:
    """First call of the compiled workload in new processes, `repeat` times: a cold one
    (an empty kernel cache), then a warm one (that cache); it stops at a pair that fails.
    ``cold``/``warm`` are the first pair's reports (the failed pair's, whose error the
    table shows), ``runs`` every pair's."""
    out = {"cache_dir": "a new empty temporary directory", "bytecode": _write_bytecode(),
           "runs": []}
    for _ in range(repeat):
        cache = Path(tempfile.mkdtemp(prefix="tracejit-bench-")) / "cache"
        pair = {}
        try:
            for phase in ("cold", "warm"):
                stdout, error = _run_child(["benchmarks.first_call", key],
                                           _child_env({"TRACEJIT_CACHE_DIR": str(cache)}))
                if error:
                    pair[phase] = {"error": error}
                    break
                pair[phase] = json.loads(stdout.strip().splitlines()[-1])
        finally:
            shutil.rmtree(cache.parent, ignore_errors=True)
        out["runs"].append(pair)
        failed = any("error" in part for part in pair.values())
        if failed:
            break
    out.update(pair if failed else out["runs"][0])  # (a failure's error is what shows)
    return out


def _first_call_s(report: dict, imports: bool) -> float:
    extra = report["second_call_s"] if report.get("retraced") else 0.0
    return (report["import_s"] if imports else 0.0) + report["first_call_s"] + extra


def add_fresh(row: dict, fresh: dict) -> None:
    """The fresh-process columns: medians over the runs (all of them or none: a run that
    failed shows as the error)."""
    row["fresh"] = fresh
    runs = fresh.get("runs") or [{"cold": fresh.get("cold"), "warm": fresh.get("warm")}]
    colds = [r.get("cold") or {} for r in runs]
    warms = [r.get("warm") or {} for r in runs]
    if all("first_call_s" in c for c in colds):
        row["first_call_cold_runs_s"] = [_first_call_s(c, False) for c in colds]
        row["first_call_cold_s"] = statistics.median(row["first_call_cold_runs_s"])
        if any(c.get("stats", {}).get("numba_compiles", 0) == 0 for c in colds):
            row["notes"].append("a cold run compiled no kernels (was the cache empty?)")
    if all("first_call_s" in w for w in warms):
        row["first_call_warm_runs_s"] = [_first_call_s(w, True) for w in warms]
        row["first_call_warm_s"] = statistics.median(row["first_call_warm_runs_s"])
        compiled = max(w.get("stats", {}).get("numba_compiles", 0) for w in warms)
        if compiled:
            row["notes"].append(f"a warm-cache process still compiled {compiled} kernels")
    cold = colds[0]
    if cold.get("retraced"):
        row["notes"].append(
            f"first-call columns include the second call (cold: {cold['first_call_s']:.2f} s "
            f"+ {cold['second_call_s']:.2f} s): the first call created state on a path of its "
            f"own, so its trace ran once through the interpreter; the second traced and "
            f"compiled the step every later call reuses")


def run_peer(peer: str, keys: list, config: dict) -> dict:
    ok, why = available(peer)
    if not ok:
        progress(f"[peers] {PEERS[peer][0]}: skipped, {why}")
        return {"peer": peer, "available": False, "reason": why, "cells": {}}
    fd, out_path = tempfile.mkstemp(suffix=".json", prefix=f"tracejit-peer-{peer}-")
    os.close(fd)
    try:
        args = ["benchmarks.peers", "--peer", peer, "--only", ",".join(keys),
                "--repeat", str(config["repeat"]), "--min-run", str(config["min_run_s"]),
                "--repeat-for", json.dumps({"W7": config["repeat_W7"]}), "--out", out_path]
        env = _child_env({})
        try:
            proc = subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=env,
                                  stdout=subprocess.PIPE, stderr=None, text=True,
                                  timeout=SUBPROCESS_TIMEOUT_S)
            error = None if proc.returncode == 0 else f"exit status {proc.returncode}"
        except subprocess.TimeoutExpired:
            error = f"timed out after {SUBPROCESS_TIMEOUT_S} s"
        if error is None:
            with open(out_path) as f:
                return json.load(f)
        return {"peer": peer, "available": True, "error": error,
                "cells": {k: {"error": f"the {PEERS[peer][0]} process failed ({error})",
                              "verified": False} for k in keys}}
    finally:
        os.unlink(out_path)


# --------------------------------------------------------------------------------------
# the rest of the report

def eager_overhead(quick: bool) -> dict | None:
    try:
        from . import eager_overhead as eo
    except Exception as exc:
        return {"error": f"could not import benchmarks.eager_overhead: {exc}"}
    if not hasattr(eo, "run"):
        return None
    progress("[overhead] benchmarks.eager_overhead.run(quick=%s)" % quick)
    try:
        result = eo.run(quick)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    if hasattr(eo, "format_table"):
        try:
            result["text"] = eo.format_table(result)
        except Exception:
            pass
    return result


def guard_cost() -> dict:
    """The per-call cost of a 12-layer MLP step's guards (benchmarks.guard_cost)."""
    from . import guard_cost as gc_bench

    progress("[guards] benchmarks.guard_cost.run()")
    try:
        result = gc_bench.run()
        result["text"] = gc_bench.format_text(result)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    return result


def example() -> dict:
    """The traced IR and generated kernel of W1 (GELU, tanh) on a small shape."""
    import eager
    import eager.nn.functional as F
    import tracer

    @tracer.function
    def gelu(x):
        return F.gelu(x, approximate="tanh")

    c = gelu.get_concrete_function(eager.randn(1024))
    return {"ir": str(c), "kernel_source": c.kernels[0].source if c.kernels else ""}


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m benchmarks",
                                 description="tracejit eager vs compiled benchmarks",
                                 epilog="Workloads: " + "; ".join(
                                     f"{w.key} {w.name} ({w.shape})" for w in WORKLOADS.values()))
    ap.add_argument("--quick", action="store_true",
                    help="under a minute: fewer repeats, no peers, fresh-process columns "
                         f"only for {', '.join(QUICK_FRESH)}")
    ap.add_argument("--only", default=None,
                    help="comma list of workloads (W1..W9; 'guards' for the guard cost of a "
                         "12-layer MLP step, run by default without --quick; 'overhead' for "
                         "the eager-overhead ratios, which run by default only without --only)")
    ap.add_argument("--peers", dest="peers", action="store_true", default=None,
                    help="measure numpy/PyTorch/JAX peers (default unless --quick)")
    ap.add_argument("--no-peers", dest="peers", action="store_false")
    ap.add_argument("--json", default=str(DEFAULT_JSON),
                    help="where to write the JSON (Markdown and PNG go next to it)")
    args = ap.parse_args(argv)
    if args.peers is None:
        args.peers = not args.quick
    return args


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    started = time.perf_counter()
    if args.only:
        wanted = [k.strip() for k in args.only.split(",") if k.strip()]
        unknown = [k for k in wanted if k not in WORKLOADS and k not in ("overhead", "guards")]
        if unknown:
            print(f"unknown workload(s) {', '.join(unknown)}; choose from "
                  f"{', '.join(WORKLOADS)}, 'overhead' or 'guards'", file=sys.stderr)
            return 2
        keys = [k for k in WORKLOADS if k in wanted]
        with_overhead = "overhead" in wanted
        with_guards = "guards" in wanted
    else:
        keys = [k for k in WORKLOADS if not (args.quick and k in QUICK_SKIP)]
        with_overhead = True
        with_guards = not args.quick
    config = QUICK if args.quick else FULL

    import codegen  # noqa: F401 - registers the numba backend before any trace

    doc = {"schema": SCHEMA, "command": report.python_command(argv), "quick": args.quick,
           "machine": report.machine_facts(), "method": dict(config, statistic="median"),
           "workloads": [], "peers": {}, "footnotes": []}
    progress(f"tracejit benchmarks: {', '.join(keys)}"
             f"{' (quick)' if args.quick else ''}; progress on stderr, report on stdout")
    for key in keys:
        doc["workloads"].append(run_workload(WORKLOADS[key], config))
        gc.collect()
    def affordable(part: str) -> bool:
        """--quick: whether `part` still fits in the minute (else a footnote says so)."""
        if not args.quick:
            return True
        if time.perf_counter() - started + QUICK_COST_S[part] <= QUICK_BUDGET_S - 5:
            return True
        what = ("the eager-overhead ratios" if part == "overhead"
                else f"the fresh-process columns of {part}")
        doc["footnotes"].append(f"--quick: {what} skipped to stay under a minute")
        return False

    fresh_keys = [k for k in QUICK_FRESH if k in keys] if args.quick else list(keys)
    rows = {row["key"]: row for row in doc["workloads"]}
    for key in fresh_keys:
        if not affordable(key):
            continue
        t0 = time.perf_counter()
        row = rows[key]
        add_fresh(row, fresh_process(key, config["fresh_repeat"]))
        progress(f"[{key}] fresh processes: cold "
                 f"{row.get('first_call_cold_s', float('nan')):.2f} s, warm "
                 f"{row.get('first_call_warm_s', float('nan')):.2f} s; "
                 f"{time.perf_counter() - t0:.1f} s")
    if args.quick:
        doc["footnotes"].insert(0, "--quick: fewer repetitions; fresh-process columns only "
                                   "for " + " and ".join(sorted(QUICK_FRESH)))
        if not args.only and QUICK_SKIP:
            doc["footnotes"].append("--quick: " + ", ".join(QUICK_SKIP) + " left out (its cold "
                                    "compile takes minutes); run it with --only")
    if args.peers and keys:
        for peer in PEERS:
            result = run_peer(peer, keys, config)
            doc["peers"][peer] = {k: v for k, v in result.items() if k != "cells"}
            for row in doc["workloads"]:
                cell = result["cells"].get(row["key"])
                if cell is not None:
                    row["cells"][peer] = cell
    else:
        doc["footnotes"].append("peers (numpy, PyTorch, torch.compile, jax.jit) not measured: "
                                + ("--quick" if args.quick else "--no-peers")
                                + "; run without them for the peer columns")
    for row in doc["workloads"]:
        summarize(row)   # again: peer cells count for "verified"
    if with_overhead and affordable("overhead"):
        doc["eager_overhead"] = eager_overhead(args.quick)
    if with_guards:
        doc["guard_cost"] = guard_cost()
    doc["example"] = example()
    doc["seconds"] = time.perf_counter() - started
    if hasattr(os, "getloadavg"):
        doc["machine"]["load_average_end"] = list(os.getloadavg())
    doc["verified"] = all(r["verified"] for r in doc["workloads"])

    json_path = Path(args.json)
    report.write_json(doc, json_path)
    md_path = json_path.with_suffix(".md")
    md_path.write_text(report.markdown(doc))
    png = report.write_png(doc, json_path.with_suffix(".png"))
    if not png and json_path.with_suffix(".png").exists():
        json_path.with_suffix(".png").unlink()   # a chart of an older run would mislead

    out = [f"tracejit benchmarks{' (--quick)' if args.quick else ''}"]
    out += report.machine_lines(doc["machine"])
    if report.peers_line(doc):
        out.append(report.peers_line(doc))
    out += ["", report.text_table(doc), ""]
    eo = doc.get("eager_overhead")
    if eo:
        out += ["eager overhead (benchmarks.eager_overhead):",
                eo.get("text") or eo.get("error") or json.dumps(eo), ""]
    gcost = doc.get("guard_cost")
    if gcost:
        out += [gcost.get("text") or gcost.get("error"), ""]
    out += ["W1 (GELU, tanh) traced on f32[1024]:", doc["example"]["ir"], "",
            "its kernel source:", doc["example"]["kernel_source"].rstrip(), ""]
    failed = [r["key"] for r in doc["workloads"] if not r["verified"]]
    if failed:
        out.append(f"NOT VERIFIED: {', '.join(failed)} (see the footnotes)")
    out.append(f"wrote {json_path}, {md_path}" + (", " + str(json_path.with_suffix('.png'))
                                                  if png else "")
               + f"; {doc['seconds']:.0f} s")
    print("\n".join(out))
    return 0
