"""The on-disk kernel cache seen from processes, and what happens when a kernel cannot be
built.

* a second process compiling the same @function loads every kernel from the cache: zero
  Numba compilations (`codegen.compile_stats()`, printed as JSON by `_cache_child.py`);
* a generated module edited or truncated on disk is detected (sha256 header) and rebuilt,
  and the results stay right;
* a cache directory other users can write to is refused with a message saying how to fix it;
* a kernel that fails to build runs through numpy, with exactly one RuntimeWarning naming it.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import codegen
import codegen.build
import codegen.cache
import codegen.objload
import eager
import eager.nn.functional as F
import tracer

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CHILD = HERE / "_cache_child.py"


def run_child(cache: Path, **extra_env) -> dict:
    env = dict(os.environ)
    env.update(extra_env)
    env["TRACEJIT_CACHE_DIR"] = str(cache)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    env.pop("TRACER_LOGS", None)
    proc = subprocess.run([sys.executable, str(CHILD)], env=env, cwd=str(ROOT),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def expected_outputs() -> list:
    """What _cache_child.py computes, computed eagerly here."""
    x = eager.from_numpy(np.linspace(-2, 2, 24, dtype=np.float32).reshape(4, 6))
    w = eager.from_numpy(np.linspace(1, -1, 30, dtype=np.float32).reshape(6, 5))
    with eager.no_grad():
        h = F.gelu(x @ w)
        return [F.softmax(h, -1).numpy(), (h * 2 + 1).sum(0).numpy()]


def check_outputs(report: dict):
    for got, exp in zip(report["outputs"], expected_outputs(), strict=True):
        np.testing.assert_allclose(np.array(got, np.float32), exp, rtol=1e-5, atol=1e-6)


def kernel_files(cache: Path) -> list:
    return sorted(p for p in cache.glob("*.py"))


def object_files(cache: Path) -> list:
    """The kernels' object files (not the runtime's, nrt-*.tjo)."""
    return sorted(p for p in cache.glob("*.tjo") if not p.name.startswith("nrt-"))


def repack(path: Path, **header_changes) -> None:
    """Rewrite an object file's header with a valid hash: only the loader's checks of what
    the header says can refuse it."""
    header, obj = codegen.objload._unpack(path.read_bytes())
    header.update(header_changes)
    path.write_bytes(codegen.objload._pack(header, obj))


@pytest.fixture
def cache(tmp_path) -> Path:
    return tmp_path / "kernels"


@pytest.fixture(scope="module")
def _first_run(tmp_path_factory) -> tuple:
    """One first (cold) process, shared: (its cache directory, its report)."""
    template = tmp_path_factory.mktemp("first") / "kernels"
    return template, run_child(template)


@pytest.fixture
def first(_first_run, cache) -> dict:
    """The first process's report, its cache copied (bytes, modes and times) to `cache`: the
    tests that only tamper with what a first process left start from the same files
    without each paying that cold process (~4 s of Numba compiles)."""
    template, report = _first_run
    shutil.copytree(template, cache, copy_function=shutil.copy2)
    os.chmod(cache, 0o700)
    return report


def test_second_process_compiles_nothing(cache, first, _first_run):
    assert first["cache_dir"] == str(_first_run[0])
    n = len(first["kernels"])
    assert n >= 1 and not first["fallbacks"], first  # (its row and col parts: one multi kernel)
    # (the child also runs a symbolic function and a training step: more kernels)
    total = first["stats"]["modules_written"]
    assert total > n and first["stats"]["numba_compiles"] == total, first["stats"]
    check_outputs(first)
    # no warnings, not even numpy's about the inf * 0 the child computes (eager has none)
    assert not first["warnings"], first["warnings"]
    assert len(kernel_files(cache)) == total
    assert (cache / "__pycache__").is_dir()  # Numba's own index and data files

    assert first["stats"]["objects_written"] == total  # no parallel=True kernel here
    assert len(object_files(cache)) == total

    second = run_child(cache)
    assert second["kernels"] == first["kernels"]
    assert second["modules"] == first["modules"]
    assert second["stats"]["numba_compiles"] == 0, second["stats"]
    assert second["stats"]["modules_written"] == 0, second["stats"]
    # every kernel from its object file, without importing Numba (objload)
    assert second["stats"]["objects_loaded"] == total, second["stats"]
    assert second["stats"]["numba_cache_hits"] == 0, second["stats"]
    assert second["stats"]["rebuilds"] == 0
    assert second["outputs"] == first["outputs"]
    assert second["more_outputs"] == first["more_outputs"]
    assert not second["warnings"], second["warnings"]
    assert first["numba_imported"] and not second["numba_imported"]

    # Without object files, Numba's cache serves, loaded without Numba's compiler set-up
    # (build.njit), and the object files are written again from it
    for path in object_files(cache):
        path.unlink()
    third = run_child(cache)
    assert third["stats"]["numba_compiles"] == 0, third["stats"]
    assert third["stats"]["numba_cache_hits"] >= total, third["stats"]
    assert third["stats"]["objects_written"] == total, third["stats"]
    assert first["numba_set_up"] and not third["numba_set_up"]
    assert (third["outputs"], third["more_outputs"]) == \
        (first["outputs"], first["more_outputs"])


def test_object_files_that_do_not_check_out_are_not_loaded(cache, first):
    """An object file truncated, edited, made for another CPU, or needing a symbol this
    process lacks is refused before LLVM sees it (an unresolved symbol would be a fatal
    LLVM error): Numba's path serves that kernel and writes its file again."""
    total = first["stats"]["objects_written"]
    truncated, edited, other_cpu, unknown_symbol = object_files(cache)[:4]
    data = truncated.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    data = bytearray(edited.read_bytes())
    data[-100] ^= 0xFF  # one byte of machine code
    edited.write_bytes(bytes(data))
    repack(other_cpu, magic=["x86_64-unknown-linux-gnu", "pentium", ""])
    repack(unknown_symbol, undefined=["tracejit_no_such_symbol"])

    second = run_child(cache)
    assert not second["fallbacks"] and not second["warnings"], second
    assert second["stats"]["objects_loaded"] == total - 4, second["stats"]
    assert second["stats"]["numba_compiles"] == 0, second["stats"]
    assert second["stats"]["numba_cache_hits"] >= 4, second["stats"]
    assert second["stats"]["objects_written"] == 4, second["stats"]
    assert second["stats"]["rebuilds"] == 4, second["stats"]
    assert (second["outputs"], second["more_outputs"]) == \
        (first["outputs"], first["more_outputs"])

    third = run_child(cache)  # all good again
    assert third["stats"]["objects_loaded"] == total and not third["numba_imported"]


