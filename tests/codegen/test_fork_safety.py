"""The compile-ahead children (codegen.ahead) in a process with other threads: a thread
waiting for the GIL, or holding a lock the child needs, at the moment of the fork must
not leave the child stuck (it used to sit silent until STALL_SECONDS, 20 s, and the
program then compiled by itself); a user's program with busy threads still gets its
kernels compiled ahead, with the results eager gives; a user's own fork while a thread
compiles leaves the child able to compile; and two processes writing one kernel's object
file at once leave a pair that loads."""
import contextlib
import logging
import os
import select
import threading
import time

import numpy as np
import pytest

import eager
import tracer
from codegen import ahead, build, kernelfiles

# The bound on a child's first report: it does almost nothing (a stuck one never reports).
REPORT_SECONDS = 10.0
# Forks with threads waiting for the GIL: with fork(2) alone, about one in four stalled.
FORKS = 20


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty kernel cache directory, compiling ahead on (as on a user's machine)."""
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(ahead, "ENABLED", True)
    monkeypatch.setattr(ahead, "_cpus", lambda: 2)
    return tmp_path


def touch_what_the_child_touches(source, name):
    """A cheap stand-in for a kernel's compile that takes each lock a real one takes:
    build's (load_module), the cache's, the counters', Numba's compiler lock."""
    from numba.core.compiler_lock import global_compiler_lock

    build.load_module(source, name)
    with global_compiler_lock:
        kernelfiles._bump("modules_loaded", 0)


@contextlib.contextmanager
def held_by_another_thread(lock):
    """Another thread of the program holds `lock` while the body runs, and lets go of it
    0.3 s later at most (as a kernel load in progress would)."""
    held, release = threading.Event(), threading.Event()

    def hold():
        with lock:
            held.set()
            release.wait(0.3)

    t = threading.Thread(target=hold)
    t.start()
    held.wait()
    try:
        yield
    finally:
        release.set()
        t.join()


def first_report(sources, seconds=REPORT_SECONDS):
    """Fork a compile-ahead child for `sources`; its first report line, or None if it
    sends nothing for `seconds` (it is then killed)."""
    got = ahead._fork_compiler(sources)
    assert got is not None, "no child was forked"
    pid, fd = got
    try:
        ready, _, _ = select.select([fd], [], [], seconds)
        return os.read(fd, 100).decode().split("\n")[0] if ready else None
    finally:
        os.close(fd)
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="needs Linux scheduling classes")
def test_threads_waiting_for_the_gil_at_the_fork_do_not_stall_the_child(fresh_cache,
                                                                        monkeypatch):
    """Other threads of the program want the GIL while it forks (data-loading threads;
    xdist's reader thread in the test suite). fork(2) alone left the child a copy of the
    GIL's condition variable with waiters it does not have, and the child blocked for good
    in pthread_cond_signal at its first release of the GIL (gdb: drop_gil ->
    __condvar_quiesce_and_switch_g1); CPython's own fork protocol makes the GIL anew there.
    Made likely here (about one fork in four stalled before): three threads wanting the GIL
    share the program's CPU at idle priority, so that one woken for the GIL is often still
    waiting to run when the program forks."""
    import ctypes

    monkeypatch.setattr(ahead, "_compile_in_child", lambda source, name: None)
    usleep = ctypes.PyDLL(None).usleep  # (PyDLL: sleeps holding the GIL)
    mine = os.sched_getaffinity(0)
    cpu = min(mine)
    stop = threading.Event()
    started = threading.Barrier(4)

    def busy():
        os.sched_setaffinity(0, {cpu})
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        started.wait()
        while not stop.is_set():
            pass

    threads = [threading.Thread(target=busy, daemon=True) for _ in range(3)]
    os.sched_setaffinity(0, {cpu})
    try:
        for t in threads:
            t.start()
        started.wait()
        reports = []
        for k in range(FORKS):
            usleep(6000)  # the CPU idles, the GIL held: the threads wait for it
            reports.append(first_report([("X = 1\n", "gil_probe")], seconds=2.0))
            if reports[-1] is None:
                break
    finally:
        stop.set()
        os.sched_setaffinity(0, mine)
        for t in threads:
            t.join()
    assert reports == ["0 0 0 0"] * FORKS, f"fork {len(reports)} of {FORKS}: the child stalled"


@pytest.mark.parametrize("lock", ["build", "numba", "cache", "counters"])
def test_a_thread_holding_a_lock_the_child_needs_does_not_stall_it(fresh_cache, monkeypatch,
                                                                  lock):
    """Another thread of the program (loading a kernel of another function) holds a lock
    the child takes. The child's copy of it stayed locked for good; now the fork waits
    for the thread to let go of it (briefly: as an in-process compile would)."""
    from numba.core.compiler_lock import global_compiler_lock

    from codegen import cache

    held_lock = {"build": build._LOCK, "numba": global_compiler_lock._lock,
                 "cache": cache._LOCK, "counters": kernelfiles._STATS_LOCK}[lock]
    monkeypatch.setattr(ahead, "_compile_in_child", touch_what_the_child_touches)
    with held_by_another_thread(held_lock):
        t0 = time.perf_counter()
        report = first_report([(f"X = {lock!r}\n", f"lock_probe_{lock}")])
    assert report is not None and report.split()[0] == "0", report
    assert time.perf_counter() - t0 < REPORT_SECONDS


