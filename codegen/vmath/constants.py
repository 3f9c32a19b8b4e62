"""Typed constants and polynomial coefficients of the vmath approximations.

Float32 functions use float32 constants only (module-level ``np.float32``), so their
LLVM IR contains no ``double`` operations."""
from typing import NamedTuple

import numpy as np

__all__: list = []  # all private: the modules that compute with them import them by name


class _Twin(NamedTuple):
    """One name for a float32 and a float64 member: a constant's two roundings, or the two
    compilations of a function written once for both dtypes (`intrinsics._twins` gives each
    compilation the members of its dtype)."""
    f32: object
    f64: object


# ---------------------------------------------------------------------------
# constants
# ---------------------------------------------------------------------------

_F = np.float32
_D = np.float64

_ZERO, _HALF, _ONE, _TWO = (_Twin(_F(v), _D(v)) for v in (0.0, 0.5, 1.0, 2.0))
_INF, _NAN, _MINUS_ONE = (_Twin(_F(v), _D(v)) for v in (np.inf, np.nan, -1.0))
_ZERO_F32, _ONE_F32 = _ZERO.f32, _ONE.f32   # for erf_f32 (tanh_erf.py; erf_f64 is libm's)

_LOG2E = _Twin(_F(1.4426950408889634), _D(1.4426950408889634))
# ln2 = HI + LO with HI having few significant bits (n * HI exact).
_LN2HI = _Twin(_F(0.693359375), _D(0.6931471803691238))
_LN2LO = _Twin(_F(-0.00021219444170128554), _D(1.9082149292705877e-10))
# round-to-nearest-integer shifters (1.5 * 2**mantissa_bits)
_RND = _Twin(_F(12582912.0), _D(6755399441055744.0))

# exp / expm1 argument clamps (beyond: result is inf / 0 / -1 anyway)
_EXP_HI, _EXP_LO = _Twin(_F(89.0), _D(710.0)), _Twin(_F(-104.0), _D(-746.0))
_EM1_LO = _Twin(_F(-20.0), _D(-40.0))
_EM1_TINY = _Twin(_F(2.0 ** -25), _D(2.0 ** -54))
_EM1_NBIG = _Twin(_F(25.0), _D(54.0))
_EM1_NCLAMP = _Twin(_F(64.0), _D(512.0))
# the same clamp, on n + RND (exact)
_EM1_TCLAMP = _Twin(_RND.f32 + _EM1_NCLAMP.f32, _RND.f64 + _EM1_NCLAMP.f64)

# (e^r - 1 - r) / r^2 on |r| <= ln2/2: minimax, relative error of e^r - 1
# float32: 5.1e-10, float64: 1.5e-18
_E2_F32, _E3_F32, _E4_F32, _E5_F32, _E6_F32, _E7_F32 = (
    _F(0.5), _F(0.1666666567325592), _F(0.04166646674275398),
    _F(0.008333643898367882), _F(0.0013934981543570757),
    _F(0.00019660689576994628))
(_E2_F64, _E3_F64, _E4_F64, _E5_F64, _E6_F64, _E7_F64, _E8_F64, _E9_F64,
 _E10_F64, _E11_F64, _E12_F64, _E13_F64) = (
    _D(0.5), _D(0.16666666666666666), _D(0.0416666666666667),
    _D(0.008333333333333345), _D(0.001388888888887008),
    _D(0.00019841269841207115), _D(2.4801587353915757e-05),
    _D(2.7557319363672743e-06), _D(2.7557248446518063e-07),
    _D(2.5051966643512176e-08), _D(2.0922710028474826e-09),
    _D(1.6120392755766945e-10))

# log(1+f) = 2s + s*R(s^2), s = f/(2+f), |s| <= 0.1716; R minimax
_LG1_F32, _LG2_F32, _LG3_F32 = (
    _F(0.6666677594184875), _F(0.39977526664733887), _F(0.2987228035926819))
