"""Vectorizable elementary functions for use inside Numba-compiled loops.

PyPI's llvmlite ships without Intel SVML, so ``math.exp`` / ``math.tanh`` /
... inside an ``@njit`` loop become scalar libm calls and block LLVM's loop
vectorizer.  The functions here are written in plain arithmetic (range
reduction + minimax polynomials, branch-free selects for special values, a
tiny llvmlite intrinsic for the float <-> int bit manipulation needed for
``2**n`` scaling and exponent extraction), so that LLVM inlines them into the
caller's loop and vectorizes it (``<8 x float>`` / ``<16 x float>`` on
AVX2 / AVX-512 hosts).

Usage (this is what the code generator emits)::

    from numba import njit
    from codegen.vmath import exp_f32

    @njit(fastmath={'contract', 'arcp', 'nsz', 'afn', 'reassoc'})
    def kernel(x, out):
        for i in range(x.shape[0]):
            out[i] = exp_f32(x[i])          # x is a float32 array

Design notes
------------
* Every function is a plain ``numba.njit(fastmath={'contract'})`` function.
  ``inline='always'`` is NOT used and not needed: LLVM's inliner inlines the
  (small) callee into the caller's loop, after which the loop vectorizes.
  Keeping Numba-level inlining off also means the callee keeps *its own*
  fast-math flags, so a caller compiled with ``reassoc``/``arcp`` cannot break
  the Cody-Waite range reduction or the compensated sums here.  (Callers must
  NOT use ``nnan``/``ninf``: those would let LLVM delete the special-value
  selects.)  ``contract`` only allows FMA fusion, which never hurts accuracy
  here.
* Float32 functions use float32 constants only (module-level ``np.float32``),
  so their LLVM IR contains no ``double`` operations.
* Pass scalars of the matching dtype (float32 to ``*_f32``).  Other argument
  types compile a separate (promoted) specialization.
* Lookup for code generators: ``VMATH[(op, dtype_name)]`` -> function,
  ``VMATH_NAMES[(op, dtype_name)]`` -> importable name (``"exp_f32"``),
  ``VMATH_MAX_ULP[(op, dtype_name)]`` -> measured max error in ULP (float),
  ``VMATH_METHOD[(op, dtype_name)]`` -> short description.

Measured accuracy
-----------------
Max error in ULP of the result dtype, ULP distance to the reference rounded
to the result dtype (float32: numpy/scipy float64 reference rounded to
float32; float64: numpy ``longdouble`` (x87 80-bit) or mpmath reference
rounded to float64).  Float32 sweep: every 97th float32 bit pattern over the
whole range (~44M values, both signs, denormals included) plus ±0, ±inf, nan,
denormals and the overflow/underflow edges.  Float64 sweep: 2*10^6 random bit
patterns over the whole range + 2*10^6 uniform values on the interesting
domain + the special values (erf_f64 is libm, not measured).

=========  =======  ===============================================  =======
function   dtype    method                                           max ULP
=========  =======  ===============================================  =======
exp        float32  Cody-Waite n*ln2, deg-7 minimax, 2^n split       1
exp        float64  Cody-Waite n*ln2, deg-13 minimax, 2^n split      1
expm1      float32  same reduction, 2^n*(e^r-1) + (2^n-1)            1
expm1      float64  same reduction, 2^n*(e^r-1) + (2^n-1)            1
log        float32  m*2^e, m in [sqrt(.5),sqrt(2)), atanh series    1
log        float64  same, 7-term minimax in s^2                      1
log1p      float32  log of 1+x with rounding correction c/(1+x)     1
log1p      float64  same                                             1
tanh       float32  |x|<.625: odd minimax; else 1-2/(e^2|x|+1)      2
tanh       float64  expm1(2|x|)/(expm1(2|x|)+2)                      2
sigmoid    float32  [1 or e^-|x|] / (1 + e^-|x|)                     2
sigmoid    float64  [1 or e^-|x|] / (1 + e^-|x|)                     2
erf        float32  |x|<=1: odd minimax; else 1-exp(Q(|x|)), Q deg 6 2
erf        float64  libm ``math.erf`` (scalar call, does NOT vectorize)  0
=========  =======  ===============================================  =======

(The numbers in ``VMATH_MAX_ULP`` below are the authoritative ones; they are
re-checked by ``tests/codegen/test_vmath.py``.)

Domain / special values (all handled branch-free with selects):
exp(-inf)=0, exp(+inf)=inf, exp(nan)=nan, overflow -> inf, underflow ->
correctly scaled denormals then 0 (like numpy); expm1(-inf)=-1, expm1(±0)=±0;
log(0)=-inf, log(<0)=nan, log(inf)=inf, denormal inputs exact-scaled;
log1p(-1)=-inf, log1p(<-1)=nan, log1p(±0)=±0; tanh(±inf)=±1, tanh(±0)=±0;
sigmoid(-inf)=0, sigmoid(inf)=1 (denormal results for very negative x);
erf(±inf)=±1, erf(±0)=±0; nan -> nan everywhere.

Polynomial coefficients were produced with a Remez exchange in 40-digit
mpmath (relative-error weighting, coefficients rounded to the target dtype
one at a time and the remaining ones re-fitted for the float32 sets).
"""

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

