"""A non-C-contiguous argument: the trace follows its layout, as eager does.

Eagerly, reshaping a transposed array copies it, so a later in-place write to the
argument does not reach the reshaped value; reshaping a C-contiguous one gives a view
that sees the write. A trace made for one layout must not serve the other (the
differential fuzzer's program 642 found a compiled call that mixed them up).
"""
import numpy as np
import pytest

import eager
import tracer


def _f(a, c):
    t = a.reshape(-1)
    a.sub_(c)
    return t


@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_reshape_of_a_transposed_argument_copies_as_eagerly(backend):
    f = tracer.function(_f, backend=backend)
    c = eager.ones(2, 3)
    base = np.arange(6, dtype=np.float32).reshape(3, 2)
    for layout in ["T", "C", "T", "C"]:
        data = base.T.copy() if layout == "C" else base.T   # same shape (2, 3), two layouts
        a_e = eager.tensor(np.array(data, order="K", copy=True)) if layout == "C" else \
            eager.from_numpy(np.array(base, copy=True).T)
        a_c = eager.tensor(np.array(data, order="K", copy=True)) if layout == "C" else \
            eager.from_numpy(np.array(base, copy=True).T)
        assert a_e.is_contiguous() == (layout == "C") == a_c.is_contiguous()
        want = _f(a_e, c)
        got = f(a_c, c)
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=layout)
        np.testing.assert_array_equal(a_c.numpy(), a_e.numpy(), err_msg=layout)
    assert f.trace_count == 2


def test_view_of_a_transposed_argument_raises_as_eagerly():
    f = tracer.function(lambda a: a.view(-1) * 2)
    with pytest.raises(RuntimeError, match="reshape"):
        f(eager.ones(3, 2).T)
    np.testing.assert_array_equal(f(eager.ones(2, 3)).numpy(), np.full(6, 2.0))
