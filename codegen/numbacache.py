"""Compiling a kernel with Numba's disk cache, safely: the cache only where tracejit has
checked it, healed when its files are corrupt, and interrupts that cannot be lost.

Numba's cache (``cache=True``) keeps an index (``.nbi``) and data (``.nbc``) per function
in ``__pycache__`` next to the kernel's module; tracejit checked that directory before
(codegen.cache). Here:

* `dispatcher`: ``numba.njit`` with the disk cache only in that checked ``__pycache__``;
  a module made in memory, or a ``__pycache__`` Numba cannot write (it would then choose a
  directory of its own under the user's home, never checked), compiles without it;
* `compile_healing`: a failed save (a full disk) keeps the compiled kernel; a failed load
  (corrupt files) deletes that function's files, says so in one log line and compiles
  again, so later processes find good files;
* `interrupts_deferred`: Ctrl-C is raised after the compile, not lost inside it.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from pathlib import Path

from . import cache

#: The module global telling `njit` that a module has no file, so no disk cache.
IN_MEMORY_FLAG = "__tracejit_in_memory__"


@contextlib.contextmanager
def interrupts_deferred():
    """Ctrl-C held until the kernel is compiled (or loaded), then raised: LLVM calls back
    into Python while it compiles (llvmlite's object-cache hooks), and a KeyboardInterrupt
    raised there is swallowed by ctypes ("Exception ignored on calling ctypes callback"),
    leaving the interrupt lost and Numba's save broken. Only with Python's default handler
    in the main thread; a user's own SIGINT handler is left alone."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return
    caught = []
    signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if caught:
            raise KeyboardInterrupt


def dispatcher(numba, fn, opts: dict):
    """``numba.njit(**opts)(fn)``, with Numba's disk cache only where it belongs: in the
    checked cache directory's ``__pycache__``. A module made in memory has no file to
    cache against, and where that ``__pycache__`` cannot be written Numba would pick a
    directory of its own (under the user's home) that tracejit never checked: both
    compile without the disk cache."""
    if opts.get("cache"):
        if fn.__globals__.get(IN_MEMORY_FLAG):
            del opts["cache"]
        else:
            try:
                disp = numba.njit(**opts)(fn)
                where = Path(disp._cache._cache_path)
            except Exception as exc:  # noqa: BLE001 - RuntimeError: no locator
                where, exc_seen = None, exc
            else:
                exc_seen = None
            source = Path(fn.__code__.co_filename)
            home = source.parent / cache.PYCACHE
            if where == home:
                return disp
            if where is None and not source.exists():
                # Another process sharing the cache pruned the module between its write
                # and now (a cache at its bound): not the disk's fault, so neither said as
                # such nor a reason to stop compiling ahead; this kernel is compiled in
                # memory, and the next process writes it again.
                _log_pruned(fn)
            else:
                cache.disk_trouble(home.parent, exc_seen or OSError(f"Numba chose {where}"))
            del opts["cache"]
    return numba.njit(**opts)(fn)


def _log_pruned(fn) -> None:
    from tracer import logs

    logs.log("kernels", f"{fn.__module__}: its module file was pruned by another process "
                        f"before Numba read it; compiled without the disk cache")


def compile_healing(numba, fn, disp, signature: str, opts: dict):
    """`disp.compile(signature)`, healing Numba's disk cache: a save that fails (a full
    disk) leaves the kernel compiled in memory; a load that fails (a corrupt index or data
    file) deletes that kernel's Numba files, says so in one log line, and compiles again,
    saving fresh files."""
    try:
        disp.compile(signature)
        return disp
    except Exception as exc:  # noqa: BLE001
        if disp.overloads:  # compiled; saving it failed
            if isinstance(exc, OSError):
                cache.disk_trouble(Path(fn.__code__.co_filename).parent, exc)
            else:
                cache.log.warning("tracejit: Numba did not save %s to its disk cache "
                                  "(%s: %s); it runs compiled all the same", fn.__module__,
                                  type(exc).__name__, exc)
            return disp
        removed = remove_numba_files(disp) if opts.get("cache") else []
        if not removed:
            raise
        cache.log.warning("tracejit: deleted corrupt Numba cache files %s (%s: %s); "
                          "compiling %s again", ", ".join(removed), type(exc).__name__,
                          str(exc).splitlines()[0][:200] if str(exc) else "",
                          fn.__module__)
    disp = numba.njit(**opts)(fn)
    disp.compile(signature)
    return disp


def remove_numba_files(disp) -> list:
    """Delete the index and data files of `disp`'s function; their names."""
    try:
        cache_file = disp._cache._cache_file
        directory = Path(cache_file._cache_path)
        prefix = cache_file._index_name[:-len(".nbi")] + "."
        found = [p for p in directory.iterdir() if p.name.startswith(prefix)]
    except Exception:  # noqa: BLE001 - another Numba layout: nothing healed
        return []
    for p in found:
        try:
            p.unlink()
        except OSError:
            pass
    return [p.name for p in found]
