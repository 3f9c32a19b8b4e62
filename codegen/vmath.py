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

    @njit(fastmath=set(), error_model="numpy")   # (codegen.emit.FASTMATH: no flags)
    def kernel(x, out):
        for i in range(x.shape[0]):
            out[i] = exp_f32(x[i])          # x is a float32 array

Design notes
------------
* Every function is a plain ``numba.njit(fastmath={'contract'},
  error_model='numpy')`` function whose first statement is the intrinsic
  ``_always_inline()``, which puts LLVM's ``alwaysinline`` attribute on the
  compiled function.  LLVM then inlines it into the caller's loop (whatever
  its size; without this, tanh/erf/expm1_f64 exceeded the inline threshold
  and stayed calls, which blocks vectorization), and the loop vectorizes.
  Numba's ``inline='always'`` is deliberately NOT used: it re-lowers the body
  with the *caller's* fast-math flags, and ``reassoc`` would e.g. fold the
  round-to-integer trick ``(x*log2e + C) - C`` away.  With LLVM inlining the
  instructions keep their own flags, so callers may use ``reassoc``/``arcp``/
  ``afn``/``nsz``/``contract`` (``FASTMATH_FLAGS``); results are
  bit-identical to a caller without fast-math (tested). (The generated kernels use
  none: those flags change NaN/inf results of the kernel's own arithmetic; see
  ``codegen.emit.FASTMATH``, ``add_reassoc`` and ``div_invariant_f32``.)  Callers must NOT use
  ``nnan``/``ninf``: NaN/inf propagation relies on selects that those flags
  allow LLVM to delete.  ``contract`` (FMA fusion) never hurts accuracy here.
  ``error_model='numpy'`` removes the ZeroDivisionError branches numba would
  otherwise emit for ``/`` (which also block vectorization).
* Float32 functions use float32 constants only (module-level ``np.float32``),
  so their LLVM IR contains no ``double`` operations.
* Pass scalars of the matching dtype (float32 to ``*_f32``).  Other argument
  types compile a separate (promoted) specialization.
* Lookup for code generators: ``VMATH[(op, dtype_name)]`` -> function,
  ``VMATH_NAMES[(op, dtype_name)]`` -> importable name (``"exp_f32"``),
  ``VMATH_MAX_ULP[(op, dtype_name)]`` -> measured max error in ULP (float),
  ``VMATH_METHOD[(op, dtype_name)]`` -> short description.
* Cheap range handling: an argument is clamped with ``min(max(x, lo), hi)`` (Python's
  rule, a nan stays nan), which LLVM turns into one ``vmaxps``/``vminps`` each; written
  as ``x if x > lo else lo`` it became a compare and a blend each. The integer n of the
  2^n scaling is read from the bits of the round-to-integer shifter's sum
  (``t = x*log2e + 1.5*2^23``) by one integer subtraction, not converted from a float:
  LLVM leaves a float-to-int conversion of NaN undefined. Both together took exp_f32
  from 0.31 to 0.24 ns per element in cache (expm1 0.42 -> 0.37, exp_f64 0.85 -> 0.69).
* ``maximum(a, b)`` is exact, not an approximation: LLVM's ``llvm.maximum`` (np.maximum's
  NaN rule), for running maxima that vectorize without ``nnan``.
* ``trip_count(n)`` is ``n`` hidden from LLVM, so that a long row loop is not unrolled
  completely (see its docstring).
* ``stream_copy(dst, start, src, n)`` copies a small (L1-resident) buffer to
  ``dst[start:start + n]`` with non-temporal (streaming) vector stores, and
  ``store_fence()`` orders them; for large kernel outputs (see their docstrings).

