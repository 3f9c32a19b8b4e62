"""The float32 matrix-product kernel's Numba side (codegen.gemm is the Python side and the
rule that picks it): a micro-kernel written as LLVM IR, and the loops over blocks of C that
call it, in one variant per instruction set (`VARIANTS`): "avx512" (16-float zmm vectors,
8 x 32 blocks of C) and "avx2" (8-float ymm vectors with FMA3, 6 x 16 blocks). Imported
only by the generated modules that call it (it imports Numba); `product_blocks` is the
host's variant (codegen.gemm.host_isa), `product_blocks_avx512` / `product_blocks_avx2`
name one.

The micro-kernel keeps an MR x NR block of C in MR*NR/lanes vector registers and, for each
k, broadcasts MR elements of A and multiplies them with the NR/lanes vectors of B through
`llvm.fma`: explicit FMAs and no fast-math flags, so NaN and inf propagate as in any IEEE
product, and the only difference from BLAS is the order of the sums (each element is a
dot product accumulated in k order, in blocks of KC). A is read in place with any strides
(x.T views included), B in place when its rows are contiguous (else copied into a scratch
buffer the caller gives), C needs unit column stride; edge columns are loaded and stored
under a lane mask, edge rows go through the MR = 4, 2, 1 kernels. Nothing is allocated.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from codegen import gemm as _gemm

# isa -> lanes (floats per vector), MR (rows of C per micro-kernel call), NR (its columns:
# two vectors), KC (k per pass over a block: longer sums gave larger rounding errors, no
# speed), MC (rows of A per block, kept in L2 while an NR-column panel of B sits in L1;
# a multiple of MR: `_pack_a` fills whole panels)
VARIANTS = {
    # 16 zmm accumulators, no spills (W9's shapes fastest; MR = 6 and 12 were slower)
    "avx512": dict(lanes=16, mr=8, nr=32, kc=256, mc=128, panels=False),
    # 12 ymm accumulators + 2 vectors of B + 1 broadcast of A in 16 registers
    # (`panels`: B copied into contiguous NR-column panels first, below)
    "avx2": dict(lanes=8, mr=6, nr=16, kc=256, mc=192, panels=True),
}
for _v in VARIANTS.values():   # (codegen.gemm sizes the scratch for a packed block of A)
    assert _v["mc"] % _v["mr"] == 0 and _v["mc"] * _v["kc"] <= _gemm.A_BLOCK

_F32 = ir.FloatType()
_I64 = ir.IntType(64)
_I32 = ir.IntType(32)


def _masked(builder, name, fnty):
    return cgutils.get_or_insert_function(builder.module, fnty, name)


def _vec(lanes: int):
    return ir.VectorType(_F32, lanes)


def _splat(builder, n_v, lanes: int):
    """<lanes x i64> of n (an i64) in every lane."""
    splat = builder.insert_element(ir.Constant(ir.VectorType(_I64, lanes), ir.Undefined),
                                   n_v, ir.Constant(_I32, 0))
    return builder.shuffle_vector(splat, ir.Constant(ir.VectorType(_I64, lanes),
                                                     ir.Undefined),
                                  ir.Constant(ir.VectorType(_I32, lanes), [0] * lanes))


def _lane_mask(builder, splat, lanes: int, first: int = 0):
    """<lanes x i1>: lane j set when first + j < n (`splat`: n in every lane)."""
    return builder.icmp_signed("<", ir.Constant(ir.VectorType(_I64, lanes),
                                                [first + j for j in range(lanes)]), splat)


def _masked_moves(builder, lanes: int):
    vec = _vec(lanes)
    vp, mask = vec.as_pointer(), ir.VectorType(ir.IntType(1), lanes)
    mload = _masked(builder, f"llvm.masked.load.v{lanes}f32.p0",
                    ir.FunctionType(vec, [vp, _I32, mask, vec]))
    mstore = _masked(builder, f"llvm.masked.store.v{lanes}f32.p0",
                     ir.FunctionType(ir.VoidType(), [vec, vp, _I32, mask]))
    return mload, mstore


def _make_ukernel(mr: int, lanes: int, nr: int):
    """ukernel(a, rsa, csa, b, rsb, kc, c, ldc, n, accumulate): for i < mr, j < n (<= nr):
    c[i*ldc + j] (+)= sum over k < kc of a[i*rsa + k*csa] * b[k*rsb + j]; a, b, c are
    addresses of float32 elements, strides in elements. Inlined where it is called (the
    AVX-512 variant's; `_make_ukernel_fn` is the AVX2 one's)."""
    nv = nr // lanes
    vec = _vec(lanes)

    @intrinsic
    def ukernel(typingctx, a, rsa, csa, b, rsb, kc, c, ldc, n, accumulate):
        sig = types.void(a, rsa, csa, b, rsb, kc, c, ldc, n, accumulate)

        def codegen(context, builder, signature, args):
            a_v, rsa_v, csa_v, b_v, rsb_v, kc_v, c_v, ldc_v, n_v, acc_v = args
            fp = _F32.as_pointer()
            vp = vec.as_pointer()
            a0 = builder.inttoptr(a_v, fp)
            b0 = builder.inttoptr(b_v, fp)
            c0 = builder.inttoptr(c_v, fp)
            fma = _masked(builder, f"llvm.fma.v{lanes}f32", ir.FunctionType(vec, [vec] * 3))
            mload, mstore = _masked_moves(builder, lanes)
            align = ir.Constant(_I32, 4)
            zero = ir.Constant(vec, None)
            # lane masks: lane j of vector v is column lanes*v + j, kept when < n
            nsplat = _splat(builder, n_v, lanes)
            masks = [_lane_mask(builder, nsplat, lanes, lanes * v) for v in range(nv)]
            # row addresses of A: base pointers and offsets, computed once
            rows = [builder.gep(a0, [builder.mul(rsa_v, ir.Constant(_I64, i))])
                    for i in range(mr)]
            pre = builder.block
            loop = builder.append_basic_block("uk.loop")
            body = builder.append_basic_block("uk.body")
            done = builder.append_basic_block("uk.done")
            builder.branch(loop)
            builder.position_at_end(loop)
            k = builder.phi(_I64)
            k.add_incoming(ir.Constant(_I64, 0), pre)
            accs = []
            for _ in range(mr * nv):
                p = builder.phi(vec)
                p.add_incoming(zero, pre)
                accs.append(p)
            builder.cbranch(builder.icmp_signed("<", k, kc_v), body, done)
            builder.position_at_end(body)
            bk = builder.gep(b0, [builder.mul(k, rsb_v)])
            koff = builder.mul(k, csa_v)
            bv = [builder.call(mload, [builder.bitcast(
                      builder.gep(bk, [ir.Constant(_I64, lanes * v)]), vp),
                      align, masks[v], zero])
                  for v in range(nv)]
            new = []
            for i in range(mr):
                x = builder.load(builder.gep(rows[i], [koff]), align=4)
                s = _broadcast(builder, x, lanes)
                for v in range(nv):
                    new.append(builder.call(fma, [s, bv[v], accs[i * nv + v]]))
            k.add_incoming(builder.add(k, ir.Constant(_I64, 1)), body)
            builder.branch(loop)
            for p, x in zip(accs, new):
                p.add_incoming(x, body)
            builder.position_at_end(done)
            add = builder.icmp_signed("!=", acc_v, ir.Constant(acc_v.type, 0))
            for i in range(mr):
                row = builder.gep(c0, [builder.mul(ldc_v, ir.Constant(_I64, i))])
                for v in range(nv):
                    ptr = builder.bitcast(builder.gep(row, [ir.Constant(_I64, lanes * v)]), vp)
                    val = accs[i * nv + v]
                    old = builder.call(mload, [ptr, align, masks[v], zero])
                    val = builder.select(add, builder.fadd(old, val), val)
                    builder.call(mstore, [val, ptr, align, masks[v]])
            return context.get_dummy_value()

        return sig, codegen

    return ukernel


def _broadcast(builder, x, lanes: int):
    s = builder.insert_element(ir.Constant(_vec(lanes), ir.Undefined), x, ir.Constant(_I32, 0))
    return builder.shuffle_vector(s, ir.Constant(_vec(lanes), ir.Undefined),
                                  ir.Constant(ir.VectorType(_I32, lanes), [0] * lanes))


class _LoopId(ir.values.MDValue):
    """A loop's metadata node: `distinct !{self, properties...}` (a loop id names itself;
    compared by identity, as its self-reference makes MDValue's operand equality recurse)."""
    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__

    def descr(self, buf):
        refs = ", ".join([self.get_reference()] + [op.get_reference() for op in self.operands])
        buf += (f"distinct !{{ {refs} }}", "\n")


