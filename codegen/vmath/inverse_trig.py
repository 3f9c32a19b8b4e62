"""asin, acos, atan and atan2 (float32 and float64).

asin/acos: |x| <= 1/2 a minimax polynomial x + x^3 A(x^2); above, the classic split
asin(|x|) = pi/2 - 2*asin(s), s = sqrt((1-|x|)/2) (exact argument), with s's high half
and a correction term carrying the bits sqrt rounds away. atan and atan2 reduce |y/x| to
[0, tan(pi/8)] (the ratio itself, pi/4 + atan((a-b)/(a+b)), or pi/2 + atan(-b/a): one
rounding of the reduced argument), add the offset's high part last, and fix the quadrant
from the signs, with numpy's arctan2 table for zeros, infinities and NaN. Each algorithm
is written once for both dtypes (`intrinsics._twins`), the polynomials per dtype.
"""
import math

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .constants import _HALF, _INF, _NAN, _ONE, _TWO, _ZERO, _Twin
from .intrinsics import _always_inline, _twins, _vjit

__all__ = ["acos_f32", "acos_f64", "asin_f32", "asin_f64", "atan2_f32", "atan2_f64", "atan_f32",
           "atan_f64"]

_F = np.float32
_D = np.float64


# ---------------------------------------------------------------------------
# constants (minimax coefficients as in trig.py)
# ---------------------------------------------------------------------------

# multiples of pi as HI + LO (LO: the rest, rounded)
_PIO2_HI = _Twin(_F(1.5707963705062866), _D(1.5707963267948966))
_PIO2_LO = _Twin(_F(-4.371138828673793e-08), _D(6.123233995736766e-17))
_PIO4_HI = _Twin(_F(0.7853981852531433), _D(0.7853981633974483))
_PIO4_LO = _Twin(_F(-2.1855694143368964e-08), _D(3.061616997868383e-17))
_3PIO4_HI = _Twin(_F(2.356194496154785), _D(2.356194490192345))
_3PIO4_LO = _Twin(_F(-5.962440319251527e-09), _D(9.184850993605148e-17))
_PI_HI = _Twin(_F(3.1415927410125732), _D(3.141592653589793))
_PI_LO = _Twin(_F(-8.742277657347586e-08), _D(1.2246467991473532e-16))
_TAN_PIO8 = _Twin(_F(0.41421356237309503), _D(0.41421356237309503))
_TAN_3PIO8 = _Twin(_F(2.414213562373095), _D(2.414213562373095))
# atan2 scales both operands down by 1/4 above this (so a + b cannot overflow)
_BIG, _QUARTER = _Twin(_F(2.0 ** 125), _D(2.0 ** 1021)), _Twin(_F(0.25), _D(0.25))
# asin's hi part of sqrt: its significand's low half cleared (12 of 24 bits, 32 of 53)
_SQRT_LOW_BITS = _Twin(12, 32)

# asin(x) = x + x^3 A(x^2), |x| <= 1/2
(_A1_F32, _A2_F32, _A3_F32, _A4_F32, _A5_F32, _A6_F32) = (
    _F(0.16666662693023682), _F(0.07500383257865906), _F(0.04453601688146591),
    _F(0.03167064115405083), _F(0.014898442663252354), _F(0.03693213313817978))
# atan(t) = t - t^3 Q(t^2), |t| <= tan(pi/8)
(_Q1_F32, _Q2_F32, _Q3_F32, _Q4_F32, _Q5_F32) = (
    _F(0.33333319425582886), _F(-0.19998663663864136), _F(0.14246460795402527),
    _F(-0.10612136870622635), _F(0.061187583953142166))
# float64: asin (deg-29 in x), atan (deg-25)
(_A1_F64, _A2_F64, _A3_F64, _A4_F64, _A5_F64, _A6_F64, _A7_F64, _A8_F64, _A9_F64, _A10_F64,
 _A11_F64, _A12_F64, _A13_F64, _A14_F64) = (
    _D(0.16666666666666663), _D(0.07500000000001256), _D(0.04464285714090104),
    _D(0.03038194458691631), _D(0.02237215321209247), _D(0.01735291674728808),
    _D(0.01396221077404332), _D(0.011583266324165089), _D(0.009496814686172628),
    _D(0.009965153367542025), _D(0.0007752339167400609), _D(0.02473646449459102),
    _D(-0.026169066311345805), _D(0.033727100881608366))
