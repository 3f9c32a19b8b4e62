"""sin, cos and tan (float32 and float64).

x is reduced to r = |x| - q*pi/2, |r| <= pi/4, by a Payne-Hanek reduction written in integer
arithmetic (`_rem_pio2_f32`, `_rem_pio2_f64`): branch-free, exact to far more bits than the
result needs for every finite x (no Cody-Waite range limit: the floats closest to a multiple
of pi/2 are tested), and vectorizable (64-bit integer multiplies, variable shifts, selects;
no table loads). |x| <= pi/4 skips it (q = 0, r = x); both are computed, and a select picks.
The reduced argument is a pair r + rl; the kernels are minimax polynomials in r^2, and the
quadrant q picks sin or cos and the sign. tan: float32 its own polynomial (and -1/tan for
odd q), float64 the quotient of the sin and cos kernels. Each algorithm is written once
for both dtypes (`intrinsics._twins`), the polynomials per dtype.
"""

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .constants import _HALF, _INF, _NAN, _ONE, _ONE_F32, _TWO, _ZERO, _Twin
from .intrinsics import _always_inline, _twins, _vjit

__all__ = ["cos_f32", "cos_f64", "sin_f32", "sin_f64", "tan_f32", "tan_f64"]

_F = np.float32
_D = np.float64

# ---------------------------------------------------------------------------
# argument reduction: x mod pi/2 in integer arithmetic (Payne-Hanek)
# ---------------------------------------------------------------------------

# The bits of 2/pi after 32 leading zero bits (so that a window may start before the
# binary point): word 0 is 0x00000000a2f9836e, 2/pi = 0.a2f9836e4e441529...
_TWO_OVER_PI_WORDS = (0x00000000A2F9836E, 0x4E441529FC2757D1, 0xF534DDC0DB629599,
                      0x3C439041FE5163AB, 0xDEBBC561B7246E3A)
# pi/2 * 2**62, rounded
_PIO2_FIXED = 0x6487ED5110B4611A


def _const(ty, v):
    return ir.Constant(ty, v)


def _window32(builder, words, p):
    """Bits p .. p+31 (most significant first) of the concatenated words, as an i64 < 2**32;
    p an i64 in [0, 64 * (len(words) - 1) - 32]. Selects, not a table load."""
    i64 = ir.IntType(64)
    k = builder.lshr(p, _const(i64, 6))
    sh = builder.and_(p, _const(i64, 63))
    w0, w1 = _const(i64, words[0]), _const(i64, words[1])
    for j in range(1, len(words) - 1):
        at = builder.icmp_unsigned("==", k, _const(i64, j))
        w0 = builder.select(at, _const(i64, words[j]), w0)
        w1 = builder.select(at, _const(i64, words[j + 1]), w1)
    # (w0 << sh) | (w1 >> (64 - sh)), without a shift by 64 (undefined in LLVM)
    hi = builder.shl(w0, sh)
    lo = builder.lshr(builder.lshr(w1, _const(i64, 1)), builder.sub(_const(i64, 63), sh))
    return builder.lshr(builder.or_(hi, lo), _const(i64, 32))


def _fixed_times_pio2(builder, s):
    """(s * pi/2 * 2**62) >> 62 for 0 <= s <= 2**61: the reduced argument in units of 2**-62
    (32x32-bit partial products; truncation error < 3 units)."""
    i64 = ir.IntType(64)
    m32 = _const(i64, 0xFFFFFFFF)
    s1, s0 = builder.lshr(s, _const(i64, 32)), builder.and_(s, m32)
    p1, p0 = _const(i64, _PIO2_FIXED >> 32), _const(i64, _PIO2_FIXED & 0xFFFFFFFF)
    mid = builder.add(builder.mul(s1, p0), builder.mul(s0, p1))          # < 2**64
    r = builder.shl(builder.mul(s1, p1), _const(i64, 2))
    r = builder.add(r, builder.lshr(mid, _const(i64, 30)))
    return builder.add(r, builder.lshr(builder.mul(s0, p0), _const(i64, 62)))


def _quadrant_and_fraction(builder, acc):
    """From y = x*2/pi mod 4 in fixed point (2 integer bits, 62 fraction bits, i64): the
    nearest integer q mod 4 and r = (y - q)*pi/2 in units of 2**-62 (signed i64)."""
    i64 = ir.IntType(64)
    u = builder.add(acc, _const(i64, 1 << 61))
    q = builder.lshr(u, _const(i64, 62))
    f = builder.sub(builder.and_(u, _const(i64, (1 << 62) - 1)), _const(i64, 1 << 61))
    neg = builder.icmp_signed("<", f, _const(i64, 0))
    s = builder.select(neg, builder.neg(f), f)
    r = _fixed_times_pio2(builder, s)
    return q, builder.select(neg, builder.neg(r), r)