def _no_unroll(module):
    """Loop metadata asking LLVM not to unroll the loop (unrolled by 2, the micro-kernel's
    loop spilled broadcasts of A to the stack; with `optsize` instead, it walked A's rows by
    a chain of six dependent adds per k)."""
    flag = module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")])
    return _LoopId(module, [flag], name=str(len(module.metadata)))


def _make_ukernel_fn(mr: int, lanes: int, nr: int):
    """`_make_ukernel`'s contract, as a call of a function of its own (noinline, one per
    module): the 12 accumulators, 2 vectors of B and the broadcast of A take all 16 ymm
    registers, and inlined into the loops around it the loop reloaded row addresses and
    strides from the stack at each k. Its loop walks pointers (no multiply per k) and has
    two copies: plain vector loads and stores when n == nr, masked ones for edge panels."""
    nv = nr // lanes
    vec = _vec(lanes)

    def body(builder, args):
        a_v, rsa_v, csa_v, b_v, rsb_v, kc_v, c_v, ldc_v, n_v, acc_v = args[:10]
        roff = args[10:]
        fp = _F32.as_pointer()
        vp = vec.as_pointer()
        a0 = builder.inttoptr(a_v, fp)
        b0 = builder.inttoptr(b_v, fp)
        c0 = builder.inttoptr(c_v, fp)
        fma = _masked(builder, f"llvm.fma.v{lanes}f32", ir.FunctionType(vec, [vec] * 3))
        mload, mstore = _masked_moves(builder, lanes)
        align = ir.Constant(_I32, 4)
        zero = ir.Constant(vec, None)
        # row i of A at step k: ak + roff[i], ak walking by csa; the offsets i*rsa come from
        # the caller as arguments (computed here, LLVM walked the rows by a chain of mr
        # dependent adds per k)
        full = builder.icmp_signed("==", n_v, ir.Constant(n_v.type, nr))
        fblock = builder.append_basic_block("uk.full")
        eblock = builder.append_basic_block("uk.edge")
        end = builder.append_basic_block("uk.end")
        builder.cbranch(full, fblock, eblock)
        for block, masked in ((fblock, False), (eblock, True)):
            builder.position_at_end(block)
            masks = None
            if masked:
                nsplat = _splat(builder, n_v, lanes)
                masks = [_lane_mask(builder, nsplat, lanes, lanes * v) for v in range(nv)]

            def load(ptr, v, masked=masked, masks=masks):
                if masked:
                    return builder.call(mload, [ptr, align, masks[v], zero])
                return builder.load(ptr, align=4)
            pre = builder.block
            loop = builder.append_basic_block("uk.loop")
            done = builder.append_basic_block("uk.done")
            builder.cbranch(builder.icmp_signed(">", kc_v, ir.Constant(_I64, 0)), loop, done)
            builder.position_at_end(loop)
            left = builder.phi(_I64)
            left.add_incoming(kc_v, pre)
            ak = builder.phi(fp)
            ak.add_incoming(a0, pre)
            bk = builder.phi(fp)
            bk.add_incoming(b0, pre)
            accs = []
            for _ in range(mr * nv):
                p = builder.phi(vec)
                p.add_incoming(zero, pre)
                accs.append(p)
            bv = [load(builder.bitcast(builder.gep(bk, [ir.Constant(_I64, lanes * v)]), vp), v)
                  for v in range(nv)]
            new = []
            for i in range(mr):
                s = _broadcast(builder, builder.load(builder.gep(ak, [roff[i]]), align=4),
                               lanes)
                for v in range(nv):
                    new.append(builder.call(fma, [s, bv[v], accs[i * nv + v]]))
            left2 = builder.sub(left, ir.Constant(_I64, 1))
            left.add_incoming(left2, loop)
            ak.add_incoming(builder.gep(ak, [csa_v]), loop)
            bk.add_incoming(builder.gep(bk, [rsb_v]), loop)
            for p, x in zip(accs, new):
                p.add_incoming(x, loop)
            latch = builder.cbranch(builder.icmp_signed(">", left2, ir.Constant(_I64, 0)), loop,
                                    done)
            latch.set_metadata("llvm.loop", _no_unroll(builder.module))
            builder.position_at_end(done)
            outs = []
            for p, x in zip(accs, new):
                phi = builder.phi(vec)
                phi.add_incoming(zero, pre)
                phi.add_incoming(x, loop)
                outs.append(phi)
            add = builder.icmp_signed("!=", acc_v, ir.Constant(acc_v.type, 0))
            for i in range(mr):
                row = builder.gep(c0, [builder.mul(ldc_v, ir.Constant(_I64, i))])
                for v in range(nv):
                    ptr = builder.bitcast(builder.gep(row, [ir.Constant(_I64, lanes * v)]), vp)
                    val = outs[i * nv + v]
                    val = builder.select(add, builder.fadd(load(ptr, v), val), val)
                    if masked:
                        builder.call(mstore, [val, ptr, align, masks[v]])
                    else:
                        builder.store(val, ptr, align=4)
            builder.branch(end)
        builder.position_at_end(end)

    @intrinsic
    def ukernel(typingctx, a, rsa, csa, b, rsb, kc, c, ldc, n, accumulate):
        sig = types.void(a, rsa, csa, b, rsb, kc, c, ldc, n, accumulate)

        def codegen(context, builder, signature, args):
            args = [builder.sext(x, _I64) if x.type.width < 64 else x for x in args]
            args += [builder.mul(args[1], ir.Constant(_I64, i)) for i in range(mr)]
            name = f"tracejit_gemm_uk{lanes}_{mr}x{nr}"
            fn = builder.module.globals.get(name)
            if fn is None:
                fn = ir.Function(builder.module,
                                 ir.FunctionType(ir.VoidType(), [_I64] * len(args)), name)
                fn.linkage = "internal"
                fn.attributes.add("noinline")
                fb = ir.IRBuilder(fn.append_basic_block("entry"))
                body(fb, fn.args)
                fb.ret_void()
            builder.call(fn, args)
            return context.get_dummy_value()

        return sig, codegen

    return ukernel