Measured accuracy
-----------------
Max error in ULP of the result dtype = distance in representable numbers
between our result and the reference rounded to the result dtype.
float32: reference = numpy/scipy float64 result rounded to float32; measured
EXHAUSTIVELY over all 2**32 float32 inputs (both signs, denormals, ±0, ±inf,
nans).  float64: reference = numpy ``longdouble`` (x87 80-bit) rounded to
float64 (erf: mpmath); 60M inputs = random bit patterns over the whole range
+ uniform on the interesting domain + |x| in [1e-20, 1] + edge/special values
(denormals, overflow/underflow thresholds).  Measured with the vmath
function inlined into a kernel compiled with ``FASTMATH_FLAGS`` on an
AVX-512 host (LLVM may or may not fuse FMAs on other hosts; the algorithms
do not depend on FMA).

=======  =======  ==========================================  ====  ==========
op       dtype    method                                      ULP   vectorizes
=======  =======  ==========================================  ====  ==========
exp      float32  n=rint(x/ln2), r=x-n*ln2 (Cody-Waite),      1     yes
                  e^r-1 deg-7 minimax, 2^n by vscalef (AVX-512)
                  or as two scalings
exp      float64  same, deg-13 minimax                        1     yes
expm1    float32  same reduction, 2^n*(e^r-1) + (2^n-1)       1     yes
expm1    float64  same                                        2     yes
log      float32  x=m*2^e, m in [sqrt(.5),sqrt(2)),           1     yes
                  s=f/(2+f), log1p(f)=f-f^2/2+s(f^2/2+R(s^2))
                  R: 3-term minimax; e*ln2 hi/lo
log      float64  same, R: 7-term minimax                     1     yes
log1p    float32  log kernel on u=1+x plus correction         1     yes
                  (x-(u-1))/u; exact f=x when u in [.71,1.41)
log1p    float64  same                                        1     yes
tanh     float32  -em/(2+em), em=expm1(-2|x|) (exp reduction,  2     yes
                  e^r-1 deg-7 minimax, 2^n*(e^r-1)+(2^n-1))
tanh     float64  same as float32, deg-13 minimax              3     yes
sigmoid  float32  t=exp(-|x|): x>=0: 1/(1+t), x<0: t/(1+t)    2     yes
sigmoid  float64  same                                        2     yes
erf      float32  |x|<=1: x+x*P(x^2) (deg-6 minimax);         1     yes
                  1<|x|<4: 1-exp(Q(|x|-1)), Q deg-6 minimax
                  of log(erfc); |x|>=4: ±1
erf      float64  libm ``math.erf`` fallback (a deg ~20       1     NO (scalar
                  polynomial would be needed; not worth it)         libm call)
=======  =======  ==========================================  ====  ==========

``VMATH_MAX_ULP`` holds these numbers; ``tests/codegen/test_vmath.py``
re-checks them on a subsample (~1.5M inputs per function).

Domain / special values (all handled branch-free with selects):
exp(-inf)=0, exp(+inf)=inf, exp(nan)=nan, overflow -> inf, underflow ->
correctly scaled denormals then 0 (like numpy); expm1(-inf)=-1, expm1(±0)=±0;
log(0)=-inf, log(<0)=nan, log(inf)=inf, denormal inputs exact-scaled;
log1p(-1)=-inf, log1p(<-1)=nan, log1p(±0)=±0; tanh(±inf)=±1, tanh(±0)=±0;
sigmoid(-inf)=0, sigmoid(inf)=1 (denormal results for very negative x);
erf(±inf)=±1, erf(±0)=±0; nan -> nan everywhere.

