"""When a @function traces again, and when it must not (`trace_count`), plus the
diagnostics around it: TRACER_LOGS=recompiles, the many-traces warning, max_traces,
static arguments and input_signature."""
import logging
import warnings

import numpy as np
import pytest

import eager
import eager.nn as nn
import tracer
from _tracer_helpers import fn
from tracer import TensorSpec, logs


# --------------------------------------------------------------------------------------
# the signature key: shapes, static values, dtypes, requires_grad, grad mode

def test_each_part_of_the_signature_traces_once():
    @fn
    def f(x, n):
        return x * n

    x = eager.randn(8, 4)
    f(x, 2)
    f(x, 2)
    f(eager.randn(8, 4), 2)  # another tensor of the same signature
    assert f.trace_count == 1
    steps = [
        (lambda: f(eager.randn(9, 4), 2), "new shape"),
        (lambda: f(x, 3), "new static value"),
        (lambda: f(x.to(eager.float64), 2), "new dtype"),
        (lambda: f(eager.randn(8, 4, requires_grad=True), 2), "requires_grad flips"),
    ]
    for k, (call, what) in enumerate(steps, start=2):
        call()
        assert f.trace_count == k, what
        call()
        assert f.trace_count == k, f"{what}, second call"
    with eager.no_grad():
        f(x, 2)
        assert f.trace_count == 6, "grad mode"
        f(x, 2)
    assert f.trace_count == 6
    np.testing.assert_allclose(f(x, 3).numpy(), x.numpy() * 3)


def test_python_scalars_of_other_types_are_other_static_values():
    @fn
    def f(x, n):
        return x * n

    x = eager.ones(2)
    f(x, 2)
    f(x, 2.0)  # 2 == 2.0, but int and float trace differently (the dtype may differ)
    f(x, True)
    assert f.trace_count == 3


# --------------------------------------------------------------------------------------
# captured state: read at every call, guarded when it is replaced

def test_parameter_updated_in_place_is_read_without_retracing():
    w = eager.randn(4)

    @fn
    def f(x):
        return x * w

    x = eager.randn(3, 4)
    np.testing.assert_allclose(f(x).numpy(), (x * w).numpy())
    with eager.no_grad():
        w.add_(1)
    np.testing.assert_allclose(f(x).numpy(), (x * w).numpy())
    w.data = eager.full((4,), 5.0)  # same shape: a new array, still read at the call
    np.testing.assert_allclose(f(x).numpy(), x.numpy() * 5)
    assert f.trace_count == 1


def test_replacing_a_module_parameter_retraces():
    eager.manual_seed(0)
    layer = nn.Linear(4, 3)

    @fn
    def f(x):
        return layer(x)

    x = eager.randn(2, 4)
    with eager.no_grad():
        f(x)
        layer.weight = nn.Parameter(eager.randn(3, 4))
        np.testing.assert_allclose(f(x).numpy(), layer(x).numpy(), rtol=1e-6)
        assert f.trace_count == 2
        layer.bias = nn.Parameter(eager.randn(3))
        np.testing.assert_allclose(f(x).numpy(), layer(x).numpy(), rtol=1e-6)
        assert f.trace_count == 3
        f(x)
    assert f.trace_count == 3


def test_replacing_a_submodule_retraces():
    eager.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

    @fn
    def f(x):
        return net(x)

    x = eager.randn(2, 4)
    with eager.no_grad():
        f(x)
        setattr(net, "0", nn.Linear(4, 4))
        np.testing.assert_allclose(f(x).numpy(), net(x).numpy(), rtol=1e-6)
    assert f.trace_count == 2


def test_changing_a_captured_tensors_shape_retraces():
    w = eager.ones(4)

    @fn
    def f(x):
        return x * w

    x = eager.ones(4)
    f(x)
    w.data = eager.full((1,), 3.0)
    np.testing.assert_array_equal(f(x).numpy(), [3.0] * 4)
    assert f.trace_count == 2
    w.data = eager.full((4,), 3.0, dtype=eager.float64)
    out = f(x)
    assert out.dtype == eager.float64 and f.trace_count == 3


GLOBAL_W = eager.ones(3)


