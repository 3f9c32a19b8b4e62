"""Updates written straight into the tensors they update (codegen.inplace_plan._plan_inplace).

A compiled training step computes new parameters, moments and gradients; instead of
writing them to buffers that are then copied over the targets, the program writes them
into the targets' own arrays when that cannot change what any step reads. These tests pin
where that happens and check the cases where it must not.
"""
from __future__ import annotations

import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F
import eager.optim as optim
import tracer


def _adam_setup(seed=0):
    eager.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = optim.Adam(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(seed)
    x = eager.from_numpy(rng.standard_normal((8, 6)).astype(np.float32))
    y = eager.from_numpy(rng.integers(0, 4, size=8))

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return model, opt, x, y, step


def test_adam_step_updates_parameters_moments_and_grads_in_their_own_arrays():
    model, opt, x, y, step = _adam_setup()
    ref_model, _ref_opt, _, _, ref_step = _adam_setup()
    compiled = tracer.function(step)
    for _ in range(3):  # the first calls create the Adam state and the .grad tensors
        compiled(x, y)
        ref_step(x, y)
    params = list(model.parameters())
    arrays = [p._data for p in params]
    # The .grad arrays' addresses, not the arrays: a reference kept to an old gradient
    # makes the step give .grad a new array, as eager does (tracer.ownership).
    grads = [p.grad._data.ctypes.data for p in params]
    moments = [opt.state[p]["exp_avg"]._data for p in params]
    versions = [p._version[0] for p in params]
    concrete = compiled.get_concrete_function(x, y)
    program = concrete.program
    ios = [ip for ip in program.inplace.values() if ip.io]
    # Per parameter: its new value, both moments and its step counter overwrite their
    # inputs; the four .grad updates are written into the existing gradient arrays.
    assert len(ios) == 4 * len(params)
    assert sorted(concrete.graph.update_targets[u][0] for u in program.dest_updates) \
        == ["grad"] * len(params)
    assert any("overwritten with" in k.source for k in concrete.kernels)
    for _ in range(2):
        loss = compiled(x, y)
        ref_loss = ref_step(x, y)
    np.testing.assert_allclose(loss.item(), ref_loss.item(), rtol=1e-5)
    for p, r, a, g, m, v in zip(params, ref_model.parameters(), arrays, grads, moments,
                                versions):
        assert p._data is a and p.grad._data.ctypes.data == g
        np.testing.assert_allclose(p.detach().numpy(), r.detach().numpy(), rtol=1e-5,
                                   atol=1e-7)
        np.testing.assert_allclose(p.grad.numpy(), r.grad.numpy(), rtol=1e-5, atol=1e-7)
        assert p._version[0] == v + 2  # in-place writes still bump the version counter
        assert opt.state[p]["exp_avg"]._data is m


def test_old_value_read_after_the_update_is_computed_is_not_overwritten_early():
    w = eager.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4))
    x = eager.from_numpy(np.ones((2, 3), np.float32))

    def f(x):
        new = w * 2 + 1          # one kernel that reads w element by element ...
        out = x @ w              # ... then a matmul that still needs the old w
        w.copy_(new)
        return out

    compiled = tracer.function(f)
    for _ in range(3):
        old = w.numpy().copy()
        out = compiled(x)
        np.testing.assert_array_equal(out.numpy(), np.ones((2, 3), np.float32) @ old)
        np.testing.assert_array_equal(w.numpy(), old * 2 + 1)
    assert not compiled.get_concrete_function(x).program.inplace


@pytest.mark.parametrize("layout", ["transposed", "read_only"])
def test_update_of_a_tensor_whose_array_a_kernel_cannot_write(layout):
    if layout == "transposed":
        w = eager.from_numpy(np.arange(12, dtype=np.float32).reshape(4, 3).T)  # strided
    else:
        base = np.arange(12, dtype=np.float32).reshape(3, 4)
        base.setflags(write=False)
        w = eager.from_numpy(base)
    expected = w.numpy().copy()

    @tracer.function
    def f(x):
        w.mul_(0.5)
        w.add_(x)
        return x * 1

    x = eager.from_numpy(np.full((3, 4), 2.0, np.float32))
    if layout == "read_only":
        # Eager refuses to write a read-only array; so does the compiled update (it used to
        # swap in a new array silently).
        with pytest.raises(RuntimeError, match="read-only"):
            w.mul_(0.5)  # eagerly
        with pytest.raises(RuntimeError, match="read-only"):
            f(x)
        np.testing.assert_array_equal(w.numpy(), expected)
        return
    for _ in range(4):
        f(x)
        expected = expected * 0.5 + 2.0
        np.testing.assert_array_equal(w.numpy(), expected)


def test_grad_passed_as_an_argument_is_not_overwritten_while_the_program_reads_it():
    p = eager.tensor(np.arange(9, dtype=np.float32).reshape(3, 3), requires_grad=True)
    (p * p * 0.5).sum().backward()  # p.grad = p

    @tracer.function
    def f(g):
        p.grad = None
        (p * p).sum().backward()  # a kernel writes the new p.grad = 2p ...
        return g @ g              # ... and the matmul reads the old one, passed in

    for _ in range(3):
        g = p.grad
        old = g.numpy().copy()
        out = f(g)
        np.testing.assert_allclose(out.numpy(), old @ old, rtol=1e-6)
        np.testing.assert_allclose(p.grad.numpy(), 2 * p.detach().numpy(), rtol=1e-6)
