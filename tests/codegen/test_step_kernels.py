"""Numba kernels of numpy-step rows (codegen.step_kernels: argmax, col2im): compiled gives
exactly what eager gives, NaN, ties and signed zeros included, and the program runs them."""
import numpy as np
import pytest

import eager
import eager.nn.functional as F
import tracer

BACKENDS = ["numba", "interpret"]


def _pool_step(x, v, w):
    """Max-pool forward and backward (gradient to each window's first maximum), and a
    padded, strided convolution's input gradient (col2im)."""
    y = F.max_pool2d(x, 2)
    z = F.conv2d(v, w, padding=1, stride=2)
    loss = (z * z).sum() + (y * 3.0).sum()
    loss.backward()
    return y, eager.argmax(x, 1)


def _inputs():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    x[0, 0, 0:2, 0:2] = 1.5                       # a window of ties: the first one wins
    x[0, 1, 2, 2], x[0, 1, 3, 3] = np.nan, np.nan  # NaN windows: the first NaN wins
    x[1, 2, 4:6, 4:6] = [[-0.0, 0.0], [0.0, -0.0]]  # signed zeros compare equal
    x[1, 0, 0, 1] = np.inf
    v = rng.standard_normal((2, 3, 7, 7)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    return x, v, w


def _run(fn, x, v, w):
    ts = [eager.tensor(a, requires_grad=True) for a in (x, v, w)]
    y, idx = fn(*ts)
    return [y.detach().numpy(), idx.numpy()] + [t.grad.numpy() for t in ts]


@pytest.mark.parametrize("backend", BACKENDS)
def test_pooling_and_conv_gradient_match_eager_bit_for_bit(backend):
    x, v, w = _inputs()
    want = _run(_pool_step, x, v, w)
    got = _run(tracer.function(_pool_step, backend=backend), x, v, w)
    for a, b in zip(want, got):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    # the gradient of the tied window went to its first position only
    assert want[2][0, 0, 0, 0] == 3.0 and want[2][0, 0, 0, 1] == 0.0


def test_the_program_runs_argmax_and_col2im_by_numba_kernels():
    f = tracer.function(_pool_step)
    _run(f, *_inputs())
    ts = [eager.tensor(a, requires_grad=True) for a in _inputs()]
    steps = f.get_concrete_function(*ts).program.describe_steps()
    kernel_steps = [line.split("=")[1].split("(")[0].strip() for line in steps.splitlines()
                    if " by " in line]
    assert "argmax" in kernel_steps and "col2im" in kernel_steps, steps


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_argmax_kernel_over_each_axis_matches_numpy(dtype):
    from codegen import build, step_kernels
    from eager.ops import OPS, TensorType
    from tracer.ir import Eqn, Var

    rng = np.random.default_rng(0)
    a = rng.integers(-2, 3, (3, 4, 5)).astype(dtype)   # many ties
    a[1, 2, 3] = a[2, 0, 0] = np.nan
    for axis in range(3):
        for keepdim in (False, True):
            params = {"axis": axis, "keepdim": keepdim}
            want = OPS["argmax"].impl(a, **params)
            x = Var("x", TensorType(a.shape, np.dtype(dtype)))
            out = Var("o", TensorType(want.shape, np.dtype(np.int64)))
            e = Eqn("argmax", (x,), params, out)
            entry = build.load_kernel(step_kernels.argmax(e), "test_argmax")[0]
            got = np.empty(want.shape, np.int64)
            entry(a.reshape(-1), got.reshape(-1))
            np.testing.assert_array_equal(got, want)


# (x shape, kernel, stride, dilation, pad, fill): padding on one side only, strides and
# dilation per dim, a window run cut at both ends, 1-d and 3-d
_IM2COL = [((2, 3, 7, 6), (3, 2), (2, 3), (1, 2), ((1, 2), (0, 3)), 0.0),
           ((2, 2, 9), (4,), (1,), (2,), ((3, 3),), -np.inf),
           ((1, 2, 3, 4, 5), (2, 2, 3), (1, 2, 2), (1, 1, 1), ((0, 1), (1, 1), (2, 0)), 1.5),
           ((3, 1, 5, 5), (5, 5), (1, 1), (1, 1), ((2, 2), (2, 2)), 0.0)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_im2col_kernel_matches_numpy(dtype):
    from codegen import build, step_kernels
    from eager.ops import OPS, TensorType
    from tracer.ir import Eqn, Var

    rng = np.random.default_rng(1)
    for shape, kernel, stride, dilation, pad, fill in _IM2COL:
        a = rng.standard_normal(shape).astype(dtype)
        params = {"kernel": kernel, "stride": stride, "dilation": dilation, "pad": pad,
                  "fill": fill}
        want = OPS["im2col"].impl(a, **params)
        e = Eqn("im2col", (Var("x", TensorType(shape, np.dtype(dtype))),), params,
                Var("o", TensorType(want.shape, np.dtype(dtype))))
        entry = build.load_kernel(step_kernels.im2col(e), "test_im2col")[0]
        got = np.full(want.shape, np.nan, dtype)
        entry(a.reshape(-1), got.reshape(-1))
        np.testing.assert_array_equal(got, want)


def test_the_program_runs_im2col_by_a_numba_kernel():
    f = tracer.function(_pool_step)
    _run(f, *_inputs())
    ts = [eager.tensor(a, requires_grad=True) for a in _inputs()]
    steps = f.get_concrete_function(*ts).program.describe_steps()
    assert any(" by " in line and "im2col" in line for line in steps.splitlines()), steps


# (x shape, kernel, stride, dilation, pad, unrolled): windows all inside take the unrolled
# form; padding, or a last window past the input (ceil mode), the loop
_POOLS = [((2, 3, 8, 7), (2, 2), (2, 2), (1, 1), ((0, 0), (0, 0)), True),
          ((2, 3, 8, 7), (3, 2), (2, 1), (1, 2), ((0, 0), (0, 0)), True),
          ((2, 3, 8, 7), (3, 3), (2, 2), (1, 1), ((1, 1), (1, 1)), False),
          ((2, 3, 9), (2,), (2,), (1,), ((0, 1),), False)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_pool_index_kernel_forms_match_numpy(dtype):
    from codegen import build, step_kernels
    from eager.ops import OPS, TensorType
    from tracer.ir import Eqn, Var

    rng = np.random.default_rng(2)
    for shape, kernel, stride, dilation, pad, unrolled in _POOLS:
        a = rng.integers(-2, 3, shape).astype(dtype)       # ties
        flat = a.reshape(-1)
        flat[rng.choice(flat.size, 5, replace=False)] = np.nan
        flat[rng.choice(flat.size, 9, replace=False)] = -np.inf
        flat[rng.choice(flat.size, 4, replace=False)] = -0.0
        params = {"kernel": kernel, "stride": stride, "dilation": dilation, "pad": pad}
        want = OPS["max_pool_index"].impl(a, **params)
        e = Eqn("max_pool_index", (Var("x", TensorType(shape, np.dtype(dtype))),), params,
                Var("o", TensorType(want.shape, np.dtype(np.int64))))
        source = step_kernels.max_pool_index(e)
        assert ("m = max(m, v1)" in source) == unrolled, source
        entry = build.load_kernel(source, "test_max_pool_index")[0]
        got = np.full(want.shape, -7, np.int64)
        entry(a.reshape(-1), got.reshape(-1))
        np.testing.assert_array_equal(got, want)