def _make_copy_lanes(lanes: int):
    @intrinsic
    def copy_lanes(typingctx, src, dst, n):
        """dst[j] = src[j] for j < n (<= lanes): float32 addresses, one masked vector move
        (the lanes past n are neither read nor written)."""
        sig = types.void(src, dst, n)

        def codegen(context, builder, signature, args):
            src_v, dst_v, n_v = args
            vp = _vec(lanes).as_pointer()
            mload, mstore = _masked_moves(builder, lanes)
            mask = _lane_mask(builder, _splat(builder, n_v, lanes), lanes)
            align = ir.Constant(_I32, 4)
            val = builder.call(mload, [builder.inttoptr(src_v, vp), align, mask,
                                       ir.Constant(_vec(lanes), None)])
            builder.call(mstore, [val, builder.inttoptr(dst_v, vp), align, mask])
            return context.get_dummy_value()

        return sig, codegen
    return copy_lanes
def _make_move(n: int):
    chunks = [1 << b for b in reversed(range(n.bit_length())) if n >> b & 1]

    @intrinsic
    def move(typingctx, src, dst):
        """dst[j] = src[j] for j < n: float32 addresses, unmasked vector moves (n = 6: one
        of 4 floats and one of 2; AVX2's masked moves, vmaskmovps, are slow stores)."""
        sig = types.void(src, dst)

        def codegen(context, builder, signature, args):
            start = 0
            for size in chunks:
                vp = _vec(size).as_pointer()
                src = builder.inttoptr(builder.add(args[0], ir.Constant(_I64, 4 * start)), vp)
                dst = builder.inttoptr(builder.add(args[1], ir.Constant(_I64, 4 * start)), vp)
                builder.store(builder.load(src, align=4), dst, align=4)
                start += size
            return context.get_dummy_value()

        return sig, codegen
    return move


