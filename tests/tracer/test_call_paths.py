"""ConcreteFunction's call paths give what the eager call gives (issue 13, items 8, 9, 14):
fresh .grad tensors where eager makes them, outputs that are the input itself, a backward
inside the function, the one-argument fast path with requires_grad. Each test compares
with eager on the same inputs and state, on both backends."""
import numpy as np
import pytest

import eager
import eager.nn.functional as F
import tracer
from eager import nn, optim

BACKENDS = ["numba", "interpret"]


def _training(zero_grad: bool, seed=0):
    eager.manual_seed(seed)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    opt = optim.Adam(model.parameters(), lr=0.1)

    def step(x, y):
        if zero_grad:
            opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return model, step


X = eager.tensor(np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(4, 3))
Y = eager.tensor([0, 1, 1, 0])


def _run_keeping(model, step, keep, steps=4):
    """Run `steps` steps; after each, keep the first layer's .grad as `keep` says ("tensor",
    "array": its numpy() array, "view": a slice of it). Returns losses, kept objects with a
    snapshot of their values, and each step's .grad tensor."""
    losses, kept, grads = [], [], []
    for _ in range(steps):
        losses.append(step(X, Y).item())
        g = model[0].weight.grad
        grads.append(g)
        held = {"tensor": g, "array": g.numpy(), "view": g[0]}[keep]
        kept.append((held, np.array(g.numpy())))
    return losses, kept, grads


def _values(held):
    return held.numpy() if isinstance(held, eager.Tensor) else held


