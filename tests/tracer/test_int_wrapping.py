"""Issue 16 item 7, int64 edges: integer results that overflow wrap in compiled kernels as
they do eagerly (numpy's and PyTorch's two's complement), also where LLVM could otherwise
assume no signed overflow (`nsw`) and fold a comparison of the wrapped value."""
import numpy as np
import pytest

import eager
import tracer

LO = np.iinfo(np.int64).min


def _neg_and_powers(x):
    # x ** 2 < 0 and (x ** 3) // x are only true/possible on a wrapped product: with nsw
    # multiplications LLVM folds x*x < 0 to false and (x*x*x) // x to x*x
    return ((-x) > 0, (-x) // x, -x == x, x ** 2 < 0, (x ** 3) // x, x ** 4,
            eager.where(x ** 2 < 0, x, -x))


def _tensor_power(a, b):
    return (a ** b) < 0, a ** b


@pytest.mark.parametrize("backend", ["numba", "interpret"])
@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_neg_and_integer_pow_wrap_as_eager(backend, dtype):
    info = np.iinfo(dtype)
    x = eager.tensor(np.array([info.min, -5, 1, 7, info.min + 1, 2 ** 15 + 3, info.max,
                               int(np.sqrt(info.max)) + 1], dtype))
    f = tracer.function(_neg_and_powers, backend=backend)
    for got, want in zip(f(x), _neg_and_powers(x)):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    a = eager.tensor(np.array([3, 2 ** 20 + 1, -(2 ** 11) - 1, 5, -7], dtype))
    b = eager.tensor(np.array([41, 4, 7, 0, 23], dtype))
    g = tracer.function(_tensor_power, backend=backend)
    for got, want in zip(g(a, b), _tensor_power(a, b)):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def _power(a, b):
    return a ** b


@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_integer_to_a_negative_integer_power_raises_compiled_as_eagerly(backend):
    # numpy and PyTorch refuse it ("Integers to negative integer powers are not allowed");
    # a kernel would compute something (1, 0) without a word
    a = eager.tensor(np.array([3, 2, -2], np.int64))
    f = tracer.function(_power, backend=backend)
    np.testing.assert_array_equal(f(a, eager.tensor([2, 0, 3])).numpy(), [9, 1, -8])
    for call in (_power, f):
        with pytest.raises(RuntimeError, match="negative integer powers"):
            call(a, eager.tensor([2, -1, 3]))
        with pytest.raises(RuntimeError, match="negative integer powers"):
            call(a, -1)
        with pytest.raises(RuntimeError, match="negative integer powers"):
            call(2, -a)
    np.testing.assert_array_equal(f(a, eager.tensor(np.array([1, 2, 1], np.uint8))).numpy(),
                                  [3, 4, -2])
    assert (a ** -1.0).dtype == eager.float32  # a float exponent promotes: no error
