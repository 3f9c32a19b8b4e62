"""Max pooling as max_pool_index / plane_gather / plane_scatter_add (eager/ops_pool.py) and
their Numba step kernels: compiled equals eager bit for bit (values, indices, gradients,
through a ReLU before and after), on both backends, for odd sizes, stride != kernel,
padding, dilation, ceil_mode, 1-d and 3-d, non-contiguous inputs, ties, NaN and -inf
windows (windows all inside the input take the kernel's unrolled form, the others its
loop); the compiled step copies no windows; bad indices raise on every path."""
import numpy as np
import pytest

import eager
import eager.nn.functional as F
import tracer
from eager import ops_pool

BACKENDS = ["numba", "interpret"]

# (input shape, max_pool kwargs): one geometry each
GEOMETRIES = [
    ((2, 3, 9, 7), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
    ((2, 3, 9, 7), {"kernel_size": (2, 3), "stride": (1, 2), "padding": (1, 0),
                    "dilation": (2, 1)}),
    ((2, 3, 9, 7), {"kernel_size": 2}),
    ((2, 3, 9, 7), {"kernel_size": (3, 2), "stride": (2, 1), "dilation": (1, 2)}),
    ((2, 3, 11), {"kernel_size": 4, "stride": 3}),
    ((2, 3, 11), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
    ((1, 2, 5, 4, 5), {"kernel_size": 2, "stride": (1, 2, 2), "padding": (1, 0, 1)}),
]
POOLS = {3: F.max_pool1d, 4: F.max_pool2d, 5: F.max_pool3d}


def _input(shape, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, shape).astype(np.float32)   # small ints: many ties
    flat = x.reshape(-1)
    flat[rng.choice(flat.size, 4, replace=False)] = np.nan
    flat[rng.choice(flat.size, 3, replace=False)] = -np.inf
    flat[rng.choice(flat.size, 2, replace=False)] = np.inf
    return x


def _step(pool, kwargs):
    def step(x, w):
        y, idx = pool(F.relu(x * 1.5), return_indices=True, **kwargs)
        z = F.relu(y - 0.5)
        (z * w).sum().backward()
        return y, idx
    return step


def _run(fn, x, w, transposed=False):
    t = eager.tensor(x, requires_grad=True)
    if transposed:  # a non-contiguous leaf of the same values
        t = eager.from_numpy(np.swapaxes(np.ascontiguousarray(np.swapaxes(x, -1, -2)), -1, -2))
        assert not t.numpy().flags.c_contiguous
        t.requires_grad_()
    y, idx = fn(t, eager.tensor(w))
    return [y.detach().numpy(), idx.numpy(), t.grad.numpy()]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", range(len(GEOMETRIES)))
def test_max_pool_compiled_equals_eager_bit_for_bit(backend, case):
    shape, kwargs = GEOMETRIES[case]
    x = _input(shape, case)
    pool = POOLS[len(shape)]
    step = _step(pool, kwargs)
    out_shape = pool(eager.tensor(x), **kwargs).shape
    w = np.linspace(-1, 1, int(np.prod(out_shape)), dtype=np.float32).reshape(out_shape)
    want = _run(step, x, w)
    f = tracer.function(step, backend=backend)
    for transposed in (False, True):
        got = _run(f, x, w, transposed)
        for a, b in zip(want, got):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a, b)


def test_indices_follow_pytorchs_loop():
    """Against the independent loop of opinfo_conv: ties the first, NaN the last, a window
    of -inf (or of -inf and padding) its first position inside the input."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "eager"))
    import opinfo  # noqa: F401 - first: opinfo_conv imports it
    from opinfo_conv import _max_pool_index_ref

    x = np.full((1, 1, 4, 5), -np.inf, np.float32)
    x[0, 0, 2:, 2:] = [[1, 1, np.nan], [2, np.nan, 0]]
    geometry = ((3, 2), (2, 2), (1, 1), ((1, 1), (1, 1)))
    want = _max_pool_index_ref(x, *geometry)
    f = tracer.function(lambda t: ops_pool.max_pool_index(t, *geometry))
    for got in (ops_pool.max_pool_index(eager.tensor(x), *geometry), f(eager.tensor(x))):
        np.testing.assert_array_equal(got.numpy(), want)
    assert want[0, 0, 0, 0] == 0     # all -inf or padding: the first position inside


@pytest.mark.one_backend
def test_the_compiled_step_copies_no_windows():
    step = _step(F.max_pool2d, {"kernel_size": 2})
    f = tracer.function(step, backend="numba")
    x = _input((2, 3, 9, 7))
    w = np.ones((2, 3, 4, 3), np.float32)
    _run(f, x, w)
    c = f.get_concrete_function(eager.tensor(x, requires_grad=True), eager.tensor(w))
    steps = c.program.describe_steps()
    by_kernel = {line.split("=")[1].split("(")[0].strip() for line in steps.splitlines()
                 if " by " in line}
    assert {"max_pool_index", "plane_gather", "plane_scatter_add"} <= by_kernel, steps
    ops = [e.op for e in c.graph.eqns]
    assert not {"im2col", "argmax", "amax", "reshape", "permute"} & set(ops), ops


@pytest.mark.parametrize("backend", BACKENDS)
def test_plane_rows_raise_on_an_index_outside_the_plane(backend):
    x = eager.tensor(np.ones((1, 2, 3, 3), np.float32))
    bad = eager.tensor(np.array([[[0, 9]], [[1, 2]]]).reshape(1, 2, 2))
    for call in (lambda a, i: ops_pool.plane_gather(a, i),
                 lambda a, i: ops_pool.plane_scatter_add(a[:, :, 0, :2], i, (3, 3))):
        with pytest.raises(IndexError):
            call(x, bad)
        with pytest.raises(IndexError):
            tracer.function(call, backend=backend)(x, bad)
        negative = eager.tensor(np.array([[[0, -1]], [[1, 2]]]).reshape(1, 2, 2))
        with pytest.raises(IndexError):
            tracer.function(call, backend=backend)(x, negative)


def test_a_window_without_an_input_position_is_refused():
    # (PyTorch gives -inf with an index outside the plane)
    with pytest.raises(ValueError, match="holds no input position"):
        F.max_pool1d(eager.ones(1, 1, 1), 2, stride=1, padding=1, dilation=2)