def _make_prefetch(write: int):
    @intrinsic
    def prefetch(typingctx, address):
        """Ask for the cache line at `address` (llvm.prefetch: a hint, never a fault)."""
        sig = types.void(address)

        def codegen(context, builder, signature, args):
            ptr = ir.IntType(8).as_pointer()
            fn = _masked(builder, "llvm.prefetch.p0",
                         ir.FunctionType(ir.VoidType(), [ptr, _I32, _I32, _I32]))
            builder.call(fn, [builder.inttoptr(args[0], ptr), ir.Constant(_I32, write),
                              ir.Constant(_I32, 3), ir.Constant(_I32, 1)])
            return context.get_dummy_value()

        return sig, codegen
    return prefetch


_PREFETCH_R = _make_prefetch(0)
_PREFETCH_W = _make_prefetch(1)


@njit(inline="always")
def _prefetch_matrix(p, rows, cols, s0, s1, write):
    """Prefetch the lines of a rows x cols matrix at address p (strides in floats) when one
    of its axes is contiguous; else nothing."""
    if s1 == 1:
        lines, stride, count = (4 * cols + 63) // 64, s0, rows
    elif s0 == 1:
        lines, stride, count = (4 * rows + 63) // 64, s1, cols
    else:
        return
    for r in range(count):
        row = p + 4 * r * stride
        for ln in range(lines):
            if write:
                _PREFETCH_W(row + 64 * ln)
            else:
                _PREFETCH_R(row + 64 * ln)




