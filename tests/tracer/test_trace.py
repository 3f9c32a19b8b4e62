"""Tracing eager programs: methods, nesting, argument and result structures, side effects,
what a trace refuses (TracingError), run_eagerly, and whole training steps."""
import inspect

import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F
import tracer
from _tracer_helpers import fn
from tracer.passes import optimize


def verified(f, *args, **kwargs):
    """The concrete function for these arguments; its graphs verify before and after passes."""
    cf = f.get_concrete_function(*args, **kwargs)
    tracer.verify(cf.raw_graph)
    tracer.verify(cf.graph)
    tracer.verify(optimize(cf.raw_graph))
    return cf


def np_(t):
    return t.detach().numpy()


# --------------------------------------------------------------------------------------
# methods

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    @tracer.function(backend="interpret")
    def forward(self, x):
        return self.lin(x).relu()


def test_function_on_a_module_forward():
    eager.manual_seed(0)
    a, b = Block(), Block()
    x = eager.randn(2, 4)
    with eager.no_grad():
        np.testing.assert_allclose(a(x).numpy(), a.lin(x).relu().numpy(), rtol=1e-6)
        np.testing.assert_allclose(b(x).numpy(), b.lin(x).relu().numpy(), rtol=1e-6)
        a(x)
        cf = verified(a.forward, x)
    # The instance is a static argument (by identity): one trace per module.
    assert Block.forward.trace_count == 2
    assert a.forward.trace_count == 2
    assert cf.graph.capture_names == ("self.lin.weight", "self.lin.bias")


def test_module_forward_with_gradients_backpropagates_like_eager():
    eager.manual_seed(0)
    block = Block()
    x = eager.randn(2, 4)
    out = block(x)  # parameters require grad and grad mode is on
    assert out.requires_grad and out.grad_fn is not None
    out.sum().backward()
    ref = Block()
    ref.load_state_dict(block.state_dict())
    expected = ref.lin(x).relu()
    expected.sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), np_(expected), rtol=1e-6)
    np.testing.assert_allclose(block.lin.weight.grad.numpy(), ref.lin.weight.grad.numpy(),
                               rtol=1e-6)
    np.testing.assert_allclose(block.lin.bias.grad.numpy(), ref.lin.bias.grad.numpy(),
                               rtol=1e-6)


class Scaler:
    """A plain class (not a Module) with a tensor attribute."""

    def __init__(self, scale):
        self.scale = eager.tensor(scale)

    @tracer.function(backend="interpret")
    def apply(self, x, bias=1.0):
        return x * self.scale + bias


def test_function_on_a_plain_method():
    s = Scaler([1.0, 2.0, 3.0])
    x = eager.ones(2, 3)
    np.testing.assert_array_equal(s.apply(x).numpy(), [[2.0, 3.0, 4.0]] * 2)
    np.testing.assert_array_equal(s.apply(x, bias=0.0).numpy(), [[1.0, 2.0, 3.0]] * 2)
    cf = verified(s.apply, x)
    assert cf.graph.capture_names == ("self.scale",)
    s.scale.data = eager.tensor([0.0, 0.0, 1.0])  # read at call time
    np.testing.assert_array_equal(s.apply(x).numpy(), [[1.0, 1.0, 2.0]] * 2)
    count = Scaler.apply.trace_count
    s.scale = eager.tensor([5.0, 5.0, 5.0])  # a new object: traces again
    np.testing.assert_array_equal(s.apply(x).numpy(), [[6.0, 6.0, 6.0]] * 2)
    assert Scaler.apply.trace_count == count + 1


# --------------------------------------------------------------------------------------
# nesting

@tracer.function(backend="interpret")
def inner(a):
    return a.exp() * 2  # inner-line


@tracer.function(backend="interpret")
def outer(a):
    return inner(a) + inner(a + 1)  # outer-line