def _fixed_to_pair(builder, r, fty, scale):
    """A signed i64 r (|r| < 2**62) times `scale` as a float pair hi + lo (hi = r rounded;
    lo = the rest, exact before its own rounding)."""
    i64 = ir.IntType(64)
    hi = builder.sitofp(r, fty)
    lo = builder.sitofp(builder.sub(r, builder.fptosi(hi, i64)), fty)
    c = ir.Constant(fty, scale)
    return builder.fmul(hi, c), builder.fmul(lo, c)


@intrinsic
def _rem_pio2_f32(typingctx, ax):
    """(q, r, rl) with ax = (q + 4k)*pi/2 + r + rl, q in {0, 1, 2, 3} (as a float), |r| <=
    pi/4 (plus rounding), for a float32 ax >= 2**-7 that is finite (other inputs give
    some value; no undefined behaviour).

    ax = M * 2**e with M < 2**24. Only the bits of 2/pi from 2**(1-e) down matter for
    ax*2/pi mod 4 (the others add multiples of 4); three 32-bit windows of them times M
    give y = ax*2/pi mod 4 to 2**-62 (2 integer bits, 62 fraction bits), far below the
    2**-31 that the float32 closest to a multiple of pi/2 needs."""
    if ax != types.float32:
        return None
    sig = types.UniTuple(types.float32, 3)(ax)

    def codegen(context, builder, signature, args):
        i32, i64 = ir.IntType(32), ir.IntType(64)
        bits = builder.bitcast(args[0], i32)
        expo = builder.and_(builder.lshr(bits, _const(i32, 23)), _const(i32, 0xFF))
        lo_e, hi_e = _const(i32, 120), _const(i32, 254)
        expo = builder.select(builder.icmp_signed("<", expo, lo_e), lo_e, expo)
        expo = builder.select(builder.icmp_signed(">", expo, hi_e), hi_e, expo)
        mant = builder.or_(builder.and_(bits, _const(i32, 0x7FFFFF)), _const(i32, 0x800000))
        mant = builder.zext(mant, i64)
        # ax = mant * 2**e, e = expo - 150; the window starts at the bit of weight
        # 2**(1-e) of 2/pi, bit e + 30 of the words (32 leading zeros)
        p0 = builder.zext(builder.sub(expo, _const(i32, 120)), i64)
        c = [_window32(builder, _TWO_OVER_PI_WORDS, builder.add(p0, _const(i64, 32 * i)))
             for i in range(3)]
        acc = builder.shl(builder.mul(mant, c[0]), _const(i64, 32))
        acc = builder.add(acc, builder.mul(mant, c[1]))
        acc = builder.add(acc, builder.lshr(builder.mul(mant, c[2]), _const(i64, 32)))
        q, r = _quadrant_and_fraction(builder, acc)
        fty = ir.FloatType()
        hi, lo = _fixed_to_pair(builder, r, fty, 2.0 ** -62)
        qf = builder.uitofp(q, fty)
        return context.make_tuple(builder, signature.return_type, [qf, hi, lo])

    return sig, codegen


# 2/pi after 64 leading zero bits, for float64 (exponents up to 2**1023): 1216 bits
_TWO_OVER_PI_WORDS_F64 = (
    0x0000000000000000, 0xA2F9836E4E441529, 0xFC2757D1F534DDC0, 0xDB6295993C439041,
    0xFE5163ABDEBBC561, 0xB7246E3A424DD2E0, 0x06492EEA09D1921C, 0xFE1DEB1CB129A73E,
    0xE88235F52EBB4484, 0xE99C7026B45F7E41, 0x3991D639835339F4, 0x9C845F8BBDF9283B,
    0x1FF897FFDE05980F, 0xEF2F118B5A0A6D1F, 0x6D367ECF27CB09B7, 0x4F463F669E5FEA2D,
    0x7527BAC7EBE5F17B, 0x3D0739F78A5292EA, 0x6BFB5FB11F8D5D08, 0x56033046FC7B6BAB)


