"""Python's and numpy's random generators, which a trace does not record.

`random.random()`, `np.random.rand()` or `rng.normal()` inside a traced function run once,
while tracing: the trace would use those numbers at every call, where eager draws new ones.
tracing.trace_function notes the generators' states before the traced code runs (the two
global ones and any generator object among the call's roots: an `rng` global or closure
variable) and, if one moved, puts them all back and raises `HostRandomInTrace`: the
signature then runs eagerly (tracer.function), drawing exactly eager's numbers.

Values from the outside world that the user's code reads while it is traced are refused the
same way (`outside_reads`): fresh OS entropy (`np.random.default_rng()`, `PCG64()`,
`random.Random()`, `secrets`, `os.urandom`, `uuid.uuid4()`) and the clock (`time.time()`,
`perf_counter()`, `datetime.now()`, `date.today()`, ...). A profile hook on the tracing
thread sees every call of those C functions, however the user's code reached them (`from
time import time` at the top of a module, `now = time.monotonic` kept from before the call);
a call from the user's code is noted, other threads and tracejit's own calls pass unseen.

Files and the terminal are the outside world too: `open()` (so `Path.read_text()`,
`json.load(open(p))`, `np.loadtxt(p)`), `input()`, `os.read`, `os.stat` (`os.path.exists`,
`getmtime`), `os.listdir` / `scandir`, and the read methods of `sys.stdin` and of the streams
the call can reach (a file or StringIO opened before the call: `fh.readline()`, a bound
`read = buf.read`). These are noted through the stdlib's and libraries' frames (pathlib,
json, numpy) up to the user's line that led to them; an import or a warning's source line
(importlib, linecache) is not a read of the user's data.
"""
from __future__ import annotations

import builtins
import datetime
import io
import os
import random
import sys
import threading
import time
import types
from contextlib import contextmanager

import numpy as np

from eager.errors import _LIBRARY_DIRS, _is_library_file

from .discover import _SKIP_PREFIXES as _LIBRARIES
from .rebinding import _where_defined
from .errors import TracingError


class HostRandomInTrace(TracingError):
    """The traced code drew numbers from Python's `random` or numpy's global random state:
    a trace would freeze them (the same numbers at every call). @function runs that
    signature eagerly, with the generators put back so that run draws eager's numbers."""


_GENERATORS = (random.Random, np.random.Generator, np.random.RandomState)


def _generator_state(g):
    if isinstance(g, np.random.Generator):
        return g.bit_generator.state
    return g.getstate() if isinstance(g, random.Random) else g.get_state(legacy=False)


def _set_generator_state(g, state) -> None:
    if isinstance(g, np.random.Generator):
        g.bit_generator.state = state
    elif isinstance(g, random.Random):
        g.setstate(state)
    else:
        g.set_state(state)


