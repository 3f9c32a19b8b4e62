"""Turn generated Numba source text into importable, disk-cached modules.

The code generator produces, for every fused kernel, the complete source text
of a Python module that defines one or more ``@numba.njit(cache=True, ...)``
functions.  This module writes that text to a private cache directory and
imports it as a real module, so that Numba's own on-disk cache (``cache=True``)
works across processes.

Why a real file and a stable module name?  Numba only caches functions whose
``__code__`` comes from a real source file (``exec`` of a string has no cache
locator), and when it reloads a cached overload it resolves the function's
globals through ``importlib.import_module(func.__module__)``.  Therefore each
generated module

* lives in ``<cache_dir>/<name_hint>_<digest>.py`` where the digest covers the
  source text and the versions of everything that affects the generated code
  (tracejit, numba, llvmlite, numpy, Python), and
* is registered in ``sys.modules`` as ``tracejit_kernels.<name_hint>_<digest>``
  (``tracejit_kernels`` is a synthetic namespace package whose ``__path__`` is
  the cache directory) *before* its body is executed.

Object files: after Numba has compiled or loaded a module's ``kernel``, its machine code
is also written as ``<cache_dir>/<name_hint>_<digest>.tjo`` (see objload), and
:func:`load_kernel` loads that in later processes without importing Numba or the module.

Integrity: files are written atomically (temp file + ``os.replace``) and their
first line is ``# tracejit-sha256: <hex>``, the sha256 of the remaining bytes.
A file that is not exactly what its source writes (truncated, corrupted, edited, a
symlink, another user's) is rewritten before being imported and the ``rebuilds`` counter is
bumped; what runs is the checked text (``exec`` under the file's name), never a second read
of the file nor a ``.pyc``. The directory itself is checked first (codegen.cache); without
a usable one, modules are made in memory and compiled without Numba's disk cache.
This module never unpickles anything; only Numba reads its own index/data
files (``__pycache__/*.nbi`` / ``*.nbc``) next to the generated sources.

Compile accounting: ``numba_compiles`` is counted with a listener on Numba's
``"numba:compile"`` event, which Numba fires only when it really compiles an
overload (not when it loads one from the disk cache); only dispatchers defined
in ``tracejit_kernels.*`` modules are counted.  ``numba_cache_hits`` is derived
from the per-dispatcher disk-cache hit counters (``dispatcher.stats``) of all
dispatchers found in modules loaded by :func:`load_module`; they are folded
into :data:`STATS` whenever :func:`compile_stats` (or :func:`ensure_compiled`)
is called.

The module is one of three: codegen.kernelfiles (the files, their names and digests, the
counters), codegen.numbashim (Numba's import and set-up, ``njit``, the use of its
internals) and this one, which loads kernels and keeps the process's registry of them.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import linecache
import os
import shutil
import sys
import threading
import types
from pathlib import Path
from typing import Any, Dict, Sequence, Tuple

from tracer import settings

from . import cache, numbacache, parallel
from .cache import CACHE_DIR_ENV, CacheDirPermissionError  # noqa: F401 - public here too
# What the rest of codegen (ahead, runtime), the generated kernel modules (njit) and the
# tests use through this module:
from .kernelfiles import (_ENTRIES, _MODULES, _RECENT,  # noqa: F401
                          KERNEL_PACKAGE, STATS, _STATS_LOCK,
                          _bump, _file_bytes, _log_once, _names, _version_salt,
                          _write_source, cache_dir)
from .numbashim import (_TRACKED, _disable_jit, _host_magic, _install_compile_listener,  # noqa: F401
                        _numba, _sync_cache_hits, _track, _disk_hits, _track_dispatchers,
                        njit, setting_up_numba)

__all__ = [
    "CacheDirPermissionError",
    "KERNEL_PACKAGE",
    "STATS",
    "cache_dir",
    "clear_cache",
    "compile_stats",
    "ensure_compiled",
    "load_kernel",
    "load_module",
    "njit",
    "reset_stats",
]

# Serialises module loading.  May be held while Numba compiles (eager
# signatures run at import), so the compile listener must never take it.
_LOCK = threading.RLock()

# TRACEJIT_FAST_CACHE_LOAD=0: kernels are not loaded from their object files either.
FAST_CACHE_LOAD = settings.FAST_CACHE_LOAD  # (a Flag: each truth test reads the environment)


def _kernel_package(directory: Path) -> types.ModuleType:
    pkg = sys.modules.get(KERNEL_PACKAGE)
    if pkg is None:
        pkg = types.ModuleType(KERNEL_PACKAGE,
                               "Generated tracejit kernels (synthetic package)")
        spec = importlib.machinery.ModuleSpec(KERNEL_PACKAGE, None,
                                              is_package=True)
        spec.submodule_search_locations = []
        pkg.__spec__ = spec
        pkg.__package__ = KERNEL_PACKAGE
        pkg.__path__ = spec.submodule_search_locations
        sys.modules[KERNEL_PACKAGE] = pkg
    # Point the package at the directory in use, so that a plain
    # ``import tracejit_kernels.<name>`` (e.g. when unpickling a kernel in a
    # worker process) also finds the files.
    path_list = pkg.__path__
    if directory is None:  # (a module in memory)
        return pkg
    d = str(directory)
    if d in path_list:
        path_list.remove(d)
    path_list.insert(0, d)
    return pkg



IN_MEMORY_FLAG = numbacache.IN_MEMORY_FLAG


def load_module(source: str, name_hint: str) -> types.ModuleType:
    """Write ``source`` to the cache (if needed) and import it as a module.

    The file is ``<cache_dir>/<name_hint>_<digest>.py`` and the module is
    registered as ``tracejit_kernels.<name_hint>_<digest>`` before it runs.
    What runs is the text checked against the file, never a second read of it (nor a
    ``.pyc``). Without a usable cache directory (refused, read-only, full) the module is
    made in memory and Numba compiles it without its disk cache.
    Loading the same source again in the same process (with the same cache
    directory) returns the same module object without touching the disk.
    ``name_hint`` is sanitised to an identifier.
    """
    if not isinstance(source, str):
        raise TypeError(f"source must be str, not {type(source).__name__}")
    _install_compile_listener()
    directory, stem, modname = _names(source, name_hint)
    key = (str(directory), modname)

    with _LOCK:
        module = _MODULES.get(key)
        if module is not None:
            return module
        text = _file_bytes(source).decode("utf-8")
        if directory is not None and _write_source(directory / f"{stem}.py", source):
            cache.scrub_numba_files(directory)
            path = directory / f"{stem}.py"
            pkg = _kernel_package(directory)
            spec = importlib.util.spec_from_file_location(modname, path)
            if spec is None or spec.loader is None:  # pragma: no cover
                raise ImportError(f"cannot create an import spec for {path}")
            module = importlib.util.module_from_spec(spec)
            filename = str(path)
        else:
            pkg = _kernel_package(None)
            module = types.ModuleType(modname)
            filename = f"<tracejit kernel {stem} (in memory)>"
            module.__file__ = filename
            setattr(module, IN_MEMORY_FLAG, True)
            linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
        previous = sys.modules.get(modname)
        sys.modules[modname] = module
        try:
            exec(compile(text, filename, "exec"), module.__dict__)
        except BaseException:
            if previous is not None:
                sys.modules[modname] = previous
            else:
                sys.modules.pop(modname, None)
            raise
        setattr(pkg, stem, module)
        _bump("modules_loaded")
        _MODULES[key] = module
        _track_dispatchers(module)
        return module



def load_kernel(source: str, name_hint: str) -> Tuple[Any, str, str]:
    """The generated module's compiled ``kernel`` as ``(entry, module name, source file)``.
    The entry is the callable Numba's compile result holds (it runs the machine code for
    the one signature it was compiled for, without checking argument types), or under
    ``NUMBA_DISABLE_JIT=1`` the plain Python function.

    A kernel compiled or loaded by Numba once leaves its object file in the cache
    (objload); later processes load that, without importing Numba. Without a usable object
    file, the module is imported (:func:`load_module`) and Numba compiles or loads it.
    """
    directory, stem, modname = _names(source, name_hint)
    key = (str(directory), modname)
    path = (str(directory / f"{stem}.py") if directory is not None
            else f"<tracejit kernel {stem} (in memory)>")
    with _LOCK:
        entry = _ENTRIES.get(key)
        if entry is not None:
            return entry, modname, path
        if directory is not None:
            cache.record_at_exit(directory, compile_stats)
        if (directory is not None and FAST_CACHE_LOAD and not _disable_jit()
                and (directory / f"{stem}.tjo").exists()):
            entry = _load_object(directory, stem, modname, source)
        if entry is None:
            with setting_up_numba():
                disp = load_module(source, name_hint).kernel
                entry = (disp.get_overload(disp.signatures[0])
                         if hasattr(disp, "get_overload") else disp)
                if getattr(disp, "targetoptions", {}).get("parallel"):
                    # (never from an object file: objload serves no parallel kernel)
                    entry = parallel.serialized(entry)
        _ENTRIES[key] = entry
        _RECENT.append(entry)
        return entry, modname, path


def _load_object(directory: Path, stem: str, modname: str, source: str):
    from . import objload

    path = directory / f"{stem}.tjo"
    if _host_magic() is None:
        # Numba targets another CPU (NUMBA_CPU_NAME, ...): no object file of the host's is
        # this process's, and the host's stay for the processes that can load them (they
        # were deleted as stale, and this process's written in their place, loadable by
        # none: each kind of process recompiled every kernel the other had used)
        _log_once("kernels are not loaded from object files here (Numba is configured for "
                  "another target: NUMBA_CPU_NAME, NUMBA_CPU_FEATURES or NUMBA_ENABLE_AVX)")
        return None
    try:
        entry = objload.load_kernel(path, modname,
                                    objload.nrt_path(directory, _version_salt(),
                                                     _host_magic()))
    except objload.CacheBusy as exc:  # (the files are fine: left for later loads)
        _log_once(f"object file {path.name} not loaded ({exc}); Numba's path serves")
        return None
    except Exception as exc:  # noqa: BLE001 - Numba's path serves, and rewrites the file
        _log_once(f"object file {path.name} not loaded ({type(exc).__name__}: {exc})")
        for stale in (path, path.with_suffix(objload.DIGEST_SUFFIX)):
            try:
                stale.unlink()
            except OSError:
                pass
        _bump("rebuilds")
        return None
    if entry is None:
        why = objload.unavailable()
        if why:
            _log_once(f"kernels cannot be loaded from object files here ({why})")
        return None
    # The source stays next to its object, checked as load_module checks it: it is what
    # a user reads, and what Numba compiles should the object go.
    _write_source(directory / f"{stem}.py", source)
    cache.touch(path)  # (used: pruned last)
    _bump("objects_loaded")
    return entry



def compile_stats() -> Dict[str, int]:
    """Return a copy of :data:`STATS` (with up-to-date cache-hit counts)."""
    _sync_cache_hits()
    with _STATS_LOCK:
        return dict(STATS)


def reset_stats() -> None:
    """Zero all counters (cache hits that already happened stay discounted)."""
    _sync_cache_hits()
    with _STATS_LOCK:
        for k in STATS:
            STATS[k] = 0


def ensure_compiled(dispatcher: Any, signature_args: Sequence[Any]) -> str:
    """Make sure ``dispatcher`` has an overload for ``signature_args``.

    ``signature_args`` are example argument values (typed with
    ``numba.typeof``) or Numba types.  Returns ``"memory"`` if the overload
    already existed in this process, ``"cache"`` if it was loaded from Numba's
    disk cache and ``"compiled"`` if Numba had to compile it.  Counters in
    :data:`STATS` are updated accordingly.
    """
    import numba
    from numba.core import types as nbtypes

    _install_compile_listener()
    sig = tuple(a if isinstance(a, nbtypes.Type) else numba.typeof(a)
                for a in signature_args)
    if sig in dispatcher.overloads:
        return "memory"
    hits_before = _disk_hits(dispatcher)
    _track(dispatcher, baseline=hits_before)
    dispatcher.compile(sig)
    hit = _disk_hits(dispatcher) > hits_before
    _sync_cache_hits()
    return "cache" if hit else "compiled"


# --------------------------------------------------------------------------
# clearing
# --------------------------------------------------------------------------

def clear_cache() -> None:
    """Delete everything in the cache directory and forget loaded modules.

    Removes the generated ``.py`` files, their object files (``.tjo``), Python's and
    Numba's ``__pycache__`` (``.pyc``/``.nbi``/``.nbc``) and stray temp files.  Already
    imported kernel functions keep working; subsequent :func:`load_module` calls write
    and import fresh modules.  Counters are not reset.
    """
    directory = cache_dir()
    with _LOCK:
        _sync_cache_hits()
        pkg = sys.modules.get(KERNEL_PACKAGE)
        for (_, modname), module in list(_MODULES.items()):
            if sys.modules.get(modname) is module:
                del sys.modules[modname]
            stem = modname.rpartition(".")[2]
            if pkg is not None and getattr(pkg, stem, None) is module:
                delattr(pkg, stem)
        _MODULES.clear()
        _ENTRIES.clear()
        _RECENT.clear()
        with _STATS_LOCK:
            _TRACKED.clear()
        importlib.invalidate_caches()
        for entry in os.scandir(directory):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