def _words_at(builder, words, k, count):
    """words[k], ..., words[k + count - 1] for an i64 k (selects, not a table load)."""
    i64 = ir.IntType(64)
    out = [_const(i64, words[i]) for i in range(count)]
    for j in range(1, len(words) - count + 1):
        at = builder.icmp_unsigned("==", k, _const(i64, j))
        out = [builder.select(at, _const(i64, words[j + i]), out[i]) for i in range(count)]
    return out


def _fma(builder, a, b, c):
    fty = a.type
    name = "llvm.fma.f32" if isinstance(fty, ir.FloatType) else "llvm.fma.f64"
    fn = builder.module.globals.get(name) or ir.Function(
        builder.module, ir.FunctionType(fty, [fty, fty, fty]), name)
    return builder.call(fn, [a, b, c])


@intrinsic
def _rem_pio2_f64(typingctx, ax):
    """(q, r, rl) with ax = (q + 4k)*pi/2 + r + rl, q in {0, 1, 2, 3} (as a float), |r| <=
    pi/4, r + rl to about 2**-100 relative, for a finite float64 ax >= 1/2 (others give
    some value; no undefined behaviour).

    As `_rem_pio2_f32` with ax = M * 2**e, M < 2**53: 192 bits of 2/pi from the bit of
    weight 2**(1-e), as six 32-bit chunks, times M's two 32-bit halves, summed in 32-bit
    columns (each below 2**34) with the carries propagated: y = ax*2/pi mod 4 with 126
    fraction bits (the float64 closest to a multiple of pi/2 needs about 2**-118). The
    fraction times pi/2 is a double-double product (exact by one FMA)."""
    if ax != types.float64:
        return None
    sig = types.UniTuple(types.float64, 3)(ax)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        fty = ir.DoubleType()
        m32 = _const(i64, 0xFFFFFFFF)

        def c(v):
            return _const(i64, v)

        bits = builder.bitcast(args[0], i64)
        expo = builder.and_(builder.lshr(bits, c(52)), c(0x7FF))
        lo_e, hi_e = c(1022), c(2046)
        expo = builder.select(builder.icmp_signed("<", expo, lo_e), lo_e, expo)
        expo = builder.select(builder.icmp_signed(">", expo, hi_e), hi_e, expo)
        mant = builder.or_(builder.and_(bits, c((1 << 52) - 1)), c(1 << 52))
        # ax = mant * 2**e, e = expo - 1075; the window starts at bit e + 62 of the words
        p0 = builder.sub(expo, c(1013))
        k = builder.lshr(p0, c(6))
        sh = builder.and_(p0, c(63))
        w = _words_at(builder, _TWO_OVER_PI_WORDS_F64, k, 4)
        aligned = []
        for i in range(3):
            hi = builder.shl(w[i], sh)
            lo = builder.lshr(builder.lshr(w[i + 1], c(1)), builder.sub(c(63), sh))
            aligned.append(builder.or_(hi, lo))
        chunks = []
        for a in aligned:
            chunks += [builder.lshr(a, c(32)), builder.and_(a, m32)]
        m1, m0 = builder.lshr(mant, c(32)), builder.and_(mant, m32)
        # column j has weight 2**(-30 - 32j); columns above 0 are multiples of 4 (dropped)
        cols = [c(0) for _ in range(6)]

        def add(j, v):
            if 0 <= j < 6:
                cols[j] = builder.add(cols[j], v)

        for i, ch in enumerate(chunks):
            p = builder.mul(m0, ch)                     # < 2**64, at column i
            add(i, builder.and_(p, m32))
            add(i - 1, builder.lshr(p, c(32)))
            p = builder.mul(m1, ch)                     # < 2**53, at column i - 1
            add(i - 1, builder.and_(p, m32))
            add(i - 2, builder.lshr(p, c(32)))
        for j in range(5, 0, -1):
            cols[j - 1] = builder.add(cols[j - 1], builder.lshr(cols[j], c(32)))
            cols[j] = builder.and_(cols[j], m32)
        hi = builder.or_(builder.shl(cols[0], c(32)), cols[1])    # 2 integer, 62 fraction
        lo = builder.or_(builder.shl(cols[2], c(32)), cols[3])    # the next 64 bits
        u = builder.add(hi, c(1 << 61))
        q = builder.lshr(u, c(62))
        fh = builder.sub(builder.and_(u, c((1 << 62) - 1)), c(1 << 61))   # signed
        # f = fh * 2**-62 + lo * 2**-126 as a double-double d1 + d2
        d1 = builder.sitofp(fh, fty)
        rest = builder.sitofp(builder.sub(fh, builder.fptosi(d1, i64)), fty)
        d2 = builder.fadd(builder.fmul(rest, ir.Constant(fty, 2.0 ** 64)),
                          builder.uitofp(lo, fty))
        d1 = builder.fmul(d1, ir.Constant(fty, 2.0 ** -62))
        d2 = builder.fmul(d2, ir.Constant(fty, 2.0 ** -126))
        # r = (d1 + d2) * (pi/2 hi + lo)
        ph = ir.Constant(fty, float(_PIO2_HI_F64_VALUE))
        pl = ir.Constant(fty, float(_PIO2_LO_F64_VALUE))
        rh = builder.fmul(d1, ph)
        err = _fma(builder, d1, ph, builder.fneg(rh))
        rl = builder.fadd(err, builder.fadd(builder.fmul(d1, pl), builder.fmul(d2, ph)))
        r = builder.fadd(rh, rl)
        rl = builder.fsub(rl, builder.fsub(r, rh))
        qf = builder.uitofp(q, fty)
        return context.make_tuple(builder, signature.return_type, [qf, r, rl])

    return sig, codegen


