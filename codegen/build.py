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
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.machinery
import importlib.util
import linecache
import os
import re
import shutil
import sys
import tempfile
import threading
import types
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

from . import cache, numbacache
from .cache import CACHE_DIR_ENV, CacheDirPermissionError  # noqa: F401 - public here too

__all__ = [
    "CacheDirPermissionError",
    "KERNEL_PACKAGE",
    "STATS",
    "cache_dir",
    "clear_cache",
    "compile_stats",
    "ensure_compiled",
    "load_module",
    "reset_stats",
]

#: Name of the synthetic package under which generated modules are registered.
KERNEL_PACKAGE = "tracejit_kernels"

_HEADER_PREFIX = b"# tracejit-sha256: "
_DIGEST_LEN = 16

#: Process-wide counters.  Use :func:`compile_stats` to read a consistent copy
#: (it also folds in Numba's latest cache-hit counts) and :func:`reset_stats`
#: to zero them.
STATS: Dict[str, int] = {
    "modules_written": 0,   # physical writes of a generated .py file
    "modules_loaded": 0,    # generated modules executed (imported) from disk
    "rebuilds": 0,          # existing files found corrupt and rewritten
    "numba_compiles": 0,    # real Numba compilations of tracejit kernels
    "numba_cache_hits": 0,  # overloads loaded from Numba's on-disk cache
    "objects_written": 0,   # kernels' object files written (objload)
    "objects_loaded": 0,    # kernels loaded from object files, without Numba
}

# Serialises module loading.  May be held while Numba compiles (eager
# signatures run at import), so the compile listener must never take it.
_LOCK = threading.RLock()
# Protects STATS and _TRACKED; never held while acquiring another lock.
_STATS_LOCK = threading.Lock()

# (resolved cache dir, module name) -> module
_MODULES: Dict[Tuple[str, str], types.ModuleType] = {}
# (resolved cache dir, module name) -> the kernel's entry point, however it was loaded
_ENTRIES: Dict[Tuple[str, str], Any] = {}

# [dispatcher, disk-cache hits already folded into STATS]
_TRACKED: List[List[Any]] = []


def cache_dir() -> Path:
    """Return the kernel cache directory, creating it (mode 0700) if needed.

    The location is ``$TRACEJIT_CACHE_DIR`` if set, else
    ``$XDG_CACHE_HOME/tracejit``, else ``~/.cache/tracejit``; the environment
    is read on every call.  Raises :class:`CacheDirPermissionError` (a
    :class:`PermissionError`) if it or its ``__pycache__`` is a symlink, open to
    group/others or not owned by the current user (see codegen.cache).
    """
    return cache.checked_dir()


# --------------------------------------------------------------------------
# hashing / file format
# --------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _version_salt() -> str:
    import llvmlite
    import numpy

    import tracer

    parts = [
        "tracejit=" + tracer.__version__,
        "numba=" + _numba_version(),
        "llvmlite=" + llvmlite.__version__,
        "numpy=" + numpy.__version__,
        "python=" + sys.implementation.name + "-" + sys.version,
        # Numba's cache checks only a kernel's own file, not the functions it calls, so
        # the helper modules kernels import (every vmath file) are part of its identity.
        "vmath=" + ",".join(map(_file_digest, sorted(Path(__file__).parent.glob("vmath/*.py")))),
    ]
    return "\n".join(parts)


def _numba_version() -> str:
    """Numba's version without importing it (0.13-0.19 s) or importlib.metadata (20 ms):
    its _version.py holds it as text."""
    numba = sys.modules.get("numba")
    if numba is not None:
        return numba.__version__
    spec = importlib.util.find_spec("numba")
    path = Path(spec.submodule_search_locations[0]) / "_version.py"
    try:
        found = re.search(r'"version": "([^"]+)"', path.read_text())
    except OSError:
        found = None
    return found.group(1) if found else "file-" + _file_digest(path)


def _file_digest(path) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except OSError:
        return "missing"


def _source_digest(source: str) -> str:
    h = hashlib.sha256()
    h.update(source.encode("utf-8"))
    h.update(b"\0")
    h.update(_version_salt().encode("utf-8"))
    return h.hexdigest()[:_DIGEST_LEN]


