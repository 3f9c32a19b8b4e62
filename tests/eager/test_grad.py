"""Every differentiable registry op and composite: gradients against central finite
differences in float64 along random directions (see opinfo.py), and second derivatives
through `eager.autograd.grad(..., create_graph=True)`."""
import zlib

import numpy as np
import pytest

import eager

# NaN/inf samples are deliberate; numpy's "invalid value" warnings are expected (eager's own
# filter for them is dropped when pytest restores the warning filters after collection).
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
from opinfo import OPINFOS, grad_cases, to_call_arg, values

F64 = np.dtype(np.float64)


def sample_rng(*parts) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32("/".join(str(p) for p in parts).encode()))


def _differentiable(sample):
    """Positions of the sample's floating-point array arguments (the ones we differentiate)."""
    return [i for i, a in enumerate(sample.args)
            if isinstance(a, np.ndarray) and a.dtype.kind == "f"]


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def _call(info, sample, arrays, requires_grad=()):
    args = []
    for i, a in enumerate(sample.args):
        if i in arrays:
            args.append(eager.tensor(arrays[i], requires_grad=i in requires_grad))
        else:
            args.append(to_call_arg(a))
    kwargs = {k: to_call_arg(v) for k, v in sample.kwargs.items()}
    return args, _first(info.call(*args, **kwargs))


def _loss_value(info, sample, arrays, w):
    with eager.no_grad():
        _, out = _call(info, sample, arrays)
    return float(np.sum(out.numpy().astype(np.float64) * w))


def check_directional(info, sample, rng):
    """<grad L, u> == (L(x + eps u) - L(x - eps u)) / 2 eps for L = sum(f(x) * w)."""
    diff = _differentiable(sample)
    assert diff, f"{info.name}: {sample!r} has no floating-point input to differentiate"
    arrays = {i: sample.args[i] for i in diff}
    args, out = _call(info, sample, arrays, requires_grad=diff)
    assert out.requires_grad and out.grad_fn is not None or out.numel() == 0 or \
        out is args[diff[0]], f"{info.name}: output is not attached to the graph"
    w = np.asarray(rng.standard_normal(out.shape), out.dtype)
    loss = (out * eager.tensor(w)).sum()
    if loss.requires_grad:
        loss.backward()
    eps = info.grad_eps
    rtol, atol = info.grad_tol
    scale = 1.0 + float(np.sum(np.abs(out.detach().numpy().astype(np.float64) * w)))
    for i in diff:
        x = arrays[i]
        g = args[i].grad
        if g is None:  # unused input (an empty output or input): its gradient is zero
            assert out.numel() == 0 or x.size == 0, \
                f"{info.name}: no gradient for input {i} on {sample!r}"
            g_np = np.zeros_like(x)
        else:
            assert g.shape == x.shape, f"{info.name}: grad shape {g.shape} != {x.shape}"
            assert g.dtype == x.dtype, f"{info.name}: grad dtype {g.dtype} != {x.dtype}"
            assert g.grad_fn is None and not g.requires_grad
            g_np = g.numpy()
        if x.size == 0:  # nothing to perturb; the shape and dtype checks above suffice
            continue
        u = rng.standard_normal(x.shape).astype(x.dtype)
        plus = {**arrays, i: np.asarray(x + eps * u, x.dtype)}
        minus = {**arrays, i: np.asarray(x - eps * u, x.dtype)}
        fd = (_loss_value(info, sample, plus, w) - _loss_value(info, sample, minus, w)) / (2 * eps)
        analytic = float(np.sum(g_np.astype(np.float64) * u))
        assert abs(analytic - fd) <= rtol * abs(fd) + atol * scale, (
            f"{info.name}, input {i} of {sample!r}: analytic {analytic!r} vs finite "
            f"difference {fd!r}")


@pytest.mark.parametrize("info", grad_cases(), ids=[i.name for i in grad_cases()])
def test_gradient_matches_finite_differences(info):
    rng = sample_rng(info.name)
    samples = info.grad_samples(rng)
    assert samples
    for sample in samples:
        check_directional(info, sample, rng)


def _refuses_second_order(op) -> bool:
    """A row whose vjp only raises NotImplementedError (lstm_recurrence_backward): a
    gradient through it is refused, never a silently missing term; no samples to check."""
    if not callable(op.vjp):
        return False
    try:
        op.vjp(None, None)
    except NotImplementedError:
        return True
    except Exception:  # noqa: BLE001 - a real rule, failing on these placeholder arguments
        return False
    return False


