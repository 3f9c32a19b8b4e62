"""Eager and compiled math never leak numpy's RuntimeWarnings (inf - inf, 0/0, log(0),
sqrt(-1), overflow): PyTorch does not warn, even under warnings.simplefilter("error")."""
import warnings

import numpy as np
import pytest

import eager
import tracer


def _program(x, y):
    inf = x / y  # 1/0 = inf
    return (inf - inf, y / y, eager.log(y), eager.sqrt(x - 2.0), x ** 1000.0,
            eager.exp(x * 1000.0), eager.asin(x + 1.0), eager.acosh(y), eager.log2(y),
            eager.log10(y), eager.fmod(x, y), eager.remainder(x, y), x // y,
            eager.atanh(x), eager.prod(x * 1e30))


def _inputs():
    return (eager.tensor(np.array([1.0, 1.0, 1.0], np.float32)),
            eager.tensor(np.array([0.0, 0.0, 0.0], np.float32)))


def _run(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return [t.numpy() for t in fn(*_inputs())]


def test_eager_math_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = [np.asarray(v) for v in _program(*_inputs())]
    got = _run(_program)
    assert np.isnan(got[0]).all() and np.isnan(got[1]).all() and np.isneginf(got[2]).all()
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e.numpy() if hasattr(e, "numpy") else e)


@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_compiled_math_does_not_warn(backend):
    eager_out = _run(_program)
    compiled = _run(tracer.function(_program, backend=backend))
    for c, e in zip(compiled, eager_out):
        np.testing.assert_array_equal(c, e)


def test_int_division_by_zero_raises_not_warns():
    # PyTorch raises RuntimeError: ZeroDivisionError (numpy would warn and give 0)
    a, b = eager.tensor([3, -3]), eager.tensor([0, 0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for op in (lambda: a // b, lambda: a % b):
            with pytest.raises(RuntimeError, match="ZeroDivisionError"):
                op()
