"""Cached kernels loaded as machine code, without importing Numba.

A kernel Numba has compiled is machine code in an object file, plus a few facts about it:
the name of its CPython-callable wrapper, the name of the global that points at its
environment, and the C functions it calls (Numba's runtime helpers and the C API). This
module keeps those in the cache directory next to the kernel's source, as
``<stem>.tjo``, and in a later process loads the object into an LLVM MCJIT engine through
llvmlite and wraps it into a callable with Numba's own C helper ``_dynfunc.make_function``,
exactly as Numba does when it loads its cache. The only parts of Numba this needs are its
three C extension modules (its helper library, its reference-counting runtime, and
``_dynfunc``), which load in about a millisecond; importing Numba itself takes 0.13–0.19 s
here, more than half of what a warm first call may cost.

File format, never unpickled: line 1 is ``# tracejit-object-sha256: <hex>`` over the rest,
line 2 a JSON header, then the object file's bytes. The header names the module the object
belongs to, the symbols the object needs from elsewhere, and the target it was compiled for
(triple, CPU name, CPU features: Numba's own cache key). Next to it, ``<stem>.sum`` holds
the sha256 of the file as written; the file is read only as a regular file of the user's
(no symlink) matching that digest, then elfcheck checks every ELF structure LLVM's loader
reads and recomputes the symbols the object needs (LLVM aborts the process on a malformed
object: no exception to catch). A file whose digest, hash, target or
symbols do not check out is not loaded, and the caller takes Numba's path instead, which
writes the file afresh. Only objects the loader can serve are written: no ``parallel=True``
kernels (they need Numba's thread pool), and none whose environment holds constants or
that refers to other environments.

The object code of Numba's reference-counting runtime (atomic increments, ``NRT_decref``,
which Numba compiles from LLVM IR in every process) is stored once per cache directory and
target as ``nrt-<digest>.tjo``, in the same format, and pruned as a kernel is (least
recently loaded first; a process that finds it gone takes Numba's path for its first
kernel, which writes it again).

Private interfaces used: ``_helperlib.c_helpers``, ``_nrt_python.c_helpers``,
``_dynfunc.make_function`` and ``_dynfunc.Environment`` (C extension modules, stable since
about Numba 0.50), and, when writing, a compile result's ``library._get_compiled_object()``,
``fndesc`` names and ``environment``. Tested against Numba 0.68.1 / llvmlite 0.50: with
any Numba outside `TESTED_NUMBA` (pyproject.toml's range) objects are neither written nor
loaded, and Numba's own cache serves (one log line under TRACER_LOGS=kernels).
"""
from __future__ import annotations

import builtins
import contextlib
import ctypes
import glob
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import threading
import time
import types
import weakref
from pathlib import Path

from tracer import settings

from . import cache, elfcheck, kernelfiles
from .elfcheck import ObjectFileError

try:
    import fcntl
except ImportError:  # (not on POSIX: objects are not loaded there anyway)
    fcntl = None

FORMAT = 1
_HEADER_PREFIX = b"# tracejit-object-sha256: "
SUFFIX = ".tjo"
#: Next to each object file, the sha256 of its bytes as written (see `read_checked`).
DIGEST_SUFFIX = ".sum"

_LOCK = threading.RLock()
# Held while this process has a pair's directory locked (_pair_locked): a fork meanwhile
# would leave the child that lock for its lifetime (codegen.forksafe holds this across).
_PAIR_LOCK = threading.Lock()
_ENGINE = None
_UNAVAILABLE: list = []   # why this process cannot load objects (once, for the log)
#: Stems of the runtime objects (``nrt-*``) this process loaded or wrote: in use, so the
#: cache's pruning takes them last (codegen.kernelfiles._in_use). Pruned like kernels
#: otherwise: one is written per Numba, llvmlite and CPU target, and those of versions
#: no longer used went nowhere before.
NRT_IN_USE: set = set()

#: The Numba versions this loader was tested with, [first, past): pyproject.toml allows
#: exactly these (tests/codegen/test_objload.py checks that the two agree).
TESTED_NUMBA = ((0, 68, 1), (0, 69))
# Numba's version as text, without importing Numba (tests replace it)
numba_version = kernelfiles._numba_version


