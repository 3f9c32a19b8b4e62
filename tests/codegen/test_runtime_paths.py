"""The runner's direct lines for numpy steps (codegen.runner), each
checked against eager where its shortcut is valid and where it must not be taken."""
from __future__ import annotations

import numpy as np
import pytest

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


def test_the_runners_label_check_raises_for_labels_changed_in_place():
    # The runner checks class labels inline (no call to the op): the same label array,
    # written between calls, must still be checked at every call, for every index dtype,
    # and a good label after a bad one must run as eager does.
    import eager.nn as nn

    eager.manual_seed(0)
    model = nn.Linear(6, 3)
    emb = nn.Embedding(4, 2)
    x = eager.randn(4, 6)

    def step(x, y):
        loss = F.cross_entropy(model(x), y) + emb(y).sum()
        loss.backward()
        return loss

    for dtype in (np.int64, np.int32):
        labels = np.array([0, 2, 1, 2], dtype)
        y = eager.from_numpy(labels)
        compiled = tracer.function(step)
        for bad, good in ((-1, 1), (3, 0), (np.iinfo(dtype).min, 2)):
            model.zero_grad()
            emb.zero_grad()
            compiled(x, y)
            assert "check_class_index raises" in \
                compiled.get_concrete_function(x, y).program.runner_source
            labels[1] = bad
            with pytest.raises(IndexError, match="out of bounds"):
                compiled(x, y)
            labels[1] = good
            model.zero_grad()
            emb.zero_grad()
            got = compiled(x, y).item()
            got_grads = [p.grad.numpy().copy() for p in (*model.parameters(), emb.weight)]
            model.zero_grad()
            emb.zero_grad()
            assert got == pytest.approx(step(x, y).item(), rel=1e-5)
            for g, p in zip(got_grads, (*model.parameters(), emb.weight)):
                np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_a_live_hyperparameter_is_passed_to_kernels_without_a_copy():
    # A live hyperparameter's array is read-only; kernels only read it, so its flat view is
    # kept from call to call rather than copied at each (and a new value is still seen).
    import eager.nn as nn
    import eager.optim as optim

    eager.manual_seed(0)
    model = nn.Linear(5, 2)
    ref = nn.Linear(5, 2)
    ref.load_state_dict(model.state_dict())
    opts = [optim.Adam(m.parameters(), lr=0.01) for m in (model, ref)]
    x = eager.randn(3, 5)

    def make(m, opt):
        def step(x):
            opt.zero_grad()
            loss = (m(x) ** 2).mean()
            loss.backward()
            opt.step()
            return loss
        return step

    compiled, eager_step = make(model, opts[0]), make(ref, opts[1])
    compiled = tracer.function(compiled)
    for i, (lr, eps) in enumerate([(0.01, 1e-8), (0.01, 1e-8), (0.05, 1e-3), (0.05, 1e-3)]):
        for opt in opts:
            opt.param_groups[0]["lr"] = lr
            opt.param_groups[0]["eps"] = eps
        assert compiled(x).item() == pytest.approx(eager_step(x).item(), rel=1e-5)
        for p, q in zip(model.parameters(), ref.parameters()):
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5,
                                       atol=1e-6)
    program = compiled.get_concrete_function(x).program
    cached = [h for h in program._flat_cache if h is not None and not h[0].flags.writeable]
    assert cached and all(np.shares_memory(a, f) for a, f in cached)


def _compiled_and_eager_mlp(choice, monkeypatch, x_np, transposed_input):
    """A small MLP's loss and gradients, compiled with `_matmul_choice` forced to
    `choice`, and the same step run eagerly on the same parameters."""
    import codegen.runner as runner

    monkeypatch.setattr(runner, "_matmul_choice", lambda *args: choice)
    rng = np.random.default_rng(3)
    w1 = eager.tensor(rng.standard_normal((16, 12)).astype(np.float32), requires_grad=True)
    w2 = eager.tensor(rng.standard_normal((5, 16)).astype(np.float32), requires_grad=True)

    def step(x):
        w1.grad = w2.grad = None
        y = F.relu(x @ w1.T) @ w2.T
        loss = (y * y).mean()
        loss.backward()
        return loss

    # a Fortran-ordered input at run time: the runner's layout guess is only a guess
    x = eager.from_numpy(np.asfortranarray(x_np) if transposed_input else x_np)
    f = tracer.function(step)
    got = [f(x).item() for _ in range(2)] + [w1.grad.numpy().copy(), w2.grad.numpy().copy()]
    source = f.get_concrete_function(x).program.runner_source
    want = [step(x).item()] * 2 + [w1.grad.numpy().copy(), w2.grad.numpy().copy()]
    return got, want, source


def test_matmul_operand_layouts_chosen_by_timing_give_eager_results(monkeypatch):
    """Whichever operand the tuner copies into the other layout (or none), with C- or
    Fortran-ordered inputs at run time, loss and gradients equal eager's."""
    x_np = np.random.default_rng(4).standard_normal((8, 12)).astype(np.float32)
    for choice in ("", "a", "b"):
        for transposed in (False, True):
            got, want, source = _compiled_and_eager_mlp(choice, monkeypatch, x_np, transposed)
            assert ("fortran(" in source or "contiguous(" in source) == (choice != ""), source
            np.testing.assert_allclose(got[:2], want[:2], rtol=1e-5)
            for g, w in zip(got[2:], want[2:]):
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_matmul_choice_is_timed_once_per_shape_and_layout(monkeypatch):
    import codegen.matmul_layout as matmul_layout

    monkeypatch.setattr(matmul_layout, "_MATMUL_CHOICE", {})
    first = matmul_layout._matmul_choice((32, 100), (100, 128), np.dtype(np.float32), "C", "F")
    assert first in ("", "a", "b")
    assert matmul_layout._MATMUL_CHOICE == {((32, 100), (100, 128), "<f4", "C", "F"): first}
    monkeypatch.setattr(matmul_layout.np, "matmul", None)  # not timed again
    assert matmul_layout._matmul_choice((32, 100), (100, 128), np.dtype(np.float32), "C",
                                        "F") == first


def test_matmul_tuning_can_be_switched_off(monkeypatch):
    import codegen.runner as runner

    monkeypatch.setattr(runner, "AUTOTUNE_MATMUL", False)
    monkeypatch.setattr(runner, "_matmul_choice", lambda *args: "a")
    x = eager.from_numpy(np.ones((4, 6), np.float32))
    w = eager.from_numpy(np.ones((3, 6), np.float32))
    f = tracer.function(lambda x: (x @ w.T) * 2.0)
    with eager.no_grad():
        assert f(x).tolist() == [[12.0] * 3] * 4
    assert "fortran(" not in f.get_concrete_function(x).program.runner_source