__all__ = [
    "exp_f32", "exp_f64", "expm1_f32", "expm1_f64",
    "log_f32", "log_f64", "log1p_f32", "log1p_f64",
    "tanh_f32", "tanh_f64", "sigmoid_f32", "sigmoid_f64",
    "erf_f32", "erf_f64",
    "VMATH", "VMATH_NAMES", "VMATH_MAX_ULP", "VMATH_METHOD", "vmath_name",
    "FASTMATH_FLAGS",
]

# Fast-math flags of the vmath functions themselves (FMA contraction only).
_OWN_FLAGS = {"contract"}

# Flags recommended for *callers* (kernels): everything except nnan/ninf.
FASTMATH_FLAGS = {"contract", "arcp", "nsz", "afn", "reassoc"}  # do not mutate


def _vjit(fn):
    return njit(fastmath=_OWN_FLAGS, error_model="numpy", nogil=True)(fn)


# ---------------------------------------------------------------------------
# llvmlite intrinsics: bit-level helpers (all branch-free, vectorizable)
# ---------------------------------------------------------------------------

def _layout(fty):
    """(int type, mantissa bits, exponent bias, llvm float type) of a Float."""
    if fty == types.float32:
        return ir.IntType(32), 23, 127, ir.FloatType()
    if fty == types.float64:
        return ir.IntType(64), 52, 1023, ir.DoubleType()
    return None


@intrinsic
def _always_inline(typingctx):
    """Mark the calling (numba-compiled) function ``alwaysinline`` for LLVM.

    Called as the first statement of every vmath function.  LLVM's inliner
    then always inlines the function into its caller, whatever its size, so
    the caller's loop can be vectorized; the inlined instructions keep the
    fast-math flags of the vmath function (unlike numba's ``inline='always'``,
    which re-lowers the body with the caller's flags).
    """
    sig = types.none()

    def codegen(context, builder, signature, args):
        builder.function.attributes.add("alwaysinline")
        return context.get_dummy_value()

    return sig, codegen


def _pow2_ir(builder, k32, ity, mbits, bias, fty):
    """2**k as a float of type fty, k an i32 in the normal exponent range."""
    k = builder.sext(k32, ity) if ity.width != 32 else k32
    e = builder.add(k, ir.Constant(ity, bias))
    return builder.bitcast(builder.shl(e, ir.Constant(ity, mbits)), fty)


@intrinsic
def _pow2(typingctx, n):
    """2.0**n for an integral float n with a normal result (no range check)."""
    if _layout(n) is None:
        return None
    sig = n(n)

    def codegen(context, builder, signature, args):
        ity, mbits, bias, fty = _layout(signature.args[0])
        k = builder.fptosi(args[0], ir.IntType(32))
        return _pow2_ir(builder, k, ity, mbits, bias, fty)

    return sig, codegen


