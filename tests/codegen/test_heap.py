"""codegen/heap.py: the numba backend's first compile sets glibc's malloc thresholds, so a
step that frees several MiB of temporaries at its end reuses them at the next call instead
of page-faulting them in again (W10: 2711 minor faults, 4-6 ms of system time per step
before); TRACEJIT_KEEP_HEAP=0 and the user's own MALLOC_*_ settings leave malloc alone.
Each case runs in a child process: the thresholds are process-wide and set once."""
from __future__ import annotations

import os
import pathlib
import platform
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc" or
                                not sys.platform.startswith("linux"),
                                reason="glibc's malloc thresholds")

# A compiled step whose results (five arrays of 2 MiB each: more than twice the largest
# one, below the output pool's size) the caller drops after each call, so they are freed
# together; minor page faults per call, counted after warm-up. (Temporaries that stay
# inside the program are in reused buffers; results are new arrays at each call.)
PROBE = """
import resource
import numpy as np
import eager, tracer
from codegen import heap

@tracer.function
def step(x):
    return tuple(eager.cat([x * float(k), x], 0) for k in range(5))

x = eager.ones(256, 1024)
for _ in range(3):
    step(x)
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step(x)
f1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
print(heap.applied(), (f1 - f0) // 10)
"""


def _child(**env) -> list:
    full = dict(os.environ, PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="1",
                NUMBA_NUM_THREADS="1", **env)
    for name in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES"):
        if name not in env:
            full.pop(name, None)
    out = subprocess.run([sys.executable, "-c", PROBE], env=full, capture_output=True,
                         text=True, timeout=300, check=True)
    applied, faults = out.stdout.split()
    return [applied == "True", int(faults)]


def test_first_compile_keeps_freed_memory_and_the_switch_turns_it_off():
    applied, faults = _child()
    assert applied and faults < 100, faults        # 2 MiB arrays: 512 pages each
    off, faults_off = _child(TRACEJIT_KEEP_HEAP="0")
    assert not off and faults_off > 1000, faults_off


def test_the_users_own_malloc_tuning_is_left_alone():
    applied, _ = _child(MALLOC_TRIM_THRESHOLD_="131072")
    assert not applied
