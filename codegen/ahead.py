"""Compiling ahead: forked children compile a program's kernels into the disk cache, and
the program loads them from there (their object files: the warm path).

Numba compiles one function at a time and holds the GIL while it does, so threads cannot
share the work; processes can. And what a compile leaves in the process that ran it
(Numba's and LLVM's memory, ~0.6 MiB a kernel) is never returned, even after the
Function is dropped: a long-lived process tracing many shapes would grow without bound.
So when a program has kernels to compile (W5, a training step: 6, ~1 s of Numba), `start`
forks one child that compiles the last few (about half the estimated work) in program
order and, with CHILD_COMPILES_ALL, a second child that compiles the others (the
program's own share); each compiles into the kernel cache directory and reports each
kernel done on a pipe. `wait` blocks until the child has reported the kernel the program
needs next, which then loads from the cache as in any later process. The program's
memory after a cold trace is then what a warm one costs (issue 15: +7 MiB for 20 shapes
of an MLP step, was +74 MiB). The children never run a kernel, print nothing (every
descriptor they inherit but their pipe is /dev/null in them, stdin, stdout and stderr
included: they keep none of the program's files, pipes or sockets open) and leave through
`os._exit`. They are invisible to the
program: forked without the at-fork hooks a user registered, with signals blocked until
they have dropped the program's handlers, they run none of its signal handlers (a signal
to the process group ends them quietly) nor its atexit handlers, and they die with the
program, even a program killed by SIGKILL. Ctrl-C while the program waits for them stops
them and raises KeyboardInterrupt in the program only.

Forking in a process with threads (codegen.forksafe): CPython's fork protocol (os.fork: the
GIL, the import lock and `threading`'s state made anew in the child; the standard library's
at-fork hooks run, a user's are set aside for the fork), with the locks the child takes
held by the forking thread across the fork, so that no other thread is inside one (the
fork waits for it). Before, the children were forked by fork(2) alone; a thread waiting
for the GIL at that moment (a data-loading thread; pytest-xdist's reader thread, which
`threading` does not list) left the child stuck at its first release of the GIL, and the
program compiled by itself after STALL_SECONDS.

What the child may touch: the kernel cache directory (files written atomically), Numba and
LLVM (their compiler lock is held across the fork), tracejit's build/cache/counter locks
(held across the fork too), logging (its locks are made anew by its at-fork hook), its own
pipe. What it must not: run a kernel (the split-kernel pool's threads and Numba's
threading layer are not in the child; codegen.parallel makes its pool and locks anew for a
child that does), take any other lock another thread may hold (tracer's, a program's, the
user's: none is taken across the fork), print, or leave through anything but os._exit.

Nothing depends on the children: a kernel a child did not report (it failed, died, used
no CPU time for STALL_SECONDS, or reported nothing for MAX_SILENT_SECONDS) is compiled by
the program itself, exactly as without it. The child collects only its own garbage: the
program's objects are frozen in it (gc.freeze), so no finalizer of the user's runs there. No
child is started where forking is not safe or cannot help: not on Linux, a single CPU,
another thread holding a lock the child takes for more than STALL_SECONDS, where the
interpreter's at-fork hooks cannot be set aside (not CPython) while other Python threads
run, no usable cache directory (the children's work could not reach the program),
a cache directory the last write to failed (full, read-only: until a write succeeds),
nothing to compile, or TRACEJIT_COMPILE_AHEAD=0; the program then compiles in-process, and
keeps what that costs.

Counters (codegen.compile_stats): a kernel a child compiled counts as compiled, not as
a disk-cache hit, though the program loads it from the disk.
"""
from __future__ import annotations

import contextlib
import gc
import os
import select
import signal
import sys
import threading
import time
import warnings

from tracer import settings
from tracer.symbolic import SymbolicDimError

from . import build, cache, forksafe, kernelfiles
from .emit import emit_kernel
from .fuse import KernelGroup
from .kernel_source import canonical

#: TRACEJIT_COMPILE_AHEAD=0 turns it off.
ENABLED = settings.COMPILE_AHEAD  # (a Flag: each truth test reads the environment)

#: Children compile every kernel the cache lacks (the program's share too, in a second
#: child), and the program only loads their object files: Numba's compiler and LLVM keep
#: ~0.6 MiB per kernel that nothing returns, in the process that compiles (issue 15: RSS
#: after `del f`). False: the program compiles its own share itself, as before.
CHILD_COMPILES_ALL = True

