"""sinh, cosh, asinh, acosh, atanh and hypot (float32 and float64).

sinh and cosh share exp's reduction |x| = n*ln2 + r: below BIG from expm1 (no
cancellation near 0), above as 2^(n-1) (1 + p) (no overflow before the result's). The
inverse functions are one log evaluation each, of an argument u + c carried as a float
and its rounding error (`_log_sum_*`), in the cancellation-free forms: asinh(a) =
log1p(a + a^2/(1 + sqrt(1 + a^2))) or log(2a + 1/(a + sqrt(a^2 + 1))), acosh(x) =
log1p(t + sqrt(2t + t^2)) (t = x - 1) or log(2x - 1/(x + sqrt(x^2 - 1))), atanh(a) =
log1p(2a + 2a^2/(1 - a)) / 2 or log1p(2a/(1 - a)) / 2. hypot scales both operands by
the larger one's power of two, so the squares neither overflow nor underflow.
"""
import math

from .constants import (_ASINH_HUGE_F32, _ASINH_HUGE_F64, _ASINH_SPLIT_F32, _ASINH_SPLIT_F64,
                        _DENORM_EXP_F32, _DENORM_EXP_F64, _DENORM_SCALE_F32, _DENORM_SCALE_F64,
                        _EM1_TCLAMP_F32, _EM1_TCLAMP_F64, _HALF_F32, _HALF_F64, _INF_F32,
                        _INF_F64, _LN2HI_F32, _LN2HI_F64, _LN2LO_F32, _LN2LO_F64, _LOG2E_F32,
                        _LOG2E_F64, _MIN_NORMAL_F32, _MIN_NORMAL_F64, _NAN_F32, _NAN_F64,
                        _ONE_F32, _ONE_F64, _RND_F32, _RND_F64, _SINH_BIG_F32, _SINH_BIG_F64,
                        _SINH_CLAMP_F32, _SINH_CLAMP_F64, _SINH_TINY_F32, _SINH_TINY_F64,
                        _TWO_F32, _TWO_F64, _ZERO_F32, _ZERO_F64)
from .explog import (_em1_poly_f32, _em1_poly_f64, _log_kernel_f32, _log_kernel_f64, log1p_f32,
                     log1p_f64)
from .intrinsics import _always_inline, _ldexp_rnd, _pow2_rnd, _split_sqrt2, _vjit

__all__ = ["sinh_f32", "sinh_f64", "cosh_f32", "cosh_f64", "asinh_f32", "asinh_f64",
           "acosh_f32", "acosh_f64", "atanh_f32", "atanh_f64", "hypot_f32", "hypot_f64"]


# ---------------------------------------------------------------------------
# sinh / cosh
# ---------------------------------------------------------------------------

@_vjit
def _exp_parts_f32(a):
    """For a >= 0 (clamped): (e^a - 1 for a < BIG, e^a, e^a / 2 for a >= BIG)."""
    _always_inline()
    ac = min(a, _SINH_CLAMP_F32)
    t = ac * _LOG2E_F32 + _RND_F32
    n = t - _RND_F32
    r = ac - n * _LN2HI_F32
    r = r - n * _LN2LO_F32
    p = _em1_poly_f32(r)
    s = _pow2_rnd(min(t, _EM1_TCLAMP_F32))       # 2^n while a < BIG
    return s * p + (s - _ONE_F32), s * (_ONE_F32 + p), _ldexp_rnd(_ONE_F32 + p, t - _ONE_F32)


@_vjit
def _exp_parts_f64(a):
    _always_inline()
    ac = min(a, _SINH_CLAMP_F64)
    t = ac * _LOG2E_F64 + _RND_F64
    n = t - _RND_F64
    r = ac - n * _LN2HI_F64
    r = r - n * _LN2LO_F64
    p = _em1_poly_f64(r)
    s = _pow2_rnd(min(t, _EM1_TCLAMP_F64))
    return s * p + (s - _ONE_F64), s * (_ONE_F64 + p), _ldexp_rnd(_ONE_F64 + p, t - _ONE_F64)


@_vjit
def sinh_f32(x):
    """sinh for float32 (vectorizable): (em + em/(em + 1)) / 2, em = expm1(|x|)."""
    _always_inline()
    a = abs(x)
    em, e, half_e = _exp_parts_f32(a)
    y = _HALF_F32 * (em + em / (em + _ONE_F32)) if a < _SINH_BIG_F32 else half_e
    y = -y if x < _ZERO_F32 else y
    y = x if a < _SINH_TINY_F32 else y           # keeps -0.0
    return y if x == x else x