def _version_tuple(text: str) -> tuple:
    parts = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def refusal() -> str:
    """Why this loader refuses to write or load object files with the installed Numba
    ('' when it was tested with it)."""
    version = numba_version()
    first, past = TESTED_NUMBA
    if first <= _version_tuple(version) < past:
        return ""
    return (f"Numba {version} is not a version the object loader was tested with "
            f"(>={'.'.join(map(str, first))},<{'.'.join(map(str, past))}); Numba's own "
            f"cache serves")


def elf_symbols(obj: bytes):
    """(defined, undefined) global symbol names of a 64-bit little-endian ELF object, every
    structure LLVM reads checked first (elfcheck). Weak undefined symbols (allowed to stay
    unresolved) are not listed."""
    return elfcheck.check(obj)


# --------------------------------------------------------------------------
# file format
# --------------------------------------------------------------------------

def _pack(header: dict, obj: bytes) -> bytes:
    body = json.dumps(header, sort_keys=True).encode() + b"\n" + obj
    return _HEADER_PREFIX + hashlib.sha256(body).hexdigest().encode() + b"\n" + body


def _unpack(data: bytes):
    first, sep, body = data.partition(b"\n")
    if not sep or not first.startswith(_HEADER_PREFIX):
        raise ObjectFileError("no tracejit-object header")
    if hashlib.sha256(body).hexdigest() != first[len(_HEADER_PREFIX):].decode("ascii",
                                                                             "replace"):
        raise ObjectFileError("content does not match its sha256 (truncated or edited)")
    header, sep, obj = body.partition(b"\n")
    header = json.loads(header)
    if header.get("format") != FORMAT or len(obj) != header.get("size"):
        raise ObjectFileError("unknown format or wrong size")
    return header, obj


#: How long a read or write of an object file waits for the directory's lock, which
#: another process holds only while it writes a pair (two small files). A process stopped
#: there (SIGSTOP, a debugger, a frozen cgroup) held every other process sharing the
#: cache at its next object load or write, for as long as it stayed stopped: the read
#: now gives up (Numba's path serves the kernel), and so does the write (the kernel
#: works without its object file).
PAIR_LOCK_SECONDS = 10.0


class CacheBusy(OSError):
    """The cache directory's object-file lock stayed held by another process past
    PAIR_LOCK_SECONDS (nothing is wrong with the files)."""


def _flock(fd: int, kind: int, directory: Path) -> None:
    deadline, delay = time.monotonic() + PAIR_LOCK_SECONDS, 0.001
    while True:
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise CacheBusy(f"the object files' lock on {directory} stayed held by "
                                f"another process for {PAIR_LOCK_SECONDS:g} s") from None
            time.sleep(delay)
            delay = min(2 * delay, 0.05)
        except OSError:  # (a file system without locks: as before)
            return


@contextlib.contextmanager
def _pair_locked(directory: Path, exclusive: bool):
    """Around the write (exclusive) or read (shared) of an object file and its digest: a
    lock on their directory, across processes. Two processes writing the same kernel's
    pair (different bytes: Numba's symbol names count the compiles before) interleaved
    their four writes and left an object with the other's digest, refused by every later
    process. (The kernel releases the lock of a process killed meanwhile.)"""
    with _PAIR_LOCK:
        try:
            fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError:  # (no directory: the write or read fails as it would have)
            fd = None
        try:
            if fd is not None and fcntl is not None:
                _flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, directory)
            yield
        finally:
            if fd is not None:
                os.close(fd)


def _write_checked(path: Path, data: bytes, write) -> None:
    """Write an object file and, first, the digest it must match to be loaded."""
    with _pair_locked(path.parent, exclusive=True):
        write(path.with_suffix(DIGEST_SUFFIX),
              hashlib.sha256(data).hexdigest().encode() + b"\n")
        write(path, data)


def read_checked(path: Path) -> bytes:
    """An object file's bytes: a regular file of this user's, not through a symlink, that
    matches the digest recorded when it was written (so an object that does not belong
    there is refused whatever its own sha256 line says). FileNotFoundError if absent."""
    with _pair_locked(path.parent, exclusive=False):
        data = cache.read_private(path)
        try:
            recorded = cache.read_private(path.with_suffix(DIGEST_SUFFIX)).strip()
        except FileNotFoundError:
            raise ObjectFileError("no digest recorded for it") from None
    if hashlib.sha256(data).hexdigest().encode() != recorded:
        raise ObjectFileError("does not match the digest recorded when it was written")
    return data