#: The program stops waiting for a child that has reported nothing and used no CPU time
#: for this long: one stopped, or blocked for good. A child that compiles, however slowly
#: (W10's LSTM backward kernel at load 8: 19-43 s between two reports, all of it compiling),
#: is waited for, up to MAX_SILENT_SECONDS without a report.
STALL_SECONDS = 20.0

#: The hard bound: the program stops waiting for a child silent for this long even while
#: it uses CPU time (looping, not compiling).
MAX_SILENT_SECONDS = 300.0

#: CPU seconds a child must have used in STALL_SECONDS to count as making progress (a
#: clock tick is 10 ms; a stopped or blocked child uses none).
MIN_PROGRESS_SECONDS = 0.01
# Descriptors a child keeps open as the program's (every other inherited one is /dev/null
# in it: `_drop_inherited_fds`): a measuring tool's own, such as benchmarks.cold_breakdown's
# span file, which children write their kernels' spans to.
CHILD_KEEPS_FDS: set = set()


def _cpu_seconds(pid):
    """CPU time (user + system, all threads) process `pid` has used so far, from
    /proc/<pid>/stat; None where that cannot be read (not Linux, or the process is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        # (fields after the command name, which is in parentheses and may hold spaces:
        # state first, utime and stime the 12th and 13th)
        fields = stat.rpartition(b")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _fork_is_safe() -> bool:
    """Forking cannot leave the child stuck on something another thread held: CPython's
    fork protocol is usable with the user's at-fork hooks set aside (codegen.forksafe), or
    no other Python thread runs (`_threads_alone`)."""
    return forksafe.hook_lists() is not None or _threads_alone()


def _threads_alone() -> bool:
    """No other Python thread runs (also none `threading` does not list: started through
    `_thread`, or by C code), or only the idle threads of the runtime's split-kernel
    pool (codegen.parallel), which are then stopped: the pool is made again at its next
    use (a few threads' start-up, once per cold compile), and the compile still forks."""
    if forksafe.alone():
        return True
    from . import parallel

    me = threading.current_thread()
    pool = parallel._SPLIT_POOL
    if pool is None or any(t is not me and not t.name.startswith(parallel.THREAD_PREFIX)
                           for t in threading.enumerate()):
        return False
    # (only this thread could be using the pool, and it is here: the pool is idle)
    pool.shutdown(wait=True)
    parallel._forget_split_pool()
    return forksafe.alone()


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _cost(source: str) -> float:
    """A kernel's compile time, roughly, in units of a trivial kernel's (~40 ms): every
    array argument costs ~5 ms (Numba's argument unboxing and its LLVM), every line of
    the body ~1.3 ms, every call of a vector-math helper ~30 ms (it is inlined; with
    constant trip counts, unrolled), every call of codegen.gemm_kernel's product_blocks
    ~2 s (inlined too: the gemm kernel alone 1.9-2.2 s of CPU; W10's LSTM kernels, which
    call it, 3.4 and 4.8 s, estimated 3.1 and 3.6 units without it). W5's kernels took
    0.05 s (2 arguments, 5 lines), 0.20 s (5 arguments, 26 lines, 3 helper calls), 0.36 s
    (21 arguments, 110 lines)."""
    head, _, body = source.partition("\ndef kernel(")
    n_args = body.split(")", 1)[0].count(",") + 1
    n_lines = sum(1 for line in body.splitlines()[1:]
                  if line.strip() and not line.lstrip().startswith("#"))
    helpers = [line.split(" import ")[1].strip() for line in head.splitlines()
               if line.startswith("from codegen.vmath import ")]
    n_calls = sum(body.count(f"{h}(") for h in helpers)
    n_products = body.count("product_blocks(")
    return 1.0 + 0.13 * n_args + 0.03 * n_lines + 0.75 * n_calls + 50.0 * n_products


def _is_cached(source: str, name: str) -> bool:
    """Whether the kernel's module is already in the cache directory (compiled by an
    earlier process, most likely: then there is nothing to compile ahead)."""
    try:
        directory, stem, _ = build._names(source, name)
        return (directory / f"{stem}.py").exists()
    except Exception:  # noqa: BLE001 - any doubt: treat it as cached, compile nothing ahead
        return True


def _split(costs: list) -> int:
    """Where the child's share starts: the program compiles kernels [0, m) and then waits
    for the child's [m, n), which it compiled meanwhile; the m with the least time. The
    child's side also pays for forking, writing the cache and the program's loads from
    it: about one trivial kernel's compile."""
    best, best_m = None, len(costs)
    for m in range(1, len(costs)):
        t = max(sum(costs[:m]), 1.0 + sum(costs[m:]))
        if best is None or t < best:
            best, best_m = t, m
    return best_m


class Ahead:
    """The child compiling kernels for one program (or nothing: `pid` None)."""

    def __init__(self, pid=None, fd=None, sources=(), emitted=None):
        self.emitted = emitted or {}  # id(group) -> emit_kernel's (source, KernelSource)
        self.forked = pid is not None
        self.pid = pid
        self.fd = fd
        self.pending = set(sources)  # sources the child will report
        self._by_index = list(sources)
        self.reported = {}           # source -> (the child compiled it, wrote its file)
        self._buf = b""
        self._heard = None  # (monotonic time, child's CPU seconds) at its last sign of life
        self.own = None  # the child compiling the program's own share (an Ahead), if any
        self.stems = set()  # its kernels' stems in kernelfiles.COMPILING_AHEAD, until closed

    def _owner(self, source: str) -> "Ahead":
        own = self.own
        return own if own is not None and source in own.pending else self

    def emit(self, part, group, io):
        """`emit_kernel(part, group, io)`, as `emit_all` emitted it (once is enough): its
        (source, KernelSource), or the exception emission raised."""
        got = self.emitted.pop(id(group), None)
        if got is None:
            return emit_kernel(part, group, io)
        if isinstance(got, Exception):
            raise got
        return got

    def wait(self, source: str) -> None:
        """Return once the child has compiled `source`, or failed to, or will not."""
        if self._owner(source) is not self:
            return self.own.wait(source)
        if source in self.pending and source not in self.reported and self.fd is not None:
            # (silent since its last report or the first wait; its CPU time counts from now)
            since = self._heard[0] if self._heard is not None else time.monotonic()
            self._heard = (since, _cpu_seconds(self.pid))
        while source in self.pending and source not in self.reported and self.fd is not None:
            try:
                ready, _, _ = select.select([self.fd], [], [], STALL_SECONDS)
            except BaseException:  # Ctrl-C: stop the children, raise in the program only
                self.close()
                raise
            if not ready:
                if self._stalled():  # the program compiles the rest itself
                    self._stop()
                    break
                continue
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:  # the child is done (or gone)
                self._stop()
                break
            self._heard = (time.monotonic(), _cpu_seconds(self.pid))
            self._buf += chunk
            *lines, self._buf = self._buf.split(b"\n")
            for line in lines:
                index, *done = line.split()
                # (compiled it, wrote its source, wrote its object file), or None: it
                # failed there, compile it here
                self.reported[self._by_index[int(index)]] = \
                    tuple(map(int, done)) if done != [b"failed"] else None

    def _stalled(self) -> bool:
        """After STALL_SECONDS without a report: whether to give up on the child. Not while
        it uses CPU time (it compiles: slowly on a loaded machine, or a large kernel), up to
        MAX_SILENT_SECONDS since its last report; a child stopped or blocked uses none."""
        since, cpu = self._heard
        now = _cpu_seconds(self.pid)
        if now is None or cpu is None or now - cpu < MIN_PROGRESS_SECONDS:
            return True
        if time.monotonic() - since >= MAX_SILENT_SECONDS:
            return True
        self._heard = (since, now)  # (the next STALL_SECONDS must show progress too)
        return False

    @contextlib.contextmanager
    def loading(self, source: str):
        """Around the program's load of `source`: first waits for the child; afterwards
        counts what the child did for it (compiling it, writing its files) as done for this
        program, unless the program did it again itself."""
        if self._owner(source) is not self:
            with self.own.loading(source):
                yield
            return
        self.wait(source)
        done = self.reported.pop(source, None)  # (None: the child did not deliver it)
        self.pending.discard(source)
        if not self.pending:
            self._stop()
        if done is None:
            yield
            return
        before = build.compile_stats()
        yield
        after = build.compile_stats()
        compiled, wrote, wrote_object = done
        if compiled and after["numba_compiles"] == before["numba_compiles"]:
            # Counted as if compiled here: the child's compile (which imported the module
            # there), not the load of its work here (its object file, or Numba's cache).
            build._bump("numba_compiles")
            if after["objects_loaded"] > before["objects_loaded"]:
                build._bump("objects_loaded", -1)
                build._bump("modules_loaded")
            elif after["numba_cache_hits"] > before["numba_cache_hits"]:
                build._bump("numba_cache_hits", -1)
        if wrote and after["modules_written"] == before["modules_written"]:
            build._bump("modules_written")
        if wrote_object and after["objects_written"] == before["objects_written"]:
            build._bump("objects_written")

    def close(self) -> None:
        """Stop the children if they still run, and reap them."""
        self._stop()
        if self.own is not None:
            self.own.close()
        kernelfiles.COMPILING_AHEAD.difference_update(self.stems)  # (loaded now, or not)
        self.stems = set()

    def _stop(self) -> None:
        """Stop this child if it still runs, and reap it."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.pid is not None:
            pid, self.pid = self.pid, None
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
                if not done:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        self.pending.clear()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - at interpreter exit
            pass


def _set_up_numba() -> None:
    """Numba's compiler set-up (its typing and lowering registries: ~0.3 s, once per
    process), done before forking: the program needs it anyway, and the child then
    inherits it instead of doing it again on a CPU the program may need."""
    try:
        with build.setting_up_numba():  # (Ctrl-C here: undone, see there)
            from numba.core.registry import cpu_target

            cpu_target.typing_context.refresh()
            cpu_target.target_context.refresh()
    except Exception:  # noqa: BLE001 - the child sets up as the program would
        pass


def _compile_in_child(source: str, name: str) -> None:
    """What the child does for each of its kernels (tests replace it: the child is a fork,
    so it runs whatever this name holds when the program forks)."""
    build.load_module(source, name)


def emit_all(program) -> dict:
    """id(group) -> emit_kernel's (source, KernelSource), or the exception it raised, for
    each of `program`'s kernels, as Program._kernel_op takes them (through Ahead.emit): each
    kernel's source is emitted once. SymbolicDimError propagates: such a graph is compiled
    per size instead (codegen.runtime.compile_numba)."""
    out = {}
    for group in program.part.steps:
        if not isinstance(group, KernelGroup):
            continue
        try:
            out[id(group)] = emit_kernel(program.part, group, program.updates_in(group))
        except SymbolicDimError as exc:
            exc.kernel = group.name  # (for the per-size program's reason)
            raise
        except Exception as exc:  # noqa: BLE001 - the program falls back and reports it
            out[id(group)] = exc
    return out


def _become_invisible(parent: int) -> None:
    """In the child, first: die with the program (even when it is SIGKILLed: Linux's
    parent-death signal, plus a check that it is still there, for the race before that),
    and run none of its signal handlers (Ctrl-C or SIGTERM to the process group ends the
    child quietly; the program handles the signal once) nor wake its event loop."""
    try:
        forksafe.libc().prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(0)
    try:
        signal.set_wakeup_fd(-1)
    except (ValueError, OSError):  # (not the main thread: no Python handler runs here)
        pass
    for signum in signal.valid_signals():
        try:
            handler = signal.getsignal(signum)
            if callable(handler) or signum == signal.SIGINT:
                signal.signal(signum, signal.SIG_DFL)
        except (ValueError, OSError, TypeError):
            pass


def _drop_inherited_fds(keep: int) -> None:
    """In the child: every descriptor it inherited but `keep` (its report pipe) and
    CHILD_KEEPS_FDS made /dev/null, stdin, stdout and stderr included. A fork inherits the program's files,
    pipes and sockets, and a child kept each open as long as it compiled: a subprocess
    the program fed through a pipe saw the end of its input 7.8 s after the program
    closed it (a cold compile meanwhile), and a peer would see a socket's close as late.
    The numbers stay taken (by /dev/null), so nothing in the child that still holds one (a
    logging handler's stream) writes into a file the child opens later."""
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:  # (no /proc: stdin, stdout and stderr only, as before)
        fds = [0, 1, 2]
    for fd in fds:
        if fd not in (keep, devnull) and fd not in CHILD_KEEPS_FDS:
            try:
                os.dup2(devnull, fd)
            except OSError:  # (the listing's own descriptor, closed since)
                pass
    os.close(devnull)


def _block_signals():
    """Block every signal in this thread: the previous mask (None where that is not
    possible)."""
    try:
        return signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    except (AttributeError, OSError, ValueError):
        return None


def _unblock_signals(mask) -> None:
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def start(program) -> Ahead:
    """Fork children compiling `program`'s kernels, when that can help: one the later part,
    one the program's own share (so that Numba's compiler and LLVM's memory stay out of the
    program, which only loads the object files: see CHILD_COMPILES_ALL)."""
    emitted = dict(program.emitted)  # (emit_all's, made by the program first)
    if not (ENABLED and sys.platform.startswith("linux") and hasattr(os, "fork")) \
            or _cpus() < 2:
        return Ahead(emitted=emitted)
    step_sources = getattr(program, "step_sources", {})  # (the numpy steps' kernels)
    work, seen = [], set()
    # (first, what the runner loads besides the steps' kernels: codegen.gemm's product
    # kernel, the same large kernel for every program; then the steps', in program order)
    for source, name in getattr(program, "ahead_sources", ()):
        if source not in seen and not _is_cached(source, name):
            seen.add(source)
            work.append((source, name))
    for step in program.part.steps:  # (in program order)
        if isinstance(step, KernelGroup):
            got = emitted.get(id(step))
            if got is None or isinstance(got, Exception):
                continue
            # (what the program loads: one module per distinct code, see canonical)
            source, name = canonical(got[0], step.summary)
        elif id(getattr(step, "eqn", None)) in step_sources:
            _, source, name = step_sources[id(step.eqn)]
        else:
            continue
        if source not in seen and not _is_cached(source, name):
            seen.add(source)
            work.append((source, name))
    if len(work) < (1 if CHILD_COMPILES_ALL else 2) or cache.troubled(cache.dir_path()) \
            or not _fork_is_safe():
        # (nothing imports Numba before this: a cached program may not need it; nor looks
        # for the at-fork hooks, once per process: ~12 ms at 136k objects)
        return Ahead(emitted=emitted)
    numba = build._numba()

    if numba.config.DISABLE_JIT:
        return Ahead(emitted=emitted)
    _set_up_numba()
    m = _split([_cost(s) for s, _ in work]) if len(work) > 1 else 0
    theirs, mine = work[m:], work[:m]
    stems = {build._names(s, n)[1] for s, n in work} - kernelfiles.COMPILING_AHEAD
    kernelfiles.COMPILING_AHEAD.update(stems)  # (before forking: the children's too)
    child = _fork_compiler(theirs)
    if child is None:
        kernelfiles.COMPILING_AHEAD.difference_update(stems)
        return Ahead(emitted=emitted)
    out = Ahead(*child, [s for s, _ in theirs], emitted)
    out.stems = stems
    if mine and CHILD_COMPILES_ALL:  # (if this fork fails, the program compiles them)
        own = _fork_compiler(mine)
        if own is not None:
            out.own = Ahead(*own, [s for s, _ in mine])
    return out


def _fork_compiler(theirs):
    """(pid, read end of its pipe) of a forked child compiling `theirs` ((source, name)
    pairs) in order into the cache, reporting each on the pipe; None if it cannot fork
    (or may not now: codegen.forksafe)."""
    r, w = os.pipe()
    # Signals wait (blocked) across the fork, until the child has dropped the program's
    # handlers: one sent to the process group meanwhile (a second child is forked while
    # the first compiles) must not run the program's handler in the child.
    mask = _block_signals()
    # The program's objects must not be collected in the child: a collection there would
    # run the finalizers (__del__, weakref callbacks) of the user's garbage a second time,
    # in the child. No collection until the fork, then the child freezes every object it
    # inherited (out of its collector's reach: it collects only its own garbage, and does
    # not walk the program's objects either).
    collecting = gc.isenabled()
    gc.disable()
    try:
        with warnings.catch_warnings():
            # Python 3.12+ warns when the process has other threads: what the child takes
            # is held across the fork (codegen.forksafe), and it runs no kernel.
            warnings.simplefilter("ignore", DeprecationWarning)
            parent = os.getpid()
            pid = forksafe.fork(STALL_SECONDS)
        if pid == 0:
            gc.freeze()
    except OSError:
        pid = None
    finally:
        if collecting:
            gc.enable()
    if pid is None:
        _unblock_signals(mask)
        os.close(r)
        os.close(w)
        return None
    if pid != 0:
        _unblock_signals(mask)
    if pid == 0:  # the child: compile, report, leave without any of the parent's clean-up
        code = 0
        try:
            _become_invisible(parent)
            _unblock_signals(mask)  # (a signal that came meanwhile: its default action)
            os.close(r)
            _drop_inherited_fds(w)
            for k, (source, name) in enumerate(theirs):
                before = dict(build.STATS)
                try:
                    _compile_in_child(source, name)
                except Exception:  # noqa: BLE001 - the program compiles it (and reports)
                    os.write(w, f"{k} failed\n".encode())
                    continue
                done = [int(build.STATS[c] > before[c])
                        for c in ("numba_compiles", "modules_written", "objects_written")]
                os.write(w, f"{k} {' '.join(map(str, done))}\n".encode())
        except BaseException:  # noqa: BLE001 - whatever happens, leave
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


__all__ = ["CHILD_COMPILES_ALL", "ENABLED", "STALL_SECONDS", "Ahead", "emit_all", "start"]
