"""Check mode: `tracer.function(fn, check=True|N)` runs the first N calls of each trace
eagerly too (on the same state, put back between the runs) and raises tracer.CheckError,
naming the first diverging equation, its kernel and the user's line, on a difference."""
import itertools
import os

import numpy as np
import pytest

import eager
import tracer
from eager import nn
from tracer import check as check_mode
from tracer.check import compare_arrays

BACKENDS = ["numba", "interpret"]


def _line_of(fn, text):
    """'test_check_mode.py:N' of the line in `fn`'s source containing `text`."""
    import inspect

    lines, first = inspect.getsourcelines(fn)
    for k, line in enumerate(lines):
        if text in line:
            return f"test_check_mode.py:{first + k}"
    raise AssertionError(text)


# ----------------------------------------------------------------- correct programs pass

@pytest.mark.parametrize("backend", BACKENDS)
def test_gelu_passes_and_returns_what_eager_does(backend):
    def gelu(x):
        return 0.5 * x * (1 + eager.tanh(0.79788456 * (x + 0.044715 * x ** 3)))

    f = tracer.function(gelu, backend=backend, check=True)
    x = eager.tensor(np.linspace(-4, 4, 24, dtype=np.float32).reshape(4, 6))
    for _ in range(3):
        np.testing.assert_allclose(f(x).numpy(), gelu(x).numpy(), rtol=1e-5, atol=1e-6)
    assert f.get_concrete_function(x).checks_done == 2


def _train(backend, check, steps=4):
    eager.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 3))
    opt = eager.optim.Adam(model.parameters(), lr=1e-2)

    def step(x, y):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    if check is not None:
        step = tracer.function(step, backend=backend, check=check)
    x = eager.tensor(np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32))
    y = eager.tensor(np.array([0, 1, 2, 0, 1]))
    losses = [step(x, y).item() for _ in range(steps)]
    state = [p.detach().numpy().copy() for p in model.parameters()]
    state += [v.numpy().copy() for s in opt.state.values() for v in s.values()
              if isinstance(v, eager.Tensor)]
    return losses, state, step


@pytest.mark.parametrize("backend", BACKENDS)
def test_mlp_adam_step_passes_and_leaves_the_unchecked_state(backend):
    eager_losses, eager_state, _ = _train(backend, None)
    plain_losses, plain_state, _ = _train(backend, False)
    losses, state, step = _train(backend, 3)
    assert step.trace_count == 1  # restoring the state between the runs does not retrace
    # A checked call returns (and leaves) what the unchecked compiled call does.
    assert losses == plain_losses
    for a, b in zip(state, plain_state):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-5)
    for a, b in zip(state, eager_state):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_a_first_call_that_runs_once_sgd_dampening_passes():
    # SGD's first step with dampening has a path of its own: a one-shot trace that runs
    # once through the interpreter, then the steady-state trace.
    def train(check):
        eager.manual_seed(0)
        lin = nn.Linear(4, 4)
        opt = eager.optim.SGD(lin.parameters(), lr=0.1, momentum=0.9, dampening=0.1)

        def step(x):
            opt.zero_grad()
            loss = lin(x).pow(2).mean()
            loss.backward()
            opt.step()
            return loss

        if check:
            step = tracer.function(step, backend="interpret", check=check)
        x = eager.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
        return [step(x).item() for _ in range(4)], lin.weight.detach().numpy().copy(), step

    losses, weight, step = train(2)
    eager_losses, eager_weight, _ = train(None)
    assert step.trace_count == 2
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-6)
    np.testing.assert_allclose(weight, eager_weight, rtol=1e-5, atol=1e-7)