def test_nested_functions_are_inlined():
    x = eager.randn(2, 3)
    expected = np_(x.exp() * 2 + (x + 1).exp() * 2)
    np.testing.assert_allclose(outer(x).numpy(), expected, rtol=1e-6)
    cf = verified(outer, x)
    assert inner.trace_count == 0  # never traced on its own: its body ran inside outer's
    assert cf.graph.op_counts() == {"exp": 2, "mul": 2, "add": 2}
    source, start = inspect.getsourcelines(inner.__wrapped__)
    (offset,) = [i for i, text in enumerate(source) if "# inner-line" in text]
    inner_line = f"test_trace.py:{start + offset}"
    assert [e.loc for e in cf.graph.eqns if e.op == "exp"] == [inner_line, inner_line]
    # inner still works on its own, compiled.
    np.testing.assert_allclose(inner(x).numpy(), np_(x.exp() * 2), rtol=1e-6)
    assert inner.trace_count == 1


# --------------------------------------------------------------------------------------
# structures in and out

def test_nested_arguments_and_results():
    @fn
    def f(d, pair, n, flag=True):
        a, (b, c) = pair
        out = {"s": d["u"] + a, "list": [b * n, c], "n": n, "t": (d["v"],), "none": None}
        if flag:
            out["flag"] = "yes"
        return out

    x = eager.randn(2, 2)
    r = f({"u": x, "v": x * 2}, (x, [x, x + 1]), 3)
    assert set(r) == {"s", "list", "n", "t", "none", "flag"}
    np.testing.assert_allclose(r["s"].numpy(), np_(x + x))
    assert isinstance(r["list"], list) and isinstance(r["t"], tuple)
    np.testing.assert_allclose(r["list"][0].numpy(), np_(x * 3))
    np.testing.assert_allclose(r["list"][1].numpy(), np_(x + 1))
    assert r["n"] == 3 and r["none"] is None and r["flag"] == "yes"
    r2 = f({"u": x, "v": x}, (x, [x, x]), 3, flag=False)
    assert "flag" not in r2
    assert f.trace_count == 2
    f({"u": x, "v": x}, (x, [x, x]), 3, flag=False)
    assert f.trace_count == 2
    cf = verified(f, {"u": x, "v": x}, (x, [x, x]), 3)
    assert [v.name for v in cf.graph.inputs] == ["d_u", "d_v", "pair_0", "pair_1_0",
                                                 "pair_1_1"]


def test_namedtuple_and_keyword_tensors():
    from collections import namedtuple

    Pair = namedtuple("Pair", "a b")

    @fn
    def f(p, *, w):
        return Pair(p.a * w, p.b + w)

    out = f(Pair(eager.ones(2), eager.zeros(2)), w=eager.full((2,), 3.0))
    assert isinstance(out, Pair)
    np.testing.assert_array_equal(out.a.numpy(), [3.0, 3.0])
    np.testing.assert_array_equal(out.b.numpy(), [3.0, 3.0])


def test_results_do_not_alias_arguments():
    @fn
    def f(x, y):
        return x, x, y.reshape(-1), y + 0

    x, y = eager.randn(2, 2), eager.randn(2, 2)
    a, b, c, d = f(x, y)
    # An argument returned is the argument itself, as eager's `return x` (a copy would lose
    # its autograd link: issue 13, item 9); a view of one is a view of it, as eagerly
    # (test_argument_idioms.py); a computed value is neither.
    assert a is x and b is x
    assert np.shares_memory(c.numpy(), y.numpy())
    assert not np.shares_memory(d.numpy(), y.numpy())


# --------------------------------------------------------------------------------------
# side effects

def test_python_side_effects_run_once_per_trace():
    log = []

    @fn
    def f(x):
        log.append(x.shape)
        return x + 1

    for _ in range(3):
        f(eager.ones(2))
    assert log == [(2,)]
    f(eager.ones(5))
    f(eager.ones(5))
    assert log == [(2,), (5,)]


def test_in_place_updates_of_arguments_and_outside_state_happen_every_call():
    calls = eager.zeros(())

    @fn
    def f(x):
        calls.add_(1)
        x.mul_(2)
        return x + calls

    x = eager.ones(3)
    for k in (1, 2, 3):
        out = f(x)
        assert calls.item() == k
        np.testing.assert_array_equal(x.numpy(), [2.0 ** k] * 3)
        np.testing.assert_array_equal(out.numpy(), [2.0 ** k + k] * 3)
    assert f.trace_count == 1


