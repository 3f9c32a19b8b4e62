"""Activations and losses of issue 16 item 6 (eager): forward against float64 numpy
references from PyTorch's formulas, gradients against float64 finite differences, PyTorch's
gradient at the kinks, the module forms, and the errors (class indices out of range raise
IndexError; ignore_index is exempt)."""
import zlib

import numpy as np
import pytest

import eager
import eager.nn.functional as F
from eager import nn

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
from opinfo import to_call_arg, to_ref_arg
from opinfo_activations import ENTRIES
from test_grad import check_directional

TOL = {np.dtype(np.float32): (2e-5, 2e-6), np.dtype(np.float64): (1e-9, 1e-12)}
CASES = [(info, np.dtype(dt)) for info in ENTRIES for dt in info.dtypes]


def sample_rng(*parts):
    return np.random.default_rng(zlib.crc32("/".join(str(p) for p in parts).encode()))


def _call(info, sample):
    args = [to_call_arg(a) for a in sample.args]
    kwargs = {k: to_call_arg(v) for k, v in sample.kwargs.items()}
    return info.call(*args, **kwargs)


@pytest.mark.parametrize("info,dtype", CASES, ids=[f"{i.name}-{d}" for i, d in CASES])
def test_forward_matches_the_reference(info, dtype):
    samples = info.samples(sample_rng(info.name, dtype), dtype)
    assert any(s.special for s in samples) or info.name in ("glu", "normalize", "kl_div",
                                                              "nll_loss", "cross_entropy")
    rtol, atol = TOL[dtype]
    for sample in samples:
        out = _call(info, sample)
        want = info.ref(*(to_ref_arg(a) for a in sample.args),
                        **{k: to_ref_arg(v) for k, v in sample.kwargs.items()})
        where = f"{info.name} on {sample!r}"
        assert out.numpy().dtype == want.dtype, where
        assert out.shape == want.shape, where
        # a sum over many float32 terms: the error grows with the terms, hence the scale
        scale = max(1.0, float(np.nansum(np.abs(want[np.isfinite(want)]))) if want.ndim == 0
                    else 1.0)
        np.testing.assert_allclose(out.numpy(), want, rtol=rtol, atol=atol * scale,
                                   equal_nan=True, err_msg=where)


@pytest.mark.parametrize("info", ENTRIES, ids=[i.name for i in ENTRIES])
def test_gradient_matches_finite_differences(info):
    rng = sample_rng("grad", info.name)
    samples = info.grad_samples(rng)
    assert samples
    for sample in samples:
        check_directional(info, sample, rng)


# --------------------------------------------------------------------------------------
# kinks: PyTorch's backward formulas pick these subgradients

KINKS = [
    # (function, x values, expected dy/dx)
    (F.relu6, [0.0, 6.0, 3.0, -1.0, 7.0], [0.0, 0.0, 1.0, 0.0, 0.0]),
    (F.hardtanh, [-1.0, 1.0, 0.0, -2.0, 2.0], [0.0, 0.0, 1.0, 0.0, 0.0]),
    (lambda x: F.hardtanh(x, -2.0, 0.5), [-2.0, 0.5, 0.0], [0.0, 0.0, 1.0]),
    (F.hardswish, [-3.0, 3.0, 0.0, -4.0, 4.0], [-0.5, 1.5, 0.5, 0.0, 1.0]),
    (F.hardsigmoid, [-3.0, 3.0, 0.0, -4.0], [0.0, 0.0, 1 / 6, 0.0]),
    (F.leaky_relu, [0.0, -1.0, 1.0], [0.01, 0.01, 1.0]),
    (F.elu, [0.0], [1.0]),
    (lambda x: F.elu(x, alpha=0.5), [0.0], [0.5]),
    (lambda x: F.celu(x, alpha=2.0), [0.0], [1.0]),
    (F.selu, [0.0, 1.0], [1.0507009873554805 * 1.6732632423543772, 1.0507009873554805]),
    (F.softplus, [0.0, 20.0, 21.0], [0.5, 1 / (1 + np.exp(-20.0)), 1.0]),
    (F.logsigmoid, [0.0, 200.0, -200.0], [0.5, 0.0, 1.0]),
    (F.softsign, [0.0], [1.0]),
    (F.mish, [0.0], [np.tanh(np.log(2.0))]),
    (F.relu, [0.0], [0.0]),
]


