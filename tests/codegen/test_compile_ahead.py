"""Compiling ahead (codegen.ahead): a forked child compiles a program's later kernels into
the disk cache while the program compiles the others. Results, kernels and counters are
what they are without it, and whatever the child does (fails, dies, stalls) the program
still compiles and runs every kernel."""
import _thread
import gc
import os
import signal
import sys
import threading
import time
import warnings
import weakref

import numpy as np
import pytest

import codegen
import eager
import tracer
from codegen import ahead, build, forksafe

THREADS_ALONE = ahead._threads_alone
HOOK_LISTS = forksafe.hook_lists


def step(x, w):
    h = (x * 2.0 + 1.0).tanh()                            # elementwise kernel
    y = h @ w
    z = (y - y.amax(dim=-1, keepdim=True)).exp()          # row kernel
    u = z @ w.T
    return (u * u).sum(dim=0), (u + 1.0).sum(dim=1)      # col and row kernels


def inputs():
    rng = np.random.default_rng(0)
    return (rng.standard_normal((16, 24)).astype(np.float32),
            rng.standard_normal((24, 8)).astype(np.float32))


def run_compiled():
    """A fresh @function of `step`, called once: (its outputs, its kernels, counters)."""
    codegen.reset_stats()
    f = tracer.function(step)
    x, w = (eager.from_numpy(a) for a in inputs())
    outs = [t.numpy() for t in f(x, w)]
    kernels = f.get_concrete_function(x, w).kernels
    return outs, kernels, codegen.compile_stats()


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty kernel cache directory, and compiling ahead on. (Forking with other threads
    in the test process, the split-kernel pool's or pytest-xdist's reader, is safe:
    codegen.forksafe.)"""
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(ahead, "ENABLED", True)
    monkeypatch.setattr(ahead, "_cpus", lambda: 2)
    return tmp_path


@pytest.fixture
def started(monkeypatch):
    """The Ahead objects the programs compiled in the test started."""
    out = []
    original = ahead.start

    def start(program):
        out.append(original(program))
        return out[-1]
    monkeypatch.setattr(ahead, "start", start)
    return out


@pytest.fixture
def closed_pids(monkeypatch):
    """The children's pids, as each Ahead closes (stops and reaps) its child."""
    pids = []
    original_stop = ahead.Ahead._stop

    def stop(self):
        if self.pid is not None:
            pids.append(self.pid)
        original_stop(self)
    monkeypatch.setattr(ahead.Ahead, "_stop", stop)
    return pids


