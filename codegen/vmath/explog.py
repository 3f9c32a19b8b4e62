"""exp, expm1, log, log1p, log2, log10, exp2 and logaddexp (float32 and float64)."""
from .constants import (_DENORM_EXP_F32, _DENORM_EXP_F64, _DENORM_SCALE_F32, _DENORM_SCALE_F64,
                        _E2_F32, _E2_F64, _E3_F32, _E3_F64, _E4_F32, _E4_F64, _E5_F32, _E5_F64,
                        _E6_F32, _E6_F64, _E7_F32, _E7_F64, _E8_F64, _E9_F64, _E10_F64, _E11_F64,
                        _E12_F64, _E13_F64, _EM1_LO_F32, _EM1_LO_F64, _EM1_NBIG_F32, _EM1_NBIG_F64,
                        _EM1_TCLAMP_F32, _EM1_TCLAMP_F64, _EM1_TINY_F32, _EM1_TINY_F64,
                        _EXP_HI_F32, _EXP_HI_F64, _EXP_LO_F32, _EXP_LO_F64, _HALF_F32, _HALF_F64,
                        _INF_F32, _INF_F64, _L1P_TINY_F32, _L1P_TINY_F64, _LG1_F32, _LG1_F64,
                        _LG2_F32, _LG2_F64, _LG3_F32, _LG3_F64, _LG4_F64, _LG5_F64, _LG6_F64,
                        _LG7_F64, _LN2HI_F32, _LN2HI_F64, _LN2LO_F32, _LN2LO_F64, _LOG2E_F32,
                        _LOG2E_F64, _MIN_NORMAL_F32, _MIN_NORMAL_F64, _MINUS_ONE_F32,
                        _MINUS_ONE_F64, _NAN_F32, _NAN_F64, _ONE_F32, _ONE_F64, _RND_F32, _RND_F64,
                        _TWO_F32, _TWO_F64, _ZERO_F32, _ZERO_F64)
from .constants import (_EXP2_HI_F32, _EXP2_HI_F64, _EXP2_LO_F32, _EXP2_LO_F64, _IVLN2HI_F32,
                        _IVLN2HI_F64, _IVLN2LO_F32, _IVLN2LO_F64, _IVLN10HI_F32, _IVLN10HI_F64,
                        _IVLN10LO_F32, _IVLN10LO_F64, _LN2_F32, _LN2_F64, _LOG10_2HI_F32,
                        _LOG10_2HI_F64, _LOG10_2LO_F32, _LOG10_2LO_F64)
from .intrinsics import (_always_inline, _clear_low_half, _ldexp_rnd, _pow2_rnd, _split_sqrt2,
                         _vjit)

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


@_vjit
def _exp_core_f32(v):
    """exp(v) for finite v in [-87, 88] (normal results, no special cases)."""
    _always_inline()
    t = v * _LOG2E_F32 + _RND_F32
    n = t - _RND_F32
    r = v - n * _LN2HI_F32
    r = r - n * _LN2LO_F32
    return _pow2_rnd(t) * (_ONE_F32 + _em1_poly_f32(r))


@_vjit
def exp_f32(x):
    """exp for float32 (vectorizable, <= 1 ULP)."""
    _always_inline()
    xc = min(max(x, _EXP_LO_F32), _EXP_HI_F32)  # a nan stays nan (vmaxps, vminps)
    t = xc * _LOG2E_F32 + _RND_F32
    n = t - _RND_F32
    r = xc - n * _LN2HI_F32
    r = r - n * _LN2LO_F32
    y = _ldexp_rnd(_ONE_F32 + _em1_poly_f32(r), t)
    return y if x == x else x


@_vjit
def exp_f64(x):
    """exp for float64 (vectorizable, <= 1 ULP)."""
    _always_inline()
    xc = min(max(x, _EXP_LO_F64), _EXP_HI_F64)
    t = xc * _LOG2E_F64 + _RND_F64
    n = t - _RND_F64
    r = xc - n * _LN2HI_F64
    r = r - n * _LN2LO_F64
    y = _ldexp_rnd(_ONE_F64 + _em1_poly_f64(r), t)
    return y if x == x else x


