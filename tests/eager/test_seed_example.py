"""The seed example: a PyTorch tutorial-style script, with `torch` replaced by `eager`.

It must run as written (DESIGN.md): an MLP classifier trained with cross-entropy
and Adam, evaluation under no_grad, detach, a custom autograd Function, and
retain_graph. Each step is checked against what PyTorch would give.
"""
import math
import time

import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F
import eager.optim as optim


def _np(t):
    return t.detach().numpy()


def _numpy_mlp_grads(x, y, w1, b1, w2, b2):
    """Loss and gradients of cross_entropy(relu(x @ w1.T + b1) @ w2.T + b2, y), by hand."""
    h_pre = x @ w1.T + b1
    h = np.maximum(h_pre, 0)
    z = h @ w2.T + b2
    z = z - z.max(1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    n = x.shape[0]
    loss = -np.log(p[np.arange(n), y]).mean()
    dz = p.copy()
    dz[np.arange(n), y] -= 1
    dz /= n
    dh = (dz @ w2) * (h_pre > 0)
    return loss, [dh.T @ x, dh.sum(0), dz.T @ h, dz.sum(0)]


def test_seed_example_runs_as_written():
    eager.manual_seed(0)

    # --- the example, as a tutorial would write it -----------------------------------
    model = nn.Sequential(nn.Linear(100, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = optim.Adam(model.parameters(), lr=1e-3)

    x = eager.randn(32, 100)
    y = eager.randint(0, 10, (32,))

    logits = model(x)
    loss = F.cross_entropy(logits, y)
    before = [p.detach().clone() for p in model.parameters()]  # (for the checks below)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

    with eager.no_grad():
        eval_logits = model(x)
        eval_loss = F.cross_entropy(eval_logits, y)
        accuracy = (eval_logits.argmax(dim=1) == y).float().mean()

    features = model[0](x).detach()
    # -----------------------------------------------------------------------------------

    assert logits.shape == (32, 10) and logits.dtype == eager.float32
    assert y.dtype == eager.int64 and y.shape == (32,)
    assert loss.shape == () and loss.grad_fn is not None and loss.requires_grad
    assert abs(loss.item() - math.log(10)) < 0.3  # near chance for a fresh model

    # gradients: every parameter's, equal to a hand-written numpy backward pass
    w1, b1, w2, b2 = (p.numpy() for p in before)
    ref_loss, ref_grads = _numpy_mlp_grads(x.numpy().astype(np.float64), y.numpy(),
                                           w1, b1, w2, b2)
    np.testing.assert_allclose(loss.item(), ref_loss, rtol=1e-5)
    for (name, p), g in zip(model.named_parameters(), ref_grads):
        assert p.grad.shape == p.shape, name
        np.testing.assert_allclose(_np(p.grad), g, rtol=1e-4, atol=1e-6, err_msg=name)

    # Adam's first step moves each weight by lr * g / (|g| + eps): about lr wherever g != 0
    for p, p0 in zip(model.parameters(), before):
        delta = np.abs(_np(p) - p0.numpy())
        assert delta.max() <= 1e-3 * (1 + 1e-5)
        assert np.median(delta) > 0.9e-3
    assert optimizer.state[model[0].weight]["step"].item() == 1

    # evaluation under no_grad records nothing, and one step already lowered the loss
    assert eval_loss.grad_fn is None and not eval_loss.requires_grad
    assert not eval_logits.requires_grad
    assert eval_loss.item() < loss.item()
    assert 0.0 <= accuracy.item() <= 1.0

    # detach: same values, no history; gradients do not flow back through it
    assert not features.requires_grad and features.grad_fn is None
    np.testing.assert_array_equal(_np(features), _np(model[0](x)))
    model.zero_grad()
    F.cross_entropy(model[2](model[1](features)), y).backward()
    assert model[0].weight.grad is None and model[2].weight.grad is not None


class Square(eager.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 2 * x * grad_output


def test_custom_function_square():
    x = eager.randn(5, requires_grad=True)
    y = Square.apply(x)
    assert y.requires_grad and y.grad_fn is not None
    np.testing.assert_allclose(_np(y), _np(x) ** 2, rtol=1e-6)
    g = eager.randn(5)
    y.backward(g)
    np.testing.assert_allclose(_np(x.grad), 2 * _np(x) * _np(g), rtol=1e-6)


def test_custom_function_inside_a_larger_graph():
    x = eager.tensor([1.0, -2.0, 3.0], requires_grad=True)
    loss = (Square.apply(x * 3.0) + x).sum()  # d/dx (9x^2 + x) = 18x + 1
    loss.backward()
    np.testing.assert_allclose(_np(x.grad), [19.0, -35.0, 55.0])
    with eager.no_grad():
        assert Square.apply(x).grad_fn is None


def test_custom_function_needs_retain_graph_for_a_second_backward():
    x = eager.tensor([2.0], requires_grad=True)
    y = Square.apply(x)
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(_np(x.grad), [8.0])  # 4 + 4
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        y.backward()


def test_retain_graph_allows_a_second_backward_and_grads_accumulate():
    x = eager.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (x * x * x).sum()
    y.backward(retain_graph=True)
    np.testing.assert_allclose(_np(x.grad), [3.0, 12.0, 27.0])
    y.backward()
    np.testing.assert_allclose(_np(x.grad), [6.0, 24.0, 54.0])


def test_second_backward_without_retain_graph_fails_clearly():
    x = eager.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (x * x * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time") as info:
        y.backward()
    assert "retain_graph=True" in str(info.value)
    np.testing.assert_allclose(_np(x.grad), [3.0, 12.0, 27.0])  # untouched by the failure


def _blobs(n_per_class=50, seed=0):
    rng = np.random.default_rng(seed)
    centers = np.array([[0.0, 4.0], [-3.5, -2.0], [3.5, -2.0]])
    x = np.concatenate([c + 0.7 * rng.standard_normal((n_per_class, 2)) for c in centers])
    y = np.repeat(np.arange(3), n_per_class)
    return x.astype(np.float32), y


def test_training_on_three_gaussian_blobs_reaches_zero_loss():
    eager.manual_seed(0)
    x_np, y_np = _blobs()
    x, y = eager.tensor(x_np), eager.tensor(y_np)
    model = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 3))
    optimizer = optim.Adam(model.parameters(), lr=0.05)

    start = time.perf_counter()
    model.train()
    for _ in range(100):
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with eager.no_grad():
        final = F.cross_entropy(model(x), y).item()
        accuracy = (model(x).argmax(dim=1) == y).float().mean().item()
    elapsed = time.perf_counter() - start

    assert final < 0.05
    assert accuracy == 1.0
    assert elapsed < 3.0