def test_a_method_with_dropout_in_training_passes():
    eager.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.drop = nn.Dropout(0.5)

        @tracer.function(backend="interpret", check=3)
        def forward(self, x):
            return self.drop(self.lin(x)).sum()

    net = Net()
    x = eager.ones(3, 4)
    for _ in range(3):  # the same random draws for the eager and the compiled run
        net(x)
    assert net.forward.get_concrete_function(x).checks_done == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_inplace_update_of_a_capture_passes(backend):
    w = eager.zeros(6)

    def accumulate(x):
        w.add_(x)
        return w * 2

    f = tracer.function(accumulate, backend=backend, check=True)
    x = eager.arange(6).float()
    outs = [f(x).numpy().copy() for _ in range(3)]
    # Once per call (the eager run's update is undone before the compiled one).
    np.testing.assert_array_equal(w.numpy(), 3 * x.numpy())
    np.testing.assert_array_equal(outs[-1], 6 * x.numpy())


# ----------------------------------------------------------------- broken results raise

@pytest.mark.one_backend  # (breaks a Numba kernel on purpose)
def test_wrong_kernel_names_the_equation_its_kernel_and_line(monkeypatch):
    import codegen.lower as lower

    # A wrong lowering for one op: `sub` computes a - b + 0.01 in every kernel built now.
    monkeypatch.setitem(lower.LOWERING, "sub", lower.Lowering("kernel", "({0} - {1} + 0.01)"))

    def shifted(x):
        y = eager.tanh(x) * 3
        return y - 1.5, y.sum()

    f = tracer.function(shifted, check=True)
    x = eager.tensor(np.linspace(-1, 1, 7, dtype=np.float32))
    with pytest.raises(tracer.CheckError) as info:
        f(x)
    msg = str(info.value)
    kernel = next(k.name for k in f.get_concrete_function(x).kernels if "sub" in k.name)
    assert "output out[0]" in msg and "output out[1]" not in msg
    assert "largest error 0.01" in msg
    assert "first diverging equation" in msg and f"in kernel {kernel}" in msg
    diverging = msg.split("first diverging equation")[1].splitlines()[1]
    assert " = sub " in diverging and diverging.endswith(_line_of(shifted, "y - 1.5"))


@pytest.mark.one_backend  # (breaks a Numba kernel on purpose)
def test_random_ops_draw_the_same_numbers_when_localizing(monkeypatch):
    import codegen.lower as lower

    monkeypatch.setitem(lower.LOWERING, "sub", lower.Lowering("kernel", "({0} - {1} + 0.01)"))

    def dropped(x):
        return nn.functional.dropout(x * 3, 0.5, training=True) - 0.25

    f = tracer.function(dropped, check=True)
    with pytest.raises(tracer.CheckError) as info:
        f(eager.ones(64))
    diverging = str(info.value).split("first diverging equation")[1].splitlines()[1]
    assert " = sub " in diverging and diverging.endswith(_line_of(dropped, "- 0.25"))


@pytest.mark.one_backend  # (breaks a Numba kernel on purpose)
def test_one_wrong_element_of_one_kernel_names_that_kernel(monkeypatch):
    import codegen.build as build

    original = build.load_kernel

    def load_off_by_a_bit(source, name):
        entry, module, file = original(source, name)
        if not name.startswith("tanh"):  # (kernel files are named for their ops)
            return entry, module, file

        def wrong(*arrays):  # the second kernel: its output's element 3 is off by 1e-2
            entry(*arrays)
            # (its output: the last array; its loop's range lo, hi follows)
            [a for a in arrays if isinstance(a, np.ndarray)][-1][3] += 0.01
        return wrong, module, file

    monkeypatch.setattr(build, "load_kernel", load_off_by_a_bit)

    def two_kernels(x, w):
        h = eager.exp(x) @ w             # k0 (exp), then a BLAS call
        return eager.tanh(h) * 0.5       # k1

    f = tracer.function(two_kernels, check=True)
    x = eager.tensor(np.linspace(-1, 1, 15, dtype=np.float32).reshape(5, 3))
    w = eager.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
    with pytest.raises(tracer.CheckError) as info:
        f(x, w)
    msg = str(info.value)
    kernel = next(k.name for k in f.get_concrete_function(x, w).kernels if "_k1_" in k.name)
    assert "output out: 1 of 20 elements beyond tolerance" in msg
    assert "largest error 0.01" in msg and "at (0, 3)" in msg
    assert f"in kernel {kernel}:" in msg
    diverging = msg.split("first diverging equation")[1].splitlines()[1]
    assert " = mul " in diverging and diverging.endswith(_line_of(two_kernels, "* 0.5"))
    # tanh and mul are fused: which of them is wrong is not knowable, and not guessed.
    tanh = next(e for e in f.get_concrete_function(x, w).graph.eqns if e.op == "tanh")
    assert f"{kernel} fuses 2 equations" in msg and f"among %{tanh.out.name}.." in msg


