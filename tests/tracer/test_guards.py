"""Guards: every Python value a trace read is guarded, read live, or refused (issue 13,
items 3-6). Each test runs a user's idiom compiled and eagerly and compares the results."""
import inspect
import types
import warnings

import numpy as np
import pytest

import eager
import tracer
from eager import nn

BACKENDS = ["interpret", "numba"]

SCALE = 2.0
W_GLOBAL = eager.tensor([1.0, 2.0, 3.0])


def _run_both(make, steps, backend):
    """make() -> (fn, state): run `steps(fn, state)` eagerly and compiled; return both
    histories (lists of numpy arrays)."""
    fn, state = make()
    want = steps(fn, state)
    fn, state = make()
    got = steps(tracer.function(fn, backend=backend), state)
    return want, got


def _same(want, got):
    assert len(want) == len(got)
    for a, b in zip(want, got):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _np(t):
    return None if t is None else np.array(t.detach().numpy(), copy=True)


# ------------------------------------------------------------------ item 3: modes, globals

@pytest.mark.parametrize("backend", BACKENDS)
def test_eval_and_train_after_tracing(backend):
    drop = nn.Dropout(0.5)
    f = tracer.function(lambda x: drop(x) * 1.0, backend=backend)
    x = eager.ones(64)
    assert (f(x).numpy() == 0).any()           # training: some zeroed
    drop.eval()
    np.testing.assert_array_equal(f(x).numpy(), x.numpy())  # eval: identity
    assert f.trace_count == 2
    drop.train()
    assert (f(x).numpy() == 0).any()
    assert f.trace_count == 2                   # the first trace serves again