Polynomial coefficients were produced with a Remez exchange in 40-digit
mpmath (weighted for the final relative error; for the float32 sets the
coefficients were rounded to float32 one at a time, re-fitting the rest).
"""

import functools
import math

import numpy as np
from llvmlite import ir
from numba import config as _numba_config
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = [
    "exp_f32", "exp_f64", "expm1_f32", "expm1_f64",
    "log_f32", "log_f64", "log1p_f32", "log1p_f64",
    "tanh_f32", "tanh_f64", "sigmoid_f32", "sigmoid_f64",
    "erf_f32", "erf_f64", "maximum", "trip_count", "stream_copy", "store_fence", "div_exact",
    "div_invariant_f32", "div_invariant_f64", "add_reassoc",
    "VMATH", "VMATH_NAMES", "VMATH_MAX_ULP", "VMATH_METHOD", "vmath_name",
    "FASTMATH_FLAGS",
]

# Fast-math flags of the vmath functions themselves (FMA contraction only).
_OWN_FLAGS = {"contract"}

# The most a caller may use without changing these functions' results: everything except
# nnan/ninf (the kernels use none, see codegen.emit.FASTMATH).
FASTMATH_FLAGS = {"contract", "arcp", "nsz", "afn", "reassoc"}  # do not mutate


def _vjit(fn):
    return njit(fastmath=_OWN_FLAGS, error_model="numpy", nogil=True, cache=True)(fn)


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


def _shifted_exponent(builder, t, ity):
    """n as an i32, from ``t = n + RND`` (the round-to-integer shifter's sum, exact for
    |n| < 2**(mantissa bits - 1)): the difference of the two bit patterns. Integer
    arithmetic only, so no float-to-int conversion, which LLVM leaves undefined (poison)
    for a NaN; a NaN's pattern gives some integer, and the scaled NaN stays NaN."""
    rnd = _RND_F32 if ity.width == 32 else _RND_F64
    pattern = int(rnd.view(np.int32 if ity.width == 32 else np.int64))
    k = builder.sub(builder.bitcast(t, ity), ir.Constant(ity, pattern))
    return k if ity.width == 32 else builder.trunc(k, ir.IntType(32))


@intrinsic
def _pow2_rnd(typingctx, t):
    """2.0**n for ``t = n + RND`` with n integral and the result normal (no range check)."""
    if _layout(t) is None:
        return None
    sig = t(t)

    def codegen(context, builder, signature, args):
        ity, mbits, bias, fty = _layout(signature.args[0])
        return _pow2_ir(builder, _shifted_exponent(builder, args[0], ity), ity, mbits, bias,
                        fty)

    return sig, codegen


@functools.cache
def _scalef() -> bool:
    """Whether Numba compiles for x86-64 with AVX-512F (its feature string, which honours
    NUMBA_CPU_FEATURES): there ldexp is one instruction."""
    import llvmlite.binding as ll
    from numba.core.codegen import get_host_cpu_features

    return (ll.get_process_triple().startswith("x86_64")
            and "+avx512f" in str(get_host_cpu_features()).split(","))


@intrinsic
def _ldexp_rnd(typingctx, p, t):
    """p * 2.0**n for ``t = n + RND``, n integral in [-2*bias+2, 2*bias].

    The scale is applied as two normal powers of two so that overflow gives
    inf and gradual underflow gives correctly rounded denormals. Where the target has
    AVX-512 it is LLVM's ldexp instead, one ``vscalefps``/``vscalefpd`` per vector in
    place of eight instructions, with the same single rounding (exp_f32 went from 0.36
    to 0.31 ns per element in cache); elsewhere LLVM would expand a vector ldexp.
    """
    if _layout(p) is None or t != p:
        return None
    sig = p(p, t)

    def codegen(context, builder, signature, args):
        ity, mbits, bias, fty = _layout(signature.args[0])
        i32 = ir.IntType(32)
        k = _shifted_exponent(builder, args[1], ity)
        if _scalef():
            name = f"llvm.ldexp.f{ity.width}.i32"
            fn = builder.module.globals.get(name) or ir.Function(
                builder.module, ir.FunctionType(fty, [fty, i32]), name)
            return builder.call(fn, [args[0], k])
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