@pytest.mark.one_backend  # (breaks a Numba kernel on purpose)
def test_a_wrong_compiled_backward_is_caught_by_the_gradient_check(monkeypatch):
    import codegen.lower as lower

    # sign() appears only in abs's backward (g * sign(x)): the forward stays right.
    monkeypatch.setitem(lower.LOWERING, "sign",
                        lower.Lowering("kernel", "({one} if {0} == {0} else {zero})"))
    w = eager.tensor(np.linspace(-1, 1, 9, dtype=np.float32), requires_grad=True)

    def weighted_abs(x):
        return (x.abs() * w).sum()

    f = tracer.function(weighted_abs, check=True)
    x = eager.tensor(np.linspace(-2, 2, 9, dtype=np.float32), requires_grad=True)
    with pytest.raises(tracer.CheckError) as info:
        f(x)
    msg = str(info.value)
    assert "gradient w.r.t. x (backward from the outputs" in msg
    assert "gradient w.r.t. w " not in msg and "\n  output" not in msg
    assert "difference is in the compiled backward" in msg


def test_a_float64_gradient_through_a_float32_output_gets_float32_tolerance():
    # Fuzz seed 17709: hypot(c0 f64[], t f32[3,4]) is float32 (a 0-d tensor does not
    # promote), so c0's float64 gradient is a float32 sum cast up, eagerly as compiled; the
    # two differ in float32's last bits (summation order) and check mode held that to
    # float64's rtol 1e-10.
    rng = np.random.default_rng(1770950)
    c0 = eager.tensor(np.float64(rng.standard_normal()), requires_grad=True)
    c1 = eager.tensor(rng.standard_normal((1, 4)).astype(np.float32), requires_grad=True)

    def f(a0):
        return eager.hypot(c0, eager.logaddexp(c1.cosh()[0], a0))

    g = tracer.function(f, check=True)
    a0 = eager.tensor(np.random.default_rng(1770900).standard_normal((3, 1))
                      .astype(np.float32), requires_grad=True)
    out = g(a0)  # (raised CheckError: gradient w.r.t. c0, 5e-7 relative)
    assert out.dtype == eager.float32 and c0.grad is None


def test_the_eager_runs_error_says_where_it_came_from():
    base = np.arange(4, dtype=np.float32)
    base.setflags(write=False)
    w = eager.from_numpy(base)  # eager refuses to write it in place

    def scale_w(x):
        w.mul_(2.0)
        return x + 1

    f = tracer.function(scale_w, backend="interpret", check=True)
    with pytest.raises(RuntimeError, match="read-only") as info:
        f(eager.ones(4))
    assert any("check mode" in note for note in getattr(info.value, "__notes__", ()))
    np.testing.assert_array_equal(w.numpy(), base)  # (the compiled call raised too)


@pytest.mark.filterwarnings("ignore:.*runs eagerly")
@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_raising_call_leaves_the_state_a_plain_call_leaves(backend, grad):
    # BatchNorm counts a training batch before rejecting a batch of one. The plain call
    # (with gradients on: eagerly; off: compiled, whose run-time check raises) leaves some
    # num_batches_tracked, and a checked call, whose eager run raised first, must leave the
    # same.
    import contextlib

    from tracer import TensorSpec

    def run(check):
        m = nn.BatchNorm1d(3)
        f = tracer.function(m.__call__, input_signature=[TensorSpec((None, 3))],
                            backend=backend, check=check)
        with contextlib.nullcontext() if grad else eager.no_grad():
            f(eager.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)))
            with pytest.raises((ValueError, RuntimeError),
                               match="more than 1 value per channel"):
                f(eager.ones(1, 3))
        return m.state_dict()

    checked, plain = run(True), run(False)
    if grad:
        assert int(plain["num_batches_tracked"].item()) == 2
    for k in plain:
        np.testing.assert_array_equal(checked[k].numpy(), plain[k].numpy(), err_msg=k)


