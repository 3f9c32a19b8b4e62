"""Gradients through compiled functions: the AOT backward plan against eager autograd."""
import numpy as np
import pytest

import eager
import eager.nn.functional as F
import tracer


def _grads(ts):
    return [None if t.grad is None else t.grad.numpy().copy() for t in ts]


def _clear(ts):
    for t in ts:
        t.grad = None


COMPOSITES = {
    "gelu": lambda x, w: F.gelu(x * w),
    "gelu_tanh": lambda x, w: F.gelu(x * w, approximate="tanh"),
    "softmax": lambda x, w: F.softmax(x * w, -1),
    "log_softmax": lambda x, w: F.log_softmax(x + w, -1),
    "layer_norm": lambda x, w: F.layer_norm(x, (x.shape[-1],), w, w * 0.5),
    "linear": lambda x, w: F.linear(x, eager.stack([w, w * 2, -w])),
    "mse_loss": lambda x, w: F.mse_loss(x * w, x.detach()),
    "logsumexp": lambda x, w: eager.logsumexp(x * w, 1),
    "tanh_sigmoid": lambda x, w: eager.tanh(x) * eager.sigmoid(w),
    "exp_log_sqrt": lambda x, w: eager.log(eager.exp(x * 0.1) + eager.sqrt(w * w + 1.0)),
    "amax_mean": lambda x, w: eager.amax(x * w, 1) + eager.mean(x, 0).sum(),
    "relu_where": lambda x, w: eager.where(x > 0, eager.relu(x * w), x * 0.5),
}


@pytest.mark.parametrize("name", sorted(COMPOSITES))
@pytest.mark.parametrize("dtype", [eager.float32, eager.float64])
def test_compiled_gradient_matches_eager(name, dtype):
    fn = COMPOSITES[name]
    rng = np.random.default_rng(1)
    x = eager.tensor(rng.standard_normal((4, 5)), dtype=dtype, requires_grad=True)
    w = eager.tensor(rng.standard_normal(5) + 0.1, dtype=dtype, requires_grad=True)
    cot = eager.tensor(rng.standard_normal(fn(x, w).shape), dtype=dtype)

    compiled = tracer.function(fn)
    out = compiled(x, w)
    assert out.grad_fn is not None and "CompiledFunctionBackward" in out.grad_fn.name()
    out.backward(cot)
    got = _grads([x, w])
    _clear([x, w])
    want_out = fn(x, w)
    want_out.backward(cot)
    want = _grads([x, w])
    tol = 2e-5 if dtype == eager.float32 else 1e-10
    np.testing.assert_allclose(out.detach().numpy(), want_out.detach().numpy(), rtol=tol,
                               atol=tol)
    for g, h in zip(got, want):
        np.testing.assert_allclose(g, h, rtol=tol, atol=tol)
    concrete = compiled.get_concrete_function(x, w)
    assert concrete.backward is not None
    assert "backward" in str(concrete.backward)


def _mlp():
    eager.manual_seed(3)
    return eager.nn.Sequential(eager.nn.Linear(6, 8), eager.nn.GELU(), eager.nn.LayerNorm(8),
                               eager.nn.Linear(8, 3))


def test_parameter_gradients_accumulate_like_eager():
    m1, m2 = _mlp(), _mlp()
    x = eager.randn(5, 6)
    y = eager.randint(0, 3, (5,))

    @tracer.function
    def loss_fn(x, y):
        return F.cross_entropy(m1(x), y)

    for _ in range(2):  # two backward passes accumulate into .grad
        loss_fn(x, y).backward()
        F.cross_entropy(m2(x), y).backward()
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        np.testing.assert_allclose(p1.grad.numpy(), p2.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert loss_fn.trace_count == 1


def test_second_backward_needs_retain_graph():
    x = eager.randn(3, requires_grad=True)
    f = tracer.function(lambda x: (eager.exp(x) * x).sum())
    out = f(x)
    out.backward(retain_graph=True)
    first = x.grad.numpy().copy()
    out.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * first, rtol=1e-6)
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        out.backward()


def test_no_grad_call_records_nothing():
    x = eager.randn(3, requires_grad=True)
    f = tracer.function(lambda x: (x * x).sum())
    with eager.no_grad():
        out = f(x)
    assert out.grad_fn is None and not out.requires_grad