@_vjit
def expm1_f32(x):
    """expm1 for float32 (vectorizable)."""
    _always_inline()
    xc = min(max(x, _EM1_LO_F32), _EXP_HI_F32)
    t = xc * _LOG2E_F32 + _RND_F32
    n = t - _RND_F32
    r = xc - n * _LN2HI_F32
    r = r - n * _LN2LO_F32
    p = _em1_poly_f32(r)
    s = _pow2_rnd(min(t, _EM1_TCLAMP_F32))   # 2**min(n, NCLAMP)
    y_small = s * p + (s - _ONE_F32)
    y_big = _ldexp_rnd(p + _ONE_F32, t) - _ONE_F32
    y = y_small if n < _EM1_NBIG_F32 else y_big
    y = x if abs(x) < _EM1_TINY_F32 else y
    return y if x == x else x


@_vjit
def expm1_f64(x):
    """expm1 for float64 (vectorizable)."""
    _always_inline()
    xc = min(max(x, _EM1_LO_F64), _EXP_HI_F64)
    t = xc * _LOG2E_F64 + _RND_F64
    n = t - _RND_F64
    r = xc - n * _LN2HI_F64
    r = r - n * _LN2LO_F64
    p = _em1_poly_f64(r)
    s = _pow2_rnd(min(t, _EM1_TCLAMP_F64))   # 2**min(n, NCLAMP)
    y_small = s * p + (s - _ONE_F64)
    y_big = _ldexp_rnd(p + _ONE_F64, t) - _ONE_F64
    y = y_small if n < _EM1_NBIG_F64 else y_big
    y = x if abs(x) < _EM1_TINY_F64 else y
    return y if x == x else x


# ---------------------------------------------------------------------------
# log / log1p
# ---------------------------------------------------------------------------

@_vjit
def _log_kernel_f32(f, e, corr):
    """e*ln2 + log(1+f) + corr for f in [sqrt(.5)-1, sqrt(2)-1]."""
    _always_inline()
    s = f / (_TWO_F32 + f)
    z = s * s
    rr = z * (_LG1_F32 + z * (_LG2_F32 + z * _LG3_F32))
    hfsq = _HALF_F32 * f * f
    lo = (e * _LN2LO_F32 + corr) + s * (hfsq + rr)
    return e * _LN2HI_F32 + ((lo - hfsq) + f)


@_vjit
def _log_kernel_f64(f, e, corr):
    _always_inline()
    s = f / (_TWO_F64 + f)
    z = s * s
    rr = _LG7_F64
    rr = rr * z + _LG6_F64
    rr = rr * z + _LG5_F64
    rr = rr * z + _LG4_F64
    rr = rr * z + _LG3_F64
    rr = rr * z + _LG2_F64
    rr = rr * z + _LG1_F64
    rr = rr * z
    hfsq = _HALF_F64 * f * f
    lo = (e * _LN2LO_F64 + corr) + s * (hfsq + rr)
    return e * _LN2HI_F64 + ((lo - hfsq) + f)


@_vjit
def log_f32(x):
    """Natural log for float32 (vectorizable)."""
    _always_inline()
    den = x < _MIN_NORMAL_F32
    xs = x * _DENORM_SCALE_F32 if den else x
    m, e = _split_sqrt2(xs)
    e = e - _DENORM_EXP_F32 if den else e
    y = _log_kernel_f32(m - _ONE_F32, e, _ZERO_F32)
    y = _NAN_F32 if x < _ZERO_F32 else y
    y = -_INF_F32 if x == _ZERO_F32 else y
    y = _INF_F32 if x == _INF_F32 else y
    return y if x == x else x


