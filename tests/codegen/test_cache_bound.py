"""The kernel cache's bound in a long-lived process writing to a large cache
(codegen.cache.keep_bound): the directory is scanned only when the total may have passed
the bound (or RESCAN_SECONDS after the last scan), pruning goes down to LOW_WATER of it,
and Numba's runtime objects (``nrt-*``) are pruned as kernels are, the one in use last.

Before, every write scanned the whole directory: ~0.15 s per write with 1k kernels, 1.1 s
with 10k, at load 5 (`python -m benchmarks.prune_cost`), and ``nrt-*`` files were never
deleted."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from codegen import cache, kernelfiles, objload

SIZE = 1000


@pytest.fixture
def directory(tmp_path, monkeypatch):
    d = tmp_path / "kernels"
    d.mkdir(mode=0o700)
    (d / cache.PYCACHE).mkdir(mode=0o700)
    monkeypatch.setattr(cache, "_BOUND", {}, raising=False)
    monkeypatch.setattr(kernelfiles, "COMPILING_AHEAD", set())
    monkeypatch.setattr(objload, "NRT_IN_USE", set(), raising=False)
    return d


def _kernel(d: Path, stem: str, age: float = 0.0) -> None:
    when = time.time() - age
    for path in (d / f"{stem}.py", d / f"{stem}.tjo", d / cache.PYCACHE / f"{stem}.k-1.nbi"):
        path.write_bytes(b"x" * SIZE)
        os.utime(path, (when, when))


def _scans(monkeypatch) -> list:
    calls, original = [], cache.entries

    def counting(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)
    monkeypatch.setattr(cache, "entries", counting)
    return calls


def test_writes_under_the_bound_do_not_scan_the_directory_each_time(directory, monkeypatch):
    for i in range(50):
        _kernel(directory, f"old{i}", age=100 + i)
    monkeypatch.setenv(cache.MAX_BYTES_ENV, str(10 ** 9))
    scans = _scans(monkeypatch)
    for i in range(20):
        _kernel(directory, f"new{i}")
        kernelfiles._after_write(directory, f"new{i}")
    assert len(scans) == 1, len(scans)   # (the first write of the process scans)
    monkeypatch.setattr(cache, "RESCAN_SECONDS", 0.0)  # ... and one long after the last
    kernelfiles._after_write(directory, "new0")
    assert len(scans) == 2
    assert len(cache.entries(directory)) == 70   # nothing deleted


def test_the_bound_is_kept_and_pruning_leaves_room_for_the_next_writes(directory,
                                                                         monkeypatch):
    for i in range(40):
        _kernel(directory, f"old{i}", age=100 + i)
    limit = 30 * 3 * SIZE  # 30 kernels' worth
    monkeypatch.setenv(cache.MAX_BYTES_ENV, str(limit))
    _kernel(directory, "fresh")
    kernelfiles._after_write(directory, "fresh")
    found = cache.entries(directory)
    total = sum(size for size, _, _ in found.values())
    assert total <= cache.LOW_WATER * limit and "fresh" in found
    # the oldest went first
    assert "old39" not in found and "old0" in found
    # every later write that may pass the bound scans again; the bound holds throughout
    monkeypatch.setattr(cache, "MIN_KERNEL_BYTES", 3 * SIZE)
    for i in range(30):
        _kernel(directory, f"later{i}")
        kernelfiles._after_write(directory, f"later{i}")
        found = cache.entries(directory)
        assert sum(size for size, _, _ in found.values()) <= limit + 3 * SIZE
    assert "later29" in found


def test_a_changed_bound_is_seen_at_the_next_write(directory, monkeypatch):
    for i in range(10):
        _kernel(directory, f"old{i}", age=100 + i)
    monkeypatch.setenv(cache.MAX_BYTES_ENV, str(10 ** 9))
    kernelfiles._after_write(directory, "old0")
    monkeypatch.setenv(cache.MAX_BYTES_ENV, str(4 * 3 * SIZE))
    _kernel(directory, "new")
    kernelfiles._after_write(directory, "new")
    assert len(cache.entries(directory)) <= 4 and "new" in cache.entries(directory)


def test_runtime_objects_are_pruned_least_recently_used_the_one_in_use_last(directory,
                                                                             monkeypatch):
    """nrt-*.tjo (one per Numba, llvmlite and CPU target) were never pruned: after upgrades
    the old ones stayed for good."""
    for name, age in (("nrt-0000000000000old", 500), ("nrt-00000000000inuse", 400)):
        for suffix in (objload.SUFFIX, objload.DIGEST_SUFFIX):
            path = directory / f"{name}{suffix}"
            path.write_bytes(b"n" * SIZE)
            os.utime(path, (time.time() - age,) * 2)
    objload.NRT_IN_USE.add("nrt-00000000000inuse")
    for i in range(5):
        _kernel(directory, f"k{i}", age=10 + i)
    assert "nrt-0000000000000old" not in cache.entries(directory)  # (not a kernel to info)
    monkeypatch.setenv(cache.MAX_BYTES_ENV, str(4 * 3 * SIZE))
    kernelfiles._after_write(directory, "k0")
    names = {p.name for p in directory.iterdir()}
    assert not any(n.startswith("nrt-0000000000000old") for n in names)
    assert {"nrt-00000000000inuse.tjo", "nrt-00000000000inuse.sum"} <= names
    assert cache.info(directory)["kernels"] == len(cache.entries(directory))


def test_a_module_pruned_by_another_process_before_numba_reads_it(tmp_path, monkeypatch,
                                                                    caplog):
    """Processes sharing a cache at its bound prune each other's freshest kernels: one
    deleted between this process's write of a module and Numba's look at it made Numba
    find no file to cache against (benchmarks.cache_sharing, 3 processes at 400 kB). That
    was reported as "cannot write to the kernel cache" and stopped compiling ahead until a
    write succeeded; now the kernel is compiled in memory without a word at WARNING."""
    import logging

    import eager
    import tracer

    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path / "kernels"))
    monkeypatch.setenv("TRACEJIT_COMPILE_AHEAD", "0")
    original = cache.scrub_numba_files

    def pruned_meanwhile(directory):  # (called right after the module's write)
        for p in Path(directory).glob("*.py"):
            p.unlink()
        original(directory)
    monkeypatch.setattr(cache, "scrub_numba_files", pruned_meanwhile)
    f = tracer.function(lambda x: x * 3.0 + 1.0)
    x = eager.arange(7, dtype=eager.float32)
    with caplog.at_level(logging.WARNING, logger="tracer.cache"):
        assert f(x).tolist() == [3.0 * i + 1.0 for i in range(7)]
    assert not [r for r in caplog.records if "cannot write" in r.getMessage()]
    assert not cache.troubled(cache.dir_path())