def test_an_eager_error_the_compiled_call_does_not_raise_is_a_difference(monkeypatch):
    run_eagerly = check_mode._run_eagerly

    def eager_run_that_raises(*args):
        run_eagerly(*args)
        raise ValueError("only eagerly")

    monkeypatch.setattr(check_mode, "_run_eagerly", eager_run_that_raises)
    f = tracer.function(lambda x: x + 1, backend="interpret", check=True)
    with pytest.raises(tracer.CheckError, match="eager call raises ValueError: only eagerly"):
        f(eager.ones(4))


# A numpy array read by name is read once, at trace time (with a RuntimeWarning): a change
# between calls is a value the trace baked in, which the second checked call sees.
_FROZEN = "ignore:.*numpy array:RuntimeWarning"


@pytest.mark.filterwarnings(_FROZEN)
def test_value_frozen_by_the_trace_names_the_traced_equation():
    scale = np.array([1.0])

    def scaled(x):
        return (x + 1) * float(scale[0])  # a Python value the trace bakes in

    f = tracer.function(scaled, backend="interpret", check=True)
    f(eager.ones(5))
    scale[0] = 2.0
    with pytest.raises(tracer.CheckError) as info:
        f(eager.ones(5))
    msg = str(info.value)
    assert "the trace itself differs from the eager run" in msg
    assert "largest error" in msg
    eqn = msg.split("the trace itself differs")[1].splitlines()[1]
    assert " = mul " in eqn and eqn.endswith(_line_of(scaled, "float(scale[0])"))


@pytest.mark.filterwarnings(_FROZEN)
def test_integer_outputs_are_compared_exactly():
    step = np.array([1])

    def shift(x):
        return x + int(step[0])

    f = tracer.function(shift, check=True)
    x = eager.tensor(np.arange(4, dtype=np.int64) * 10 ** 12)
    f(x)
    step[0] = 2
    with pytest.raises(tracer.CheckError) as info:
        f(x)  # traced with +1, the eager run adds 2
    assert "4 of 4 elements differ (compared exactly)" in str(info.value)


@pytest.mark.filterwarnings(_FROZEN)
def test_a_state_only_difference_is_reported_by_where_the_state_lives():
    amount = np.array([1.0])
    state = {"w": eager.zeros(3)}

    def bump(x):
        state["w"].add_(float(amount[0]))
        return x * 2

    f = tracer.function(bump, backend="interpret", check=True)
    f(eager.ones(3))
    amount[0] = 2.0
    with pytest.raises(tracer.CheckError) as info:
        f(eager.ones(3))
    msg = str(info.value)
    assert "state state['w']:" in msg and "output" not in msg.split("\n")[1]


def test_a_counter_read_through_a_builtin_method_is_refused_not_baked_in():
    """(It was baked in before: the tracer now sees the object the method is bound to.)"""
    tick = itertools.count(1).__next__

    def scaled(x):
        return x * float(tick())

    f = tracer.function(scaled, backend="interpret", check=True)
    with pytest.raises(tracer.TracingError, match="next element of tick"):
        f(eager.ones(5))


def test_module_attributes_rebound_inside_run_eagerly_and_agree():
    """A Python side effect on a module (self.calls += 1) makes the call run eagerly
    (tracer.discover refuses the rebinding): check mode then finds nothing to report."""
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.calls = 0

        def forward(self, x):
            self.calls += 1  # a Python side effect: eagerly at every call
            return self.lin(x)

    net = Counter()
    f = tracer.function(lambda x: net(x).sum(), backend="interpret", check=True)
    with pytest.warns(RuntimeWarning, match="test_check_mode.py"):
        with eager.no_grad():
            f(eager.ones(2, 3))
            f(eager.ones(2, 3))
    assert net.calls == 2