@_vjit
def log_f64(x):
    """Natural log for float64 (vectorizable)."""
    _always_inline()
    den = x < _MIN_NORMAL_F64
    xs = x * _DENORM_SCALE_F64 if den else x
    m, e = _split_sqrt2(xs)
    e = e - _DENORM_EXP_F64 if den else e
    y = _log_kernel_f64(m - _ONE_F64, e, _ZERO_F64)
    y = _NAN_F64 if x < _ZERO_F64 else y
    y = -_INF_F64 if x == _ZERO_F64 else y
    y = _INF_F64 if x == _INF_F64 else y
    return y if x == x else x


@_vjit
def log1p_f32(x):
    """log(1 + x) for float32 (vectorizable)."""
    _always_inline()
    u = _ONE_F32 + x
    # u + c == 1 + x exactly (for finite x > -1)
    c = (x - (u - _ONE_F32)) if u < _TWO_F32 else (_ONE_F32 - (u - x))
    m, e = _split_sqrt2(u)
    ez = e == _ZERO_F32
    f = x if ez else m - _ONE_F32
    corr = _ZERO_F32 if ez else c / u
    y = _log_kernel_f32(f, e, corr)
    y = x if abs(x) < _L1P_TINY_F32 else y
    y = _INF_F32 if x == _INF_F32 else y
    y = -_INF_F32 if x == _MINUS_ONE_F32 else y
    y = _NAN_F32 if x < _MINUS_ONE_F32 else y
    return y if x == x else x


@_vjit
def log1p_f64(x):
    """log(1 + x) for float64 (vectorizable)."""
    _always_inline()
    u = _ONE_F64 + x
    c = (x - (u - _ONE_F64)) if u < _TWO_F64 else (_ONE_F64 - (u - x))
    m, e = _split_sqrt2(u)
    ez = e == _ZERO_F64
    f = x if ez else m - _ONE_F64
    corr = _ZERO_F64 if ez else c / u
    y = _log_kernel_f64(f, e, corr)
    y = x if abs(x) < _L1P_TINY_F64 else y
    y = _INF_F64 if x == _INF_F64 else y
    y = -_INF_F64 if x == _MINUS_ONE_F64 else y
    y = _NAN_F64 if x < _MINUS_ONE_F64 else y
    return y if x == x else x


# ---------------------------------------------------------------------------
# log2 / log10 (the log reduction, its result kept as hi + lo) and exp2
# ---------------------------------------------------------------------------

@_vjit
def _log_scaled_f32(x, c_hi, c_lo, e_hi, e_lo):
    """log(x) * (c_hi + c_lo), for log(x) = e*ln2 + log(1+f) and c*ln2 = e_hi + e_lo.

    log(1+f) is split into hi (12 bits: `_clear_low_half`) + lo, so hi*c_hi is exact; the
    integer part e*e_hi is added last with its rounding error carried (exact at powers
    of two for log2)."""
    _always_inline()
    den = x < _MIN_NORMAL_F32
    xs = x * _DENORM_SCALE_F32 if den else x
    m, e = _split_sqrt2(xs)
    e = e - _DENORM_EXP_F32 if den else e
    f = m - _ONE_F32
    s = f / (_TWO_F32 + f)
    z = s * s
    hfsq = _HALF_F32 * f * f
    r = s * (hfsq + z * (_LG1_F32 + z * (_LG2_F32 + z * _LG3_F32)))   # log(1+f) - f + hfsq
    hi = _clear_low_half(f - hfsq)
    lo = ((f - hi) - hfsq) + r
    val_hi = hi * c_hi
    val_lo = (e * e_lo + (lo + hi) * c_lo) + lo * c_hi
    y2 = e * e_hi
    w = y2 + val_hi
    val_lo = val_lo + ((y2 - w) + val_hi)
    y = val_lo + w
    y = _NAN_F32 if x < _ZERO_F32 else y
    y = -_INF_F32 if x == _ZERO_F32 else y
    y = _INF_F32 if x == _INF_F32 else y
    return y if x == x else x


