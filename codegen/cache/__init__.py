"""The kernel cache directory: where it is, the checks made before anything in it is used,
its bound, and the ``python -m codegen.cache`` command.

The cache holds code this process imports (generated modules), machine code it loads
(``.tjo`` object files) and pickles Numba unpickles (``__pycache__/*.nbi``, ``*.nbc``), so
it is private by construction and checked before use:

* the directory and ``__pycache__`` under it are created mode 0700 whatever the umask, and
  on every process's first use both must be real directories (not symlinks), owned by the
  effective user, with no access for group or others. A directory that fails is refused
  once, with what is wrong and the fix (:class:`CacheWarning`), and kernels are compiled
  in memory instead: full speed, no disk cache;
* files are read without following symlinks (``O_NOFOLLOW``) and only when they are
  regular files owned by the user; Numba's files of a kernel are checked the same way
  before Numba is let near them, and any that fail are deleted.

Bounded: when a process writes to the cache and the total passes
``TRACEJIT_CACHE_MAX_BYTES`` (default 2 GiB), the least recently used kernels are deleted
whole (source, object file, digest, Numba's files). Temporary files older than an hour
(``.tmp-*.part``, Numba's ``*.tmp.*``) are removed at the same time and on first use.

    python -m codegen.cache           # directory, size, kernels, hit and compile counts
    python -m codegen.cache prune     # prune to TRACEJIT_CACHE_MAX_BYTES now
    python -m codegen.cache clear     # delete everything
"""
from __future__ import annotations

import atexit
import errno
import json
import logging
import os
import stat
import threading
import time
import warnings
from pathlib import Path

from tracer import settings

CACHE_DIR_ENV = settings.CACHE_DIR.name
MAX_BYTES_ENV = settings.CACHE_MAX_BYTES.name
DEFAULT_MAX_BYTES = int(settings.CACHE_MAX_BYTES.default)
STALE_TEMP_SECONDS = 3600.0
PYCACHE = "__pycache__"
STATS_FILE = "stats.json"

log = logging.getLogger("tracer.cache")

_LOCK = threading.RLock()
_CHECKED: dict = {}        # resolved path -> None (usable) or the refusal's message
_SCRUBBED: set = set()     # directories whose Numba files were checked this process


class CacheDirPermissionError(PermissionError):
    """The kernel cache directory is not private to the current user."""


class CacheWarning(RuntimeWarning):
    """The kernel cache cannot be used; kernels are compiled in memory (said once)."""


class UntrustedFileError(OSError):
    """A cache file that must not be read: a symlink, not a regular file, or not ours."""


# --------------------------------------------------------------------------
# the directory and its checks
# --------------------------------------------------------------------------