def test_pass_that_changes_a_value_is_named(monkeypatch):
    import tracer.passes as passes
    from tracer.ir import Literal

    original = passes.optimize

    def wrong_pass(graph, *a, **k):
        graph = original(graph, *a, **k)
        eqns = list(graph.eqns)
        for i, e in enumerate(eqns):
            if e.op == "mul" and isinstance(e.inputs[1], Literal):
                lit = Literal.of(float(e.inputs[1].value) + 1.0, e.inputs[1].type.dtype)
                eqns[i] = type(e)(e.op, (e.inputs[0], lit), e.params, e.out, e.loc)
        return graph.replace(eqns=tuple(eqns))

    monkeypatch.setattr(passes, "optimize", wrong_pass)

    def twice(x):
        return eager.exp(x) * 2.0

    f = tracer.function(twice, backend="interpret", check=True)
    with pytest.raises(tracer.CheckError) as info:
        f(eager.ones(2))
    msg = str(info.value)
    assert "a pass changed a value" in msg
    eqn = msg.split("a pass changed a value")[1].splitlines()[1]
    assert " = mul " in eqn and eqn.endswith(_line_of(twice, "* 2.0"))


# ----------------------------------------------------------------- how many calls

@pytest.mark.parametrize("n", [1, 2])
def test_checks_the_first_n_calls_of_each_trace_then_runs_only_compiled(n, monkeypatch):
    runs = _count_runs(monkeypatch)

    def body(x):
        return x * 2 + 1

    f = tracer.function(body, backend="interpret", check=n)
    a, b = eager.ones(3), eager.ones(2, 2)
    for _ in range(4):
        f(a)
    # Each checked call runs the body eagerly once more.
    assert len(runs) == n
    for _ in range(4):
        f(b)  # another trace, checked on its own first n calls
    assert len(runs) == 2 * n
    assert f.get_concrete_function(a).checks_done == n
    assert f.trace_count == 2
    assert f._fast  # past its checks, a trace takes the fast path again


def test_check_off_leaves_the_call_path_alone():
    f = tracer.function(lambda x: x * 2 + 1, backend="interpret", check=False)
    x = eager.ones(3)
    f(x)
    f(x)
    assert f._check == 0
    assert not hasattr(f.get_concrete_function(x), "checks_done")


def _count_runs(monkeypatch) -> list:
    """A list that gets an entry at each eager run check mode makes (the body cannot count
    them: check mode puts back the state it reaches, a list it appends to included)."""
    runs = []
    run_eagerly = check_mode._run_eagerly

    def counted(*args):
        runs.append("eager")
        return run_eagerly(*args)

    monkeypatch.setattr(check_mode, "_run_eagerly", counted)
    return runs


def test_tracer_check_environment_variable(monkeypatch):
    saved = os.environ.get("TRACER_CHECK")
    try:
        for value, calls in [("1", 2), ("3", 3), ("0", 0), ("", 0)]:
            os.environ["TRACER_CHECK"] = value
            check_mode.env_calls(refresh=True)
            f = tracer.function(lambda x: x + 1, backend="interpret")
            assert f._check == calls
            assert tracer.function(lambda x: x + 1, check=False)._check == 0
        os.environ["TRACER_CHECK"] = "1"
        check_mode.env_calls(refresh=True)
        runs = _count_runs(monkeypatch)

        def body(x):
            return x - 1

        g = tracer.function(body, backend="interpret")
        for _ in range(4):
            g(eager.ones(2))
        assert len(runs) == 2  # checked twice
    finally:
        if saved is None:
            os.environ.pop("TRACER_CHECK", None)
        else:
            os.environ["TRACER_CHECK"] = saved
        check_mode.env_calls(refresh=True)


