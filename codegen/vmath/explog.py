"""exp, expm1, log, log1p, log2, log10, exp2 and logaddexp (float32 and float64).

Each algorithm is written once for both dtypes (`intrinsics._twins`: `exp` is the pair
`exp_f32`, `exp_f64`); only the polynomials, of different degrees, are written per dtype."""
from .constants import (_E2_F32, _E2_F64, _E3_F32, _E3_F64, _E4_F32, _E4_F64, _E5_F32, _E5_F64,
                        _E6_F32, _E6_F64, _E7_F32, _E7_F64, _E8_F64, _E9_F64, _E10_F64, _E11_F64,
                        _E12_F64, _E13_F64, _LG1_F32, _LG1_F64, _LG2_F32, _LG2_F64, _LG3_F32,
                        _LG3_F64, _LG4_F64, _LG5_F64, _LG6_F64, _LG7_F64, _Twin)
from .constants import (_DENORM_EXP, _DENORM_SCALE, _EM1_LO, _EM1_NBIG, _EM1_TCLAMP, _EM1_TINY,
                        _EXP2_HI, _EXP2_LO, _EXP_HI, _EXP_LO, _HALF, _INF, _IVLN2HI, _IVLN2LO,
                        _IVLN10HI, _IVLN10LO, _L1P_TINY, _LN2, _LN2HI, _LN2LO, _LOG2E,
                        _LOG10_2HI, _LOG10_2LO, _MIN_NORMAL, _MINUS_ONE, _NAN, _ONE, _RND, _TWO,
                        _ZERO)
from .intrinsics import (_always_inline, _clear_low_half, _ldexp_rnd, _pow2_rnd, _split_sqrt2,
                         _twins, _vjit)

__all__ = ["exp_f32", "exp_f64", "expm1_f32", "expm1_f64", "log1p_f32", "log1p_f64", "log_f32",
           "log_f64", "log2_f32", "log2_f64", "log10_f32", "log10_f64", "exp2_f32", "exp2_f64",
           "logaddexp_f32", "logaddexp_f64"]


# ---------------------------------------------------------------------------
# exp / expm1
# ---------------------------------------------------------------------------

@_vjit
def _em1_poly_f32(r):
    """e^r - 1 for |r| <= ln2/2."""
    _always_inline()
    p = _E7_F32
    p = p * r + _E6_F32
    p = p * r + _E5_F32
    p = p * r + _E4_F32
    p = p * r + _E3_F32
    p = p * r + _E2_F32
    return r + (r * r) * p


@_vjit
def _em1_poly_f64(r):
    _always_inline()
    p = _E13_F64
    p = p * r + _E12_F64
    p = p * r + _E11_F64
    p = p * r + _E10_F64
    p = p * r + _E9_F64
    p = p * r + _E8_F64
    p = p * r + _E7_F64
    p = p * r + _E6_F64
    p = p * r + _E5_F64
    p = p * r + _E4_F64
    p = p * r + _E3_F64
    p = p * r + _E2_F64
    return r + (r * r) * p


_em1_poly = _Twin(_em1_poly_f32, _em1_poly_f64)


@_twins
def _exp_core(v):
    """exp(v) for finite v in [-87, 88] (float32; normal results, no special cases)."""
    _always_inline()
    t = v * _LOG2E + _RND
    n = t - _RND
    r = v - n * _LN2HI
    r = r - n * _LN2LO
    return _pow2_rnd(t) * (_ONE + _em1_poly(r))


@_twins
def exp(x):
    """exp (vectorizable, <= 1 ULP)."""
    _always_inline()
    xc = min(max(x, _EXP_LO), _EXP_HI)  # a nan stays nan (vmaxps, vminps)
    t = xc * _LOG2E + _RND
    n = t - _RND
    r = xc - n * _LN2HI
    r = r - n * _LN2LO
    y = _ldexp_rnd(_ONE + _em1_poly(r), t)
    return y if x == x else x


@_twins
def expm1(x):
    """expm1 (vectorizable)."""
    _always_inline()
    xc = min(max(x, _EM1_LO), _EXP_HI)
    t = xc * _LOG2E + _RND
    n = t - _RND
    r = xc - n * _LN2HI
    r = r - n * _LN2LO
    p = _em1_poly(r)
    s = _pow2_rnd(min(t, _EM1_TCLAMP))   # 2**min(n, NCLAMP)
    y_small = s * p + (s - _ONE)
    y_big = _ldexp_rnd(p + _ONE, t) - _ONE
    y = y_small if n < _EM1_NBIG else y_big
    y = x if abs(x) < _EM1_TINY else y
    return y if x == x else x


# ---------------------------------------------------------------------------
# log / log1p
# ---------------------------------------------------------------------------

@_vjit
def _lg_poly_f32(z):
    """z*R(z) of log(1+f) = 2s + s*R(s^2), z = s^2."""
    _always_inline()
    return z * (_LG1_F32 + z * (_LG2_F32 + z * _LG3_F32))


@_vjit
def _lg_poly_f64(z):
    _always_inline()
    rr = _LG7_F64
    rr = rr * z + _LG6_F64
    rr = rr * z + _LG5_F64
    rr = rr * z + _LG4_F64
    rr = rr * z + _LG3_F64
    rr = rr * z + _LG2_F64
    rr = rr * z + _LG1_F64
    return rr * z