def test_a_program_with_busy_threads_gets_its_kernels_compiled_ahead(fresh_cache,
                                                                    monkeypatch):
    """A user's program: a data-loading thread doing numpy work, a thread calling another
    compiled function, a thread logging through a slow handler (its lock held on and off),
    while the main thread calls a compiled step whose kernels are not cached. The children
    compile them (the program compiles none itself: it used to refuse to fork beside
    threads), within a small bound, and the step gives eager's results."""
    parent, original_load = os.getpid(), build.load_module

    def load_module(source, name):
        if os.getpid() == parent:
            compiled_here.append(name)
        return original_load(source, name)
    compiled_here = []
    started = []
    original_start = ahead.start
    monkeypatch.setattr(ahead, "start", lambda p: started.append(original_start(p)) or started[-1])

    def other(x):
        return x * 3.0 - 1.0

    def step(x, w):
        return ((x * 2.0 + 1.0).tanh() @ w).sum(dim=1)

    rng = np.random.default_rng(0)
    x = eager.from_numpy(rng.standard_normal((16, 24)).astype(np.float32))
    w = eager.from_numpy(rng.standard_normal((24, 8)).astype(np.float32))
    g = tracer.function(other)
    g(x)  # (compiled before the threads start: they only call it)

    class SlowHandler(logging.Handler):
        def emit(self, record):
            time.sleep(0.002)  # (its lock held meanwhile)
    log = logging.getLogger("tracejit.test.busy")
    log.addHandler(SlowHandler())
    log.propagate = False
    stop = threading.Event()
    errors = []

    def loop(body):
        def run():
            try:
                while not stop.is_set():
                    body()
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)
        return threading.Thread(target=run, daemon=True)

    batches, data = [], np.random.default_rng(1)

    def load_batch():
        batches.append(np.sort(data.standard_normal(2000)))
        del batches[:-2]
    threads = [loop(load_batch),
               loop(lambda: g(x)),
               loop(lambda: log.warning("batch"))]
    monkeypatch.setattr(build, "load_module", load_module)
    for t in threads:
        t.start()
    try:
        f = tracer.function(step)
        t0 = time.perf_counter()
        got = f(x, w).numpy()
        elapsed = time.perf_counter() - t0
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    np.testing.assert_allclose(got, step(x, w).numpy(), rtol=1e-5, atol=1e-5)
    assert started and started[-1].forked and started[-1].pid is None
    assert compiled_here == [], compiled_here  # (a stalled child: the program compiled it)
    assert elapsed < REPORT_SECONDS, elapsed


def test_a_users_fork_while_another_thread_compiles_leaves_the_child_able_to_compile(
        fresh_cache):
    """A user's own fork (multiprocessing's "fork" workers) while another of their threads
    is loading a kernel (inside codegen.build's lock): the child's copy of the lock stayed
    locked, and its first kernel load never returned. The fork now waits for the thread."""
    with held_by_another_thread(build._LOCK):
        pid = os.fork()
        if pid == 0:  # the user's child: loads a kernel module, and leaves
            code = 1
            try:
                code = 0 if build.load_module("X = 5\n", "users_child").X == 5 else 2
            finally:
                os._exit(code)
    deadline = time.monotonic() + REPORT_SECONDS
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.01)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the child's kernel load never returned")
    assert os.waitstatus_to_exitcode(status) == 0


def test_two_writers_of_one_object_file_leave_a_pair_that_loads(tmp_path):
    """Two processes compiling the same kernel at once write its object file and the digest
    it must match (two files; their bytes differ between processes: Numba's symbol names
    count the compiles before). Interleaved (A's digest, B's digest, B's object, A's
    object), the pair no longer matched, and every later process refused the object and
    compiled again. Each pair is now written, and read, under a lock on the directory."""
    import fcntl

    from codegen import objload

    d = tmp_path / "kernels"
    d.mkdir(mode=0o700)
    path = d / "k_0123.tjo"
    b_done = threading.Event()

    def write_b():
        objload._write_checked(path, b"object of process B", kernelfiles._atomic_write)
        b_done.set()

    b = threading.Thread(target=write_b)
    writes, locked_out = [], []

    def write_a(target, data):
        kernelfiles._atomic_write(target, data)
        writes.append(target)
        if len(writes) == 1:  # between A's digest and A's object:
            # another process may not lock the directory (a file lock, between processes)
            fd = os.open(d, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                locked_out.append(True)
            finally:
                os.close(fd)
            b.start()  # and another writer (a thread here) writes its pair meanwhile
            b_done.wait(0.3)

    objload._write_checked(path, b"object of process A", write_a)
    b.join()
    data = objload.read_checked(path)  # (raised ObjectFileError: the digest did not match)
    assert data in (b"object of process A", b"object of process B")
    assert locked_out == [True]