@_vjit
def sinh_f64(x):
    """sinh for float64 (vectorizable)."""
    _always_inline()
    a = abs(x)
    em, e, half_e = _exp_parts_f64(a)
    y = _HALF_F64 * (em + em / (em + _ONE_F64)) if a < _SINH_BIG_F64 else half_e
    y = -y if x < _ZERO_F64 else y
    y = x if a < _SINH_TINY_F64 else y
    return y if x == x else x


@_vjit
def cosh_f32(x):
    """cosh for float32 (vectorizable): e/2 + 1/(2e), e = exp(|x|)."""
    _always_inline()
    a = abs(x)
    em, e, half_e = _exp_parts_f32(a)
    y = _HALF_F32 * e + _HALF_F32 / e if a < _SINH_BIG_F32 else half_e
    return y if x == x else x


@_vjit
def cosh_f64(x):
    """cosh for float64 (vectorizable)."""
    _always_inline()
    a = abs(x)
    em, e, half_e = _exp_parts_f64(a)
    y = _HALF_F64 * e + _HALF_F64 / e if a < _SINH_BIG_F64 else half_e
    return y if x == x else x


# ---------------------------------------------------------------------------
# asinh / acosh / atanh
# ---------------------------------------------------------------------------

@_vjit
def _log_sum_f32(u, c, k):
    """log(u + c) + k*ln2 for a positive normal finite u, |c| <= ulp(u)/2, k integral."""
    _always_inline()
    m, e = _split_sqrt2(u)
    return _log_kernel_f32(m - _ONE_F32, e + k, c / u)


@_vjit
def _log_sum_f64(u, c, k):
    _always_inline()
    m, e = _split_sqrt2(u)
    return _log_kernel_f64(m - _ONE_F64, e + k, c / u)


@_vjit
def asinh_f32(x):
    """asinh for float32 (vectorizable)."""
    _always_inline()
    a = abs(x)
    small = a <= _ASINH_SPLIT_F32
    root = math.sqrt(a * a + _ONE_F32)
    q = (a * a if small else _ONE_F32) / ((_ONE_F32 + root) if small else (root + a))
    base = a if small else a + a
    v = base + q                                  # small: log1p's argument; else: log's
    u = _ONE_F32 + v if small else v
    # u + c == 1 + v (small) or base + q (else) exactly (Fast2Sum, larger operand first)
    c_small = (v - (u - _ONE_F32)) if u < _TWO_F32 else (_ONE_F32 - (u - v))
    c = c_small if small else q - (v - base)
    huge = a > _ASINH_HUGE_F32                    # log(2a): log(a) + ln2
    y = _log_sum_f32(a if huge else u, _ZERO_F32 if huge else c,
                     _ONE_F32 if huge else _ZERO_F32)
    y = _INF_F32 if a == _INF_F32 else y
    y = -y if x < _ZERO_F32 else y
    y = x if a < _SINH_TINY_F32 else y           # keeps -0.0
    return y if x == x else x


@_vjit
def asinh_f64(x):
    """asinh for float64 (vectorizable)."""
    _always_inline()
    a = abs(x)
    small = a <= _ASINH_SPLIT_F64
    root = math.sqrt(a * a + _ONE_F64)
    q = (a * a if small else _ONE_F64) / ((_ONE_F64 + root) if small else (root + a))
    base = a if small else a + a
    v = base + q
    u = _ONE_F64 + v if small else v
    c_small = (v - (u - _ONE_F64)) if u < _TWO_F64 else (_ONE_F64 - (u - v))
    c = c_small if small else q - (v - base)
    huge = a > _ASINH_HUGE_F64
    y = _log_sum_f64(a if huge else u, _ZERO_F64 if huge else c,
                     _ONE_F64 if huge else _ZERO_F64)
    y = _INF_F64 if a == _INF_F64 else y
    y = -y if x < _ZERO_F64 else y
    y = x if a < _SINH_TINY_F64 else y
    return y if x == x else x


@_vjit
def acosh_f32(x):
    """acosh for float32 (vectorizable; nan below 1)."""
    _always_inline()
    t = x - _ONE_F32                              # exact for x in [1, 2]
    small = x <= _ASINH_SPLIT_F32
    root = math.sqrt((t + t + t * t) if small else (x * x - _ONE_F32))
    base = t if small else x + x
    q = root if small else -_ONE_F32 / (x + root)
    v = base + q
    u = _ONE_F32 + v if small else v
    c_small = (v - (u - _ONE_F32)) if u < _TWO_F32 else (_ONE_F32 - (u - v))
    c = c_small if small else q - (v - base)
    huge = x > _ASINH_HUGE_F32
    y = _log_sum_f32(x if huge else u, _ZERO_F32 if huge else c,
                     _ONE_F32 if huge else _ZERO_F32)
    y = _INF_F32 if x == _INF_F32 else y
    y = _NAN_F32 if x < _ONE_F32 else y
    return y if x == x else x


