"""What a step reads from the process rather than from its arguments or its objects: the
environment (`os.environ[...]`, `os.getenv`) and the command line (`sys.argv`), and how
a call's arguments select its trace (keyword or positional, defaults, a step counter).
Each test is written the way a user writes the program and compares with eager.

Tiny shapes shared with the other tracer tests (a 6x4 batch).
"""
import os
import sys
import warnings
from os import environ as _environ

import numpy as np
import pytest

import eager
import tracer

BACKENDS = ["numba", "interpret"]


def _x(k=0):
    return eager.tensor(np.random.default_rng(k).standard_normal((6, 4)).astype(np.float32))


def _ratio(out, x):
    return float(out.numpy()[0, 0] / x.numpy()[0, 0])


# ------------------------------------------------------------- the environment, argv

def _environ_read(x):
    return x * float(os.environ["TJ_TEST_SCALE"])


def _getenv_read(x):
    return x * float(os.getenv("TJ_TEST_SCALE", "1"))


def _environ_get(x):
    return x * float(os.environ.get("TJ_TEST_SCALE", "1"))


def _environ_bound(x):
    return x * float(_environ["TJ_TEST_SCALE"])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("read", [_environ_read, _getenv_read, _environ_get, _environ_bound])
def test_an_environment_variable_changed_between_calls_is_seen(read, backend, monkeypatch):
    # Found here: a scale read from the environment was baked into the trace; after
    # os.environ changed, the compiled call still used the old value.
    f = tracer.function(read, backend=backend)
    for value in ["2", "3", "2"]:
        monkeypatch.setenv("TJ_TEST_SCALE", value)
        x = _x()
        assert _ratio(f(x), x) == pytest.approx(_ratio(read(x), x)) == float(value)
    assert f.trace_count == 2


def test_an_unrelated_environment_change_still_retraces_only_when_it_changes(monkeypatch):
    # (the guard is on the environment's contents: a change of any variable traces again,
    # an unchanged environment does not)
    f = tracer.function(_getenv_read, backend="interpret")
    monkeypatch.setenv("TJ_TEST_SCALE", "2")
    for _ in range(3):
        f(_x())
    assert f.trace_count == 1
    (concrete,) = [c for bucket in f._cache.values() for c in bucket]
    monkeypatch.setenv("TJ_TEST_OTHER", "secret value")
    # (the explanation names the variable, never a value: the environment holds secrets)
    assert concrete.guard_failure().endswith("changed at TJ_TEST_OTHER")
    f(_x())
    assert f.trace_count == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_command_line_changed_between_calls_is_seen(backend, monkeypatch):
    def step(x):
        return x * float(sys.argv[1])

    monkeypatch.setattr(sys, "argv", ["prog", "2"])
    f = tracer.function(step, backend=backend)
    for value in ["2", "3"]:
        sys.argv[1] = value
        x = _x()
        assert _ratio(f(x), x) == float(value)
    sys.argv = ["prog", "5"]  # (a new list)
    x = _x()
    assert _ratio(f(x), x) == 5.0


# ------------------------------------------------------------- which trace a call takes

def _scaled(x, flag=False, *, scale=2.0):
    return x * scale if flag else x - 1.0


def test_a_flag_passed_by_position_or_by_name_is_one_trace():
    # Found here: f(x, True) and f(x, flag=True) (and f(x), f(x, False)) made a trace
    # each: the arguments are bound to the signature (defaults filled in) before keying.
    f = tracer.function(_scaled, backend="interpret")
    x = _x()
    for call in (lambda: f(x, True), lambda: f(x, flag=True), lambda: f(flag=True, x=x),
                 lambda: f(x, True, scale=2.0)):
        np.testing.assert_array_equal(call().numpy(), _scaled(x, True).numpy())
    assert f.trace_count == 1
    for call in (lambda: f(x), lambda: f(x, False), lambda: f(x, flag=False)):
        np.testing.assert_array_equal(call().numpy(), _scaled(x).numpy())
    assert f.trace_count == 2
    np.testing.assert_array_equal(f(x, True, scale=3.0).numpy(), _scaled(x, True, scale=3.0).numpy())
    assert f.trace_count == 3
    with pytest.raises(TypeError):  # (as eagerly)
        f(x, True, flag=True)


