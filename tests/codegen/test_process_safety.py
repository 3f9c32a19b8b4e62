"""Compiled code in long-lived user processes, seen from processes (_process_child.py runs
the float32 product kernel, the direct convolutions and the LSTM recurrence, compiled):

* results do not depend on the thread count (NUMBA_NUM_THREADS=1 against the default, and
  numba.set_num_threads in a process): bit for bit;
* one cache directory shared by processes whose Numba targets differ (NUMBA_CPU_NAME), or
  that use or not the product kernel (TRACEJIT_GEMM, also changed while running): each
  loads only what was compiled for its own target, and neither spoils the other's files;
* two threads calling the compiled functions at once (one tracing meanwhile), and
  parallel=True kernels (Numba's workqueue layer aborted the process on concurrent use);
* fork (a DataLoader's workers): the child calls, traces, compiles and exits; no stray
  processes, the parent's results and cache intact;
* a user's own Numba code in the same process: their threading layer and their
  ``@njit(parallel=True, cache=True)`` functions' cache.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CHILD = HERE / "_process_child.py"


def _env(cache: Path, extra: dict) -> dict:
    env = dict(os.environ)
    for name in ("TRACER_LOGS", "NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", "NUMBA_NUM_THREADS",
                 "NUMBA_THREADING_LAYER", "TRACEJIT_GEMM", "TRACEJIT_PARALLEL_MIN_SIZE"):
        env.pop(name, None)
    env.update(extra)
    env["TRACEJIT_CACHE_DIR"] = str(cache)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def run(cache: Path, args=(), script=None, cwd=ROOT, **extra) -> dict:
    command = [sys.executable] + (["-c", script] if script else [str(CHILD), *args])
    proc = subprocess.run(command, env=_env(cache, extra), cwd=str(cwd), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def cache(tmp_path) -> Path:
    path = tmp_path / "kernels"
    path.mkdir(mode=0o700)
    return path


def _all(report: dict, key: str) -> None:
    assert report[key] == {"product": True, "conv": True, "lstm": True}, report


def test_processes_threads_targets_and_fork_share_one_cache(cache):
    first = run(cache, ["threads", "fork"])
    if not first["gemm"]:
        pytest.skip("the product kernel is not used here (no AVX-512, or an AVX-512 BLAS)")
    _all(first, "agrees")
    _all(first, "agrees_gemm_off")
    # TRACEJIT_GEMM=0 set while running: the next traces use numpy's BLAS, and right
    assert first["digests_gemm_off"]["product"] != first["digests"]["product"]
    assert first["again"] and first["one_thread"]  # (numba.set_num_threads(1): same bits)
    threads = first["threads"]
    assert threads["all_equal"] and not threads["errors"] and not threads["hung"], threads
    fork = first["fork"]
    assert fork.get("digests") == first["digests"], fork
    _all(fork, "agrees_new")
    assert fork["stats"]["numba_compiles"] > first["stats"]["numba_compiles"]  # (it compiled)
    assert fork["children"] == [] and first["children"] == [], first
    assert first["fork_exitcode"] == 0 and first["after_fork"], first

    # Numba compiling for another CPU: nothing compiled for this one is loaded (its
    # machine code may hold AVX-512), no product kernel; the host's files stay as they were
    other = run(cache, ["only=lstm"], NUMBA_CPU_NAME="haswell")
    assert not other["gemm"]
    assert other["agrees"] == {"lstm": True}, other
    stats = other["stats"]
    assert stats["objects_loaded"] == 0 and stats["numba_compiles"] == stats["modules_loaded"]
    assert stats["rebuilds"] == 0 and stats["objects_written"] == 0, stats

    # One thread per process: the same bits; everything from the object files (neither the
    # fork child's writes nor the other CPU's process spoiled them). (This process was two,
    # one before the other CPU's and one after: it checks what both did.)
    one = run(cache, NUMBA_NUM_THREADS="1")
    assert one["digests"] == first["digests"], (one, first)
    assert one["digests_gemm_off"] == first["digests_gemm_off"]
    assert one["stats"]["numba_compiles"] == 0 and one["stats"]["rebuilds"] == 0, one["stats"]
    assert one["stats"]["objects_loaded"] == first["stats"]["modules_loaded"] > 0


PRANGE_THREADS = """
import json, multiprocessing, threading
import numpy as np
import numba
import eager, tracer

