"""Normalization layers and channel dropout, eagerly: forwards against numpy references
written here from PyTorch's documented formulas (float64, sharing no code with
eager/nn/normalization.py), gradients by central finite differences in float64, running
statistics over five steps (momentum and momentum None), eval mode, state_dict keys and
order, NaN and zero-size inputs, non-contiguous inputs, and the error messages."""
import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F

# ------------------------------------------------------------------ numpy references

def ref_batch_norm(x, w, b, eps=1e-5):
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mu, var = x.mean(axes, keepdims=True), x.var(axes, keepdims=True)
    out = (x - mu) / np.sqrt(var + eps)
    return out * w.reshape(shape) + b.reshape(shape)


def ref_group_norm(x, g, w, b, eps=1e-5):
    n = x.shape[0]
    xg = x.reshape(n, g, -1)
    out = ((xg - xg.mean(2, keepdims=True)) / np.sqrt(xg.var(2, keepdims=True) + eps))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return out.reshape(x.shape) * w.reshape(shape) + b.reshape(shape)


def ref_instance_norm(x, w, b, eps=1e-5):
    axes = tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    out = (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + eps)
    return out * w.reshape(shape) + b.reshape(shape)


def ref_layer_norm(x, k, w, b, eps=1e-5):
    axes = tuple(range(x.ndim - k, x.ndim))
    out = (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + eps)
    return out * w + b


def ref_rms_norm(x, k, w, eps):
    axes = tuple(range(x.ndim - k, x.ndim))
    return x / np.sqrt((x ** 2).mean(axes, keepdims=True) + eps) * w


def _t(a, grad=False):
    return eager.tensor(np.ascontiguousarray(a), requires_grad=grad)


RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 4, 5, 2)) * 1.5 + 0.7
W, B = RNG.standard_normal(4), RNG.standard_normal(4)
WL, BL = RNG.standard_normal((5, 2)), RNG.standard_normal((5, 2))

FORWARD = {  # name: (eager body over float64 tensors, numpy reference, inputs)
    "batch_norm": (lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
                   ref_batch_norm, (X, W, B)),
    "batch_norm_2d": (lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
                      ref_batch_norm, (X[:, :, 0, 0], W, B)),
    "group_norm": (lambda x, w, b: F.group_norm(x, 2, w, b),
                   lambda x, w, b: ref_group_norm(x, 2, w, b), (X, W, B)),
    "group_norm_1": (lambda x, w, b: F.group_norm(x, 1, w, b),
                     lambda x, w, b: ref_group_norm(x, 1, w, b), (X, W, B)),
    "instance_norm": (lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
                      ref_instance_norm, (X, W, B)),
    "layer_norm_2d": (lambda x, w, b: F.layer_norm(x, (5, 2), w, b),
                      lambda x, w, b: ref_layer_norm(x, 2, w, b), (X, WL, BL)),
    "rms_norm_2d": (lambda x, w: F.rms_norm(x, (5, 2), w, 1e-6),
                    lambda x, w: ref_rms_norm(x, 2, w, 1e-6), (X, WL)),
    "rms_norm_eps_none": (lambda x, w: F.rms_norm(x, 2, w),
                          lambda x, w: ref_rms_norm(x, 1, w, np.finfo(np.float64).eps),
                          (X, WL[0])),
}


