"""Error messages: each names the op, the shapes/dtypes involved and the user's line, which
here is a line of this file ("(at test_errors.py:LINE)").

Every case is a one-line lambda, so the line the message must point at is the lambda's own.
"""
import numpy as np
import pytest

import eager
import eager.nn.functional as F

HERE = "test_errors.py"


def check_error(call, exc, *fragments):
    """`call()` raises `exc`; its message holds every fragment and this file's line."""
    with pytest.raises(exc) as info:
        call()
    message = str(info.value)
    where = f"(at {HERE}:{call.__code__.co_firstlineno})"
    assert where in message, f"{where} missing from: {message}"
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} missing from: {message}"
    return message


def f32(*shape):
    return eager.zeros(*shape)


def test_add_shape_mismatch():
    a, b = f32(3, 4), f32(5)
    check_error(lambda: eager.add(a, b), ValueError, "add", "(3, 4)", "(5,)", "broadcast")
    check_error(lambda: a + b, ValueError, "add", "(3, 4)", "(5,)")
    check_error(lambda: a * f32(2, 4), ValueError, "mul", "(3, 4)", "(2, 4)")
    check_error(lambda: eager.where(a > 0, a, b), ValueError, "where", "(5,)")


def test_matmul_shape_mismatch():
    a, b = f32(2, 3), f32(4, 5)
    check_error(lambda: eager.matmul(a, b), ValueError, "matmul", "(2, 3) @ (4, 5)", "f32[2,3]",
                "f32[4,5]", "3 != 4")
    check_error(lambda: a @ b, ValueError, "matmul", "(2, 3) @ (4, 5)")
    check_error(lambda: f32(3) @ f32(4), ValueError, "matmul", "(3,)", "(4,)")
    check_error(lambda: eager.matmul(f32(), a), ValueError, "matmul", "at least 1-D", "f32[]")
    check_error(lambda: f32(2, 2, 3) @ f32(3, 3, 4), ValueError, "matmul", "(2,)", "(3,)")


def test_bad_dims():
    x = f32(3, 4)
    check_error(lambda: x.sum(dim=5), IndexError, "sum", "dim 5", "2-d", "[-2, 1]")
    check_error(lambda: eager.mean(x, -3), IndexError, "mean", "dim -3")
    check_error(lambda: x.amax(dim=(0, 0)), ValueError, "amax", "twice")
    check_error(lambda: eager.argmax(x, 2), IndexError, "argmax", "dim 2")
    check_error(lambda: x.sum(dim=1.5), TypeError, "sum", "dim must be an int", "float")
    check_error(lambda: F.softmax(x, dim=2), IndexError, "dim 2")
    check_error(lambda: x.transpose(0, 2), IndexError, "transpose", "dim 2")
    check_error(lambda: x.unsqueeze(4), IndexError, "unsqueeze", "dim 4")
    check_error(lambda: eager.cat([x, x], dim=2), IndexError, "cat", "dim 2")


def test_shape_op_errors():
    x = f32(2, 3)
    check_error(lambda: x.reshape(4), ValueError, "reshape", "(2, 3)", "(4,)")
    check_error(lambda: x.view(-1, -1), ValueError, "reshape", "only one dimension can be -1")
    check_error(lambda: x.reshape(-1, 4), ValueError, "reshape", "(2, 3)", "(-1, 4)")
    check_error(lambda: x.permute(0, 0), ValueError, "permute", "not a permutation")
    check_error(lambda: x.permute(1, 0, 2), ValueError, "permute", "3 dims", "2-d")
    check_error(lambda: x.expand(4, 3), ValueError, "expand", "(2, 3)", "(4, 3)")
    check_error(lambda: x.expand(3), ValueError, "expand", "fewer dims")
    check_error(lambda: eager.cat([x, f32(2, 4)]), ValueError, "cat", "f32[2,3]", "f32[2,4]")
    check_error(lambda: eager.cat([x, f32(3)]), ValueError, "cat", "same number of dims")
    check_error(lambda: eager.cat([]), ValueError, "cat", "non-empty")
    check_error(lambda: eager.stack([x, f32(3, 2)]), ValueError, "stack", "same shape",
                "f32[2,3]", "f32[3,2]")
    check_error(lambda: f32(2, 3, 4).t(), ValueError, "t", "<= 2 dims")