@intrinsic
def maximum(typingctx, a, b):
    """max(a, b) as np.maximum computes it (NaN if either is NaN), for two floats of one type.

    Emitted as LLVM's ``llvm.maximum`` (IEEE 754-2019 maximum), which is associative and
    commutative with NaN propagating, so a running max over a loop (``m = maximum(m,
    x[i])``) vectorizes without ``nnan`` - a compare-select chain does not. Under the
    caller's ``nsz`` the order of -0.0 and +0.0 is unspecified, as in a numpy reduction.
    """
    if not isinstance(a, types.Float) or a != b:
        return None
    sig = a(a, b)

    def codegen(context, builder, signature, args):
        fty = args[0].type
        name = "llvm.maximum.f32" if isinstance(fty, ir.FloatType) else "llvm.maximum.f64"
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(fty, [fty, fty]),
                                            name)
        return builder.call(fn, args)

    return sig, codegen


@intrinsic
def trip_count(typingctx, n):
    """``n``, as a value LLVM cannot see through (an empty inline asm).

    For ``range(trip_count(1024))``: with a literal trip count LLVM vectorizes a row
    reduction and then unrolls it completely, into one chain of dependent adds or FMAs
    (latency-bound: layer_norm's variance pass); an unknown count keeps the vectorized
    loop with its interleaved partial accumulators.
    """
    if not isinstance(n, types.Integer):
        return None
    sig = types.int64(n)

    def codegen(context, builder, signature, args):
        value = context.cast(builder, args[0], signature.args[0], types.int64)
        fnty = ir.FunctionType(ir.IntType(64), [ir.IntType(64)])
        return builder.call(ir.InlineAsm(fnty, "", "=r,0"), [value])

    return sig, codegen


# Bytes per streaming store: one cache line, so each store writes a whole line.
_STREAM_BYTES = 64


def _count_loop(builder, start, stop, step, body, name):
    """``for i in range(start, stop, step): body(i)`` as LLVM IR (i64 counters)."""
    before = builder.block
    head = builder.append_basic_block(name + ".head")
    loop = builder.append_basic_block(name + ".body")
    done = builder.append_basic_block(name + ".done")
    builder.branch(head)
    builder.position_at_end(head)
    i = builder.phi(start.type)
    i.add_incoming(start, before)
    builder.cbranch(builder.icmp_signed("<", i, stop), loop, done)
    builder.position_at_end(loop)
    body(i)
    i.add_incoming(builder.add(i, ir.Constant(start.type, step)), builder.block)
    builder.branch(head)
    builder.position_at_end(done)