(_Q1_F64, _Q2_F64, _Q3_F64, _Q4_F64, _Q5_F64, _Q6_F64, _Q7_F64, _Q8_F64, _Q9_F64, _Q10_F64,
 _Q11_F64, _Q12_F64) = (
    _D(0.3333333333333333), _D(-0.19999999999998536), _D(0.14285714285468357),
    _D(-0.11111111091819133), _D(0.09090908237149493), _D(-0.07692284156156892),
    _D(0.06666239134854751), _D(-0.05877077540226663), _D(0.05218419666533578),
    _D(-0.04502465506350053), _D(0.03342721408961288), _D(-0.015128650700040486))


# ---------------------------------------------------------------------------
# the functions
# ---------------------------------------------------------------------------

@intrinsic
def _clear_low_bits(typingctx, x, n):
    """x with the low n bits of its significand cleared (n an integer literal)."""
    if not isinstance(x, types.Float) or not isinstance(n, types.IntegerLiteral):
        return None
    sig = x(x, n)

    def codegen(context, builder, signature, args):
        fty = args[0].type
        ity = ir.IntType(32 if isinstance(fty, ir.FloatType) else 64)
        low = (1 << signature.args[1].literal_value) - 1
        mask = ir.Constant(ity, ((1 << ity.width) - 1) ^ low)
        return builder.bitcast(builder.and_(builder.bitcast(args[0], ity), mask), fty)

    return sig, codegen


@_vjit
def _asin_poly_f32(z):
    """(asin(t) - t) / t^3 for z = t^2 <= 1/4."""
    _always_inline()
    p = _A6_F32
    p = p * z + _A5_F32
    p = p * z + _A4_F32
    p = p * z + _A3_F32
    p = p * z + _A2_F32
    return p * z + _A1_F32


@_vjit
def _asin_poly_f64(z):
    _always_inline()
    p = _A14_F64
    p = p * z + _A13_F64
    p = p * z + _A12_F64
    p = p * z + _A11_F64
    p = p * z + _A10_F64
    p = p * z + _A9_F64
    p = p * z + _A8_F64
    p = p * z + _A7_F64
    p = p * z + _A6_F64
    p = p * z + _A5_F64
    p = p * z + _A4_F64
    p = p * z + _A3_F64
    p = p * z + _A2_F64
    return p * z + _A1_F64


_asin_poly = _Twin(_asin_poly_f32, _asin_poly_f64)


@_vjit
def _atan_poly_f32(z):
    """Q(z) of atan(t) = t - t^3 Q(t^2), z = t^2."""
    _always_inline()
    p = _Q5_F32
    p = p * z + _Q4_F32
    p = p * z + _Q3_F32
    p = p * z + _Q2_F32
    return p * z + _Q1_F32


@_vjit
def _atan_poly_f64(z):
    _always_inline()
    p = _Q12_F64
    p = p * z + _Q11_F64
    p = p * z + _Q10_F64
    p = p * z + _Q9_F64
    p = p * z + _Q8_F64
    p = p * z + _Q7_F64
    p = p * z + _Q6_F64
    p = p * z + _Q5_F64
    p = p * z + _Q4_F64
    p = p * z + _Q3_F64
    p = p * z + _Q2_F64
    return p * z + _Q1_F64


_atan_poly = _Twin(_atan_poly_f32, _atan_poly_f64)