def test_check_argument_is_validated():
    with pytest.raises(TypeError, match="check="):
        tracer.function(lambda x: x, check="yes")


# ----------------------------------------------------------------- tolerances

def test_compare_arrays_integers_and_bools_are_bit_exact():
    a = np.array([1, 2, 3], np.int32)
    assert compare_arrays(a, a.copy()) is None
    assert "compared exactly" in compare_arrays(a, a + np.array([0, 0, 1], np.int32))[0]
    b = np.array([True, False])
    assert "compared exactly" in compare_arrays(b, ~b)[0]
    assert "eager gives int32[3], compiled int64[3]" in compare_arrays(a, a.astype(np.int64))[0]


def test_compare_arrays_nan_and_inf_positions():
    e = np.array([1.0, np.nan, np.inf, -np.inf, 0.0], np.float32)
    assert compare_arrays(e, e.copy()) is None
    assert compare_arrays(e, np.array([1.0, np.nan, np.inf, -np.inf, -0.0], np.float32)) is None
    moved = np.array([np.nan, 1.0, np.inf, -np.inf, 0.0], np.float32)
    assert "NaN in one but not the other at (0,)" in compare_arrays(e, moved)[0]
    flipped = np.array([1.0, np.nan, -np.inf, -np.inf, 0.0], np.float32)
    assert "infinities differ at (2,)" in compare_arrays(e, flipped)[0]


def test_compare_arrays_float_tolerances_follow_the_dtype():
    e32 = np.linspace(1, 100, 50, dtype=np.float32)
    assert compare_arrays(e32, e32 * np.float32(1 + 2e-6)) is None  # a few ulps
    text, (abs_err, rel_err) = compare_arrays(e32, e32 * np.float32(1 + 1e-3))
    assert "beyond tolerance" in text and abs_err == pytest.approx(0.1, rel=1e-2)
    e64 = e32.astype(np.float64)
    assert compare_arrays(e64, e64 * (1 + 1e-13)) is None
    assert compare_arrays(e64, e64 * (1 + 1e-7)) is not None  # fine for f32, not for f64


def _attention_adam(lr):
    eager.manual_seed(0)
    m = nn.MultiheadAttention(8, 2, batch_first=True)
    opt = eager.optim.Adam(m.parameters(), lr=lr)

    def step(x):
        opt.zero_grad()
        out, _ = m(x, x, x)
        loss = (out ** 2).mean()
        loss.backward()
        opt.step()
        return loss.detach()

    return m, step


@pytest.mark.one_backend
def test_adam_amplified_rounding_of_a_zero_gradient_is_not_a_difference():
    # The in_proj key bias's gradient is 0 in exact arithmetic (softmax ignores a constant
    # added to a row): 0 eagerly, ~1e-9 compiled. Adam divides by the gradient's own scale,
    # so the two runs step those elements by unrelated amounts of up to lr: the gradients
    # agree within tolerance, the parameters within a step of lr where the gradient is noise.
    _model, step = _attention_adam(1e-2)
    f = tracer.function(step, check=3)
    x = eager.tensor(np.random.default_rng(0).standard_normal((4, 5, 8)).astype(np.float32))
    for _ in range(3):
        f(x)
    assert f.get_concrete_function(x).checks_done == 3


@pytest.mark.one_backend
def test_a_wrong_optimizer_step_is_still_caught(monkeypatch):
    # One run's Adam steps 5% shorter (its sqrt(v) is 5% larger; sqrt appears only in the
    # optimizer): the gradients agree, so the parameters are held to the dtype's tolerance.
    apply = check_mode._Recorder.apply

    def sqrt_off(self, op, inputs, params):
        out = apply(self, op, inputs, params)
        return out * np.float32(1.05) if op.name == "sqrt" and out.ndim else out

    monkeypatch.setattr(check_mode._Recorder, "apply", sqrt_off)
    _model, step = _attention_adam(1e-2)
    f = tracer.function(step, check=True)
    x = eager.tensor(np.random.default_rng(0).standard_normal((4, 5, 8)).astype(np.float32))
    with pytest.raises(tracer.CheckError, match=r"state (m|opt)\.\S*(weight|params)"):
        f(x)