@pytest.mark.parametrize("zero_grad", [True, False], ids=["zero_grad_inside", "accumulate"])
@pytest.mark.parametrize("keep", ["tensor", "array", "view"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_kept_from_earlier_steps_do_not_change(backend, keep, zero_grad):
    """Item 8: eager's backward gives .grad a new tensor at every step (zero_grad() drops
    the old one; accumulation makes old + g), so a gradient kept from step 1 keeps its
    values; the compiled step wrote into the old array."""
    ref_model, ref_step = _training(zero_grad)
    model, step = _training(zero_grad)
    ref = _run_keeping(ref_model, ref_step, keep)
    got = _run_keeping(model, tracer.function(step, backend=backend), keep)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-5)
    for held, snapshot in got[1]:
        np.testing.assert_array_equal(_values(held)[...], snapshot[0] if keep == "view"
                                      else snapshot)
    # a new .grad tensor at each step, as eager's
    assert len({id(g) for g in got[2]}) == len({id(g) for g in ref[2]}) == 4
    for p, r in zip(model.parameters(), ref_model.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), r.detach().numpy(), rtol=1e-5,
                                   atol=1e-6)
        np.testing.assert_allclose(p.grad.numpy(), r.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.one_backend  # (Numba's in-place plan; the interpreter allocates, as eager)
@pytest.mark.parametrize("zero_grad", [True, False], ids=["zero_grad_inside", "accumulate"])
def test_gradients_nobody_holds_are_still_written_in_place(zero_grad):
    """The speed of item 8's old behaviour where no one can see it: with no reference kept
    to the old .grad, the Numba step writes the new gradient into its memory."""
    model, step = _training(zero_grad)
    compiled = tracer.function(step)
    for _ in range(4):  # past the traces (and the first copy of a traced-in .grad)
        compiled(X, Y)
    addresses = [p.grad._data.ctypes.data for p in model.parameters()]
    for _ in range(3):
        compiled(X, Y)
        assert [p.grad._data.ctypes.data for p in model.parameters()] == addresses


NO_OPS = {
    "identity": (lambda x: x, (3,)),
    "reshape_same_shape": (lambda x: x.reshape(4, 3), (4, 3)),
    "float_of_float32": (lambda x: x.float(), (4, 3)),
    "slice_past_the_end": (lambda x: x[0:4], (3,)),
}


@pytest.mark.parametrize("requires_grad", [True, False])
@pytest.mark.parametrize("name", sorted(NO_OPS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_output_that_is_the_input_keeps_its_autograd_link(backend, name, requires_grad):
    """Item 9: eager returns `x` itself for these; compiled returned a copy with no
    autograd link, so gradients silently stopped."""
    body, shape = NO_OPS[name]
    f = tracer.function(body, backend=backend)
    for _ in range(3):  # the traced call, then the fast paths
        x = eager.tensor(np.arange(np.prod(shape), dtype=np.float32).reshape(shape),
                         requires_grad=requires_grad)
        out = f(x)
        assert out is body(x) is x
        assert out.requires_grad == requires_grad and out.grad_fn is None
        if requires_grad:
            (out * 3.0).sum().backward()
            np.testing.assert_array_equal(x.grad.numpy(), np.full(shape, 3.0, np.float32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_argument_and_a_captured_parameter_returned_with_other_outputs(backend):
    lin = nn.Linear(3, 2)

    def body(x):
        return x, lin.weight, lin(x)

    f = tracer.function(body, backend=backend)
    for _ in range(3):
        x = eager.ones(4, 3, requires_grad=True)
        out_x, out_w, y = f(x)
        assert out_x is x and out_w is lin.weight
        lin.zero_grad()
        (y.sum() + (out_w * 2.0).sum() + out_x.sum()).backward()
        ref_w = 2.0 + np.full((2, 3), 4.0, np.float32)  # 2 from out_w, 4 rows of x from y
        np.testing.assert_allclose(lin.weight.grad.numpy(), ref_w)
        np.testing.assert_allclose(x.grad.numpy(),
                                   1.0 + np.tile(lin.weight.detach().numpy().sum(0), (4, 1)),
                                   rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_backward_inside_the_function_sets_the_arguments_grad(backend):
    """Item 14: on Numba the one-kernel call dropped the .grad update (it is the same
    value as the output), so x.grad stayed None."""
    def body(x):
        (x * x).sum().backward()
        return x.grad * 1

    f = tracer.function(body, backend=backend)
    for k in range(3):
        x = eager.tensor([1.0, 2.0, 3.0 + k], requires_grad=True)
        ref_x = eager.tensor([1.0, 2.0, 3.0 + k], requires_grad=True)
        ref = body(ref_x)
        out = f(x)
        np.testing.assert_array_equal(out.numpy(), ref.numpy())
        assert x.grad is not None and x.grad is not out
        np.testing.assert_array_equal(x.grad.numpy(), ref_x.grad.numpy())


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_argument_fast_path_honours_requires_grad(backend):
    """Item 14: after f(x), f(x_requiring_grad) must not take the cached no-grad trace."""
    f = tracer.function(lambda x: x * 2.0 + 1.0, backend=backend)
    for _ in range(2):
        assert f(eager.ones(3)).grad_fn is None
    x = eager.ones(3, requires_grad=True)
    out = f(x)
    assert out.requires_grad and out.grad_fn is not None
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0, 2.0])
    plain = f(eager.ones(3))
    assert plain.grad_fn is None and not plain.requires_grad


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_grad_returned_is_the_grad(backend):
    """`loss.backward(); return w.grad` gives eager's .grad tensor itself, so what the
    caller does to it is what it does to the parameter's gradient."""
    lin = nn.Linear(3, 2)

    def step(x):
        lin.zero_grad()
        lin(x).sum().backward()
        return lin.weight.grad

    def body(x):
        (x * x).sum().backward()
        return x.grad

    f, g = tracer.function(step, backend=backend), tracer.function(body, backend=backend)
    for k in range(1, 4):
        out = f(eager.ones(4, 3) * k)
        assert out is lin.weight.grad
        np.testing.assert_array_equal(out.numpy(), np.full((2, 3), 4.0 * k, np.float32))
        x = eager.tensor([1.0, 2.0 * k], requires_grad=True)
        out = g(x)
        assert out is x.grad
        np.testing.assert_array_equal(out.numpy(), [2.0, 4.0 * k])


@pytest.mark.parametrize("path", ["two_arguments", "input_signature"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_other_fast_paths_honour_requires_grad(backend, path):
    if path == "two_arguments":
        f = tracer.function(lambda x, y: x * y + 1.0, backend=backend)
    else:
        f = tracer.function(lambda x, y: x * y + 1.0, backend=backend,
                            input_signature=[tracer.TensorSpec(("n",), eager.float32)] * 2)
    for _ in range(2):
        assert f(eager.ones(3), eager.full((3,), 2.0)).grad_fn is None
    x = eager.ones(3, requires_grad=True)
    out = f(x, eager.full((3,), 2.0))
    assert out.grad_fn is not None
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0, 2.0])
    assert f(eager.ones(3), eager.full((3,), 2.0)).grad_fn is None


def _sgd_training(variant):
    eager.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x, y):
        opt.zero_grad(set_to_none=variant != "zero_grad_set_to_none_false")
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if variant == "two_backwards":  # gradient accumulation over micro-batches
            F.cross_entropy(model(x * 0.5), y).backward()
        opt.step()
        return loss

    return model, step


@pytest.mark.parametrize("variant", ["zero_grad_set_to_none_false", "two_backwards"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_kept_gradients_with_sgd_momentum(backend, variant):
    """Item 8 with zero_grad(set_to_none=False) (eager: a new zero tensor, then a new sum)
    and with two backwards per step: every step's .grad is a new tensor in eager."""
    ref_model, ref_step = _sgd_training(variant)
    model, step = _sgd_training(variant)
    ref = _run_keeping(ref_model, ref_step, "tensor")
    got = _run_keeping(model, tracer.function(step, backend=backend), "tensor")
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-5)
    for held, snapshot in got[1]:
        np.testing.assert_array_equal(held.numpy(), snapshot)
    for p, r in zip(model.parameters(), ref_model.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), r.detach().numpy(), rtol=1e-5,
                                   atol=1e-6)
