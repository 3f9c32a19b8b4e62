"""diagonal, Tensor.unfold and Tensor.view(dtype) are views, as in PyTorch: a write through
one reaches its base, eagerly and in compiled code (both backends: arguments after each of
three calls equal eager's), written as users write it."""
import numpy as np
import pytest

import eager
import tracer

BACKENDS = ["numba", "interpret"]


def test_eager_writes_through_the_views_reach_the_base():
    x = eager.arange(9.0).reshape(3, 3)
    x.diagonal().fill_(0)
    x.diagonal(1).add_(1)
    np.testing.assert_array_equal(x.numpy(), [[0, 2, 2], [3, 0, 6], [6, 7, 0]])
    w = eager.arange(6.0)
    w.unfold(0, 2, 1)[0].zero_()
    np.testing.assert_array_equal(w.numpy(), [0, 0, 2, 3, 4, 5])
    b = eager.arange(24.0).reshape(2, 3, 4)
    b.diagonal(0, 1, 2)[:, 0] = -1.0  # a batched diagonal
    assert b[0, 0, 0].item() == -1 and b[1, 0, 0].item() == -1 and b[0, 1, 1].item() == 5
    f = eager.tensor([1.5, 2.0, -3.0])
    f.view(eager.int32)[0] = 0
    np.testing.assert_array_equal(f.numpy(), [0.0, 2.0, -3.0])
    h = eager.zeros(2, 2)
    h.view(eager.int16)[1, 1] = 16256  # the high half of 1.0f (little-endian)
    np.testing.assert_array_equal(h.numpy(), [[0, 0], [1, 0]])
    d = eager.diag(x)  # torch.diag: a new tensor, not a view
    d.fill_(5)
    assert x[0, 0].item() == 0


def test_gradients_through_the_views():
    x = eager.arange(12.0).reshape(3, 4).requires_grad_()
    (x.diagonal(1) * eager.tensor([1.0, 2.0, 3.0])).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 1, 0, 0], [0, 0, 2, 0], [0, 0, 0, 3]])
    w = eager.arange(5.0).requires_grad_()
    w.unfold(0, 3, 1).sum().backward()  # overlapping windows: their gradients add up
    np.testing.assert_array_equal(w.grad.numpy(), [1, 2, 3, 2, 1])
    # a write with autograd through a view is refused, as for slices (not silently wrong)
    y = x * 1
    with pytest.raises(RuntimeError, match="shares storage"):
        y.diagonal().mul_(eager.ones(3, requires_grad=True))


def test_view_dtype_to_another_itemsize_needs_a_contiguous_last_dim():
    with pytest.raises(RuntimeError, match=r"stride\(-1\) must be 1"):
        eager.zeros(4, 2).T.view(eager.int16)
    with pytest.raises(RuntimeError, match=r"stride\(0\) must be divisible by 2"):
        eager.zeros(2, 5)[:, :4].view(eager.float64)
    assert eager.zeros(4, 2).T.view(eager.int32).shape == (2, 4)  # same itemsize: any layout
    f = tracer.function(lambda x: x.view(eager.int16) + 1, backend="interpret")
    assert f(eager.zeros(2, 4)).shape == (2, 8)
    with pytest.raises(RuntimeError, match=r"stride\(-1\) must be 1"):
        f(eager.zeros(4, 2).T)  # (the trace held for a C-ordered argument only)


def _writes(x, w, v):
    x.diagonal().fill_(0)
    x.diagonal(1).add_(1)
    u = w.unfold(0, 3, 2)  # overlapping windows
    u[0].zero_()
    u[1, 1:].mul_(10)
    n = v.view(eager.int32)
    n[0] = 0
    n[1:] = n[1:] + 1
    return x * 2, u.sum(-1), v * 1


def _batched(x):
    d = x.diagonal(0, 1, 2)
    d[:, 1:].copy_(d[:, :2] * 10)
    return x.sum(), d


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_writes_through_the_views_update_the_arguments(backend):
    def state():
        return (eager.arange(12.0).reshape(3, 4), eager.arange(9.0),
                eager.tensor([1.5, 2.0, -3.0]), eager.arange(18.0).reshape(2, 3, 3))

    eager_state, comp_state = state(), state()
    writes = tracer.function(_writes, backend=backend)
    batched = tracer.function(_batched, backend=backend)
    for call in range(3):
        want = _writes(*eager_state[:3]) + _batched(eager_state[3])
        got = writes(*comp_state[:3]) + batched(comp_state[3])
        for g, e in zip(got + comp_state, want + eager_state):
            assert g.dtype == e.dtype
            np.testing.assert_array_equal(g.numpy(), e.numpy(), err_msg=f"call {call}")
    assert writes.trace_count == 1 and batched.trace_count == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_whole_overlapping_unfold_written_compiled(backend):
    # every element of w is in two windows: eager's write and the compiled one agree
    def f(w):
        u = w.unfold(0, 2, 1)
        u.add_(1)
        return u * 1

    we, wc = eager.arange(5.0), eager.arange(5.0)
    compiled = tracer.function(f, backend=backend)
    for _ in range(2):
        np.testing.assert_array_equal(compiled(wc).numpy(), f(we).numpy())
        np.testing.assert_array_equal(wc.numpy(), we.numpy())
