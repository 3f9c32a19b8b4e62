"""The parallel split: a kernel's loop run in pieces on the calling thread and a pool's
(codegen.program wraps split kernels with `_split_call`)."""

from __future__ import annotations

import itertools
import os
import sys
import threading

from tracer import settings

# Threads that split a kernel's loop (_split_call): Numba's count (NUMBA_NUM_THREADS,
# by default the CPUs this process may use); the pool is made at first use, and again in
# a forked child, which inherits the pool object but not its threads.
_SPLIT_THREADS = None
_SPLIT_POOL = None
_SPLIT_LOCK = threading.Lock()
THREAD_PREFIX = "tracejit-kernel"  # (the pool's thread names: codegen.ahead stops them)


def _split_threads() -> int:
    global _SPLIT_THREADS
    if _SPLIT_THREADS is None:
        config = sys.modules.get("numba.core.config")
        if config is not None:
            _SPLIT_THREADS = max(1, int(config.NUMBA_NUM_THREADS))
        else:  # what Numba's config would say, without importing Numba
            env = settings.read("NUMBA_NUM_THREADS")
            _SPLIT_THREADS = max(1, int(env) if env else (
                len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                else os.cpu_count() or 1))
    return _SPLIT_THREADS


def _split_pool():
    global _SPLIT_POOL
    with _SPLIT_LOCK:
        if _SPLIT_POOL is None:
            import concurrent.futures

            _SPLIT_POOL = concurrent.futures.ThreadPoolExecutor(
                _split_threads() - 1, thread_name_prefix=THREAD_PREFIX)
        return _SPLIT_POOL


def _forget_split_pool():
    global _SPLIT_POOL, _SPLIT_LOCK
    _SPLIT_POOL, _SPLIT_LOCK = None, threading.Lock()


def _after_fork_in_child():
    # (and the prange lock: another thread of the parent may have held it at the fork)
    global _PRANGE_LOCK
    _forget_split_pool()
    _PRANGE_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# Pieces per thread of a split kernel. With one piece per thread a call waits for its
# slowest thread: on a shared machine, one whose core another job holds for a while. With
# several, each thread takes the next piece as it finishes, and the others take up a
# slowed thread's share. W2 softmax (2 threads, medians of 2 processes each) with another
# job busy 3 ms of every 6 on the machine: 1.96 -> 1.81 ms (1.0 ms without it); with a
# job busy all the time no change (2.0 ms: the scheduler's time slices outlast a call);
# alone, no change either.
PIECES_PER_THREAD = 4


def _split_call(entry, n: int, align: int):
    """A kernel taking `lo, hi` after its arguments (emit.SPLIT_DOC), as a callable that
    takes just the arguments and runs [0, n) in pieces on the calling thread and the pool's:
    each takes the next piece until none is left. The kernel releases the GIL, so they run
    at once. Pieces start at multiples of `align` (64 elements: whole cache lines; a row
    kernel's unit is a block of rows)."""
    threads = _split_threads()
    step = -(-n // (threads * PIECES_PER_THREAD))
    step = -(-step // align) * align
    pieces = [(lo, min(lo + step, n)) for lo in range(0, n, step)]
    if len(pieces) == 1 or threads == 1:
        return lambda *arrays: entry(*arrays, 0, n)
    helpers = min(threads, len(pieces)) - 1

    def run(*arrays):
        refused = []  # (a step kernel's pieces that returned true: codegen.step_kernels)
        _run_shared(lambda p: refused.append(p) if entry(*arrays, *p) else None, pieces,
                    helpers)
        return bool(refused)
    return run


# One parallel=True kernel (Numba's prange) at a time in this process. tracejit runs them on
# Numba's workqueue threading layer (codegen.numbashim._numba), which is not thread-safe:
# two Python threads calling compiled functions whose programs hold such kernels aborted
# the whole process ("Concurrent access has been detected"). A kernel already uses every
# thread, so a second caller waits instead. (A user's own parallel=True functions running
# on the workqueue layer in another thread at the same time are not covered: see the
# README's threads row.)
_PRANGE_LOCK = threading.Lock()


def serialized(entry):
    """`entry` (a parallel=True kernel's), called under the process's prange lock."""
    def call(*args):
        with _PRANGE_LOCK:
            return entry(*args)
    call.__wrapped__ = entry
    return call


def run_pieces(work_one, pieces: list, threads: int) -> None:
    """`work_one(piece)` for each of `pieces` on the calling thread and up to `threads - 1`
    of the pool's, each taking the next piece as it finishes (as `_split_call`'s kernels;
    work_one must release the GIL to run at once). codegen.gemm splits products so."""
    _run_shared(work_one, pieces, min(threads, len(pieces)) - 1)


def _run_shared(work_one, pieces: list, helpers: int) -> None:
    """The pieces taken by the calling thread and `helpers` of the pool's, in turn, each
    taking the next one as it finishes. The caller waits for the pieces, not for the
    helpers: a helper that has not taken one by the time every piece is taken is left to
    find none (it may be running but not yet scheduled: on a loaded machine the caller
    would wait a time slice of the scheduler's for a thread with nothing left to do; the
    W9 step measured 14 -> 53 ms of kernel time at load 8 when its kernels split). An
    error in a piece reaches the caller after every piece is done."""
    n = len(pieces)
    take = itertools.count().__next__   # (atomic: one piece to one thread)
    finish = itertools.count(1).__next__
    done = threading.Lock()
    done.acquire()   # (released by the thread that finishes the last piece)
    errors = []

    def work():
        i = take()
        while i < n:
            try:
                work_one(pieces[i])
            except BaseException as e:  # (the caller raises it; a helper must count it)
                errors.append(e)
            if finish() == n:
                done.release()
            i = take()

    pool = _SPLIT_POOL or _split_pool()
    futures = [pool.submit(work) for _ in range(helpers)]
    work()
    done.acquire()
    for f in futures:   # (not yet started: nothing left for them)
        f.cancel()
    if errors:
        raise errors[0]