_PIO2_HI_F64_VALUE, _PIO2_LO_F64_VALUE = 1.5707963267948966, 6.123233995736766e-17
_rem_pio2 = _Twin(_rem_pio2_f32, _rem_pio2_f64)


# ---------------------------------------------------------------------------
# constants (minimax coefficients: a Remez exchange in 60-digit mpmath, weighted for the
# relative error of the result; each float32 coefficient rounded in turn and the rest
# refit, the float64 ones rounded once)
# ---------------------------------------------------------------------------

_THREE = _Twin(_F(3.0), _D(3.0))
# pi/4 rounded up (float32): the reduction's threshold
_PIO4_HI = _Twin(_F(0.7853981852531433), _D(0.7853981633974483))

# sin(r) = r + r^3 S(r^2), |r| <= pi/4
(_S1_F32, _S2_F32, _S3_F32, _S4_F32) = (
    _F(-0.1666666716337204), _F(0.00833338312804699), _F(-0.00019854669517371804),
    _F(2.8491022021626122e-06))
# cos(r) = 1 - r^2/2 + r^4 C(r^2)
(_C1_F32, _C2_F32, _C3_F32) = (
    _F(0.041666653007268906), _F(-0.0013887612149119377), _F(2.4462202418362722e-05))
# tan(r) = r + r^3 T(r^2)
(_T1_F32, _T2_F32, _T3_F32, _T4_F32, _T5_F32, _T6_F32, _T7_F32) = (
    _F(0.33333343267440796), _F(0.13332822918891907), _F(0.05404571071267128),
    _F(0.021343039348721504), _F(0.010700283572077751), _F(0.0002408027503406629),
    _F(0.004309399053454399))
# float64: sin (deg-15), cos (deg-16)
(_S1_F64, _S2_F64, _S3_F64, _S4_F64, _S5_F64, _S6_F64, _S7_F64) = (
    _D(-0.16666666666666666), _D(0.008333333333333325), _D(-0.0001984126984125619),
    _D(2.755731921440783e-06), _D(-2.505210490009784e-08), _D(1.6058358829635108e-10),
    _D(-7.578078346102893e-13))
(_C1_F64, _C2_F64, _C3_F64, _C4_F64, _C5_F64, _C6_F64, _C7_F64) = (
    _D(0.041666666666666664), _D(-0.0013888888888888885), _D(2.4801587301579712e-05),
    _D(-2.7557319218661127e-07), _D(2.087675505032374e-09), _D(-1.1470364820190665e-11),
    _D(4.741080020952697e-14))


# ---------------------------------------------------------------------------
# the polynomials (per dtype)
# ---------------------------------------------------------------------------

@_vjit
def _sin_poly_f32(z):
    """S(z) of sin(r) = r + r^3 S(r^2), z = r*r."""
    _always_inline()
    p = _S4_F32
    p = p * z + _S3_F32
    p = p * z + _S2_F32
    return p * z + _S1_F32


@_vjit
def _sin_poly_f64(z):
    _always_inline()
    p = _S7_F64
    p = p * z + _S6_F64
    p = p * z + _S5_F64
    p = p * z + _S4_F64
    p = p * z + _S3_F64
    p = p * z + _S2_F64
    return p * z + _S1_F64


