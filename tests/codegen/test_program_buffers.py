"""Values that stay inside a compiled program are computed into per-thread buffers reused
every call (a kernel's pooled outputs, BLAS products, im2col columns): never a value the
caller can see, so a result the caller holds is never overwritten by a later call."""
from __future__ import annotations

import numpy as np
import pytest

import eager
import eager.nn.functional as F
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


def _conv_step_fn(w, b):
    def step(x):
        # (stride 2 along W: im2col + BLAS, not the direct rows of eager/nn/conv.py)
        y = F.conv2d(x, w, b, padding=1, stride=(1, 2)).relu()
        loss = (y * y).mean()
        loss.backward()
        return loss
    return step


def _conv_params(seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((3, 2, 3, 3)).astype(np.float32),
            rng.standard_normal(3).astype(np.float32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_convolution_columns_in_reused_buffers_match_eager(backend):
    results = {}
    for mode in ("eager", backend):
        w, b = (eager.tensor(a, requires_grad=True) for a in _conv_params(0))
        step = _conv_step_fn(w, b)
        if mode != "eager":
            step = tracer.function(step, backend=backend)
        got = []
        for seed in (1, 2, 3):
            x = eager.from_numpy(np.random.default_rng(seed).standard_normal(
                (4, 2, 8, 8)).astype(np.float32))
            got.append(step(x).item())
            got += [w.grad.numpy().copy(), b.grad.numpy().copy()]
            w.grad = b.grad = None
        results[mode] = got
        if mode == "numba":
            source = step.get_concrete_function(x).program.runner_source
            # (im2col's Numba step kernel writes into a pooled buffer; numpy's copies, where
            # the kernel is not built, into reused buffers too)
            lines = source.splitlines()
            kernel = [j for j, line in enumerate(lines) if line.endswith("_im2col")]
            assert "im2col into reused buffers" in source or (
                kernel and "= bufs[" in lines[kernel[0] - 1]), source
    for g, want in zip(results[backend], results["eager"]):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)


def test_returned_columns_are_fresh_arrays():
    f = tracer.function(lambda x: F.unfold(x, 3, padding=1))
    xs = [eager.from_numpy(np.random.default_rng(s).standard_normal((4, 2, 8, 8)).astype(
        np.float32)) for s in (1, 2)]
    first = f(xs[0])
    kept = first.numpy().copy()
    second = f(xs[1])
    np.testing.assert_array_equal(first.numpy(), kept)
    for x, got in zip(xs, (first, second)):
        np.testing.assert_array_equal(got.numpy(), F.unfold(x, 3, padding=1).numpy())


def _regroup(x):
    y = x.permute(1, 0, 2).reshape(8, 1024)    # only a copy can do it (32 KiB)
    return (y * 2.0).sum(0), x.permute(1, 0, 2).reshape(8, 1024) + 0.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_copying_reshape_inside_the_program_reuses_a_buffer(backend):
    f = tracer.function(_regroup, backend=backend)
    xs = [np.random.default_rng(s).standard_normal((64, 8, 16)).astype(np.float32)
          for s in (1, 2, 3)]
    held = [f(eager.from_numpy(x)) for x in xs]
    for x, got in zip(xs, held):
        for g, want in zip(got, _regroup(eager.from_numpy(x))):
            np.testing.assert_allclose(g.numpy(), want.numpy(), rtol=1e-6)
    if backend == "numba":
        source = f.get_concrete_function(eager.from_numpy(xs[0])).program.runner_source
        assert "reshape_into(" in source, source


def _slice_grad(x, w):
    # dx of a slice is a scatter_slice (zeros, the gradient in rows 2:5) that stays inside
    y = (x[2:5] * w).tanh().sum()
    (dx,) = eager.autograd.grad(y, [x])
    return (dx * dx + 1.0).sum(1)  # (no gradient: the call runs compiled)


def test_a_scatter_slice_inside_the_program_writes_its_slice_into_zeros_made_once():
    f = tracer.function(_slice_grad)
    rng = np.random.default_rng(5)
    calls = [(rng.standard_normal((6, 8)).astype(np.float32),
              rng.standard_normal((3, 8)).astype(np.float32)) for _ in range(3)]

    def eager_of(x, w):
        return _slice_grad(eager.tensor(x, requires_grad=True), eager.tensor(w)).numpy()
    for x, w in calls:   # (each call's slice over the last's: the rest stays zero)
        got = f(eager.tensor(x, requires_grad=True), eager.tensor(w)).numpy()
        np.testing.assert_allclose(got, eager_of(x, w), rtol=1e-6, atol=1e-6)
    program = f.get_concrete_function(eager.tensor(calls[0][0], requires_grad=True),
                                      eager.tensor(calls[0][1])).program
    assert "scatter_slice into zeros made once" in program.runner_source
    # another thread: buffers (and zeros) of its own
    import threading
    out = []
    t = threading.Thread(target=lambda: out.append(
        f(eager.tensor(calls[1][0], requires_grad=True), eager.tensor(calls[1][1])).numpy()))
    t.start()
    t.join()
    np.testing.assert_allclose(out[0], eager_of(*calls[1]), rtol=1e-6, atol=1e-6)
