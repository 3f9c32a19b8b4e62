"""Issue 13, items 10, 11 and 13 (numerics): eager against numpy / PyTorch's documented
values, and compiled (both backends) against eager on the same inputs, gradients included.
Each test is a repro as a user writes it."""
import numpy as np
import pytest

import eager
import eager.nn.functional as F
import tracer

BACKENDS = ["numba", "interpret"]


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def same(actual, expected, rtol=1e-6):
    """Equal values, NaN where NaN, and the sign of infinities and of zeros."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=0, equal_nan=True)
    zeros = expected == 0
    np.testing.assert_array_equal(np.signbit(actual[zeros]), np.signbit(expected[zeros]))


def grads_of(fn, *values, seed_grad=None):
    """(outputs, .grad of every input) of fn on fresh leaves made from `values`."""
    xs = [eager.tensor(v, requires_grad=True) for v in values]
    out = fn(*xs)
    (out.sum() if seed_grad is None else seed_grad(out)).backward()
    return out.detach().numpy(), [None if x.grad is None else x.grad.numpy() for x in xs]


def check_compiled(fn, *values, backend):
    """fn compiled on `backend` gives eager's outputs and input gradients."""
    expected, expected_grads = grads_of(fn, *values)
    actual, actual_grads = grads_of(tracer.function(fn, backend=backend), *values)
    same(actual, expected)
    for a, e in zip(actual_grads, expected_grads):
        assert (a is None) == (e is None)
        if e is not None:
            same(a, e)


# ------------------------------------------------------------------------- item 10

def test_np_array_with_copy_true_does_not_share_the_tensor_memory():
    t = eager.tensor([1.0, 2.0])
    a = np.array(t, copy=True)
    a[0] = 9.0
    assert t.numpy()[0] == 1.0
    assert np.shares_memory(np.asarray(t), t.numpy())  # without copy it may share


def test_division_by_zero_keeps_the_sign_of_zero_after_minus_zero(backend):
    x = eager.tensor([1.0, -1.0])
    same((x / -0.0).numpy(), np.array([-np.inf, np.inf], np.float32))
    same((x / 0.0).numpy(), np.array([np.inf, -np.inf], np.float32))
    both = tracer.function(lambda x: (x / -0.0, x / 0.0), backend=backend)
    neg, pos = both(x)
    same(neg.numpy(), np.array([-np.inf, np.inf], np.float32))
    same(pos.numpy(), np.array([np.inf, -np.inf], np.float32))
    # as static arguments: 0.0 and -0.0 are different keys, two traces
    div = tracer.function(lambda x, d: x / d, static_argnums=(1,), backend=backend)
    same(div(x, -0.0).numpy(), np.array([-np.inf, np.inf], np.float32))
    same(div(x, 0.0).numpy(), np.array([np.inf, -np.inf], np.float32))
    assert div.trace_count == 2


@pytest.mark.parametrize("backend_", [
    "numba",
    "interpret"])
def test_adding_zero_is_not_simplified_away_where_it_changes_minus_zero(backend_):
    # -0.0 + 0.0 is +0.0 (1 / it is +inf): the passes keep x + 0.0 and drop only x + (-0.0)
    x = eager.tensor([-0.0, 1.0, -2.0])
    for fn in (lambda x: 1 / (x + 0.0), lambda x: 1 / (0.0 + x), lambda x: 1 / (x - -0.0),
               lambda x: 1 / (x - 0.0), lambda x: 1 / (x + -0.0),
               lambda x: 1 / (x * 0.0) - 1 / (x * -0.0)):  # two constants, not one (cse)
        same(tracer.function(fn, backend=backend_)(x).numpy(), fn(x).numpy())
    y = eager.tensor([-0.0, 1.0], requires_grad=True)
    assert np.signbit(y.clone().detach().numpy()[0])  # clone keeps -0.0


