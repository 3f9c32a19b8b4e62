"""One executor (issue 14 item 1): every compiled program is a list of steps run by one
generated runner - with symbolic sizes, numpy fallbacks, cond/while_loop and the
one-kernel program alike - each kernel's source is emitted once, and a concrete
function runs its program one way (its generated `run`; `call_fast` is the same lines
behind the guards). Each case against eager on the same inputs and state."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import codegen
import eager
import eager.nn as nn
import eager.nn.functional as F
import eager.optim as optim
import tracer
from codegen import ahead
from codegen.steps import FallbackStep, KernelCall, SubgraphStep
from tracer import TensorSpec

ROWS = [TensorSpec((None, 4), eager.float32)]


def _program(f, *args):
    return f.get_concrete_function(*args).program


def _close(got, want):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)


def _check_runner(program):
    """The program runs through its generated runner, whose lines call each step."""
    assert program.runner_source.startswith("def run(args, dests):")
    assert program.steps
    kernels = [s for s in program.steps if isinstance(s, KernelCall)]
    for s in kernels:
        assert f"# {s.kernel.name}" in program.runner_source
    text = program.describe()
    assert "program: " in text and "one generated runner" in text
    assert text.count("\n  kernel   ") == len(kernels)


def test_a_one_kernel_program_runs_through_the_runner_and_its_one_argument_form():
    f = tracer.function(lambda x: x * 2.0 + 1.0)
    x = eager.randn(5)
    with eager.no_grad():
        _close(f(x).numpy(), (x * 2.0 + 1.0).numpy())
        concrete = f.get_concrete_function(x)
    program = concrete.program
    _check_runner(program)
    assert "def run1(v0):" in program.runner_source
    assert concrete.run1 is program.call1
    _close(program.call1(x.numpy()), x.numpy() * 2 + 1)


def test_symbolic_sizes_are_bound_by_the_runner():
    f = tracer.function(lambda x: x - x.mean(0) + x.sum(), input_signature=ROWS)
    with eager.no_grad():
        for n in (3, 7, 3):
            x = eager.randn(n, 4)
            _close(f(x).numpy(), (x - x.mean(0) + x.sum()).numpy())
        program = f.get_concrete_function().program
    _check_runner(program)
    assert "sizes = bind(args)" in program.runner_source
    assert any(s.dims for s in program.steps if isinstance(s, KernelCall))
    assert "sizes N0" in program.describe()
    assert f.trace_count == 1


def test_an_empty_symbolic_max_raises_from_the_runner():
    f = tracer.function(lambda x: eager.amax(x, 0) * 2.0, input_signature=ROWS)
    with eager.no_grad():
        _close(f(eager.ones(2, 4)).numpy(), np.full(4, 2.0))
        with pytest.raises(ValueError, match="size 0"):
            f(eager.ones(0, 4))
    assert "check_nonempty(" in f.get_concrete_function().program.runner_source


def test_cond_and_while_loop_are_runner_steps():
    def body(x):
        y = tracer.cond(x.sum() > 0, lambda v: v * 2.0, lambda v: -v, x + 1.0)
        i, z = tracer.while_loop(lambda i, z: i < 3, lambda i, z: (i + 1, z * 1.5),
                                 (eager.tensor(0), y))
        return z + 1.0

    f = tracer.function(body)
    with eager.no_grad():
        for sign in (1.0, -1.0, 1.0):
            x = eager.randn(6) * 0.1 + sign
            _close(f(x).numpy(), body(x).numpy())
        program = _program(f, x)
    _check_runner(program)
    ops = sorted(s.eqn.op for s in program.steps if isinstance(s, SubgraphStep))
    assert ops == ["cond", "while_loop"]
    assert "subgraph " in program.describe()


def test_a_kernel_that_cannot_be_built_is_a_runner_step_through_numpy(monkeypatch):
    def broken(source, name_hint):
        raise RuntimeError("simulated build failure")

    monkeypatch.setattr(codegen.build, "load_kernel", broken)
    monkeypatch.setattr(ahead, "ENABLED", False)
    monkeypatch.setattr(codegen.fallback, "_warned", set())
    eager.manual_seed(0)
    model_c, model_e = nn.Linear(4, 3), nn.Linear(4, 3)
    model_e.load_state_dict(model_c.state_dict())
    opt_c, opt_e = optim.Adam(model_c.parameters(), lr=0.1), optim.Adam(model_e.parameters(),
                                                                        lr=0.1)

    def make(model, opt):
        def step(x):
            opt.zero_grad()
            loss = (F.gelu(model(x)) ** 2).mean()
            loss.backward()
            opt.step()
            return loss
        return step

    x = eager.randn(5, 4)
    step_c, step_e = tracer.function(make(model_c, opt_c)), make(model_e, opt_e)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", codegen.FallbackWarning)
        got = [step_c(x).item() for _ in range(3)]
    _close(got, [step_e(x).item() for _ in range(3)])
    for pc, pe in zip(model_c.parameters(), model_e.parameters(), strict=True):
        _close(pc.detach().numpy(), pe.detach().numpy())
        _close(pc.grad.numpy(), pe.grad.numpy())
        for key in ("exp_avg", "exp_avg_sq"):
            _close(opt_c.state[pc][key].numpy(), opt_e.state[pe][key].numpy())
    program = _program(step_c, x)
    _check_runner(program)
    fallbacks = [s for s in program.steps if isinstance(s, FallbackStep)]
    assert fallbacks and len(fallbacks) == len(program.kernels)
    assert "through numpy" in program.describe()


def test_each_kernel_source_is_emitted_once(monkeypatch):
    """Once per kernel of the program, for a symbolic program too (whose check whether its
    kernels take sizes at run time used to emit every kernel a second time)."""
    from codegen import emit

    emitted = []

    class Counting(emit.KernelSource):
        def __init__(self, part, group, io=None):
            emitted.append(group.name)
            super().__init__(part, group, io)

    monkeypatch.setattr(emit, "KernelSource", Counting)
    for name, fn, spec in [("emit_once_fixed", lambda x: F.softmax(x * 2.0, dim=-1) + x, None),
                           ("emit_once_symbolic", lambda x: F.softmax(x * 3.0, dim=-1) - x,
                            ROWS)]:
        fn.__name__ = fn.__qualname__ = name
        f = tracer.function(fn, input_signature=spec)
        emitted.clear()
        with eager.no_grad():
            x = eager.randn(3, 4)
            _close(f(x).numpy(), fn(x).numpy())
            program = f.get_concrete_function(x) if spec is None else f.get_concrete_function()
        names = [k.name for k in program.kernels]
        assert names and sorted(emitted) == sorted(names), (emitted, names)


def test_a_concrete_function_runs_its_program_one_way():
    """The general path (a ConcreteFunction called directly, or after a guard miss) and the
    guarded fast path run the same generated lines: compiled both ways equals eager."""
    eager.manual_seed(1)
    models = [nn.Linear(4, 3) for _ in range(3)]
    for m in models[1:]:
        m.load_state_dict(models[0].state_dict())
    opts = [optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in models]

    def make(model, opt):
        def step(x):
            opt.zero_grad()
            loss = (model(x) ** 2).mean()
            loss.backward()
            opt.step()
            return loss
        return step

    x = eager.randn(2, 4)
    fast = tracer.function(make(models[0], opts[0]))
    general = tracer.function(make(models[1], opts[1]))
    want = make(models[2], opts[2])
    fast(x), general(x), want(x)
    concrete = general.get_concrete_function(x)  # (traced by the call above)
    assert concrete.call_source is not None and concrete.run_source is not None
    tail = concrete.run_source.split("    results = program(", 1)[1].split("\n", 1)[1]
    assert concrete.call_source.endswith(tail)  # the same write-back lines
    for _ in range(3):
        a, b, c = fast(x).item(), concrete(x).item(), want(x).item()
        assert a == pytest.approx(c, rel=1e-6) and b == pytest.approx(c, rel=1e-6)
    for m in models[:2]:
        for p, q in zip(m.parameters(), models[2].parameters(), strict=True):
            _close(p.detach().numpy(), q.detach().numpy())
            _close(p.grad.numpy(), q.grad.numpy())
    for o in opts[:2]:
        for p, q in zip(o.param_groups[0]["params"], opts[2].param_groups[0]["params"]):
            _close(o.state[p]["momentum_buffer"].numpy(),
                   opts[2].state[q]["momentum_buffer"].numpy())


@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_an_argument_updated_in_place_by_a_one_kernel_program(backend):
    def body(x):
        x.mul_(2.0)
        return x + 1.0

    f = tracer.function(body, backend=backend)
    for _ in range(2):
        a, b = eager.ones(4), eager.ones(4)
        with eager.no_grad():
            got, want = f(a), body(b)
        _close(got.numpy(), want.numpy())
        _close(a.numpy(), b.numpy())
