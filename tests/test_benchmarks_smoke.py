"""`python -m benchmarks --quick --only W6` runs and writes the documented JSON and Markdown."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "result.json"
    env = dict(os.environ)   # keeps the session's TRACEJIT_CACHE_DIR (see conftest.py)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--only", "W6", "--json", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, out


def test_json_schema(quick_run):
    _, out = quick_run
    doc = json.loads(out.read_text())
    assert doc["schema"] == "tracejit-benchmarks/1"
    assert doc["quick"] is True
    for key in ("cpu", "cores", "versions", "blas", "env"):
        assert key in doc["machine"]
    assert {"numpy", "numba", "llvmlite", "scipy"} <= set(doc["machine"]["versions"])
    assert "OPENBLAS_CORETYPE" in doc["machine"]["env"]
    (w,) = doc["workloads"]
    assert w["key"] == "W6" and w["name"]
    for field in ("eager_ms", "compiled_ms", "speedup"):
        assert isinstance(w[field], float) and w[field] > 0, field
    assert w["speedup"] == pytest.approx(w["eager_ms"] / w["compiled_ms"])
    assert w["eager_verified"] is True and w["compiled_verified"] is True
    assert w["verified"] is True and doc["verified"] is True
    # --quick measures the fresh-process columns for W6: a cold compile, then a cache hit
    assert w["first_call_cold_s"] > 0 and w["first_call_warm_s"] > 0
    assert w["fresh"]["cold"]["stats"]["numba_compiles"] >= 1
    assert w["fresh"]["warm"]["stats"]["numba_compiles"] == 0
    assert len(w["fresh"]["runs"]) == 1 and w["first_call_cold_runs_s"] == [w["first_call_cold_s"]]
    assert "def kernel" in doc["example"]["kernel_source"]


def test_every_cell_verified(quick_run):
    _, out = quick_run
    doc = json.loads(out.read_text())
    for w in doc["workloads"]:
        cells = w["cells"]
        assert {"eager", "compiled"} <= set(cells)
        for name, cell in cells.items():
            assert "verified" in cell, (w["key"], name)
            assert cell["verified"] is True, (w["key"], name, cell.get("detail"),
                                              cell.get("error"))
            assert cell["ms"] > 0 and len(cell["samples_ms"]) == cell["repeat"]


def test_report_files_and_stdout(quick_run):
    proc, out = quick_run
    md = out.with_suffix(".md").read_text()
    assert "| W6 per-call overhead x*2+1 |" in md
    assert "OPENBLAS_CORETYPE=" in md
    assert "W6 per-call overhead" in proc.stdout
    assert "[W6]" in proc.stderr                     # the progress line
    assert "fused kernels:" in proc.stdout           # W1's IR printed after the table
    assert "def kernel(" in proc.stdout              # and its kernel source
    assert "FAILED" not in proc.stdout


def _report(first, imports=0.1, second=0.001, retraced=False, compiles=1):
    return {"import_s": imports, "first_call_s": first, "second_call_s": second,
            "retraced": retraced, "stats": {"numba_compiles": compiles}}


def test_fresh_columns_are_medians_of_the_runs():
    from benchmarks.suite import add_fresh

    row = {"notes": []}
    runs = [{"cold": _report(0.5), "warm": _report(0.02, compiles=0)},
            {"cold": _report(0.3), "warm": _report(0.04, compiles=0)},
            {"cold": _report(0.4), "warm": _report(0.03, imports=0.2, compiles=0)}]
    add_fresh(row, {"runs": runs, **runs[0]})
    assert row["first_call_cold_runs_s"] == [0.5, 0.3, 0.4]
    assert row["first_call_cold_s"] == 0.4
    assert row["first_call_warm_s"] == pytest.approx(0.14)  # imports + first call: 0.12, 0.14, 0.23
    assert row["notes"] == []
    # a retraced first call counts the second call too; a warm run that compiled is noted
    row = {"notes": []}
    runs = [{"cold": _report(0.5, second=0.3, retraced=True), "warm": _report(0.02)}]
    add_fresh(row, {"runs": runs, **runs[0]})
    assert row["first_call_cold_s"] == pytest.approx(0.8)
    assert any("still compiled 1 kernels" in n for n in row["notes"])
    # a failed run leaves the column to the error
    row = {"notes": []}
    runs = [{"cold": _report(0.5), "warm": _report(0.02, compiles=0)}, {"cold": {"error": "x"}}]
    add_fresh(row, {"runs": runs, **runs[1]})
    assert "first_call_cold_s" not in row and "first_call_warm_s" not in row
    assert row["fresh"]["cold"] == {"error": "x"}  # what the table shows


def test_table_shows_kernel_counts_and_compiled_over_peer_ratios():
    from benchmarks import report
    from benchmarks.suite import summarize

    def cell(ms, verified=True):
        return {"ms": ms, "verified": verified}

    row = {"key": "W8", "name": "LeNet", "shape": "64x1x28x28", "notes": [],
           "cells": {"eager": cell(40.0), "compiled": cell(20.0), "torch": cell(10.0),
                     "jax": cell(25.0, verified=False)},
           "compiled_info": {"kernels": 16}}
    summarize(row)
    doc = {"workloads": [row], "peers": {"torch": {"available": True},
                                         "jax": {"available": True}}}
    header, (r,), _ = report.table_rows(doc)
    assert r[header.index("kernels")] == "16"
    assert r[header.index("speedup")] == "2.00x"
    assert r[header.index("torch")] == "10 ms (2.00x)"          # compiled / torch
    assert r[header.index("jax.jit")] == "FAILED verification (25 ms)"   # no ratio to it
    assert "kernels" in report.text_table(doc).splitlines()[0]


def test_step_profile_eager_times_the_products_and_their_floor():
    """`python -m benchmarks.step_profile W5 --eager`: the eager step's products (the
    matmul op's numpy implementation) are part of its time, and the floor times each of
    them again: W5's forward and backward products of a 32x100 -> 128 -> 10 MLP."""
    from benchmarks.step_profile import eager_products

    r = eager_products("W5", calls=3)
    assert r["count"] >= 4
    assert r["flops"] >= 2 * 2 * 32 * 100 * 128  # (x @ w1.T and its weight gradient)
    assert 0 < r["products"] < r["step"]
    assert r["floor"] > 0


@pytest.mark.parametrize("key", ["W6", "W5"])
def test_step_profile_times_every_step_of_the_program(key):
    """`python -m benchmarks.step_profile W6`: the observing runner times the program's
    steps on both ways a call runs it (W6, one array in and out: the one-argument fast
    path, whose calls never reached the observed runner: every step timed 0 ms; W5: the
    program's `run`)."""
    from benchmarks.step_profile import profile

    program, med, total = profile(key, calls=3)
    assert set(med) == set(range(len(program.steps)))
    assert all(t >= 0 for t in med.values()) and total > 0