@intrinsic
def _ldexp_split(typingctx, p, n):
    """p * 2.0**n for integral float n in [-2*bias+2, 2*bias].

    The scale is applied as two normal powers of two so that overflow gives
    inf and gradual underflow gives correctly rounded denormals.
    """
    if _layout(p) is None or n != p:
        return None
    sig = p(p, n)

    def codegen(context, builder, signature, args):
        ity, mbits, bias, fty = _layout(signature.args[0])
        i32 = ir.IntType(32)
        k = builder.fptosi(args[1], i32)
        k1 = builder.ashr(k, ir.Constant(i32, 1))
        k2 = builder.sub(k, k1)
        s1 = _pow2_ir(builder, k1, ity, mbits, bias, fty)
        s2 = _pow2_ir(builder, k2, ity, mbits, bias, fty)
        return builder.fmul(builder.fmul(args[0], s1), s2)

    return sig, codegen


@intrinsic
def _split_sqrt2(typingctx, x):
    """For a positive normal x: (m, e) with x = m * 2**e, m in [sqrt(.5), sqrt(2)).

    e is returned as a float of x's type.  Garbage (but no UB) for other x.
    """
    if _layout(x) is None:
        return None
    ret = types.UniTuple(x, 2)
    sig = ret(x)

    def codegen(context, builder, signature, args):
        ity, mbits, bias, fty = _layout(signature.args[0])
        if ity.width == 32:
            off = 0x3F3504F3        # bits of float32(sqrt(0.5))
        else:
            off = 0x3FE6A09E667F3BCD  # bits of float64(sqrt(0.5))
        c_off = ir.Constant(ity, off)
        ix = builder.sub(builder.bitcast(args[0], ity), c_off)
        e = builder.ashr(ix, ir.Constant(ity, mbits))
        mant = builder.and_(ix, ir.Constant(ity, (1 << mbits) - 1))
        m = builder.bitcast(builder.add(mant, c_off), fty)
        if ity.width != 32:
            e = builder.trunc(e, ir.IntType(32))
        ef = builder.sitofp(e, fty)
        return context.make_tuple(builder, signature.return_type, [m, ef])

    return sig, codegen


# ---------------------------------------------------------------------------
# constants
# ---------------------------------------------------------------------------

_F = np.float32
_D = np.float64

_ZERO_F32, _HALF_F32, _ONE_F32, _TWO_F32 = _F(0.0), _F(0.5), _F(1.0), _F(2.0)
_ZERO_F64, _HALF_F64, _ONE_F64, _TWO_F64 = _D(0.0), _D(0.5), _D(1.0), _D(2.0)
_INF_F32, _NAN_F32 = _F(np.inf), _F(np.nan)
_INF_F64, _NAN_F64 = _D(np.inf), _D(np.nan)

_LOG2E_F32 = _F(1.4426950408889634)
_LOG2E_F64 = _D(1.4426950408889634)
# ln2 = HI + LO with HI having few significant bits (n * HI exact).
_LN2HI_F32 = _F(0.693359375)
_LN2LO_F32 = _F(-0.00021219444170128554)
_LN2HI_F64 = _D(0.6931471803691238)
_LN2LO_F64 = _D(1.9082149292705877e-10)
# round-to-nearest-integer shifters (1.5 * 2**mantissa_bits)
_RND_F32 = _F(12582912.0)
_RND_F64 = _D(6755399441055744.0)

# exp / expm1 argument clamps (beyond: result is inf / 0 / -1 anyway)
_EXP_HI_F32, _EXP_LO_F32 = _F(89.0), _F(-104.0)
_EXP_HI_F64, _EXP_LO_F64 = _D(710.0), _D(-746.0)
_EM1_LO_F32 = _F(-20.0)
_EM1_LO_F64 = _D(-40.0)
_EM1_TINY_F32 = _F(2.0 ** -25)
_EM1_TINY_F64 = _D(2.0 ** -54)
_EM1_NBIG_F32 = _F(25.0)
_EM1_NBIG_F64 = _D(54.0)
_EM1_NCLAMP_F32 = _F(64.0)
_EM1_NCLAMP_F64 = _D(512.0)

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
_MIN_NORMAL_F32 = _F(2.0 ** -126)
_MIN_NORMAL_F64 = _D(2.0 ** -1022)
_DENORM_SCALE_F32, _DENORM_EXP_F32 = _F(2.0 ** 23), _F(23.0)
_DENORM_SCALE_F64, _DENORM_EXP_F64 = _D(2.0 ** 54), _D(54.0)
_L1P_TINY_F32 = _F(2.0 ** -25)
_L1P_TINY_F64 = _D(2.0 ** -54)
_MINUS_ONE_F32 = _F(-1.0)
_MINUS_ONE_F64 = _D(-1.0)

