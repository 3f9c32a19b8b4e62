"""tanh, sigmoid and erf (float32 and float64)."""
import math

from .constants import (_A0_F32, _A1_F32, _A2_F32, _A3_F32, _A4_F32, _A5_F32, _A6_F32, _B0_F32,
                        _B1_F32, _B2_F32, _B3_F32, _B4_F32, _B5_F32, _B6_F32, _ERF_CLAMP_F32,
                        _ERF_SPLIT_F32, _LN2HI_F32, _LN2HI_F64, _LN2LO_F32, _LN2LO_F64, _LOG2E_F32,
                        _LOG2E_F64, _ONE_F32, _ONE_F64, _RND_F32, _RND_F64, _TANH_LO_F32,
                        _TANH_LO_F64, _TANH_TINY_F32, _TANH_TINY_F64, _TWO_F32, _TWO_F64,
                        _ZERO_F32, _ZERO_F64)
from .explog import _em1_poly_f32, _em1_poly_f64, _exp_core_f32, exp_f32, exp_f64
from .intrinsics import _always_inline, _pow2_rnd, _vjit

__all__ = ["erf_f32", "erf_f64", "sigmoid_f32", "sigmoid_f64", "tanh_f32", "tanh_f64"]


# ---------------------------------------------------------------------------
# tanh / sigmoid
# ---------------------------------------------------------------------------

@_vjit
def tanh_f32(x):
    """tanh for float32 (vectorizable)."""
    _always_inline()
    a = abs(x)
    # em = expm1(-2|x|) in (-1, 0]; the argument is clamped at -20 (em -> -1,
    # tanh -> 1); a nan stays nan, and the last select returns x itself.
    v = -(a + a)
    v = max(v, _TANH_LO_F32)
    t = v * _LOG2E_F32 + _RND_F32
    n = t - _RND_F32
    r = v - n * _LN2HI_F32
    r = r - n * _LN2LO_F32
    p = _em1_poly_f32(r)
    s = _pow2_rnd(t)                               # n in [-29, 0]
    em = s * p + (s - _ONE_F32)
    y = -em / (_TWO_F32 + em)                  # tanh(|x|)
    y = -y if x < _ZERO_F32 else y
    y = x if a < _TANH_TINY_F32 else y         # keeps -0.0 (and is exact)
    return y if x == x else x


@_vjit
def tanh_f64(x):
    """tanh for float64 (vectorizable)."""
    _always_inline()
    a = abs(x)
    v = -(a + a)
    v = max(v, _TANH_LO_F64)
    t = v * _LOG2E_F64 + _RND_F64
    n = t - _RND_F64
    r = v - n * _LN2HI_F64
    r = r - n * _LN2LO_F64
    p = _em1_poly_f64(r)
    s = _pow2_rnd(t)                               # n in [-58, 0]
    em = s * p + (s - _ONE_F64)
    y = -em / (_TWO_F64 + em)
    y = -y if x < _ZERO_F64 else y
    y = x if a < _TANH_TINY_F64 else y
    return y if x == x else x


@_vjit
def sigmoid_f32(x):
    """1 / (1 + exp(-x)) for float32 (vectorizable)."""
    _always_inline()
    t = exp_f32(-abs(x))
    num = _ONE_F32 if x >= _ZERO_F32 else t   # nan -> t (nan)
    return num / (_ONE_F32 + t)


@_vjit
def sigmoid_f64(x):
    """1 / (1 + exp(-x)) for float64 (vectorizable)."""
    _always_inline()
    t = exp_f64(-abs(x))
    num = _ONE_F64 if x >= _ZERO_F64 else t
    return num / (_ONE_F64 + t)


# ---------------------------------------------------------------------------
# erf
# ---------------------------------------------------------------------------

@_vjit
def erf_f32(x):
    """erf for float32 (vectorizable)."""
    _always_inline()
    a = abs(x)
    u = x * x
    p = _A6_F32
    p = p * u + _A5_F32
    p = p * u + _A4_F32
    p = p * u + _A3_F32
    p = p * u + _A2_F32
    p = p * u + _A1_F32
    p = p * u + _A0_F32
    y_small = x + x * p
    ac = min(a, _ERF_CLAMP_F32)
    t = ac - _ERF_SPLIT_F32
    q = _B6_F32
    q = q * t + _B5_F32
    q = q * t + _B4_F32
    q = q * t + _B3_F32
    q = q * t + _B2_F32
    q = q * t + _B1_F32
    q = q * t + _B0_F32
    y_big = _ONE_F32 - _exp_core_f32(q)       # q in [-17.7, -1.8]
    y_big = -y_big if x < _ZERO_F32 else y_big
    y = y_small if a <= _ERF_SPLIT_F32 else y_big
    return y if x == x else x


@_vjit
def erf_f64(x):
    """erf for float64: libm fallback (scalar call, does not vectorize)."""
    _always_inline()
    return math.erf(x)
