"""The gradient of a matrix shared by a batch (x @ w with x (..., M, K), w (K, N), as
Linear on (B, T, C)) is ONE product with the batch folded into the contraction, not a
batched product summed afterwards: the same numbers, fewer and larger BLAS calls."""
from __future__ import annotations

import numpy as np
import pytest

import eager
import eager.nn.functional as F
import tracer


@pytest.mark.parametrize("transposed", [False, True])
def test_shared_matrix_gradient_matches_the_batched_sum(transposed):
    rng = np.random.default_rng(0)
    xa = rng.standard_normal((2, 3, 4, 5))
    if transposed:  # a non-contiguous batch
        xa = np.ascontiguousarray(xa.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)
    wa, ga = rng.standard_normal((5, 6)), rng.standard_normal((2, 3, 4, 6))
    x = eager.tensor(xa, requires_grad=True)
    w = eager.tensor(wa, requires_grad=True)
    (x @ w).backward(eager.tensor(ga))
    np.testing.assert_allclose(w.grad.numpy(), np.einsum("abmk,abmn->kn", xa, ga), rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), ga @ wa.T, rtol=1e-12)
    # and it differentiates again (double backward through the folded product)
    x2 = eager.tensor(xa, requires_grad=True)
    w2 = eager.tensor(wa, requires_grad=True)
    (gw,) = eager.autograd.grad((x2 @ w2).sum(), [w2], create_graph=True)
    (gx,) = eager.autograd.grad((gw * gw).sum(), [x2])
    s = xa.sum(axis=(0, 1, 2))               # gw[k, n] = sum over rows of x[..., k]
    np.testing.assert_allclose(gx.numpy(), np.broadcast_to(2 * 6 * s, xa.shape), rtol=1e-12)


def test_linear_on_a_batch_traces_no_batched_weight_product():
    eager.manual_seed(0)
    w = eager.randn(8, 4, requires_grad=True)

    @tracer.function
    def step(x):
        loss = F.linear(x, w).square().sum() if hasattr(eager.Tensor, "square") \
            else (F.linear(x, w) ** 2).sum()
        loss.backward()
        return loss
    x = eager.randn(3, 5, 4)
    step(x)
    graph = step.get_concrete_function(x).graph
    shapes = [tuple(e.out.type.shape) for e in graph.eqns if e.op == "matmul"]
    assert (3, 4, 8) not in shapes and (3, 8, 4) not in shapes, shapes
    assert (8, 4) in shapes or (4, 8) in shapes, shapes
