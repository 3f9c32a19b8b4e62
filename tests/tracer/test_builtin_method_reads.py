"""Values a step reads from outside through C code: builtin methods bound before the call
(`tick = itertools.count().__next__`, `send = gen.send`, `get = cfg.get`, `pop =
queue.popleft`), operator getters, files, the file system and the terminal, buffers read
element by element. Each case is written as a user writes it and run three times, the state
changing between calls, eager against compiled: the compiled calls give eager's values (a
guard, or that signature run eagerly with a RuntimeWarning naming the user's line), or the
call raises a TracingError; never a value baked in at trace time.

Tiny shapes (3 elements).
"""
import collections
import functools
import io
import itertools
import json
import operator
import os
import pathlib
import sys
import warnings

import numpy as np
import pytest

import eager
import tracer

BACKENDS = ["numba", "interpret"]
HERE = os.path.basename(__file__)


def _three_calls(make, backend, fullgraph=False):
    """(eager values, compiled values, warnings) of three calls, each side on a fresh copy of
    the user's state (`make() -> (step, change between calls)`)."""
    seen = []
    for compiled in (False, True):
        step, change = make()
        f = tracer.function(step, backend=backend, fullgraph=fullgraph) if compiled else step
        values = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for k in range(3):
                values.append(float(f(eager.ones(3)).numpy()[0]))
                change(k)
        seen.append((values, [str(w.message) for w in caught
                              if issubclass(w.category, RuntimeWarning)]))
    (eager_values, _), (compiled_values, warned) = seen
    return eager_values, compiled_values, warned


def _nothing(k):
    pass


# ------------------------------------------------ the next element, through a bound method

def _count():
    tick = itertools.count(2).__next__
    return (lambda v: v * float(tick())), _nothing


def _list_iterator():
    nxt = iter([2.0, 3.0, 4.0, 5.0]).__next__
    return (lambda v: v * nxt()), _nothing


def _generator_send():
    def numbers():
        x = 2.0
        while True:
            yield x
            x += 1

    gen = numbers()
    send = gen.send
    return (lambda v: v * send(None)), _nothing


def _map_next():
    nxt = map(float, [2, 3, 4, 5]).__next__
    return (lambda v: v * nxt()), _nothing


def _methodcaller_next():
    it = itertools.count(2)
    take = operator.methodcaller("__next__")
    return (lambda v: v * take(it)), _nothing


def _set_pop():
    pending = {2.0, 3.0, 4.0}
    pop = pending.pop
    return (lambda v: v * pop()), _nothing


@pytest.mark.parametrize("make", [_count, _list_iterator, _generator_send, _map_next,
                                  _methodcaller_next, _set_pop])
def test_the_next_element_through_a_builtin_method_is_refused(make):
    # Found here: `tick = itertools.count(2).__next__` gave 2, 2, 2 compiled (eager 2, 3, 4).
    # (set.pop: put back, the set would pop another element first)
    step, _ = make()
    f = tracer.function(step, backend="interpret")
    with pytest.raises(tracer.TracingError, match="next element of|removes elements of"):
        f(eager.ones(3))


# ------------------------------------------------ containers changed or read through C

def _deque_popleft():
    queue = collections.deque([2.0, 3.0, 4.0, 5.0])
    pop = queue.popleft
    return (lambda v: v * pop()), _nothing


def _list_pop():
    stack = [5.0, 4.0, 3.0, 2.0]
    pop = stack.pop
    return (lambda v: v * pop()), _nothing


def _set_add():
    seen = {1.0}
    add = seen.add

    def step(v):
        add(float(len(seen) + 1))
        return v * float(len(seen))

    return step, _nothing


def _queue_get():
    import queue

    q = queue.Queue()
    for v in (2.0, 3.0, 4.0):
        q.put(v)
    return (lambda v: v * q.get_nowait()), _nothing


def _dict_popitem():
    pending = {2.0: "a", 3.0: "b", 4.0: "c"}
    pop = pending.popitem
    return (lambda v: v * pop()[0]), _nothing


def _dict_get():
    cfg = {"scale": 2.0}
    get = cfg.get

    def change(k):
        cfg["scale"] = 3.0 + k

    return (lambda v: v * get("scale", 1.0)), change


def _itemgetter():
    cfg = {"scale": 2.0}
    scale_of = operator.itemgetter("scale")
    box = [cfg]

    def change(k):
        cfg["scale"] = 3.0 + k

    return (lambda v: v * scale_of(box[0])), change


def _attrgetter():
    class Settings:
        scale = 2.0

    s = Settings()
    scale_of = operator.attrgetter("scale")

    def change(k):
        s.scale = 3.0 + k

    return (lambda v: v * scale_of(s)), change


