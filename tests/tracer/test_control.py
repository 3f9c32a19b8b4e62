"""tracer.cond and tracer.while_loop: against Python equivalents inside and outside traces,
their type rules, and closures over outer traced values and parameters."""

import numpy as np
import pytest

import eager
import eager.nn as nn
import tracer
from _tracer_helpers import fn
from tracer.passes import optimize


def verified(f, *args):
    cf = f.get_concrete_function(*args)
    tracer.verify(cf.raw_graph)
    tracer.verify(cf.graph)
    tracer.verify(optimize(cf.raw_graph))
    return cf


def sub_graphs(graph):
    for e in graph.eqns:
        for v in e.params.values():
            if isinstance(v, tracer.Graph):
                yield v
                yield from sub_graphs(v)


VALUES = [[1.0, 2.0, 3.0], [-1.0, -2.0, 0.5], [0.0, 0.0, 0.0], [-3.0, 1.0, 1.0]]


# --------------------------------------------------------------------------------------
# cond

def piecewise(x):
    return tracer.cond(x.sum() > 0, lambda v: v * 2 + 1, lambda v: v.exp() - v, x)


def piecewise_python(x):
    return x * 2 + 1 if x.sum().item() > 0 else x.exp() - x


@pytest.mark.parametrize("values", VALUES)
def test_cond_matches_python_inside_and_outside_a_trace(values):
    x = eager.tensor(values)
    expected = piecewise_python(x).numpy()
    np.testing.assert_allclose(piecewise(x).numpy(), expected, rtol=1e-6)  # eager: plain call
    compiled = fn(piecewise)
    np.testing.assert_allclose(compiled(x).numpy(), expected, rtol=1e-6)
    assert compiled.trace_count == 1
    cf = verified(compiled, x)
    assert cf.graph.op_counts().get("cond") == 1


def test_one_trace_serves_both_branches():
    compiled = fn(piecewise)
    for values in VALUES:
        x = eager.tensor(values)
        np.testing.assert_allclose(compiled(x).numpy(), piecewise_python(x).numpy(), rtol=1e-6)
    assert compiled.trace_count == 1


def test_cond_with_several_operands_and_structured_results():
    @fn
    def f(a, b):
        return tracer.cond((a > b).amin(),
                           lambda p, q: {"hi": p, "pair": (p - q, q)},
                           lambda p, q: {"hi": q, "pair": (q - p, p)},
                           a, b)

    a, b = eager.tensor([3.0, 4.0]), eager.tensor([1.0, 2.0])
    out = f(a, b)
    assert set(out) == {"hi", "pair"} and isinstance(out["pair"], tuple)
    np.testing.assert_array_equal(out["hi"].numpy(), [3.0, 4.0])
    np.testing.assert_array_equal(out["pair"][0].numpy(), [2.0, 2.0])
    out = f(b, a)
    np.testing.assert_array_equal(out["hi"].numpy(), [3.0, 4.0])
    np.testing.assert_array_equal(out["pair"][1].numpy(), [1.0, 2.0])
    assert f.trace_count == 1
    verified(f, a, b)


def test_cond_with_a_python_predicate_inside_a_trace_is_a_python_branch():
    @fn
    def f(x, flag):
        return tracer.cond(flag, lambda v: v + 1, lambda v: v - 1, x)

    x = eager.zeros(2)
    np.testing.assert_array_equal(f(x, True).numpy(), [1.0, 1.0])
    np.testing.assert_array_equal(f(x, False).numpy(), [-1.0, -1.0])
    assert "cond" not in verified(f, x, True).graph.op_counts()


def test_nested_cond():
    def nested(x):
        return tracer.cond(x.sum() > 0,
                           lambda v: tracer.cond(v.amax() > 2, lambda u: u * 10,
                                                 lambda u: u * 100, v),
                           lambda v: -v, x)

    def python(x):
        if x.sum().item() > 0:
            return x * 10 if x.amax().item() > 2 else x * 100
        return -x

    compiled = fn(nested)
    for values in VALUES:
        x = eager.tensor(values)
        np.testing.assert_allclose(compiled(x).numpy(), python(x).numpy())
    assert compiled.trace_count == 1
    cf = verified(compiled, eager.tensor(VALUES[0]))
    assert [g.name for g in sub_graphs(cf.graph)] == [
        "true_branch", "true_branch", "false_branch", "false_branch"]


