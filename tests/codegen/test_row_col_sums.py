"""A sum (or max) over exactly a row kernel's row axes of a value it computes is the row
kernel's own: accumulated in its last pass, row by row (fuse.col_sums, emit._row_code).
It adds the rows in the order a col kernel did, so the sums have the same bits as before,
without writing the summed value out and reading it back (W9's layer_norm backward: three
loop nests and two 512 KiB intermediates became one row kernel). Nothing in the kernel
reads such a sum, and a row kernel whose rows run in parallel keeps its sums apart."""
from __future__ import annotations

import numpy as np
import pytest

import eager
import eager.nn.functional as F
import tracer
from codegen import emit


def _rows_first(x, w):
    y = x * w
    s = y.sum(-1, keepdim=True)               # row reduction
    z = y - s
    lead = tuple(range(x.ndim - 1))
    return z, z.sum(lead), eager.amax(y, lead)    # col sum and col max of the rows


def _cols_first(x, w):
    y = x * w
    lead = tuple(range(x.ndim - 1))
    c = y.sum(lead)                           # a col kernel first ...
    z = y - y.amax(-1, keepdim=True)          # ... then a row reduction of its value
    return z, c


def _values(rng, shape, contiguous=True):
    full = shape[:-1] + (shape[-1] * (1 if contiguous else 2),)
    x = rng.uniform(-8, 8, size=full).astype(np.float32)
    if not contiguous:
        x = x[..., ::2]
    flat = x.reshape(-1) if x.flags.c_contiguous else None
    if flat is not None:
        flat[5] = np.nan
        flat[-3] = np.inf
    return x


def _rowwise(a, op):
    """`op` over the leading axes, one row after another, in float32: the kernel's order."""
    rows = a.reshape(-1, a.shape[-1])
    acc = rows[0].copy()
    for r in rows[1:]:
        acc = op(acc, r)
    return acc


def _compiled(fn, *arrays):
    f = tracer.function(fn)
    args = [eager.from_numpy(a) for a in arrays]
    with eager.no_grad():
        got = [t.numpy() for t in f(*args)]
        want = [t.numpy() for t in fn(*args)]
        concrete = f.get_concrete_function(*args)
    return got, want, concrete


@pytest.mark.parametrize("shape, contiguous", [((9, 7), True), ((3, 5, 17), True),
                                               ((4, 33), False)])
def test_sums_of_the_rows_are_the_row_kernels_own(shape, contiguous):
    rng = np.random.default_rng(sum(shape))
    x = _values(rng, shape, contiguous)
    w = rng.uniform(-2, 2, size=shape[-1:]).astype(np.float32)
    got, want, concrete = _compiled(_rows_first, x, w)
    assert [k.kind for k in concrete.kernels] == ["row"], concrete
    for g, e in zip(got, want):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5, equal_nan=True)
    # the sums add the compiled rows in row order: bit for bit
    with np.errstate(invalid="ignore"):
        assert np.array_equal(got[1], _rowwise(got[0], np.add), equal_nan=True)
        y = x * w
    # (a NaN anywhere in a column makes its max NaN, as eager's)
    assert np.array_equal(got[2], np.max(y.reshape(-1, shape[-1]), 0), equal_nan=True)


def test_a_col_kernel_becomes_the_row_kernel_its_value_is_reduced_in():
    rng = np.random.default_rng(7)
    x, w = _values(rng, (6, 2, 9)), rng.uniform(-2, 2, size=9).astype(np.float32)
    got, want, concrete = _compiled(_cols_first, x, w)
    assert [k.kind for k in concrete.kernels] == ["row"], concrete
    with np.errstate(invalid="ignore"):
        y = x * w
    assert np.array_equal(got[0], want[0], equal_nan=True)
    assert np.array_equal(got[1], _rowwise(y, np.add), equal_nan=True)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, equal_nan=True)


def test_rows_in_parallel_keep_their_sums_apart(monkeypatch):
    monkeypatch.setattr(emit, "PARALLEL_MIN_SIZE", 64)
    monkeypatch.setattr(emit, "ROW_BLOCK_SIZE", 16)
    rng = np.random.default_rng(8)
    x, w = _values(rng, (37, 11)), rng.uniform(-2, 2, size=11).astype(np.float32)
    got, want, concrete = _compiled(_rows_first, x, w)
    # (the sums stay col kernels: here parts of one kernel, which runs them in turn)
    (kernel,) = concrete.kernels
    assert [p.kind for p in kernel.group.parts] == ["row", "col", "col"], concrete
    for g, e in zip(got, want):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_a_kernel_value_read_after_a_sum_of_it_is_not_summed_early():
    # z.sum(0) is complete only after the last row: a value that reads it is not computed
    # in that kernel (it would read a partial sum)
    # in place of a per-row value (a square input: the sums have the rows' shape)
    rng = np.random.default_rng(9)
    x = rng.standard_normal((6, 6)).astype(np.float32)

    def fn(x):
        z = x - x.amax(-1, keepdim=True)
        c = z.sum(0)
        return z * c, (c * 2).reshape(6, 1) + z.sum(-1, keepdim=True), c

    got, want, _ = _compiled(fn, x)
    for g, e in zip(got, want):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


def test_layer_norm_backward_is_one_row_kernel_and_matches_eager():
    rng = np.random.default_rng(10)
    x = rng.standard_normal((3, 7, 24)).astype(np.float32)
    w = (1 + 0.1 * rng.standard_normal(24)).astype(np.float32)
    b = (0.1 * rng.standard_normal(24)).astype(np.float32)
    dy = rng.standard_normal((3, 7, 24)).astype(np.float32)

    def step(x, w, b, dy):
        x, w, b = (t.detach().requires_grad_() for t in (x, w, b))
        out = F.layer_norm(x, (24,), w, b)
        return tuple(eager.autograd.grad(out, [x, w, b], dy))

    f = tracer.function(step)
    args = [eager.from_numpy(a) for a in (x, w, b, dy)]
    compiled = [t.numpy() for t in f(*args)]
    ref = [t.numpy() for t in step(*args)]
    for g, e in zip(compiled, ref):
        np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-5)
    concrete = f.get_concrete_function(*args)
    assert concrete is not None
    # the forward's rows, then the backward's, whose last pass sums dw and db
    parts = [p.kind for k in concrete.kernels for p in (k.group.parts or [k.group])]
    assert parts == ["row", "row"], concrete
    assert any("+= " in k.source for k in concrete.kernels), concrete