def nrt_path(directory: Path, salt: str, magic) -> Path:
    h = hashlib.sha256((salt + "\0" + json.dumps(list(magic))).encode()).hexdigest()[:16]
    return directory / f"nrt-{h}{SUFFIX}"


# --------------------------------------------------------------------------
# writing (in a process that has Numba: after a kernel was compiled or loaded by it)
# --------------------------------------------------------------------------

def _environments(cres) -> list:
    """The environments the library's code points at: its own and those of the functions
    linked into it (vmath's)."""
    envs = cres.referenced_envs
    if envs is None:  # known only once Numba has reduced the result for its cache
        envs = cres._find_referenced_environments()
    return [cres.environment] + [e for e in envs if e is not cres.environment]


def servable(cres, options: dict) -> bool:
    """Whether this loader can serve a compile result as Numba would: no thread pool to
    start, nothing to re-run at load, and environments without constants (so an empty
    environment of the same module is what the code finds)."""
    return (not refusal() and not options.get("parallel") and not cres.reload_init
            and sys.platform.startswith("linux")
            and not any(list(env.consts) for env in _environments(cres)))


def write_kernel(path: Path, module: str, signature: str, obj: bytes, cres,
                 write) -> None:
    """Write `<stem>.tjo` for the overload `cres` whose object code is `obj`; `write` is
    the atomic writer of codegen.kernelfiles."""
    fndesc = cres.fndesc
    defined, undefined = elf_symbols(obj)
    envs = {env.env_name: env.globals.get("__name__", "")
            for env in _environments(cres) if env.env_name in defined}
    if fndesc.env_name not in envs:
        raise ObjectFileError("the kernel's environment is not in its object")
    header = {
        "format": FORMAT, "module": module, "signature": signature,
        "wrapper": fndesc.llvm_cpython_wrapper_name, "env": fndesc.env_name,
        "envs": envs, "qualname": fndesc.qualname,
        "magic": list(cres.library.codegen.magic_tuple()),
        "undefined": undefined, "size": len(obj),
    }
    _write_checked(path, _pack(header, obj), write)


def write_nrt(path: Path, codegen, write) -> None:
    """Write the object code of Numba's runtime library (compiled in this process) from
    its LLVM IR, with the JIT's own target machine."""
    import llvmlite.binding as ll
    from numba.core.runtime import nrt

    module = ll.parse_assembly(nrt.rtsys.library.get_llvm_str())
    obj = codegen._tm.emit_object(module)
    _defined, undefined = elf_symbols(obj)
    header = {"format": FORMAT, "module": "nrt", "magic": list(codegen.magic_tuple()),
              "undefined": undefined, "size": len(obj)}
    NRT_IN_USE.add(path.stem)
    _write_checked(path, _pack(header, obj), write)


# --------------------------------------------------------------------------
# loading (no Numba import)
# --------------------------------------------------------------------------