def test_object_file_of_another_kernel_is_refused(cache, first):
    a, b = object_files(cache)[:2]
    a.write_bytes(b.read_bytes())  # a valid file, under the wrong name
    second = run_child(cache)
    assert second["stats"]["objects_loaded"] == first["stats"]["objects_written"] - 1
    assert second["stats"]["rebuilds"] == 1
    assert (second["outputs"], second["more_outputs"]) == \
        (first["outputs"], first["more_outputs"])


def test_parallel_kernels_load_from_the_cache_like_serial_ones(cache):
    """With every kernel past the parallel threshold (loops and row blocks split among
    threads, the rows run by a rows() function), the second process loads them all,
    directly, with equal results; and with the direct load switched off, Numba's own load
    gives the same."""
    env = {"TRACEJIT_PARALLEL_MIN_SIZE": "8"}
    first = run_child(cache, **env)
    assert any("range(lo, hi)" in p.read_text() for p in kernel_files(cache))
    assert any("def rows(" in p.read_text() for p in kernel_files(cache))
    second = run_child(cache, **env)
    assert second["stats"]["numba_compiles"] == 0, second["stats"]
    assert not second["numba_set_up"]
    # Split kernels load from object files; parallel=True ones (prange) through Numba,
    # whose thread pool they need: those have no object file.
    stats = second["stats"]
    assert stats["objects_loaded"] > 0, stats
    assert stats["objects_loaded"] + stats["numba_cache_hits"] == \
        first["stats"]["modules_written"], stats
    for p in kernel_files(cache):
        assert ("parallel=True" in p.read_text()) != p.with_suffix(".tjo").exists(), p.name
    assert (second["outputs"], second["more_outputs"]) == \
        (first["outputs"], first["more_outputs"])
    check_outputs(second)
    third = run_child(cache, TRACEJIT_FAST_CACHE_LOAD="0", **env)
    assert third["stats"]["numba_compiles"] == 0 and third["numba_set_up"]
    assert (third["outputs"], third["more_outputs"]) == \
        (first["outputs"], first["more_outputs"])