@_vjit
def _cos_poly_f32(z):
    """C(z) of cos(r) = 1 - r^2/2 + r^4 C(r^2), z = r*r."""
    _always_inline()
    p = _C3_F32
    p = p * z + _C2_F32
    return p * z + _C1_F32


@_vjit
def _cos_poly_f64(z):
    _always_inline()
    p = _C7_F64
    p = p * z + _C6_F64
    p = p * z + _C5_F64
    p = p * z + _C4_F64
    p = p * z + _C3_F64
    p = p * z + _C2_F64
    return p * z + _C1_F64


_sin_poly = _Twin(_sin_poly_f32, _sin_poly_f64)
_cos_poly = _Twin(_cos_poly_f32, _cos_poly_f64)


# ---------------------------------------------------------------------------
# sin, cos
# ---------------------------------------------------------------------------

@_twins
def _reduce(x):
    """(q, r, rl, a) for x: |x| = (q + 4k)*pi/2 + r + rl, a = |x|."""
    _always_inline()
    a = abs(x)
    qb, rb, lb = _rem_pio2(a)
    small = a <= _PIO4_HI
    q = _ZERO if small else qb
    r = a if small else rb
    rl = _ZERO if small else lb
    return q, r, rl, a


@_twins
def _sin_kernel(r, rl, z):
    """sin(r + rl), z = r*r."""
    _always_inline()
    p = _sin_poly(z)
    return r + ((r * z) * p + (rl - (_HALF * z) * rl))


@_twins
def _cos_kernel(r, rl, z):
    """cos(r + rl), z = r*r."""
    _always_inline()
    p = _cos_poly(z)
    hz = _HALF * z
    w = _ONE - hz
    return w + (((_ONE - w) - hz) + ((z * z) * p - r * rl))


@_twins
def sin(x):
    """sin (vectorizable)."""
    _always_inline()
    q, r, rl, a = _reduce(x)
    z = r * r
    s = _sin_kernel(r, rl, z)
    c = _cos_kernel(r, rl, z)
    odd = (q == _ONE) | (q == _THREE)
    y = c if odd else s
    flip = (q >= _TWO) != (x < _ZERO)
    y = -y if flip else y
    y = x if a == _ZERO else y                  # keeps -0.0
    y = _NAN if a == _INF else y
    return y if x == x else x


@_twins
def cos(x):
    """cos (vectorizable)."""
    _always_inline()
    q, r, rl, a = _reduce(x)
    z = r * r
    s = _sin_kernel(r, rl, z)
    c = _cos_kernel(r, rl, z)
    odd = (q == _ONE) | (q == _THREE)
    y = s if odd else c
    flip = (q == _ONE) | (q == _TWO)
    y = -y if flip else y
    y = _NAN if a == _INF else y
    return y if x == x else x


# ---------------------------------------------------------------------------
# tan: its own polynomial for float32, the sin/cos kernels' quotient for float64
# ---------------------------------------------------------------------------

@_vjit
def _tan_reduced_f32(r, rl, z, odd):
    """tan(r + rl) (z = r*r), or -1/tan(r + rl) if odd."""
    _always_inline()
    p = _T7_F32
    p = p * z + _T6_F32
    p = p * z + _T5_F32
    p = p * z + _T4_F32
    p = p * z + _T3_F32
    p = p * z + _T2_F32
    p = p * z + _T1_F32
    t = r + ((r * z) * p + rl * (_ONE_F32 + z))
    return -_ONE_F32 / t if odd else t


_sin_kernel_f64, _cos_kernel_f64 = _sin_kernel.f64, _cos_kernel.f64


@_vjit
def _tan_reduced_f64(r, rl, z, odd):
    """sin(r + rl)/cos(r + rl) (z = r*r), or -cos/sin if odd."""
    _always_inline()
    s = _sin_kernel_f64(r, rl, z)
    c = _cos_kernel_f64(r, rl, z)
    return -c / s if odd else s / c


_tan_reduced = _Twin(_tan_reduced_f32, _tan_reduced_f64)


@_twins
def tan(x):
    """tan (vectorizable)."""
    _always_inline()
    q, r, rl, a = _reduce(x)
    z = r * r
    odd = (q == _ONE) | (q == _THREE)
    y = _tan_reduced(r, rl, z, odd)
    y = -y if x < _ZERO else y
    y = x if a == _ZERO else y
    y = _NAN if a == _INF else y
    return y if x == x else x


sin_f32, sin_f64 = sin
cos_f32, cos_f64 = cos
tan_f32, tan_f64 = tan