@_vjit
def _log_scaled_f64(x, c_hi, c_lo, e_hi, e_lo):
    _always_inline()
    den = x < _MIN_NORMAL_F64
    xs = x * _DENORM_SCALE_F64 if den else x
    m, e = _split_sqrt2(xs)
    e = e - _DENORM_EXP_F64 if den else e
    f = m - _ONE_F64
    s = f / (_TWO_F64 + f)
    z = s * s
    rr = _LG7_F64
    rr = rr * z + _LG6_F64
    rr = rr * z + _LG5_F64
    rr = rr * z + _LG4_F64
    rr = rr * z + _LG3_F64
    rr = rr * z + _LG2_F64
    rr = rr * z + _LG1_F64
    hfsq = _HALF_F64 * f * f
    r = s * (hfsq + rr * z)
    hi = _clear_low_half(f - hfsq)
    lo = ((f - hi) - hfsq) + r
    val_hi = hi * c_hi
    val_lo = (e * e_lo + (lo + hi) * c_lo) + lo * c_hi
    y2 = e * e_hi
    w = y2 + val_hi
    val_lo = val_lo + ((y2 - w) + val_hi)
    y = val_lo + w
    y = _NAN_F64 if x < _ZERO_F64 else y
    y = -_INF_F64 if x == _ZERO_F64 else y
    y = _INF_F64 if x == _INF_F64 else y
    return y if x == x else x


@_vjit
def log2_f32(x):
    """Base-2 log for float32 (vectorizable; exact at powers of two)."""
    _always_inline()
    return _log_scaled_f32(x, _IVLN2HI_F32, _IVLN2LO_F32, _ONE_F32, _ZERO_F32)


@_vjit
def log2_f64(x):
    """Base-2 log for float64 (vectorizable; exact at powers of two)."""
    _always_inline()
    return _log_scaled_f64(x, _IVLN2HI_F64, _IVLN2LO_F64, _ONE_F64, _ZERO_F64)


@_vjit
def log10_f32(x):
    """Base-10 log for float32 (vectorizable)."""
    _always_inline()
    return _log_scaled_f32(x, _IVLN10HI_F32, _IVLN10LO_F32, _LOG10_2HI_F32, _LOG10_2LO_F32)


@_vjit
def log10_f64(x):
    """Base-10 log for float64 (vectorizable)."""
    _always_inline()
    return _log_scaled_f64(x, _IVLN10HI_F64, _IVLN10LO_F64, _LOG10_2HI_F64, _LOG10_2LO_F64)


@_vjit
def exp2_f32(x):
    """2**x for float32 (vectorizable; exact at integers): n = rint(x), r = x - n exact,
    2^r = 1 + (e^(r ln2) - 1) by exp's polynomial, scaled by 2^n."""
    _always_inline()
    xc = min(max(x, _EXP2_LO_F32), _EXP2_HI_F32)
    t = xc + _RND_F32
    r = xc - (t - _RND_F32)
    y = _ldexp_rnd(_ONE_F32 + _em1_poly_f32(r * _LN2_F32), t)
    return y if x == x else x


@_vjit
def exp2_f64(x):
    """2**x for float64 (vectorizable; exact at integers)."""
    _always_inline()
    xc = min(max(x, _EXP2_LO_F64), _EXP2_HI_F64)
    t = xc + _RND_F64
    r = xc - (t - _RND_F64)
    y = _ldexp_rnd(_ONE_F64 + _em1_poly_f64(r * _LN2_F64), t)
    return y if x == x else x


# ---------------------------------------------------------------------------
# logaddexp
# ---------------------------------------------------------------------------

@_vjit
def logaddexp_f32(a, b):
    """log(e^a + e^b) for float32 (vectorizable): max + log1p(exp(-|a - b|)); numpy's
    special cases: equal operands give a + ln2 (so ±inf for two equal infinities)."""
    _always_inline()
    mx = a if a > b else b
    y = mx + log1p_f32(exp_f32(-abs(a - b)))   # a NaN operand: a - b is NaN
    return a + _LN2_F32 if a == b else y


@_vjit
def logaddexp_f64(a, b):
    """log(e^a + e^b) for float64 (vectorizable)."""
    _always_inline()
    mx = a if a > b else b
    y = mx + log1p_f64(exp_f64(-abs(a - b)))
    return a + _LN2_F64 if a == b else y