def assert_reaped(pid):
    with pytest.raises(ChildProcessError):  # killed and reaped: not even a zombie
        os.waitpid(pid, os.WNOHANG)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The same program compiled without compiling ahead, in a cache of its own (once for
    the module: what it gives does not depend on the test)."""
    with pytest.MonkeyPatch.context() as m:
        m.setenv("TRACEJIT_CACHE_DIR", str(tmp_path_factory.mktemp("ref") / "cache"))
        m.setattr(ahead, "ENABLED", False)
        return run_compiled()


def eager_outputs():
    x, w = (eager.from_numpy(a) for a in inputs())
    return [t.numpy() for t in step(x, w)]


def marking(tmp_path, then=None):
    """A `_compile_in_child` that leaves a file per kernel it is given, then does `then`
    (by default what the child does)."""
    original = ahead._compile_in_child

    def compile_in_child(source, name):
        (tmp_path / f"child-{name}").write_text(str(os.getpid()))
        (then or original)(source, name)
    return compile_in_child


def child_kernels(tmp_path):
    return sorted(p.name[len("child-"):] for p in tmp_path.glob("child-*"))


def assert_like_reference(got, reference):
    outs, kernels, stats = got
    ref_outs, ref_kernels, ref_stats = reference
    assert [k.source for k in kernels] == [k.source for k in ref_kernels]
    assert all(k.fn is not None for k in kernels), [k.error for k in kernels]
    for a, b, e in zip(outs, ref_outs, eager_outputs()):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)
    # (disk-cache hits also count the vmath helpers a compile loads, as kernels link them
    # in: a kernel the child compiled loads none here)
    drop = {"numba_cache_hits"}
    assert {k: v for k, v in stats.items() if k not in drop} == \
        {k: v for k, v in ref_stats.items() if k not in drop}, (stats, ref_stats)
    assert stats["numba_cache_hits"] <= ref_stats["numba_cache_hits"]


def test_children_compile_every_kernel_and_the_program_only_loads(fresh_cache, reference,
                                                                    started, monkeypatch):
    """One child compiles the later kernels, a second the program's own share; the program
    compiles nothing (Numba's and LLVM's memory stay in the children) and loads them."""
    monkeypatch.setattr(ahead, "_compile_in_child", marking(fresh_cache))
    parent, original_load = os.getpid(), build.load_module

    def load_module(source, name):
        (fresh_cache / f"load-{os.getpid()}-{name}").touch()
        return original_load(source, name)
    monkeypatch.setattr(build, "load_module", load_module)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = run_compiled()
    assert not list(fresh_cache.glob(f"load-{parent}-*"))  # the program compiled nothing
    assert_like_reference(got, reference)  # (Kernel.fn imports the module: after this)
    outs, kernels, stats = got
    assert len(kernels) >= 3
    (a,) = started
    assert a.forked and a.pid is None and a.fd is None  # reaped and closed
    assert a.own is not None and a.own.pid is None and a.own.fd is None
    theirs = child_kernels(fresh_cache)
    assert theirs == sorted(k.hint for k in kernels)  # (each file named for its ops)
    by_pid = {}
    for p in fresh_cache.glob("child-*"):
        by_pid.setdefault(p.read_text(), []).append(p.name[len("child-"):])
    assert len(by_pid) == 2 and str(parent) not in by_pid
    later = sorted(k.hint for k in kernels[-len(a._by_index):])  # the later ones
    assert sorted(by_pid[max(by_pid, key=lambda pid: later[0] in by_pid[pid])]) == later
    # ...counted as compiled for this program, though it loaded them from the disk
    assert stats["numba_compiles"] == stats["modules_written"] == len(kernels)


def test_without_children_compiling_all_the_program_compiles_its_share(
        fresh_cache, reference, started, monkeypatch):
    monkeypatch.setattr(ahead, "CHILD_COMPILES_ALL", False)
    monkeypatch.setattr(ahead, "_compile_in_child", marking(fresh_cache))
    got = run_compiled()
    assert_like_reference(got, reference)
    outs, kernels, stats = got
    (a,) = started
    assert a.forked and a.own is None
    theirs = child_kernels(fresh_cache)
    assert theirs and len(theirs) < len(kernels)
    assert theirs == sorted(k.hint for k in kernels[-len(theirs):])  # the later ones


def test_a_failing_child_leaves_its_kernels_to_the_program(fresh_cache, reference, started,
                                                            monkeypatch):
    def fail(source, name):
        raise RuntimeError("no")
    monkeypatch.setattr(ahead, "_compile_in_child", marking(fresh_cache, fail))
    got = run_compiled()
    assert child_kernels(fresh_cache)
    assert_like_reference(got, reference)


def test_a_child_that_dies_leaves_its_kernels_to_the_program(fresh_cache, reference, started,
                                                             monkeypatch):
    monkeypatch.setattr(ahead, "_compile_in_child", lambda source, name: os._exit(3))
    assert_like_reference(run_compiled(), reference)
    (a,) = started
    assert a.pid is None


def _stop_self(source, name):
    os.kill(os.getpid(), signal.SIGSTOP)


@pytest.mark.parametrize("stall", [lambda source, name: time.sleep(600), _stop_self],
                         ids=["blocked", "stopped"])
def test_a_stalled_child_is_stopped_and_its_kernels_compiled_here(fresh_cache, reference,
                                                                  started, closed_pids,
                                                                  monkeypatch, stall):
    """A child that reports nothing and uses no CPU time (blocked, or SIGSTOPped) for
    STALL_SECONDS is killed, and the program compiles its kernels."""
    monkeypatch.setattr(ahead, "_compile_in_child", stall)
    monkeypatch.setattr(ahead, "STALL_SECONDS", 0.5)
    t0 = time.perf_counter()
    got = run_compiled()
    assert time.perf_counter() - t0 < 60
    assert_like_reference(got, reference)
    assert len(closed_pids) == 2  # (the program's share's child and the later one's)
    for pid in closed_pids:
        assert_reaped(pid)


def loads_marked(monkeypatch, tmp_path):
    """build.load_module (a compile, or a load through Numba's cache) leaves a file naming
    the process and kernel; the program's pid."""
    original_load = build.load_module

    def load_module(source, name):
        (tmp_path / f"load-{os.getpid()}-{name}").touch()
        return original_load(source, name)
    monkeypatch.setattr(build, "load_module", load_module)
    return os.getpid()


def verdicts(monkeypatch):
    """Each Ahead._stalled verdict (True: the child is given up), as the program makes it."""
    out, original = [], ahead.Ahead._stalled

    def stalled(self):
        out.append(original(self))
        return out[-1]
    monkeypatch.setattr(ahead.Ahead, "_stalled", stalled)
    return out


def test_a_slow_child_that_compiles_is_waited_for(fresh_cache, reference, started,
                                                  monkeypatch):
    """A stall is judged by the child's CPU time, not the wall clock: a child silent for
    many STALL_SECONDS while it works (a large kernel, a loaded machine: W10's LSTM backward
    at load 8 took 19-43 s, and was killed and compiled again) is not stopped."""
    original, first = ahead._compile_in_child, {}

    def compile_in_child(source, name):
        if first.setdefault(os.getpid(), name) == name:  # (a child's first kernel)
            end = time.monotonic() + 1.0  # (busy for 4 STALL_SECONDS first)
            while time.monotonic() < end:
                pass
        original(source, name)
    monkeypatch.setattr(ahead, "_compile_in_child", marking(fresh_cache, compile_in_child))
    monkeypatch.setattr(ahead, "STALL_SECONDS", 0.25)
    judged = verdicts(monkeypatch)
    parent = loads_marked(monkeypatch, fresh_cache)
    got = run_compiled()
    assert judged and not any(judged)  # judged silent (and working) at least once
    assert not list(fresh_cache.glob(f"load-{parent}-*"))  # the children compiled all
    assert_like_reference(got, reference)


def test_a_child_silent_past_the_hard_bound_is_stopped(fresh_cache, reference, started,
                                                       closed_pids, monkeypatch):
    """A child that uses CPU time but never reports (looping) is stopped after
    MAX_SILENT_SECONDS, and the program compiles its kernels."""
    def loop(source, name):
        while True:
            pass
    monkeypatch.setattr(ahead, "CHILD_COMPILES_ALL", False)  # (one child looping is enough)
    monkeypatch.setattr(ahead, "_compile_in_child", loop)
    monkeypatch.setattr(ahead, "STALL_SECONDS", 0.2)
    monkeypatch.setattr(ahead, "MAX_SILENT_SECONDS", 0.7)
    judged = verdicts(monkeypatch)
    t0 = time.perf_counter()
    got = run_compiled()
    assert time.perf_counter() - t0 < 60
    assert judged[-1] and not any(judged[:-1]) and len(judged) >= 2
    assert_like_reference(got, reference)
    (pid,) = closed_pids
    assert_reaped(pid)


class _Finalized:
    """A user's object that notes, in a file, the process its finalizers run in."""

    def __init__(self, path):
        self.path = path
        self.cycle = self  # (garbage only a collection frees)
        weakref.finalize(self, _note, path, "weakref")

    def __del__(self):
        _note(self.path, "__del__")


def _note(path, what):
    with open(path, "a") as f:
        f.write(f"{what} {os.getpid()}\n")


def test_the_child_runs_no_finalizer_of_the_programs_objects(fresh_cache, started,
                                                              monkeypatch):
    """The child's collector never collects the program's objects: the finalizers of a
    user's garbage (__del__, weakref callbacks) run in the program only, never in a child
    (which would run them twice, the second time in a process the user does not know)."""
    notes = fresh_cache / "finalized"
    original_fork = forksafe.fork

    def fork(seconds):
        _Finalized(notes)  # garbage (a cycle) when the program forks
        return original_fork(seconds)
    monkeypatch.setattr(forksafe, "fork", fork)

    original = ahead._compile_in_child

    def collect_then_compile(source, name):
        gc.collect()  # (as the child's compile may, at any time)
        original(source, name)
    monkeypatch.setattr(ahead, "_compile_in_child", collect_then_compile)
    run_compiled()
    (a,) = started
    assert a.forked and a.own is not None  # (two forks: two objects)
    gc.collect()
    lines = notes.read_text().split("\n")[:-1]
    assert sorted(lines) == sorted(f"{what} {os.getpid()}" for what in ("__del__", "weakref")
                                   for _ in range(2))


def test_no_child_while_the_cache_cannot_be_written(fresh_cache, started, monkeypatch):
    """A full or read-only cache: a child's kernels cannot reach the program, which would
    wait for the child and then compile them again itself. After a failed write no child
    is started, until a write succeeds again."""
    from codegen import kernelfiles

    def full(path, data):
        raise OSError(28, "No space left on device")

    def program(k):
        f = tracer.function(lambda x: x * float(k) + 1.0)  # (one small kernel)
        x = eager.from_numpy(inputs()[0])
        np.testing.assert_allclose(f(x).numpy(), inputs()[0] * k + 1, rtol=1e-6)
    real = kernelfiles._atomic_write
    monkeypatch.setattr(kernelfiles, "_atomic_write", full)
    program(3)  # (a child, whose work is lost; the program's own write fails)
    assert started[-1].forked
    program(5)  # no child, compiled in memory
    assert not started[-1].forked
    monkeypatch.setattr(kernelfiles, "_atomic_write", real)
    program(7)  # the program's write succeeds: the cache takes writes again
    program(9)
    assert not started[-2].forked and started[-1].forked


def test_no_child_when_it_cannot_help_or_may_not_be_safe(fresh_cache, started, monkeypatch):
    run_compiled()                                         # compiles, with a child
    assert started[-1].forked
    run_compiled()                                         # every kernel cached already
    assert not started[-1].forked

    # Where CPython's fork protocol cannot be used with the user's at-fork hooks set aside
    # (codegen.forksafe), fork(2) alone is safe only without another Python thread
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(fresh_cache / "other"))
    monkeypatch.setattr(ahead, "_threads_alone", THREADS_ALONE)
    monkeypatch.setattr(forksafe, "hook_lists", lambda: None)
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert not ahead._threads_alone()
        run_compiled()                                     # another thread runs: no fork
        assert not started[-1].forked
    finally:
        stop.set()
        t.join()
    # a thread `threading` does not list (as pytest-xdist's reader) counts too
    running, leave, gone = threading.Event(), threading.Event(), threading.Event()
    _thread.start_new_thread(lambda: (running.set(), leave.wait(), gone.set()), ())
    running.wait()
    try:
        assert not ahead._threads_alone()
    finally:
        leave.set()
        gone.wait()
    monkeypatch.setattr(forksafe, "hook_lists", HOOK_LISTS)

    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(fresh_cache / "single"))
    monkeypatch.setattr(ahead, "_threads_alone", lambda: True)
    f = tracer.function(lambda x: x * 2 + 1)               # one kernel: a child compiles it
    f(eager.ones(4))
    assert started[-1].forked and started[-1].own is None
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(fresh_cache / "single2"))
    monkeypatch.setattr(ahead, "CHILD_COMPILES_ALL", False)
    f = tracer.function(lambda x: x * 2 + 1)               # ...or, if the program compiles
    f(eager.ones(4))                                       # its share: nothing to share
    assert not started[-1].forked
    monkeypatch.setattr(ahead, "CHILD_COMPILES_ALL", True)

    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(fresh_cache / "off"))
    monkeypatch.setattr(ahead, "ENABLED", False)              # TRACEJIT_COMPILE_AHEAD=0
    run_compiled()
    assert not started[-1].forked