@pytest.mark.parametrize("k", range(len(KINKS)))
def test_gradient_at_kinks_is_pytorchs(k):
    fn, xs, want = KINKS[k]
    x = eager.tensor(np.asarray(xs), requires_grad=True)
    fn(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-12, atol=1e-15)


def test_smooth_l1_and_huber_gradients_at_the_seams():
    x = eager.tensor([1.0, -1.0, 0.0, 2.0], requires_grad=True)
    y = eager.zeros(4, dtype=eager.float64)
    F.smooth_l1_loss(x, y, reduction="sum").backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, -1.0, 0.0, 1.0])
    x.grad = None
    F.huber_loss(x, y, reduction="sum", delta=2.0).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, -1.0, 0.0, 2.0])
    x.grad = None
    F.smooth_l1_loss(x, y, reduction="sum", beta=0.0).backward()  # l1: sign(0) = 0
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, -1.0, 0.0, 1.0])


def test_zero_norm_rows_normalize_to_zero_with_zero_gradient():
    x = eager.tensor([[0.0, 0.0, 0.0], [3.0, 0.0, 4.0]], requires_grad=True)
    out = F.normalize(x, dim=1)
    np.testing.assert_allclose(out.detach().numpy(), [[0, 0, 0], [0.6, 0, 0.8]])
    out.sum().backward()
    assert np.isfinite(x.grad.numpy()).all()
    # d/dx of x / ||x|| at 0 with the norm clamped at eps: 1 / eps on the diagonal
    np.testing.assert_allclose(x.grad.numpy()[0], [1e12] * 3)


def test_stable_forms_stay_finite_for_large_logits():
    x = eager.tensor([-1000.0, -100.0, 100.0, 1000.0], dtype=eager.float32, requires_grad=True)
    for out in (F.logsigmoid(x), F.softplus(x), F.mish(x), F.elu(x), F.selu(x), F.celu(x),
                F.binary_cross_entropy_with_logits(x, eager.ones(4), reduction="none")):
        assert np.isfinite(out.detach().numpy()).all(), out
        x.grad = None
        out.sum().backward()
        assert np.isfinite(x.grad.numpy()).all(), out


# --------------------------------------------------------------------------------------
# class-index losses: weight, ignore_index, errors

def test_mean_divides_by_the_weights_of_the_targets_not_ignored():
    logp = F.log_softmax(eager.tensor(np.arange(12.0).reshape(4, 3) / 7), 1)
    t = eager.tensor([0, -100, 2, 1])
    w = eager.tensor([1.0, 2.0, 3.0], dtype=eager.float64)
    lp = logp.numpy()
    want = -(1.0 * lp[0, 0] + 3.0 * lp[2, 2] + 2.0 * lp[3, 1]) / (1.0 + 3.0 + 2.0)
    assert F.nll_loss(logp, t, weight=w).item() == pytest.approx(want, rel=1e-12)
    assert np.isnan(F.nll_loss(logp, eager.tensor([-100] * 4)).item())  # 0 / 0 as PyTorch
    none = F.nll_loss(logp, t, weight=w, reduction="none").numpy()
    assert none[1] == 0.0 and none.shape == (4,)


@pytest.mark.parametrize("fn", [F.nll_loss, F.cross_entropy])
def test_out_of_range_class_indices_raise_index_error(fn):
    x = eager.randn(3, 4)
    for bad in ([0, 4, 1], [0, -1, 1], [0, -101, 1]):
        with pytest.raises(IndexError, match="out of bounds"):
            fn(x, eager.tensor(bad))
    with pytest.raises(IndexError):
        fn(eager.randn(2, 4, 3), eager.tensor([[0, 1, 5], [0, 0, 0]]))
    with pytest.raises(IndexError):
        fn(eager.randn(4), eager.tensor(4))
    # the ignored positions are exempt, whatever ignore_index is
    fn(x, eager.tensor([0, -100, 3]))
    fn(x, eager.tensor([0, 7, 3]), ignore_index=7)


def test_class_losses_refuse_mismatched_shapes_and_weights():
    x = eager.randn(3, 4)
    with pytest.raises(ValueError):
        F.cross_entropy(x, eager.tensor([0, 1]))
    with pytest.raises(ValueError):
        F.cross_entropy(eager.randn(2, 4, 3), eager.tensor([[0, 1], [0, 0]]))
    with pytest.raises(ValueError, match="weight"):
        F.cross_entropy(x, eager.tensor([0, 1, 2]), weight=eager.ones(3))
    with pytest.raises(TypeError):
        F.nll_loss(x, eager.tensor([0.0, 1.0, 2.0]))


