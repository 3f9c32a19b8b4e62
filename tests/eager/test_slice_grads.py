"""The gradient of several slices of one tensor (unbind, chunk, split, x[t]) is written
with one cat (eager.slice_grads), not one full-size scatter_slice plus one addition per
slice; pieces that do not tile one dim (overlapping, strided) add up as before. Values
against numpy placing each slice's gradient, eagerly, traced and compiled."""
import numpy as np
import pytest

import eager
import tracer


def _x(shape, seed=0):
    rng = np.random.default_rng(seed)
    return eager.tensor(rng.standard_normal(shape), dtype=eager.float64, requires_grad=True)


def _weights(n, shape, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape) for _ in range(n)]


def _ops_of_backward(fn, x):
    """The ops of the traced graph of `x.grad` after fn(x).backward()."""
    def step(x):
        x.grad = None
        fn(x).backward()
        return x.grad
    c = tracer.function(step, backend="interpret").get_concrete_function(x)
    return [e.op for e in c.graph.eqns]


def test_unbind_backward_is_one_cat_with_zeros_for_unused_slices():
    x = _x((5, 3, 4))
    ws = _weights(3, (3, 4))

    def loss(x):
        ys = eager.unbind(x, 0)
        return sum((ys[t] * ys[t] * eager.tensor(ws[k])).sum()
                   for k, t in enumerate((3, 0, 1)))
    loss(x).backward()
    want = np.zeros((5, 3, 4))
    for k, t in enumerate((3, 0, 1)):
        want[t] += 2 * x.detach().numpy()[t] * ws[k]
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-14, atol=0)
    assert (x.grad.numpy()[[2, 4]] == 0).all()
    ops = _ops_of_backward(loss, x)
    assert ops.count("cat") == 1 and "scatter_slice" not in ops, ops


def test_chunk_and_split_backward_place_each_piece():
    x = _x((4, 7))
    ws = _weights(3, (4, 3))

    def loss(x):
        a, _, c = eager.split(x, [3, 1, 3], -1)
        return (a * a * eager.tensor(ws[0])).sum() + (c * c * eager.tensor(ws[2])).sum()
    loss(x).backward()
    want = np.zeros((4, 7))
    v = x.detach().numpy()
    want[:, :3], want[:, 4:] = 2 * v[:, :3] * ws[0], 2 * v[:, 4:] * ws[2]
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-14, atol=0)
    ops = _ops_of_backward(loss, x)
    assert ops.count("cat") == 1 and "scatter_slice" not in ops, ops


def test_overlapping_strided_and_mixed_contributions_add_up():
    x = _x((6, 4))

    def loss(x):
        return (x[0:3] * 2).sum() + (x[2:5] * 3).sum() + (x[::2] * 5).sum() + (x * 7).sum()
    loss(x).backward()
    want = np.full((6, 4), 7.0)
    want[0:3] += 2
    want[2:5] += 3
    want[::2] += 5
    np.testing.assert_array_equal(x.grad.numpy(), want)

    def tiled_and_whole(x):
        a, b = x.chunk(2, 0)
        return (a * 2).sum() + (x * 7).sum() + (b * 3).sum()
    x.grad = None
    tiled_and_whole(x).backward()
    want = np.full((6, 4), 7.0)
    want[:3] += 2
    want[3:] += 3
    np.testing.assert_array_equal(x.grad.numpy(), want)


def test_slices_of_an_intermediate_autograd_grad_and_double_backward():
    x = _x((3, 4))

    def f(x):
        y = x * x  # an intermediate: its node collects the pieces
        r = eager.unbind(y, 1)
        return sum((r[j] * (j + 1)).sum() for j in range(4))
    (g,) = eager.autograd.grad(f(x), [x], create_graph=True)
    scale = np.arange(1, 5, dtype=np.float64)
    np.testing.assert_allclose(g.detach().numpy(), 2 * x.detach().numpy() * scale)
    (gg,) = eager.autograd.grad(g.sum(), [x])
    np.testing.assert_allclose(gg.numpy(), np.broadcast_to(2 * scale, (3, 4)))


@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_compiled_lstm_step_gradients_match_eager_and_use_no_scatter_slice(backend):
    eager.manual_seed(3)
    lstm = eager.nn.LSTM(4, 5, 2)
    x = eager.randn(6, 2, 4)

    def step(x):
        for p in lstm.parameters():
            p.grad = None
        out, _ = lstm(x)
        (out * out).sum().backward()
        return [p.grad for p in lstm.parameters()]
    want = [g.numpy().copy() for g in step(x)]
    f = tracer.function(step, backend=backend)
    got = [g.numpy() for g in f(x)]
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    ops = [e.op for e in f.get_concrete_function(x).graph.eqns]
    # The unrolled loop's per-step slices once each made a zero-filled gradient array
    # (scatter_slice); the fused layer (lstm_recurrence, eager/ops_rnn.py) has one left per
    # layer: the gradient of its hidden-state rows padded to the packed output's rows.
    assert ops.count("scatter_slice") <= lstm.num_layers, sorted(set(ops))
    assert ops.count("lstm_recurrence_backward") == lstm.num_layers
