"""Forking a child that only compiles (codegen.ahead), safely in a process with other
threads, and without running the at-fork hooks of the user's code.

fork(2) alone (libc's, through ctypes, as codegen.ahead used to) skips CPython's own work
in the child (PyOS_AfterFork_Child), and with it the GIL made anew. A thread of the
program waiting for the GIL at the fork (any busy thread: a data-loading thread, a web
server's, pytest-xdist's reader thread, which `threading` does not list) left the child a
copy of the GIL's condition variable with waiters it does not have: the child's first
release of the GIL (its first system call) then blocked for good in pthread_cond_signal
(gdb on a stuck child: drop_gil -> __condvar_quiesce_and_switch_g1), and the program
compiled by itself after STALL_SECONDS. And a lock of ours (build's, the cache's, the
counters', Numba's compiler lock) that another thread held at the fork stayed locked in
the child, which blocked at its first use.

`fork` therefore forks with `os.fork` (CPython's protocol: the GIL, the import lock and
`threading`'s state are made anew in the child, the standard library's hooks run: logging's
locks, ...) while holding the locks the child takes (so no other thread is inside them:
the fork waits for it, as an in-process compile would), with the hooks other code
registered through ``os.register_at_fork`` set aside for that one fork: the standard
library's and tracejit's run, a user's do not (neither before the fork, in the program,
nor in the child). The interpreter keeps those hooks in three Python lists, found once
(`hook_lists`); where they cannot be found, `fork` uses fork(2) alone, and only where the
process has no other Python thread (`alone`).

Every other fork of the process (a user's os.fork, multiprocessing's "fork" workers) holds
the same locks across it too, through at-fork hooks of this module's, so that a child can
compile while another thread of its parent was compiling at the fork.
"""
from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import sys
import threading

# Hooks of modules from these packages and the standard library run at our forks.
_OURS = ("codegen", "tracer", "eager")


def _marker_before():  # (registered once: how the interpreter's hook lists are found)
    pass


def _marker_parent():
    pass


def _marker_child():
    pass


_LISTS = []  # [(before, after_in_parent, after_in_child) lists, or None], once found


def hook_lists():
    """The interpreter's three lists of at-fork hooks (before, after in the parent, after
    in the child), or None where they cannot be found (not CPython, or not as expected)."""
    if not _LISTS:
        found = None
        if sys.implementation.name == "cpython" and hasattr(os, "register_at_fork"):
            markers = (_marker_before, _marker_parent, _marker_child)
            os.register_at_fork(before=markers[0], after_in_parent=markers[1],
                                after_in_child=markers[2])
            refs = [r for r in gc.get_referrers(*markers) if type(r) is list]
            lists = [[r for r in refs if any(x is m for x in r)] for m in markers]
            if all(len(ls) == 1 for ls in lists):
                found = tuple(ls[0] for ls in lists)
        _LISTS.append(found)
    return _LISTS[0]


def _kept(hook) -> bool:
    """Whether an at-fork hook runs at our forks: the standard library's (logging's locks,
    threading's state, random's seed), tracejit's, and any lock's own methods (a lock held
    across the fork and released after it, whoever registered it: nothing else happens)."""
    owner = getattr(hook, "__self__", None)
    if owner is not None and type(owner).__module__ == "_thread":
        return True
    module = getattr(hook, "__module__", None)
    if not isinstance(module, str):
        return False
    top = module.partition(".")[0]
    return top in _OURS or top in getattr(sys, "stdlib_module_names", ())


@contextlib.contextmanager
def _user_hooks_set_aside(lists):
    """The at-fork lists hold only the kept hooks while the block runs (the GIL is held
    throughout, but for a moment inside os.fork, when another thread could register a hook:
    such a hook stays registered, after the others)."""
    saved = [lst[:] for lst in lists]
    kept = []
    for lst in lists:
        lst[:] = [h for h in lst if _kept(h)]
        kept.append(len(lst))
    try:
        yield
    finally:
        for lst, old, n in zip(lists, saved, kept):
            lst[:] = old + lst[n:]