def _same_state(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_state(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    if isinstance(a, tuple):
        if len(a) != len(b):
            return False
        try:  # (`random`'s 625 ints compared in C: a call per int cost ~3 ms a trace)
            if a == b:
                return True
        except ValueError:  # (arrays inside: compared one by one below)
            pass
        return all(_same_state(x, y) for x, y in zip(a, b))
    return a == b


def host_random_states(roots, reached=()) -> list:
    """(description, generator, state) of Python's and numpy's global generators and of
    the generator objects among the call's roots (an `rng` global or closure variable) or
    `reached` from them ((description, generator): one a bound method `draw = rng.normal`
    holds, found by rebinding.Snapshot)."""
    found = [("`random`", random._inst, None), ("`numpy.random`", np.random.mtrand._rand, None)]
    seen = {id(g) for _desc, g, _state in found}
    for desc, obj in list(roots) + list(reached):
        if isinstance(obj, _GENERATORS) and id(obj) not in seen:
            seen.add(id(obj))
            found.append((f"the generator {desc}", obj, None))
    return [(desc, g, _generator_state(g)) for desc, g, _ in found]


def refuse_host_random(before: list, fn, name: str, outside=()) -> None:
    """Raise HostRandomInTrace if a generator in `before` moved or the user's code read a
    value from the outside world (`outside`: the notes of `outside_reads`)."""
    moved = [desc for desc, g, state in before if not _same_state(_generator_state(g), state)]
    if not moved and not outside:
        return
    for _desc, g, state in before:
        _set_generator_state(g, state)
    consumed = [(where, what) for where, what in outside if what.__class__ is _Consumed]
    if consumed:
        where, what = consumed[0]
        raise TracingError(
            f"{where}: {name} reads {what} while it is traced: a trace would use that value "
            f"at every call, and what it read cannot be put back for an eager run. Read it "
            f"outside the function and pass the value in as an argument")
    if outside:
        where, what = outside[0]
        raise HostRandomInTrace(
            f"{where}: {name} reads {what} while it is traced; a trace would use that value "
            f"at every call. Read it outside the function and pass it in as an argument "
            f"(random numbers: eager.rand / eager.randn / eager.randint are recorded, new "
            f"numbers at every call; a generator seeded inside, np.random.default_rng(seed), "
            f"gives the same numbers at every call and traces)")
    raise HostRandomInTrace(
        f"{_where_defined(fn)}: {name} draws numbers from {' and '.join(moved)} while it "
        f"is traced; a trace would use those numbers at every call. Draw them with "
        f"eager.rand / eager.randn / eager.randint (recorded: new numbers at every call), "
        f"or pass them in as arguments")


# ------------------------------------------------------------------ the outside world
# Seen by a profile hook (sys.setprofile, on the tracing thread only) at each call of a C
# function: it catches every binding of it (`from time import time`, `now = time.monotonic`
# kept from before the call), which wrapping the module attributes while tracing did not.
_STDLIB = os.path.dirname(os.__file__) + os.sep
# (frames of these files are skipped: the stdlib's generators and ids calling the clock or
# the entropy source for the user: `random.Random()`, numpy's default_rng() through
# `secrets`, `uuid.uuid4()`)
_PASS_THROUGH = (random.__file__, os.path.join(_STDLIB, "secrets.py"),
                 os.path.join(_STDLIB, "uuid.py"))
_CLOCKS = ("time", "time_ns", "perf_counter", "perf_counter_ns", "monotonic",
           "monotonic_ns", "process_time", "process_time_ns", "thread_time", "thread_time_ns")
_ENTROPY = "fresh OS entropy ({})"
# C functions reading the clock or the OS's entropy: what the hook reports for each
_OUTSIDE = {getattr(time, name): f"the clock (time.{name}())"
            for name in _CLOCKS if hasattr(time, name)}
_OUTSIDE[os.urandom] = _ENTROPY.format("os.urandom(): np.random.default_rng(), SystemRandom, "
                                       "secrets, uuid.uuid4()")
if hasattr(os, "getrandom"):
    _OUTSIDE[os.getrandom] = _ENTROPY.format("os.getrandom()")
# Calendar functions that read the clock when given no time (`time.localtime()`,
# `time.strftime("%H:%M")`), with the position of that optional argument. Called through
# the module attribute they are wrapped while a thread traces (the wrapper sees whether a
# time was given); a name bound before the call (`from time import localtime`) reaches the
# C function, which the hook reports whatever its arguments (it cannot see them).
_CALENDAR = {"localtime": 0, "gmtime": 0, "ctime": 0, "asctime": 0, "strftime": 1}
for _name in _CALENDAR:
    _OUTSIDE[getattr(time, _name)] = (f"the clock (time.{_name}() bound before the call: "
                                      f"maybe without a time argument)")
# datetime's "now" constructors (C class methods: a new bound object at each lookup, equal
# to and hashed as any other)
for _cls, _name in ((datetime.datetime, "now"), (datetime.datetime, "utcnow"),
                    (datetime.datetime, "today"), (datetime.date, "today")):
    _OUTSIDE[getattr(_cls, _name)] = f"the clock ({_cls.__name__}.{_name}())"


# (the import system; the stdlib's other frozen modules - os, posixpath, genericpath - are
# passed through like its files)
_IMPORTS = ("<frozen importlib", "<frozen zipimport")
_EAGER = tuple(os.path.join(root, "eager", "") for root in _LIBRARY_DIRS)


class _Through(str):
    """What a C function reads, noted at the first user frame above the stdlib's and the
    libraries' (pathlib's read_text, json.load, np.loadtxt reach `open` for the user)."""


class _Consumed(_Through):
    """A read that takes its data away (a terminal's line, a pipe's bytes): a trace cannot
    put it back for an eager run, so it is refused with a TracingError."""


_FILES = "a file (open(): also Path.read_text, json.load, np.loadtxt, eager.load)"
_OUTSIDE[io.open] = _Through(_FILES)
_OUTSIDE[os.read] = _Consumed("a file descriptor (os.read())")
for _fn, _what in ((os.open, "os.open()"),
                   (os.stat, "os.stat(): os.path.exists, isfile, getsize, getmtime"),
                   (os.lstat, "os.lstat()"), (os.listdir, "os.listdir()"),
                   (os.scandir, "os.scandir(): also glob, Path.iterdir"),
                   (os.access, "os.access()"), (os.readlink, "os.readlink()"),
                   (getattr(os, "pread", None), "os.pread()")):
    if _fn is not None:
        _OUTSIDE[_fn] = _Through(f"the file system ({_what})")
_STREAM_READS = ("read", "read1", "readline", "readlines", "readinto", "readinto1", "readall")
# (reading a source line for a warning or a traceback, importing a module: not the user's
# data, though the user's line led to them)
_NOT_A_READ = tuple(os.path.join(_STDLIB, f) for f in (
    "linecache.py", "tokenize.py", "traceback.py", "warnings.py", "inspect.py"))


def _stream_reads(streams) -> dict:
    """{bound read method: what}: the read methods of sys.stdin (and its buffer) and of
    `streams` (made before the call, reached from it). A bound builtin method hashes and
    compares by its object and its C function, so the hook's one lookup finds a fresh
    `sys.stdin.readline` too."""
    stdin = sys.stdin
    # (a seekable stdin - a StringIO, a file - is put back by rebinding.Snapshot)
    kind = _Through if _seekable(stdin) else _Consumed
    out = {builtins.input: kind("the terminal (input())")}
    found = [(s, f"a stream opened before the call ({type(s).__name__})") for s in streams]
    if stdin is not None:
        found += [(stdin, "the terminal (sys.stdin)"),
                  (getattr(stdin, "buffer", None), "the terminal (sys.stdin.buffer)")]
    for stream, what in found:
        if stream is None:
            continue
        kind = _Through if _seekable(stream) else _Consumed
        for name in _STREAM_READS:
            method = getattr(stream, name, None)
            if isinstance(method, types.BuiltinMethodType):
                out[method] = kind(what)
    return out


def _seekable(stream) -> bool:
    try:
        return bool(stream.seekable())
    except Exception:  # noqa: BLE001 - (closed, detached, not a stream: not put back)
        return False
_watching = threading.local()
_lock = threading.Lock()
_installed: list = []  # (owner, attribute, original) while any thread traces
_tracing_threads = [0]


def _note(what: str, frame) -> None:
    """Note `what`, read by `frame`'s code (or, through the stdlib's generators, by their
    caller's), if that is the user's."""
    notes = getattr(_watching, "notes", None)
    if notes is None:
        return
    while frame is not None and frame.f_code.co_filename in _PASS_THROUGH:
        frame = frame.f_back
    if what.__class__ is _Through:
        frame = _user_frame_above(frame)
    if frame is None:
        return
    filename = frame.f_code.co_filename
    if _is_library_file(filename) or filename.startswith(_STDLIB):
        return  # (tracejit's own timing, logging's timestamps, tempfile's names)
    notes.append((f"{os.path.basename(filename)}:{frame.f_lineno}", what))


def _user_frame_above(frame):
    """The first frame at or above `frame` outside the stdlib, the libraries and eager (the
    user-facing API: eager.load opens a file for the user); None where the way up passes
    an import, a warning's or traceback's source line, or tracejit's own machinery."""
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(_IMPORTS) or filename in _NOT_A_READ:
            return None
        if filename.startswith(_EAGER) or filename.startswith(_LIBRARIES) \
                or filename.startswith(_STDLIB) or filename.startswith("<frozen"):
            frame = frame.f_back
            continue
        return frame
    return None


def _profile_hook(previous, table=None):
    """The tracing thread's profile function: notes each call of a C function that reads
    the clock or fresh entropy; a profiler that was active (cProfile) keeps its events.
    (It runs at every call and return the trace makes: kept to one dict lookup.)"""
    get = (table or _OUTSIDE).get

    def hook(frame, event, arg):
        if event == "c_call":
            what = get(arg)  # (C functions hash by identity: never raises)
            if what is not None:
                _note(what, frame)

    def chained(frame, event, arg):
        hook(frame, event, arg)
        previous(frame, event, arg)

    return hook if previous is None else chained


def _seed_watched(original):
    def seed(self, a=None, *args, **kwargs):
        if a is None:
            # (C code reads the OS's entropy here, unseen by the profile hook)
            _note(_ENTROPY.format("a random.Random() seeded from the OS"), sys._getframe(1))
        return original(self, a, *args, **kwargs)

    seed.__wrapped__ = original
    return seed


def _wrapped(original, what):
    def watched(*args, **kwargs):
        _note(what, sys._getframe(1))
        return original(*args, **kwargs)

    watched.__wrapped__ = original
    return watched


def _calendar_watched(original, name, pos):
    def watched(*args, **kwargs):
        if len(args) <= pos or args[pos] is None:
            _note(f"the clock (time.{name}() without a time argument)", sys._getframe(1))
        return original(*args, **kwargs)

    watched.__wrapped__ = original
    return watched


def _install(wrap: bool) -> list:
    """Wrap entry points for the threads tracing; returns what was replaced. Always
    `Random.seed` (a class attribute, looked up at each seeding: no earlier binding escapes
    it). `wrap`: also the clock's and os.urandom's module attributes, for a thread whose
    profiler (cProfile's, written in C) the hook cannot chain: there a name bound before the
    call is not seen."""
    targets = [(random.Random, "seed", _seed_watched(random.Random.seed))] if not wrap else []
    if not wrap:
        targets += [(time, name, _calendar_watched(time.__dict__[name], name, pos))
                    for name, pos in _CALENDAR.items()]
    if wrap:
        targets += [(time, name, _wrapped(getattr(time, name), f"the clock (time.{name}())"))
                    for name in _CLOCKS if hasattr(time, name)]
        targets.append((os, "urandom", _wrapped(os.urandom, _OUTSIDE[os.urandom])))
        # (numpy's SeedSequence(), SystemRandom and secrets draw through random._urandom)
        targets.append((random, "_urandom", _wrapped(random._urandom, _OUTSIDE[os.urandom])))
    installed = []
    for owner, attr, wrapper in targets:
        installed.append((owner, attr, owner.__dict__[attr]))
        setattr(owner, attr, wrapper)
    return installed


def _uninstall(installed: list) -> None:
    while installed:
        owner, attr, original = installed.pop()
        setattr(owner, attr, original)


_wrapping_threads = [0]
_wrappers: list = []  # (owner, attribute, original) while a thread traces under cProfile


@contextmanager
def outside_reads(streams=()):
    """Within the block, the list it gives collects ('file.py:LINE', what) for each read of
    the clock, of fresh OS entropy, of a file or the terminal, made by the user's code in
    this thread; `streams`: files or StringIOs made before the call that it can reach."""
    outer = getattr(_watching, "notes", None)
    notes: list = []
    previous = sys.getprofile()
    # (a profiler the hook cannot chain - cProfile's is not callable - keeps its events)
    wrap = outer is None and previous is not None and not callable(previous)
    with _lock:
        if _tracing_threads[0] == 0:
            _installed.extend(_install(False))
        _tracing_threads[0] += 1
        if wrap:
            if _wrapping_threads[0] == 0:
                _wrappers.extend(_install(True))
            _wrapping_threads[0] += 1
    _watching.notes = notes
    hooked = outer is None and not wrap
    if hooked:
        sys.setprofile(_profile_hook(previous, {**_OUTSIDE, **_stream_reads(streams)}))
    try:
        yield notes
    finally:
        if hooked:
            sys.setprofile(previous)
        _watching.notes = outer
        if outer is not None:
            outer.extend(notes)  # (a trace made inside a trace: the outer one read them too)
        with _lock:
            _tracing_threads[0] -= 1
            if _tracing_threads[0] == 0:
                _uninstall(_installed)
            if wrap:
                _wrapping_threads[0] -= 1
                if _wrapping_threads[0] == 0:
                    _uninstall(_wrappers)
