"""Compiled kernels give eager's NaN, ±inf and signed zeros (issue 13, item 13).

Each case is compiled on the numba backend and compared with eager on the same inputs,
contiguous and not: NaN at the same positions, +inf and -inf at the same positions, zeros
with the same sign; finite values within a few ULP (rounding may differ in the last bits).
The cases are the fast-math rewrites that changed the class of a result, by flag:

* 'reassoc': (x + inf) - inf folded to x; x * (x * 0) and (x * c) * c regrouped, so that a
  product overflows (x * x, c * c) where eager's never does; a sum of x / 0 distributed;
* 'arcp': x / c as x * (1 / c), where 1 / c overflows for a denormal c; x / s by a row's
  sum s as x * (1 / s), the same for a tiny s;
* 'nsz': 0 - x as -x, so 1 / (0 - x) at x = 0 gives -inf where eager gives +inf.

Rows are long enough (256) for the vectorized loop bodies to run.
"""
from __future__ import annotations

import numpy as np
import pytest

import eager
import eager.nn.functional as F
import tracer

pytestmark = pytest.mark.filterwarnings(
    "ignore:(invalid value|divide by zero|overflow|underflow) encountered:RuntimeWarning")

INF = float("inf")
ROWS, COLS = 4, 256
# A finite value whose square overflows, and its reciprocal, per dtype.
BIG = {np.float32: 1e20, np.float64: 1e200}
# A denormal divisor: its reciprocal overflows.
DENORMAL = {np.float32: 1e-42, np.float64: 1e-310}


def _finite(rng, dtype):
    x = rng.standard_normal((ROWS, COLS)) * 10
    x[:, ::7] = 0.0
    x[:, 3::7] = -0.0
    return x.astype(dtype)


def _nonzero(rng, dtype):
    x = rng.uniform(0.5, 4.0, (ROWS, COLS)) * rng.choice([-1.0, 1.0], (ROWS, COLS))
    return x.astype(dtype)


def _big(rng, dtype):
    x = _finite(rng, dtype)
    x[:, 1::5] = BIG[dtype] * np.sign(x[:, 1::5] + 0.5)
    return x


def _small(rng, dtype):
    """Values about 1 / BIG, which a product with BIG twice brings back to about BIG."""
    return (_nonzero(rng, dtype).astype(np.float64) / BIG[dtype]).astype(dtype)


def _issue_row(rng, dtype):
    """The issue's input: 8 values of mixed signs (x / 0 has +inf, -inf and NaN)."""
    return np.array([1.0, -2.0, BIG[dtype], 0.0, -0.0, 3.0, -5.0, 7.0], dtype)


def _special(rng, dtype):
    """Row 0: +inf; row 1: +inf and -inf; row 2: NaN; row 3: -inf; zeros of both signs."""
    x = _finite(rng, dtype)
    x[0, 5] = INF
    x[1, 9], x[1, 200] = INF, -INF
    x[2, 17] = np.nan
    x[3, 100] = -INF
    return x


def _tiny_rows(rng, dtype):
    """One denormal per row, the rest zeros: the row's sum is a denormal."""
    x = np.zeros((ROWS, COLS), dtype)
    x[np.arange(ROWS), [0, 31, 130, 255]] = DENORMAL[dtype] * np.array([1, 2, -3, 1])
    return x