def test_a_nan_static_argument_hits_the_cache(backend):
    f = tracer.function(lambda x, s: x * s, static_argnums=(1,), backend=backend)
    x = eager.tensor([1.0, 2.0])
    for _ in range(3):
        assert np.isnan(f(x, float("nan")).numpy()).all()
    assert f.trace_count == 1
    g = tracer.function(lambda x, s: x * s[1], static_argnums=(1,), backend=backend)
    for _ in range(2):
        g(x, (1.0, float("nan")))  # nested in a tuple too
    assert g.trace_count == 1


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_integer_min_and_argmin_see_int_min(dtype, backend):
    info = np.iinfo(dtype)
    data = np.array([[3, info.min, 0], [info.max, 5, info.min + 1]], dtype)
    x = eager.tensor(data)
    assert x.min().item() == info.min
    assert x.argmin().item() == 1
    same(x.amin(1).numpy(), data.min(1))
    same(x.argmin(1).numpy(), data.argmin(1))
    same(x.min(0).values.numpy(), data.min(0))
    f = tracer.function(lambda x: (x.amin(1), x.argmin(1), x.min()), backend=backend)
    mins, args, lowest = f(x)
    same(mins.numpy(), data.min(1))
    same(args.numpy(), data.argmin(1))
    assert lowest.item() == info.min


