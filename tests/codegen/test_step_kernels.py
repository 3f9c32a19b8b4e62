"""Numba kernels of numpy-step rows (codegen.step_kernels: argmax, col2im): compiled gives
exactly what eager gives, NaN, ties and signed zeros included, and the program runs them.
The kernels read the batch size at run time: one kernel serves every batch size."""
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


def _another_batch(a, extra=1):
    """`a` with `extra` more samples along the first axis (other values)."""
    return np.concatenate([a, -a[:extra] * 0.5])


def _same_kernel_at_another_batch(make, e, a, want_of):
    """The source `make` gives for equation `e` (one input `a`) with the batch one larger is
    `make(e)`'s (so one compiled kernel serves both), and that kernel computes numpy's
    value there too."""
    from codegen import build
    from eager.ops import TensorType
    from tracer.ir import Eqn, Var

    b = _another_batch(a)
    want = want_of(b)
    e2 = Eqn(e.op, (Var("x", TensorType(b.shape, b.dtype)),), e.params,
             Var("o", TensorType(want.shape, want.dtype)))
    source = make(e2)
    assert source == make(e), (e.op, a.shape, b.shape)
    got = np.full(want.shape, -7 if want.dtype.kind == "i" else np.nan, want.dtype)
    build.load_kernel(source, f"test_{e.op}")[0](b.reshape(-1), got.reshape(-1))
    np.testing.assert_array_equal(got, want)


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
            if axis != 0:  # (over the first axis the batch is the reduced size)
                _same_kernel_at_another_batch(step_kernels.argmax, e, a,
                                              lambda b: OPS["argmax"].impl(b, **params))


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
        _same_kernel_at_another_batch(step_kernels.im2col, e, a,
                                      lambda b: OPS["im2col"].impl(b, **params))


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
        _same_kernel_at_another_batch(step_kernels.max_pool_index, e, a,
                                      lambda b: OPS["max_pool_index"].impl(b, **params))


def _step_kernel_sources(monkeypatch) -> list:
    """(op, source) of each step kernel programs load from now on (codegen.build keys a
    compiled kernel by its source: an equal source is the kernel already built)."""
    from codegen import build
    from codegen.lower import LOWERING

    seen, load = [], build.load_kernel

    def record(source, name_hint):
        row = LOWERING.get(name_hint)
        if row is not None and row.step_kernel is not None:
            seen.append((name_hint, source))
        return load(source, name_hint)
    monkeypatch.setattr(build, "load_kernel", record)
    return seen


def test_the_lstm_kernels_serve_every_length_and_batch():
    # H = 6 as tests/eager/opinfo_rnn.py's cases (T, B = 3, 3): their compiled kernels
    from codegen import build, step_kernels_rnn
    from eager.ops import OPS, TensorType
    from tracer.ir import Eqn, Var

    rng = np.random.default_rng(5)
    h = 6
    w = (rng.standard_normal((4 * h, h)) * 0.3).astype(np.float32)

    def var(a):
        return Var("v", TensorType(a.shape, a.dtype))

    def check(op, arrays, params):
        want = OPS[op].impl(*arrays, **params)
        e = Eqn(op, tuple(var(a) for a in arrays), params, var(want))
        made = getattr(step_kernels_rnn, op)(e)
        if made is None:  # (no OpenBLAS of numpy's in this process: the numpy row runs)
            pytest.skip("no LSTM step kernel here")
        source, sizes = made
        got = np.full(want.shape, np.nan, np.float32)
        entry = build.load_kernel(source, op)[0]
        assert entry(*(a.reshape(-1) for a in arrays), got.reshape(-1), sizes) == 0
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=op)
        return source

    sources = []
    for t, b in ((3, 3), (2, 5)):
        gx = rng.standard_normal((t, b, 4 * h)).astype(np.float32)
        h0, c0 = (rng.standard_normal((2, b, h)) * 0.5).astype(np.float32)
        params = {"reverse": False, "save": True}
        forward = check("lstm_recurrence", (gx, w, h0, c0), params)
        y = OPS["lstm_recurrence"].impl(gx, w, h0, c0, **params)
        g = rng.standard_normal(y.shape).astype(np.float32)
        sources.append((forward, check("lstm_recurrence_backward", (g, y, w, c0),
                                       {"reverse": False})))
    assert sources[0] == sources[1]  # (one compiled kernel each for both sizes)

def test_the_pooling_step_at_another_batch_size_builds_no_new_step_kernel(monkeypatch):
    # _pool_step's step kernels (argmax, im2col, col2im, the max-pool rows) at batch 2 are
    # the other tests' of this file; at batch 3 the program loads the same sources
    seen = _step_kernel_sources(monkeypatch)
    f = tracer.function(_pool_step)
    loaded = []
    for extra in (0, 1):
        x, v, w = _inputs()
        x, v = _another_batch(x, extra), _another_batch(v, extra)
        want, got = _run(_pool_step, x, v, w), _run(f, x, v, w)
        for a, b in zip(want, got):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)
        loaded.append(dict(seen))
        seen.clear()
    assert f.trace_count == 2
    assert {"im2col", "col2im", "max_pool_index", "plane_gather", "plane_scatter_add",
            "argmax"} <= set(loaded[1]), sorted(loaded[1])
    assert loaded[1] == loaded[0]  # (the same sources: the kernels built at batch 2)