def test_cond_branches_close_over_outer_traced_values_and_parameters():
    eager.manual_seed(0)
    layer = nn.Linear(2, 2)

    @fn
    def f(x):
        s = x.sum()
        return tracer.cond(s > 0, lambda v: layer(v) + s, lambda v: v - s, x)

    with eager.no_grad():
        for values in ([[1.0, 2.0]], [[-1.0, -2.0]]):
            x = eager.tensor(values)
            s = x.sum()
            expected = layer(x) + s if s.item() > 0 else x - s
            np.testing.assert_allclose(f(x).numpy(), expected.numpy(), rtol=1e-6)
        cf = verified(f, eager.tensor([[1.0, 2.0]]))
    assert f.trace_count == 1
    # The parameters read inside the branch are captures of the whole function, named
    # by where they live, and handed to the branch as operands.
    assert cf.graph.capture_names == ("layer.weight", "layer.bias")
    (cond_eqn,) = [e for e in cf.graph.eqns if e.op == "cond"]
    assert cf.graph.captures[0] in cond_eqn.inputs
    # In-place updates of the parameters between calls are seen inside the branch.
    with eager.no_grad():
        layer.bias.add_(100.0)
        x = eager.tensor([[1.0, 2.0]])
        np.testing.assert_allclose(f(x).numpy(), (layer(x) + x.sum()).numpy(), rtol=1e-6)
    assert f.trace_count == 1


def test_cond_branches_that_disagree_are_tracing_errors():
    @fn
    def shapes(x):
        return tracer.cond(x.sum() > 0, lambda v: v * 2, lambda v: v.sum(), x)  # shapes-line

    with pytest.raises(tracer.TracingError) as info:
        shapes(eager.ones(3))
    message = str(info.value)
    assert f"{__file__}:" in message
    assert "true_fn gives f32[3] but false_fn gives f32[]" in message

    @fn
    def dtypes(x):
        return tracer.cond(x.sum() > 0, lambda v: v, lambda v: v.to(eager.float64), x)

    with pytest.raises(tracer.TracingError, match="f32\\[3\\] but false_fn gives f64\\[3\\]"):
        dtypes(eager.ones(3))

    @fn
    def structure(x):
        return tracer.cond(x.sum() > 0, lambda v: (v, v), lambda v: v, x)

    with pytest.raises(tracer.TracingError, match="different structures"):
        structure(eager.ones(3))


def test_cond_needs_a_bool_scalar_predicate():
    @fn
    def f(x):
        return tracer.cond(x > 0, lambda v: v, lambda v: -v, x)

    with pytest.raises(tracer.TracingError, match=r"bool scalar predicate, got bool\[3\]"):
        f(eager.ones(3))

    @fn
    def g(x):
        return tracer.cond(x.sum(), lambda v: v, lambda v: -v, x)

    with pytest.raises(tracer.TracingError, match="bool scalar predicate"):
        g(eager.ones(3))


def test_in_place_updates_of_outside_tensors_inside_a_branch_are_tracing_errors():
    total = eager.zeros(())

    @fn
    def f(x):
        def bump(v):
            total.add_(v.sum())
            return v
        return tracer.cond(x.sum() > 0, bump, lambda v: v, x)

    with pytest.raises(tracer.TracingError, match="return the new value from the body"):
        f(eager.ones(2))
    assert total.item() == 0.0


# --------------------------------------------------------------------------------------
# while_loop

def gcd(a, b):
    """Euclid's algorithm by subtraction: a data-dependent number of steps."""
    def cond(a, b, steps):
        return a != b

    def body(a, b, steps):
        return (eager.where(a > b, a - b, a), eager.where(b > a, b - a, b), steps + 1)

    return tracer.while_loop(cond, body, (a, b, eager.zeros((), dtype=eager.int64)))


def gcd_python(a, b):
    steps = 0
    while a != b:
        a, b = (a - b, b) if a > b else (a, b - a)
        steps += 1
    return a, steps


@pytest.mark.parametrize("a,b", [(1, 1), (12, 18), (7, 5), (100, 3)])
def test_while_loop_matches_python_inside_and_outside_a_trace(a, b):
    ta, tb = eager.tensor(a), eager.tensor(b)
    expected = gcd_python(a, b)
    g, _, steps = gcd(ta, tb)  # eager: a Python loop
    assert (g.item(), steps.item()) == expected
    compiled = fn(gcd)
    g, _, steps = compiled(ta, tb)
    assert (g.item(), steps.item()) == expected
    assert compiled.get_concrete_function(ta, tb).graph.op_counts().get("while_loop") == 1
    verified(compiled, ta, tb)


def test_one_while_loop_trace_runs_any_trip_count():
    compiled = fn(gcd)
    for a, b in ((1, 1), (2, 3), (27, 6), (97, 1)):
        out = compiled(eager.tensor(a), eager.tensor(b))
        assert (out[0].item(), out[2].item()) == gcd_python(a, b)
    assert compiled.trace_count == 1


