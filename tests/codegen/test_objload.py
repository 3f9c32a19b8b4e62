"""Kernels loaded from their object files (codegen.objload) in this process: the same
machine code as Numba's, the same results, and refusals that never reach LLVM.

The cross-process side (a second process loads every kernel without importing Numba;
corrupt, foreign or unresolvable files are refused) is in test_cache_process.py.
"""
from __future__ import annotations

import numpy as np
import pytest

import codegen
import eager
import eager.nn.functional as F
import tracer
from codegen import build, kernelfiles, objload


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path / "kernels"))
    return tmp_path / "kernels"


def probe(x, y):
    # a row kernel (softmax), an elementwise one with vmath calls, broadcasting
    return F.softmax(x * y, -1), F.gelu(x) - eager.exp(y) * x


def inputs():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 7)).astype(np.float32)
    x[0, 0], x[1, 1], x[2, 2] = np.nan, np.inf, -np.inf
    y = rng.standard_normal(7).astype(np.float32)
    y[3] = 100.0  # exp overflows to inf
    return eager.from_numpy(x), eager.from_numpy(y)


def kernel_objects(directory):
    """The kernels' object files (named for what they compute, not for the function)."""
    return [p for p in directory.glob("*.tjo") if not p.name.startswith("nrt-")]


def run(fn, x, y):
    with eager.no_grad():
        return [o.numpy() for o in fn(x, y)]


def test_kernels_load_from_object_files_and_compute_what_numba_computes(private_cache):
    x, y = inputs()
    first = tracer.function(probe)
    compiled = run(first, x, y)
    objects = sorted(kernel_objects(private_cache))
    assert len(objects) == len(first.get_concrete_function(x, y).program.compiled_kernels) >= 1
    assert list(private_cache.glob("nrt-*.tjo"))

    # Forget what this process loaded: the next trace finds the files.
    build._ENTRIES.clear()
    build._MODULES.clear()
    before = codegen.compile_stats()
    second = tracer.function(probe)
    loaded = run(second, x, y)
    after = codegen.compile_stats()
    assert after["objects_loaded"] - before["objects_loaded"] == len(objects)
    assert after["numba_compiles"] == before["numba_compiles"]
    assert after["modules_loaded"] == before["modules_loaded"]  # no module imported

    for got, exp in zip(loaded, compiled, strict=True):  # the same machine code
        np.testing.assert_array_equal(got, exp)
    with eager.no_grad(), np.errstate(all="ignore"):
        reference = [o.numpy() for o in probe(x, y)]
    for got, exp in zip(loaded, reference, strict=True):
        np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-6)
        assert np.array_equal(np.isnan(got), np.isnan(exp))

    # The dispatcher is still there for whoever asks (imported on demand).
    kernel = second.get_concrete_function(x, y).kernels[0]
    assert kernel.fn.py_func.__module__ == kernel.module
    assert "loaded from" in kernel.entry.__doc__


def test_object_file_symbols_are_read_from_the_elf_symbol_table(private_cache):
    x, y = inputs()
    run(tracer.function(probe), x, y)
    path = min(kernel_objects(private_cache))
    header, obj = objload._unpack(path.read_bytes())
    defined, undefined = objload.elf_symbols(obj)
    assert header["wrapper"] in defined and header["env"] in defined
    assert header["undefined"] == undefined
    # what a kernel taking arrays needs from Numba's runtime and from Python
    assert "NRT_adapt_ndarray_from_python" in undefined
    assert "PyArg_UnpackTuple" in undefined
    assert header["module"] == path.stem.join(["tracejit_kernels.", ""])
    with pytest.raises(objload.ObjectFileError, match="ELF"):
        objload.elf_symbols(b"\xcf\xfa\xed\xfe" + bytes(60))  # a Mach-O magic
    with pytest.raises(objload.ObjectFileError, match="sha256"):
        objload._unpack(path.read_bytes()[:-1])


def test_numba_configured_for_another_cpu_turns_object_loading_off(monkeypatch):
    monkeypatch.setenv("NUMBA_CPU_NAME", "generic")
    assert objload.host_magic() is None
    monkeypatch.delenv("NUMBA_CPU_NAME")
    triple, cpu, _features = objload.host_magic()
    assert cpu and triple


def test_pyproject_allows_exactly_the_numba_versions_the_loader_was_tested_with():
    import pathlib
    import re

    text = (pathlib.Path(objload.__file__).parent.parent / "pyproject.toml").read_text()
    (spec,) = re.findall(r'"numba(>=[^"]+)"', text)
    first, past = objload.TESTED_NUMBA
    assert spec == f">={'.'.join(map(str, first))},<{'.'.join(map(str, past))}"
    assert not objload.refusal()  # the installed Numba is one of them