def test_non_tensor_arguments():
    x = f32(3)
    check_error(lambda: eager.add(x, "a"), TypeError, "add", "str", "f32[3]", "eager.tensor")
    check_error(lambda: x * [1, 2, 3], TypeError, "mul", "list")
    check_error(lambda: eager.exp("a"), TypeError, "exp", "str")
    check_error(lambda: eager.maximum(None, x), TypeError, "maximum", "NoneType")
    check_error(lambda: eager.matmul(x, {}), TypeError, "matmul", "dict")
    check_error(lambda: eager.cat([x, "b"]), TypeError, "cat", "str")
    check_error(lambda: eager.tensor({"a": 1}), TypeError, "tensor", "dict")
    check_error(lambda: eager.from_numpy([1.0]), TypeError, "from_numpy", "list")


def test_dtype_errors():
    logits = f32(4, 3)
    check_error(lambda: F.cross_entropy(logits, eager.zeros(4)), TypeError, "cross_entropy",
                "f32[4,3]", "f32[4]", "integers")
    check_error(lambda: F.cross_entropy(logits.long(), eager.zeros(4).long()), TypeError,
                "cross_entropy", "i64")
    check_error(lambda: F.mse_loss(eager.zeros(3), eager.tensor([1, 2, 3])), TypeError,
                "mse_loss", "int64", "f32[3]", "i64[3]", ".float()")
    check_error(lambda: F.nll_loss(logits, eager.zeros(4)), TypeError, "nll_loss", "f32[4]")
    check_error(lambda: eager.where(f32(3), f32(3), f32(3)), TypeError, "where", "bool",
                "float32")
    check_error(lambda: -eager.tensor([True]), TypeError, "neg", "bool")
    check_error(lambda: eager.tensor([True]) - eager.tensor([False]), TypeError, "sub", "bool")
    check_error(lambda: eager.matmul(eager.tensor([[True]]), eager.tensor([[True]])),
                TypeError, "matmul", "bool")
    check_error(lambda: eager.mean(eager.tensor([1, 2])), TypeError, "mean", "int64")
    check_error(lambda: F.softmax(eager.tensor([1, 2]), 0), TypeError, "softmax", "int64")
    check_error(lambda: ~f32(2), TypeError, "bitwise_not", "integer and bool", "float32")
    check_error(lambda: f32(2) & f32(2), TypeError, "bitwise_and", "integer and bool")


def test_int_inputs_that_promote_are_not_errors():
    # log/exp/sqrt of integers promote to float32, as in PyTorch
    assert eager.log(eager.tensor([1, 2])).dtype == eager.float32
    assert eager.exp(eager.tensor([1], dtype=eager.int32)).dtype == eager.float32
    assert (eager.tensor([1, 2]) / 2).dtype == eager.float32
    assert F.cross_entropy(f32(2, 3), eager.tensor([0, 2], dtype=eager.int32)).dtype == \
        eager.float32


