"""NUMBA_DISABLE_JIT=1 runs every generated kernel, and the vector math it calls, as plain
Python (the README's "Debugging a kernel"): the training steps of W8, W9 and W10, made
small, compiled with Numba's switch off, give eager's losses, parameters and gradients.
Before, W8's convolution kernels (vmath.add_reassoc, muladd_reassoc), every kernel
dividing through vmath.div_invariant_* or div_exact, and W10's LSTM kernels (the BLAS call
of codegen.gemm_call) raised "<intrinsic ...> is not usable in pure-python"."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def _python_mode_env(cache: Path) -> dict:
    env = dict(os.environ, NUMBA_DISABLE_JIT="1", TRACEJIT_CACHE_DIR=str(cache))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    env.pop("TRACER_CHECK", None)
    return env


def test_w8_w9_w10_kernels_run_as_python_and_agree_with_eager(tmp_path):
    proc = subprocess.run([sys.executable, str(HERE / "_disable_jit_child.py"), "W8", "W9",
                           "W10"], env=_python_mode_env(tmp_path / "cache"), cwd=str(ROOT),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["workload"] for r in rows] == ["W8", "W9", "W10"]
    for r in rows:
        assert r["kernels"] > 0 and r["max_diff"] < 1e-4, r


VMATH_SCRIPT = r"""
import numpy as np
import codegen.vmath as v
from codegen import gemm_call
from codegen.step_kernels_rnn import gemm_address
f = np.float32
assert v.add_reassoc(f(1), f(2)) == f(3)
assert v.muladd_reassoc(f(1), f(2), f(3)) == f(7)
assert v.div_exact(f(1), f(0)) == np.inf and v.div_invariant_f64(3.0, 2.0) == 1.5
assert v.floor_divide_float(f(-3), f(np.inf)) == -1.0
assert v.remainder_float(f(7), f(-2)) == -1.0
assert v.pow_uint64(np.int64(-3), np.int64(3)) == np.uint64(2 ** 64 - 27)
a = np.arange(6, dtype=np.float32).reshape(2, 3)
b = np.arange(12, dtype=np.float32).reshape(4, 3)   # C = A @ B^T
c = np.empty((2, 4), np.float32)
address = gemm_address("float32")
if address:
    gemm_call.gemm_f32(address, True, 2, 4, 3, a.ctypes.data, 3, b.ctypes.data, 3,
                       c.ctypes.data, 4)
    assert np.array_equal(c, a @ b.T), c
print("ok")
"""


def test_vmath_and_blas_helpers_have_python_stand_ins(tmp_path):
    with np.errstate(all="ignore"):
        proc = subprocess.run([sys.executable, "-c", VMATH_SCRIPT],
                              env=_python_mode_env(tmp_path / "cache"), cwd=str(ROOT),
                              capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