@pytest.mark.parametrize("version", ["0.60.0", "0.69.0rc1", "1.0.0", "0.68.0"])
def test_an_untested_numba_gets_numbas_own_cache_path(private_cache, monkeypatch, caplog,
                                                      version):
    """With a Numba the object loader was not tested with, kernels neither write nor load
    object files: Numba's own cache serves, the result is the same, one log line says why
    and nothing warns (no FallbackWarning: the kernel still runs compiled)."""
    x, y = inputs()
    expected = run(tracer.function(probe), x, y)  # writes object files (tested version)
    assert list(kernel_objects(private_cache))
    build._ENTRIES.clear()
    build._MODULES.clear()
    monkeypatch.setattr(objload, "numba_version", lambda: version)
    assert version in objload.refusal()
    monkeypatch.setenv("TRACER_LOGS", "kernels")
    tracer.logs.refresh()
    monkeypatch.setattr(kernelfiles, "_LOGGED", set())  # (the log line is once per process)
    before = codegen.compile_stats()
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with caplog.at_level("INFO", logger="tracer.kernels"):
                f = tracer.function(probe)
                got = run(f, x, y)
                run(tracer.function(probe), x, y)
    finally:
        monkeypatch.delenv("TRACER_LOGS")
        tracer.logs.refresh()
    after = codegen.compile_stats()
    assert after["objects_loaded"] == before["objects_loaded"]  # refused
    assert after["modules_loaded"] > before["modules_loaded"]   # Numba's path
    assert all(k.entry is not None for k in f.get_concrete_function(x, y).kernels)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(g, e)
    lines = [r.getMessage() for r in caplog.records if version in r.getMessage()]
    assert len(lines) == 1 and "Numba's own cache serves" in lines[0], lines


def test_kernels_of_evicted_traces_go_with_their_machine_code(private_cache, monkeypatch):
    """A long-lived process retracing for new shapes (max_traces evicting the old traces)
    kept every kernel it had loaded, and its machine code, for its life: one LLVM engine
    held them all, and codegen's table of loaded kernels referenced each. Now a kernel
    goes with the last program using it, and an engine with its last kernel
    (benchmarks.retrace_memory: +100 KiB per new shape before, flat now)."""
    import gc
    import weakref

    def step(x):  # (a row softmax whose length varies: kernels of each shape's own)
        return F.softmax(x * 2.0, -1)

    sizes = (3, 4, 5, 6, 7)
    xs = {n: eager.from_numpy(np.linspace(-2, 2, 4 * n, dtype=np.float32).reshape(4, n))
          for n in sizes}
    first = tracer.function(step, max_traces=1)
    for n in sizes:  # (compiled here or in the children: their object files are written)
        run1 = first(xs[n])
    del first, run1
    assert len(kernel_objects(private_cache)) >= len(sizes)
    build._ENTRIES.clear()  # (this process forgets them, as a new one would not know them)
    build._MODULES.clear()
    build._RECENT.clear()
    monkeypatch.setattr(objload, "GROUP_KERNELS", 1)
    import collections

    monkeypatch.setattr(kernelfiles, "_RECENT", collections.deque(maxlen=1))
    monkeypatch.setattr(build, "_RECENT", kernelfiles._RECENT)
    before = codegen.compile_stats()["objects_loaded"]
    f = tracer.function(step, max_traces=1)
    refs = []
    for n in sizes:
        got = f(xs[n]).numpy()
        np.testing.assert_allclose(got, step(xs[n]).numpy(), rtol=1e-6)
        refs.append([weakref.ref(k.entry) for k in f.get_concrete_function(xs[n]).kernels])
    assert codegen.compile_stats()["objects_loaded"] - before >= len(sizes)
    gc.collect()
    assert all(r() is None for trace in refs[:-1] for r in trace)  # evicted: gone
    assert all(r() is not None for r in refs[-1])                  # the live trace's stay
    assert objload.live_engines() <= len(refs[-1]) + 1
    got = f(xs[sizes[-1]]).numpy()
    np.testing.assert_allclose(got, step(xs[sizes[-1]]).numpy(), rtol=1e-6)


HOLDER = r"""
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)   # (as a process stopped while writing an object file)
print("held", flush=True)
time.sleep(120)
"""


def test_a_process_stopped_holding_the_object_lock_does_not_hold_this_one(private_cache,
                                                                         monkeypatch):
    """Another process sharing the cache, stopped (SIGSTOP, a debugger) inside its write of
    an object file, held its lock on the directory: this process's next object load
    waited for it as long as it stayed stopped. It now gives up after PAIR_LOCK_SECONDS,
    Numba's path serves the kernel, and the files stay for later loads."""
    import subprocess
    import sys
    import time

    x, y = inputs()
    want = run(tracer.function(probe), x, y)
    objects = sorted(kernel_objects(private_cache))
    assert objects
    build._ENTRIES.clear()
    build._MODULES.clear()
    monkeypatch.setattr(objload, "PAIR_LOCK_SECONDS", 0.3)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(private_cache)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        got = run(tracer.function(probe), x, y)
        elapsed = time.monotonic() - t0
    finally:
        holder.kill()
        holder.wait()
    assert elapsed < 60, elapsed
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    assert sorted(kernel_objects(private_cache)) == objects  # (not deleted as stale)