# tanh(x)/x - 1 = u*P(u), u = x^2 <= 0.625^2 (float32)
_TANH_SMALL_F32 = _F(0.625)
_TANH_TINY_F32 = _F(2.0 ** -13)
_TANH_CLAMP_F32 = _F(20.0)      # exp(20) -> 1 - 2/(e+1) rounds to 1
_T1_F32, _T2_F32, _T3_F32, _T4_F32, _T5_F32 = (
    _F(-0.3333328068256378), _F(0.13331405818462372),
    _F(-0.05373651534318924), _F(0.02062816731631756),
    _F(-0.0056922961957752705))
_TANH_TINY_F64 = _D(2.0 ** -28)
_TANH_ONE_F64 = _D(22.0)

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
    n = (v * _LOG2E_F32 + _RND_F32) - _RND_F32
    r = v - n * _LN2HI_F32
    r = r - n * _LN2LO_F32
    return _pow2(n) * (_ONE_F32 + _em1_poly_f32(r))


@_vjit
def exp_f32(x):
    """exp for float32 (vectorizable, <= 1 ULP)."""
    _always_inline()
    xc = x if x > _EXP_LO_F32 else _EXP_LO_F32   # nan -> LO (selected below)
    xc = xc if xc < _EXP_HI_F32 else _EXP_HI_F32
    n = (xc * _LOG2E_F32 + _RND_F32) - _RND_F32
    r = xc - n * _LN2HI_F32
    r = r - n * _LN2LO_F32
    y = _ldexp_split(_ONE_F32 + _em1_poly_f32(r), n)
    return y if x == x else x


@_vjit
def exp_f64(x):
    """exp for float64 (vectorizable, <= 1 ULP)."""
    _always_inline()
    xc = x if x > _EXP_LO_F64 else _EXP_LO_F64
    xc = xc if xc < _EXP_HI_F64 else _EXP_HI_F64
    n = (xc * _LOG2E_F64 + _RND_F64) - _RND_F64
    r = xc - n * _LN2HI_F64
    r = r - n * _LN2LO_F64
    y = _ldexp_split(_ONE_F64 + _em1_poly_f64(r), n)
    return y if x == x else x


@_vjit
def expm1_f32(x):
    """expm1 for float32 (vectorizable)."""
    _always_inline()
    xc = x if x > _EM1_LO_F32 else _EM1_LO_F32
    xc = xc if xc < _EXP_HI_F32 else _EXP_HI_F32
    n = (xc * _LOG2E_F32 + _RND_F32) - _RND_F32
    r = xc - n * _LN2HI_F32
    r = r - n * _LN2LO_F32
    p = _em1_poly_f32(r)
    nc = n if n < _EM1_NCLAMP_F32 else _EM1_NCLAMP_F32
    s = _pow2(nc)
    y_small = s * p + (s - _ONE_F32)
    y_big = _ldexp_split(p + _ONE_F32, n) - _ONE_F32
    y = y_small if n < _EM1_NBIG_F32 else y_big
    y = x if abs(x) < _EM1_TINY_F32 else y
    return y if x == x else x


@_vjit
def expm1_f64(x):
    """expm1 for float64 (vectorizable)."""
    _always_inline()
    xc = x if x > _EM1_LO_F64 else _EM1_LO_F64
    xc = xc if xc < _EXP_HI_F64 else _EXP_HI_F64
    n = (xc * _LOG2E_F64 + _RND_F64) - _RND_F64
    r = xc - n * _LN2HI_F64
    r = r - n * _LN2LO_F64
    p = _em1_poly_f64(r)
    nc = n if n < _EM1_NCLAMP_F64 else _EM1_NCLAMP_F64
    s = _pow2(nc)
    y_small = s * p + (s - _ONE_F64)
    y_big = _ldexp_split(p + _ONE_F64, n) - _ONE_F64
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
# tanh / sigmoid
# ---------------------------------------------------------------------------