def test_create_graph_gives_second_derivatives():
    x = eager.tensor([0.3, -0.7, 1.1], dtype=eager.float64, requires_grad=True)
    f = tracer.function(lambda x: (eager.tanh(x) * x).sum())
    (g,) = eager.autograd.grad(f(x), [x], create_graph=True)
    (gg,) = eager.autograd.grad(g.sum(), [x])
    xs = x.detach().numpy()
    t = np.tanh(xs)
    # d/dx (tanh x + x (1 - tanh^2 x)) = 2 (1 - t^2) - 2 x t (1 - t^2)
    np.testing.assert_allclose(gg.numpy(), 2 * (1 - t ** 2) - 2 * xs * t * (1 - t ** 2),
                               rtol=1e-10)


def test_in_place_change_before_backward_is_an_error():
    x = eager.randn(4, requires_grad=True)
    w = eager.randn(4)
    f = tracer.function(lambda x, w: (x * w).sum())
    out = f(x, w)
    w.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.backward()


def test_backward_saves_less_than_every_forward_value():
    eager.manual_seed(0)
    x = eager.randn(16, 32, requires_grad=True)
    f = tracer.function(lambda x: F.gelu(x, approximate="tanh").sum())
    f(x).backward()
    plan = f.get_concrete_function(x).backward
    assert plan.saved_bytes < plan.save_all_bytes
    # GELU's backward needs only x: everything else is recomputed in the fused kernel.
    assert plan.saved_bytes == 0


def _seed_mlp():
    return eager.nn.Sequential(eager.nn.Linear(100, 128), eager.nn.ReLU(),
                               eager.nn.Linear(128, 10))


def _norm_mlp():
    return eager.nn.Sequential(eager.nn.Linear(100, 64), eager.nn.LayerNorm(64),
                               eager.nn.GELU(), eager.nn.Linear(64, 10))


OPTIMIZERS = {
    "sgd": lambda ps: eager.optim.SGD(ps, lr=0.05),
    "sgd_momentum": lambda ps: eager.optim.SGD(ps, lr=0.05, momentum=0.9),
    "adam": lambda ps: eager.optim.Adam(ps, lr=1e-3),
    "adamw": lambda ps: eager.optim.AdamW(ps, lr=1e-3, weight_decay=0.01),
}


@pytest.mark.parametrize("make_model", [_seed_mlp, _norm_mlp], ids=["seed_mlp", "norm_mlp"])
@pytest.mark.parametrize("opt_name", sorted(OPTIMIZERS))
def test_training_step_compiled_matches_eager_over_20_steps(make_model, opt_name):
    eager.manual_seed(7)
    m1 = make_model()
    m2 = make_model()
    m2.load_state_dict(m1.state_dict())
    o1 = OPTIMIZERS[opt_name](m1.parameters())
    o2 = OPTIMIZERS[opt_name](m2.parameters())
    x = eager.randn(32, 100)
    y = eager.randint(0, 10, (32,))

    @tracer.function
    def step(x, y):
        loss = F.cross_entropy(m1(x), y)
        o1.zero_grad()
        loss.backward()
        o1.step()
        return loss

    for i in range(20):
        if i == 2:
            traces = step.trace_count
        if i == 10:  # an lr change is read at the next call, with no retrace
            for o in (o1, o2):
                for g in o.param_groups:
                    g["lr"] *= 0.5
        got = step(x, y).item()
        loss = F.cross_entropy(m2(x), y)
        o2.zero_grad()
        loss.backward()
        o2.step()
        assert got == pytest.approx(loss.item(), rel=1e-5, abs=1e-6)
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        np.testing.assert_allclose(p1.detach().numpy(), p2.detach().numpy(), rtol=1e-5,
                                   atol=1e-6)
        np.testing.assert_allclose(p1.grad.numpy(), p2.grad.numpy(), rtol=1e-4, atol=1e-6)
        for key, v in o2.state[p2].items():
            np.testing.assert_allclose(np.asarray(o1.state[p1][key].detach().numpy()),
                                       np.asarray(v.detach().numpy()), rtol=1e-5, atol=1e-7)
    # The first call creates optimizer state (momentum buffers, Adam moments) as existing
    # state (eager.dispatch.state_init), so its trace is the steady state's: one trace
    # serves all 20 calls, including those after the lr change.
    assert traces == 1
    assert step.trace_count == 1
    assert step.trace_count == traces