def test_rebinding_a_global_tensor_retraces():
    global GLOBAL_W

    @fn
    def f(x):
        return x * GLOBAL_W

    x = eager.ones(3)
    f(x)
    old = GLOBAL_W
    try:
        GLOBAL_W = eager.full((3,), 7.0)  # same shape: only the object changed
        np.testing.assert_array_equal(f(x).numpy(), [7.0] * 3)
        assert f.trace_count == 2
        f(x)
        assert f.trace_count == 2
    finally:
        GLOBAL_W = old


def test_rebinding_a_closure_variable_retraces():
    w = eager.ones(3)

    @fn
    def f(x):
        return x * w

    x = eager.ones(3)
    f(x)
    w = eager.full((3,), 2.0)  # noqa: F841 - read by f through its closure cell
    np.testing.assert_array_equal(f(x).numpy(), [2.0] * 3)
    assert f.trace_count == 2


def test_freezing_a_parameter_retraces_a_training_step():
    eager.manual_seed(0)
    layer = nn.Linear(3, 2)
    opt = eager.optim.SGD(layer.parameters(), lr=0.1)

    @fn
    def step(x):
        opt.zero_grad()
        layer(x).sum().backward()
        opt.step()

    x = eager.randn(4, 3)
    for _ in range(3):
        step(x)
    # opt.zero_grad() overwrites .grad before anything reads it, so whether .grad was set
    # when the call began does not matter: one trace serves every call.
    assert step.trace_count == 1
    layer.weight.requires_grad_(False)
    before = layer.weight.detach().numpy().copy()
    step(x)
    assert step.trace_count == 2
    np.testing.assert_array_equal(layer.weight.detach().numpy(), before)


def test_loading_optimizer_state_retraces():
    eager.manual_seed(0)
    layer = nn.Linear(3, 2)
    opt = eager.optim.SGD(layer.parameters(), lr=0.1, momentum=0.9)

    @fn
    def step(x):
        opt.zero_grad()
        layer(x).sum().backward()
        opt.step()

    x = eager.randn(4, 3)
    for _ in range(3):
        step(x)
    count = step.trace_count
    opt.load_state_dict(opt.state_dict())  # new buffer tensors: the old captures are stale
    step(x)
    assert step.trace_count == count + 1
    buf = opt.state[layer.weight]["momentum_buffer"]
    before = buf.numpy().copy()
    step(x)
    assert not np.array_equal(buf.numpy(), before), "the loaded buffer is the one updated"


# --------------------------------------------------------------------------------------
# TRACER_LOGS=recompiles

@pytest.fixture
def recompiles_log(monkeypatch, caplog):
    monkeypatch.setenv("TRACER_LOGS", "recompiles")
    logs.refresh()
    caplog.set_level(logging.INFO, logger="tracer")
    yield caplog
    monkeypatch.delenv("TRACER_LOGS")
    logs.refresh()


def _messages(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "tracer.recompiles"]


def test_recompiles_log_says_exactly_what_changed(recompiles_log):
    @fn
    def f(x, n):
        return x * n

    x = eager.randn(8, 4)
    f(x, 2)
    f(x, 2)
    assert _messages(recompiles_log) == []
    f(eager.randn(9, 4), 2)
    f(x, 3)
    f(x.to(eager.float64), 2)
    f(eager.randn(8, 4, requires_grad=True), 2)
    with eager.no_grad():
        f(x, 2)
    messages = [m for m in _messages(recompiles_log) if "tracing again" in m]
    assert messages == [
        "f: tracing again (trace #2): arg x: shape (8, 4) -> (9, 4)",
        "f: tracing again (trace #3): static arguments or argument structure changed: "
        "(2) -> (3)",
        "f: tracing again (trace #4): arg x: dtype float32 -> float64",
        "f: tracing again (trace #5): arg x: requires_grad False -> True",
        "f: tracing again (trace #6): grad mode: True -> False",
    ]


def test_recompiles_log_names_a_replaced_capture(recompiles_log):
    w = eager.ones(4)

    @fn
    def f(x):
        return x * w

    f(eager.ones(4))
    w.data = eager.ones(5)
    f(eager.ones(5))
    assert "f: tracing again (trace #2): arg x: shape (4,) -> (5,)" in _messages(recompiles_log)
    w.data = eager.ones(1)
    f(eager.ones(5))
    assert _messages(recompiles_log)[-1] == \
        "f: tracing again (trace #3): capture w: f32[5] -> f32[1]"


