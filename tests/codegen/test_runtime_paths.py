"""The executor's direct paths for numpy steps (codegen.runtime.Program._call_op), each
checked against eager where its shortcut is valid and where it must not be taken."""
from __future__ import annotations

import numpy as np

import eager
import eager.nn.functional as F
import tracer


def _grad_of(fn, x_np, *args):
    x = eager.tensor(x_np, requires_grad=True)
    fn(x, *args).backward()
    return x.grad.numpy()


def test_cross_entropy_pick_and_its_gradient_match_eager():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((16, 5)).astype(np.float32)
    y = eager.from_numpy(rng.integers(0, 5, size=16))

    def loss(x, y):
        return F.cross_entropy(x, y)

    compiled = tracer.function(loss)
    for _ in range(2):
        np.testing.assert_allclose(_grad_of(compiled, logits, y), _grad_of(loss, logits, y),
                                   rtol=1e-6, atol=1e-7)
    bwd = compiled.get_concrete_function(eager.tensor(logits, requires_grad=True), y)
    plan = bwd.backward
    ops = [s.eqn.op for s in plan.bwd_program.part.steps if hasattr(s, "eqn")]
    assert "scatter_add" in ops
    (step,) = [s for s in plan.bwd_program.part.steps
               if getattr(s, "eqn", None) is not None and s.eqn.op == "scatter_add"]
    assert plan.bwd_program._unique_positions(step.eqn)  # arange(16) rows: the fast path


def test_gather_with_repeated_constant_indices_accumulates_its_gradient():
    rng = np.random.default_rng(1)
    x_np = rng.standard_normal((4, 3)).astype(np.float32)
    rows = eager.from_numpy(np.array([0, 0, 2, 0, 3]))
    cols = eager.from_numpy(np.array([1, 1, 0, 1, 2]))

    def picked(x):
        return (x[rows, cols] * eager.from_numpy(np.arange(1, 6, dtype=np.float32))).sum()

    compiled = tracer.function(picked)
    for _ in range(2):
        got = _grad_of(compiled, x_np)
        np.testing.assert_allclose(got, _grad_of(picked, x_np), rtol=1e-6)
    assert got[0, 1] == 1 + 2 + 4  # three picks of one element: summed, not overwritten
    plan = compiled.get_concrete_function(eager.tensor(x_np, requires_grad=True)).backward
    (step,) = [s for s in plan.bwd_program.part.steps
               if getattr(s, "eqn", None) is not None and s.eqn.op == "scatter_add"]
    assert not plan.bwd_program._unique_positions(step.eqn)


def test_gather_out_of_range_label_raises_as_eager_does():
    x = eager.from_numpy(np.zeros((3, 4), np.float32))
    y = eager.from_numpy(np.array([0, 4, 1]))
    compiled = tracer.function(lambda x, y: F.cross_entropy(x, y))
    for fn in (lambda x, y: F.cross_entropy(x, y), compiled):
        try:
            with eager.no_grad():
                fn(x, y)
        except (IndexError, ValueError) as exc:
            assert "4" in str(exc) or "index" in str(exc).lower()
        else:
            raise AssertionError("an out-of-range class index must raise")


def test_a_training_step_runs_as_one_generated_function_calling_each_kernel_once():
    import eager.nn as nn
    import eager.optim as optim

    eager.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = eager.randn(4, 6)
    y = eager.from_numpy(np.array([0, 2, 1, 2]))

    @tracer.function
    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(3):
        step(x, y)
    program = step.get_concrete_function(x, y).program
    source = program.runner_source
    assert source is not None and source.startswith("def run(args, dests):")
    for kernel in program.kernels:
        assert source.count(f"# {kernel.name}\n") == 1, source
