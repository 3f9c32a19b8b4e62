"""sinh, cosh, asinh, acosh, atanh and hypot (float32 and float64).

sinh and cosh share exp's reduction |x| = n*ln2 + r: below BIG from expm1 (no
cancellation near 0), above as 2^(n-1) (1 + p) (no overflow before the result's). The
inverse functions are one log evaluation each, of an argument u + c carried as a float
and its rounding error (`_log_sum`), in the cancellation-free forms: asinh(a) =
log1p(a + a^2/(1 + sqrt(1 + a^2))) or log(2a + 1/(a + sqrt(a^2 + 1))), acosh(x) =
log1p(t + sqrt(2t + t^2)) (t = x - 1) or log(2x - 1/(x + sqrt(x^2 - 1))), atanh(a) =
log1p(2a + 2a^2/(1 - a)) / 2 or log1p(2a/(1 - a)) / 2. hypot scales both operands by
the larger one's power of two, so the squares neither overflow nor underflow. Each
algorithm is written once for both dtypes (`intrinsics._twins`).
"""
import math

from .constants import (_ASINH_HUGE, _ASINH_SPLIT, _DENORM_EXP, _DENORM_SCALE, _EM1_TCLAMP, _HALF,
                        _INF, _LN2HI, _LN2LO, _LOG2E, _MIN_NORMAL, _NAN, _ONE, _RND, _SINH_BIG,
                        _SINH_CLAMP, _SINH_TINY, _TWO, _ZERO)
from .explog import _em1_poly, _log_kernel, log1p
from .intrinsics import _always_inline, _ldexp_rnd, _pow2_rnd, _split_sqrt2, _twins

__all__ = ["sinh_f32", "sinh_f64", "cosh_f32", "cosh_f64", "asinh_f32", "asinh_f64",
           "acosh_f32", "acosh_f64", "atanh_f32", "atanh_f64", "hypot_f32", "hypot_f64"]


# ---------------------------------------------------------------------------
# sinh / cosh
# ---------------------------------------------------------------------------

@_twins
def _exp_parts(a):
    """For a >= 0 (clamped): (e^a - 1 for a < BIG, e^a, e^a / 2 for a >= BIG)."""
    _always_inline()
    ac = min(a, _SINH_CLAMP)
    t = ac * _LOG2E + _RND
    n = t - _RND
    r = ac - n * _LN2HI
    r = r - n * _LN2LO
    p = _em1_poly(r)
    s = _pow2_rnd(min(t, _EM1_TCLAMP))       # 2^n while a < BIG
    return s * p + (s - _ONE), s * (_ONE + p), _ldexp_rnd(_ONE + p, t - _ONE)


@_twins
def sinh(x):
    """sinh (vectorizable): (em + em/(em + 1)) / 2, em = expm1(|x|)."""
    _always_inline()
    a = abs(x)
    em, e, half_e = _exp_parts(a)
    y = _HALF * (em + em / (em + _ONE)) if a < _SINH_BIG else half_e
    y = -y if x < _ZERO else y
    y = x if a < _SINH_TINY else y           # keeps -0.0
    return y if x == x else x


@_twins
def cosh(x):
    """cosh (vectorizable): e/2 + 1/(2e), e = exp(|x|)."""
    _always_inline()
    a = abs(x)
    em, e, half_e = _exp_parts(a)
    y = _HALF * e + _HALF / e if a < _SINH_BIG else half_e
    return y if x == x else x


# ---------------------------------------------------------------------------
# asinh / acosh / atanh
# ---------------------------------------------------------------------------

@_twins
def _log_sum(u, c, k):
    """log(u + c) + k*ln2 for a positive normal finite u, |c| <= ulp(u)/2, k integral."""
    _always_inline()
    m, e = _split_sqrt2(u)
    return _log_kernel(m - _ONE, e + k, c / u)


@_twins
def asinh(x):
    """asinh (vectorizable)."""
    _always_inline()
    a = abs(x)
    small = a <= _ASINH_SPLIT
    root = math.sqrt(a * a + _ONE)
    q = (a * a if small else _ONE) / ((_ONE + root) if small else (root + a))
    base = a if small else a + a
    v = base + q                                  # small: log1p's argument; else: log's
    u = _ONE + v if small else v
    # u + c == 1 + v (small) or base + q (else) exactly (Fast2Sum, larger operand first)
    c_small = (v - (u - _ONE)) if u < _TWO else (_ONE - (u - v))
    c = c_small if small else q - (v - base)
    huge = a > _ASINH_HUGE                    # log(2a): log(a) + ln2
    y = _log_sum(a if huge else u, _ZERO if huge else c,
                 _ONE if huge else _ZERO)
    y = _INF if a == _INF else y
    y = -y if x < _ZERO else y
    y = x if a < _SINH_TINY else y           # keeps -0.0
    return y if x == x else x


@_twins
def acosh(x):
    """acosh (vectorizable; nan below 1)."""
    _always_inline()
    t = x - _ONE                              # exact for x in [1, 2]
    small = x <= _ASINH_SPLIT
    root = math.sqrt((t + t + t * t) if small else (x * x - _ONE))
    base = t if small else x + x
    q = root if small else -_ONE / (x + root)
    v = base + q
    u = _ONE + v if small else v
    c_small = (v - (u - _ONE)) if u < _TWO else (_ONE - (u - v))
    c = c_small if small else q - (v - base)
    huge = x > _ASINH_HUGE
    y = _log_sum(x if huge else u, _ZERO if huge else c,
                 _ONE if huge else _ZERO)
    y = _INF if x == _INF else y
    y = _NAN if x < _ONE else y
    return y if x == x else x


@_twins
def atanh(x):
    """atanh (vectorizable; ±inf at ±1, nan beyond)."""
    _always_inline()
    a = abs(x)
    small = a < _HALF
    a2 = a + a
    v = (a2 if small else _ZERO) + (a2 * a if small else a2) / (_ONE - a)
    y = _HALF * log1p(v)                  # a = 1: log1p(inf); a > 1: v < -1, nan
    y = -y if x < _ZERO else y
    y = x if a < _SINH_TINY else y
    return y if x == x else x


# ---------------------------------------------------------------------------
# hypot
# ---------------------------------------------------------------------------

@_twins
def hypot(a, b):
    """sqrt(a^2 + b^2) (vectorizable), without overflow or underflow: both scaled by 2^-e
    of the larger, hi = m * 2^e. numpy's special cases: an infinite operand gives inf even
    with a NaN, else a NaN gives NaN."""
    _always_inline()
    ax = abs(a)
    ay = abs(b)
    hi = ax if ax > ay else ay
    lo = ay if ax > ay else ax
    den = hi < _MIN_NORMAL
    sc = _DENORM_SCALE if den else _ONE
    m, e = _split_sqrt2(hi * sc)
    ls = _ldexp_rnd(lo * sc, _RND - e)       # lo * 2^-e, <= m
    h = math.sqrt(m * m + ls * ls)
    y = _ldexp_rnd(h, _RND + (e - _DENORM_EXP if den else e))
    y = hi if lo == _ZERO else y              # exact; 0 for two zeros
    y = a + b if (a != a or b != b) else y
    return _INF if (ax == _INF or ay == _INF) else y


sinh_f32, sinh_f64 = sinh
cosh_f32, cosh_f64 = cosh
asinh_f32, asinh_f64 = asinh
acosh_f32, acosh_f64 = acosh
atanh_f32, atanh_f64 = atanh
hypot_f32, hypot_f64 = hypot