def test_corrupted_module_file_is_detected_and_rebuilt(cache, first):
    files = kernel_files(cache)
    assert len(files) >= 2
    intact = {p: p.read_bytes() for p in files}
    # one file truncated half-way; the others edited so that, imported as they are, they
    # would read the wrong elements (and still compile)
    truncated = files[0]
    truncated.write_bytes(intact[truncated][: len(intact[truncated]) // 2])
    for p in files[1:]:
        text = intact[p].decode()
        edited = re.sub(r"\bin0\[", "in0[0 * ", text, count=1)
        assert edited != text
        p.write_text(edited)

    second = run_child(cache)
    assert second["stats"]["rebuilds"] == len(files), second["stats"]
    assert second["stats"]["modules_written"] == len(files)
    assert not second["fallbacks"], second
    assert not second["warnings"], second["warnings"]
    check_outputs(second)
    assert second["outputs"] == first["outputs"]
    for p in files:
        assert p.read_bytes() == intact[p], f"{p.name} was not restored"

    third = run_child(cache)  # and the rebuilt files are cached again
    assert third["stats"]["numba_compiles"] == 0
    assert third["stats"]["rebuilds"] == 0


def test_world_writable_cache_directory_is_refused(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(shared))
    with pytest.raises(PermissionError) as info:
        codegen.cache_dir()
    message = str(info.value)
    assert str(shared) in message
    assert "0o777" in message and "writable by group or others" in message
    assert f"chmod 700 {shared}" in message and "TRACEJIT_CACHE_DIR" in message

    # a compiled function still gives the right answer, compiled in memory (no numpy
    # fallback), and says once why and what to do
    @tracer.function
    def refused_cache_probe(x):
        return x * 3 + 1

    x = eager.from_numpy(np.arange(6, dtype=np.float32))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with eager.no_grad():
            out = refused_cache_probe(x)
            out2 = refused_cache_probe(x + 1)
    np.testing.assert_array_equal(out.numpy(), np.arange(6, dtype=np.float32) * 3 + 1)
    np.testing.assert_array_equal(out2.numpy(), np.arange(6, dtype=np.float32) * 3 + 4)
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1, messages
    assert "refusing to use tracejit cache directory" in messages[0]
    assert f"chmod 700 {shared}" in messages[0] and "in memory" in messages[0]
    assert issubclass(caught[0].category, codegen.cache.CacheWarning)
    (kernel,) = refused_cache_probe.get_concrete_function(x).kernels
    assert kernel.entry is not None and not kernel.error  # compiled, not numpy
    assert "(in memory)" in kernel.file
    assert list(shared.iterdir()) == []  # nothing was written to (or imported from) it


@pytest.mark.expect_fallback
def test_kernel_that_fails_to_build_runs_through_numpy_with_one_warning(monkeypatch):
    def broken(source, name_hint):
        raise RuntimeError("simulated build failure")
    monkeypatch.setattr(codegen.build, "load_module", broken)
    monkeypatch.setattr(codegen.build, "FAST_CACHE_LOAD", False)

    @tracer.function
    def fallback_probe(x, w):
        return F.softmax(x * w, -1), F.gelu(x)

    rng = np.random.default_rng(3)
    x = eager.from_numpy(rng.standard_normal((3, 5)).astype(np.float32))
    w = eager.from_numpy(rng.standard_normal(5).astype(np.float32))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with eager.no_grad():
            results = [fallback_probe(x, w) for _ in range(3)]
            concrete = fallback_probe.get_concrete_function(x, w)
            expected = (F.softmax(x * w, -1), F.gelu(x))
    runtime = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    (kernel,) = concrete.kernels  # softmax and gelu share one (row) kernel
    assert len(runtime) == 1, runtime  # three calls, one warning
    assert kernel.name in runtime[0]
    assert "simulated build failure" in runtime[0] and "numpy" in runtime[0]
    assert kernel.entry is None and kernel.fn is None
    assert "simulated build failure" in kernel.error
    assert "runs through numpy" in str(concrete)
    for outs in results:
        for got, exp in zip(outs, expected, strict=True):
            np.testing.assert_allclose(got.numpy(), exp.numpy(), rtol=1e-6, atol=1e-7)
    assert fallback_probe.trace_count == 1


MIXED_CHILD = r"""
import json, sys
import numpy as np
import eager, tracer, codegen
import eager.nn.functional as F

f = tracer.function(lambda x: F.softmax(x * 2.0, -1))
x = eager.from_numpy(np.linspace(-3, 3, 32, dtype=np.float32).reshape(4, 8))
with eager.no_grad():
    cached = f(x).numpy()
report = {"numba_after_cached_call": "numba" in sys.modules}
with eager.no_grad():  # a shape never seen: compiled, so Numba is imported now
    y = eager.from_numpy(np.linspace(-3, 3, 45, dtype=np.float32).reshape(5, 9))
    report["new_shape_ok"] = bool(np.allclose(f(y).numpy(), F.softmax(y * 2.0, -1).numpy(),
                                              rtol=1e-6))
    report["cached_ok"] = bool(np.allclose(cached, F.softmax(x * 2.0, -1).numpy(), rtol=1e-6))
import numba

@numba.njit(parallel=True)
def user_code(n):  # the user's own Numba code: NRT allocation and the thread pool
    a = np.empty(n)
    for i in numba.prange(n):
        a[i] = i
    return a.sum()

report["user_code"] = user_code(1000)
report["attributes"] = [type(m).__name__ for m in (numba._helperlib, numba._dynfunc,
                                                  numba.core.runtime._nrt_python)]
report["stats"] = codegen.compile_stats()
print(json.dumps(report))
"""


def test_numba_imported_after_kernels_loaded_from_object_files_works_as_usual(cache):
    """A process that loads kernels from object files has Numba's C extension modules but
    not Numba; when it then compiles (a new shape), Numba imports those same modules, and
    the user's own Numba code runs as usual."""
    env = dict(os.environ, TRACEJIT_CACHE_DIR=str(cache))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])

    def child() -> dict:
        proc = subprocess.run([sys.executable, "-c", MIXED_CHILD], env=env, cwd=str(ROOT),
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])

    child()  # fills the cache for both shapes
    for path in object_files(cache):  # keep only the first shape's object file
        if "range(8)" not in path.with_suffix(".py").read_text():  # (rows of 8, not 9)
            path.unlink()
    report = child()
    assert not report["numba_after_cached_call"], report
    assert report["cached_ok"] and report["new_shape_ok"], report
    assert report["user_code"] == 499500.0
    assert report["attributes"] == ["module"] * 3
    assert report["stats"]["objects_loaded"] >= 1 and report["stats"]["numba_cache_hits"] >= 1


