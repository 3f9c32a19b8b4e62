"""eager.nn.utils: clip_grad_norm_, clip_grad_value_, parameters_to_vector and
vector_to_parameters against numpy references of PyTorch's documented behaviour."""
import math

import numpy as np
import pytest

import eager
from eager import nn
from eager.nn.utils import (
    clip_grad_norm_,
    clip_grad_value_,
    parameters_to_vector,
    vector_to_parameters,
)


def _params(grads, dtype=np.float32):
    ps = []
    for g in grads:
        p = eager.zeros(*np.shape(g), dtype=dtype, requires_grad=True)
        p.grad = eager.tensor(np.asarray(g, dtype))
        ps.append(p)
    return ps


def _flat_norm(x, p):
    x = np.abs(np.ravel(x).astype(np.float64))
    if p == math.inf:
        return x.max()
    if p == -math.inf:
        return x.min()
    if p == 0:
        return float(np.count_nonzero(x))
    return (x ** p).sum() ** (1 / p)


def _ref_norm(grads, p):
    """PyTorch's documented total: the norm of the vector of each gradient's norm (for p != 0
    the norm of all elements; for p = 0 the number of gradients that are not all zero)."""
    return _flat_norm(np.array([_flat_norm(g, p) for g in grads]), p)


GRADS = [np.array([[3.0, -4.0], [0.0, 1.5]]), np.array([-2.0, 0.5, 7.0])]


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, 0.5, math.inf, -math.inf, 0.0])
@pytest.mark.parametrize("max_norm", [1.0, 1e6])
def test_clip_grad_norm(norm_type, max_norm):
    ps = _params(GRADS, np.float64)
    total = clip_grad_norm_(ps, max_norm, norm_type=norm_type)
    expect = _ref_norm(GRADS, norm_type)
    assert total.shape == () and total.dtype == np.float64
    np.testing.assert_allclose(total.item(), expect, rtol=1e-12)
    scale = min(max_norm / (expect + 1e-6), 1.0)
    for p, g in zip(ps, GRADS):
        np.testing.assert_allclose(p.grad.numpy(), g * scale, rtol=1e-12)


def test_clip_grad_norm_float32_and_module_parameters():
    eager.manual_seed(0)
    model = nn.Linear(4, 3)
    model(eager.randn(5, 4)).pow(2).sum().backward()
    before = [p.grad.numpy().copy() for p in model.parameters()]
    total = clip_grad_norm_(model.parameters(), max_norm=0.25)
    expect = _ref_norm(before, 2.0)
    assert total.dtype == np.float32
    np.testing.assert_allclose(total.item(), expect, rtol=1e-6)
    after = np.sqrt(sum((p.grad.numpy().astype(np.float64) ** 2).sum()
                        for p in model.parameters()))
    np.testing.assert_allclose(after, 0.25, rtol=1e-5)


def test_clip_grad_norm_edge_cases():
    assert clip_grad_norm_([eager.zeros(2, requires_grad=True)], 1.0).item() == 0.0
    single = _params([np.array([6.0, 8.0])])[0]
    assert clip_grad_norm_(single, 5.0).item() == 10.0  # one tensor, not a list
    np.testing.assert_allclose(single.grad.numpy(), [3.0, 4.0], rtol=1e-6)
    skipped = eager.zeros(2, requires_grad=True)  # no grad: left alone
    clip_grad_norm_([skipped] + _params([np.array([1.0])]), 0.1)
    assert skipped.grad is None


def test_clip_grad_norm_nonfinite():
    ps = _params([np.array([1.0, np.inf]), np.array([2.0])])
    with pytest.raises(RuntimeError, match="non-finite"):
        clip_grad_norm_(ps, 1.0, error_if_nonfinite=True)
    np.testing.assert_array_equal(ps[1].grad.numpy(), [2.0])  # nothing scaled
    total = clip_grad_norm_(ps, 1.0)  # PyTorch scales by max_norm / inf = 0 (NaN for inf)
    assert math.isinf(total.item())
    assert ps[1].grad.numpy()[0] == 0.0
    nan = _params([np.array([np.nan, 1.0])])
    assert math.isnan(clip_grad_norm_(nan, 1.0).item())
    assert np.isnan(nan[0].grad.numpy()).all()


def test_clip_grad_value():
    ps = _params(GRADS)
    clip_grad_value_(ps, 2.5)
    for p, g in zip(ps, GRADS):
        np.testing.assert_array_equal(p.grad.numpy(), np.clip(g, -2.5, 2.5).astype(np.float32))


def test_parameters_to_vector_and_back():
    eager.manual_seed(1)
    model = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 1))
    vec = parameters_to_vector(model.parameters()).detach()
    flat = np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])
    assert vec.shape == (flat.size,)
    np.testing.assert_array_equal(vec.numpy(), flat)
    vector_to_parameters(vec * 2, model.parameters())
    np.testing.assert_array_equal(parameters_to_vector(model.parameters()).detach().numpy(),
                                  flat * 2)
    assert parameters_to_vector(model.parameters()).requires_grad  # (as PyTorch's: a graph)
    assert all(p.requires_grad and p.is_leaf for p in model.parameters())
    with pytest.raises(ValueError, match="elements"):
        vector_to_parameters(vec[:3], model.parameters())