@intrinsic
def stream_copy(typingctx, dst, start, src, n):
    """``dst[start:start + n] = src[:n]`` with non-temporal (streaming) stores.

    For a kernel whose output is too large to stay in the cache: the kernel computes a
    row or chunk into a small buffer with its ordinary (vectorized) code, then streams it
    out. A non-temporal store writes a whole cache line to memory without first reading
    it (no read-for-ownership) and without evicting the kernel's inputs from the cache.
    LLVM does not vectorize a loop whose stores carry ``!nontemporal``, hence this copy
    of its own: scalar stores up to the first 64-byte boundary of ``dst`` (numpy's large
    arrays are only 16-byte aligned), then one 64-byte vector store per cache line
    (``vmovntps``/``vmovntdq``; split into halves or quarters without AVX-512), then the
    scalar tail. ``src`` is read with unaligned loads. No bounds checks: the caller
    keeps ``start + n <= len(dst)`` and ``n <= len(src)``. The stores are weakly
    ordered: call ``store_fence()`` before the kernel returns.
    """
    if not (isinstance(dst, types.Array) and isinstance(src, types.Array)
            and dst.ndim == 1 and src.ndim == 1 and dst.dtype == src.dtype
            and dst.layout == "C" and src.layout == "C" and dst.mutable
            and isinstance(start, types.Integer) and isinstance(n, types.Integer)):
        return None
    sig = types.none(dst, start, src, n)

    def codegen(context, builder, signature, args):
        dst_ty, start_ty, src_ty, n_ty = signature.args
        i64 = ir.IntType(64)
        dst_data = context.make_array(dst_ty)(context, builder, args[0]).data
        src_data = context.make_array(src_ty)(context, builder, args[2]).data
        first = context.cast(builder, args[1], start_ty, types.int64)
        count = context.cast(builder, args[3], n_ty, types.int64)
        out = builder.gep(dst_data, [first])
        elem = out.type.pointee
        size = context.get_abi_sizeof(elem)
        lanes = max(1, _STREAM_BYTES // size)
        vec_ptr = ir.VectorType(elem, lanes).as_pointer()

        def c64(v):
            return ir.Constant(i64, v)

        # Elements before the first 64-byte boundary (all of them when dst is not even
        # aligned to its element size, which numpy allows for a view of raw bytes).
        addr = builder.ptrtoint(out, i64)
        peel = builder.udiv(builder.and_(builder.sub(c64(0), addr), c64(_STREAM_BYTES - 1)),
                            c64(size))
        elem_aligned = builder.icmp_unsigned("==", builder.and_(addr, c64(size - 1)), c64(0))
        peel = builder.select(elem_aligned, peel, count)
        peel = builder.select(builder.icmp_signed("<", peel, count), peel, count)
        vec_end = builder.sub(count, builder.urem(builder.sub(count, peel), c64(lanes)))

        def scalar(i):
            builder.store(builder.load(builder.gep(src_data, [i])), builder.gep(out, [i]))

        nontemporal = builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)])

        def vector(i):
            value = builder.load(builder.bitcast(builder.gep(src_data, [i]), vec_ptr),
                                 align=size)
            store = builder.store(value, builder.bitcast(builder.gep(out, [i]), vec_ptr),
                                  align=lanes * size)
            store.set_metadata("nontemporal", nontemporal)

        _count_loop(builder, c64(0), peel, 1, scalar, "stream.peel")
        _count_loop(builder, peel, vec_end, lanes, vector, "stream.lines")
        _count_loop(builder, vec_end, count, 1, scalar, "stream.tail")
        return context.get_dummy_value()

    return sig, codegen


def _is_x86() -> bool:
    import llvmlite.binding as llvm
    return llvm.get_process_triple().split("-")[0] in ("x86_64", "i386", "i686")


@intrinsic
def store_fence(typingctx):
    """Order this thread's earlier ``stream_copy`` stores before its later stores
    (``sfence`` on x86; a full fence elsewhere). A kernel calls it once, after its last
    ``stream_copy``: non-temporal stores are weakly ordered, and another thread (the
    caller after a parallel region) must see all of them."""
    sig = types.none()

    def codegen(context, builder, signature, args):
        if _is_x86():
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse.sfence")
            builder.call(fn, [])
        else:
            builder.fence("seq_cst")
        return context.get_dummy_value()

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
_EM1_TCLAMP_F32 = _RND_F32 + _EM1_NCLAMP_F32   # the same clamp, on n + RND (exact)
_EM1_TCLAMP_F64 = _RND_F64 + _EM1_NCLAMP_F64

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

_TANH_TINY_F32 = _F(2.0 ** -13)
_TANH_LO_F32 = _F(-20.0)          # expm1(-20) rounds to -1 -> tanh = 1
_TANH_TINY_F64 = _D(2.0 ** -28)
_TANH_LO_F64 = _D(-40.0)          # expm1(-40) rounds to -1 -> tanh = 1

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


# ---------------------------------------------------------------------------
# exact division
# ---------------------------------------------------------------------------

@_vjit
def div_exact(a, b):
    """a / b, correctly rounded, in a kernel compiled with 'arcp'.

    Under 'arcp' LLVM turns ``x / sqrt(y)`` into an estimate of 1/sqrt(y) (``vrsqrt14ps``)
    refined by a Newton step, which gives NaN for y = 0 and y = inf, where numpy (eager)
    gives inf and 0. Inlined, this division keeps this function's own flags (no 'arcp'),
    so it stays a division. (Kernels no longer use 'arcp': see codegen.emit.FASTMATH.)
    """
    _always_inline()
    return a / b