BLAS_CHILD = r"""
import json, sys
import numpy as np
import eager, tracer
import eager.nn.functional as F

f = tracer.function(lambda x: F.gelu(x) * 3.0)
x = eager.from_numpy(np.linspace(-3, 3, 12, dtype=np.float32))
ok = bool(np.allclose(f(x).numpy(), F.gelu(x).numpy() * 3.0, rtol=1e-6))
import numba
from numba.np import arraymath

report = {"compiled_ok": ok, "scipy_linalg_imported": "scipy.linalg" in sys.modules,
          "numba_sees_blas": arraymath._HAVE_BLAS}

@numba.njit
def user_matmul(a, b):  # Numba's np.dot through SciPy's BLAS
    return a @ b

a = np.arange(12.0).reshape(3, 4)
report["user_matmul_ok"] = bool(np.allclose(user_matmul(a, a.T), a @ a.T))
import scipy.linalg
from scipy.linalg import cython_blas
report["same_module"] = (scipy.linalg.cython_blas is cython_blas
                         is sys.modules["scipy.linalg.cython_blas"])
report["scipy_ok"] = bool(np.allclose(scipy.linalg.blas.dgemm(1.0, a, a.T), a @ a.T)
                          and np.allclose(scipy.linalg.solve(np.eye(3), np.ones(3)), 1.0))
print(json.dumps(report))
"""


def test_numba_set_up_gets_scipys_blas_module_without_the_scipy_linalg_package(tmp_path):
    """Numba's compiler set-up imports scipy.linalg.cython_blas to see whether np.dot can
    work; tracejit loads that extension module by itself first (10 ms instead of 0.1 s
    for the scipy.linalg package). Numba still finds BLAS, the user's Numba matmul
    works, and a later ``import scipy.linalg`` uses the same module."""
    env = dict(os.environ, TRACEJIT_CACHE_DIR=str(tmp_path / "cache"))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    proc = subprocess.run([sys.executable, "-c", BLAS_CHILD], env=env, cwd=str(ROOT),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report == {"compiled_ok": True, "scipy_linalg_imported": False,
                      "numba_sees_blas": True, "user_matmul_ok": True, "same_module": True,
                      "scipy_ok": True}