def test_while_loop_closes_over_outer_values_and_parameters():
    eager.manual_seed(0)
    layer = nn.Linear(3, 3)

    def refine(x, limit):
        scale = x.abs().sum() + 1  # an outer traced value used by the body

        def cond(i, v):
            return i < limit

        def body(i, v):
            return i + 1, (layer(v) / scale).tanh()

        return tracer.while_loop(cond, body, (eager.zeros(()), x))

    def python(x, limit):
        scale = x.abs().sum() + 1
        i, v = 0.0, x
        while i < limit.item():
            i, v = i + 1, (layer(v) / scale).tanh()
        return v

    compiled = fn(refine)
    x = eager.randn(2, 3)
    with eager.no_grad():
        for limit in (0.0, 1.0, 4.0):
            lim = eager.tensor(limit)
            i, v = compiled(x, lim)
            assert i.item() == limit
            np.testing.assert_allclose(v.numpy(), python(x, lim).numpy(), rtol=1e-5, atol=1e-6)
        cf = verified(compiled, x, eager.tensor(1.0))
    assert compiled.trace_count == 1
    assert cf.graph.capture_names == ("layer.weight", "layer.bias")


def test_while_loop_with_a_cond_in_its_body():
    def f(x):
        def body(i, v):
            return i + 1, tracer.cond(v.sum() > 10, lambda u: u - 10, lambda u: u * 3, v)
        return tracer.while_loop(lambda i, v: i < 5, body, (eager.zeros(()), x))

    def python(x):
        v = x
        for _ in range(5):
            v = v - 10 if v.sum().item() > 10 else v * 3
        return v

    compiled = fn(f)
    for values in ([1.0, 1.0], [4.0, 9.0], [-1.0, 0.5]):
        x = eager.tensor(values)
        np.testing.assert_allclose(compiled(x)[1].numpy(), python(x).numpy(), rtol=1e-6)
        np.testing.assert_allclose(f(x)[1].numpy(), python(x).numpy(), rtol=1e-6)
    assert compiled.trace_count == 1
    verified(compiled, eager.ones(2))


def test_while_body_that_changes_types_is_a_tracing_error():
    @fn
    def shape(x):
        return tracer.while_loop(lambda v: v.sum() < 10, lambda v: (v.sum(),), (x,))

    with pytest.raises(tracer.TracingError) as info:
        shape(eager.ones(2))
    message = str(info.value)
    assert f"{__file__}:" in message
    assert "must return the loop_vars' types (f32[2]) but returns f32[]" in message

    @fn
    def dtype(x):
        return tracer.while_loop(lambda v: v.sum() < 10, lambda v: (v * 2.5,), (x,))

    with pytest.raises(tracer.TracingError, match=r"\(i64\[2\]\) but returns f32\[2\]"):
        dtype(eager.ones(2, dtype=eager.int64))


def test_while_cond_must_return_a_bool_scalar():
    @fn
    def f(x):
        return tracer.while_loop(lambda v: v < 10, lambda v: (v + 1,), (x,))

    with pytest.raises(tracer.TracingError, match="one bool scalar tensor"):
        f(eager.ones(2))


def test_while_loop_vars_must_be_a_tuple():
    with pytest.raises(TypeError, match="tuple"):
        tracer.while_loop(lambda v: v < 3, lambda v: (v + 1,), eager.zeros(()))


# --------------------------------------------------------------------------------------
# gradients

def test_gradients_through_cond_and_while_loop_run_eagerly_not_dropped():
    w = eager.ones(3, requires_grad=True)

    def step(x):
        y = (x * w).sum()
        z = tracer.cond(y > 0, lambda v: v * 2, lambda v: v * 3, x * w)
        loss = y + z.sum()
        loss.backward()
        return loss

    x = eager.tensor([1.0, 2.0, 3.0])
    step(x)  # eager: the branch is plain Python and contributes to the gradient
    np.testing.assert_array_equal(w.grad.numpy(), [3.0, 6.0, 9.0])
    w.grad = None
    compiled = fn(step)
    # The cond has no vjp yet: the signature runs eagerly (one warning) rather than
    # silently dropping the branch's share of the gradient.
    with pytest.warns(RuntimeWarning, match="gradients cannot flow through tracer.cond"):
        compiled(x)
    np.testing.assert_array_equal(w.grad.numpy(), [3.0, 6.0, 9.0])
    assert compiled.trace_count == 0

    def loop(x):
        return tracer.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, v * w),
                                 (eager.zeros(()), x))

    with pytest.warns(RuntimeWarning, match="eager.no_grad()"):
        out = fn(loop)(x)[1]
    out.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [3.0, 6.0, 9.0] + np.array([2.0, 4.0, 6.0]))
    with eager.no_grad():  # no gradient needed: fine
        np.testing.assert_array_equal(fn(loop)(x)[1].numpy(), [1.0, 2.0, 3.0])
