"""Values that stay inside a compiled program are computed into per-thread buffers reused
every call (a kernel's pooled outputs, BLAS products, im2col columns): never a value the
caller can see, so a result the caller holds is never overwritten by a later call."""
from __future__ import annotations

import numpy as np
import pytest

import eager
import tracer

BACKENDS = ["numba", "interpret"]


def _arrays(seed, batch=6):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((batch, 8)).astype(np.float32),
            rng.standard_normal((8, 8)).astype(np.float32))


def _two_products(x, w):
    h = (x @ w).relu()          # x @ w stays inside: a reused buffer
    return h @ w, (x @ w).T     # both results leave: fresh arrays (one through a view)


def _eager(x, w):
    a, b = _two_products(eager.from_numpy(x), eager.from_numpy(w))
    return a.numpy().copy(), b.numpy().copy()


@pytest.mark.parametrize("backend", BACKENDS)
def test_held_results_of_products_are_not_overwritten(backend):
    f = tracer.function(_two_products, backend=backend)
    first_in = _arrays(0)
    first = f(*map(eager.from_numpy, first_in))
    kept = [t.numpy().copy() for t in first]
    for seed in (1, 2):
        got = f(*map(eager.from_numpy, _arrays(seed)))
        for g, want in zip(got, _eager(*_arrays(seed))):
            np.testing.assert_allclose(g.numpy(), want, rtol=1e-5, atol=1e-6)
    for t, k in zip(first, kept):  # the first call's results, held all along
        np.testing.assert_array_equal(t.numpy(), k)
    for t, want in zip(first, _eager(*first_in)):
        np.testing.assert_allclose(t.numpy(), want, rtol=1e-5, atol=1e-6)


def test_an_inner_product_goes_into_a_reused_buffer():
    f = tracer.function(_two_products)
    c = f.get_concrete_function(*map(eager.from_numpy, _arrays(0)))
    source = c.program.runner_source
    products = [line for line in source.splitlines() if "matmul(" in line]
    pooled = [line for line in products if "out=bufs[" in line]
    assert len(pooled) == 1, source   # the inner x @ w only
    assert len(products) == 3, source


@pytest.mark.parametrize("backend", BACKENDS)
def test_symbolic_batch_reuses_a_buffer_only_of_the_calls_shape(backend):
    f = tracer.function(_two_products, backend=backend,
                        input_signature=[tracer.TensorSpec((None, 8), eager.float32),
                                         tracer.TensorSpec((8, 8), eager.float32)])
    held = []
    for seed, batch in ((0, 6), (1, 3), (2, 6), (3, 5)):
        x, w = _arrays(seed, batch)
        got = f(eager.from_numpy(x), eager.from_numpy(w))
        held.append((got, _eager(x, w)))
    for got, want in held:
        for g, wnt in zip(got, want):
            np.testing.assert_allclose(g.numpy(), wnt, rtol=1e-5, atol=1e-6)
    assert f.trace_count == 1