@_vjit
def acosh_f64(x):
    """acosh for float64 (vectorizable; nan below 1)."""
    _always_inline()
    t = x - _ONE_F64
    small = x <= _ASINH_SPLIT_F64
    root = math.sqrt((t + t + t * t) if small else (x * x - _ONE_F64))
    base = t if small else x + x
    q = root if small else -_ONE_F64 / (x + root)
    v = base + q
    u = _ONE_F64 + v if small else v
    c_small = (v - (u - _ONE_F64)) if u < _TWO_F64 else (_ONE_F64 - (u - v))
    c = c_small if small else q - (v - base)
    huge = x > _ASINH_HUGE_F64
    y = _log_sum_f64(x if huge else u, _ZERO_F64 if huge else c,
                     _ONE_F64 if huge else _ZERO_F64)
    y = _INF_F64 if x == _INF_F64 else y
    y = _NAN_F64 if x < _ONE_F64 else y
    return y if x == x else x


@_vjit
def atanh_f32(x):
    """atanh for float32 (vectorizable; ±inf at ±1, nan beyond)."""
    _always_inline()
    a = abs(x)
    small = a < _HALF_F32
    a2 = a + a
    v = (a2 if small else _ZERO_F32) + (a2 * a if small else a2) / (_ONE_F32 - a)
    y = _HALF_F32 * log1p_f32(v)                  # a = 1: log1p(inf); a > 1: v < -1, nan
    y = -y if x < _ZERO_F32 else y
    y = x if a < _SINH_TINY_F32 else y
    return y if x == x else x


@_vjit
def atanh_f64(x):
    """atanh for float64 (vectorizable; ±inf at ±1, nan beyond)."""
    _always_inline()
    a = abs(x)
    small = a < _HALF_F64
    a2 = a + a
    v = (a2 if small else _ZERO_F64) + (a2 * a if small else a2) / (_ONE_F64 - a)
    y = _HALF_F64 * log1p_f64(v)
    y = -y if x < _ZERO_F64 else y
    y = x if a < _SINH_TINY_F64 else y
    return y if x == x else x


# ---------------------------------------------------------------------------
# hypot
# ---------------------------------------------------------------------------

@_vjit
def hypot_f32(a, b):
    """sqrt(a^2 + b^2) for float32 (vectorizable), without overflow or underflow: both
    scaled by 2^-e of the larger, hi = m * 2^e. numpy's special cases: an infinite operand
    gives inf even with a NaN, else a NaN gives NaN."""
    _always_inline()
    ax = abs(a)
    ay = abs(b)
    hi = ax if ax > ay else ay
    lo = ay if ax > ay else ax
    den = hi < _MIN_NORMAL_F32
    sc = _DENORM_SCALE_F32 if den else _ONE_F32
    m, e = _split_sqrt2(hi * sc)
    ls = _ldexp_rnd(lo * sc, _RND_F32 - e)       # lo * 2^-e, <= m
    h = math.sqrt(m * m + ls * ls)
    y = _ldexp_rnd(h, _RND_F32 + (e - _DENORM_EXP_F32 if den else e))
    y = hi if lo == _ZERO_F32 else y              # exact; 0 for two zeros
    y = a + b if (a != a or b != b) else y
    return _INF_F32 if (ax == _INF_F32 or ay == _INF_F32) else y


@_vjit
def hypot_f64(a, b):
    """sqrt(a^2 + b^2) for float64 (vectorizable), without overflow or underflow."""
    _always_inline()
    ax = abs(a)
    ay = abs(b)
    hi = ax if ax > ay else ay
    lo = ay if ax > ay else ax
    den = hi < _MIN_NORMAL_F64
    sc = _DENORM_SCALE_F64 if den else _ONE_F64
    m, e = _split_sqrt2(hi * sc)
    ls = _ldexp_rnd(lo * sc, _RND_F64 - e)
    h = math.sqrt(m * m + ls * ls)
    y = _ldexp_rnd(h, _RND_F64 + (e - _DENORM_EXP_F64 if den else e))
    y = hi if lo == _ZERO_F64 else y
    y = a + b if (a != a or b != b) else y
    return _INF_F64 if (ax == _INF_F64 or ay == _INF_F64) else y