def _file_bytes(source: str) -> bytes:
    body = source.encode("utf-8")
    if not body.endswith(b"\n"):
        body += b"\n"
    header = _HEADER_PREFIX + hashlib.sha256(body).hexdigest().encode() + b"\n"
    return header + body


def _file_is_valid(path: Path) -> bool:
    """True if ``path`` is a regular file of ours whose body matches its sha256 header."""
    try:
        data = cache.read_private(path)
    except OSError:
        return False
    header, sep, body = data.partition(b"\n")
    if not sep or not header.startswith(_HEADER_PREFIX):
        return False
    expected = header[len(_HEADER_PREFIX):].strip().decode("ascii", "replace")
    return hashlib.sha256(body).hexdigest() == expected


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-",
                               suffix=".part")  # mode 0600, not importable
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _sanitize_hint(name_hint: str) -> str:
    hint = re.sub(r"\W", "_", str(name_hint), flags=re.ASCII) or "kernel"
    if hint[0].isdigit():
        hint = "k_" + hint
    return hint[:64]


# --------------------------------------------------------------------------
# module loading
# --------------------------------------------------------------------------

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


def _bump(counter: str, n: int = 1) -> None:
    with _STATS_LOCK:
        STATS[counter] += n


def _disk_hits(disp: Any) -> int:
    # Dispatcher.stats.cache_hits: Counter signature -> number of overloads
    # loaded from the on-disk cache by this dispatcher.
    return sum(disp.stats.cache_hits.values())


def _track(disp: Any, baseline: int | None = None) -> None:
    with _STATS_LOCK:
        if any(entry[0] is disp for entry in _TRACKED):
            return
        _TRACKED.append([disp, _disk_hits(disp) if baseline is None
                         else baseline])


def _track_dispatchers(module: types.ModuleType) -> None:
    from numba.core.dispatcher import Dispatcher

    for obj in list(vars(module).values()):
        if isinstance(obj, Dispatcher):
            # Baseline 0: hits during module execution (eager signatures)
            # belong to this load.
            _track(obj, baseline=0)


def _sync_cache_hits() -> None:
    with _STATS_LOCK:
        for entry in _TRACKED:
            disp, seen = entry
            hits = _disk_hits(disp)
            if hits != seen:
                STATS["numba_cache_hits"] += hits - seen
                entry[1] = hits


def _write_source(path: Path, source: str) -> bool:
    """Write a kernel's module file unless it is there intact (a file that is not exactly
    what this source writes, a symlink or not ours is replaced: a rebuild). False when the
    cache cannot take it (a full disk, a read-only file system): the kernel is then
    compiled in memory."""
    expected = _file_bytes(source)
    try:
        data = cache.read_private(path)
    except FileNotFoundError:
        data = None
    except OSError:
        data = b""  # (a symlink, or not ours: replaced, never read)
    if data == expected:
        return True
    try:
        _atomic_write(path, expected)
    except OSError as exc:
        cache.disk_trouble(path.parent, exc)
        return False
    _bump("modules_written")
    if data is not None:
        _bump("rebuilds")
    _after_write(path.parent, path.stem)
    return True


def _in_use() -> set:
    return {modname.rpartition(".")[2] for _, modname in list(_MODULES) + list(_ENTRIES)}


def _after_write(directory: Path, stem: str = "") -> None:
    """The bound (TRACEJIT_CACHE_MAX_BYTES), checked whenever this process writes (`stem`:
    a kernel being loaded, in use too)."""
    try:
        cache.prune(directory, keep=_in_use() | {stem})
    except OSError:  # pragma: no cover - pruning is best effort
        pass


def _names(source: str, name_hint: str):
    """(cache directory or None: in memory, file stem, module name) of a kernel's source."""
    directory = cache.usable_dir()
    stem = f"{_sanitize_hint(name_hint)}_{_source_digest(source)}"
    return directory, stem, f"{KERNEL_PACKAGE}.{stem}"


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