def _bound_generator_draw():
    rng = np.random.default_rng(0)
    draw = rng.random
    return (lambda v: v * (2.0 + draw())), _nothing


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("make", [_deque_popleft, _list_pop, _set_add, _queue_get,
                                  _dict_popitem, _dict_get, _itemgetter, _attrgetter,
                                  _bound_generator_draw])
def test_containers_behind_builtin_methods_give_eagers_values(make, backend):
    eager_values, compiled_values, _ = _three_calls(make, backend)
    assert compiled_values == eager_values
    assert len(set(eager_values)) == 3


@pytest.mark.parametrize("make", [_deque_popleft, _set_add, _bound_generator_draw])
def test_containers_behind_builtin_methods_raise_under_fullgraph(make):
    with pytest.raises(tracer.TracingError):
        _three_calls(make, "interpret", fullgraph=True)


# ------------------------------------------------ files, the file system, the terminal

@pytest.fixture
def value_file(tmp_path):
    path = tmp_path / "scale.txt"
    path.write_text("2")
    return str(path)


def _writes(path):
    with open(path, "w") as fh:
        fh.write("2")

    def change(k):
        with open(path, "w") as fh:
            fh.write(str(3 + k))

    return change


def _open_read(path):
    def step(v):
        with open(path) as fh:
            return v * float(fh.read())

    return step, _writes(path)


def _json_load(path):
    with open(path, "w") as fh:
        json.dump({"scale": 2}, fh)

    def step(v):
        with open(path) as fh:
            return v * json.load(fh)["scale"]

    def change(k):
        with open(path, "w") as fh:
            json.dump({"scale": 3 + k}, fh)

    return step, change


def _path_read_text(path):
    return (lambda v: v * float(pathlib.Path(path).read_text())), _writes(path)


def _np_loadtxt(path):
    return (lambda v: v * float(np.loadtxt(path))), _writes(path)


def _exists(path):
    flag = path + ".flag"
    if os.path.exists(flag):
        os.remove(flag)

    def change(k):
        if os.path.exists(flag):
            os.remove(flag)
        else:
            open(flag, "w").close()

    return (lambda v: v * (3.0 if os.path.exists(flag) else 2.0)), change


def _listdir(path):
    folder = os.path.join(os.path.dirname(path), "listed")
    if os.path.isdir(folder):
        for name in os.listdir(folder):
            os.remove(os.path.join(folder, name))
    else:
        os.mkdir(folder)

    def change(k):
        open(os.path.join(folder, f"more{k}"), "w").close()

    return (lambda v: v * float(len(os.listdir(folder)))), change


def _file_opened_before(path):
    with open(path, "w") as fh:
        fh.write("2\n3\n4\n")
    fh = open(path)
    return (lambda v: v * float(fh.readline())), _nothing


def _file_iterated(path):
    with open(path, "w") as fh:
        fh.write("2\n3\n4\n")
    fh = open(path)
    return (lambda v: v * float(next(fh))), _nothing


def _stringio_read(path):
    buf = io.StringIO("2\n3\n4\n")
    return (lambda v: v * float(buf.readline())), _nothing


def _bytesio_bound_read(path):
    read = io.BytesIO(b"234").read
    return (lambda v: v * float(read(1))), _nothing


FILE_CASES = [_open_read, _json_load, _path_read_text, _np_loadtxt, _exists, _listdir,
              _file_opened_before, _file_iterated, _stringio_read, _bytesio_bound_read]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("make", FILE_CASES)
def test_reading_files_runs_eagerly_with_eagers_values(make, backend, value_file):
    eager_values, compiled_values, warned = _three_calls(lambda: make(value_file), backend)
    assert compiled_values == eager_values
    assert len(set(eager_values)) > 1
    assert any(HERE in w and "read" in w for w in warned), warned


@pytest.mark.parametrize("make", [_open_read, _np_loadtxt, _file_opened_before])
def test_reading_files_raises_under_fullgraph(make, value_file):
    with pytest.raises(tracer.TracingError, match="read"):
        _three_calls(lambda: make(value_file), "interpret", fullgraph=True)


@pytest.mark.parametrize("read", ["input", "readline"])
def test_stdin_read_inside_gives_eagers_lines(read, monkeypatch):
    def make():
        monkeypatch.setattr(sys, "stdin", io.StringIO("2\n3\n4\n5\n"))
        if read == "input":
            return (lambda v: v * float(input())), _nothing
        return (lambda v: v * float(sys.stdin.readline())), _nothing

    eager_values, compiled_values, warned = _three_calls(make, "interpret")
    assert compiled_values == eager_values == [2.0, 3.0, 4.0]
    assert any("terminal" in w for w in warned)


def test_a_read_that_cannot_be_put_back_is_refused():
    r, w = os.pipe()
    try:
        os.write(w, b"234")
        f = tracer.function(lambda v: v * float(os.read(r, 1)), backend="interpret")
        with pytest.raises(tracer.TracingError, match="cannot be put back"):
            f(eager.ones(3))
    finally:
        os.close(r)
        os.close(w)