def dir_path() -> Path:
    """``$TRACEJIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/tracejit``, else
    ``~/.cache/tracejit`` (read on every call)."""
    env = settings.CACHE_DIR.raw()
    if env:
        return Path(env).expanduser().absolute()
    xdg = settings.read("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return (base / "tracejit").absolute()


def _make_private(path: Path) -> None:
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        return
    os.chmod(path, 0o700)  # (mkdir's mode is subject to the umask)


def _problems(path: Path) -> list:
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return ["it is a symlink"]
    if not stat.S_ISDIR(st.st_mode):
        return ["it is not a directory"]
    if not hasattr(os, "geteuid"):  # pragma: no cover - non-POSIX
        return []
    out, mode, uid = [], stat.S_IMODE(st.st_mode), os.geteuid()
    if mode & 0o077:
        what = "writable" if mode & 0o022 else "readable" if mode & 0o044 else "open"
        out.append(f"it is {what} by group or others (mode {mode:#o})")
    if st.st_uid != uid:
        out.append(f"it is owned by uid {st.st_uid}, not by the current user (uid {uid})")
    return out


def _own_group(gid: int) -> bool:
    """Whether group `gid` is the user's own (a user private group: the effective group,
    naming no other member), so that its write permission lets nobody else in."""
    if gid != os.getegid():
        return False
    try:
        import grp
        import pwd

        me = pwd.getpwuid(os.geteuid()).pw_name
        return all(member == me for member in grp.getgrgid(gid).gr_mem)
    except (ImportError, KeyError):
        return False


def _ancestor_problems(path: Path) -> list:
    """Who else could replace the cache directory once it is checked (each process checks
    it once, then uses it by name; Numba's pickles in a replaced one would be read): an
    ancestor directory owned by another user than root, or writable by others (or by a
    group not the user's own) without the sticky bit, which keeps each entry to its owner
    (as /tmp has)."""
    if not hasattr(os, "geteuid"):  # pragma: no cover - non-POSIX
        return []
    uid, out, seen = os.geteuid(), [], set()
    for start in (path.absolute().parent, Path(os.path.realpath(path.parent))):
        for d in (start, *start.parents):
            if d in seen:
                continue
            seen.add(d)
            try:
                st = os.stat(d)
            except OSError:
                continue
            mode = stat.S_IMODE(st.st_mode)
            sticky = bool(mode & stat.S_ISVTX)
            if st.st_uid not in (0, uid):
                out.append(f"its parent directory {str(d)!r} is owned by uid {st.st_uid}")
            elif mode & 0o002 and not sticky:
                out.append(f"its parent directory {str(d)!r} is writable by others without "
                           f"the sticky bit (mode {mode:#o})")
            elif mode & 0o020 and not sticky and not _own_group(st.st_gid):
                out.append(f"its parent directory {str(d)!r} is writable by group "
                           f"{st.st_gid} (mode {mode:#o})")
    return out


def check(path: Path) -> None:
    """Create `path` and its ``__pycache__`` (0700) if missing, then check both: owner,
    mode, not a symlink; and that nobody else may replace it (its ancestors: owned by the
    user or root, not writable by others without the sticky bit). Raises
    CacheDirPermissionError saying what is wrong and the fix; OSError when they cannot be
    created (a read-only file system)."""
    missing = [d for d in path.parents if not os.path.isdir(d)]
    for d in reversed(missing):  # (private too, whatever the umask: XDG's rule for these)
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass
    _make_private(path)
    directory = path
    problems = _ancestor_problems(path)
    if problems:
        raise CacheDirPermissionError(
            f"refusing to use tracejit cache directory {str(path)!r}: "
            f"{' and '.join(problems)}, so another user could replace the directory with "
            f"one of theirs after it is checked (code is imported, machine code loaded and "
            f"pickles read from it). Set {CACHE_DIR_ENV} to a directory under one that only "
            f"you and root can write to (or that has the sticky bit, as /tmp)")
    problems = _problems(path)
    if not problems:
        directory = path / PYCACHE
        _make_private(directory)
        problems = _problems(directory)
    if problems:
        fix = (f"'rm -rf {directory}' (tracejit recreates it)" if directory != path
               else f"'chmod 700 {directory}' (as its owner)")
        raise CacheDirPermissionError(
            f"refusing to use tracejit cache directory {str(directory)!r}: "
            f"{' and '.join(problems)}; code is imported, machine code loaded and pickles "
            f"read from it, so it must be private (mode 0o700, yours, not a symlink). Fix it "
            f"with {fix}, or set {CACHE_DIR_ENV} to a private directory")


def checked_dir() -> Path:
    """The cache directory, checked (once per process and path); raises as `check`."""
    path = dir_path()
    key = str(path)
    with _LOCK:
        if key not in _CHECKED:
            try:
                check(path)
            except CacheDirPermissionError as exc:
                _CHECKED[key] = exc
                raise
            _CHECKED[key] = None
            remove_stale_temps(path)
        elif _CHECKED[key] is not None:
            raise _CHECKED[key]
    return path


_TOLD: set = set()


def usable_dir():
    """The checked cache directory, or None: kernels are then compiled in memory, and the
    user is told once why, with the fix."""
    try:
        return checked_dir()
    except OSError as exc:
        message = str(exc) if isinstance(exc, CacheDirPermissionError) else (
            f"cannot use tracejit cache directory {str(dir_path())!r} "
            f"({type(exc).__name__}: {exc}); set {CACHE_DIR_ENV} to a writable private "
            f"directory")
        key = (str(dir_path()), message)
        if key not in _TOLD:
            _TOLD.add(key)
            warnings.warn(f"{message}. Kernels are compiled in memory meanwhile (no disk "
                          f"cache: each new process compiles again)", CacheWarning,
                          stacklevel=2)
        return None


_TROUBLED: set = set()  # directories a write failed in, until a write succeeds there again


def disk_trouble(directory: Path, exc: OSError) -> None:
    """Say once per process that the cache could not be written, and carry on in memory.
    Until a write succeeds there again (`wrote`), no child compiles ahead into it (its work
    could not reach the program, which would compile every kernel again after it). A
    directory removed meanwhile (a temp cleaner) is made again, and checked, at next use."""
    key = str(directory)
    _TROUBLED.add(key)
    if not os.path.isdir(directory):
        with _LOCK:
            _CHECKED.pop(key, None)
            _SCRUBBED.discard(key)
    message = (f"tracejit: cannot write to the kernel cache {directory} ({type(exc).__name__}:"
               f" {exc}); compiling in memory meanwhile (nothing is lost but the cache)")
    if message not in _TOLD:
        _TOLD.add(message)
        log.warning("%s", message)


def wrote(directory: Path) -> None:
    """A write to the cache succeeded: it takes writes again (see disk_trouble)."""
    _TROUBLED.discard(str(directory))


def troubled(directory: Path) -> bool:
    """Whether the last write to the cache `directory` failed (see disk_trouble)."""
    return str(directory) in _TROUBLED


def forget_checks() -> None:
    """Check again at next use (tests; `clear`)."""
    with _LOCK:
        _CHECKED.clear()
        _SCRUBBED.clear()
        _BOUND.clear()


# --------------------------------------------------------------------------
# files
# --------------------------------------------------------------------------

def read_private(path) -> bytes:
    """The bytes of `path`, opened without following a symlink, if it is a regular file
    owned by the current user; UntrustedFileError otherwise, FileNotFoundError if absent."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UntrustedFileError(f"{path} is a symlink") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UntrustedFileError(f"{path} is not a regular file")
        if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
            raise UntrustedFileError(f"{path} is owned by uid {st.st_uid}, not by the "
                                     f"current user")
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _trusted(entry: os.DirEntry) -> bool:
    try:
        st = entry.stat(follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and (not hasattr(os, "geteuid")
                                         or st.st_uid == os.geteuid())


def scrub_numba_files(directory: Path) -> None:
    """Before Numba reads anything in ``__pycache__`` (once per process): delete what is
    not a regular file owned by the user, so that Numba never unpickles it."""
    key = str(directory)
    with _LOCK:
        if key in _SCRUBBED:
            return
        _SCRUBBED.add(key)
        try:
            entries = list(os.scandir(directory / PYCACHE))
        except OSError:
            return
        for entry in entries:
            if not _trusted(entry):
                log.warning("tracejit: deleted %s from the kernel cache: not a regular file "
                            "owned by you, so never loaded", entry.path)
                _remove(entry.path)


def _remove(path) -> None:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            import shutil

            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass


def _is_temp(name: str) -> bool:
    return (name.startswith(".tmp-") and name.endswith(".part")) or ".tmp." in name


def remove_stale_temps(directory: Path, max_age: float = STALE_TEMP_SECONDS) -> int:
    """Delete temporary files older than `max_age` seconds (left by a killed process or a
    full disk); returns how many."""
    now, n = time.time(), 0
    for sub in (directory, directory / PYCACHE):
        try:
            entries = [e for e in os.scandir(sub) if _is_temp(e.name)]
        except OSError:
            continue
        for entry in entries:
            try:
                if now - entry.stat(follow_symlinks=False).st_mtime > max_age:
                    os.unlink(entry.path)
                    n += 1
            except OSError:
                pass
    return n


# --------------------------------------------------------------------------
# entries, use, bound
# --------------------------------------------------------------------------

def _stem(name: str) -> str:
    return name.split(".", 1)[0]


def entries(directory: Path, runtime: bool = False) -> dict:
    """stem -> [total bytes, last use (latest mtime), [paths]] for every kernel (the stats
    file is none; `runtime`: Numba's runtime objects, ``nrt-*``, too, which pruning treats
    as kernels: one per Numba, llvmlite and CPU target that used the directory)."""
    out: dict = {}
    for sub in (directory, directory / PYCACHE):
        try:
            found = list(os.scandir(sub))
        except OSError:
            continue
        for entry in found:
            name = entry.name
            if (name == PYCACHE or name == STATS_FILE or _is_temp(name)
                    or (not runtime and name.startswith("nrt-"))):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            item = out.setdefault(_stem(name), [0, 0.0, []])
            item[0] += st.st_size
            item[1] = max(item[1], st.st_mtime)
            item[2].append(entry.path)
    return out


def touch(path) -> None:
    """Mark a kernel's entry used (its object file's or Numba index's mtime): pruning
    deletes the least recently used first."""
    try:
        os.utime(path)
    except OSError:
        pass


def max_bytes() -> int:
    raw = settings.CACHE_MAX_BYTES.raw()
    try:
        return int(float(raw)) if raw else DEFAULT_MAX_BYTES
    except ValueError:
        return DEFAULT_MAX_BYTES


def prune(directory: Path, limit: int | None = None, keep=()) -> int:
    """Delete least recently used kernels (whole) until the cache holds at most `limit`
    bytes (default: TRACEJIT_CACHE_MAX_BYTES); kernels whose stem is in `keep` (in use in
    this process) go last. Returns how many kernels were deleted."""
    limit = max_bytes() if limit is None else limit
    return _prune(directory, limit, limit, keep)[0]


def _prune(directory: Path, limit: int, target: int, keep) -> tuple:
    """When the cache holds more than `limit` bytes, delete least recently used kernels
    (those in `keep` last) until it holds at most `target`: (kernels deleted, bytes and
    kernels left)."""
    found = entries(directory, runtime=True)
    total = sum(size for size, _, _ in found.values())
    n, left = 0, len(found)
    if total > limit:
        keep = set(keep)
        order = sorted(found, key=lambda s: (s in keep, found[s][1]))
        for stem in order:
            if total <= target:
                break
            size, _, paths = found[stem]
            for p in paths:
                _remove(p)
            total -= size
            n += not stem.startswith("nrt-")  # (a runtime object is not counted as a kernel)
            left -= 1
    if n:
        log.info("tracejit: pruned %d least recently used kernels from %s (limit %d bytes)",
                 n, directory, limit)
    return n, total, left


#: After a write, the directory is scanned (every file's size and age: ~0.1 s per thousand
#: kernels on a busy machine) only when this process's estimate of the total could pass the
#: bound, or RESCAN_SECONDS after its last scan; pruning then deletes down to LOW_WATER of
#: the bound, so that the next writes fit without a scan. (Each of W5's cold compiles into
#: a cache of 10k kernels scanned 50k files twice per kernel: 1.4 s a write at load 5.)
RESCAN_SECONDS = 60.0
LOW_WATER = 0.9
#: What one write is assumed to add, at least, before a scan has measured the mean kernel.
MIN_KERNEL_BYTES = 64 * 1024
_BOUND: dict = {}   # directory -> [bytes at the last scan, bytes per kernel, writes since,
                    #               monotonic time of the scan, the bound it was made under]


def keep_bound(directory: Path, keep=()) -> int:
    """The bound (TRACEJIT_CACHE_MAX_BYTES) after this process wrote a kernel's files to
    `directory`: prune (`keep`: stems in use here, deleted last) when the total may be past
    it. Returns how many kernels were deleted. Other processes' writes since this one's last
    scan are seen at its next scan (at most RESCAN_SECONDS later), and theirs keep the bound
    too: the cache may pass it by what the processes sharing it write meanwhile."""
    limit, now, key = max_bytes(), time.monotonic(), str(directory)
    with _LOCK:  # (not held while scanning: a fork waits for this lock)
        state = _BOUND.get(key)
        if state is not None and state[4] == limit and now - state[3] < RESCAN_SECONDS:
            state[2] += 1
            if state[0] + state[2] * state[1] <= limit:
                return 0
    n, total, kernels = _prune(directory, limit, int(limit * LOW_WATER), keep)
    per_kernel = max(MIN_KERNEL_BYTES, total // kernels if kernels else 0)
    with _LOCK:
        _BOUND[key] = [total, per_kernel, 0, time.monotonic(), limit]
    return n


# --------------------------------------------------------------------------
# counts across processes
# --------------------------------------------------------------------------

_COUNTED = ("numba_compiles", "numba_cache_hits", "objects_loaded", "modules_written")
_SAVED: dict = {}   # directory -> counts already added to its stats file
_REGISTERED: list = []


def record_at_exit(directory: Path, stats_fn) -> None:
    """Add this process's counts (`stats_fn()`) to the directory's stats file when it
    exits (once registered per process)."""
    if _REGISTERED:
        if str(directory) not in _REGISTERED:
            _REGISTERED.append(str(directory))
        return
    _REGISTERED.append(str(directory))
    pid = os.getpid()

    def save():
        if os.getpid() != pid:  # (a forked child of the user's exiting: not its counts)
            return
        try:
            stats = stats_fn()
        except Exception:  # noqa: BLE001 - interpreter shutting down
            return
        for d in _REGISTERED:
            add_counts(Path(d), stats)

    atexit.register(save)


def read_counts(directory: Path) -> dict:
    try:
        data = json.loads(read_private(directory / STATS_FILE))
    except (OSError, ValueError):
        return {}
    return {k: int(data.get(k, 0)) for k in _COUNTED if isinstance(data.get(k, 0), int)}


def add_counts(directory: Path, stats: dict) -> None:
    seen = _SAVED.setdefault(str(directory), {})
    delta = {k: stats.get(k, 0) - seen.get(k, 0) for k in _COUNTED}
    if not any(delta.values()):
        return
    counts = read_counts(directory)
    for k, v in delta.items():
        counts[k] = counts.get(k, 0) + v
    tmp = directory / f".tmp-stats-{os.getpid()}.part"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(counts, f)
        os.replace(tmp, directory / STATS_FILE)
        seen.update({k: stats.get(k, 0) for k in _COUNTED})
    except OSError:
        _remove(tmp)


# --------------------------------------------------------------------------
# python -m codegen.cache
# --------------------------------------------------------------------------

def info(directory: Path) -> dict:
    found = entries(directory)
    size = 0
    for sub in (directory, directory / PYCACHE):
        try:
            size += sum(e.stat(follow_symlinks=False).st_size for e in os.scandir(sub)
                        if e.name != PYCACHE)
        except OSError:
            pass
    counts = read_counts(directory)
    return {"directory": str(directory), "bytes": size, "max_bytes": max_bytes(),
            "kernels": len(found),
            "hits": counts.get("objects_loaded", 0) + counts.get("numba_cache_hits", 0),
            "compiles": counts.get("numba_compiles", 0)}

