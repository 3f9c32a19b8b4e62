"""The llvmlite intrinsics vmath is built from: bit-level helpers (2^n scaling,
exponent split; all branch-free, vectorizable), `maximum`, `trip_count`, the
streaming stores, and `_vjit`, how every vmath function is compiled."""
import functools
import hashlib
from pathlib import Path
from types import FunctionType

import numpy as np
from llvmlite import ir
from numba import config as numba_config
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from .constants import _RND, _Twin

__all__ = ["FASTMATH_FLAGS", "hidden", "maximum", "store_fence", "stream_copy", "trip_count"]


# Fast-math flags of the vmath functions themselves (FMA contraction only).
_OWN_FLAGS = {"contract"}

# The most a caller may use without changing these functions' results: everything except
# nnan/ninf (the kernels use none, see codegen.emit.FASTMATH).
FASTMATH_FLAGS = {"contract", "arcp", "nsz", "afn", "reassoc"}  # do not mutate


def _vjit(fn):
    return _stamp_with_package(
        njit(fastmath=_OWN_FLAGS, error_model="numpy", nogil=True, cache=True)(fn))


def _twins(fn):
    """`fn`, one algorithm written once for float32 and float64, as the `_Twin` of two `_vjit`
    functions `<name>_f32` and `<name>_f64`: fn's code, in which each global name bound to a
    `_Twin` (a constant, or a function made here) reads the member of the function's dtype.
    So the float32 function reads float32 constants only and calls float32 functions (its
    LLVM IR holds no double operation), the float64 one the float64 members, from one
    text. Both live in fn's module under their own names at fn's lines (Numba's disk cache
    finds a function by file, name and line). A member reads the globals fn's module has
    when it is made: what it calls is defined above it."""
    members = []
    for dtype in _Twin._fields:
        env = dict(fn.__globals__)
        for name in fn.__code__.co_names:
            value = env.get(name)
            if isinstance(value, _Twin):
                env[name] = getattr(value, dtype)
            elif dtype == "f32" and isinstance(value, (float, np.float64)):
                raise TypeError(f"{fn.__qualname__} reads the float64 {name!r}: a float32 "
                                f"function reads float32 constants only (make it a _Twin)")
        member = FunctionType(fn.__code__, env, f"{fn.__name__}_{dtype}", fn.__defaults__,
                              fn.__closure__)
        member.__qualname__ = member.__name__
        member.__doc__ = fn.__doc__
        members.append(_vjit(member))
    return _Twin(*members)


@functools.cache
def _package_stamp() -> str:
    """A digest of the names and contents of codegen.vmath's source files."""
    h = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _stamp_with_package(disp):
    """Numba's disk cache of a function is fresh while the function's own file is unchanged
    (the index's source stamp): it does not look at the files of what the function calls
    or reads. vmath functions call the intrinsics and read the constants of other files
    here, so each function's stamp also covers the whole package: an edit of any vmath file
    compiles every vmath function afresh, as when vmath was one file. (Where Numba's cache
    is laid out otherwise, or off under NUMBA_DISABLE_JIT, the dispatcher is left as is.)"""
    cache_file = getattr(getattr(disp, "_cache", None), "_cache_file", None)
    if cache_file is not None and hasattr(cache_file, "_source_stamp"):
        cache_file._source_stamp = (cache_file._source_stamp, _package_stamp())
    return disp


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


if numba_config.DISABLE_JIT:  # pragma: no cover - exercised by a subprocess test
    # NUMBA_DISABLE_JIT=1 (debugging kernels as plain Python, see README): the vmath
    # functions marked with it (div_exact, div_invariant_*, floor_divide_float,
    # remainder_float, pow_uint64) run as Python, where an intrinsic cannot be called.
    def _always_inline():  # noqa: F811 - the stand-in for the intrinsic
        return None


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
    rnd = _RND.f32 if ity.width == 32 else _RND.f64
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
def _clear_low_half(typingctx, x):
    """x with the low bits of its significand cleared (float32: 12 of 23, float64: 32 of
    52), truncating toward zero: a head of 12 or 21 significant bits, whose product with a
    constant of 12 or 32 significant bits is exact (log2/log10's hi/lo splits)."""
    if _layout(x) is None:
        return None
    sig = x(x)

    def codegen(context, builder, signature, args):
        ity, mbits, bias, fty = _layout(signature.args[0])
        low = 12 if ity.width == 32 else 32
        mask = ((1 << ity.width) - 1) ^ ((1 << low) - 1)
        bits = builder.and_(builder.bitcast(args[0], ity), ir.Constant(ity, mask))
        return builder.bitcast(bits, fty)

    return sig, codegen


@intrinsic
def maximum(typingctx, a, b):
    """max(a, b) as np.maximum computes it (NaN if either is NaN), for two floats of one type.

    Emitted as LLVM's ``llvm.maximum`` (IEEE 754-2019 maximum), which is associative and
    commutative with NaN propagating, so a running max over a loop (``m = maximum(m,
    x[i])``) vectorizes without ``nnan`` - a compare-select chain does not. The call
    carries ``nsz``: which of -0.0 and +0.0 it returns for the pair is unspecified, as in
    a numpy reduction (np.max([-0., 0.]) is 0.0, np.max([0., -0.]) is -0.0). Ordering the
    zeros cost x86 a sign test and a blend per vector on the running max's dependency
    chain: the W9 masked softmax rows [4096, 64] 191 -> 127 us, its max pass alone
    107 -> 63 us.
    """
    if not isinstance(a, types.Float) or a != b:
        return None
    sig = a(a, b)

    def codegen(context, builder, signature, args):
        fty = args[0].type
        name = "llvm.maximum.f32" if isinstance(fty, ir.FloatType) else "llvm.maximum.f64"
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(fty, [fty, fty]),
                                            name)
        return builder.call(fn, args, fastmath=("nsz",))

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


@intrinsic
def hidden(typingctx, x):
    """The float ``x``, as a value LLVM cannot see through (an empty inline asm), for a
    constant a kernel reads once before its loops (``_o0 = hidden(_c0)``).

    A row kernel's masked maximum, ``m = maximum(m, x if keep else -inf)``, is folded by
    LLVM (-inf is maximum's identity) into ``m = maximum(m, x) if keep else m``, a
    conditional running maximum it does not vectorize: W9's causal softmax spent 1.3 ms
    of its 1.4 in that loop. With the fill value hidden the select stays a select and the
    loop vectorizes (0.06 ms); the values are the same.
    """
    if not isinstance(x, types.Float):
        return None
    sig = x(x)

    def codegen(context, builder, signature, args):
        fty = args[0].type
        return builder.call(ir.InlineAsm(ir.FunctionType(fty, [fty]), "", "=x,0"), [args[0]])

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