def _make_transpose(lanes: int):
    rounds = lanes.bit_length() - 1
    vec = _vec(lanes)

    @intrinsic
    def transpose(typingctx, src, lds, dst, ldd):
        """dst[k * ldd + j] = src[j * lds + k] for j, k < lanes (float32 addresses, strides
        in floats): `lanes` row loads, log2(lanes) rounds of `lanes` two-vector shuffles
        (round b swaps bit b of the row and the lane index), `lanes` row stores. Values are
        moved, never computed."""
        sig = types.void(src, lds, dst, ldd)

        def codegen(context, builder, signature, args):
            src_v, lds_v, dst_v, ldd_v = args
            fp = _F32.as_pointer()
            vp = vec.as_pointer()
            s0 = builder.inttoptr(src_v, fp)
            d0 = builder.inttoptr(dst_v, fp)
            rows = [builder.load(builder.bitcast(
                        builder.gep(s0, [builder.mul(lds_v, ir.Constant(_I64, r))]), vp),
                        align=4)
                    for r in range(lanes)]
            for b in range(rounds):
                h = 1 << b
                low = [c if not c & h else lanes + c - h for c in range(lanes)]
                high = [c + h if not c & h else lanes + c for c in range(lanes)]
                new = list(rows)
                for r in range(lanes):
                    if r & h:
                        continue
                    x, y = rows[r], rows[r + h]
                    new[r] = builder.shuffle_vector(
                        x, y, ir.Constant(ir.VectorType(_I32, lanes), low))
                    new[r + h] = builder.shuffle_vector(
                        x, y, ir.Constant(ir.VectorType(_I32, lanes), high))
                rows = new
            for k in range(lanes):
                ptr = builder.gep(d0, [builder.mul(ldd_v, ir.Constant(_I64, k))])
                builder.store(rows[k], builder.bitcast(ptr, vp), align=4)
            return context.get_dummy_value()

        return sig, codegen
    return transpose