def test_a_cold_compile_forks_beside_the_split_pools_threads(fresh_cache, reference,
                                                              started, monkeypatch):
    """Once a big kernel has run, the split-kernel pool's threads exist. With CPython's
    fork protocol they stay, and the compile forks. With fork(2) alone (no protocol), they
    are idle while the program compiles, so they are stopped (and the pool made again at
    its next use) rather than the compile staying in the process (and its memory with it)."""
    from codegen import parallel

    monkeypatch.setattr(ahead, "_threads_alone", THREADS_ALONE)
    if parallel._SPLIT_POOL is not None:  # (an earlier test's: made again when used)
        parallel._SPLIT_POOL.shutdown(wait=True)
        parallel._forget_split_pool()
    monkeypatch.setattr(parallel, "_SPLIT_THREADS", 3)  # (two pool threads)
    pool = parallel._split_pool()
    list(pool.map(lambda _: time.sleep(0.01), range(4)))
    assert threading.active_count() > 1
    assert_like_reference(run_compiled(), reference)
    assert started[-1].forked
    assert not pool._shutdown and parallel._SPLIT_POOL is pool

    monkeypatch.setattr(forksafe, "hook_lists", lambda: None)
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(fresh_cache / "bare"))
    listed = {t.ident for t in threading.enumerate()}
    unlisted = [i for i in sys._current_frames() if i not in listed]  # (xdist's reader)
    me = threading.current_thread()
    if any(t is not me and not t.name.startswith(parallel.THREAD_PREFIX)
           for t in threading.enumerate()):
        pytest.skip("another test left a thread running")
    assert_like_reference(run_compiled(), reference)
    assert started[-1].forked == (not unlisted)
    assert pool._shutdown and parallel._SPLIT_POOL is None
    assert parallel._split_pool().submit(lambda: 7).result() == 7  # made again
    parallel._SPLIT_POOL.shutdown(wait=True)
    parallel._forget_split_pool()