def extension_module(name: str):
    """The C extension module `name` (``package.sub.module``), without running the
    ``__init__`` of the packages around it: the one already imported, or loaded from its
    file and registered under its own name (so a later import of it through its package
    uses this same module, with its one copy of the C state). Raises ImportError when
    there is no such file."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    top, _, rest = name.partition(".")
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"{top} is not installed")
    stem = os.path.join(spec.submodule_search_locations[0], *rest.split("."))
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if os.path.exists(stem + suffix):
            path = stem + suffix
            break
    else:
        found = glob.glob(stem + ".*.so")
        if not found:
            raise ImportError(f"no extension module file for {name} ({stem}.*)")
        path = found[0]
    ext_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(ext_spec)
    sys.modules[name] = module
    try:
        ext_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    _ParentAttributes.expect(name)
    return module


class _ParentAttributes:
    """Once a package is imported after `extension_module` loaded one of its extension
    modules, make that module an attribute of the package, as an import of it through
    the package would have: ``numba._helperlib`` works as usual. A finder on
    sys.meta_path that finds nothing: it looks at every later import until it is done."""

    _pending: dict = {}   # package name -> [attribute names]

    @classmethod
    def expect(cls, name: str) -> None:
        package, _, attribute = name.rpartition(".")
        cls._pending.setdefault(package, []).append(attribute)
        if cls not in sys.meta_path:
            sys.meta_path.insert(0, cls)

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        for package in [p for p in cls._pending if p in sys.modules]:
            for attribute in cls._pending.pop(package):
                setattr(sys.modules[package], attribute, sys.modules[f"{package}.{attribute}"])
        if not cls._pending and cls in sys.meta_path:
            sys.meta_path.remove(cls)
        return None


def host_magic():
    """(triple, CPU name, CPU features) of this process, as Numba's JIT computes them
    without configuration; None when Numba is configured to target something else."""
    import llvmlite.binding as ll

    if any(settings.read(v) for v in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES",
                                      "NUMBA_ENABLE_AVX")):
        return None
    return (ll.get_process_triple(), ll.get_host_cpu_name(),
            ll.get_host_cpu_features().flatten())


#: Kernels loaded into one LLVM engine. An engine's memory (code, data, relocations: ~70
#: KiB for a small kernel) is returned only with the whole engine, once no kernel loaded
#: into it is referenced (each kernel's callable holds its engine). One engine for every
#: kernel of the process kept all of them for its life: a long-lived process whose traces
#: `max_traces` evicts grew by every kernel it ever loaded (+100 KiB per new input shape of
#: benchmarks.retrace_memory, for good). An engine of its own per kernel costs a target
#: machine and Numba's runtime object each (+2-3 ms a kernel on a busy machine); groups of
#: this many share them, and a kernel still in use keeps at most its group's memory.
GROUP_KERNELS = 16


class _Engine:
    """What loading kernels from object files needs once per process: the symbols Numba
    adds to LLVM's table, the target, Numba's runtime object; and the engine kernels are
    being loaded into now (`group`)."""

    def __init__(self, nrt_header: dict, nrt_obj: bytes):
        import llvmlite.binding as ll

        self.ll = ll
        ll.initialize_native_target()
        ll.initialize_native_asmprinter()
        helperlib = extension_module("numba._helperlib")
        self.dynfunc = extension_module("numba._dynfunc")
        nrt = extension_module("numba.core.runtime._nrt_python")
        nrt.memsys_use_cpython_allocator()  # what numba.core.runtime.nrt does at import
        # The symbols Numba adds to LLVM's table (numba.core.base._load_global_helpers,
        # numba.core.externals, numba.core.runtime.nrt), with the same values.
        symbols = {"_Py_NoneStruct": id(None)}
        for module in (helperlib, self.dynfunc):
            for name, address in module.c_helpers.items():
                symbols["numba_" + name] = address
        for name in _C_MATH:
            symbols[name] = helperlib.c_helpers[name]
        for name, address in nrt.c_helpers.items():
            symbols[name if name.startswith("_") else "NRT_" + name] = address
        for obj in vars(builtins).values():
            if isinstance(obj, type) and issubclass(obj, BaseException):
                symbols["PyExc_" + obj.__name__] = id(obj)
        for name, address in symbols.items():
            ll.add_symbol(name, address)
        self.magic = host_magic()
        if self.magic is None:
            raise ObjectFileError("Numba is configured for another target "
                                  "(NUMBA_CPU_NAME, NUMBA_CPU_FEATURES or NUMBA_ENABLE_AVX)")
        triple, cpu, features = self.magic
        arch = ll.Target.from_triple(triple).name
        self.reloc = "static" if arch.startswith("x86") else "pic" if arch.startswith(
            "ppc") else "default"
        self.nrt = (nrt_header, nrt_obj)
        self._group = None
        self.group()  # (Numba's runtime object, checked by loading it)

    def group(self) -> "_Group":
        """The engine the next kernel is loaded into (a new one every GROUP_KERNELS)."""
        if self._group is None or self._group.count >= GROUP_KERNELS:
            self._group = _Group(self)
        return self._group


_GROUPS = weakref.WeakSet()  # every live _Group (live_engines)


def live_engines() -> int:
    """How many LLVM engines of loaded kernels this process holds now."""
    return len(_GROUPS)


class _Group:
    """One MCJIT engine holding Numba's runtime object and up to GROUP_KERNELS kernels;
    released (its memory returned to LLVM) once none of its kernels is referenced."""

    def __init__(self, runtime: _Engine):
        ll = self.ll = runtime.ll
        triple, cpu, features = self.magic = runtime.magic
        tm = ll.Target.from_triple(triple).create_target_machine(  # (each engine owns one)
            cpu=cpu, features=features, reloc=runtime.reloc, codemodel="jitdefault",
            jit=True)
        empty = ll.parse_assembly("")
        empty.triple = triple
        self.ee = ll.create_mcjit_compiler(empty, tm)
        self.defined: set = set()
        self.count = 0
        self.add(*runtime.nrt)
        _GROUPS.add(self)

    def add(self, header: dict, obj: bytes) -> None:
        if list(header.get("magic", ())) != list(self.magic):
            raise ObjectFileError("compiled for another target")
        # (from the object itself, every structure checked: not from its header)
        defined, undefined = elf_symbols(obj)
        missing = [s for s in undefined
                   if s not in self.defined and not self.ll.address_of_symbol(s)]
        if missing:
            raise ObjectFileError(f"needs symbols this process lacks: {missing[:5]}")
        self.ee.add_object_file(self.ll.ObjectFileRef.from_data(obj))
        self.ee.finalize_object()
        self.defined.update(defined)


# The C math functions Numba binds to its helper library's copies (intrinsics.INTR_MATH).
_C_MATH = [name + suffix for suffix in ("", "f") for name in """acos acosh asin asinh atan
atan2 atanh ceil cos cosh exp expm1 fabs floor fmod log log10 log1p pow round sin sinh sqrt
tan tanh trunc""".split()]


def _engine(nrt_file: Path):
    global _ENGINE
    if _ENGINE is None:
        if _UNAVAILABLE:
            return None
        try:
            engine = _Engine(*_unpack(read_checked(nrt_file)))
        except CacheBusy:  # (not for good: the next kernel tries again)
            return None
        except Exception as exc:  # noqa: BLE001 - Numba's path serves instead
            _UNAVAILABLE.append(f"{type(exc).__name__}: {exc}")
            if isinstance(exc, ObjectFileError):  # (Numba's path writes it again)
                for stale in (nrt_file, nrt_file.with_suffix(DIGEST_SUFFIX)):
                    try:
                        stale.unlink()
                    except OSError:
                        pass
            return None
        _ENGINE = engine
        NRT_IN_USE.add(nrt_file.stem)
        cache.touch(nrt_file)  # (used: pruned last)
    return _ENGINE


# wrapper symbol -> the callable of a kernel loaded (while something references it)
_LOADED = weakref.WeakValueDictionary()


def unavailable() -> str:
    """Why objects cannot be loaded in this process ('' if they can, or were not tried)."""
    return refusal() or (_UNAVAILABLE[0] if _UNAVAILABLE else "")


def load_kernel(path: Path, module: str, nrt_file: Path):
    """The kernel in object file `path`, as the callable Numba's compile result would
    hold as its entry point, or None when there is no usable file (the reason is raised
    as ObjectFileError when the file exists but must not be loaded)."""
    with _LOCK:
        if refusal():  # (unavailable() says why)
            return None
        try:
            data = read_checked(path)
        except FileNotFoundError:
            return None
        if not nrt_file.exists():
            return None
        engine = _engine(nrt_file)
        if engine is None:
            return None
        header, obj = _unpack(data)
        if header.get("module") != module or header.get("qualname") != "kernel":
            raise ObjectFileError(f"holds {header.get('module')}.{header.get('qualname')}, "
                                  f"not {module}.kernel")
        wrapper = header["wrapper"]
        fn = _LOADED.get(wrapper)
        if fn is not None:
            return fn
        group = engine.group()
        group.add(header, obj)
        group.count += 1
        ee = group.ee
        address = ee.get_function_address(wrapper)
        if not address:
            raise ObjectFileError("the object lacks its wrapper")
        # What Numba's CompileResult._rebuild does with its environments: point each
        # environment global at an Environment of that module. They hold no constants
        # (servable), so one with the module's name for globals serves as Numba's.
        stub = types.ModuleType(module)
        env, envs = None, []
        for name, env_module in header["envs"].items():
            env_address = ee.get_global_value_address(name)
            if not env_address:
                raise ObjectFileError(f"the object lacks environment {name}")
            e = engine.dynfunc.Environment(stub.__dict__ if name == header["env"]
                                           else {"__name__": env_module})
            ctypes.c_void_p.from_address(env_address).value = id(e)
            envs.append(e)
            if name == header["env"]:
                env = e
        if env is None:
            raise ObjectFileError("the object lacks its own environment")
        # (the callable keeps its engine, its environments and its module alive: they go
        # with the last reference to it)
        fn = engine.dynfunc.make_function(
            stub, header["qualname"].split(".")[-1],
            f"compiled wrapper for {header['qualname']!r} (loaded from {path.name})",
            address, env, (group, stub, *envs))
        _LOADED[wrapper] = fn
        return fn
