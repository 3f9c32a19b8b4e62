"""tanh, sigmoid and erf (float32 and float64); tanh and sigmoid written once for both
dtypes (`intrinsics._twins`)."""
import math

from .constants import (_A0_F32, _A1_F32, _A2_F32, _A3_F32, _A4_F32, _A5_F32, _A6_F32, _B0_F32,
                        _B1_F32, _B2_F32, _B3_F32, _B4_F32, _B5_F32, _B6_F32, _ERF_CLAMP_F32,
                        _ERF_SPLIT_F32, _LN2HI, _LN2LO, _LOG2E, _ONE, _ONE_F32, _RND, _TANH_LO,
                        _TANH_TINY, _TWO, _ZERO, _ZERO_F32)
from .explog import _em1_poly, _exp_core, exp
from .intrinsics import _always_inline, _pow2_rnd, _twins, _vjit

__all__ = ["erf_f32", "erf_f64", "sigmoid_f32", "sigmoid_f64", "tanh_f32", "tanh_f64"]


# ---------------------------------------------------------------------------
# tanh / sigmoid
# ---------------------------------------------------------------------------

@_twins
def tanh(x):
    """tanh (vectorizable)."""
    _always_inline()
    a = abs(x)
    # em = expm1(-2|x|) in (-1, 0]; the argument is clamped at TANH_LO (em -> -1,
    # tanh -> 1); a nan stays nan, and the last select returns x itself.
    v = -(a + a)
    v = max(v, _TANH_LO)
    t = v * _LOG2E + _RND
    n = t - _RND
    r = v - n * _LN2HI
    r = r - n * _LN2LO
    p = _em1_poly(r)
    s = _pow2_rnd(t)                               # n in [-29, 0] (float64: [-58, 0])
    em = s * p + (s - _ONE)
    y = -em / (_TWO + em)                  # tanh(|x|)
    y = -y if x < _ZERO else y
    y = x if a < _TANH_TINY else y         # keeps -0.0 (and is exact)
    return y if x == x else x


@_twins
def sigmoid(x):
    """1 / (1 + exp(-x)) (vectorizable)."""
    _always_inline()
    t = exp(-abs(x))
    num = _ONE if x >= _ZERO else t   # nan -> t (nan)
    return num / (_ONE + t)


tanh_f32, tanh_f64 = tanh
sigmoid_f32, sigmoid_f64 = sigmoid
_exp_core_f32 = _exp_core.f32


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