def test_cross_entropy_with_probability_targets_applies_label_smoothing(backend):
    logits = np.array([[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]], np.float32)
    probs = np.array([[0.2, 0.5, 0.3], [1.0, 0.0, 0.0]], np.float32)
    ls = 0.1
    z = logits.astype(np.float64)
    logp = z - z.max(1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
    smoothed = probs * (1 - ls) + ls / 3
    expected = -(logp * smoothed).sum(1).mean()
    loss = F.cross_entropy(eager.tensor(logits), eager.tensor(probs), label_smoothing=ls)
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert loss.item() != pytest.approx(
        F.cross_entropy(eager.tensor(logits), eager.tensor(probs)).item(), rel=1e-6)
    check_compiled(lambda a, p: F.cross_entropy(a, p, label_smoothing=ls), logits, probs,
                   backend=backend)


def test_pow_gradients_at_base_zero_follow_pytorch(backend):
    # d/dx x**0.0 at 0: PyTorch 0 (not 0 * 0**-1 = NaN)
    _, (gx,) = grads_of(lambda x: x ** 0.0, np.array([0.0, 2.0], np.float32))
    same(gx, np.array([0.0, 0.0], np.float32))
    # d/db 0**b: -inf for b < 0, 0 for b >= 0 (PyTorch); b*log(a) elsewhere
    base = np.array([0.0, 0.0, 0.0, 2.0], np.float32)
    b = np.array([-1.0, 0.0, 2.0, 3.0], np.float32)
    _, (ga, gb) = grads_of(lambda a, b: a ** b, base, b)
    same(gb, np.array([-np.inf, 0.0, 0.0, 8 * np.log(2.0)], np.float32))
    same(ga, np.array([np.inf, 0.0, 0.0, 12.0], np.float32)
         * np.array([-1, 1, 1, 1], np.float32))
    check_compiled(lambda a, b: a ** b, base, b, backend=backend)
    check_compiled(lambda x: x ** 0.0, np.array([0.0, 2.0], np.float32), backend=backend)
    check_compiled(lambda x: 3.0 ** x, np.array([1.0, 4.0], np.float32), backend=backend)


def test_negative_class_indices_raise_index_error(backend):
    logits = eager.randn(2, 3)
    emb = eager.nn.Embedding(4, 2)
    loss = tracer.function(lambda a, t: F.cross_entropy(a, t), backend=backend)
    look = tracer.function(lambda i: emb(i), backend=backend)
    good = eager.tensor([0, 2])
    assert loss(logits, good).item() == pytest.approx(F.cross_entropy(logits, good).item())
    same(look(good).detach().numpy(), emb(good).detach().numpy())
    for call in (lambda: F.cross_entropy(logits, eager.tensor([0, -1])),
                 lambda: F.cross_entropy(logits, eager.tensor([0, -1]), label_smoothing=0.1),
                 lambda: emb(eager.tensor([-1, 1])),
                 lambda: emb(eager.tensor([4])),
                 lambda: loss(logits, eager.tensor([0, -1])),
                 lambda: look(eager.tensor([-1, 1]))):
        with pytest.raises(IndexError, match="out of bounds"):
            call()
    with pytest.raises(IndexError, match="test_numerics_soundness.py"):
        emb(eager.tensor([-1, 1]))  # eagerly: the user's line


def test_dims_of_a_0d_tensor_are_checked():
    s = eager.tensor(3.0)
    for call in (lambda: s.sum(1), lambda: s.squeeze(10), lambda: s.mean(2),
                 lambda: s.amax(-2)):
        with pytest.raises(IndexError, match="out of range"):
            call()
    for d in (0, -1):  # PyTorch's rule: a 0-d tensor takes dim 0 and -1
        assert s.sum(d).item() == 3.0
        assert s.squeeze(d).item() == 3.0


# ------------------------------------------------------------------------- item 13, eager

def test_casts_to_int_or_bool_do_not_require_grad(backend):
    x = eager.tensor([1.5, -2.0], requires_grad=True)
    for y in (x.long(), x.int(), x.bool(), x.to(eager.int64), x > 0, x.argmax()):
        assert not y.requires_grad and y.grad_fn is None
    assert x.double().requires_grad
    f = tracer.function(lambda x: (x.long(), x * 2), backend=backend)
    ints, doubled = f(x)
    assert not ints.requires_grad and doubled.requires_grad
    same(ints.numpy(), np.array([1, -2], np.int64))


def test_sign_is_zero_at_nan_and_has_a_zero_gradient(backend):
    data = np.array([np.nan, -2.0, 0.0, -0.0, 3.0, np.inf], np.float32)
    expected = np.array([0.0, -1.0, 0.0, 0.0, 1.0, 1.0], np.float32)
    same(eager.tensor(data).sign().numpy(), expected)
    same(tracer.function(lambda x: x.sign(), backend=backend)(eager.tensor(data)).numpy(),
         expected)
    out, (g,) = grads_of(lambda x: x.sign() * 2, np.array([1.5, -2.0], np.float32))
    same(g, np.zeros(2, np.float32))
    check_compiled(lambda x: x.sign() * x, np.array([1.5, -2.0], np.float32), backend=backend)


def test_std_gradient_is_zero_at_zero_spread(backend):
    data = np.array([[1.0, 1.0, 1.0], [1.0, 2.0, 4.0]], np.float32)
    out, (g,) = grads_of(lambda x: x.std(1), data)
    assert out[0] == 0.0
    same(g[0], np.zeros(3, np.float32))
    # elsewhere: (x - mean) / ((n - 1) * std), against float64 numpy
    row = data[1].astype(np.float64)
    ref = (row - row.mean()) / ((3 - 1) * row.std(ddof=1))
    np.testing.assert_allclose(g[1], ref, rtol=1e-5)
    check_compiled(lambda x: x.std(1), data, backend=backend)
    check_compiled(lambda x: x.std(), np.ones((2, 3), np.float32), backend=backend)


def test_clamp_with_a_nan_bound_gives_nan(backend):
    data = np.array([-1.0, 0.5, 2.0, np.nan], np.float32)
    x = eager.tensor(data)
    nan = np.full(4, np.nan, np.float32)
    same(x.clamp(min=float("nan")).numpy(), nan)
    same(x.clamp(max=float("nan")).numpy(), nan)
    same(x.clamp(0.0, 1.0).numpy(), np.array([0.0, 0.5, 1.0, np.nan], np.float32))
    bound = eager.tensor([0.0, np.nan, 0.0, 0.0])
    same(x.clamp(min=bound).numpy(), np.array([0.0, np.nan, 2.0, np.nan], np.float32))
    f = tracer.function(lambda x, b: (x.clamp(min=float("nan")), x.clamp(max=b)),
                        backend=backend)
    low, high = f(x, bound)
    same(low.numpy(), nan)
    same(high.numpy(), np.array([-1.0, np.nan, 0.0, np.nan], np.float32))
    # the gradient is 1 inside the closed interval, 0 where the bound was taken
    _, (g,) = grads_of(lambda x: x.clamp(0.0, 1.0), np.array([-1.0, 0.0, 0.5, 1.0, 2.0],
                                                             np.float32))
    same(g, np.array([0.0, 1.0, 1.0, 1.0, 0.0], np.float32))


def test_view_of_a_non_contiguous_tensor_raises_and_says_reshape(backend):
    x = eager.arange(12.0).reshape(3, 4)
    cases = [lambda x: x.T.view(-1), lambda x: x.permute(1, 0).view(2, 6),
             lambda x: x[:, 1:3].view(6), lambda x: x.T.view_as(eager.zeros(12))]
    for case in cases:
        with pytest.raises(RuntimeError, match=r"reshape.*|test_numerics_soundness\.py") as info:
            case(x)
        assert "reshape" in str(info.value) and "test_numerics_soundness.py" in str(info.value)
        with pytest.raises(RuntimeError, match="reshape"):
            tracer.function(case, backend=backend)(x)
    # what stays allowed: views that need no copy, and reshape / contiguous().view anywhere
    fine = lambda x: (x.view(4, 3) * 1, x[1:].view(-1) * 1, x[:, ::2].view(-1) * 1,  # noqa
                      x.T.reshape(-1) * 1, x.T.contiguous().view(-1) * 1,
                      x.unsqueeze(0).permute(1, 0, 2).view(3, 4) * 1)
    compiled = tracer.function(fine, backend=backend)(x)
    for a, e in zip(compiled, fine(x)):
        same(a.numpy(), e.numpy())
    assert x.T.contiguous().is_contiguous() and not x.T.is_contiguous()
    # a view's writes reach the base
    y = eager.zeros(2, 3)
    y.view(3, 2)[0].add_(5.0)
    same(y.numpy().ravel(), np.array([5, 5, 0, 0, 0, 0], np.float32))


def test_stack_promotes_mixed_dtypes(backend):
    a, i = eager.tensor([1.5, 2.0]), eager.tensor([1, 2])
    expected = np.array([[1.5, 2.0], [1.0, 2.0]], np.float32)
    same(eager.stack([a, i]).numpy(), expected)
    same(eager.stack([i, a], dim=1).numpy(), expected[::-1].T.copy())
    f = tracer.function(lambda a, i: eager.stack([a, i]), backend=backend)
    same(f(a, i).numpy(), expected)


# ------------------------------------------------------------------------- item 11

def test_sqrt_backward_compiles(backend):
    check_compiled(lambda x: x.sqrt(), np.array([1.0, 4.0], np.float32), backend=backend)


@pytest.mark.parametrize("case", ["x[0]", "x[1,1,1]"])
def test_backward_of_a_0d_getitem(case, backend):
    fn = {"x[0]": lambda x: x[0], "x[1,1,1]": lambda x: x[1, 1, 1]}[case]
    data = np.arange(8, dtype=np.float32).reshape((8,) if case == "x[0]" else (2, 2, 2))
    check_compiled(fn, data, backend=backend)


@pytest.mark.parametrize("op", ["sum", "amax", "mean"])
def test_keepdim_reduction_over_a_leading_size_1_dim(op, backend):
    data = np.array([[1.0, -2.0, 3.0]], np.float32)
    check_compiled(lambda x: getattr(x, op)(0, keepdim=True) * 2 + x, data, backend=backend)
    check_compiled(lambda x: getattr(x, op)(1, keepdim=True) * 2 + x, data.T.copy(),
                   backend=backend)


def test_var_over_a_dimension_of_size_1_compiles(backend):
    data = np.array([[1.0, -2.0, 3.0]], np.float32)
    f = tracer.function(lambda x: x.var(dim=0), backend=backend)
    same(f(eager.tensor(data)).numpy(), np.full(3, np.nan, np.float32))
    check_compiled(lambda x: x.var(dim=1) + x.var(dim=0, correction=0).sum(), data,
                   backend=backend)


@pytest.mark.parametrize("backend_", [
    "numba",
    "interpret"])
def test_var_gradient_where_n_minus_correction_is_0_is_nan(backend_):
    data = np.array([[1.0, -2.0, 3.0]], np.float32)
    _, (g,) = grads_of(lambda x: x.var(dim=0), data)
    assert np.isnan(g).all()
    check_compiled(lambda x: x.var(dim=0), data, backend=backend_)
    check_compiled(lambda x: x.std(dim=0), data, backend=backend_)


def test_batched_matmul_then_transpose(backend):
    rng = np.random.default_rng(0)
    w = eager.tensor(rng.standard_normal((4, 5)).astype(np.float32))
    for xs, fn in [((2, 3, 4), lambda x: (x @ w).transpose(-2, -1)),
                   ((3, 4), lambda x: (x @ w.expand(2, 4, 5)).transpose(-2, -1))]:
        x = eager.tensor(rng.standard_normal(xs).astype(np.float32))
        out = tracer.function(fn, backend=backend)(x)
        np.testing.assert_allclose(out.numpy(), fn(x).numpy(), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------- item 13, compiled

def test_an_output_without_gradient_puts_no_nan_into_the_gradients(backend):
    def step(x, w):
        return (x * w).sum(), x.sqrt(), (w * 3).exp()

    def run(fn):
        x = eager.tensor([0.0, 1.0], requires_grad=True)
        w = eager.tensor([2.0, 3.0], requires_grad=True)
        grads = []
        for pick in (lambda o: o[0], lambda o: o[1].sum() + o[2].sum(), lambda o: o[2].sum()):
            pick(fn(x, w)).backward()
            grads += [None if t.grad is None else t.grad.numpy() for t in (x, w)]
            x.grad = w.grad = None
        return grads

    expected = run(step)
    actual = run(tracer.function(step, backend=backend))
    assert not np.isnan(actual[0]).any()
    for a, e in zip(actual, expected):
        assert (a is None) == (e is None)
        if e is not None:
            same(a, e)


_LAYOUT_STEPS = {
    "T": lambda x: x.transpose(-1, -2) if x.ndim >= 2 else x,
    "perm": lambda x: x.permute(2, 0, 1) if x.ndim == 3 else x,
    "slice": lambda x: x[1:] if x.shape[0] > 1 else x,
    "step": lambda x: x[..., ::2] if x.ndim >= 2 and x.shape[-1] > 1 else x,
    "mul": lambda x: x * 2,
    "exp": lambda x: x.exp(),
    "add_row": lambda x: x + eager.ones(x.shape[-1]),
    "cast": lambda x: x.double() if x.dtype == eager.float32 else x.float(),
    "unsqueeze": lambda x: x.unsqueeze(0),
    "where": lambda x: eager.where(x > 0, x, 0.0),
    "sum0": lambda x: x.sum(0) if x.ndim >= 3 else x,
    "sum1_keepdim": lambda x: x.sum(1, keepdim=True) if x.ndim >= 2 else x,
    "reshape": lambda x: x.reshape(x.shape[::-1]),
    "plus_T": lambda x: x + x.transpose(-1, -2) if x.ndim >= 2 and x.shape[-1] == x.shape[-2]
    else x,
    "expand": lambda x: x.expand(3, *x.shape[1:]) if x.ndim and x.shape[0] == 1 else x,
    "matmul": lambda x: x @ eager.ones(x.shape[-1], 2, dtype=x.dtype) if x.ndim >= 2 else x,
}


def test_traced_view_raises_exactly_where_eager_view_raises():
    # Random chains of views and arithmetic, then .view(-1): the trace rebuilds eager's
    # strides (tracer/layout.py), so it raises for the same programs as eager, no others.
    rng = np.random.default_rng(13)
    names = sorted(_LAYOUT_STEPS)
    raised = 0
    for _ in range(120):
        steps = [names[i] for i in rng.integers(len(names), size=rng.integers(1, 7))]
        shape = [(3, 4), (2, 3, 4), (4, 1, 3), (1, 3, 3)][rng.integers(4)]

        def program(x, steps=steps):
            for name in steps:
                x = _LAYOUT_STEPS[name](x)
            return x.view(-1)

        x = eager.tensor(rng.standard_normal(shape).astype(np.float32))
        outcomes = []
        for f in (program, tracer.function(program, backend="interpret")):
            try:
                outcomes.append(f(x).numpy())
            except RuntimeError as exc:
                assert "reshape" in str(exc)
                outcomes.append(None)
        eager_out, traced_out = outcomes
        assert (eager_out is None) == (traced_out is None), steps
        if eager_out is None:
            raised += 1
        else:
            np.testing.assert_allclose(traced_out, eager_out, rtol=1e-6)
    assert 10 < raised < 110  # both outcomes are exercised