def test_every_differentiable_op_has_gradient_samples():
    covered = {info.op for info in grad_cases()}
    missing = sorted(name for name, op in eager.ops.OPS.items()
                     if op.vjp is not None and name not in covered
                     and not _refuses_second_order(op))
    assert not missing, f"differentiable ops without gradient samples in opinfo.py: {missing}"


def test_non_differentiable_ops_have_no_gradient_samples():
    for info in grad_cases():
        if info.op is not None:
            assert eager.ops.OPS[info.op].vjp is not None, info.name


def test_gradient_samples_are_float64_and_finite():
    for info in grad_cases():
        for s in info.grad_samples(sample_rng(info.name)):
            for a in s.args:
                if isinstance(a, np.ndarray) and a.dtype.kind == "f":
                    assert a.dtype == F64 and np.isfinite(a).all(), info.name


# --------------------------------------------------------------------------------------
# second derivatives: d/dx <grad L(x), v> against finite differences of grad L

SECOND_ORDER = ["tanh", "exp", "mul", "matmul", "softmax", "log_softmax", "sigmoid", "log",
                "sqrt", "div", "pow", "erf", "gelu", "gelu_tanh", "layer_norm", "logsumexp",
                "cross_entropy", "mse_loss", "linear", "amax", "max_dim", "maximum", "abs",
                "relu", "sum", "mean", "getitem", "gather", "cat", "expand", "permute",
                "reshape", "where", "clamp", "scatter_add", "scatter_slice", "silu", "stack",
                "log1p", "expm1"]


def _grad_dot(info, sample, arrays, w, v, create_graph):
    """<grad_x sum(f(x) * w), v>: a scalar tensor, itself differentiable with create_graph."""
    diff = sorted(arrays)
    args, out = _call(info, sample, arrays, requires_grad=diff)
    loss = (out * eager.tensor(w)).sum()
    grads = eager.autograd.grad(loss, [args[i] for i in diff], create_graph=create_graph,
                                allow_unused=True)
    total = eager.tensor(0.0, dtype=eager.float64)
    for g, i in zip(grads, diff):
        if g is not None:
            total = total + (g * eager.tensor(v[i])).sum()
    return args, total


@pytest.mark.parametrize("name", SECOND_ORDER)
def test_second_derivative_matches_finite_differences(name):
    info = next(i for i in OPINFOS if i.name == name)
    rng = sample_rng("second", name)
    samples = [s for s in info.grad_samples(rng)
               if all(getattr(a, "size", 1) for a in s.args)][:3]
    assert samples
    eps = 1e-5
    for sample in samples:
        diff = _differentiable(sample)
        arrays = {i: sample.args[i] for i in diff}
        with eager.no_grad():
            _, out = _call(info, sample, arrays)
        w = np.asarray(rng.standard_normal(out.shape))
        v = {i: np.asarray(rng.standard_normal(arrays[i].shape)) for i in diff}
        args, s = _grad_dot(info, sample, arrays, w, v, create_graph=True)
        if s.requires_grad:
            second = eager.autograd.grad(s, [args[i] for i in diff], allow_unused=True)
        else:  # the gradient does not depend on x (a linear op): the Hessian is zero
            second = [None] * len(diff)
        for g2, i in zip(second, diff):
            u = rng.standard_normal(arrays[i].shape)
            plus = {**arrays, i: np.asarray(arrays[i] + eps * u)}
            minus = {**arrays, i: np.asarray(arrays[i] - eps * u)}
            fd = (_grad_dot(info, sample, plus, w, v, False)[1].item()
                  - _grad_dot(info, sample, minus, w, v, False)[1].item()) / (2 * eps)
            analytic = 0.0 if g2 is None else float(np.sum(g2.numpy() * u))
            assert abs(analytic - fd) <= 1e-5 * abs(fd) + 1e-6 * (1 + abs(s.item())), (
                f"{name}, input {i} of {sample!r}: analytic {analytic!r} vs {fd!r}")


def test_create_graph_gives_higher_derivatives_of_a_polynomial():
    x = eager.tensor([1.5, -2.0], dtype=eager.float64, requires_grad=True)
    y = (x ** 3).sum()
    (g,) = eager.autograd.grad(y, x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), 3 * np.array([1.5, -2.0]) ** 2)
    (h,) = eager.autograd.grad(g.sum(), x, create_graph=True)
    np.testing.assert_allclose(h.detach().numpy(), 6 * np.array([1.5, -2.0]))
    (k,) = eager.autograd.grad(h.sum(), x)
    np.testing.assert_allclose(k.numpy(), [6.0, 6.0])


# --------------------------------------------------------------------------------------
# gradients at the kinks: the documented choices