# name -> (function of the input and dtype, inputs, whether zeros' signs must match)
CASES = {
    # 'reassoc'
    "add_inf_sub_inf": (lambda x, dt: (x + INF) - INF, _finite, True),
    "mul_x_times_x_times_zero": (lambda x, dt: x * (x * 0.0), _big, True),
    "mul_by_big_twice": (lambda x, dt: (x * BIG[dt]) * BIG[dt], _small, True),
    "div_zero_sum": (lambda x, dt: (x / 0.0).sum(), _nonzero, True),
    "div_zero_sum_short": (lambda x, dt: (x / 0.0).sum(), _issue_row, True),
    "div_zero_sum_rows": (lambda x, dt: (x / 0.0).sum(-1), _nonzero, True),
    "div_zero_mean_rows": (lambda x, dt: (x / 0.0).mean(-1), _nonzero, True),
    "div_zero_sum_cols": (lambda x, dt: (x / 0.0).sum(0), _nonzero, True),
    "div_zero_amax_rows": (lambda x, dt: (x / 0.0).amax(-1), _nonzero, False),
    # 'arcp'
    "div_by_denormal_constant": (lambda x, dt: x / DENORMAL[dt], _tiny_rows, True),
    "div_by_row_sum": (lambda x, dt: x / x.sum(-1, keepdim=True), _tiny_rows, True),
    # 'nsz'
    "recip_of_zero_minus_x": (lambda x, dt: 1.0 / (0.0 - x), _finite, True),
    "recip_of_neg_difference": (lambda x, dt: 1.0 / -(x - 1.0), _finite, True),
    "recip_of_times_minus_zero": (lambda x, dt: 1.0 / (x * -0.0), _nonzero, True),
    # 'contract': x * x - y * y as fma(x, x, -(y * y)), which is -inf where y * y overflows
    # and eager's inf - inf is NaN
    "difference_of_squares": (lambda x, dt: x * x - (x + 1.0) * (x + 1.0), _big, True),
    # no fast-math flag may change these either
    "div_by_zero": (lambda x, dt: x / 0.0, _finite, True),
    "div_by_minus_zero": (lambda x, dt: x / -0.0, _finite, True),
    "sub_self": (lambda x, dt: x - x, _special, True),
    "mul_zero": (lambda x, dt: x * 0.0, _special, True),
    "sum_rows": (lambda x, dt: x.sum(-1), _special, True),
    "sum_all": (lambda x, dt: x.sum(), _special, True),
    "mean_cols": (lambda x, dt: x.mean(0), _special, True),
    "amax_rows": (lambda x, dt: x.amax(-1), _special, False),
    "softmax": (lambda x, dt: F.softmax(x, -1), _special, True),
    "log_softmax": (lambda x, dt: F.log_softmax(x, -1), _special, True),
    "layer_norm": (lambda x, dt: F.layer_norm(x, (COLS,)), _special, False),
}


def assert_same_classes(got: np.ndarray, want: np.ndarray, signed_zeros: bool, what: str):
    """NaN, +inf, -inf at the same positions, finite values close, zeros' signs equal."""
    assert got.shape == want.shape and got.dtype == want.dtype, what
    got, want = np.atleast_1d(got), np.atleast_1d(want)  # (argwhere of a 0-d array: empty)
    for name, test in (("NaN", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)):
        g, w = test(got), test(want)
        bad = np.argwhere(g != w)
        assert not bad.size, (f"{what}: {name} differs at {len(bad)} positions, first "
                              f"{tuple(bad[0])}: compiled {got[tuple(bad[0])]!r}, "
                              f"eager {want[tuple(bad[0])]!r}")
    finite = np.isfinite(want)
    # (a few ULP of the largest value: log_softmax and layer_norm cancel)
    ulps = 8 * np.finfo(want.dtype).eps
    scale = max(float(np.abs(want[finite]).max(initial=0.0)), 1.0)
    np.testing.assert_allclose(got[finite], want[finite], rtol=ulps, atol=ulps * scale,
                               err_msg=what)
    if signed_zeros:
        zeros = (want == 0) & (got == 0)
        bad = np.argwhere(zeros & (np.signbit(got) != np.signbit(want)))
        assert not bad.size, (f"{what}: sign of zero differs at {tuple(bad[0])}: compiled "
                              f"{got[tuple(bad[0])]!r}, eager {want[tuple(bad[0])]!r}")


def _layouts(x: np.ndarray) -> dict:
    wide = np.zeros(x.shape[:-1] + (2 * x.shape[-1],), x.dtype)
    wide[..., ::2] = x
    out = {"contiguous": x, "strided": wide[..., ::2]}
    if x.ndim == 2:
        out["fortran"] = np.asfortranarray(x)
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("case", list(CASES))
def test_compiled_matches_eager_nan_inf_and_signed_zeros(case, dtype):
    fn, inputs, signed_zeros = CASES[case]
    rng = np.random.default_rng(13)
    x = inputs(rng, dtype)
    compiled = tracer.function(lambda t: fn(t, dtype), backend="numba")
    for layout, a in _layouts(x).items():
        assert a.flags.c_contiguous == (layout == "contiguous")
        with eager.no_grad():
            want = fn(eager.from_numpy(a), dtype).numpy()
            got = compiled(eager.from_numpy(a)).numpy()
        assert_same_classes(got, want, signed_zeros, f"{case} {layout}")
    assert compiled.trace_count == 1
