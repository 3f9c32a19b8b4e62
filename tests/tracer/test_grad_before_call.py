"""A backward() inside a compiled function that eager autograd would continue into a graph
made before the call: through a non-leaf argument (a view or a product of a leaf) or a
non-leaf tensor the function captures. Compiled, the trace's backward stopped at its own
stand-in: the argument's leaf got no .grad (eager fills it), and a captured non-leaf's
graph was run with traced values, leaving a traced tensor in the outside leaf's .grad.
Now such calls run eagerly, with a warning naming the line (an error under fullgraph)."""
import warnings

import numpy as np
import pytest

import eager
import tracer


def _leaf():
    return eager.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True)


def _step(x):
    (x * x).sum().backward()
    return x.detach() * 2


@pytest.mark.parametrize("make", [lambda t: t.transpose(0, 1), lambda t: t * 3],
                         ids=["view", "product"])
def test_a_non_leaf_argument_sends_the_gradient_on_as_eagerly(make):
    t = _leaf()
    _step(make(t))
    expected = t.grad.numpy().copy()
    compiled = tracer.function(_step)
    with pytest.warns(RuntimeWarning, match="non-leaf"):
        t.grad = None
        compiled(make(t))
    np.testing.assert_array_equal(t.grad.numpy(), expected)
    t.grad = None
    compiled(make(t))  # (the warning once; the same result again)
    np.testing.assert_array_equal(t.grad.numpy(), expected)
    # A leaf argument of the same signature still runs compiled and fills its own .grad.
    x = make(t).detach().requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled(x)
    np.testing.assert_array_equal(x.grad.numpy(), 2 * x.detach().numpy())


def test_a_captured_non_leaf_sends_the_gradient_on_as_eagerly():
    w = eager.tensor(np.array([1.0, -2.0, 3.0], np.float32), requires_grad=True)
    w2 = w * 2

    def step(x):
        (x * w2 * w2).sum().backward(retain_graph=True)
        return x.detach()

    x = eager.ones(4, 3)
    step(x)
    expected = w.grad.numpy().copy()
    compiled = tracer.function(step)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            w.grad = None
            compiled(x)
            assert w.grad._data.__class__ is np.ndarray  # (was a traced tensor)
            np.testing.assert_array_equal(w.grad.numpy(), expected)
    said = [str(c.message) for c in caught if "recorded before the call began" in
            str(c.message)]
    assert len(said) == 1 and "test_grad_before_call.py" in said[0], said


def test_fullgraph_refuses_both():
    t = _leaf()
    with pytest.raises(tracer.TracingError, match="non-leaf"):
        tracer.function(_step, fullgraph=True)(t.transpose(0, 1))
    w2 = t * 2

    def step(x):
        (x * w2).sum().backward()
        return x.detach()

    with pytest.raises(tracer.TracingError, match="recorded before the call began"):
        tracer.function(step, fullgraph=True)(eager.ones(2, 3))
    assert t.grad is None
