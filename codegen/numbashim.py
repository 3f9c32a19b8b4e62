"""Everything that depends on Numba's internals, in one place.

Numba is imported only when a kernel must be compiled or loaded through it (0.13-0.19 s);
kernels cached as object files load without it (codegen.objload). This module

* imports Numba with tracejit's threading layer, after loading the one BLAS extension
  module its compiler's set-up asks for (`_numba`, `_preload_blas`), and undoes a set-up
  interrupted by Ctrl-C (`setting_up_numba`);
* provides the ``njit`` the generated kernel modules use (``from codegen.build import
  njit``): one signature, loaded straight from Numba's disk cache when it holds it
  (`_load_cached`: Numba's cache index and its compile results' private fields), its
  object code then written for objload;
* counts Numba's real compiles (a listener on its ``"numba:compile"`` event) and its disk
  cache hits (each dispatcher's ``stats.cache_hits``).

Process-wide effects, each behind a switch of tracer.settings: the threading layer
(TRACEJIT_THREADING_LAYER) and the BLAS preload with its sys.meta_path finder
(TRACEJIT_PRELOAD_BLAS).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import types
from pathlib import Path
from typing import Any, List

from tracer import settings

from . import cache, numbacache
from .kernelfiles import (KERNEL_PACKAGE, STATS, _STATS_LOCK, _after_write, _atomic_write,
                          _bump, _log_once, _version_salt)

# [dispatcher, disk-cache hits already folded into STATS]
_TRACKED: List[List[Any]] = []
# Installs the compile listener once. (Not codegen.build's loading lock: that one may be
# held while Numba compiles, and the listener must never wait for it.)
_LISTENER_LOCK = threading.RLock()


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



def _disable_jit() -> bool:
    """NUMBA_DISABLE_JIT as Numba will read it (its config file too), without importing
    Numba when it is not imported yet."""
    numba = sys.modules.get("numba")
    if numba is not None:
        return bool(numba.config.DISABLE_JIT)
    value = settings.read("NUMBA_DISABLE_JIT")
    return (value not in ("", "0")) or os.path.exists(".numba_config.yaml")



@functools.lru_cache(maxsize=None)
def _host_magic():
    from . import objload

    return objload.host_magic()



# --------------------------------------------------------------------------
# loading a kernel from Numba's disk cache
# --------------------------------------------------------------------------

# TRACEJIT_FAST_CACHE_LOAD=0 turns the direct load off (Numba's own path then loads).
FAST_CACHE_LOAD = settings.FAST_CACHE_LOAD  # (a Flag: each truth test reads the environment)
_FAST_FAILED: List[str] = []  # why the direct load was given up, once per process


def _numba():
    """Numba, imported (0.13-0.19 s, so only when a kernel needs it), with tracejit's
    default threading layer.

    Parallel kernels run between BLAS calls on the same cores. OpenMP's worker threads
    spin after a parallel region and steal the cores OpenBLAS's threads need next
    (measured on the 256x1024 training step: 1.4x slower than with the workqueue layer);
    the workqueue layer sleeps. A user's NUMBA_THREADING_LAYER (or numba.config
    .THREADING_LAYER set by their code before) still wins, and
    TRACEJIT_THREADING_LAYER names another layer, or with 0 leaves Numba's own choice.
    """
    global _NUMBA_READY
    if _NUMBA_READY:
        import numba

        return numba
    with setting_up_numba():
        _preload_blas()
        import numba

        layer = settings.threading_layer()  # (None: the user's, or TRACEJIT_THREADING_LAYER=0)
        # ... and a layer the user's code chose (numba.config.THREADING_LAYER = "omp" after
        # importing Numba, or .numba_config.yaml) is theirs too: it was overwritten, and
        # their parallel functions then ran on a layer they had ruled out
        if layer is not None and numba.config.THREADING_LAYER == "default":
            numba.config.THREADING_LAYER = layer
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
# What the set-up imports that holds Numba's objects: Numba, its dependencies, and
# tracejit's vector math (intrinsics made by the Numba of its import)
_SETUP_PACKAGES = ("numba", "llvmlite", "scipy", "yaml", "codegen.vmath")
# ... and every package the set-up imported first (Numba's own dependencies: a SIGINT
# inside `import yaml`, which numba.core.config imports, left yaml's submodules behind and
# the next `import yaml` failed on them), except tracejit's own modules
_OURS = ("eager", "tracer", "codegen", "tracejit_kernels")


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
        top = name.partition(".")[0]
        first_imported = top not in before and top not in _OURS
        if not first_imported and not any(name == p or name.startswith(p + ".")
                                          for p in _SETUP_PACKAGES):
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
    if not settings.PRELOAD_BLAS:  # TRACEJIT_PRELOAD_BLAS=0
        return
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
        with _unique_parfor_names(opts.get("parallel")):
            disp = numbacache.compile_healing(numba, fn, disp, signature, opts)
        obj = _compiled_object(disp.overloads[disp.signatures[0]])
        if not _SETUP_DONE:
            _set_up_done()
    if FAST_CACHE_LOAD and opts.get("cache") and obj and fn.__name__ == "kernel":
        # (the module's entry: the functions it calls are linked into its object)
        _write_object(fn, signature, obj, disp.overloads[disp.signatures[0]], opts)
    if opts.get("cache") and fn.__name__ == "kernel":
        # Used: pruning takes it last (a kernel without an object file, parallel=True's,
        # is marked only here; one with an object file is marked again when that loads).
        _touch_index(disp)
    if opts.get("cache") and fn.__name__ == "kernel":  # (its files are all written now)
        _after_write(Path(fn.__code__.co_filename).parent, fn.__module__.rpartition(".")[2])
    disp.disable_compile()
    return disp


# Numba names the function that runs a kernel's parallel loop `__numba_parfor_gufunc_` +
# hex(hash(parfor)), in one module `<dynamic>` shared by every kernel, and a Parfor's hash
# is its address. Two kernels compiled in different processes, or one after another in one
# process with the address reused, could so define the same symbol; loaded from the cache
# into one process, the second kernel's call resolved to the first one's loop function,
# which ran the first kernel's loop (its sizes, its operations): wrong numbers, no error
# (seen in a test session: a [2, 65] kernel ran a [2, 63] kernel's loop). Every parallel
# compile now mixes a fresh random salt into the Parfor hash, under Numba's compiler lock
# (so a hash is stable within one compile); `_version_salt` names the change, so kernel
# files from before it are not loaded.
_PARFOR_SALT = [0]
_PARFOR_HASH = []  # [Numba's own Parfor.__hash__], once installed


def _salted_parfor_hash(parfor) -> int:
    return _PARFOR_HASH[0](parfor) ^ _PARFOR_SALT[0]


@contextlib.contextmanager
def _unique_parfor_names(parallel):
    if not parallel:
        yield
        return
    from numba.core.compiler_lock import global_compiler_lock
    from numba.parfors.parfor import Parfor

    with global_compiler_lock:
        if Parfor.__hash__ is not _salted_parfor_hash:
            _PARFOR_HASH[:] = [Parfor.__hash__]
            Parfor.__hash__ = _salted_parfor_hash
        _PARFOR_SALT[0] = int.from_bytes(os.urandom(6), "little") << 8
        yield


def _touch_index(disp) -> None:
    try:
        path = disp._cache._cache_file._index_path
    except AttributeError:  # (no disk cache: nothing to mark)
        return
    cache.touch(path)


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
        why = objload.refusal()
        if why:
            _log_once(f"kernels cannot be loaded from object files here ({why})")  # (as build)
            return
        if not objload.servable(cres, options) or _host_magic() is None:
            return  # (compiled for another target than the host: objload loads none such)
        source = Path(fn.__code__.co_filename)
        path = source.with_suffix(objload.SUFFIX)
        if not path.exists():
            objload.write_kernel(path, fn.__module__, signature, obj, cres, _atomic_write)
            _bump("objects_written")
        nrt_file = objload.nrt_path(source.parent, _version_salt(),
                                    cres.library.codegen.magic_tuple())
        if not nrt_file.exists():
            objload.write_nrt(nrt_file, cres.library.codegen, _atomic_write)
    except objload.CacheBusy as exc:  # (another process stopped mid-write: not the disk)
        _log_once(f"object file for {fn.__module__} not written ({exc})")
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
    with _LISTENER_LOCK:
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

