"""Two parallel kernels from the cache in one process each run their own loop.

Numba names the function that runs a kernel's parallel loop after the loop's address, in
a module every kernel shares; two kernels compiled where that address happened to be the
same (one process reusing it, or forked compile children with one memory layout) defined
one symbol twice, and loaded into one process the second kernel ran the first one's loop:
a [2, 65] kernel computed with a [2, 63] kernel's sizes, without an error (seen in a test
session's cache). codegen.numbashim salts the name at each parallel compile.
"""
import os
import subprocess
import sys
from pathlib import Path

CHILD = Path(__file__).resolve().parent / "_parfor_child.py"


def _run(cache, *args) -> int:
    env = dict(os.environ, TRACEJIT_CACHE_DIR=str(cache))
    done = subprocess.run([sys.executable, str(CHILD), *args], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return int(done.stdout.split()[-1])


def test_parallel_kernels_compiled_at_one_address_load_side_by_side(tmp_path):
    cache = tmp_path / "cache"
    cache.parent.chmod(0o700)
    assert _run(cache, "compile", "63") == 0
    assert _run(cache, "compile", "65") == 0
    # both from the cache, in one process: each must run its own loop
    assert _run(cache, "load", "63", "65") == 0