def g(x):
    return (x * 2.0 + 1.0).tanh() * x.T   # a nested loop: prange (TRACEJIT_PARALLEL_MIN_SIZE)

f = tracer.function(g)

xs = [np.random.default_rng(k).standard_normal((64, 64)).astype(np.float32) for k in range(2)]
with eager.no_grad():
    want = [f(eager.from_numpy(x)).numpy() for x in xs]   # (one thread)
    close = all(np.allclose(w, g(eager.from_numpy(x)).numpy(), rtol=1e-6, atol=1e-6)
                for w, x in zip(want, xs))
parallel = sum("parallel=True" in k.source for k in f.get_concrete_function(
    eager.from_numpy(xs[0])).kernels)
bad = []
def work(k):
    with eager.no_grad():
        for _ in range(400):
            if not np.array_equal(f(eager.from_numpy(xs[k])).numpy(), want[k]):
                bad.append(k)
threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
for t in threads: t.start()
for t in threads: t.join()


def forked(queue):  # (the workqueue layer's threads do not survive a fork: no hang)
    with eager.no_grad():
        queue.put(bool(np.array_equal(f(eager.from_numpy(xs[1])).numpy(), want[1])))
ctx = multiprocessing.get_context("fork")
queue = ctx.Queue()
child = ctx.Process(target=forked, args=(queue,))
child.start()
in_child = queue.get(timeout=120)
child.join(timeout=30)
print(json.dumps({"parallel": parallel, "layer": numba.threading_layer(), "bad": len(bad),
                  "close": close, "forked": [in_child, child.exitcode]}))
"""


def test_parallel_kernels_called_from_two_threads_and_after_fork(cache):
    """Numba's workqueue layer (tracejit's default) aborted the process on concurrent use
    ("Concurrent access has been detected"): parallel=True kernels are called one at a
    time. A forked child runs them too."""
    report = run(cache, script=PRANGE_THREADS, TRACEJIT_PARALLEL_MIN_SIZE="1000")
    assert report == {"parallel": 1, "layer": "workqueue", "bad": 0, "close": True,
                      "forked": [True, 0]}, report


USER_MODULE = """
import numba
import numpy as np

@numba.njit(parallel=True, cache=True)
def user_parallel(a):
    out = np.empty_like(a)
    for i in numba.prange(a.shape[0]):
        out[i] = a[i] * 2.0 + 1.0
    return out
"""

USER_NUMBA = """
import json
import numpy as np
import numba
numba.config.THREADING_LAYER = "omp"   # the user's choice, made in code
import eager, tracer

@tracer.function
def f(x):
    return (x * 2.0 + 1.0).tanh() * x.T   # a parallel=True kernel: the Parfor names salted

x = np.ones((64, 64), np.float32)
with eager.no_grad():
    f(eager.from_numpy(x))
import usermod
a = np.arange(1000.0)
got = usermod.user_parallel(a)
print(json.dumps({"config": numba.config.THREADING_LAYER, "layer": numba.threading_layer(),
                  "right": bool((got == a * 2.0 + 1.0).all()),
                  "hits": sum(usermod.user_parallel.stats.cache_hits.values())}))
"""


def test_users_numba_settings_and_parallel_cache_are_left_alone(cache, tmp_path):
    home = tmp_path / "user"
    home.mkdir()
    (home / "usermod.py").write_text(USER_MODULE)
    env = {"TRACEJIT_PARALLEL_MIN_SIZE": "1000",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(home)])}
    first = run(cache, script=USER_NUMBA, cwd=home, **env)
    assert first == {"config": "omp", "layer": "omp", "right": True, "hits": 0}, first
    second = run(cache, script=USER_NUMBA, cwd=home, **env)  # their cache loads
    assert second == {"config": "omp", "layer": "omp", "right": True, "hits": 1}, second
