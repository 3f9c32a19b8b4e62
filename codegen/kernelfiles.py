"""The kernel files of the cache directory: their names, digests, format and writes.

A kernel's generated module lives in ``<cache_dir>/<name_hint>_<digest>.py`` where the
digest covers the source text and the versions of everything that affects the generated
code (tracejit, numba, llvmlite, numpy, Python, codegen.vmath). Each file's first line is
``# tracejit-sha256: <hex>``, the sha256 of the rest; files are written atomically (temp
file + ``os.replace``). Writing is where the cache's bound is kept (codegen.cache.keep_bound),
sparing the kernels this process has loaded (`MODULES`, `ENTRIES`).

Also the process's counters (`STATS`), which codegen.build reads out.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import importlib.util
import os
import re
import sys
import tempfile
import threading
import types
import weakref
from pathlib import Path
from typing import Any, Dict, Tuple

from tracer.version import __version__

from . import cache

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

# Protects STATS (and codegen.numbashim's tracked dispatchers); never held while acquiring
# another lock.
_STATS_LOCK = threading.Lock()

# (resolved cache dir, module name) -> module
_MODULES: Dict[Tuple[str, str], types.ModuleType] = {}
# (resolved cache dir, module name) -> the kernel's entry point, however it was loaded,
# while something (a program) references it: a kernel loaded from its object file goes
# with its last user, and its machine code with it (codegen.objload's engine groups).
_ENTRIES: "weakref.WeakValueDictionary[Tuple[str, str], Any]" = weakref.WeakValueDictionary()
#: ... and the last RECENT_KERNELS kernels loaded stay, used or not: a process cycling
#: through a few more shapes than max_traces keeps (it reloaded each kernel from its
#: object file at every retrace, ~4 ms, and its RSS settled 6 MiB higher), while one
#: seeing ever new shapes still keeps a bounded number.
RECENT_KERNELS = 64
_RECENT: "collections.deque" = collections.deque(maxlen=RECENT_KERNELS)



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

    parts = [
        "tracejit=" + __version__,
        "numba=" + _numba_version(),
        "llvmlite=" + llvmlite.__version__,
        "numpy=" + numpy.__version__,
        "python=" + sys.implementation.name + "-" + sys.version,
        # every vmath file: Numba checks only a kernel's own file, not what it calls
        # parallel kernels' loop functions have salted names (codegen.numbashim)
        "parfor-names=salted",
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



def _bump(counter: str, n: int = 1) -> None:
    with _STATS_LOCK:
        STATS[counter] += n



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
    cache.wrote(path.parent)
    _bump("modules_written")
    if data is not None:
        _bump("rebuilds")
    _after_write(path.parent, path.stem)
    return True


# Stems of the kernels a program is compiling ahead (codegen.ahead), set before it forks:
# in use in the program and in each child, so that a child's pruning under a small
# TRACEJIT_CACHE_MAX_BYTES takes older kernels before its sibling's fresh ones (which the
# program would then compile again itself).
COMPILING_AHEAD: set = set()


def _in_use() -> set:
    """Stems of what this process uses: its kernels, those compiled ahead for it, and the
    runtime object its loader loaded or wrote (codegen.objload)."""
    objload = sys.modules.get("codegen.objload")
    runtime = objload.NRT_IN_USE if objload is not None else set()
    return {modname.rpartition(".")[2] for _, modname in list(_MODULES) + list(_ENTRIES)} \
        | COMPILING_AHEAD | runtime


def _after_write(directory: Path, stem: str = "") -> None:
    """The bound (TRACEJIT_CACHE_MAX_BYTES), checked whenever this process writes (`stem`:
    a kernel being loaded, in use too)."""
    try:
        cache.keep_bound(directory, keep=_in_use() | {stem})
    except OSError:  # pragma: no cover - pruning is best effort
        pass


def _names(source: str, name_hint: str):
    """(cache directory or None: in memory, file stem, module name) of a kernel's source."""
    directory = cache.usable_dir()
    stem = f"{_sanitize_hint(name_hint)}_{_source_digest(source)}"
    return directory, stem, f"{KERNEL_PACKAGE}.{stem}"



_LOGGED: set = set()


def _log_once(message: str) -> None:
    if message not in _LOGGED:
        _LOGGED.add(message)
        from tracer import logs

        logs.log("kernels", message)