def test_no_log_without_the_environment_variable(monkeypatch, caplog):
    monkeypatch.delenv("TRACER_LOGS", raising=False)
    logs.refresh()
    caplog.set_level(logging.INFO, logger="tracer")
    f = fn(lambda x: x + 1)
    f(eager.ones(1))
    f(eager.ones(2))
    assert _messages(caplog) == []


# --------------------------------------------------------------------------------------
# too many traces

def test_warns_after_eight_traces_naming_the_changing_argument():
    @fn
    def f(x, y):
        return x + y.sum()

    y = eager.ones(3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 8):
            f(eager.ones(n), y)
        assert not caught
        f(eager.ones(8), y)
        f(eager.ones(9), y)
    assert f.trace_count == 9
    assert len(caught) == 1
    w = caught[0]
    assert w.category is RuntimeWarning
    assert "traced 8 times" in str(w.message)
    assert "the changing argument: x" in str(w.message) and "y" not in \
        str(w.message).split("changing argument:")[1].split(".")[0]
    assert w.filename == __file__  # points at the caller, not into tracer/


def test_max_traces_evicts_the_least_recently_used_trace_with_stats():
    calls = []

    @fn(max_traces=2)
    def f(x):
        calls.append(x.shape)
        return x * 2

    for n in (1, 2, 1, 3):  # 3 evicts 2 (1 was used since), not 1
        np.testing.assert_array_equal(f(eager.ones(n)).numpy(), [2.0] * n)
    assert calls == [(1,), (2,), (3,)]  # the body ran only while tracing
    stats = f.stats()
    assert (stats["traces"], stats["hits"], stats["misses"], stats["evictions"]) == \
        (2, 1, 3, 1), stats
    assert stats["compile_seconds"] > 0
    f(eager.ones(1))  # still held: a hit
    assert calls == [(1,), (2,), (3,)]
    f(eager.ones(2))  # evicted: traced again (evicting 3), and right
    assert calls == [(1,), (2,), (3,), (2,)]
    stats = f.stats()
    assert (stats["traces"], stats["hits"], stats["misses"], stats["evictions"]) == \
        (2, 2, 4, 2), stats
    assert f.trace_count == 4


def test_max_traces_recency_counts_hits_on_the_fast_paths():
    """A hit on any fast path refreshes the trace's recency: the multi-argument path, and
    the one-argument path's table (not only its last hit)."""
    calls = []

    @fn(max_traces=2)
    def f(x, y):
        calls.append(x.shape)
        return x * 2 + y

    y = eager.ones(1)
    for n in (1, 2, 1, 3):  # 1 is hit on the multi-argument fast path: 3 evicts 2
        np.testing.assert_array_equal(f(eager.ones(n), y).numpy(), [3.0] * n)
    assert calls == [(1,), (2,), (3,)]
    f(eager.ones(1), y)  # still held
    assert calls == [(1,), (2,), (3,)] and f.stats()["evictions"] == 1

    calls = []

    @fn(max_traces=3)
    def g(x):
        calls.append(x.shape)
        return x * 2

    for n in (1, 2, 3, 1, 2, 4):  # 1 and 2 hit (the table, then the last hit): 4 evicts 3
        np.testing.assert_array_equal(g(eager.ones(n)).numpy(), [2.0] * n)
    assert calls == [(1,), (2,), (3,), (4,)]
    g(eager.ones(1))
    g(eager.ones(2))
    assert calls == [(1,), (2,), (3,), (4,)] and g.stats()["evictions"] == 1


# --------------------------------------------------------------------------------------
# static arguments

def test_unhashable_argument_is_a_type_error_naming_static_argnames():
    @fn
    def f(x, options):
        return x * len(options)

    with pytest.raises(TypeError, match="static_argnames") as info:
        f(eager.ones(2), {1, 2})
    assert "options" in str(info.value) and "set" in str(info.value)
    with pytest.raises(TypeError, match="static_argnames"):
        f(eager.ones(2), np.ones(3))