_F32_SMALL, _F32_LARGE = np.float32(2.0 ** -64), np.float32(2.0 ** 64)
_F64_SMALL, _F64_LARGE = 2.0 ** -512, 2.0 ** 512


@_vjit
def div_invariant_f32(x, d):
    """x / d as two multiplications, for a divisor `d` the caller's loop does not change.

    Inlined into a loop, everything but the two multiplications depends on `d` only, and
    LLVM computes it once, before the loop: a division per element costs softmax's last
    pass (x / its row's sum) more than the rest of it. The result differs from x / d in
    rounding only (two roundings), never in class: 1 / d alone overflows for a denormal
    d (x * (1 / d) is inf where x / d is finite) and loses precision for |d| near the
    largest float, so d is first scaled by a power of two s into a range whose reciprocal
    is normal, and x / d = (x * (1 / (d * s))) * s. d = ±0, ±inf and NaN give what the
    division gives (±inf, NaN at x = 0; ±0, NaN at x = ±inf; NaN), signs included.
    """
    _always_inline()
    a = abs(d)
    s = _F32_LARGE if a < _F32_SMALL else (_F32_SMALL if a > _F32_LARGE else np.float32(1))
    return (x * (np.float32(1) / (d * s))) * s


@_vjit
def div_invariant_f64(x, d):
    """div_invariant_f32 for float64."""
    _always_inline()
    a = abs(d)
    s = _F64_LARGE if a < _F64_SMALL else (_F64_SMALL if a > _F64_LARGE else 1.0)
    return (x * (1.0 / (d * s))) * s


@intrinsic
def add_reassoc(typingctx, a, b):
    """a + b, an addition LLVM may reassociate with others like it, for running sums.

    A kernel's own arithmetic has no 'reassoc' (it let LLVM fold (x + inf) - inf to x,
    see codegen.emit.FASTMATH), but a loop-carried sum vectorizes only when its additions
    may be reordered: ``acc = add_reassoc(acc, x[i])`` puts the flag on that one
    instruction, so only the accumulation is reordered (into vector lanes), never the
    computation of its terms. Reordering a sum cannot change whether it is NaN (a NaN
    term, or +inf and -inf terms, make it NaN in any order) or which infinity it is;
    only whether finite partial sums overflow depends on the order, and numpy's pairwise
    order is not a loop's order either.
    """
    if not isinstance(a, types.Float) or a != b:
        return None
    sig = a(a, b)

    def codegen(context, builder, signature, args):
        # (Numba's fast-math pass leaves an instruction that has flags alone)
        return builder.fadd(args[0], args[1], flags=("reassoc",))

    return sig, codegen


# ---------------------------------------------------------------------------
# lookup tables for code generators
# ---------------------------------------------------------------------------

from .lower import VMATH_NAMES  # noqa: E402 - the table kernels' sources are written from

VMATH = {key: globals()[name] for key, name in VMATH_NAMES.items()}

# True when the function vectorizes inside a numba loop (False: libm call).
VMATH_VECTORIZES = {key: key != ("erf", "float64") for key in VMATH_NAMES}