def test_label_smoothing_with_weight_and_ignore_index_is_pytorchs_formula():
    # PyTorch: (1 - e) nll + e/C * sum_c(-w_c logp_c), ignored rows 0, the mean divided by the
    # summed target weights; computed here by hand
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 4))
    t = np.array([1, -100, 3])
    w = np.array([0.5, 1.0, 2.0, 1.5])
    e = 0.2
    lp = x - np.log(np.exp(x).sum(1, keepdims=True))
    rows = [(1 - e) * -w[t[i]] * lp[i, t[i]] + e / 4 * -(w * lp[i]).sum() for i in (0, 2)]
    want = sum(rows) / (w[1] + w[3])
    got = F.cross_entropy(eager.tensor(x), eager.tensor(t), weight=eager.tensor(w),
                          label_smoothing=e)
    assert got.item() == pytest.approx(want, rel=1e-12)


# --------------------------------------------------------------------------------------
# module forms

ACTIVATION_MODULES = [
    (nn.LeakyReLU(0.2), lambda x: F.leaky_relu(x, 0.2)), (nn.ELU(0.5), lambda x: F.elu(x, 0.5)),
    (nn.SELU(), F.selu), (nn.CELU(2.0), lambda x: F.celu(x, 2.0)), (nn.ReLU6(), F.relu6),
    (nn.Hardtanh(-2.0, 0.5), lambda x: F.hardtanh(x, -2.0, 0.5)), (nn.Hardswish(), F.hardswish),
    (nn.Hardsigmoid(), F.hardsigmoid), (nn.Softplus(2.0, 5.0), lambda x: F.softplus(x, 2, 5)),
    (nn.Softsign(), F.softsign), (nn.Mish(), F.mish), (nn.LogSigmoid(), F.logsigmoid),
    (nn.GLU(), F.glu), (nn.GLU(0), lambda x: F.glu(x, 0)),
    (nn.Softmin(1), lambda x: F.softmin(x, 1)), (nn.LogSoftmax(1), lambda x: F.log_softmax(x, 1)),
    (nn.Softmax(0), lambda x: F.softmax(x, 0)), (nn.SiLU(), F.silu), (nn.Sigmoid(), F.sigmoid),
    (nn.GELU(approximate="tanh"), lambda x: F.gelu(x, approximate="tanh")),
    (nn.Tanh(), F.tanh), (nn.Identity(), lambda x: x), (nn.ReLU(), F.relu),
]


@pytest.mark.parametrize("k", range(len(ACTIVATION_MODULES)))
def test_activation_modules_call_their_functions(k):
    module, fn = ACTIVATION_MODULES[k]
    x = eager.randn(4, 6)
    np.testing.assert_array_equal(module(x).numpy(), fn(x).numpy())
    assert repr(module).startswith(type(module).__name__ + "(")


def test_inplace_activations_write_into_their_input():
    for module in (nn.ReLU(inplace=True), nn.LeakyReLU(0.1, inplace=True), nn.ELU(inplace=True),
                   nn.Hardtanh(inplace=True), nn.ReLU6(inplace=True), nn.Hardswish(True)):
        x = eager.randn(3, 4) * 4
        want = type(module)(*([0.1] if isinstance(module, nn.LeakyReLU) else []))(x)
        out = module(x)
        assert out is x, module
        np.testing.assert_array_equal(x.numpy(), want.numpy())
    # through autograd, as PyTorch: an in-place activation of a non-leaf
    w = eager.randn(3, requires_grad=True)
    h = w * 2
    F.leaky_relu(h, 0.1, inplace=True).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), np.where(w.detach().numpy() > 0, 2.0, 0.2))
    assert "inplace=True" in repr(nn.ELU(inplace=True))


def test_implicit_softmin_dim_warns_as_pytorch():
    with pytest.warns(UserWarning, match="Implicit dimension"):
        out = nn.Softmin()(eager.randn(2, 3))
    np.testing.assert_allclose(out.numpy().sum(1), [1.0, 1.0], rtol=1e-6)