def _make_variant(isa: str) -> SimpleNamespace:
    """The loops of variant `isa` (VARIANTS) around its micro-kernels: `product_blocks`."""
    p = VARIANTS[isa]
    T, MR, NR, KC, MC, PANELS = (p[key] for key in ("lanes", "mr", "nr", "kc", "mc", "panels"))
    PANEL_MIN_ROWS = 8 * MR   # (fewer rows of C reuse a panel too little to pay its copy)
    make = _make_ukernel_fn if isa == "avx2" else _make_ukernel
    ukmr, uk4, uk2, uk1 = (make(mr, T, NR) for mr in (MR, 4, 2, 1))
    copy_lanes = _make_copy_lanes(T)
    transpose = _make_transpose(T)
    move = _make_move(NR)
    move_mr = _make_move(MR)
    EXACT_MOVES = isa == "avx2"   # (whole panels of A packed by unmasked moves)

    @njit(inline="always")
    def rows_(pa, sa0, sa1, pb, sb0, kc, pc_, ldc, m, n, acc):
        """C rows [0, m) of one NR-column panel: MR rows at a time, then 4, 2, 1."""
        i = 0
        while i + MR <= m:
            ukmr(pa + 4 * i * sa0, sa0, sa1, pb, sb0, kc, pc_ + 4 * i * ldc, ldc, n, acc)
            i += MR
        if i + 4 <= m:
            uk4(pa + 4 * i * sa0, sa0, sa1, pb, sb0, kc, pc_ + 4 * i * ldc, ldc, n, acc)
            i += 4
        if i + 2 <= m:
            uk2(pa + 4 * i * sa0, sa0, sa1, pb, sb0, kc, pc_ + 4 * i * ldc, ldc, n, acc)
            i += 2
        if i < m:
            uk1(pa + 4 * i * sa0, sa0, sa1, pb, sb0, kc, pc_ + 4 * i * ldc, ldc, n, acc)

    @njit(inline="always")
    def panel(pp, kc, i):
        """Address of row i of an A block packed by `pack_a`."""
        return pp + 4 * ((i // MR) * MR * kc + i % MR)

    @njit(inline="always")
    def rows_packed(pp, kc, pb, sb0, pc_, ldc, m, n, acc):
        """`rows_` for an A block packed by `pack_a` (row stride 1, k stride MR)."""
        i = 0
        while i + MR <= m:
            ukmr(panel(pp, kc, i), 1, MR, pb, sb0, kc, pc_ + 4 * i * ldc, ldc, n, acc)
            i += MR
        if i + 4 <= m:
            uk4(panel(pp, kc, i), 1, MR, pb, sb0, kc, pc_ + 4 * i * ldc, ldc, n, acc)
            i += 4
        if i + 2 <= m:
            uk2(panel(pp, kc, i), 1, MR, pb, sb0, kc, pc_ + 4 * i * ldc, ldc, n, acc)
            i += 2
        if i < m:
            uk1(panel(pp, kc, i), 1, MR, pb, sb0, kc, pc_ + 4 * i * ldc, ldc, n, acc)

    @njit(inline="always")
    def pack_a(pa, sa1, mc, kc, pp):
        """The block of mc rows x kc columns of a transposed A at address pa (unit row
        stride, column stride sa1 floats) into panels of MR rows at address pp, each k's MR
        elements side by side (a k stride of MR floats; a short last panel keeps the
        stride)."""
        for p in range(0, mc, MR):
            rows = min(MR, mc - p)
            src = pa + 4 * p
            dst = pp + 4 * p * kc
            if EXACT_MOVES and rows == MR:
                for k in range(kc):
                    move_mr(src + 4 * k * sa1, dst + 4 * k * MR)
                continue
            for k in range(kc):
                copy_lanes(src + 4 * k * sa1, dst + 4 * k * MR, rows)

    @njit(inline="always")
    def pack_panels(b, q1, q2, j0, j1, K, scratch):
        """Columns j0:j1 of B's matrix (q1, q2) into NR-column panels at the start of
        `scratch`: panel p (columns j0 + NR*p ...) at p*K*NR, its row k at + k*NR (a short
        last panel keeps the stride). Read in place, the rows of a panel of B are a row of B
        apart (2-4 KiB for W9's products): the 16 KiB the micro-kernel streams per call fall
        into a few L1 sets and come from L2 at each of the MC/MR calls that reuse them."""
        nn = j1 - j0
        sb0, sb1 = b.strides[2] // 4, b.strides[3] // 4
        pbq = np.int64(b.ctypes.data) + q1 * b.strides[0] + q2 * b.strides[1] + j0 * b.strides[3]
        pscr = np.int64(scratch.ctypes.data)
        done = 0      # (columns copied, and rows of them: the rest element by element)
        kdone = K
        if sb1 == 1:
            done = nn - nn % NR
            for jp in range(0, done, NR):
                for k in range(K):
                    move(pbq + 4 * (k * sb0 + jp), pscr + 4 * (jp * K + k * NR))
        elif sb0 == 1:  # (b.T of a row-major matrix: T x T blocks transposed in registers)
            done = nn - nn % T
            kdone = K - K % T
            for jb in range(0, done, T):
                dst = pscr + 4 * ((jb // NR) * K * NR + jb % NR)
                for kb in range(0, kdone, T):
                    transpose(pbq + jb * b.strides[3] + 4 * kb, sb1, dst + 4 * kb * NR, NR)
        for j in range(nn):
            base = (j // NR) * K * NR + j % NR
            for k in range(kdone if j < done else 0, K):
                scratch[base + k * NR] = b[q1, q2, k, j0 + j]

    @njit(inline="always")
    def product_blocks(a, b, c, scratch, b0, b1, i0, i1, j0, j1):
        """c[q, i0:i1, j0:j1] = a[q, i0:i1, :] @ b[q, :, j0:j1] for the matrices q in
        [b0, b1) of the stacks (4-D float32 arrays, q running over their first two axes in
        C order); c with unit stride along its last axis. A b without it (x.T,
        k.transpose(-2, -1)) is copied a matrix at a time into `scratch` (k * (j1 - j0)
        floats) first. A transposed a (x.T: unit row stride, as a weight gradient's
        x.T @ dy) is copied a block of MC x KC at a time into panels after it in `scratch`
        (MC * KC more floats) when B has at least two NR-column panels to reuse it: read in
        place, each k of a micro-kernel call touched another cache line of the strided A,
        at the same few cache sets (dW products 15-25% slower than with a row-major A)."""
        K = a.shape[3]
        nb2 = c.shape[1]
        sa0 = a.strides[2] // 4
        sa1 = a.strides[3] // 4
        ldc = c.strides[2] // 4
        packs = b.strides[3] != 4
        pack_a_ = sa0 == 1 and sa1 != 1 and j1 - j0 > NR and i1 - i0 >= MR
        nnp = -(-(j1 - j0) // NR) * NR
        panels = PANELS and i1 - i0 >= PANEL_MIN_ROWS \
            and scratch.size >= K * nnp + (MC * KC if pack_a_ else 0)
        pp = np.int64(scratch.ctypes.data) + 4 * (K * nnp if panels else
                                                  (K * (j1 - j0) if packs else 0))
        sb0_, sb1_ = b.strides[2] // 4, b.strides[3] // 4
        for q in range(b0, b1):
            q1 = q // nb2
            q2 = q - q1 * nb2
            pa = np.int64(a.ctypes.data) + q1 * a.strides[0] + q2 * a.strides[1]
            pc = np.int64(c.ctypes.data) + q1 * c.strides[0] + q2 * c.strides[1]
            if q + 1 < b1:  # (a stack of small matrices: the next one's lines are asked
                n1 = (q + 1) // nb2  # for now, as its strided rows are not prefetched)
                n2 = q + 1 - n1 * nb2
                _prefetch_matrix(np.int64(a.ctypes.data) + n1 * a.strides[0]
                                 + n2 * a.strides[1] + 4 * i0 * sa0, i1 - i0, K, sa0, sa1,
                                 False)
                _prefetch_matrix(np.int64(b.ctypes.data) + n1 * b.strides[0]
                                 + n2 * b.strides[1] + 4 * j0 * sb1_, K, j1 - j0, sb0_, sb1_,
                                 False)
                _prefetch_matrix(np.int64(c.ctypes.data) + n1 * c.strides[0]
                                 + n2 * c.strides[1] + 4 * (i0 * ldc + j0), i1 - i0, j1 - j0,
                                 ldc, 1, True)
            if K == 0:
                for i in range(i0, i1):
                    for j in range(j0, j1):
                        c[q1, q2, i, j] = np.float32(0)
                continue
            jmul = 1      # (the address of column jr of B's row pk: pb + 4*(pk*sb0 + jr*jmul))
            if panels:
                pack_panels(b, q1, q2, j0, j1, K, scratch)
                pb = np.int64(scratch.ctypes.data) - 4 * j0 * K
                sb0 = NR
                jmul = K
            elif packs:  # (T columns at a time: T rows of b.T read, T floats written per k;
                nn = j1 - j0  # 19x faster than a column at a time for W10's [128,512] w.T)
                bq = b[q1, q2, :, j0:j1]
                full = nn - nn % T
                kfull = K - K % T if b.strides[2] == 4 else 0
                pbq = np.int64(b.ctypes.data) + q1 * b.strides[0] + q2 * b.strides[1] \
                    + j0 * b.strides[3]
                pscr = np.int64(scratch.ctypes.data)
                for jb in range(0, full, T):
                    # (b.T of a row-major matrix, as w.T and k.transpose(-2, -1): T x T
                    # blocks transposed in registers, 4x faster than element by element)
                    for kb in range(0, kfull, T):
                        transpose(pbq + jb * b.strides[3] + 4 * kb, sb1_,
                                  pscr + 4 * (kb * nn + jb), nn)
                    for k in range(kfull, K):
                        for j in range(T):
                            scratch[k * nn + jb + j] = bq[k, jb + j]
                for k in range(K):
                    for j in range(full, nn):
                        scratch[k * nn + j] = bq[k, j]
                pb = np.int64(scratch.ctypes.data) - 4 * j0
                sb0 = nn
            else:
                pb = np.int64(b.ctypes.data) + q1 * b.strides[0] + q2 * b.strides[1]
                sb0 = b.strides[2] // 4
            for pk in range(0, K, KC):
                kc = min(KC, K - pk)
                acc = 1 if pk > 0 else 0
                for ic in range(i0, i1, MC):
                    mc = min(MC, i1 - ic)
                    if pack_a_:
                        pack_a(pa + 4 * (ic + pk * sa1), sa1, mc, kc, pp)
                        for jr in range(j0, j1, NR):
                            rows_packed(pp, kc, pb + 4 * (pk * sb0 + jr * jmul), sb0,
                                        pc + 4 * (ic * ldc + jr), ldc, mc, min(NR, j1 - jr),
                                        acc)
                        continue
                    for jr in range(j0, j1, NR):
                        n = min(NR, j1 - jr)
                        rows_(pa + 4 * (ic * sa0 + pk * sa1), sa0, sa1,
                              pb + 4 * (pk * sb0 + jr * jmul), sb0, kc,
                              pc + 4 * (ic * ldc + jr), ldc, mc, n, acc)

    return SimpleNamespace(product_blocks=product_blocks, **p)


_VARIANTS = {isa: _make_variant(isa) for isa in VARIANTS}
product_blocks_avx512 = _VARIANTS["avx512"].product_blocks
product_blocks_avx2 = _VARIANTS["avx2"].product_blocks
# the host's variant (what codegen.gemm's rule uses here; AVX-512's where neither is
# supported: LLVM splits its vectors, and the rule keeps numpy's BLAS there)
product_blocks = _VARIANTS[_gemm.host_isa() or "avx512"].product_blocks
