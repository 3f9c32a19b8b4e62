"""Dataclass arguments (a batch or config object, unhashable by default): each is a
container of its fields, as a namedtuple is; they used to raise TypeError. Compiled calls
give eager's values; a change the function makes to the caller's object runs eagerly."""
import dataclasses
import warnings

import numpy as np
import pytest

import eager
import tracer


@dataclasses.dataclass
class Batch:
    x: object
    y: object
    scale: float = 2.0


@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_a_dataclass_argument_traces_by_its_fields(backend):
    def body(b):
        return b.x * b.scale + b.y

    f = tracer.function(body, backend=backend)
    x = eager.tensor(np.arange(4, dtype=np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for b in (Batch(x, x), Batch(x + 1.0, x * 3.0), Batch(x, x, 3.0), Batch(x, x, 3.0)):
            np.testing.assert_array_equal(f(b).numpy(), body(b).numpy())
    assert f.trace_count == 2  # (scale 2.0 and 3.0: a Python field is keyed by value)


def test_a_dataclass_the_function_changes_runs_eagerly():
    def body(b):
        b.y = b.x * 2.0  # the caller's object: eager changes it at every call
        return b.x

    f = tracer.function(body, backend="interpret")
    x = eager.tensor(np.arange(4, dtype=np.float32))
    for k in range(2):
        b = Batch(x + k, x)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            f(b)
        if k == 0:  # (warned once)
            assert any("argument b.y: body rebinds" in str(w.message) for w in caught)
        np.testing.assert_array_equal(b.y.numpy(), (x.numpy() + k) * 2.0)


def test_a_dataclass_returned_is_made_again_at_every_call():
    f = tracer.function(lambda x: Batch(x + 1.0, x * 2.0, 5.0), backend="interpret")
    x = eager.tensor(np.arange(3, dtype=np.float32))
    a, b = f(x), f(x + 1.0)
    assert isinstance(a, Batch) and a is not b and a.scale == 5.0
    np.testing.assert_array_equal(b.x.numpy(), x.numpy() + 2.0)