def _disable_jit() -> bool:
    """NUMBA_DISABLE_JIT as Numba will read it (its config file too), without importing
    Numba when it is not imported yet."""
    numba = sys.modules.get("numba")
    if numba is not None:
        return bool(numba.config.DISABLE_JIT)
    value = os.environ.get("NUMBA_DISABLE_JIT", "").strip()
    return (value not in ("", "0")) or os.path.exists(".numba_config.yaml")


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
        _ENTRIES[key] = entry
        return entry, modname, path


def _load_object(directory: Path, stem: str, modname: str, source: str):
    from . import objload

    path = directory / f"{stem}.tjo"
    try:
        entry = objload.load_kernel(path, modname,
                                    objload.nrt_path(directory, _version_salt(),
                                                     _host_magic()))
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


@functools.lru_cache(maxsize=None)
def _host_magic():
    from . import objload

    return objload.host_magic()


_LOGGED: set = set()


def _log_once(message: str) -> None:
    if message not in _LOGGED:
        _LOGGED.add(message)
        from tracer import logs

        logs.log("kernels", message)


# --------------------------------------------------------------------------
# loading a kernel from Numba's disk cache
# --------------------------------------------------------------------------

# TRACEJIT_FAST_CACHE_LOAD=0 turns the direct load off (Numba's own path then loads).
FAST_CACHE_LOAD = os.environ.get("TRACEJIT_FAST_CACHE_LOAD", "").strip() != "0"
_FAST_FAILED: List[str] = []  # why the direct load was given up, once per process


def _numba():
    """Numba, imported (0.13-0.19 s, so only when a kernel needs it), with tracejit's
    default threading layer.

    Parallel kernels run between BLAS calls on the same cores. OpenMP's worker threads
    spin after a parallel region and steal the cores OpenBLAS's threads need next
    (measured on the 256x1024 training step: 1.4x slower than with the workqueue layer);
    the workqueue layer sleeps. A user's NUMBA_THREADING_LAYER still wins.
    """
    global _NUMBA_READY
    if _NUMBA_READY:
        import numba

        return numba
    with setting_up_numba():
        _preload_blas()
        import numba

        if "NUMBA_THREADING_LAYER" not in os.environ:
            numba.config.THREADING_LAYER = "workqueue"
        _NUMBA_READY = True
    return numba


# Numba's set-up in this process - its import (~280 modules), its compiler's registries
# (another ~90, imported at the first compile) and the rest of that first compile - is one
# transaction. Ctrl-C in the middle of an import leaves modules that imported the
# interrupted one holding a half-initialized module object (the import system drops only
# the interrupted module itself from sys.modules), and every later compile in the process
# failed on it ("partially initialized module 'numba.core.types' has no attribute
# 'boolean'"), each kernel falling back to numpy. So until the first kernel has compiled,
# an interrupt (KeyboardInterrupt, SystemExit: not an ordinary exception, which a kernel's
# fallback handles) forgets every module of Numba and its dependencies imported since the
# set-up began, and the next call imports them afresh. Kernels loaded meanwhile keep
# working (their code holds what it needs). Interrupts after the first compile are not
# covered: Numba is set up by then, and what a later compile imports is a small part.
_SETUP_SNAPSHOT = None   # sys.modules' names when the set-up began; None: not begun, or done
_SETUP_DONE = False
# What the set-up imports that holds Numba's objects: Numba, its dependencies (PyYAML: its
# config), and tracejit's vector math (intrinsics made by the Numba of its import)
_SETUP_PACKAGES = ("numba", "llvmlite", "scipy", "yaml", "codegen.vmath")


@contextlib.contextmanager
def setting_up_numba():
    """Around anything that may import Numba or compile with it before the set-up is done
    (see above): an interrupt inside undoes the set-up, then propagates. Nests."""
    global _SETUP_SNAPSHOT
    if _SETUP_DONE:
        yield
        return
    if _SETUP_SNAPSHOT is None:
        _SETUP_SNAPSHOT = frozenset(sys.modules)
    try:
        yield
    except Exception:
        raise
    except BaseException:
        _undo_numba_setup()
        raise