def test_writing_a_file_inside_runs_eagerly(tmp_path):
    log = tmp_path / "log.txt"

    def step(v):
        with open(log, "a") as fh:
            fh.write("x")
        return v * 2

    f = tracer.function(step, backend="interpret")
    with pytest.warns(RuntimeWarning, match=HERE):
        for _ in range(3):
            f(eager.ones(3))
    # One write per call, as eagerly, and one more by the trace's run of the first call (a
    # Python side effect of tracing, as print's)
    assert log.read_text() == "xxxx"


def test_imports_and_tracejits_own_reads_do_not_make_a_step_eager():
    def step(v):
        import json as again  # noqa: F401 - (an import reads files: not the user's data)
        warnings.warn("a warning shows its source line", UserWarning)
        return v * 2

    f = tracer.function(step, backend="interpret", fullgraph=True)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        for _ in range(3):
            assert f(eager.ones(3)).numpy().tolist() == [2.0, 2.0, 2.0]
    assert f.trace_count == 1


# ------------------------------------------------ buffers read element by element

def _bytearray():
    buf = bytearray(b"\x02")

    def change(k):
        buf[0] = 3 + k

    return (lambda v: v * float(buf[0])), change


def _array():
    import array

    buf = array.array("d", [2.0])

    def change(k):
        buf[0] = 3.0 + k

    return (lambda v: v * buf[0]), change


def _ctypes_value():
    import ctypes

    c = ctypes.c_double(2.0)

    def change(k):
        c.value = 3.0 + k

    return (lambda v: v * c.value), change


@pytest.mark.parametrize("make", [_bytearray, _array, _ctypes_value])
def test_raw_buffers_read_by_name_warn_and_raise_under_fullgraph(make):
    step, _ = make()
    with pytest.warns(RuntimeWarning, match="read once, at trace time"):
        tracer.function(step, backend="interpret")(eager.ones(3))
    step, _ = make()
    with pytest.raises(tracer.TracingError, match="read once, at trace time"):
        tracer.function(step, backend="interpret", fullgraph=True)(eager.ones(3))


def test_partial_of_next_on_an_outside_iterator_is_refused():
    take = functools.partial(next, iter([2.0, 3.0]))
    f = tracer.function(lambda v: v * take(), backend="interpret")
    with pytest.raises(tracer.TracingError, match="next element"):
        f(eager.ones(3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_instance_attribute_shadowing_the_class_attribute_read_traces_again(backend):
    # Found here: `s.scale = 3.0` set on the instance after a trace that read the class's
    # `scale` kept 2.0 compiled (an attribute added is not a change of any value guarded).
    class Settings:
        scale = 2.0

    def make():
        s = Settings()

        def change(k):
            s.scale = 3.0 + k

        return (lambda v: v * s.scale), change

    eager_values, compiled_values, _ = _three_calls(make, backend)
    assert compiled_values == eager_values == [2.0, 3.0, 4.0]


# ------------------------------------------------ a module of the user's own

@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "tj_user_config.py").write_text('SCALE = 2.0\ntable = {"s": 2.0}\ncalls = 0\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    module = importlib.import_module("tj_user_config")
    yield module
    sys.modules.pop("tj_user_config", None)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_user_modules_attributes_are_guarded(user_module, backend):
    # Found here: `import config; x * config.SCALE` kept 2.0 compiled after config.SCALE = 3
    f = tracer.function(lambda v: v * user_module.SCALE * user_module.table["s"],
                        backend=backend)
    seen = []
    for k in range(3):
        seen.append(float(f(eager.ones(3)).numpy()[0]))
        user_module.SCALE = 3.0 + k
        user_module.table["s"] = 1.0 + k
    assert seen == [4.0, 3.0, 8.0]
    assert f.trace_count == 3


def test_rebinding_a_user_modules_state_runs_eagerly(user_module):
    def counted(v):
        user_module.calls += 1
        return v * 2

    f = tracer.function(counted, backend="interpret")
    with pytest.warns(RuntimeWarning, match="calls"):
        for _ in range(3):
            f(eager.ones(3))
    assert user_module.calls == 3
    with pytest.raises(tracer.TracingError, match="calls"):
        tracer.function(counted, backend="interpret", fullgraph=True)(eager.ones(3))


def test_a_log_file_opened_before_and_written_inside_runs_eagerly(tmp_path):
    path = tmp_path / "log.txt"
    with open(path, "w") as log:
        def step(v):
            log.write("x")
            return v * 2

        f = tracer.function(step, backend="interpret")
        with pytest.warns(RuntimeWarning, match="writes to"):
            for _ in range(3):
                f(eager.ones(3))
    assert path.read_text() == "xxx"  # (the trace's write was put back: one per call)
