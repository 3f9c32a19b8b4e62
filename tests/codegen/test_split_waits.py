"""The runtime's split (codegen.parallel) waits for the pieces, not for its helpers: a pool
thread that has started but not yet taken a piece (on a loaded machine, not yet scheduled)
is not waited for once every piece is done."""
import concurrent.futures
import threading

import numpy as np
import pytest

from codegen import parallel


class _StalledPool:
    """A pool whose threads start the work at once (the future is running: it cannot be
    cancelled) but run it only when `go` is set, as a thread the scheduler has not run."""

    def __init__(self):
        self.go = threading.Event()
        self.threads = []

    def submit(self, fn):
        future = concurrent.futures.Future()
        future.set_running_or_notify_cancel()

        def run():
            self.go.wait()
            try:
                future.set_result(fn())
            except BaseException as e:
                future.set_exception(e)
        t = threading.Thread(target=run, daemon=True)
        t.start()
        self.threads.append(t)
        return future


@pytest.fixture
def stalled(monkeypatch):
    pool = _StalledPool()
    monkeypatch.setattr(parallel, "_SPLIT_THREADS", 2)
    monkeypatch.setattr(parallel, "_SPLIT_POOL", pool)
    yield pool
    pool.go.set()
    for t in pool.threads:
        t.join(10)


def _in_thread(fn):
    """fn() in a thread of its own: whether it returned within 10 s (else the test fails
    rather than hangs), and what it raised."""
    out = {}

    def run():
        try:
            fn()
        except BaseException as e:
            out["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(10)
    return not t.is_alive(), out.get("error")


def test_split_kernel_does_not_wait_for_a_helper_that_never_ran(stalled):
    a = np.zeros(1000)

    def entry(a, lo, hi):
        a[lo:hi] += 1
    returned, error = _in_thread(lambda: parallel._split_call(entry, a.size, 64)(a))
    assert returned and error is None
    np.testing.assert_array_equal(a, 1.0)   # every piece once, all by the caller
    stalled.go.set()                        # the late helper finds nothing left to do
    for t in stalled.threads:
        t.join(10)
    np.testing.assert_array_equal(a, 1.0)


def test_run_pieces_does_not_wait_for_a_helper_that_never_ran(stalled):
    seen = []
    returned, error = _in_thread(lambda: parallel.run_pieces(seen.append, list(range(9)), 2))
    assert returned and error is None
    assert sorted(seen) == list(range(9))


def test_split_waits_for_a_piece_a_helper_took(monkeypatch):
    """A piece a helper is running is waited for: the call returns after it, with its
    writes, and its error raised in the caller."""
    monkeypatch.setattr(parallel, "_SPLIT_THREADS", 2)
    monkeypatch.setattr(parallel, "_SPLIT_POOL", None)
    started, release = threading.Event(), threading.Event()
    main = threading.get_ident()
    a = np.zeros(8)

    def entry(a, lo, hi):
        if threading.get_ident() != main and not started.is_set():
            started.set()
            release.wait(10)    # (the caller runs out of pieces meanwhile)
            a[lo:hi] += 1
            raise ValueError("helper's piece")
        a[lo:hi] += 1
    call = parallel._split_call(entry, a.size, 1)
    result = {}

    def run():
        try:
            call(a)
        except ValueError as e:
            result["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    if started.wait(10):   # (a helper took a piece: the call must not return before it)
        t.join(0.3)
        assert t.is_alive()
        release.set()
        t.join(10)
        assert "helper's piece" in str(result.get("error"))
    else:  # (the caller took every piece before the pool's thread ran: nothing to wait for)
        release.set()
        t.join(10)
    assert not t.is_alive()
    np.testing.assert_array_equal(a, 1.0)
    if parallel._SPLIT_POOL is not None:
        parallel._SPLIT_POOL.shutdown()