def _undo_numba_setup() -> None:
    global _SETUP_SNAPSHOT, _NUMBA_READY, _LISTENER
    before, _SETUP_SNAPSHOT = _SETUP_SNAPSHOT, None
    if before is None:  # (an enclosing setting_up_numba undid it already)
        return
    for name in [n for n in list(sys.modules) if n not in before]:
        if not any(name == p or name.startswith(p + ".") for p in _SETUP_PACKAGES):
            continue
        module = sys.modules.pop(name, None)
        # ... and from the package kept that holds it as an attribute: a new import of
        # the package's submodule would find the old one there while the new one runs
        parent, _, child = name.rpartition(".")
        if parent in sys.modules and getattr(sys.modules[parent], child, None) is module:
            delattr(sys.modules[parent], child)
    _NUMBA_READY = False
    _LISTENER = None  # (it listened to the forgotten numba.core.event)
    _FAST_FAILED.clear()


def _set_up_done() -> None:
    """The first kernel compiled: Numba is set up for good (see `setting_up_numba`)."""
    global _SETUP_DONE, _SETUP_SNAPSHOT
    _SETUP_DONE, _SETUP_SNAPSHOT = True, None


def _preload_blas() -> None:
    """Load ``scipy.linalg.cython_blas`` on its own, before Numba's compiler set-up asks for it.

    The set-up (``numba.np.arraymath``) imports it to learn whether ``np.dot`` can work,
    which imports the ``scipy.linalg`` package, mostly scipy's array-API layer touching
    numpy's lazy submodules (``numpy.f2py`` alone is 40 ms). Numba needs only the
    extension module, whose function table it reads. Loaded by itself it takes 10 ms, and
    the set-up plus a first small compile went from 0.38-0.42 s to 0.16-0.25 s; a later
    ``import scipy.linalg`` uses this same module.
    Nothing is done when ``scipy.linalg`` is already imported, or when the load fails
    (Numba then imports it as usual).
    """
    if "scipy.linalg" in sys.modules or "scipy.linalg.cython_blas" in sys.modules:
        return
    from . import objload

    try:
        objload.extension_module("scipy.linalg.cython_blas")
    except Exception:  # noqa: BLE001 - no SciPy, or another layout: Numba's own import
        pass


_NUMBA_READY = False


def njit(signature: str, **options):
    """``numba.njit(signature, **options)`` for generated kernels: compile one signature,
    or load it from Numba's disk cache, then refuse other signatures.

    The difference is the cache load. Numba's own (``Dispatcher.compile``) first sets up
    its whole compiler: every typing and lowering registry, about 0.2 s in a new process
    (0.4 s before `_preload_blas`). A cached kernel needs
    none of it, only the runtime it calls into (NRT, and the thread pool for a
    ``parallel=True`` kernel): this loads the entry Numba's cache holds for exactly this
    signature the way Numba does, minus the set-up. When the entry is missing or anything
    about it fails, Numba's own compile (which reads the cache again, or compiles) runs.

    Either way, the kernel's object code is then written next to its source (objload),
    for later processes to load without importing Numba at all.
    """
    numba = _numba()

    if numba.config.DISABLE_JIT:  # NUMBA_DISABLE_JIT=1: the plain Python function
        return numba.njit(signature, **options)

    def wrap(fn):
        with numbacache.interrupts_deferred():
            return _njit_one(numba, fn, signature, dict(options))

    return wrap


def _njit_one(numba, fn, signature: str, opts: dict):
    """One `njit` kernel function: its dispatcher, compiled or loaded (see `njit`)."""
    disp = numbacache.dispatcher(numba, fn, opts)  # (drops "cache" when it cannot be)
    obj = None
    if FAST_CACHE_LOAD and opts.get("cache"):
        obj = _load_cached(disp, signature)
    if obj is None:
        disp = numbacache.compile_healing(numba, fn, disp, signature, opts)
        obj = _compiled_object(disp.overloads[disp.signatures[0]])
        if not _SETUP_DONE:
            _set_up_done()
    if FAST_CACHE_LOAD and opts.get("cache") and obj and fn.__name__ == "kernel":
        # (the module's entry: the functions it calls are linked into its object)
        _write_object(fn, signature, obj, disp.overloads[disp.signatures[0]], opts)
    if opts.get("cache") and fn.__name__ == "kernel":  # (its files are all written now)
        _after_write(Path(fn.__code__.co_filename).parent, fn.__module__.rpartition(".")[2])
    disp.disable_compile()
    return disp


