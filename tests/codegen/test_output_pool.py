"""Large outputs are recycled once the caller has dropped them (codegen.outpool._recycled).

The threshold is lowered so small arrays take the path. An output the caller still
refers to, in any way that counts a reference (the array, a Tensor, a view, an autograd
node), is never written again; one it dropped is handed out again instead of new memory.
"""
from __future__ import annotations

import threading
import weakref

import numpy as np
import pytest

import codegen.outpool as outpool
import eager
import eager.nn.functional as F
import tracer


@pytest.fixture(autouse=True)
def small_pool_threshold(monkeypatch):
    monkeypatch.setattr(outpool, "OUTPUT_POOL_MIN_BYTES", 64)


def _inputs(n, shape=(4, 8)):
    rng = np.random.default_rng(n)
    return [eager.from_numpy(rng.standard_normal(shape).astype(np.float32)) for _ in range(n)]


def _gelu(x):
    return F.gelu(x * 2.0 + 1.0, approximate="tanh")


def _want(x):
    with eager.no_grad():
        return _gelu(x).numpy().copy()


def _check(got, x):
    """Compiled tanh is a polynomial a few ulps from numpy's; another call's values would
    be off by far more."""
    np.testing.assert_allclose(got, _want(x), rtol=2e-6, atol=1e-6)


def test_held_outputs_are_never_overwritten_and_dropped_ones_are_recycled():
    f = tracer.function(_gelu)
    xs = _inputs(6)
    with eager.no_grad():
        held = [f(x) for x in xs]  # every output still referred to: all distinct
        for x, y in zip(xs, held):
            _check(y.numpy(), x)
        assert len({id(y._data) for y in held}) == len(held)
        assert "recycled(" in f.get_concrete_function(xs[0]).program.runner_source
        last = held[-1]._data
        del held[:]  # (the list's Tensors go; `last` still holds the newest array)
        y = f(xs[0])
        _check(y.numpy(), xs[0])
        assert y._data is not last
        _check(last, xs[-1])
        # A dropped output is the next call's (a weak reference sees it come back)
        dropped = weakref.ref(f(xs[1])._data)
        y = f(xs[2])
        assert y._data is dropped()
        _check(y.numpy(), xs[2])
        # A loop that keeps only its latest result runs on two arrays, alternately
        for x in xs * 2:
            before = weakref.ref(y._data)
            y = f(x)
            _check(y.numpy(), x)
        y2 = f(xs[0])
        assert before() is y2._data


def test_a_view_or_a_memoryview_of_an_output_keeps_it():
    f = tracer.function(_gelu)
    a, b, c = _inputs(3)
    with eager.no_grad():
        y = f(a)
        row = y.numpy()[1]          # a numpy view of the output
        mem = memoryview(f(b).numpy())
        del y
        for x in (c, b, c, b):
            f(x)
    np.testing.assert_allclose(row, _want(a)[1], rtol=2e-6, atol=1e-6)
    _check(np.asarray(mem), b)


def test_outputs_kept_for_backward_are_not_recycled():
    f = tracer.function(lambda x: (x * 3.0).exp())
    xs = [eager.tensor(x.numpy(), requires_grad=True) for x in _inputs(3)]
    ys = [f(x) for x in xs]   # each backward node keeps its output (d exp = exp)
    for x in _inputs(4):
        with eager.no_grad():
            f(x)
    for x, y in zip(xs, ys):
        y.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), 3.0 * np.exp(3.0 * x.detach().numpy()),
                                   rtol=1e-5)


def test_symbolic_sizes_recycle_only_arrays_of_the_calls_shape():
    """(Two kernels and a matmul: the closures' path. A one-kernel symbolic program
    allocates directly, without the ring.)"""
    w = eager.from_numpy(np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8))

    def two(x):
        return _gelu(_gelu(x) @ w)

    f = tracer.function(two, input_signature=[tracer.TensorSpec((None, 8))])
    refs = []
    with eager.no_grad():
        for n in (4, 5, 4, 4, 6, 5, 4, 4, 4, 4):
            (x,) = _inputs(1, (n, 8))
            y = f(x)
            assert y.shape == (n, 8)
            np.testing.assert_allclose(y.numpy(), two(x).numpy(), rtol=2e-6, atol=1e-6)
            refs.append(weakref.ref(y._data))
    assert f.trace_count == 1
    # a run of one size alternates two arrays
    assert refs[-1]() is refs[-3]() is y._data and refs[-2]() is refs[-4]() is not None


def test_threads_calling_one_function_get_their_own_outputs():
    f = tracer.function(_gelu)
    xs = _inputs(4)
    with eager.no_grad():
        f(xs[0])
    errors = []

    def work(x):
        try:
            with eager.no_grad():
                for _ in range(200):
                    y = f(x)
                    if not np.allclose(y.numpy(), _want(x), rtol=2e-6, atol=1e-6):
                        errors.append("wrong values")
                        return
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(repr(exc))

    threads = [threading.Thread(target=work, args=(x,)) for x in xs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