def test_checked_calls_count_once_in_stats():
    f = tracer.function(lambda x: x * 2, backend="interpret", check=2)
    for _ in range(4):
        f(eager.ones(3))
    stats = f.stats()
    assert (stats["traces"], stats["hits"], stats["misses"]) == (1, 3, 1), stats


def test_thread_coordination_objects_are_not_put_back():
    # An Event's flag is between threads, not the call's state: putting it back after the
    # eager run would undo what another thread did meanwhile (tests/tracer/test_threads.py
    # under TRACER_CHECK=1 waited forever). Like print or a file, it is a side effect the
    # eager run makes too.
    import threading

    ready = threading.Event()

    def f(x):
        ready.set()
        return x + 1

    g = tracer.function(f, backend="interpret", check=3)
    g(eager.ones(2))
    ready.clear()
    g(eager.ones(2))            # a checked call: its eager run sets it, and it stays set
    assert ready.is_set()


# ----------------------------------------------------------------- tolerance by precision

@pytest.mark.parametrize("backend", BACKENDS)
def test_a_float64_cast_of_a_float32_computation_gets_float32s_tolerance(backend):
    # The fuzzer's program 80023: float32 tan differs by an ulp between numpy and the
    # compiled kernel; its float64 cast carries that float32 error, and was compared with
    # float64's tolerance (a CheckError on a correct program). Also a float64 state.
    acc = eager.zeros(64, dtype=eager.float64)

    def f(a0):
        t0 = (a0 * 0.5).tan()
        acc.copy_(t0.double())
        return t0.double(), (a0 * 0.5).double().tan()

    x = eager.tensor(np.linspace(-2.5, 2.5, 64, dtype=np.float32))
    outs = tracer.function(f, backend=backend, check=True)(x)
    np.testing.assert_allclose(outs[0].numpy(), np.tan(x.numpy() * np.float32(0.5)),
                               rtol=1e-6)
    np.testing.assert_allclose(acc.numpy(), outs[0].numpy())


def test_computed_precision_follows_the_computation_not_the_cast():
    from tracer.check_compare import computed_precision

    def precision(fn):
        x = eager.tensor(np.linspace(-1, 1, 8, dtype=np.float32))
        graph = tracer.function(fn, backend="interpret").get_concrete_function(x).raw_graph
        return computed_precision(graph)[0]

    f32 = np.dtype(np.float32)
    assert precision(lambda x: x.tan().double()) == [f32]
    assert precision(lambda x: x.tan().double() * 2) == [f32]
    assert precision(lambda x: x.tan()) == [None]  # its own dtype's tolerance
    # a cast or reshape of an argument computes nothing: float64's tolerance
    assert precision(lambda x: x.double().tan()) == [None]
    assert precision(lambda x: x.reshape(2, 4).double().exp()) == [None]
    # a float32 rounding of a float64 computation, cast back up
    assert precision(lambda x: x.double().exp().float().double()) == [f32]


def test_the_precision_walk_reads_the_cast_rows_converts_field(monkeypatch):
    """That a cast of an argument computes nothing is a fact of its registry row
    (OpDef.converts), not a name check/compare knows."""
    import dataclasses

    from eager.ops import OPS
    from tracer.check_compare import computed_precision

    # float32's rounding of a float64 argument is the same bits eagerly and compiled
    x = eager.tensor(np.linspace(-1, 1, 8, dtype=np.float64))
    f = tracer.function(lambda x: x.float().double(), backend="interpret")
    graph = f.get_concrete_function(x).raw_graph
    assert OPS["cast"].converts and computed_precision(graph)[0] == [None]
    monkeypatch.setitem(OPS, "cast", dataclasses.replace(OPS["cast"], converts=False))
    assert computed_precision(graph)[0] == [np.dtype(np.float32)]