class _Net(nn.Module):
    """Linear -> BatchNorm1d -> Dropout, with an optional `extra` layer and `scale`."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.bn = nn.BatchNorm1d(4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        x = self.drop(self.bn(self.lin(x)))
        if hasattr(self, "extra"):
            x = self.extra(x)
        if hasattr(self, "scale"):
            x = x * self.scale
        return x


def _two_models(backend):
    eager.manual_seed(0)
    a, b = _Net(), _Net()
    b.eval()
    fa = tracer.function(lambda x: a(x), backend=backend)
    fb = tracer.function(lambda x: b(x), backend=backend)
    return a, b, fa, fb


@pytest.mark.parametrize("backend", BACKENDS)
def test_toggling_another_models_mode_retraces_nothing(backend):
    a, b, fa, fb = _two_models(backend)
    x = eager.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
    with eager.no_grad():
        fa(x), fb(x)
        for _ in range(3):
            a.eval()
            np.testing.assert_allclose(fb(x).numpy(), b(x).numpy(), rtol=1e-6, atol=1e-7)
            a.train()
            np.testing.assert_allclose(fb(x).numpy(), b(x).numpy(), rtol=1e-6, atol=1e-7)
    assert fb.trace_count == 1 and fb.stats()["misses"] == 1
    epoch = eager.protocol.STRUCTURE_EPOCH[0]
    a.train(), b.eval()                        # no mode changes: nothing for guards to see
    assert eager.protocol.STRUCTURE_EPOCH[0] == epoch


@pytest.mark.parametrize("backend", BACKENDS)
def test_toggling_the_traced_models_mode_retraces_with_eval_numbers(backend):
    a, _b, fa, _fb = _two_models(backend)
    rng = np.random.default_rng(3)
    with eager.no_grad():
        for _ in range(2):                     # train: running statistics move
            fa(eager.tensor(rng.standard_normal((8, 4)).astype(np.float32) * 3 + 1))
        a.eval()
        x = eager.tensor(rng.standard_normal((5, 4)).astype(np.float32))
        got = fa(x).numpy()
    assert fa.trace_count == 2
    # eval by hand: running statistics, no dropout
    h = x.numpy() @ a.lin.weight.detach().numpy().T + a.lin.bias.detach().numpy()
    want = (h - a.bn.running_mean.numpy()) / np.sqrt(a.bn.running_var.numpy() + 1e-5)
    want = want * a.bn.weight.detach().numpy() + a.bn.bias.detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert int(a.bn.num_batches_tracked.item()) == 2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("change", ["add submodule", "add parameter", "add buffer",
                                    "add attribute", "delete submodule", "delete attribute"])
def test_structure_changes_of_the_traced_model_retrace(backend, change):
    eager.manual_seed(1)
    m = _Net().eval()
    if change.startswith("delete"):
        m.extra = nn.Linear(4, 4)
        m.scale = 2.0
    f = tracer.function(lambda x: m(x), backend=backend)
    x = eager.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
    with eager.no_grad():
        f(x)
        if change == "add submodule":
            m.extra = nn.Linear(4, 4)
        elif change == "add parameter":
            m.lin.bias = nn.Parameter(eager.ones(4))
        elif change == "add buffer":
            m.bn.register_buffer("running_mean", eager.ones(4))
        elif change == "add attribute":
            m.scale = 3.0
        elif change == "delete submodule":
            del m.extra
        else:
            del m.scale
        np.testing.assert_allclose(f(x).numpy(), m(x).numpy(), rtol=1e-6, atol=1e-6)
    assert f.trace_count == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_module_global_float_change(backend):
    global SCALE

    def f(x):
        return x * SCALE

    g = tracer.function(f, backend=backend)
    x = eager.ones(3)
    try:
        SCALE = 2.0
        np.testing.assert_array_equal(g(x).numpy(), f(x).numpy())
        SCALE = 3.0
        np.testing.assert_array_equal(g(x).numpy(), f(x).numpy())
    finally:
        SCALE = 2.0


def _scale_helper(x):
    return x * SCALE


@pytest.mark.parametrize("backend", BACKENDS)
def test_global_float_read_by_helper(backend):
    global SCALE

    def f(x):
        return _scale_helper(x) + 1

    g = tracer.function(f, backend=backend)
    x = eager.ones(3)
    try:
        SCALE = 2.0
        np.testing.assert_array_equal(g(x).numpy(), f(x).numpy())
        SCALE = 5.0
        np.testing.assert_array_equal(g(x).numpy(), f(x).numpy())
    finally:
        SCALE = 2.0


def _make_closure_helper(box):
    k = box

    def helper(x):
        return x * k
    return helper


@pytest.mark.parametrize("backend", BACKENDS)
def test_closure_tensor_of_helper_rebound(backend):
    k = eager.tensor([1.0, 2.0, 3.0])

    def helper(x):
        return x * k

    def f(x):
        return helper(x) + 1

    g = tracer.function(f, backend=backend)
    x = eager.ones(3)
    np.testing.assert_array_equal(g(x).numpy(), f(x).numpy())
    k = eager.tensor([5.0, 5.0, 5.0])  # rebinds helper's closure cell
    np.testing.assert_array_equal(g(x).numpy(), f(x).numpy())


# ------------------------------------------------------------------ item 4: .grad replaced

def _grad_step(backend):
    w = eager.ones(3, requires_grad=True)

    def step(x):
        (w * x).sum().backward()
        return x * 1

    return w, step


@pytest.mark.parametrize("backend", BACKENDS)
def test_grad_replaced_with_zeros_between_calls(backend):
    def run(compiled):
        w, step = _grad_step(backend)
        if compiled:
            step = tracer.function(step, backend=backend)
        x = eager.full((3,), 2.0)
        out = []
        for _ in range(3):
            w.grad = eager.zeros(3)
            step(x)
            out.append(_np(w.grad))
        return out

    _same(run(False), run(True))


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_grad_set_to_none_false_outside_step(backend):
    def run(compiled):
        eager.manual_seed(0)
        model = nn.Linear(3, 2)
        opt = eager.optim.SGD(model.parameters(), lr=0.1)

        def step(x):
            loss = model(x).sum()
            loss.backward()
            opt.step()
            return loss

        if compiled:
            step = tracer.function(step, backend=backend)
        x = eager.ones(4, 3)
        out = []
        for _ in range(3):
            opt.zero_grad(set_to_none=False)
            out.append(_np(step(x)))
            out.append(_np(model.weight.grad))
            out.append(_np(model.weight))
        return out

    want, got = run(False), run(True)
    for a, b in zip(want, got):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_grad_set_to_none_between_micro_steps(backend):
    def run(compiled):
        w, step = _grad_step(backend)
        if compiled:
            step = tracer.function(step, backend=backend)
        x = eager.full((3,), 2.0)
        out = []
        for _ in range(3):
            w.grad = None
            step(x)
            step(x)
            out.append(_np(w.grad))
        return out

    _same(run(False), run(True))


# ------------------------------------------------------------------ item 5: containers

@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_replaced_in_dict(backend):
    params = {"w": eager.tensor([1.0, 2.0, 3.0])}

    def f(x):
        return x * params["w"]

    g = tracer.function(f, backend=backend)
    x = eager.ones(3)
    for _ in range(3):
        np.testing.assert_array_equal(g(x).numpy(), f(x).numpy())
        params["w"] = params["w"] - 0.5


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_replaced_in_list(backend):
    ws = [eager.tensor([1.0, 2.0, 3.0])]

    def f(x):
        return x * ws[0]

    g = tracer.function(f, backend=backend)
    x = eager.ones(3)
    for _ in range(3):
        np.testing.assert_array_equal(g(x).numpy(), f(x).numpy())
        ws[0] = ws[0] * 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_replaced_in_nested_attribute(backend):
    class Inner:
        pass

    class Outer:
        pass

    o = Outer()
    o.inner = Inner()
    o.inner.w = eager.tensor([1.0, 2.0, 3.0])

    def f(x):
        return x * o.inner.w

    g = tracer.function(f, backend=backend)
    x = eager.ones(3)
    for _ in range(3):
        np.testing.assert_array_equal(g(x).numpy(), f(x).numpy())
        o.inner.w = o.inner.w + 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_class_attribute_replaced(backend):
    class Config:
        w = eager.tensor([1.0, 2.0, 3.0])
        scale = 2.0

    def f(x):
        return x * Config.w * Config.scale

    g = tracer.function(f, backend=backend)
    x = eager.ones(3)
    for _ in range(3):
        np.testing.assert_array_equal(g(x).numpy(), f(x).numpy())
        Config.w = Config.w + 1
        Config.scale += 1.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_namespace_entries_replaced(backend):
    ns = types.SimpleNamespace(w=eager.tensor([1.0, 2.0, 3.0]), k=1.5)

    def f(x):
        return x * ns.w + ns.k

    g = tracer.function(f, backend=backend)
    x = eager.ones(3)
    for _ in range(3):
        np.testing.assert_array_equal(g(x).numpy(), f(x).numpy())
        ns.w = ns.w * 3
        ns.k = ns.k + 1


def _read_global_w(x):
    return x * W_GLOBAL


@pytest.mark.parametrize("backend", BACKENDS)
def test_global_tensor_through_helper(backend):
    global W_GLOBAL

    def f(x):
        return _read_global_w(x) + 1

    g = tracer.function(f, backend=backend)
    x = eager.ones(3)
    saved = W_GLOBAL
    try:
        for _ in range(3):
            np.testing.assert_array_equal(g(x).numpy(), f(x).numpy())
            W_GLOBAL = W_GLOBAL + 1
    finally:
        W_GLOBAL = saved


# ------------------------------------------------------------------ item 5: rebinding inside

@pytest.mark.parametrize("backend", BACKENDS)
def test_buffer_rebound_inside_function(backend):
    class Acc(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("total", eager.zeros(3))

        def forward(self, x):
            self.total = self.total + x
            return self.total * 1

    def run(compiled):
        m = Acc()
        f = tracer.function(m, backend=backend) if compiled else m
        x = eager.ones(3)
        out = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(3):
                out.append(_np(f(x)))
                out.append(_np(m.total))
        return out

    _same(run(False), run(True))


@pytest.mark.parametrize("backend", BACKENDS)
def test_dict_state_rebound_inside_function(backend):
    def run(compiled):
        state = {"m": eager.zeros(3)}

        def f(g):
            state["m"] = state["m"] * 0.5 + g
            return state["m"] * 1

        if compiled:
            f = tracer.function(f, backend=backend)
        x = eager.ones(3)
        out = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(3):
                out.append(_np(f(x)))
                out.append(_np(state["m"]))
        return out

    _same(run(False), run(True))


def test_rebinding_inside_refused_under_fullgraph():
    state = {"m": eager.zeros(3)}

    def f(g):
        state["m"] = state["m"] * 0.5 + g
        return g * 1

    g = tracer.function(f, backend="interpret", fullgraph=True)
    with pytest.raises(tracer.TracingError, match=r"test_guards.py:\d+"):
        g(eager.ones(3))


# ------------------------------------------------------------------ item 6: aliasing

@pytest.mark.parametrize("backend", BACKENDS)
def test_same_tensor_passed_twice_and_updated(backend):
    def f(a, b):
        a.mul_(2)
        return b + 1

    def run(compiled):
        g = tracer.function(f, backend=backend) if compiled else f
        out = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            x, y = eager.ones(3), eager.ones(3)
            out.append(_np(g(x, y)))      # traced without aliasing first
            a = eager.ones(3)
            for _ in range(2):
                out.append(_np(g(a, a)))
                out.append(_np(a))
        return out

    _same(run(False), run(True))


@pytest.mark.parametrize("backend", BACKENDS)
def test_argument_and_its_view_updated(backend):
    def f(a, b):
        a.add_(1)
        return b * 1

    def run(compiled):
        g = tracer.function(f, backend=backend) if compiled else f
        out = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out.append(_np(g(eager.ones(4), eager.ones(3))))
            b = eager.tensor([1.0, 2.0, 3.0, 4.0])
            for _ in range(2):
                out.append(_np(g(b, b[1:])))
                out.append(_np(b))
        return out

    _same(run(False), run(True))


@pytest.mark.parametrize("backend", BACKENDS)
def test_argument_that_is_a_captured_tensor_updated(backend):
    def run(compiled):
        w = eager.tensor([1.0, 2.0, 3.0])

        def f(x):
            w.mul_(2)
            return x + 1

        g = tracer.function(f, backend=backend) if compiled else f
        out = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out.append(_np(g(eager.ones(3))))
            for _ in range(2):
                out.append(_np(g(w)))
                out.append(_np(w))
        return out

    _same(run(False), run(True))


# ------------------------------------------------------------------ explanation, fullgraph

@pytest.fixture
def recompiles_log(monkeypatch, caplog):
    import logging

    from tracer import logs

    monkeypatch.setenv("TRACER_LOGS", "recompiles")
    logs.refresh()
    caplog.set_level(logging.INFO, logger="tracer")
    yield lambda: [r.getMessage() for r in caplog.records
                   if r.name == "tracer.recompiles" and "tracing again" in r.getMessage()]
    monkeypatch.delenv("TRACER_LOGS")
    logs.refresh()


def test_retrace_explanation_names_the_failing_guard(recompiles_log):
    global SCALE
    drop = nn.Dropout(0.25)

    def f(x):
        return drop(x) * SCALE

    g = tracer.function(f, backend="interpret")
    x = eager.ones(4)
    try:
        g(x)
        SCALE = 3.0
        g(x)
        drop.eval()
        g(x)
        drop.p = 0.5
        g(x)
    finally:
        SCALE = 2.0
    assert recompiles_log() == [
        "f: tracing again (trace #2): G['SCALE'] == 2.0 -> 3.0",
        # (`training` is tracked state, guarded where it was read: Dropout.forward's read,
        # made for the line calling the module)
        f"f: tracing again (trace #3): Dropout.training: True -> False (read at "
        f"test_guards.py:{inspect.getsourcelines(f)[1] + 1})",
        "f: tracing again (trace #4): drop.p == 0.25 -> 0.5",
    ]


def test_guards_are_data_and_print():
    params = {"w": eager.ones(3), "k": 2}

    def f(x):
        return x * params["w"] * params["k"]

    g = tracer.function(f, backend="interpret")
    cf = g.get_concrete_function(eager.ones(3))
    text = [str(r) for r in cf.guards]
    assert any(t.startswith("identity params is <dict at ") for t in text)
    assert "value    params['k'] == 2" in text
    assert any(t.startswith("identity params['w'] is <tensor f32[3]") for t in text)
    assert cf.guard_failure() is None
    params["k"] = 2.0  # same number, another type: traces to another constant
    assert cf.guard_failure() == "params['k'] == 2 -> 2.0"


def test_frozen_numpy_global_warns_and_fullgraph_raises():
    arr = np.array([1.0, 2.0, 3.0], np.float32)

    def f(x):
        return x * eager.from_numpy(arr)

    with pytest.warns(RuntimeWarning, match=r"test_guards.py:\d+: f reads arr"):
        tracer.function(f, backend="interpret")(eager.ones(3))
    with pytest.raises(tracer.TracingError,
                       match=r"f reads arr, a numpy array: its contents are read once"):
        tracer.function(f, backend="interpret", fullgraph=True)(eager.ones(3))


def test_rebinding_warning_names_the_line():
    class Acc(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("total", eager.zeros(3))

        def forward(self, x):
            self.total = self.total + x
            return x * 1

    m = Acc()
    f = tracer.function(m, backend="interpret")
    with pytest.warns(RuntimeWarning, match=r"test_guards.py:\d+: self.total: .*rebinds"):
        f(eager.ones(3))
    np.testing.assert_array_equal(m.total.numpy(), [1, 1, 1])
    assert f.trace_count == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_namespace_scalar_changed_alone(backend):
    ns = types.SimpleNamespace(w=eager.tensor([1.0, 2.0, 3.0]), k=1.5)

    def f(x):
        return x * ns.w + ns.k

    g = tracer.function(f, backend=backend)
    x = eager.ones(3)
    for _ in range(3):
        np.testing.assert_array_equal(g(x).numpy(), f(x).numpy())
        ns.k = ns.k + 1
    assert g.trace_count == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_user_module_attribute_changed(backend):
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.scale = 2.0

        def forward(self, x):
            return self.lin(x) * self.scale

    eager.manual_seed(0)
    m = Scaled()
    f = tracer.function(m, backend=backend)
    x = eager.ones(2, 3)
    with eager.no_grad():
        for s in (2.0, 3.0, 2.0):
            m.scale = s
            np.testing.assert_allclose(f(x).numpy(), m(x).numpy(), rtol=1e-6)
    assert f.trace_count == 2


def test_unrelated_state_does_not_retrace():
    stats = {"calls": 0, "w": eager.ones(3)}

    def f(x):
        return x * stats["w"]

    g = tracer.function(f, backend="interpret")
    for _ in range(3):
        g(eager.ones(3))
        stats["calls"] += 1   # not read by f: no retrace
    assert g.trace_count == 1


def test_aliased_call_warns_once_and_fullgraph_raises():
    def f(a, b):
        a.mul_(2)
        return b + 1

    g = tracer.function(f, backend="interpret")
    g(eager.ones(3), eager.ones(3))
    a = eager.ones(3)
    with pytest.warns(RuntimeWarning, match=r"test_guards.py:\d+: tracer.function f: argument "
                                             r"a shares memory with argument b"):
        g(a, a)
    strict = tracer.function(f, backend="interpret", fullgraph=True)
    strict(eager.ones(3), eager.ones(3))
    with pytest.raises(tracer.TracingError, match="shares memory"):
        strict(a, a[1:])