def _compiled_object(cres):
    """The object code of a library Numba has just compiled (None when Numba loaded it
    from its cache: it keeps no copy then)."""
    try:
        return cres.library._get_compiled_object()
    except Exception:  # noqa: BLE001
        return None


def _write_object(fn, signature: str, obj: bytes, cres, options: dict) -> None:
    from . import objload

    try:
        if not objload.servable(cres, options):
            return
        source = Path(fn.__code__.co_filename)
        path = source.with_suffix(objload.SUFFIX)
        if not path.exists():
            objload.write_kernel(path, fn.__module__, signature, obj, cres, _atomic_write)
            _bump("objects_written")
        nrt_file = objload.nrt_path(source.parent, _version_salt(),
                                    cres.library.codegen.magic_tuple())
        if not nrt_file.exists():
            objload.write_nrt(nrt_file, cres.library.codegen, _atomic_write)
    except OSError as exc:  # a full disk, a read-only cache: the kernel works all the same
        cache.disk_trouble(Path(fn.__code__.co_filename).parent, exc)
    except Exception as exc:  # noqa: BLE001 - the kernel works; later loads take Numba's path
        _log_once(f"object file for {fn.__module__} not written ({type(exc).__name__}: "
                  f"{exc})")


def _load_cached(disp, signature: str):
    """Numba's cached overload of `disp` for `signature` (the key Numba saved it under:
    the signature as given to ``compile``), added to `disp`; returns its object code.
    None if there is no entry."""
    try:
        from numba.core.compiler_lock import global_compiler_lock
        from numba.core.runtime import nrt

        with global_compiler_lock:
            cache, ctx = disp._cache, disp.targetctx
            data = cache._cache_file.load(cache._index_key(signature, ctx.codegen()))
            if data is None:
                return None
            # What Numba's set-up would have done that the kernel's code calls into: the
            # reference-counting runtime (buffers a kernel allocates), and for a parallel
            # kernel the thread pool whose entry points its code is linked against.
            nrt.rtsys.initialize(ctx)
            if disp.targetoptions.get("parallel"):
                from numba.np.ufunc.parallel import _launch_threads

                _launch_threads()
            libdata = data[0]  # CompileResult._reduce: (name, 'object', (code, bitcode))
            obj = libdata[2][0] if libdata[1] == "object" else b""
            cres = cache._impl.rebuild(ctx, data)
            ctx.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
            disp.add_overload(cres)
            disp._cache_hits[signature] += 1
            return obj
    except Exception as exc:  # noqa: BLE001 - Numba's own path still loads or compiles
        if not _FAST_FAILED:
            _FAST_FAILED.append(f"{type(exc).__name__}: {exc}")
            _log_once(f"direct cache load failed ({_FAST_FAILED[0]}); Numba's own load "
                      f"serves")
        return None


# --------------------------------------------------------------------------
# compile accounting
# --------------------------------------------------------------------------

_LISTENER = None


def _is_kernel_dispatcher(disp: Any) -> bool:
    func = getattr(disp, "py_func", None)
    mod = getattr(func, "__module__", None) or ""
    return mod.startswith(KERNEL_PACKAGE + ".")


def _install_compile_listener() -> None:
    global _LISTENER
    if _LISTENER is not None:
        return
    with _LOCK:
        if _LISTENER is not None:
            return
        _numba()  # (its set-up first: the event module imports Numba)
        from numba.core import event

        class _CompileCounter(event.Listener):
            # "numba:compile" is triggered by Dispatcher.compile only after
            # the disk cache lookup failed, i.e. for real compilations.
            def on_start(self, ev):
                pass

            def on_end(self, ev):
                data = ev.data or {}
                if _is_kernel_dispatcher(data.get("dispatcher")):
                    _bump("numba_compiles")

        listener = _CompileCounter()
        event.register("numba:compile", listener)
        _LISTENER = listener


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
        with _STATS_LOCK:
            _TRACKED.clear()
        importlib.invalidate_caches()
        for entry in os.scandir(directory):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