def test_loss_and_layer_shape_errors():
    check_error(lambda: F.cross_entropy(f32(4, 3), eager.tensor([0, 1])), ValueError,
                "cross_entropy", "(N, C)", "f32[4,3]", "i64[2]")
    check_error(lambda: F.mse_loss(f32(3), f32(3, 1)), ValueError, "mse_loss", "(3,)", "(3, 1)")
    check_error(lambda: F.linear(f32(2, 5), f32(4, 3)), ValueError, "linear", "f32[2,5]",
                "f32[4,3]", "5")
    check_error(lambda: eager.nn.Linear(3, 2)(f32(4, 5)), ValueError, "linear", "f32[4,5]")
    check_error(lambda: F.layer_norm(f32(2, 5), (4,)), ValueError, "layer_norm", "(4,)",
                "(2, 5)")
    check_error(lambda: F.gelu(f32(2), approximate="fast"), ValueError, "gelu", "'fast'")
    check_error(lambda: F.dropout(f32(2), p=1.5), ValueError, "dropout", "1.5")
    check_error(lambda: F.mse_loss(f32(2), f32(2), reduction="avg"), ValueError, "'avg'")
    check_error(lambda: eager.nn.Embedding(3, 2)(f32(2)), TypeError, "embedding", "float32")


def test_index_errors_name_the_line():
    x = f32(3, 4)
    check_error(lambda: x[3], IndexError, "index 3", "size 3", "f32[3,4]")
    check_error(lambda: x[[0, 7]], IndexError, "index 7", "dimension 0", "f32[3,4]")
    check_error(lambda: x[:, [4]], IndexError, "index 4", "dimension 1")
    check_error(lambda: x[0, 0, 0], IndexError, "too many indices", "f32[3,4]")
    check_error(lambda: x[eager.tensor([0.5])], IndexError, "integer or bool", "float32")
    check_error(lambda: x["a"], IndexError, "unsupported index", "str")


def test_backward_on_a_non_scalar_without_gradient():
    y = eager.tensor(np.zeros((2, 3)), requires_grad=True) * 2
    check_error(lambda: y.backward(), RuntimeError, "scalar outputs", "f64[2,3]", "gradient=")
    check_error(lambda: eager.autograd.grad(y, []), RuntimeError, "scalar outputs")
    check_error(lambda: y.backward(gradient=eager.ones(3)), ValueError, "backward", "(3,)",
                "(2, 3)")


def test_backward_through_a_freed_graph():
    x = eager.tensor(np.ones(2), requires_grad=True)
    y = (x * x).sum()
    y.backward()
    message = check_error(lambda: y.backward(), RuntimeError, "retain_graph=True", "Backward",
                          "f64[2]")
    assert "second time" in message


def test_backward_after_an_in_place_change():
    x = eager.tensor(np.ones(2), requires_grad=True)
    y = x.exp()
    y.add_(1)
    check_error(lambda: y.sum().backward(), RuntimeError, "ExpBackward", "f64[2]",
                "inplace", "version 1", "expected version 0")


def test_backward_of_something_without_grad():
    check_error(lambda: f32(2).sum().backward(), RuntimeError, "does not require grad", "f32[]")


def test_in_place_errors():
    w = eager.tensor(np.ones(2), requires_grad=True)
    check_error(lambda: w.add_(1), RuntimeError, "add_", "leaf", "no_grad")
    check_error(lambda: f32(3).add_(f32(2, 3)), ValueError, "add_", "(2, 3)", "(3,)")
    check_error(lambda: eager.tensor([1]).mul_(0.5), TypeError, "mul_", "float32", "int64")
    check_error(lambda: f32(2).expand(3, 2).add_(1), RuntimeError, "add_", "read-only")


def test_creation_and_conversion_errors():
    check_error(lambda: eager.tensor([1, 2]).requires_grad_(), RuntimeError, "floating")
    check_error(lambda: eager.randint(0, 5), TypeError, "randint", "size")
    check_error(lambda: f32(2).item(), ValueError, "2 elements")
    check_error(lambda: eager.tensor(np.zeros(2, np.complex64)), TypeError, "complex64")


def test_messages_point_at_the_callers_line_through_composites():
    # the error is raised deep inside layer_norm/softmax; the line is still the user's
    model = eager.nn.Sequential(eager.nn.Linear(3, 4), eager.nn.ReLU(), eager.nn.Linear(5, 2))
    check_error(lambda: model(f32(2, 3)), ValueError, "linear", "f32[2,4]", "in_features 5")