VMATH_METHOD = {
    ("exp", "float32"): "Cody-Waite n*ln2, deg-7 minimax, 2^n scale (split, or vscalef)",
    ("exp", "float64"): "Cody-Waite n*ln2, deg-13 minimax, 2^n scale (split, or vscalef)",
    ("expm1", "float32"): "same reduction, 2^n*(e^r-1) + (2^n-1)",
    ("expm1", "float64"): "same reduction, 2^n*(e^r-1) + (2^n-1)",
    ("log", "float32"): "m*2^e, m in [sqrt.5,sqrt2), s=f/(2+f), 3-term R(s^2)",
    ("log", "float64"): "m*2^e, m in [sqrt.5,sqrt2), s=f/(2+f), 7-term R(s^2)",
    ("log1p", "float32"): "log kernel on 1+x with rounding correction c/(1+x)",
    ("log1p", "float64"): "log kernel on 1+x with rounding correction c/(1+x)",
    ("tanh", "float32"): "-em/(2+em), em = expm1(-2|x|)",
    ("tanh", "float64"): "-em/(2+em), em = expm1(-2|x|)",
    ("sigmoid", "float32"): "{1, e^-|x|} / (1 + e^-|x|)",
    ("sigmoid", "float64"): "{1, e^-|x|} / (1 + e^-|x|)",
    ("erf", "float32"): "|x|<=1: x+x P(x^2); else 1-exp(Q(|x|-1))",
    ("erf", "float64"): "libm math.erf (scalar, not vectorized)",
}

# Measured max error in ULP (see module docstring for the procedure).
VMATH_MAX_ULP = {
    ("exp", "float32"): 1.0,       # exhaustive
    ("exp", "float64"): 1.0,
    ("expm1", "float32"): 1.0,     # exhaustive
    ("expm1", "float64"): 2.0,
    ("log", "float32"): 1.0,       # exhaustive
    ("log", "float64"): 1.0,
    ("log1p", "float32"): 1.0,     # exhaustive
    ("log1p", "float64"): 1.0,
    ("tanh", "float32"): 2.0,      # exhaustive
    ("tanh", "float64"): 3.0,
    ("sigmoid", "float32"): 2.0,   # exhaustive
    ("sigmoid", "float64"): 2.0,
    ("erf", "float32"): 1.0,       # exhaustive
    ("erf", "float64"): 1.0,       # libm (glibc), vs mpmath
}


def vmath_name(op, dtype):
    """Importable name (in ``codegen.vmath``) for op on dtype, or None."""
    return VMATH_NAMES.get((op, np.dtype(dtype).name))


# With NUMBA_DISABLE_JIT=1 (debugging generated kernels as plain Python, see README) the
# llvmlite intrinsics above cannot run: use scalar reference implementations instead.
if _numba_config.DISABLE_JIT:  # pragma: no cover - exercised by a subprocess test
    import math as _math

    def _py(fn, dtype):
        def scalar(x):
            with np.errstate(all="ignore"):
                return dtype(fn(float(x)))
        return scalar

    def _py_exp(v):
        try:
            return _math.exp(v)
        except OverflowError:
            return _math.inf

    def _py_expm1(v):
        try:
            return _math.expm1(v)
        except OverflowError:
            return _math.inf

    def _py_log(v):
        if v != v or v < 0:
            return _math.nan
        return -_math.inf if v == 0 else _math.log(v)

    def _py_log1p(v):
        if v != v or v < -1:
            return _math.nan
        return -_math.inf if v == -1 else _math.log1p(v)

    def _py_sigmoid(v):
        if v != v:
            return v
        return 1.0 / (1.0 + _py_exp(-v))

    _PY = {"exp": _py_exp, "expm1": _py_expm1, "log": _py_log, "log1p": _py_log1p,
           "tanh": _math.tanh, "sigmoid": _py_sigmoid, "erf": _math.erf}
    for (_op, _dt), _name in VMATH_NAMES.items():
        globals()[_name] = _py(_PY[_op], np.float32 if _dt == "float32" else np.float64)
    VMATH = {key: globals()[name] for key, name in VMATH_NAMES.items()}

    def trip_count(n):  # the stand-in for the intrinsic
        return n

    def stream_copy(dst, start, src, n):  # plain stores stand in for streaming ones
        dst[start:start + n] = src[:n]

    def store_fence():
        pass

    def maximum(a, b):  # the scalar stand-in for the intrinsic
        if _math.isnan(a) or _math.isnan(b):
            return a + b  # NaN, of the operands' type
        return max(a, b)
