"""A matrix applied to a batch, (L, N, K) @ (K, M), is one 2-D product of all L * N rows
(numpy's batched matmul multiplies batch by batch, without BLAS for a C-ordered matrix),
and the matrix's gradient is one product too, not L products summed afterwards."""
import numpy as np

import eager
import tracer


def test_batch_times_matrix_is_one_2d_product_with_the_same_values_and_gradients():
    rng = np.random.default_rng(0)
    a_np, b_np = rng.standard_normal((3, 4, 5)), rng.standard_normal((5, 6))
    a = eager.tensor(a_np, dtype=eager.float64, requires_grad=True)
    b = eager.tensor(b_np, dtype=eager.float64, requires_grad=True)
    out = a @ b
    assert out.shape == (3, 4, 6)
    np.testing.assert_allclose(out.detach().numpy(), a_np @ b_np, rtol=1e-13)
    g_np = rng.standard_normal((3, 4, 6))
    out.backward(eager.tensor(g_np, dtype=eager.float64))
    np.testing.assert_allclose(a.grad.numpy(), g_np @ b_np.T, rtol=1e-13)
    np.testing.assert_allclose(b.grad.numpy(), np.einsum("lnk,lnm->km", a_np, g_np),
                               rtol=1e-12)
    v = eager.tensor(rng.standard_normal(5), dtype=eager.float64)
    np.testing.assert_allclose((a @ v).detach().numpy(), a_np @ v.numpy(), rtol=1e-13)

    def step(a, b):
        b.grad = None
        (a @ b).tanh().sum().backward()
        return b.grad
    c = tracer.function(step, backend="interpret").get_concrete_function(a, b)
    products = [e for e in c.graph.eqns if e.op == "matmul"]
    assert products and all(len(e.out.type.shape) == 2 for e in products), str(c.graph)