@pytest.mark.parametrize("name", sorted(FORWARD))
def test_forward_matches_the_documented_formula(name):
    body, ref, args = FORWARD[name]
    got = body(*[_t(a) for a in args])
    np.testing.assert_allclose(got.numpy(), ref(*args), rtol=1e-10, atol=1e-12)
    got32 = body(*[_t(a.astype(np.float32)) for a in args])
    assert got32.dtype == eager.float32
    np.testing.assert_allclose(got32.numpy(), ref(*args), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", sorted(FORWARD))
def test_gradients_match_finite_differences(name):
    body, _, args = FORWARD[name]
    args = [a[:2] if a.ndim == 4 else a for a in args]  # fewer probes
    ts = [_t(a, grad=True) for a in args]
    probe = np.random.default_rng(1).standard_normal(body(*ts).shape)
    (body(*ts) * _t(probe)).sum().backward()
    h = 1e-6
    for t, a in zip(ts, args):
        num = np.zeros_like(a)
        for i in np.ndindex(a.shape):
            vals = []
            for s in (h, -h):
                moved = [x.copy() for x in args]
                moved[[id(y) for y in args].index(id(a))][i] += s
                vals.append((body(*[_t(m) for m in moved]).numpy() * probe).sum())
            num[i] = (vals[0] - vals[1]) / (2 * h)
        np.testing.assert_allclose(t.grad.numpy(), num, rtol=1e-5, atol=1e-7, err_msg=name)


def _grad_dot(body, arrays, w, v, create_graph):
    """<grad sum(body(*arrays) * w), v> over every input, differentiable with create_graph."""
    ts = [_t(a, grad=True) for a in arrays]
    grads = eager.autograd.grad((body(*ts) * _t(w)).sum(), ts, create_graph=create_graph)
    total = sum((g * _t(vi)).sum() for g, vi in zip(grads, v))
    return ts, total


@pytest.mark.parametrize("name", ["batch_norm", "group_norm", "instance_norm", "rms_norm_2d"])
def test_second_derivative_matches_finite_differences(name):
    body, _, args = FORWARD[name]
    args = [a[:2] if a.ndim == 4 else a for a in args]
    rng = np.random.default_rng(4)
    w = rng.standard_normal(body(*[_t(a) for a in args]).shape)
    v = [rng.standard_normal(a.shape) for a in args]
    ts, s = _grad_dot(body, args, w, v, True)
    second = eager.autograd.grad(s, ts, allow_unused=True)  # (none for the bias)
    h = 1e-5
    for k, (g2, a) in enumerate(zip(second, args)):
        u = rng.standard_normal(a.shape)
        plus = [x + h * u if j == k else x for j, x in enumerate(args)]
        minus = [x - h * u if j == k else x for j, x in enumerate(args)]
        fd = (_grad_dot(body, plus, w, v, False)[1].item()
              - _grad_dot(body, minus, w, v, False)[1].item()) / (2 * h)
        analytic = 0.0 if g2 is None else float(np.sum(g2.numpy() * u))
        assert abs(analytic - fd) <= 1e-5 * abs(fd) + 1e-6, (name, k, analytic, fd)


# ------------------------------------------------------------------ running statistics

@pytest.mark.parametrize("momentum", [0.1, 0.5, None])
def test_batchnorm_running_statistics_over_five_steps(momentum):
    bn = nn.BatchNorm2d(3, momentum=momentum)
    rm, rv = np.zeros(3), np.ones(3)
    rng = np.random.default_rng(3)
    for step in range(1, 6):
        x = rng.standard_normal((4, 3, 3, 2)) * 3 - 1
        out = bn(_t(x.astype(np.float32)))
        np.testing.assert_allclose(out.detach().numpy(), ref_batch_norm(x, np.ones(3),
                                   np.zeros(3)), rtol=1e-4, atol=1e-5)
        m = 1.0 / step if momentum is None else momentum
        rm = (1 - m) * rm + m * x.mean((0, 2, 3))
        rv = (1 - m) * rv + m * x.var((0, 2, 3), ddof=1)  # unbiased
        np.testing.assert_allclose(bn.running_mean.numpy(), rm, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(bn.running_var.numpy(), rv, rtol=1e-5, atol=1e-6)
        assert bn.num_batches_tracked.dtype == eager.int64
        assert int(bn.num_batches_tracked.numpy()) == step
    if momentum is None:  # the cumulative average is the plain mean of the batch means
        assert rm.shape == (3,)
    bn.eval()
    x = rng.standard_normal((2, 3, 3, 2))
    want = (x - rm[None, :, None, None]) / np.sqrt(rv[None, :, None, None] + 1e-5)
    np.testing.assert_allclose(bn(_t(x.astype(np.float32))).detach().numpy(), want,
                               rtol=1e-4, atol=1e-5)
    assert int(bn.num_batches_tracked.numpy()) == 5  # eval does not count


def test_batchnorm_without_running_stats_uses_batch_stats_in_eval():
    bn = nn.BatchNorm1d(3, affine=False, track_running_stats=False).eval()
    x = RNG.standard_normal((6, 3))
    np.testing.assert_allclose(bn(_t(x)).numpy(), ref_batch_norm(x, np.ones(3), np.zeros(3)),
                               rtol=1e-10)
    assert bn.running_mean is None and list(bn.state_dict()) == []


def test_instance_norm_running_statistics_average_the_instances():
    m = nn.InstanceNorm1d(2, momentum=0.5, track_running_stats=True)
    x = RNG.standard_normal((3, 2, 6))
    m(_t(x))
    np.testing.assert_allclose(m.running_mean.numpy(), 0.5 * x.mean(2).mean(0), rtol=1e-5)
    np.testing.assert_allclose(m.running_var.numpy(), 0.5 + 0.5 * x.var(2, ddof=1).mean(0),
                               rtol=1e-5)
    m.eval()
    rm, rv = m.running_mean.numpy()[None, :, None], m.running_var.numpy()[None, :, None]
    np.testing.assert_allclose(m(_t(x.astype(np.float32))).numpy(),
                               (x - rm) / np.sqrt(rv + 1e-5), rtol=1e-4, atol=1e-5)
    unbatched = nn.InstanceNorm1d(2)(_t(x[0]))
    np.testing.assert_allclose(unbatched.numpy(), ref_instance_norm(x[:1], np.ones(2),
                               np.zeros(2))[0], rtol=1e-10)


def test_state_dict_keys_and_order_as_pytorch():
    assert list(nn.BatchNorm2d(3).state_dict()) == ["weight", "bias", "running_mean",
                                                    "running_var", "num_batches_tracked"]
    assert list(nn.BatchNorm1d(3, affine=False).state_dict()) == [
        "running_mean", "running_var", "num_batches_tracked"]
    assert list(nn.InstanceNorm2d(3).state_dict()) == []
    assert list(nn.GroupNorm(2, 4).state_dict()) == ["weight", "bias"]
    assert list(nn.RMSNorm(4).state_dict()) == ["weight"]
    assert [n for n, _ in nn.BatchNorm3d(2).named_parameters()] == ["weight", "bias"]
    src, dst = nn.BatchNorm2d(3), nn.BatchNorm2d(3)
    src(_t(RNG.standard_normal((2, 3, 2, 2)).astype(np.float32)))
    dst.load_state_dict(src.state_dict())
    np.testing.assert_array_equal(dst.running_var.numpy(), src.running_var.numpy())
    assert int(dst.num_batches_tracked.numpy()) == 1
    bn64 = nn.BatchNorm2d(3).to(eager.float64)
    assert bn64.running_mean.dtype == eager.float64
    assert bn64.num_batches_tracked.dtype == eager.int64


# ------------------------------------------------------------------ edge cases

def test_nan_propagates_to_its_channel_or_group_only():
    x = RNG.standard_normal((2, 4, 3))
    x[0, 1, 2] = np.nan
    bn = F.batch_norm(_t(x), None, None, training=True).numpy()
    assert np.isnan(bn[:, 1]).all() and not np.isnan(np.delete(bn, 1, axis=1)).any()
    gn = F.group_norm(_t(x), 2).numpy()
    assert np.isnan(gn[0, :2]).all() and not np.isnan(gn[1]).any()
    assert not np.isnan(gn[0, 2:]).any()


def test_zero_size_and_single_value_inputs():
    assert F.group_norm(_t(np.zeros((0, 4, 3))), 2).shape == (0, 4, 3)
    assert F.layer_norm(_t(np.zeros((0, 3))), (3,)).shape == (0, 3)
    assert F.rms_norm(_t(np.zeros((0, 3))), (3,)).shape == (0, 3)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        nn.BatchNorm1d(3)(_t(np.ones((1, 3))))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        nn.BatchNorm2d(3)(_t(np.ones((1, 3, 1, 1))))


@pytest.mark.parametrize("momentum", [0.1, None])
def test_an_empty_training_batch_gives_an_empty_output_and_keeps_the_statistics(momentum):
    # PyTorch: numel() == 0 returns an empty output without touching running_mean/var;
    # the module has counted the batch (num_batches_tracked) before.
    bn = nn.BatchNorm2d(3, momentum=momentum)
    bn(_t(RNG.standard_normal((4, 3, 2, 2))))
    before = {k: v.numpy().copy() for k, v in bn.state_dict().items()}
    for shape in ((0, 3, 2, 2), (2, 3, 0, 2)):
        x = eager.tensor(np.zeros(shape), requires_grad=True)
        y = bn(x)
        assert y.shape == shape and y.dtype == x.dtype
        y.sum().backward()
        assert x.grad.shape == shape
        np.testing.assert_array_equal(bn.weight.grad.numpy(), np.zeros(3))
    after = bn.state_dict()
    for k in ("running_mean", "running_var"):
        np.testing.assert_array_equal(after[k].numpy(), before[k])
    assert int(after["num_batches_tracked"].item()) == 3
    assert F.batch_norm(_t(np.zeros((0, 3))), None, None, training=True).shape == (0, 3)
    assert F.instance_norm(_t(np.zeros((2, 3, 0)))).shape == (2, 3, 0)
    # one sample is fine in eval mode
    assert nn.BatchNorm1d(3).eval()(_t(np.ones((1, 3), np.float32))).shape == (1, 3)


def test_non_contiguous_inputs_give_the_contiguous_result():
    base = RNG.standard_normal((4, 3, 5, 2))
    xt = _t(base).transpose(0, 1)  # (3, 4, 5, 2), a view
    want = ref_batch_norm(base.transpose(1, 0, 2, 3), W, B)
    np.testing.assert_allclose(F.batch_norm(xt, None, None, _t(W), _t(B), True).numpy(),
                               want, rtol=1e-10)
    np.testing.assert_allclose(F.group_norm(xt, 2, _t(W), _t(B)).numpy(),
                               ref_group_norm(base.transpose(1, 0, 2, 3), 2, W, B), rtol=1e-10)
    sl = _t(base)[:, :, ::2]
    np.testing.assert_allclose(F.rms_norm(sl, (3, 2), _t(np.ones((3, 2))), 1e-6).numpy(),
                               ref_rms_norm(base[:, :, ::2], 2, 1.0, 1e-6), rtol=1e-10)


def test_channel_dropout_zeroes_whole_channels_and_scales():
    eager.manual_seed(0)
    x = _t(np.ones((8, 6, 3, 4), np.float32))
    y = nn.Dropout2d(0.25)(x).numpy().reshape(48, 12)
    assert np.all(y.min(1) == y.max(1))
    assert set(np.unique(y)) <= {0.0, np.float32(1 / 0.75)} and (y == 0).any()
    y1 = F.dropout1d(_t(np.ones((5, 7), np.float32)), 0.5).numpy()  # unbatched (C, L)
    assert np.all(y1.min(1) == y1.max(1))
    y3 = F.dropout3d(_t(np.ones((2, 3, 2, 2, 2), np.float32)), 0.5).numpy().reshape(6, 8)
    assert np.all(y3.min(1) == y3.max(1))
    assert nn.Dropout2d(0.5).eval()(x) is x
    with pytest.warns(UserWarning, match="3D input"):
        y2 = F.dropout2d(_t(np.ones((4, 5, 6), np.float32)), 0.5).numpy()
    assert np.all(y2.min(2) == y2.max(2))  # as PyTorch: (N, C, L) channels
    with pytest.raises(Exception, match="dropout2d"):
        F.dropout2d(_t(np.ones((4, 5), np.float32)))


def test_alpha_dropout_keeps_mean_and_variance():
    eager.manual_seed(0)
    x = _t(np.random.default_rng(0).standard_normal(200_000).astype(np.float32))
    y = F.alpha_dropout(x, 0.2, training=True).numpy()
    assert abs(y.mean()) < 0.02 and abs(y.std() - 1.0) < 0.02
    assert nn.AlphaDropout(0.2).eval()(x) is x


def test_errors_name_the_op_and_the_shapes():
    with pytest.raises(ValueError, match="divisible by num_groups"):
        F.group_norm(_t(np.ones((2, 6, 3))), 4)
    with pytest.raises(ValueError, match="divisible"):
        nn.GroupNorm(4, 6)
    with pytest.raises(Exception, match=r"rms_norm.*\(3,\)"):
        F.rms_norm(_t(np.ones((2, 4))), (3,))
    with pytest.raises(ValueError, match=r"BatchNorm2d.*4D.*\(2, 3\)"):
        nn.BatchNorm2d(3)(_t(np.ones((2, 3))))
    with pytest.raises(TypeError, match="batch_norm.*floating"):
        F.batch_norm(eager.tensor(np.ones((2, 3), np.int64)), None, None, training=True)
    with pytest.raises(Exception, match="running_mean and running_var"):
        F.batch_norm(_t(np.ones((2, 3))), None, None, training=False)
    with pytest.raises(ValueError, match=r"batch_norm: running_mean has shape \(3,\), expected \(4,\)"):
        nn.BatchNorm2d(3)(_t(np.ones((2, 4, 2, 2))))
    with pytest.raises(ValueError, match=r"group_norm: bias has shape \(4,\), expected \(6,\)"):
        F.group_norm(_t(np.ones((2, 6, 3))), 2, _t(np.ones(6)), _t(np.ones(4)))
    with pytest.raises(Exception, match="test_normalization.py"):  # the user's line
        F.group_norm(_t(np.ones((2, 6, 3))), 4)