def test_the_split_balances_the_estimated_work():
    assert ahead._split([2, 2, 2, 2]) == 2
    assert ahead._split([1, 1, 1, 1, 1]) == 3  # (the child's side costs one more)
    assert ahead._split([2, 2, 2, 6]) == 3
    assert ahead._split([6, 2, 2, 2]) == 1
    small = build_source(2, 3)
    big = build_source(21, 110)
    assert ahead._cost(big) > 3 * ahead._cost(small)


def build_source(n_args, n_lines):
    params = ", ".join(f"in{i}" for i in range(n_args))
    body = "\n".join(f"    v{i} = in0[{i}]" for i in range(n_lines))
    return f"import numpy as np\n\n@njit('void()')\ndef kernel({params}):\n    # a comment\n{body}\n"


def test_build_helpers_it_relies_on_exist():
    # _is_cached names the module file as build.load_module does; if these helpers go,
    # every kernel looks cached and nothing is compiled ahead: this says so.
    assert callable(build._names)


def test_the_program_reads_each_report_as_it_comes(monkeypatch):
    """The pipe protocol, without a child: a kernel reported failed is the program's to
    compile at once (no waiting for the child's later kernels); one reported compiled
    counts as compiled here; the end of the pipe leaves the rest to the program."""
    r, w = os.pipe()
    a = ahead.Ahead(None, r, ["src0", "src1", "src2"])
    os.write(w, b"0 failed\n1 1 1 1\n")
    a.wait("src0")
    assert a.reported == {"src0": None, "src1": (1, 1, 1)}
    bumps = []
    monkeypatch.setattr(build, "_bump", lambda counter, n=1: bumps.append((counter, n)))
    with a.loading("src0"):
        pass
    assert bumps == []                                    # failed there: nothing to count
    with a.loading("src1"):
        pass
    assert bumps == [("numba_compiles", 1), ("modules_written", 1), ("objects_written", 1)]
    os.close(w)
    with a.loading("src2"):                               # never reported: EOF ends the wait
        pass
    assert a.fd is None and not a.pending and bumps == [
        ("numba_compiles", 1), ("modules_written", 1), ("objects_written", 1)]


