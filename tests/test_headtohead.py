"""benchmarks.headtohead: the interleaved protocol and its ratio arithmetic (cheap: two
calibration contestants that sleep, no tracejit compile)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.headtohead import summarize

REPO = Path(__file__).resolve().parent.parent


def _run(tmp_path, a, b, rounds=2):
    out = tmp_path / "h2h.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.headtohead", "--a", a, "--peer", b, "--only", "cal",
         "--rounds", str(rounds), "--block-s", "0.1", "--settle-s", "0", "--warmup-s", "0",
         "--json", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)
    return proc, (json.loads(out.read_text()) if out.exists() else None)


def test_summarize_ratio_per_round_and_verdict():
    # per-call seconds; round medians A: 2, 3, 4 ms; B: 1, 1, 2 ms -> ratios 2, 3, 2
    a = [[0.002, 0.001, 0.009], [0.003, 0.003, 0.001], [0.004, 0.005, 0.004]]
    b = [[0.001, 0.001, 0.005], [0.001, 0.0, 0.002], [0.002, 0.002, 0.002]]
    s = summarize(a, b, goal=2.5)
    assert s["ratios"] == pytest.approx([2.0, 3.0, 2.0])
    assert s["ratio"]["median"] == pytest.approx(2.0)
    assert (s["ratio"]["min"], s["ratio"]["max"]) == pytest.approx((2.0, 3.0))
    assert (s["ratio"]["q1"], s["ratio"]["q3"]) == pytest.approx((2.0, 2.5))
    assert s["a_ms"] == pytest.approx(3.0) and s["b_ms"] == pytest.approx(1.0)
    # "met" only when the upper quartile is under the goal
    assert s["verdict"].startswith("not shown")
    assert summarize(a, b, goal=2.51)["verdict"] == "met"
    assert summarize(a, b, goal=2.0)["verdict"] == "not met"
    assert summarize(a, b)["verdict"] is None


def test_protocol_gives_the_ratio_of_known_costs(tmp_path):
    proc, doc = _run(tmp_path, f"sleep:60@{REPO}", "sleep:30")   # (A from a checkout DIR)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (row,) = doc["workloads"]
    assert len(row["ratios"]) == 2 and len(row["a_block_ms"]) == 2
    # each round's ratio is the ratio of its two blocks' medians
    for r, a, b in zip(row["ratios"], row["a_block_ms"], row["b_block_ms"]):
        assert r == pytest.approx(a / b)
    # a sleep wakes late by the wake-up latency (12 ms seen under a load of 10 on 2 cores):
    # 60 ms against 30 ms is 2x less that; 0.5x would be A and B swapped
    assert 60 <= row["a_ms"] < 150 and 30 <= row["b_ms"] < 120
    assert 1.2 < row["ratio"]["median"] < 2.1
    assert all(n >= 3 for n in row["calls_per_block"])
    # a sleeping worker uses no CPU while the other one runs its block
    assert all(w["max"] < 50 for w in row["waiting_cpu_ms"].values())
    assert 0 <= row["other_cores"]["min"] <= row["other_cores"]["max"] <= 2 * os.cpu_count()
    assert "| cal |" in proc.stdout and "min / q1 / q3 / max" in proc.stdout
    assert doc["load_start"] and doc["load_end"]
    assert f"sleep 60 ms at {REPO}" in proc.stdout
    assert row["a_cpu_ms"] < 5 and row["b_cpu_ms"] < 5   # (CPU per call: a sleep uses none)


def test_a_worker_that_fails_is_reported_not_timed(tmp_path):
    proc, doc = _run(tmp_path, "sleep:x", "sleep:1", rounds=1)
    assert proc.returncode == 1
    (row,) = doc["workloads"]
    assert "ValueError" in row["error"] and "ratios" not in row
    proc, doc = _run(tmp_path, "sleep:1", f"sleep:1@{tmp_path / 'no such checkout'}", rounds=1)
    assert proc.returncode == 1 and "no such checkout" in doc["workloads"][0]["error"]
