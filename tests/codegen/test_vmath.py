"""Tests for codegen.vmath: accuracy, special values, vectorization, dtype hygiene."""

import functools
import re

import numpy as np
import pytest
import scipy.special as sp
from numba import njit

from codegen import vmath as V

# issue 16 item 5: the hyperbolic functions, log2/log10/exp2 (unary) and hypot/logaddexp
HYPER_OPS = ["sinh", "cosh", "asinh", "acosh", "atanh", "log2", "log10", "exp2"]
BINARY_OPS = ["hypot", "logaddexp"]
FLOAT32_OPS = ["exp", "expm1", "log", "log1p", "tanh", "sigmoid", "erf"] + HYPER_OPS
FLOAT64_OPS = ["exp", "expm1", "log", "log1p", "tanh", "sigmoid"] + HYPER_OPS  # erf_f64 = libm
# codegen/vmath/trig.py (atan2, binary, has tests of its own below)
TRIG32_OPS = ["sin", "cos", "tan", "asin", "acos", "atan"]
TRIG64_OPS = TRIG32_OPS


# ---------------------------------------------------------------------------
# helpers (kernels are compiled once per (op, dtype, flags) for the session)
# ---------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def kernel(op, dtype, fast=True):
    fn = V.VMATH[(op, dtype)]
    flags = V.FASTMATH_FLAGS if fast else False

    @njit(fastmath=flags)
    def k(x, out):
        for i in range(x.shape[0]):
            out[i] = fn(x[i])

    return k


def run(op, x, fast=True):
    k = kernel(op, x.dtype.name, fast)
    out = np.empty_like(x)
    k(x, out)
    return out


def llvm_ir(op, dtype):
    k = kernel(op, dtype, True)
    if not k.signatures:
        run(op, np.zeros(4, dtype))
    return k.inspect_llvm(k.signatures[0])


def _ordered(a):
    if a.dtype == np.float32:
        i = a.view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    i = a.view(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFFFFFFFFFF), i)


def ulp_dist(got, ref):
    """Distance in units of the last place (both nan -> 0, one nan -> inf)."""
    assert got.dtype == ref.dtype
    ng, nr = np.isnan(got), np.isnan(ref)
    d = np.abs(_ordered(got) - _ordered(ref)).astype(np.float64)
    d[ng & nr] = 0.0
    d[ng ^ nr] = np.inf
    return d


def _sigmoid_ld(x):
    return np.longdouble(1) / (np.longdouble(1) + np.exp(-x))


_NUMPY_REF = {"sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh,
              "atanh": np.arctanh, "log2": np.log2, "log10": np.log10, "exp2": np.exp2,
              "hypot": np.hypot, "logaddexp": np.logaddexp}