_LG1_F64, _LG2_F64, _LG3_F64, _LG4_F64, _LG5_F64, _LG6_F64, _LG7_F64 = (
    _D(0.6666666666666735), _D(0.399999999994128), _D(0.2857142874288815),
    _D(0.22222198513796304), _D(0.18183567809858608),
    _D(0.15313951708178183), _D(0.14797031887822992))
_MIN_NORMAL = _Twin(_F(2.0 ** -126), _D(2.0 ** -1022))
_DENORM_SCALE, _DENORM_EXP = _Twin(_F(2.0 ** 23), _D(2.0 ** 54)), _Twin(_F(23.0), _D(54.0))
_L1P_TINY = _Twin(_F(2.0 ** -25), _D(2.0 ** -54))

_TANH_TINY = _Twin(_F(2.0 ** -13), _D(2.0 ** -28))
_TANH_LO = _Twin(_F(-20.0), _D(-40.0))     # expm1(TANH_LO) rounds to -1 -> tanh = 1

# sinh / cosh: tiny |x| -> x; |x| >= BIG: e^|x|/2 = 2^(n-1) (1 + p), e^-|x| below half an ULP;
# |x| is clamped at CLAMP (beyond the overflow threshold: the scaling gives inf)
_SINH_TINY = _Twin(_F(2.0 ** -12), _D(2.0 ** -28))
_SINH_BIG = _Twin(_F(16.0), _D(32.0))
_SINH_CLAMP = _Twin(_F(90.0), _D(712.0))
# asinh / acosh: |x| <= SPLIT: log1p form; |x| > HUGE: log(|x|) + ln2
_ASINH_SPLIT, _ASINH_HUGE = _Twin(_F(2.0), _D(2.0)), _Twin(_F(2.0 ** 12), _D(2.0 ** 28))
_LN2 = _Twin(_F(0.6931471805599453), _D(0.6931471805599453))
# log2 / log10: 1/ln2, 1/ln10 and log10(2) as HI + LO, HI with 12 (float32) or 32 (float64)
# significant bits, so that HI times a value of 12 or 21 bits (`_clear_low_half`) is exact
_IVLN2HI = _Twin(_F(1.44287109375), _D(1.4426950407214463))
_IVLN2LO = _Twin(_F(-0.00017605285393074155), _D(1.6751713164886512e-10))
_IVLN10HI = _Twin(_F(0.434326171875), _D(0.4342944818781689))
_IVLN10LO = _Twin(_F(-3.168997136526741e-05), _D(2.5082946711645275e-11))
_LOG10_2HI = _Twin(_F(0.301025390625), _D(0.3010299956658855))
_LOG10_2LO = _Twin(_F(4.605039066518657e-06), _D(-1.9043128467164274e-12))
# exp2 argument clamps (beyond: the result is 0 or inf anyway)
_EXP2_LO, _EXP2_HI = _Twin(_F(-160.0), _D(-1080.0)), _Twin(_F(130.0), _D(1030.0))

# erf, float32: |x| <= 1: erf(x) = x + x*PA(x^2);  1 < |x|: erfc = exp(Q(|x|-1))
_ERF_SPLIT_F32 = _F(1.0)
_ERF_CLAMP_F32 = _F(4.0)
_A0_F32, _A1_F32, _A2_F32, _A3_F32, _A4_F32, _A5_F32, _A6_F32 = (
    _F(0.12837916612625122), _F(-0.3761262595653534),
    _F(0.11283578723669052), _F(-0.026853347197175026),
    _F(0.005187162198126316), _F(-0.0007997853099368513),
    _F(7.806903886375949e-05))
_B0_F32, _B1_F32, _B2_F32, _B3_F32, _B4_F32, _B5_F32, _B6_F32 = (
    _F(-1.8496055603027344), _F(-2.6389667987823486),
    _F(-0.8431175947189331), _F(-0.04150349646806717),
    _F(0.00989545602351427), _F(-0.0018293799366801977),
    _F(0.00018637825269252062))

