"""The `sum_products` pass (tracer/product_sums.py): a sum of matrix products, as a weight
used at every step of an unrolled recurrence gets for its gradient, is computed as one
product over the concatenated contraction; results match eager within float32 rounding of
a changed summation order, on both backends; products that are used elsewhere, or whose
cats would copy more than the adds they save, stay as they are."""
import numpy as np
import pytest

import eager
import tracer
from eager import nn
from tracer.passes import optimize
from tracer.product_sums import sum_products

BACKENDS = ["numba", "interpret"]
T, N, M, K = 5, 3, 12, 8


def _np(t):
    return t.detach().numpy()


def _chain(a, b, c):
    """c + sum_t a[t]^T @ b[t], the way autodiff accumulates a recurrent weight's grad."""
    acc = c
    for t in range(a.shape[0]):
        acc = acc + a[t].T @ b[t]
    return acc


def _inputs(dtype=np.float32, n=N, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in [(T, n, M), (T, n, K), (M, K)]]


def _matmuls(f, *args):
    return f.get_concrete_function(*args).graph.op_counts().get("matmul", 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_sum_of_products_is_one_product_matching_eager(backend):
    a, b, c = (eager.tensor(v) for v in _inputs())
    f = tracer.function(_chain, backend=backend)
    np.testing.assert_allclose(_np(f(a, b, c)), _np(_chain(a, b, c)), rtol=1e-5, atol=1e-5)
    assert _matmuls(f, a, b, c) == 1
    # float64: the same sum up to float64 rounding
    a, b, c = (eager.tensor(v) for v in _inputs(np.float64))
    want = np.einsum("tnm,tnk->mk", _np(a), _np(b)) + _np(c)
    np.testing.assert_allclose(_np(f(a, b, c)), want, rtol=1e-12, atol=1e-12)


def test_products_used_elsewhere_or_with_wide_contractions_stay_apart():
    def shared(a, b, c):
        p0 = a[0].T @ b[0]
        return _chain(a, b, c), p0 * 2.0      # the first product is read twice

    a, b, c = (eager.tensor(v) for v in _inputs())
    f = tracer.function(shared, backend="interpret")
    for got, want in zip(f(a, b, c), shared(a, b, c)):
        np.testing.assert_allclose(_np(got), _np(want), rtol=1e-5, atol=1e-5)
    # cse merges the two a[0]^T @ b[0]: that one is used twice and stays, the rest is one
    assert _matmuls(f, a, b, c) == 2
    # N (M + K) > M K: the cats would copy more than the adds save
    a, b, c = (eager.tensor(v) for v in _inputs(n=40))
    f = tracer.function(_chain, backend="interpret")
    np.testing.assert_allclose(_np(f(a, b, c)), _np(_chain(a, b, c)), rtol=1e-5, atol=1e-4)
    assert _matmuls(f, a, b, c) == T


def test_the_pass_leaves_a_graph_without_product_sums_unchanged():
    a, b, c = (eager.tensor(v) for v in _inputs())
    g = tracer.function(lambda a, b, c: (a[0].T @ b[0] + c) * (a[1].T @ b[1]),
                        backend="interpret").get_concrete_function(a, b, c).graph
    assert sum_products(g) is g
    assert optimize(g) is g


@pytest.mark.parametrize("backend", BACKENDS)
def test_lstm_weight_hh_gradient_is_one_product_and_matches_eager(backend):
    L, B, HIN, H = 3, 3, 4, 6        # (the shapes of test_rnn_traced: kernels shared)
    eager.manual_seed(0)
    m = nn.LSTM(HIN, H, num_layers=2)
    rng = np.random.default_rng(2)
    x = eager.tensor(rng.standard_normal((L, B, HIN)).astype(np.float32))

    def step(x):
        out, (_, c) = m(x)
        (out.sum() + (c * c).sum()).backward()
        return out.detach()

    grads = []
    for run in (step, tracer.function(step, backend=backend)):
        m.zero_grad()
        run(x)
        grads.append({n: _np(p.grad).copy() for n, p in m.named_parameters()})
    for name in grads[0]:
        np.testing.assert_allclose(grads[1][name], grads[0][name], rtol=1e-5, atol=1e-6,
                                   err_msg=name)
    graph = tracer.function(step, backend=backend).get_concrete_function(x).graph
    weight_grads = [e for e in graph.eqns if e.op == "matmul"
                    and e.out.type.shape[0] == 4 * H]
    # per layer one product for W_ih's gradient and one for W_hh's (not one per time step)
    assert len(weight_grads) == 2 * 2, graph


def test_float32_difference_at_w10_shapes_is_a_few_ulp():
    """W10's dW_hh: 35 products [512, 20] x [20, 128] summed in a chain (eager) against one
    [512, 700] x [700, 128] product (compiled), both against float64."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((35, 20, 512)).astype(np.float32)
    b = rng.standard_normal((35, 20, 128)).astype(np.float32)
    c = np.zeros((512, 128), np.float32)
    f = tracer.function(_chain, backend="interpret")
    args = [eager.tensor(v) for v in (a, b, c)]
    got, want = _np(f(*args)), _np(_chain(*args))
    exact = np.einsum("tnm,tnk->mk", a.astype(np.float64), b.astype(np.float64))
    scale = np.abs(exact).max()
    # |got - exact| and |want - exact| are of the same size: a changed summation order only
    assert np.abs(got - exact).max() / scale < 2e-6
    assert np.abs(want - exact).max() / scale < 2e-6
    assert np.abs(got - want).max() / scale < 4e-6


@pytest.mark.parametrize("mode", ["RNN", "GRU", "LSTM", "LSTMCell"])
def test_recurrent_weight_gradients_are_one_product_each(mode):
    """RNN/GRU/LSTM layers (bidirectional: each direction's W_hh) and a loop of LSTMCells
    (W_ih and W_hh both read at every step): one weight-gradient product per weight."""
    L, B, HIN, H = 3, 3, 4, 6
    eager.manual_seed(1)
    rng = np.random.default_rng(4)
    x = eager.tensor(rng.standard_normal((L, B, HIN)).astype(np.float32))
    if mode == "LSTMCell":
        m = nn.LSTMCell(HIN, H)

        def forward(x):
            h = c = eager.zeros(B, H)
            outs = []
            for xt in x.unbind(0):
                h, c = m(xt, (h, c))
                outs.append(h)
            return eager.stack(outs, 0)
    else:
        m = getattr(nn, mode)(HIN, H, bidirectional=True)

        def forward(x):
            return m(x)[0]

    def step(x):
        out = forward(x)
        (out * out).sum().backward()
        return out.detach()

    grads = []
    f = tracer.function(step, backend="interpret")
    for run in (step, f):
        m.zero_grad()
        run(x)
        grads.append({n: _np(p.grad).copy() for n, p in m.named_parameters()})
    for name in grads[0]:
        np.testing.assert_allclose(grads[1][name], grads[0][name], rtol=1e-5, atol=1e-6,
                                   err_msg=name)
    weights = [p for n, p in m.named_parameters() if n.startswith("weight")]
    graph = f.get_concrete_function(x).graph
    products = [e for e in graph.eqns if e.op == "matmul"
                and any(tuple(e.out.type.shape) == tuple(w.shape) for w in weights)]
    assert len(products) == len(weights), graph