REF = {  # reference evaluated in a wider type, then rounded to the dtype
    "exp": np.exp, "expm1": np.expm1, "log": np.log, "log1p": np.log1p,
    "tanh": np.tanh, "sigmoid": sp.expit, "erf": sp.erf, **_NUMPY_REF,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
    "atan": np.arctan,
}
REF_LD = {"exp": np.exp, "expm1": np.expm1, "log": np.log, "log1p": np.log1p,
          "tanh": np.tanh, "sigmoid": _sigmoid_ld, **_NUMPY_REF, "sin": np.sin, "cos": np.cos,
          "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan}


def reference(op, *x):
    with np.errstate(all="ignore"):
        if x[0].dtype == np.float32:
            return REF[op](*(v.astype(np.float64) for v in x)).astype(np.float32)
        return REF_LD[op](*(v.astype(np.longdouble) for v in x)).astype(np.float64)


SPECIAL32 = np.array(
    [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.1754944e-38,
     -1.1754944e-38, 1e-40, -1e-40, 88.72283, 88.72284, 89.0, -87.33654,
     -87.34, -103.97, -103.98, -104.0, -105.0, 1.0, -1.0, 0.5, 2.0, 3.4028235e38,
     -3.4028235e38, 9.0, 9.01, -9.02, 0.625, -0.625, 0.62499994, 3.92, 4.0, -4.0,
     1.0000001, 0.99999994, -0.9999999, -0.99999994, 16.6, -17.4, 1e-8, -1e-8,
     2.0 ** -25, -(2.0 ** -25), 2.0 ** -24, 0.3466, 0.3467, -0.3466, 0.7071,
     1.4142], np.float32)

SPECIAL64 = np.concatenate([SPECIAL32.astype(np.float64), np.array(
    [5e-324, -5e-324, 2.2250738585072014e-308, 709.782712893384, 709.79,
     -745.1332, -745.14, -708.4, -708.39, 1.7976931348623157e308,
     -1.7976931348623157e308, 2.0 ** -54, -(2.0 ** -54), 22.0, -22.5, 37.5,
     -37.5])])

DOMAIN = {"exp": (-110, 100), "expm1": (-20, 90), "log": (0, 10),
          "log1p": (-1, 10), "tanh": (-10, 10), "sigmoid": (-110, 110),
          "erf": (-5, 5), "sin": (-10, 10), "cos": (-10, 10), "tan": (-10, 10),
          "asin": (-1, 1), "acos": (-1, 1), "atan": (-10, 10),
          "sinh": (-95, 95), "cosh": (-95, 95), "asinh": (-10, 10),
          "acosh": (0.5, 10), "atanh": (-1.1, 1.1), "log2": (0, 10), "log10": (0, 10),
          "exp2": (-155, 130)}
DOMAIN64 = {"exp": (-750, 715), "expm1": (-45, 715), "log": (0, 10),
            "log1p": (-1, 10), "tanh": (-25, 25), "sigmoid": (-750, 750),
            "sin": (-10, 10), "cos": (-10, 10), "tan": (-10, 10), "asin": (-1, 1),
            "acos": (-1, 1), "atan": (-10, 10),
            "sinh": (-715, 715), "cosh": (-715, 715), "asinh": (-10, 10),
            "acosh": (0.5, 10), "atanh": (-1.1, 1.1), "log2": (0, 10), "log10": (0, 10),
            "exp2": (-1080, 1030)}
# the ops added later get a smaller sample (the exhaustive check is
# benchmarks/vmath_accuracy.py): the trigonometric ones a third (_SHARE), the hyperbolic
# ones a quarter (_SAMPLE); `near_one`: acosh and atanh's interesting end points
_SHARE = {op: 3 for op in TRIG32_OPS}
_SAMPLE = {op: 4 for op in HYPER_OPS}


def _near_one(rng, n):
    return 1.0 + rng.uniform(-1, 1, n) * 10.0 ** rng.uniform(-8, 0, n)


@functools.lru_cache(maxsize=None)
def inputs32(op):
    rng = np.random.default_rng(1)
    k = _SAMPLE.get(op, 1)
    sweep = np.arange(0, 2 ** 32, 4099 * k, dtype=np.uint64).astype(np.uint32)
    dom = rng.uniform(*DOMAIN[op], 300_000 // k).astype(np.float32)
    small = (rng.uniform(-1, 1, 100_000 // k)
             * 10.0 ** rng.uniform(-12, 0, 100_000 // k)).astype(np.float32)
    extra = [_near_one(rng, 50_000).astype(np.float32)] if op in _SAMPLE else []
    x = np.concatenate([sweep.view(np.float32), dom, small, *extra])
    return np.concatenate([x[::_SHARE.get(op, 1)], SPECIAL32])


@functools.lru_cache(maxsize=None)
def inputs64(op):
    rng = np.random.default_rng(2)
    k = _SAMPLE.get(op, 1)
    bits = rng.integers(0, 2 ** 64, 300_000 // k, dtype=np.uint64).view(np.float64)
    dom = rng.uniform(*DOMAIN64[op], 300_000 // k)
    small = rng.uniform(-1, 1, 100_000 // k) * 10.0 ** rng.uniform(-20, 0, 100_000 // k)
    extra = [_near_one(rng, 50_000)] if op in _SAMPLE else []
    x = np.concatenate([bits, dom, small, *extra])
    return np.concatenate([x[::_SHARE.get(op, 1)], SPECIAL64])


# ---------------------------------------------------------------------------
# lookup tables
# ---------------------------------------------------------------------------

def test_tables_consistent():
    ops = {"exp", "expm1", "log", "log1p", "tanh", "sigmoid", "erf", "sin", "cos", "tan", "asin",
           "acos", "atan", "atan2", *HYPER_OPS, *BINARY_OPS}
    keys = {(op, dt) for op in ops for dt in ("float32", "float64")}
    assert set(V.VMATH) == keys
    assert set(V.VMATH_NAMES) == keys
    assert set(V.VMATH_MAX_ULP) == keys
    assert set(V.VMATH_METHOD) == keys
    for key, name in V.VMATH_NAMES.items():
        assert getattr(V, name) is V.VMATH[key]
        assert name in V.__all__
    assert V.vmath_name("exp", np.float32) == "exp_f32"
    assert V.vmath_name("tanh", "float64") == "tanh_f64"
    assert V.vmath_name("exp", np.int32) is None


def test_scalar_call_from_python():
    y = V.exp_f32(np.float32(1.0))
    assert abs(float(y) - np.e) < 1e-6
    assert abs(V.log_f64(2.0) - np.log(2.0)) < 1e-15


# ---------------------------------------------------------------------------
# accuracy
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("op", FLOAT32_OPS + TRIG32_OPS)
def test_accuracy_float32(op):
    x = inputs32(op)
    got = run(op, x)
    d = ulp_dist(got, reference(op, x))
    worst = int(np.argmax(d))
    assert d[worst] <= V.VMATH_MAX_ULP[(op, "float32")], (
        op, x[worst], got[worst], d[worst])


@pytest.mark.parametrize("op", FLOAT64_OPS + TRIG64_OPS)
def test_accuracy_float64(op):
    x = inputs64(op)
    got = run(op, x)
    d = ulp_dist(got, reference(op, x))
    worst = int(np.argmax(d))
    assert d[worst] <= V.VMATH_MAX_ULP[(op, "float64")], (
        op, x[worst], got[worst], d[worst])


def test_erf_float64_libm():
    """erf_f64 is a libm call: check it against mpmath (scipy is ~2 ULP)."""
    mp = pytest.importorskip("mpmath")
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.uniform(-6, 6, 1500),
                        rng.uniform(-1, 1, 500) * 10.0 ** rng.uniform(-300, 0, 500)])
    got = run("erf", x)
    with mp.workdps(30):
        ref = np.array([float(mp.erf(mp.mpf(float(v)))) for v in x])
    assert np.max(ulp_dist(got, ref)) <= V.VMATH_MAX_ULP[("erf", "float64")]


@pytest.mark.parametrize("op, dtype", [(op, dt) for dt in ("float32", "float64")
                                       for op in FLOAT32_OPS[:7] + ["acosh", "log10"]]
                         + [(op, "float32") for op in TRIG32_OPS]
                         + [(op, "float64") for op in TRIG64_OPS])
def test_caller_fastmath_does_not_change_results(op, dtype):
    # (of the later ops, two whose error-free sums `reassoc` would fold away if it leaked)
    """A caller compiled with reassoc/arcp/... gets bit-identical results."""
    if not V.VMATH_VECTORIZES[(op, dtype)]:
        pytest.skip("libm")
    if dtype == "float32":
        x = np.concatenate([inputs32(op)[::7], SPECIAL32])
    else:
        x = np.concatenate([inputs64(op)[::7], SPECIAL64])
    a = run(op, x, fast=True)
    b = run(op, x, fast=False)
    assert np.array_equal(a.view(np.uint8), b.view(np.uint8))


# ---------------------------------------------------------------------------
# special values (exact, including the sign of zero)
# ---------------------------------------------------------------------------

INF, NAN = np.inf, np.nan
SPECIAL_CASES = {
    "exp": [(-INF, 0.0), (INF, INF), (NAN, NAN), (0.0, 1.0), (-0.0, 1.0),
            (1000.0, INF), (-1000.0, 0.0)],
    "expm1": [(-INF, -1.0), (INF, INF), (NAN, NAN), (0.0, 0.0), (-0.0, -0.0),
              (1000.0, INF), (-1000.0, -1.0)],
    "log": [(0.0, -INF), (-0.0, -INF), (-1.0, NAN), (-INF, NAN), (INF, INF),
            (NAN, NAN), (1.0, 0.0)],
    "log1p": [(-1.0, -INF), (-2.0, NAN), (-INF, NAN), (INF, INF), (NAN, NAN),
              (0.0, 0.0), (-0.0, -0.0)],
    "tanh": [(INF, 1.0), (-INF, -1.0), (0.0, 0.0), (-0.0, -0.0), (NAN, NAN),
             (100.0, 1.0), (-100.0, -1.0)],
    "sigmoid": [(-INF, 0.0), (INF, 1.0), (NAN, NAN), (0.0, 0.5), (-0.0, 0.5),
                (1000.0, 1.0), (-1000.0, 0.0)],
    "erf": [(INF, 1.0), (-INF, -1.0), (0.0, 0.0), (-0.0, -0.0), (NAN, NAN),
            (10.0, 1.0), (-10.0, -1.0)],
    # None: numpy's value in float64 rounded to the dtype (pi/2, pi/4, pi, a denormal x)
    "sin": [(INF, NAN), (-INF, NAN), (0.0, 0.0), (-0.0, -0.0), (NAN, NAN), (1e-45, None),
            (-1e-45, None)],
    "cos": [(INF, NAN), (-INF, NAN), (0.0, 1.0), (-0.0, 1.0), (NAN, NAN), (1e-45, 1.0)],
    "tan": [(INF, NAN), (-INF, NAN), (0.0, 0.0), (-0.0, -0.0), (NAN, NAN), (-1e-45, None)],
    "asin": [(1.0, None), (-1.0, None), (0.0, 0.0), (-0.0, -0.0), (NAN, NAN), (1.0000001, NAN),
             (-2.0, NAN), (INF, NAN), (-INF, NAN), (-1e-45, None)],
    "acos": [(1.0, 0.0), (-1.0, None), (0.0, None), (-0.0, None), (NAN, NAN), (1.0000001, NAN),
             (-2.0, NAN), (INF, NAN), (-INF, NAN)],
    "atan": [(INF, None), (-INF, None), (0.0, 0.0), (-0.0, -0.0), (NAN, NAN), (-1e-45, None),
             (3.4e38, None), (1.0, None), (-1.0, None)],
    "sinh": [(INF, INF), (-INF, -INF), (0.0, 0.0), (-0.0, -0.0), (NAN, NAN),
             (1000.0, INF), (-1000.0, -INF)],
    "cosh": [(INF, INF), (-INF, INF), (0.0, 1.0), (-0.0, 1.0), (NAN, NAN),
             (1000.0, INF), (-1000.0, INF)],
    "asinh": [(INF, INF), (-INF, -INF), (0.0, 0.0), (-0.0, -0.0), (NAN, NAN)],
    "acosh": [(1.0, 0.0), (0.5, NAN), (0.0, NAN), (-1.0, NAN), (-INF, NAN), (INF, INF),
              (NAN, NAN)],
    "atanh": [(1.0, INF), (-1.0, -INF), (0.0, 0.0), (-0.0, -0.0), (2.0, NAN), (-2.0, NAN),
              (INF, NAN), (-INF, NAN), (NAN, NAN)],
    "log2": [(0.0, -INF), (-0.0, -INF), (-1.0, NAN), (-INF, NAN), (INF, INF), (NAN, NAN),
             (1.0, 0.0), (8.0, 3.0), (0.25, -2.0), (2.0 ** -140, -140.0)],
    "log10": [(0.0, -INF), (-0.0, -INF), (-1.0, NAN), (-INF, NAN), (INF, INF), (NAN, NAN),
              (1.0, 0.0), (10.0, 1.0), (100.0, 2.0), (1e-3, -3.0)],
    "exp2": [(-INF, 0.0), (INF, INF), (NAN, NAN), (0.0, 1.0), (-0.0, 1.0), (3.0, 8.0),
             (-2.0, 0.25), (2000.0, INF), (-2000.0, 0.0), (-140.0, 2.0 ** -140)],
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op", sorted(SPECIAL_CASES))
def test_special_values(op, dtype):
    cases = SPECIAL_CASES[op]
    x = np.array([c[0] for c in cases], dtype)
    with np.errstate(all="ignore"):
        want = np.array([REF[op](np.float64(v)) if w is None else w
                         for v, (_, w) in zip(x, cases)], dtype)
    got = run(op, x)
    for xi, g, w in zip(x, got, want):
        if np.isnan(w):
            assert np.isnan(g), (op, xi, g)
        else:
            assert g == w and np.signbit(g) == np.signbit(w), (op, xi, g, w)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op", ["exp", "expm1", "log", "log1p", "tanh", "erf", "sin", "asin",
                                "atan"] + HYPER_OPS)
def test_a_nan_comes_back_bit_for_bit(op, dtype):
    """A NaN argument is returned itself, sign and payload included, as numpy's functions
    return it: the NaN also runs through the integer exponent arithmetic on its way (a
    bit pattern, not a float-to-int conversion, which LLVM would leave undefined)."""
    if not V.VMATH_VECTORIZES[(op, dtype)]:
        pytest.skip("libm")
    if dtype == "float32":
        bits = np.array([0x7FC00000, 0xFFC00000, 0x7FC00001, 0xFFC12345, 0x7FFFFFFF],
                        np.uint32)
    else:
        bits = np.array([0x7FF8000000000000, 0xFFF8000000000000, 0x7FF8000000000001,
                         0xFFF8123456789ABC, 0x7FFFFFFFFFFFFFFF], np.uint64)
    x = bits.view(dtype)
    assert np.array_equal(run(op, x).view(bits.dtype), bits)


def test_exp2_is_exact_at_integers_and_log2_at_powers_of_two():
    """Every integer power of two float32 and float64 represent, denormals included."""
    for dtype, lo, hi in ((np.float32, -149, 128), (np.float64, -1074, 1024)):
        n = np.arange(lo - 3, hi + 3).astype(dtype)
        with np.errstate(all="ignore"):
            want = np.exp2(n.astype(np.float64 if dtype == np.float32 else np.longdouble))
            want = want.astype(dtype)
        assert np.array_equal(run("exp2", n), want)
        powers = run("exp2", n[3:-3])
        assert np.array_equal(run("log2", powers), n[3:-3])


# ---------------------------------------------------------------------------
# binary: hypot, logaddexp (sampled; benchmarks/vmath_accuracy.py measures more)
# ---------------------------------------------------------------------------

# logaddexp's error is measured in ULP of max(|result|, 1/2): near a result of 0 the sum
# max + log1p(exp(-|a-b|)) cancels (VMATH_MAX_ULP's comment)
_ULP_FLOOR = {"hypot": 0.0, "logaddexp": 0.5}


# ---------------------------------------------------------------------------
# atan2 (two operands)
# ---------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def kernel2(op, dtype, fast=True):
    fn = V.VMATH[(op, dtype)]

    @njit(fastmath=V.FASTMATH_FLAGS if fast else False)
    def k(y, x, out):
        for i in range(x.shape[0]):
            out[i] = fn(y[i], x[i])

    return k


def run2(op, y, x, fast=True):
    out = np.empty_like(x)
    kernel2(op, x.dtype.name, fast)(y, x, out)
    return out


def _atan2_reference(y, x):
    wide = np.float64 if x.dtype == np.float32 else np.longdouble
    with np.errstate(all="ignore"):
        return np.arctan2(y.astype(wide), x.astype(wide)).astype(x.dtype)


@functools.lru_cache(maxsize=None)
def _atan2_inputs(dtype):
    rng = np.random.default_rng(4)
    n = 150_000
    if dtype == "float32":
        bits = rng.integers(0, 2 ** 32, (2, n), dtype=np.uint64).astype(np.uint32)
    else:
        bits = rng.integers(0, 2 ** 64, (2, n), dtype=np.uint64)
    y, x = bits.view(dtype)
    y = np.concatenate([y, rng.uniform(-10, 10, n).astype(dtype)])
    x = np.concatenate([x, rng.uniform(-10, 10, n).astype(dtype)])
    # each of the three reductions (|y/x| near tan(pi/8) and tan(3pi/8)) on both sides
    r = rng.choice([-1, 1], n) * np.tan(np.pi / 8 * rng.uniform(0, 4, n))
    return np.concatenate([y, (x[n:] * r).astype(dtype)]), np.concatenate([x, x[n:]])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_atan2_accuracy(dtype):
    y, x = _atan2_inputs(dtype)
    got = run2("atan2", y, x)
    d = ulp_dist(got, _atan2_reference(y, x))
    worst = int(np.argmax(d))
    assert d[worst] <= V.VMATH_MAX_ULP[("atan2", dtype)], (y[worst], x[worst], got[worst])
    # and bit-identical under the caller's fast-math flags
    assert np.array_equal(run2("atan2", y, x, fast=False).view(np.uint8), got.view(np.uint8))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_atan2_special_value_table(dtype):
    """numpy's whole table: signed zeros, infinities, NaN, denormals and huge operands, on
    both sides of every axis, exactly (sign of zero included)."""
    fi = np.finfo(dtype)
    v = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, fi.smallest_subnormal,
                  -fi.smallest_subnormal, fi.max, -fi.max, fi.tiny], dtype)
    y, x = (a.ravel() for a in np.meshgrid(v, v))
    got = run2("atan2", y, x)
    want = _atan2_reference(y, x)
    for yi, xi, g, w in zip(y, x, got, want):
        if np.isnan(w):
            assert np.isnan(g), (yi, xi, g)
        else:
            assert g == w and np.signbit(g) == np.signbit(w), (yi, xi, g, w)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_atan2_vectorizes(dtype):
    k = kernel2("atan2", dtype, True)
    run2("atan2", np.ones(4, dtype), np.ones(4, dtype))
    ir_text = k.inspect_llvm(k.signatures[0])
    assert (_VEC_F32 if dtype == "float32" else _VEC_F64).search(ir_text), "not vectorized"
    assert not _VMATH_CALL.search(ir_text)
    if dtype == "float32":
        assert "double" not in ir_text


# the floats closest to a multiple of pi/2 (the hardest cases of the reduction)
HARD_REDUCTIONS = {
    "float32": [16367173 * 2.0 ** 72, 13176795 * 2.0 ** -22 * 4, 1.5707963705062866,
                3.1415927410125732, 1e30, 3.4028234663852886e38, 7.0, 22.0, 355.0],
    "float64": [6381956970095103 * 2.0 ** 797, 5.319372648326541e+255, 1.5707963267948966,
                3.141592653589793, 1e22, 1.7976931348623157e308, 710.0, 103993.0],
}


def _binary_inputs(dtype, n=40_000):
    rng = np.random.default_rng(4)
    bits = np.uint32 if dtype == np.float32 else np.uint64
    rand = [rng.integers(0, np.iinfo(bits).max, n, dtype=bits, endpoint=True).view(dtype)
            for _ in range(2)]
    dom = [rng.uniform(-40, 40, n).astype(dtype) for _ in range(2)]
    wide = [(rng.uniform(-1, 1, n) * 10.0 ** rng.uniform(-30, 30, n)).astype(dtype)
            for _ in range(2)]
    special = SPECIAL32 if dtype == np.float32 else SPECIAL64
    grid = [np.repeat(special.astype(dtype), len(special)),
            np.tile(special.astype(dtype), len(special))]
    return tuple(np.concatenate(v) for v in zip(rand, dom, wide, grid))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", BINARY_OPS)
def test_binary_accuracy(op, dtype):
    x, y = _binary_inputs(dtype)
    got, want = run2(op, x, y), reference(op, x, y)
    d = ulp_dist(got, want)
    floor = _ULP_FLOOR[op]
    low = np.abs(want) < floor
    with np.errstate(all="ignore"):
        d[low] = np.abs(got[low].astype(np.float64) - want[low]) / np.spacing(dtype(floor))
    worst = int(np.argmax(d))
    assert d[worst] <= V.VMATH_MAX_ULP[(op, np.dtype(dtype).name)], (
        op, x[worst], y[worst], got[worst], want[worst], d[worst])


BINARY_CASES = {
    "hypot": [(INF, NAN, INF), (NAN, -INF, INF), (-INF, 1.0, INF), (NAN, 1.0, NAN),
              (0.0, 0.0, 0.0), (-0.0, -0.0, 0.0), (-3.0, 4.0, 5.0), (0.0, -7.0, 7.0),
              (1e300, 1e300, None), (1e-300, 1e-300, None), (5e-324, 5e-324, None)],
    "logaddexp": [(-INF, -INF, -INF), (INF, INF, INF), (INF, -INF, INF), (-INF, INF, INF),
                  (NAN, 1.0, NAN), (1.0, NAN, NAN), (NAN, INF, NAN), (-INF, 3.0, 3.0),
                  (0.0, 0.0, None), (1000.0, 1000.0, None), (-1000.0, -1000.0, None)],
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op", BINARY_OPS)
def test_binary_special_values(op, dtype):
    """numpy's results, exactly (None: numpy's value of the pair in this dtype)."""
    with np.errstate(all="ignore"):  # (1e300 is inf in float32)
        x = np.array([c[0] for c in BINARY_CASES[op]], dtype)
        y = np.array([c[1] for c in BINARY_CASES[op]], dtype)
        numpy_says = _NUMPY_REF[op](x, y)
    want = np.array([numpy_says[i] if c[2] is None else c[2]
                     for i, c in enumerate(BINARY_CASES[op])], dtype)
    got = run2(op, x, y)
    assert np.array_equal(np.isnan(got), np.isnan(want)), (op, x, y, got, want)
    keep = ~np.isnan(want)
    assert np.array_equal(got[keep], want[keep]), (op, x, y, got, want)


@pytest.mark.parametrize("op", BINARY_OPS)
def test_binary_kernels_vectorize(op):
    for dtype, pattern in (("float32", _VEC_F32), ("float64", _VEC_F64)):
        run2(op, np.zeros(4, dtype), np.zeros(4, dtype))
        k = kernel2(op, dtype, True)
        ir_text = k.inspect_llvm(k.signatures[0])
        assert pattern.search(ir_text), (op, dtype, "loop not vectorized")
        assert not _VMATH_CALL.search(ir_text)
        assert dtype == "float64" or "double" not in ir_text


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sin_cos_tan_of_the_hardest_reductions(dtype):
    """Against 200-digit mpmath: the result of an x a hair from a multiple of pi/2 depends
    on bits of pi far below x's precision (Cody-Waite with a few parts of pi/2 fails here)."""
    mp = pytest.importorskip("mpmath")
    x = np.array(HARD_REDUCTIONS[dtype], dtype)
    x = np.concatenate([x, -x, np.nextafter(x, 0)])
    with mp.workdps(200):
        for op in ("sin", "cos", "tan"):
            f = getattr(mp, op)
            want = np.array([float(f(mp.mpf(float(v)))) for v in x]).astype(dtype)
            d = ulp_dist(run(op, x), want)
            assert d.max() <= V.VMATH_MAX_ULP[(op, dtype)], (op, x[int(np.argmax(d))])


def test_exp_denormal_results():
    x = np.array([-87.5, -95.0, -100.0, -103.0, -103.97], np.float32)
    got = run("exp", x)
    ref = reference("exp", x)
    assert np.all(ref > 0) and np.all(ref < np.finfo(np.float32).tiny)
    assert np.max(ulp_dist(got, ref)) <= 1
    x64 = np.array([-710.0, -730.0, -744.0, -745.1], np.float64)
    assert np.max(ulp_dist(run("exp", x64), reference("exp", x64))) <= 1


def test_every_float32_with_a_denormal_exp_is_within_one_ulp():
    """The 2^n scaling (two normal powers of two, or AVX-512's vscalef) rounds once: every
    float32 whose exp is denormal or near it, about 7M of them."""
    lo, hi = np.float32(-104.0).view(np.int32), np.float32(-86.0).view(np.int32)
    x = np.arange(hi, lo, dtype=np.int32).view(np.float32)
    assert np.max(ulp_dist(run("exp", x), reference("exp", x))) <= 1
    assert np.max(ulp_dist(run("sigmoid", x), reference("sigmoid", x))) <= 2


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_ldexp_is_one_instruction_with_avx512_and_the_split_elsewhere(dtype):
    k = kernel("exp", dtype, True)
    run("exp", np.zeros(4, dtype))
    text = k.inspect_asm(k.signatures[0])
    suffix = "ps" if dtype == "float32" else "pd"
    assert (f"vscalef{suffix}" in text) == V.intrinsics._scalef()
    if V.intrinsics._scalef() and dtype == "float32":  # n from the shifter's bits: no vcvttps2dq
        assert "vcvttps2dq" not in text and "vmaxps" in text and "vminps" in text


def test_log_denormal_inputs():
    x = np.array([1e-45, 3e-42, 1e-40, 1.1e-38], np.float32)
    assert np.max(ulp_dist(run("log", x), reference("log", x))) <= 1
    x64 = np.array([5e-324, 1e-310, 2e-308], np.float64)
    assert np.max(ulp_dist(run("log", x64), reference("log", x64))) <= 1


# ---------------------------------------------------------------------------
# vectorization and dtype hygiene
# ---------------------------------------------------------------------------

_VEC_F32 = re.compile(r"\bf(?:add|mul|sub|div)\b[^\n]*<\d+ x float>")
_VEC_F64 = re.compile(r"\bf(?:add|mul|sub|div)\b[^\n]*<\d+ x double>")
_VMATH_CALL = re.compile(r"call [^\n]*@_ZN7codegen5vmath")


@pytest.mark.parametrize("op", FLOAT32_OPS + TRIG32_OPS)
def test_float32_kernels_vectorize_without_double(op):
    ir_text = llvm_ir(op, "float32")
    assert _VEC_F32.search(ir_text), "loop not vectorized"
    assert "double" not in ir_text, "float32 kernel promotes to double"
    # fully inlined: no call to any numba-compiled vmath function remains
    assert not _VMATH_CALL.search(ir_text)


@pytest.mark.parametrize("op", FLOAT64_OPS + TRIG64_OPS)
def test_float64_kernels_vectorize(op):
    ir_text = llvm_ir(op, "float64")
    assert _VEC_F64.search(ir_text), "loop not vectorized"
    assert not _VMATH_CALL.search(ir_text)


def test_asm_has_packed_ops():
    llvm_ir("exp", "float32")
    k = kernel("exp", "float32", True)
    asm = k.inspect_asm(k.signatures[0])
    assert re.search(r"\b(?:v?mulps|vfmadd\w*ps)\b", asm)


@functools.cache
def _running_max(dtype):
    init = np.dtype(dtype).type(-np.inf)

    @njit(fastmath=set())  # as codegen.emit.FASTMATH: none
    def running_max(x):
        m = init
        for i in range(x.shape[0]):
            m = V.maximum(m, x[i])
        return m

    return running_max


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_maximum_is_np_max_and_its_running_max_vectorizes(dtype):
    f = _running_max(dtype)
    rng = np.random.default_rng(3)
    for n in (1, 7, 100, 1000):
        x = rng.standard_normal(n).astype(dtype)
        assert f(x) == x.max()
        for special in (np.nan, np.inf, -np.inf):
            for pos in {0, n // 2, n - 1}:
                y = x.copy()
                y[pos] = special
                got, exp = f(y), y.max()
                assert got == exp or (np.isnan(got) and np.isnan(exp)), (n, special, pos)
    assert np.isneginf(f(np.full(5, -np.inf, dtype)))
    # NaN propagates whichever operand it is (np.maximum's rule)
    one, nan = np.dtype(dtype).type(1), np.dtype(dtype).type(np.nan)
    assert np.isnan(f(np.array([nan, one]))) and np.isnan(f(np.array([one, nan])))
    ir_text = f.inspect_llvm(f.signatures[0])
    bits = 32 if dtype == "float32" else 64
    assert re.search(rf"@llvm\.maximum\.v\d+f{bits}\b", ir_text), "running max not vectorized"


GENERATED_SOURCE = '''
from numba import njit
from codegen.vmath import exp_f32, tanh_f32

@njit(fastmath={'contract', 'arcp', 'nsz', 'afn', 'reassoc'})
def gen_kernel(x, out):
    for i in range(x.shape[0]):
        out[i] = exp_f32(x[i]) * tanh_f32(x[i])
'''


def test_codegen_style_generated_source():
    """codegen emits Python source importing vmath names: works + vectorizes."""
    ns = {}
    exec(compile(GENERATED_SOURCE, "<generated>", "exec"), ns)
    k = ns["gen_kernel"]
    x = np.linspace(-20, 20, 1003).astype(np.float32)
    out = np.empty_like(x)
    k(x, out)
    x64 = x.astype(np.float64)
    ref = (np.exp(x64) * np.tanh(x64)).astype(np.float32)
    assert np.max(ulp_dist(out, ref)) <= 4
    ir_text = k.inspect_llvm(k.signatures[0])
    assert _VEC_F32.search(ir_text)
    assert "double" not in ir_text


def test_trip_count_is_its_argument_and_the_loop_stays_a_vectorized_loop():
    @njit(fastmath=set())  # as codegen.emit.FASTMATH: none
    def row_sum(x):
        acc = np.float32(0)
        for i in range(V.trip_count(1024)):
            acc = V.add_reassoc(acc, x[i])  # (the sum kernels emit)
        return acc

    x = np.arange(1024, dtype=np.float32)
    assert row_sum(x) == x.sum()
    ir_text = row_sum.inspect_llvm(row_sum.signatures[0])
    assert _VEC_F32.search(ir_text), "loop not vectorized"
    # a loop remains (a back edge), instead of 64 unrolled vector adds in one chain
    assert len(re.findall(r"fadd[^\n]*<\d+ x float>", ir_text)) < 64


@functools.cache
def _divide_by_invariant(dtype):
    div = V.div_invariant_f32 if dtype == np.float32 else V.div_invariant_f64

    @njit(fastmath=set(), error_model="numpy")  # as codegen.emit.FASTMATH
    def divide(x, d, out):
        for i in range(x.shape[0]):
            out[i] = div(x[i], d)

    return divide


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_div_invariant_is_division_up_to_rounding_at_every_special_divisor(dtype):
    """x / d by a reciprocal never changes the class of a result: denormal and huge
    divisors (whose plain reciprocal overflows or is denormal), ±0, ±inf and NaN."""
    fi = np.finfo(dtype)
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -3.0, 7.0, 1e-3, fi.tiny,
                fi.smallest_subnormal, -3 * fi.smallest_subnormal, fi.max, -fi.max, fi.max / 3]
    x = np.array(specials * 3, dtype)
    divide = _divide_by_invariant(dtype)
    for d in specials:
        out = np.empty_like(x)
        divide(x, dtype(d), out)
        with np.errstate(all="ignore"):
            want = x / dtype(d)
        for test in (np.isnan, np.isposinf, np.isneginf):
            assert (test(out) == test(want)).all(), (d, out, want)
        zero = want == 0
        assert (out[zero] == 0).all() and (np.signbit(out[zero]) == np.signbit(want[zero])).all()
        finite = np.isfinite(want) & ~zero
        assert np.all(np.abs(out[finite] / want[finite] - 1) <= 2 * fi.eps), (d, out, want)
    # the reciprocal is computed once, outside the loop: no division in the vector body
    ir_text = divide.inspect_llvm(divide.signatures[0])
    assert not re.search(r"fdiv[^\n]*<\d+ x (float|double)>", ir_text)
    assert re.search(r"fmul[^\n]*<\d+ x (float|double)>", ir_text), "loop not vectorized"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_compiled_trig_calls_vmath_and_matches_eager(dtype):
    """A traced function of the seven ops: its kernel calls the vmath functions (no libm
    ufunc left in the source), and gives eager's values within the ops' bounds."""
    import eager
    import tracer

    def f(x, y):
        return (eager.sin(x) + eager.cos(y) * eager.tan(x),
                eager.asin(x * 0.5) - eager.acos(y * 0.5), eager.atan(x) + eager.atan2(y, x))

    rng = np.random.default_rng(5)
    x, y = (eager.tensor(rng.uniform(-1.9, 1.9, (3, 5)).astype(dtype)) for _ in range(2))
    compiled = tracer.function(f)
    with eager.no_grad():
        got = compiled(x, y)
        concrete = compiled.get_concrete_function(x, y)
    sources = "\n".join(k.source for k in concrete.kernels)
    sfx = "f32" if dtype == "float32" else "f64"
    for op in ("sin", "cos", "tan", "asin", "acos", "atan", "atan2"):
        assert f"{op}_{sfx}(" in sources, op
    assert not re.search(r"(?<![\w.])(?:np|math)\.(?:a?sin|a?cos|a?tan|arc\w+)\(", sources)
    want = f(x, y)
    eps = np.finfo(dtype).eps  # each term is within 2 ULP, and the terms are below 4
    for g, w in zip(got, want):
        assert np.allclose(g.numpy(), w.numpy(), rtol=4 * eps, atol=16 * eps), (g, w)