def test_loss_modules_take_pytorchs_constructor_arguments():
    rng = np.random.default_rng(5)
    x = eager.tensor(rng.standard_normal((4, 3)), dtype=eager.float32)
    y = eager.tensor(rng.uniform(0, 1, (4, 3)), dtype=eager.float32)
    t = eager.tensor([0, 2, -100, 1])
    w = eager.tensor([1.0, 2.0, 0.5])
    pairs = [
        (nn.CrossEntropyLoss(weight=w, label_smoothing=0.1)(x, t),
         F.cross_entropy(x, t, weight=w, label_smoothing=0.1)),
        (nn.CrossEntropyLoss(ignore_index=1)(x, eager.tensor([0, 1, 2, 1])), F.cross_entropy(
            x, eager.tensor([0, 1, 2, 1]), ignore_index=1)),
        (nn.NLLLoss(w, reduction="sum")(x, eager.tensor([0, 2, 1, 1])),
         F.nll_loss(x, eager.tensor([0, 2, 1, 1]), weight=w, reduction="sum")),
        (nn.BCELoss(weight=w)(F.sigmoid(x), y), F.binary_cross_entropy(F.sigmoid(x), y, w)),
        (nn.BCEWithLogitsLoss(pos_weight=w)(x, y),
         F.binary_cross_entropy_with_logits(x, y, pos_weight=w)),
        (nn.L1Loss(reduction="sum")(x, y), F.l1_loss(x, y, reduction="sum")),
        (nn.SmoothL1Loss(beta=0.5)(x, y), F.smooth_l1_loss(x, y, beta=0.5)),
        (nn.HuberLoss(delta=0.3)(x, y), F.huber_loss(x, y, delta=0.3)),
        (nn.KLDivLoss(reduction="batchmean", log_target=True)(x, y),
         F.kl_div(x, y, reduction="batchmean", log_target=True)),
        (nn.MSELoss()(x, y), F.mse_loss(x, y)),
        (nn.L1Loss(size_average=False)(x, y), F.l1_loss(x, y, reduction="sum")),
        (nn.L1Loss(reduce=False)(x, y), F.l1_loss(x, y, reduction="none")),
    ]
    for got, want in pairs:
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    loss = nn.CrossEntropyLoss(weight=w)
    assert list(loss.state_dict()) == ["weight"]  # a buffer, as in PyTorch
    assert list(nn.BCEWithLogitsLoss(pos_weight=w).state_dict()) == ["pos_weight"]
    assert list(nn.CrossEntropyLoss().state_dict()) == []


def test_pointwise_losses_refuse_mismatched_shapes_and_integer_targets():
    x = eager.randn(3)
    for fn in (F.l1_loss, F.smooth_l1_loss, F.huber_loss, F.kl_div, F.binary_cross_entropy,
               F.binary_cross_entropy_with_logits):
        with pytest.raises(ValueError):
            fn(x, eager.randn(4))
        with pytest.raises(TypeError):
            fn(x, eager.tensor([0, 1, 1]))


def test_glu_needs_an_even_dimension():
    with pytest.raises(ValueError, match="even"):
        F.glu(eager.randn(2, 3))


TINY = [  # (function, x): results far below 1, where exp(x) - 1 or log(1 + x) would lose them
    (F.logsigmoid, [30.0, 60.0]), (F.softplus, [-30.0, -60.0]), (F.elu, [-1e-10, -3e-30]),
    (F.selu, [-1e-10, -3e-30]), (F.celu, [-1e-10, -3e-30]), (F.mish, [-1e-10, -60.0]),
    (lambda x: F.binary_cross_entropy_with_logits(x, eager.ones_like(x), reduction="none"),
     [30.0, 60.0]),
    (lambda x: F.binary_cross_entropy(x, eager.zeros_like(x), reduction="none"),
     [1e-10, 3e-30]),
]
TINY_REFS = [
    lambda x: -np.log1p(np.exp(-x)), lambda x: np.log1p(np.exp(x)), np.expm1,
    lambda x: 1.0507009873554805 * 1.6732632423543772 * np.expm1(x), np.expm1,
    lambda x: x * np.tanh(np.log1p(np.exp(x))), lambda x: np.log1p(np.exp(-x)),
    lambda x: -np.log1p(-x),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", range(len(TINY)))
def test_tiny_results_keep_their_relative_accuracy(k, dtype):
    fn, xs = TINY[k]
    x = np.asarray(xs, dtype)
    want = TINY_REFS[k](x.astype(np.float64))
    got = fn(eager.tensor(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=0)
