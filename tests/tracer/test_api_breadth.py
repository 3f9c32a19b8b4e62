"""The PyTorch APIs added for real programs, compiled against eager: select, index_add(_),
index_copy(_), t_, cosine_similarity, pairwise_distance, pixel_shuffle / unshuffle,
ConvTranspose2d(x, output_size=), init.orthogonal_, eager.initial_seed. (Forward references
and finite-difference gradients: tests/eager/opinfo_apis.py.)"""
import warnings

import numpy as np
import pytest

import eager
import tracer
from eager import nn
import eager.nn.functional as F


def _mix(x, y, src):
    """Every new op once; one loss, its gradients."""
    a = x.select(1, -1)                                    # (4, 6) -> (4,)
    b = x.index_add(0, eager.tensor([3, 0, 3]), src, alpha=0.5)
    c = x.index_copy(0, eager.tensor([1, 2]), src[:2])
    d = F.cosine_similarity(x, y, dim=1)
    e = F.pairwise_distance(x, y)
    s = F.pixel_shuffle(x.reshape(1, 4, 2, 3), 2)            # (1, 1, 4, 6)
    u = F.pixel_unshuffle(s, 2)
    return a, b, c, d, e, s, u


def _run(fn, arrays):
    ts = [eager.tensor(a, requires_grad=True) for a in arrays]
    outs = fn(*ts)
    loss = sum((o * (k + 1)).sum() for k, o in enumerate(outs))
    loss.backward()
    return [o.detach().numpy() for o in outs] + [t.grad.numpy() for t in ts]


def _inputs(rng, special=False):
    x = rng.uniform(-2, 2, (6, 4)).astype(np.float32).T    # non-contiguous (4, 6)
    y = rng.uniform(-2, 2, (1, 6)).astype(np.float32)      # broadcast against x
    src = rng.uniform(-2, 2, (3, 6)).astype(np.float32)
    if special:
        x = x.copy()
        x[0, 0], x[1, 2], x[3, 5] = np.nan, np.inf, 0.0
    return [x, y, src]


@pytest.mark.parametrize("special", [False, True], ids=["finite", "nan_inf"])
def test_new_ops_compiled_match_eager_with_gradients(special):
    arrays = _inputs(np.random.default_rng(1), special)

    def step(x, y, src):
        outs = _mix(x, y, src)
        loss = sum((o * (k + 1)).sum() for k, o in enumerate(outs))
        loss.backward()
        return tuple(o.detach() for o in outs) + (x.grad.detach() * 1, y.grad.detach() * 1,
                                                    src.grad.detach() * 1)

    want = _run(_mix, arrays)
    compiled = tracer.function(step)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with np.errstate(all="ignore"):
            got = compiled(*[eager.tensor(a, requires_grad=True) for a in arrays])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-6, equal_nan=True)
    assert compiled.trace_count == 1


def test_zero_size_inputs_compiled():
    def f(x, src):
        return (x.index_add(1, eager.tensor([], dtype=eager.int64), src),
                F.cosine_similarity(x, x, dim=0), F.pixel_shuffle(x.reshape(0, 4, 1, 1), 2))

    x, src = np.zeros((4, 0), np.float32), np.zeros((4, 0), np.float32)
    want = f(eager.tensor(x), eager.tensor(src))
    got = tracer.function(f)(eager.tensor(x), eager.tensor(src))
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype


def test_in_place_index_ops_and_t_on_an_argument_compiled():
    def f(x, src):
        x.index_add_(0, eager.tensor([0, 0]), src)
        x.index_copy_(1, eager.tensor([2]), src[:, :1].T.clone()[:, :1].expand(3, 1) * 0 + 7)
        x.t_()
        return x * 1

    rng = np.random.default_rng(2)
    a, s = rng.standard_normal((3, 4)).astype(np.float32), np.ones((2, 4), np.float32)
    xe, xc = eager.tensor(a), eager.tensor(a)
    want = f(xe, eager.tensor(s))
    got = tracer.function(f)(xc, eager.tensor(s))
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert xc.shape == xe.shape == (4, 3)
    np.testing.assert_array_equal(xc.numpy(), xe.numpy())


def test_select_and_index_errors_name_the_line():
    x = eager.ones(3, 4)
    with pytest.raises(IndexError, match=r"out of range.*test_api_breadth.py"):
        x.select(1, 4)
    with pytest.raises(RuntimeError, match=r"does not fit.*test_api_breadth.py"):
        x.index_add(0, eager.tensor([0]), eager.ones(2, 4))
    with pytest.raises(RuntimeError, match="divisible"):
        F.pixel_shuffle(eager.ones(1, 3, 2, 2), 2)
    with pytest.raises(RuntimeError, match="<= 2 dimensions"):
        eager.ones(2, 2, 2).t_()