_lg_poly = _Twin(_lg_poly_f32, _lg_poly_f64)


@_twins
def _log_kernel(f, e, corr):
    """e*ln2 + log(1+f) + corr for f in [sqrt(.5)-1, sqrt(2)-1]."""
    _always_inline()
    s = f / (_TWO + f)
    z = s * s
    rr = _lg_poly(z)
    hfsq = _HALF * f * f
    lo = (e * _LN2LO + corr) + s * (hfsq + rr)
    return e * _LN2HI + ((lo - hfsq) + f)


@_twins
def log(x):
    """Natural log (vectorizable)."""
    _always_inline()
    den = x < _MIN_NORMAL
    xs = x * _DENORM_SCALE if den else x
    m, e = _split_sqrt2(xs)
    e = e - _DENORM_EXP if den else e
    y = _log_kernel(m - _ONE, e, _ZERO)
    y = _NAN if x < _ZERO else y
    y = -_INF if x == _ZERO else y
    y = _INF if x == _INF else y
    return y if x == x else x


@_twins
def log1p(x):
    """log(1 + x) (vectorizable)."""
    _always_inline()
    u = _ONE + x
    # u + c == 1 + x exactly (for finite x > -1)
    c = (x - (u - _ONE)) if u < _TWO else (_ONE - (u - x))
    m, e = _split_sqrt2(u)
    ez = e == _ZERO
    f = x if ez else m - _ONE
    corr = _ZERO if ez else c / u
    y = _log_kernel(f, e, corr)
    y = x if abs(x) < _L1P_TINY else y
    y = _INF if x == _INF else y
    y = -_INF if x == _MINUS_ONE else y
    y = _NAN if x < _MINUS_ONE else y
    return y if x == x else x


# ---------------------------------------------------------------------------
# log2 / log10 (the log reduction, its result kept as hi + lo) and exp2
# ---------------------------------------------------------------------------

@_twins
def _log_scaled(x, c_hi, c_lo, e_hi, e_lo):
    """log(x) * (c_hi + c_lo), for log(x) = e*ln2 + log(1+f) and c*ln2 = e_hi + e_lo.

    log(1+f) is split into hi (12 bits for float32, 21 for float64: `_clear_low_half`) +
    lo, so hi*c_hi is exact; the integer part e*e_hi is added last with its rounding error
    carried (exact at powers of two for log2)."""
    _always_inline()
    den = x < _MIN_NORMAL
    xs = x * _DENORM_SCALE if den else x
    m, e = _split_sqrt2(xs)
    e = e - _DENORM_EXP if den else e
    f = m - _ONE
    s = f / (_TWO + f)
    z = s * s
    hfsq = _HALF * f * f
    r = s * (hfsq + _lg_poly(z))   # log(1+f) - f + hfsq
    hi = _clear_low_half(f - hfsq)
    lo = ((f - hi) - hfsq) + r
    val_hi = hi * c_hi
    val_lo = (e * e_lo + (lo + hi) * c_lo) + lo * c_hi
    y2 = e * e_hi
    w = y2 + val_hi
    val_lo = val_lo + ((y2 - w) + val_hi)
    y = val_lo + w
    y = _NAN if x < _ZERO else y
    y = -_INF if x == _ZERO else y
    y = _INF if x == _INF else y
    return y if x == x else x


@_twins
def log2(x):
    """Base-2 log (vectorizable; exact at powers of two)."""
    _always_inline()
    return _log_scaled(x, _IVLN2HI, _IVLN2LO, _ONE, _ZERO)


@_twins
def log10(x):
    """Base-10 log (vectorizable)."""
    _always_inline()
    return _log_scaled(x, _IVLN10HI, _IVLN10LO, _LOG10_2HI, _LOG10_2LO)


@_twins
def exp2(x):
    """2**x (vectorizable; exact at integers): n = rint(x), r = x - n exact,
    2^r = 1 + (e^(r ln2) - 1) by exp's polynomial, scaled by 2^n."""
    _always_inline()
    xc = min(max(x, _EXP2_LO), _EXP2_HI)
    t = xc + _RND
    r = xc - (t - _RND)
    y = _ldexp_rnd(_ONE + _em1_poly(r * _LN2), t)
    return y if x == x else x


# ---------------------------------------------------------------------------
# logaddexp
# ---------------------------------------------------------------------------

@_twins
def logaddexp(a, b):
    """log(e^a + e^b) (vectorizable): max + log1p(exp(-|a - b|)); numpy's special cases:
    equal operands give a + ln2 (so ±inf for two equal infinities)."""
    _always_inline()
    mx = a if a > b else b
    y = mx + log1p(exp(-abs(a - b)))   # a NaN operand: a - b is NaN
    return a + _LN2 if a == b else y


exp_f32, exp_f64 = exp
expm1_f32, expm1_f64 = expm1
log_f32, log_f64 = log
log1p_f32, log1p_f64 = log1p
log2_f32, log2_f64 = log2
log10_f32, log10_f64 = log10
exp2_f32, exp2_f64 = exp2
logaddexp_f32, logaddexp_f64 = logaddexp