def test_a_build_that_raises_stops_the_child_at_once(fresh_cache, started, closed_pids,
                                                      monkeypatch):
    """If building the program raises part-way, the child is stopped and reaped before the
    error reaches the caller, not whenever the failed program is collected."""
    from codegen import runtime

    monkeypatch.setattr(ahead, "_compile_in_child", lambda source, name: time.sleep(600))
    # The first kernel is the own-share child's: the program waits for it until the stall
    # stops that child (as after STALL_SECONDS' 20 s); the later child is still running
    # when the second kernel's build raises.
    monkeypatch.setattr(ahead, "STALL_SECONDS", 0.5)
    original, calls = runtime.Program._kernel_op, []

    def kernel_op(self, group):
        calls.append(group)
        if len(calls) == 2:
            raise RuntimeError("build failed here")
        return original(self, group)
    monkeypatch.setattr(runtime.Program, "_kernel_op", kernel_op)
    with pytest.raises(RuntimeError, match="build failed here"):
        run_compiled()
    (a,) = started
    assert a.forked and a.pid is None and a.fd is None
    assert len(closed_pids) == 2  # (the program's share's child and the later one's)
    for pid in closed_pids:
        assert_reaped(pid)


def test_children_compile_the_step_kernels_too(fresh_cache, started, monkeypatch):
    """The numpy steps' kernels (direct convolution, LSTM recurrence: the largest) are
    compiled by the children as well: compiled in the program, each left Numba's and
    LLVM's memory in it (a long-lived process tracing new shapes grew 10-20 MiB a
    signature)."""
    import eager.nn.functional as F

    parent, original_load = os.getpid(), build.load_module

    def load_module(source, name):
        (fresh_cache / f"load-{os.getpid()}-{name}").touch()
        return original_load(source, name)
    monkeypatch.setattr(build, "load_module", load_module)
    monkeypatch.setattr(ahead, "_compile_in_child", marking(fresh_cache))
    # (a child stopped for good is given up after STALL_SECONDS without using CPU time, one
    # that works but never reports after MAX_SILENT_SECONDS, and the program compiles its
    # kernels: the test then fails. 17bb473's 90 s allowance was for children stuck at
    # their first release of the GIL (fixed by codegen.forksafe), and a slow child is no
    # longer judged by the wall clock: at load 8.1-8.5 the program waited 1.8-3.3 s here)
    monkeypatch.setattr(ahead, "STALL_SECONDS", 5.0)
    monkeypatch.setattr(ahead, "MAX_SILENT_SECONDS", 30.0)

    def conv(x, w):
        return (F.conv2d(x, w, padding=1) * 2.0).tanh()
    rng = np.random.default_rng(0)
    x = eager.from_numpy(rng.standard_normal((2, 3, 7, 7)).astype(np.float32))
    w = eager.from_numpy(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    f = tracer.function(conv)
    with eager.no_grad():
        got, want = f(x, w).numpy(), conv(x, w).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert "conv_direct" in child_kernels(fresh_cache)
    assert not list(fresh_cache.glob(f"load-{parent}-*"))  # the program compiled nothing
    (a,) = started
    assert a.forked and a.pid is None


def test_a_small_cache_bound_never_prunes_a_siblings_fresh_kernels(fresh_cache, started,
                                                                     monkeypatch):
    """Under a TRACEJIT_CACHE_MAX_BYTES the cache is over, each child prunes as it writes,
    keeping what is in use. It used to keep only what it inherited at the fork (kernels this
    process loaded earlier) and its own: its sibling's fresh kernels went first, and the
    program then compiled them itself. Every kernel the program compiles ahead is in use in
    each child; older ones go first."""
    from codegen import cache as kcache
    from codegen import kernelfiles

    # An old kernel module this process has loaded (in use), filling the whole bound
    old = build.load_module("X = 1\n# " + "x" * 300_000 + "\n", "old_in_use")
    assert old.X == 1
    cache_dir = fresh_cache / "cache"
    monkeypatch.setenv("TRACEJIT_CACHE_MAX_BYTES", str(kcache.info(cache_dir)["bytes"]))
    time.sleep(0.05)  # (older than the program's kernels)
    original = ahead._compile_in_child

    def compile_in_child(source, name):  # what this child's pruning keeps
        (fresh_cache / f"keep-{os.getpid()}-{name}").write_text(
            "\n".join(sorted(kernelfiles._in_use())))
        original(source, name)
    monkeypatch.setattr(ahead, "_compile_in_child", compile_in_child)
    parent, original_load = os.getpid(), build.load_module

    def load_module(source, name):
        (fresh_cache / f"load-{os.getpid()}-{name}").touch()
        return original_load(source, name)
    monkeypatch.setattr(build, "load_module", load_module)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        outs, kernels, _stats = run_compiled()
    for a, e in zip(outs, eager_outputs()):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)
    (a,) = started
    assert a.forked and a.own is not None
    assert not list(fresh_cache.glob(f"load-{parent}-*"))  # the program compiled nothing
    stems = {p.stem for p in cache_dir.glob("*.py")}
    assert not any(s.startswith("old_in_use") for s in stems)  # the old one went
    kept = [set(p.read_text().split("\n")) for p in fresh_cache.glob("keep-*")]
    assert len(kept) >= 2 and all(stems <= k for k in kept), (stems, kept)
    assert not kernelfiles.COMPILING_AHEAD  # (nothing left in use once the program is built)


def test_the_children_hold_none_of_the_programs_pipes_open(fresh_cache, started, monkeypatch):
    """A fork inherits every descriptor: a subprocess the program fed through a pipe saw the
    end of its input only when the children exited (7.8 s after the program closed it,
    during a cold compile), as a peer would see a socket's close. The children now hold
    nothing of the program's open but their own report pipe."""
    import subprocess

    def slow(source, name):
        time.sleep(3)
        ahead.build.load_module(source, name)
    monkeypatch.setattr(ahead, "_compile_in_child", slow)
    cat = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    seen = {}
    original = ahead._fork_compiler

    def fork_then_close(theirs):
        got = original(theirs)
        if got is not None and not cat.stdin.closed:  # (a child runs: close our end now)
            cat.stdin.close()
            t0 = time.monotonic()
            cat.wait(timeout=60)
            seen["eof_after"] = time.monotonic() - t0
        return got
    monkeypatch.setattr(ahead, "_fork_compiler", fork_then_close)
    outs, _kernels, _stats = run_compiled()
    for a, e in zip(outs, eager_outputs()):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)
    (a,) = started
    assert a.forked
    assert seen["eof_after"] < 2.0, seen  # (the child sleeps 3 s per kernel)
