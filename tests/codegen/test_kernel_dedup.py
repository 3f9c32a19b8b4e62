"""Identical kernels are compiled once: kernels whose code differs only in the names of the
IR values and user lines they cite (an unrolled loop's steps), or in where a slice of one
input starts (each step's slice of a whole sequence, passed from its offset), are one
compiled module (kernel_source.canonical), called once per step, one entry of the disk
cache, shared by every function that has it. Each step still has its own annotated source
and name, in describe_steps(), error messages and fallback warnings."""
import warnings

import numpy as np
import pytest

import codegen
import eager
import tracer
from codegen import FallbackWarning

STEPS = 3


def _rnn(xs, h, w):
    for t in range(STEPS):
        h = ((h @ w) + xs[t]).tanh() * 0.5
    return h


def _inputs():
    return eager.randn(STEPS, 4, 8), eager.randn(4, 8), eager.randn(8, 8)


def _eager_rnn(xs, h, w):
    return _rnn(xs, h, w).numpy()


def test_three_identical_steps_are_one_compiled_kernel_called_three_times():
    args = _inputs()
    f = tracer.function(_rnn)
    got = f(*args).numpy()
    np.testing.assert_allclose(got, _eager_rnn(*args), rtol=1e-6, atol=1e-6)
    c = f.get_concrete_function(*args)
    program = c.program
    assert len(c.kernels) == STEPS
    assert len(program.compiled_kernels) == 1
    assert len({k.module for k in c.kernels}) == 1
    assert len({id(k.entry) for k in c.kernels}) == 1
    # each step its own annotated source: the IR values and the slice it reads
    assert len({k.source for k in c.kernels}) == STEPS
    assert "passed from flat offset 32" in c.kernels[1].source
    assert "passed from flat offset 64" in c.kernels[2].source
    assert "[32:]" in program.runner_source and "[64:]" in program.runner_source
    text = program.describe_steps()
    assert f"({STEPS} kernel calls of 1 compiled kernels)" in text, text
    k0 = c.kernels[0].name
    lines = [line for line in text.splitlines() if line.lstrip().startswith("kernel")]
    assert [k.name in line for k, line in zip(c.kernels, lines)] == [True] * STEPS, text
    assert [f"(the code of {k0})" in line for line in lines] == [False, True, True], text


def test_a_second_function_with_the_same_kernel_reuses_it_without_compiling():
    args = _inputs()
    f = tracer.function(_rnn)
    f(*args)

    def other(xs, h, w):  # another function, another file line: the same code
        for t in range(STEPS):
            h = ((h @ w) + xs[t]).tanh() * 0.5
        return h
    g = tracer.function(other)
    before = codegen.compile_stats()
    got = g(*args).numpy()
    after = codegen.compile_stats()
    np.testing.assert_allclose(got, _eager_rnn(*args), rtol=1e-6, atol=1e-6)
    assert after["numba_compiles"] == before["numba_compiles"]
    assert after["modules_written"] == before["modules_written"]
    kf = f.get_concrete_function(*args).kernels
    kg = g.get_concrete_function(*args).kernels
    assert {k.module for k in kg} == {k.module for k in kf}
    assert kg[0].entry is kf[0].entry
    assert all("other" in k.name for k in kg)


def test_kernels_differing_in_a_constant_stay_apart():
    def f(xs, h, w):
        h = ((h @ w) + xs[0]).tanh() * 0.5
        return ((h @ w) + xs[1]).tanh() * 0.25
    args = _inputs()
    c = tracer.function(f).get_concrete_function(*args)
    assert len(c.kernels) == 2 and len(c.program.compiled_kernels) == 2


@pytest.mark.expect_fallback
def test_fallback_warnings_name_each_step_kernel_and_the_users_line(monkeypatch):
    builds = []

    def broken(source, name_hint):
        builds.append(name_hint)
        raise RuntimeError("simulated build failure")

    monkeypatch.setattr(codegen.build, "load_kernel", broken)
    monkeypatch.setattr(codegen.ahead, "ENABLED", False)
    monkeypatch.setattr(codegen.fallback, "_warned", set())
    args = _inputs()
    f = tracer.function(_rnn)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = f(*args).numpy()
    np.testing.assert_allclose(got, _eager_rnn(*args), rtol=1e-6, atol=1e-6)
    messages = [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
    assert len(messages) == STEPS, messages
    for t, message in enumerate(messages):
        assert f"kernel rnn_k{t}_add_tanh_mul " in message, message
        assert "test_kernel_dedup.py:" in message, message
    assert all(w.filename == __file__ for w in caught
               if issubclass(w.category, FallbackWarning))
    assert builds == ["add_tanh_mul"]  # one code, one (failed) build, not one per step
