"""An elementwise equation read only by a reshape is fused at the reshape's shape
(codegen.reshape_fold): W10's decoder bias add, between the reshape to [35, 20, 1000] and
the loss's reshape to [700, 1000], joins the loss's row kernel instead of writing its
result for it. Where the two shapes would not read the same elements (a broadcast over a
dim they do not share, an op of element positions), or the value is read elsewhere too,
nothing changes; results always match eager and numpy."""
from __future__ import annotations

import numpy as np
import pytest

import eager
import eager.nn.functional as F
import tracer

A, B, K = 6, 5, 7  # odd sizes: [A, B, K] viewed as [A * B, K]


def _values(rng, *shape):
    x = rng.uniform(-30, 30, size=shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[3] = np.nan
    flat[len(flat) // 2] = np.inf
    flat[-2] = -np.inf
    return x


def _run(fn, *arrays, check=False):
    f = tracer.function(fn, check=check)
    args = [eager.from_numpy(a) for a in arrays]
    with eager.no_grad():
        got = f(*args)
        want = fn(*args)
        concrete = f.get_concrete_function(*args)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    return [g.numpy() for g in got], [w.numpy() for w in want], concrete


def _bias_then_rows(a, bias):
    z = (a.reshape(A, B, K) + bias).reshape(A * B, K)
    return eager.amax(z, -1), z.sum(-1)


@pytest.mark.parametrize("contiguous", [True, False])
def test_a_bias_add_between_reshapes_fuses_into_the_row_kernel(contiguous):
    rng = np.random.default_rng(1)
    a = _values(rng, A * B, K * (1 if contiguous else 2))
    if not contiguous:
        a = a[:, ::2]
    bias = _values(rng, K)
    got, want, concrete = _run(_bias_then_rows, a, bias)
    with np.errstate(invalid="ignore"):
        z = a.reshape(A, B, K) + bias
        ref_max = z.reshape(A * B, K).max(-1)
    # the add and the running max are exact: bit for bit
    assert np.array_equal(got[0], want[0], equal_nan=True)
    assert np.array_equal(got[0], ref_max, equal_nan=True)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, equal_nan=True)
    kinds = [k.kind for k in concrete.kernels]
    assert kinds == ["row"], concrete
    assert "add" in concrete.kernels[0].source


def _cross_entropy(a, bias, y):
    logits = (a.reshape(A, B, K) + bias).reshape(A * B, K)
    return F.cross_entropy(logits, y)


def test_the_cross_entropy_of_a_3d_linear_matches_eager_in_check_mode():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((A * B, K)).astype(np.float32)
    bias = rng.standard_normal(K).astype(np.float32)
    y = rng.integers(0, K, A * B)
    got, want, concrete = _run(_cross_entropy, a, bias, y, check=True)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    assert not any(k.kind == "elementwise" for k in concrete.kernels), concrete


def _wide_broadcast(a, c):
    # c spans [B, K]: viewed as [A * B, K], element (i, k) reads c[i % B, k], which no
    # broadcast of c against [A * B, K] does: must not fold
    return eager.amax((a.reshape(A, B, K) + c).reshape(A * B, K), -1)


def _read_twice(a, bias):
    y = a.reshape(A, B, K) * bias
    return eager.amax(y.reshape(A * B, K), -1), y


def _positions(a):
    # tril's mask depends on the element's position in [A, B, B]: must not fold
    return eager.amax(eager.tril(a.reshape(A, B, B)).reshape(A * B, B), -1)


@pytest.mark.parametrize("case", ["wide_broadcast", "read_twice", "positions"])
def test_what_would_read_other_elements_is_not_folded(case):
    rng = np.random.default_rng(3)
    if case == "positions":
        a = _values(rng, A * B, B)
        got, want, _ = _run(_positions, a)
        ref = [np.tril(a.reshape(A, B, B)).reshape(A * B, B).max(-1)]
    elif case == "wide_broadcast":
        a, c = _values(rng, A * B, K), _values(rng, B, K)
        got, want, _ = _run(_wide_broadcast, a, c)
        with np.errstate(invalid="ignore"):
            ref = [(a.reshape(A, B, K) + c).reshape(A * B, K).max(-1)]
    else:
        a, bias = _values(rng, A * B, K), _values(rng, K)
        got, want, _ = _run(_read_twice, a, bias)
        with np.errstate(invalid="ignore"):
            y = a.reshape(A, B, K) * bias
        ref = [y.reshape(A * B, K).max(-1), y]
    for g, w, r in zip(got, want, ref):
        assert np.array_equal(g, w, equal_nan=True)
        assert np.array_equal(g, r, equal_nan=True)


def _rows_then_reshaped_sum(a, w):
    y = a * w
    g = y - eager.amax(y, -1, keepdim=True)                # a row kernel, [A * B, K]
    return g, g.reshape(A, B, K).sum((0, 1)), g.reshape(A, B * K).sum(0)


def test_a_sum_over_reshaped_rows_is_the_row_kernels_own():
    # the sum over [A, B] of the [A * B, K] rows is their sum over [A * B]: the row
    # kernel accumulates it (test_row_col_sums.py); the sum over [A] of [A, B * K] is not
    # a sum of those rows and stays a kernel of its own
    rng = np.random.default_rng(4)
    a, w = _values(rng, A * B, K), _values(rng, K)
    got, want, concrete = _run(_rows_then_reshaped_sum, a, w)
    with np.errstate(invalid="ignore"):
        g = a * w - (a * w).max(-1, keepdims=True)
    assert np.array_equal(got[0], g, equal_nan=True)
    acc = g[0].copy()
    for row in g[1:]:  # (the kernel's order: row after row)
        acc = acc + row
    assert np.array_equal(got[1], acc, equal_nan=True)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-5, equal_nan=True)
    parts = [p.kind for k in concrete.kernels for p in (k.group.parts or [k.group])]
    assert parts == ["row", "col"], concrete