def test_a_step_counter_argument_warns_once_naming_it_and_the_line():
    # A Python int that changes every call traces every call: correct, but each call
    # compiles. After a bounded number of traces one warning names the argument, the
    # user's line and what to do.
    def step(x, step_no):
        return x * (0.5 ** step_no)

    f = tracer.function(step, backend="interpret")
    x = _x()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(12):
            got = f(x, n)  # the user's line
            np.testing.assert_allclose(got.numpy(), step(x, n).numpy(), rtol=1e-6)
    assert f.trace_count == 12
    messages = [str(w.message) for w in caught if "traced" in str(w.message)]
    assert len(messages) == 1, messages
    assert "the changing argument: step_no" in messages[0]
    assert f"test_host_reads.py:{_line_of('got = f(x, n)')}" in messages[0]
    assert "tensor" in messages[0] and "static_argnames" in messages[0]
    assert caught[0].filename == __file__


def _line_of(text):
    with open(__file__) as fh:
        return next(i for i, line in enumerate(fh, 1) if text in line and "_line_of" not in line)


# ------------------------------------------------------------- containers returned

@pytest.mark.parametrize("backend", BACKENDS)
def test_a_list_or_dict_argument_returned_is_the_callers_own(backend):
    # Found here: `return xs` of a list argument gave a new list holding the same tensors;
    # eagerly it is the caller's list (appending to the result appends to xs).
    def step(xs, cfg, pair):
        return xs, (cfg, xs[0] * 2), {"inner": pair[1]}

    f = tracer.function(step, backend=backend)
    for k in range(2):
        xs, cfg, pair = [_x(k)], {"w": _x(k + 1)}, (_x(0), [_x(1)])
        got = f(xs, cfg, pair)
        expected = step(xs, cfg, pair)
        assert got[0] is xs and got[1][0] is cfg and got[2]["inner"] is pair[1]
        assert got[0][0] is xs[0]
        np.testing.assert_allclose(got[1][1].numpy(), expected[1][1].numpy(), rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_list_built_in_the_step_is_a_fresh_list_each_call(backend):
    def step(x):
        xs = [x * 2]
        xs.append(x + 1)
        return xs

    f = tracer.function(step, backend=backend)
    x = _x()
    first, second = f(x), f(x)
    assert type(first) is list and first is not second
    for a, b in zip(first, step(x)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)


# ------------------------------------------------------------- names from a config

_CONFIG = {"act": "relu", "slot": "a"}


class _Slots:
    a = 1.0
    b = 2.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_getattr_with_a_name_from_a_config_that_changes(backend, monkeypatch):
    # (already sound: the dict entry and the attribute read through it are guarded)
    import eager.nn.functional as F

    slots = _Slots()

    def step(x):
        return getattr(F, _CONFIG["act"])(x) * getattr(slots, _CONFIG["slot"])

    f = tracer.function(step, backend=backend)
    for act, slot in [("relu", "a"), ("tanh", "a"), ("tanh", "b"), ("relu", "a")]:
        monkeypatch.setitem(_CONFIG, "act", act)
        monkeypatch.setitem(_CONFIG, "slot", slot)
        np.testing.assert_allclose(f(_x()).numpy(), step(_x()).numpy(), rtol=1e-6)
    slots.b = 5.0
    monkeypatch.setitem(_CONFIG, "slot", "b")
    np.testing.assert_allclose(f(_x()).numpy(), step(_x()).numpy(), rtol=1e-6)
    assert f.trace_count == 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_setattr_with_a_name_from_a_config_sets_it_at_every_call(backend, monkeypatch):
    # (already sound: the attribute set is guarded; a call that finds it reset traces
    # again, sees the rebinding and runs eagerly with a warning)
    def step(x):
        setattr(slots, _CONFIG["slot"], 3.0)
        return x * 2

    for slot in ("a", "b"):
        slots = _Slots()
        monkeypatch.setitem(_CONFIG, "slot", slot)
        f = tracer.function(step, backend=backend)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            for _ in range(3):
                setattr(slots, slot, 0.0)
                np.testing.assert_allclose(f(_x()).numpy(), _x().numpy() * 2, rtol=1e-6)
                assert getattr(slots, slot) == 3.0