def test_state_created_on_the_first_call_is_materialized():
    state = {}

    @fn
    def accumulate(x):
        if "sum" not in state:
            state["sum"] = eager.zeros_like(x)
        state["sum"].add_(x)
        return state["sum"] * 1

    for k in (1, 2, 3):
        np.testing.assert_array_equal(accumulate(eager.ones(2)).numpy(), [k, k])
    np.testing.assert_array_equal(state["sum"].numpy(), [3.0, 3.0])


def test_run_eagerly_turns_every_function_into_a_plain_call():
    log = []

    @fn
    def f(x):
        log.append(1)
        return x * 2

    x = eager.ones(2)
    tracer.run_eagerly(True)
    try:
        assert tracer.functions_run_eagerly()
        for _ in range(3):
            np.testing.assert_array_equal(f(x).numpy(), [2.0, 2.0])
        assert log == [1, 1, 1] and f.trace_count == 0
    finally:
        tracer.run_eagerly(False)
    assert not tracer.functions_run_eagerly()
    f(x)
    f(x)
    assert log == [1, 1, 1, 1] and f.trace_count == 1


# --------------------------------------------------------------------------------------
# what a trace cannot do

def _needs_bool(x):
    return x * 2 if x else x  # line: bool


def _needs_compare(x):
    if x.sum() > 0:  # line: compare
        return x
    return -x


def _needs_int(x):
    return x * int(x.sum())  # line: int


def _needs_float(x):
    return x * float(x.sum())  # line: float


def _needs_item(x):
    return x * x.sum().item()  # line: item


def _needs_numpy(x):
    return eager.tensor(x.numpy() * 2)  # line: numpy


def _needs_tolist(x):
    return eager.tensor(x.tolist())  # line: tolist


@pytest.mark.parametrize("body,what,shown", [
    (_needs_bool, "bool()", "%x: f32[3]"),
    (_needs_compare, "bool()", "bool[]"),
    (_needs_int, "int()", "f32[]"),
    (_needs_float, "float()", "f32[]"),
    (_needs_item, ".item()", "f32[]"),
    (_needs_numpy, ".numpy()", "%x: f32[3]"),
    (_needs_tolist, ".tolist()", "%x: f32[3]"),
], ids=["bool", "if", "int", "float", "item", "numpy", "tolist"])
def test_value_dependent_python_is_a_tracing_error(body, what, shown):
    source, start = inspect.getsourcelines(body)
    (offset,) = [i for i, text in enumerate(source) if "# line:" in text]
    f = fn(body)
    with pytest.raises(tracer.TracingError) as info:
        f(eager.tensor([1.0, -2.0, 3.0]))
    message = str(info.value)
    assert message.startswith(f"{__file__}:{start + offset}: {what} of a traced tensor"), \
        message
    assert shown in message
    for advice in ("tracer.cond", "tracer.while_loop", "static argument"):
        assert advice in message
    assert isinstance(info.value, RuntimeError)
    # Nothing was cached; the same failure repeats (no half-built state).
    with pytest.raises(tracer.TracingError):
        f(eager.tensor([1.0, -2.0, 3.0]))
    assert f.trace_count == 0


def test_a_failed_trace_leaves_user_state_alone():
    eager.manual_seed(0)
    layer = nn.Linear(2, 2)
    opt = eager.optim.SGD(layer.parameters(), lr=0.1, momentum=0.9)
    layer(eager.ones(1, 2)).sum().backward()
    grads = [p.grad for p in layer.parameters()]
    weights = [np_(p).copy() for p in layer.parameters()]

    @fn
    def step(x):
        opt.zero_grad()
        loss = layer(x).sum()
        loss.backward()
        opt.step()
        if loss > 0:  # a TracingError after the update was recorded
            pass

    with pytest.raises(tracer.TracingError):
        step(eager.ones(1, 2))
    assert [p.grad for p in layer.parameters()] == grads
    for p, w in zip(layer.parameters(), weights):
        np.testing.assert_array_equal(np_(p), w)
    # (Optimizer state made during the trace stays in opt.state, holding its initial zeros:
    # a Python side effect, and the next step continues from it exactly as from no state.)


