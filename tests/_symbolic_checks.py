"""Checks of symbolic (None) dimensions shared by the tracer and codegen tests (one body,
run on the "interpret" and "numba" backends)."""
import copy

import numpy as np

import eager
import eager.nn as nn
import eager.nn.functional as F
import tracer
from tracer import TensorSpec

ROWS = [TensorSpec((None, 4), eager.float32)]


def check_backward_through_mlp(backend: str, sizes) -> tracer.Function:
    """Gradients through a compiled MLP forward with a None batch equal eager's, every size."""
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    f = tracer.function(lambda x: model(x), input_signature=ROWS, backend=backend)
    for n in sizes:
        x = eager.randn(n, 4, requires_grad=True)
        model.zero_grad()
        (model(x) ** 2).sum().backward()
        want = [p.grad.numpy().copy() for p in model.parameters()] + [x.grad.numpy().copy()]
        model.zero_grad()
        x.grad = None
        (f(x) ** 2).sum().backward()
        got = [p.grad.numpy() for p in model.parameters()] + [x.grad.numpy()]
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    return f


def check_training_step(backend: str, loss_name: str, make_optimizer, sizes) -> tracer.Function:
    """A compiled training step over a named batch ("batch") keeps a twin model equal to an
    eagerly trained one, for every batch size."""
    def step(model, opt, x, y):
        opt.zero_grad()
        out = model(x)
        loss = F.mse_loss(out, y) if loss_name == "mse" else F.cross_entropy(out, y)
        loss.backward()
        opt.step()
        return loss

    def targets(n):
        return eager.randn(n, 2) if loss_name == "mse" else eager.randint(0, 2, (n,))

    target_spec = (TensorSpec(("batch", 2)) if loss_name == "mse"
                   else TensorSpec(("batch",), eager.int64))
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2))
    twin = copy.deepcopy(model)
    opt, twin_opt = make_optimizer(model.parameters()), make_optimizer(twin.parameters())
    f = tracer.function(lambda x, y: step(twin, twin_opt, x, y), backend=backend,
                        input_signature=[TensorSpec(("batch", 4)), target_spec])
    for n in sizes:
        x, y = eager.randn(n, 4), targets(n)
        want, got = step(model, opt, x, y), f(x, y)
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-5)
        for p, q in zip(model.parameters(), twin.parameters()):
            np.testing.assert_allclose(q.detach().numpy(), p.detach().numpy(), rtol=1e-4,
                                       atol=1e-6)
    return f


def check_every_size(body, backend: str, sizes) -> tracer.Function:
    """`body` compiled over a (None, 4) signature equals eager `body` at every row count."""
    f = tracer.function(body, input_signature=ROWS, backend=backend)
    with eager.no_grad():
        for n in sizes:
            x = eager.randn(n, 4)
            got, want = f(x), body(x)
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    return f