def _locks() -> list:
    """The locks a compiling child takes, in the order they nest (codegen.build's outermost,
    the counters' innermost: it is never held while another is taken)."""
    from . import build, cache, kernelfiles, numbashim

    out = [build._LOCK]
    objload = sys.modules.get("codegen.objload")
    if objload is not None:
        out.append(objload._LOCK)
    out.append(numbashim._LISTENER_LOCK)
    compiler_lock = sys.modules.get("numba.core.compiler_lock")
    if compiler_lock is not None:
        out.append(compiler_lock.global_compiler_lock._lock)
    out.append(cache._LOCK)
    if objload is not None:
        out.append(objload._PAIR_LOCK)
    out.append(kernelfiles._STATS_LOCK)
    return out


def _acquire_all(seconds: float) -> list:
    """Every lock of `_locks()`, acquired in order, each waited for at most `seconds`: the
    ones this thread now holds (all of them, or fewer if one was not to be had)."""
    held = []
    for lock in _locks():
        if not lock.acquire(timeout=seconds):
            break
        held.append(lock)
    return held


_MINE = threading.local()  # .held: the locks this thread took for the fork it is making
_BY_FORK = object()  # (.held while `fork` holds them itself)


@contextlib.contextmanager
def _locks_held(seconds: float):
    """True once this thread holds every lock of `_locks()` (each waited for at most
    `seconds`), else False (none held); released after the block, in the program and in
    the child (where this thread holds them as well)."""
    wanted = len(_locks())
    held = _acquire_all(seconds)
    _MINE.held = _BY_FORK  # (the at-fork hooks below leave them to this block)
    try:
        yield len(held) == wanted
    finally:
        _MINE.held = None
        for lock in reversed(held):
            lock.release()


# Any fork of the process (a user's os.fork, multiprocessing's "fork" workers) holds the
# same locks across it: a thread of the program inside one at the fork (compiling or
# loading a kernel) would otherwise leave it locked for good in the child, whose first
# compile or kernel load then never returned. The fork waits for that thread, up to
# USER_FORK_LOCK_SECONDS per lock (past that it goes ahead without: the child may then
# block if it compiles).
USER_FORK_LOCK_SECONDS = 20.0


def _before_fork() -> None:
    if getattr(_MINE, "held", None) is None:
        _MINE.held = _acquire_all(USER_FORK_LOCK_SECONDS)


def _after_fork() -> None:
    held = getattr(_MINE, "held", None)
    if held is None or held is _BY_FORK:
        return
    _MINE.held = None
    for lock in reversed(held):
        lock.release()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork,
                        after_in_child=_after_fork)


def alone() -> bool:
    """No other Python thread in this process: none that `threading` lists, nor one started
    through `_thread` or made by C code (each has a frame here while it runs Python)."""
    return len(sys._current_frames()) == 1


_LIBC = []


def libc():
    if not _LIBC:
        # PyDLL: the call keeps the GIL, as os.fork does (CDLL would release it)
        _LIBC.append(ctypes.PyDLL(None, use_errno=True))
    return _LIBC[0]


def _bare_fork() -> int:
    """fork(2) without any of CPython's at-fork work: only where no other Python thread
    runs (`alone`); C libraries' pthread_atfork handlers run as with os.fork."""
    try:
        fork = libc().fork
    except (OSError, AttributeError):
        return os.fork()
    fork.restype = ctypes.c_int
    pid = fork()
    if pid < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return pid


def fork(lock_seconds: float):
    """Fork as the module's docstring says: the child's pid in the program, 0 in the child,
    None where forking is not safe now (a lock of ours held by another thread for more
    than `lock_seconds`; or, without the hook lists, another Python thread running).
    Raises OSError as os.fork does."""
    lists = hook_lists()
    with _locks_held(lock_seconds) as held:
        if not held:
            return None
        if lists is None:
            return _bare_fork() if alone() else None
        with _user_hooks_set_aside(lists):
            return os.fork()


__all__ = ["alone", "fork", "hook_lists", "libc"]