def test_python_control_flow_on_static_values_is_fine():
    @fn(static_argnames=("mode",))
    def f(x, n, mode):
        for _ in range(n):
            x = x * 2
        return x.relu() if mode == "relu" else x

    x = eager.tensor([-1.0, 1.0])
    np.testing.assert_array_equal(f(x, 3, mode="relu").numpy(), [0.0, 8.0])
    np.testing.assert_array_equal(f(x, 2, mode="id").numpy(), [-4.0, 4.0])
    assert len(x) == 2  # shapes are known while tracing
    assert fn(lambda v: v * len(v))(x).tolist() == [-2.0, 2.0]


# --------------------------------------------------------------------------------------
# whole training steps

def _mlp(seed=0):
    eager.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))


def _batches(n=5):
    rng = np.random.default_rng(1)
    return [(eager.tensor(rng.standard_normal((4, 6)).astype(np.float32)),
             eager.tensor(rng.integers(0, 3, 4))) for _ in range(n)]


def _train(make_opt, compiled):
    model = _mlp()
    opt = make_opt(model.parameters())

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    if compiled:
        step = fn(step)
    losses, params = [], []
    for x, y in _batches():
        losses.append(step(x, y).item())
        params.append([np_(p).copy() for p in model.parameters()])
    grads = [p.grad.numpy().copy() for p in model.parameters()]
    return losses, params, grads, step


@pytest.mark.parametrize("make_opt", [
    lambda ps: eager.optim.SGD(ps, lr=0.1, momentum=0.9),
    lambda ps: eager.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True),
    lambda ps: eager.optim.Adam(ps, lr=0.01),
    lambda ps: eager.optim.AdamW(ps, lr=0.01, weight_decay=0.1),
], ids=["sgd-momentum", "sgd-nesterov", "adam", "adamw"])
def test_training_step_matches_eager(make_opt):
    eager_losses, eager_params, eager_grads, _ = _train(make_opt, compiled=False)
    losses, params, grads, step = _train(make_opt, compiled=True)
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-6)
    for got, want in zip(params, eager_params):  # after every step
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)
    for g, w in zip(grads, eager_grads):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)
    # The first step creates optimizer state as existing state: one trace serves every step.
    assert step.trace_count == 1


def test_training_step_graph_holds_forward_backward_and_update():
    model = _mlp()
    opt = eager.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    @fn
    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    (x, y), = _batches(1)
    step(x, y)
    step(x, y)
    cf = verified(step, x, y)
    assert cf.graph.capture_names[:4] == ("model.0.weight", "model.0.bias", "model.2.weight",
                                          "model.2.bias")
    assert "opt.state[0]['momentum_buffer']" in cf.graph.capture_names
    kinds = [t[0] for t in cf.graph.update_targets]
    assert kinds.count("data") == 8 and kinds.count("grad") == 4  # 4 params, 4 buffers
    assert cf.graph.op_counts()["matmul"] >= 5  # 2 forward, at least 3 backward


def test_backward_into_arguments_accumulates_like_eager():
    @fn
    def f(x):
        (x * x).sum().backward()
        return x.grad * 1

    x = eager.ones(2, requires_grad=True)
    np.testing.assert_array_equal(f(x).numpy(), [2.0, 2.0])
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])
    np.testing.assert_array_equal(f(x).numpy(), [4.0, 4.0])  # accumulated, as eager does
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 4.0])
    x2 = eager.ones(2, requires_grad=True)
    np.testing.assert_array_equal(f(x2).numpy(), [2.0, 2.0])


def test_no_grad_inference_compiles_and_grad_mode_is_restored():
    model = _mlp()

    @fn
    def predict(x):
        with eager.no_grad():
            return model(x).argmax(dim=1)

    x = eager.randn(5, 6)
    with eager.no_grad():
        expected = model(x).argmax(dim=1).numpy()
    np.testing.assert_array_equal(predict(x).numpy(), expected)
    assert eager.dispatch.is_grad_enabled()  # the no_grad() inside the trace was undone
    cf = verified(predict, x)
    assert cf.graph.outputs[0].type.dtype == np.dtype(np.int64)