@_twins
def _asin_big(a):
    """(s, hi, c, w) for 1/2 < a <= 1: s = sqrt(z), z = (1 - a)/2 (exact), hi = s with its
    low bits cleared, c = sqrt(z) - hi to about twice s's precision, w = s*z*A(z), so that
    asin(sqrt(z)) = hi + (c + w)."""
    _always_inline()
    z = (_ONE - a) * _HALF
    s = np.sqrt(z)
    hi = _clear_low_bits(s, _SQRT_LOW_BITS)
    c = (z - hi * hi) / (s + hi)
    c = _ZERO if z == _ZERO else c
    w = s * (z * _asin_poly(z))
    return s, hi, c, w


@_twins
def asin(x):
    """asin (vectorizable)."""
    _always_inline()
    a = abs(x)
    z = x * x
    y_small = x + x * (z * _asin_poly(z))
    _s, hi, c, w = _asin_big(a)
    # pi/2 - 2*asin(s) = pi/4 - ((2*s*A' - (pio2_lo - 2c)) - (pi/4 - 2*hi))
    y = _PIO4_HI - ((_TWO * w - (_PIO2_LO - _TWO * c))
                    - (_PIO4_HI - _TWO * hi))
    y = _PIO2_HI if a == _ONE else y   # (pi/2's LO is most of an ULP of pi/4)
    y = -y if x < _ZERO else y
    y = y_small if a <= _HALF else y
    y = _NAN if a > _ONE else y
    return y if x == x else x


@_twins
def acos(x):
    """acos (vectorizable)."""
    _always_inline()
    a = abs(x)
    z = x * x
    y_small = _PIO2_HI - (x - (_PIO2_LO - x * (z * _asin_poly(z))))
    s, hi, c, w = _asin_big(a)
    y_pos = _TWO * (hi + (c + w))                          # 2*asin(s)
    y_neg = _PI_HI - _TWO * (s + (w - _PIO2_LO))   # pi - 2*asin(s)
    y = y_neg if x < _ZERO else y_pos
    y = y_small if a <= _HALF else y
    y = _NAN if a > _ONE else y
    return y if x == x else x


@_twins
def _atan_core(a, b, flip):
    """atan(a/b) for a, b >= 0 (not both 0 or both inf), in [0, pi/2]; pi minus it if flip.
    a/b in [0, tan(pi/8)]: t = a/b; up to tan(3pi/8): pi/4 + atan((a-b)/(a+b)); above:
    pi/2 + atan(-b/a). The offset's hi part is added last."""
    _always_inline()
    big = a > _TAN_3PIO8 * b
    mid = a > _TAN_PIO8 * b
    num = -b if big else (a - b if mid else a)
    den = a if big else (a + b if mid else b)
    t = num / den
    t = -t if flip else t
    hi = (_3PIO4_HI if flip else _PIO4_HI) if mid else (
        _PI_HI if flip else _ZERO)
    lo = (_3PIO4_LO if flip else _PIO4_LO) if mid else (
        _PI_LO if flip else _ZERO)
    hi = _PIO2_HI if big else hi
    lo = _PIO2_LO if big else lo
    z = t * t
    p = _atan_poly(z)
    return hi - (((t * z) * p - lo) - t)


@_twins
def atan(x):
    """atan (vectorizable)."""
    _always_inline()
    a = abs(x)
    y = _atan_core(a, _ONE, False)
    y = -y if x < _ZERO else y
    y = x if a == _ZERO else y
    return y if x == x else x


@_twins
def atan2(y, x):
    """numpy's arctan2 (vectorizable)."""
    _always_inline()
    a = abs(y)
    b = abs(x)
    scale = _QUARTER if (a > _BIG) | (b > _BIG) else _ONE
    neg_x = math.copysign(_ONE, x) < _ZERO    # x < 0, -0.0 and -inf included
    th = _atan_core(a * scale, b * scale, neg_x)
    both_inf = (a == _INF) & (b == _INF)
    th = (_3PIO4_HI if neg_x else _PIO4_HI) if both_inf else th
    th = (_PI_HI if neg_x else _ZERO) if a == _ZERO else th
    th = math.copysign(th, y)
    th = th if x == x else x
    return th if y == y else y


asin_f32, asin_f64 = asin
acos_f32, acos_f64 = acos
atan_f32, atan_f64 = atan
atan2_f32, atan2_f64 = atan2