@_vjit
def tanh_f32(x):
    """tanh for float32 (vectorizable)."""
    _always_inline()
    a = abs(x)
    u = x * x
    p = _T5_F32
    p = p * u + _T4_F32
    p = p * u + _T3_F32
    p = p * u + _T2_F32
    p = p * u + _T1_F32
    y_small = x + x * (u * p)
    a2 = a + a
    a2 = a2 if a2 < _TANH_CLAMP_F32 else _TANH_CLAMP_F32   # nan -> clamp
    e = _exp_core_f32(a2)
    y_big = _ONE_F32 - _TWO_F32 / (e + _ONE_F32)
    y_big = -y_big if x < _ZERO_F32 else y_big
    y = y_small if a < _TANH_SMALL_F32 else y_big
    y = x if a < _TANH_TINY_F32 else y       # keeps -0.0 (and is exact)
    return y if x == x else x


@_vjit
def tanh_f64(x):
    """tanh for float64 (vectorizable)."""
    _always_inline()
    a = abs(x)
    em = expm1_f64(a + a)
    y = em / (em + _TWO_F64)
    y = _ONE_F64 if a > _TANH_ONE_F64 else y
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
    ac = a if a < _ERF_CLAMP_F32 else _ERF_CLAMP_F32   # nan -> clamp
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


# ---------------------------------------------------------------------------
# lookup tables for code generators
# ---------------------------------------------------------------------------

VMATH_NAMES = {
    (op, dt): "%s_%s" % (op, "f32" if dt == "float32" else "f64")
    for op in ("exp", "expm1", "log", "log1p", "tanh", "sigmoid", "erf")
    for dt in ("float32", "float64")
}

VMATH = {key: globals()[name] for key, name in VMATH_NAMES.items()}

# True when the function vectorizes inside a numba loop (False: libm call).
VMATH_VECTORIZES = {key: key != ("erf", "float64") for key in VMATH_NAMES}

VMATH_METHOD = {
    ("exp", "float32"): "Cody-Waite n*ln2, deg-7 minimax, split 2^n scale",
    ("exp", "float64"): "Cody-Waite n*ln2, deg-13 minimax, split 2^n scale",
    ("expm1", "float32"): "same reduction, 2^n*(e^r-1) + (2^n-1)",
    ("expm1", "float64"): "same reduction, 2^n*(e^r-1) + (2^n-1)",
    ("log", "float32"): "m*2^e, m in [sqrt.5,sqrt2), s=f/(2+f), 3-term R(s^2)",
    ("log", "float64"): "m*2^e, m in [sqrt.5,sqrt2), s=f/(2+f), 7-term R(s^2)",
    ("log1p", "float32"): "log kernel on 1+x with rounding correction c/(1+x)",
    ("log1p", "float64"): "log kernel on 1+x with rounding correction c/(1+x)",
    ("tanh", "float32"): "|x|<0.625: x+x^3 P(x^2); else 1-2/(exp(2|x|)+1)",
    ("tanh", "float64"): "expm1(2|x|)/(expm1(2|x|)+2)",
    ("sigmoid", "float32"): "{1, e^-|x|} / (1 + e^-|x|)",
    ("sigmoid", "float64"): "{1, e^-|x|} / (1 + e^-|x|)",
    ("erf", "float32"): "|x|<=1: x+x P(x^2); else 1-exp(Q(|x|-1))",
    ("erf", "float64"): "libm math.erf (scalar, not vectorized)",
}

# Measured max error in ULP (see module docstring for the procedure).
VMATH_MAX_ULP = {
    ("exp", "float32"): 1.0,
    ("exp", "float64"): 1.0,
    ("expm1", "float32"): 1.0,
    ("expm1", "float64"): 1.0,
    ("log", "float32"): 1.0,
    ("log", "float64"): 1.0,
    ("log1p", "float32"): 1.0,
    ("log1p", "float64"): 1.0,
    ("tanh", "float32"): 2.0,
    ("tanh", "float64"): 2.0,
    ("sigmoid", "float32"): 2.0,
    ("sigmoid", "float64"): 2.0,
    ("erf", "float32"): 2.0,
    ("erf", "float64"): 1.0,
}


def vmath_name(op, dtype):
    """Importable name (in ``codegen.vmath``) for op on dtype, or None."""
    return VMATH_NAMES.get((op, np.dtype(dtype).name))