def test_conv_transpose_output_size_compiled():
    eager.manual_seed(0)
    up = nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1)
    x = eager.randn(1, 2, 5, 5)
    f = tracer.function(lambda x: up(x, output_size=(10, 10)) * 1)
    with eager.no_grad():
        want = up(x, output_size=[1, 3, 10, 10])
        got = f(x)
    assert want.shape == (1, 3, 10, 10) and up(x).shape == (1, 3, 9, 9)
    np.testing.assert_allclose(got.detach().numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="valid sizes"):
        up(x, output_size=(11, 10))


def test_orthogonal_init_and_initial_seed():
    eager.manual_seed(1234)
    assert eager.initial_seed() == 1234
    w = eager.zeros(3, 5)
    nn.init.orthogonal_(w, gain=2.0)
    np.testing.assert_allclose(w.numpy() @ w.numpy().T, 4 * np.eye(3), atol=1e-5)
    w2 = eager.zeros(6, 2, 2)
    nn.init.orthogonal_(w2)
    flat = w2.numpy().reshape(6, 4)
    np.testing.assert_allclose(flat.T @ flat, np.eye(4), atol=1e-5)
    eager.manual_seed(1234)
    again = nn.init.orthogonal_(eager.zeros(3, 5), gain=2.0)
    np.testing.assert_array_equal(again.numpy(), w.numpy())  # (drawn from the generator)
    with pytest.raises(ValueError, match="2 or more"):
        nn.init.orthogonal_(eager.zeros(3))


def test_pixel_shuffle_layers_in_a_compiled_super_resolution_step():
    """A tiny ESPCN-style step: conv -> PixelShuffle, eager and compiled after each step."""
    def make():
        eager.manual_seed(5)
        model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.PixelShuffle(2))
        return model, eager.optim.SGD(model.parameters(), lr=0.1)

    def step_of(model, opt):
        def step(lo, hi):
            opt.zero_grad()
            loss = F.mse_loss(model(lo), hi)
            loss.backward()
            opt.step()
            return loss.detach()
        return step

    rng = np.random.default_rng(3)
    lo = eager.tensor(rng.standard_normal((2, 1, 4, 4)).astype(np.float32))
    hi = eager.tensor(rng.standard_normal((2, 1, 8, 8)).astype(np.float32))
    (me, oe), (mc, oc) = make(), make()
    eager_step, compiled = step_of(me, oe), tracer.function(step_of(mc, oc))
    for _ in range(2):
        want, got = eager_step(lo, hi), compiled(lo, hi)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5)
        for pe, pc in zip(me.parameters(), mc.parameters()):
            np.testing.assert_allclose(pc.detach().numpy(), pe.detach().numpy(), rtol=1e-5,
                                       atol=1e-6)
    assert compiled.trace_count == 1


def test_set_default_dtype_factories_layers_and_retrace():
    assert eager.get_default_dtype() == eager.float32

    @tracer.function
    def f(n):
        return n * 0.5 + eager.ones(3)   # (an int tensor and a Python float: the default)

    @tracer.function
    def g(x):
        return x * 0.5                   # (a float32 tensor's dtype wins: no default read)

    n, x = eager.arange(3), eager.ones(3)
    assert f(n).dtype == eager.float32 and g(x).dtype == eager.float32
    try:
        eager.set_default_dtype(eager.float64)
        assert eager.get_default_dtype() == eager.float64
        assert eager.tensor(1.5).dtype == eager.float64
        assert eager.zeros(2).dtype == eager.arange(0.0, 2.0).dtype == eager.float64
        assert nn.Linear(2, 2).weight.dtype == nn.LSTM(2, 2).weight_hh_l0.dtype == eager.float64
        got = f(n)
        assert got.dtype == eager.float64 and f.trace_count == 2
        np.testing.assert_array_equal(got.numpy(), (n * 0.5 + eager.ones(3)).numpy())
        assert g(x).dtype == eager.float32 and g.trace_count == 1
    finally:
        eager.set_default_dtype(eager.float32)
    assert f(n).dtype == eager.float32 and f.trace_count == 2
    with pytest.raises(TypeError, match="floating-point"):
        eager.set_default_dtype(eager.int32)