def test_static_argnames_and_argnums():
    @fn(static_argnames=("options",))
    def f(x, options):
        return x * options["scale"]

    x = eager.ones(2)
    opts = {"scale": 3.0}
    np.testing.assert_array_equal(f(x, opts).numpy(), [3.0, 3.0])
    np.testing.assert_array_equal(f(x, options=opts).numpy(), [3.0, 3.0])
    assert f.trace_count == 1  # positional and keyword: bound to the signature, one key
    f(x, options=opts)
    assert f.trace_count == 1
    np.testing.assert_array_equal(f(x, options={"scale": 4.0}).numpy(), [4.0, 4.0])
    assert f.trace_count == 2  # unhashable static values are keyed by identity

    @fn(static_argnums=1)
    def g(x, table):
        return x + table[0]

    np.testing.assert_array_equal(g(x, [5.0]).numpy(), [6.0, 6.0])

    @fn(static_argnums=(1,))
    def h(x, k):
        return x * k

    h(x, 2)
    h(x, 2)
    h(x, 3)
    assert h.trace_count == 2


def test_hashable_python_values_are_keyed_by_value():
    @fn
    def f(x, shape, mode="a"):
        return x.reshape(shape) if mode == "a" else x

    x = eager.ones(6)
    assert f(x, (2, 3)).shape == (2, 3)
    assert f(x, (2, 3)).shape == (2, 3)
    assert f(x, (3, 2)).shape == (3, 2)
    assert f(x, (3, 2), mode="b").shape == (6,)
    assert f.trace_count == 3


# --------------------------------------------------------------------------------------
# input_signature

def test_input_signature_checks_arguments():
    @fn(input_signature=[TensorSpec((None, 4), eager.float32)])
    def f(x):
        return x.sum(dim=1)

    np.testing.assert_array_equal(f(eager.ones(2, 4)).numpy(), [4.0, 4.0])
    np.testing.assert_array_equal(f(eager.ones(3, 4)).numpy(), [4.0] * 3)
    for bad, shown in [(eager.ones(2, 5), "f32[2,5]"),
                       (eager.ones(2, 4, dtype=eager.float64), "f64[2,4]"),
                       (eager.ones(4), "f32[4]")]:
        with pytest.raises(TypeError) as info:
            f(bad)
        message = str(info.value)
        assert f"argument x is {shown}" in message, message
        assert "TensorSpec((None,4), float32)" in message
    with pytest.raises(TypeError, match="1 tensor specs but the call passes 2"):
        f((eager.ones(2, 4), eager.ones(2, 4)))


def test_get_concrete_function_without_arguments_traces_from_the_signature():
    @fn(input_signature=[TensorSpec((2, 4), eager.float32),
                         TensorSpec((4,), eager.int64)])
    def f(x, idx):
        return x * idx.to(eager.float32)

    cf = f.get_concrete_function()
    assert f.trace_count == 1
    assert [str(v.type) for v in cf.graph.inputs] == ["f32[2,4]", "i64[4]"]
    tracer.verify(cf.graph)
    out = f(eager.ones(2, 4), eager.tensor([1, 2, 3, 4]))
    np.testing.assert_array_equal(out.numpy()[1], [1.0, 2.0, 3.0, 4.0])
    assert f.trace_count == 1  # the call found the trace made from the signature


def test_get_concrete_function_returns_the_cached_trace_without_running():
    calls = []

    @fn
    def f(x):
        calls.append(1)
        return x + 1

    x = eager.ones(2)
    cf = f.get_concrete_function(x)
    assert f.get_concrete_function(eager.zeros(2)) is cf
    f(x)
    f(x)
    assert calls == [1] and f.trace_count == 1
    np.testing.assert_array_equal(cf(eager.full((2,), 4.0)).numpy(), [5.0, 5.0])


def test_calling_a_concrete_function_checks_its_signature_and_guards():
    w = eager.ones(3)

    @fn
    def f(x, y):
        return x + y * w

    cf = f.get_concrete_function(eager.ones(3), eager.ones(3))
    np.testing.assert_array_equal(cf(eager.ones(3), eager.ones(3)).numpy(), [2.0] * 3)
    with pytest.raises(TypeError, match=r"traced for \(f32\[3\], f32\[3\]\) but is called "
                                        r"with \(f32\[4,3\], f32\[3\]\)"):
        cf(eager.ones(4, 3), eager.ones(3))
    with pytest.raises(TypeError, match="is called with \\(f32\\[3\\]\\)"):
        cf(eager.ones(3))
    w.data = eager.ones(1)
    with pytest.raises(RuntimeError, match="capture w: f32\\[3\\] -> f32\\[1\\]"):
        cf(eager.ones(3), eager.ones(3))
    np.testing.assert_array_equal(f(eager.ones(3), eager.ones(3)).numpy(), [2.0] * 3)