def _grad(fn, *arrays):
    ts = [eager.tensor(np.asarray(a, np.float64), requires_grad=True) for a in arrays]
    fn(*ts).sum().backward()
    return [t.grad.numpy() for t in ts]


def test_relu_and_abs_gradient_at_zero_is_zero():
    (g,) = _grad(eager.relu, [-1.0, 0.0, 2.0])
    np.testing.assert_array_equal(g, [0.0, 0.0, 1.0])
    (g,) = _grad(eager.abs, [-1.0, 0.0, 2.0])
    np.testing.assert_array_equal(g, [-1.0, 0.0, 1.0])


def test_maximum_minimum_ties_split_the_gradient():
    ga, gb = _grad(eager.maximum, [1.0, 2.0, 3.0], [1.0, 5.0, 0.0])
    np.testing.assert_array_equal(ga, [0.5, 0.0, 1.0])
    np.testing.assert_array_equal(gb, [0.5, 1.0, 0.0])
    ga, gb = _grad(eager.minimum, [1.0, 2.0], [1.0, 5.0])
    np.testing.assert_array_equal(ga, [0.5, 1.0])
    np.testing.assert_array_equal(gb, [0.5, 0.0])


def test_amax_ties_share_the_gradient_evenly():
    (g,) = _grad(lambda x: x.amax(dim=1), [[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    np.testing.assert_allclose(g, [[0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]])
    (g,) = _grad(lambda x: eager.max(x, 0).values, [[1.0, 4.0], [1.0, 0.0]])
    np.testing.assert_allclose(g, [[0.5, 1.0], [0.5, 0.0]])


def test_clamp_gradient_is_one_on_the_closed_interval():
    x = [-2.0, -1.0, 0.0, 1.0, 2.0]
    (g,) = _grad(lambda t: eager.clamp(t, -1.0, 1.0), x)
    np.testing.assert_array_equal(g, [0, 1, 1, 1, 0])
    lo = eager.tensor(np.full(5, -1.0))
    hi = eager.tensor(np.full(5, 1.0))
    (g,) = _grad(lambda t: eager.clamp(t, lo, hi), x)
    np.testing.assert_array_equal(g, [0, 1, 1, 1, 0])


def test_sqrt_and_log_gradients_at_zero_are_infinite():
    (g,) = _grad(eager.sqrt, [0.0, 4.0])
    assert g[0] == np.inf and g[1] == 0.25
    (g,) = _grad(eager.log, [0.0, 2.0])
    assert g[0] == np.inf and g[1] == 0.5


def test_pow_gradient_with_respect_to_exponent_at_zero_base():
    ga, gb = _grad(eager.pow, [0.0, 2.0], [2.0, 3.0])
    np.testing.assert_allclose(ga, [0.0, 12.0])
    np.testing.assert_allclose(gb, [0.0, 8 * np.log(2.0)])


def test_masked_softmax_gradients_are_finite():
    # -inf logits (attention masks) get probability 0 and gradient 0, not NaN
    x = eager.tensor(np.array([[0.0, -np.inf, 1.0]]), requires_grad=True)
    w = eager.tensor(np.array([[1.0, 2.0, 3.0]]))
    (eager.softmax(x, -1) * w).sum().backward()
    assert np.isfinite(x.grad.numpy()).all() and x.grad.numpy()[0, 1] == 0
    x.grad = None
    eager.nn.functional.log_softmax(x, -1)[:, [0, 2]].sum().backward()
    assert np.isfinite(x.grad.numpy()).all() and x.grad.numpy()[0, 1] == 0


def test_float32_gradients_stay_float32():
    x = eager.tensor(values(np.random.default_rng(0), (3, 4), np.dtype(np.float32)),
                     requires_grad=True)
    w = eager.tensor(np.ones((4, 2), np.float32), requires_grad=True)
    y = eager.softmax(eager.nn.functional.gelu(x @ w), -1)
    (y * eager.tensor(np.arange(6, dtype=np.float32).reshape(3, 2))).sum().backward()
    assert x.grad.dtype == eager.float32 and w.grad.dtype == eager.float32


def test_mixed_precision_gradients_come_back_in_the_input_dtype():
    a = eager.tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    b = eager.tensor(np.array([3.0, 4.0], np.float64), requires_grad=True)
    (a * b).sum().backward()
    assert a.grad.dtype == eager.float32 and b.grad.dtype == eager.float64
    np.testing.assert_allclose(a.grad.numpy(), [3.0, 4.0])
    np.testing.assert_allclose(b.grad.numpy(), [1.0, 2.0])

