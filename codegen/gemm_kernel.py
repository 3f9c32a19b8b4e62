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
    "avx512": dict(lanes=16, mr=8, nr=32, kc=256, mc=128),
    # 12 ymm accumulators + 2 vectors of B + 1 broadcast of A in 16 registers
    "avx2": dict(lanes=8, mr=6, nr=16, kc=256, mc=120),
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


def _make_ukernel(mr: int, lanes: int, nr: int, unmasked_full: bool):
    """ukernel(a, rsa, csa, b, rsb, kc, c, ldc, n, accumulate): for i < mr, j < n (<= nr):
    c[i*ldc + j] (+)= sum over k < kc of a[i*rsa + k*csa] * b[k*rsb + j]; a, b, c are
    addresses of float32 elements, strides in elements. With `unmasked_full`, a call with
    n == nr runs a copy of the loop with plain vector loads and stores (AVX2's masked moves,
    vmaskmovps, cost more than plain ones and cannot be an FMA's memory operand; AVX-512's
    masked moves cost nothing extra, so its kernel has one loop)."""
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

            def load(ptr, v, masked):
                if masked:
                    return builder.call(mload, [ptr, align, masks[v], zero])
                return builder.load(ptr, align=4)

            def block(masked, tag):
                """The loop over k and the write of C, from the current basic block."""
                pre = builder.block
                loop = builder.append_basic_block(f"uk.loop{tag}")
                body = builder.append_basic_block(f"uk.body{tag}")
                done = builder.append_basic_block(f"uk.done{tag}")
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
                bv = [load(builder.bitcast(builder.gep(bk, [ir.Constant(_I64, lanes * v)]), vp),
                           v, masked) for v in range(nv)]
                new = []
                for i in range(mr):
                    x = builder.load(builder.gep(rows[i], [koff]), align=4)
                    s = builder.insert_element(ir.Constant(vec, ir.Undefined), x,
                                               ir.Constant(_I32, 0))
                    s = builder.shuffle_vector(s, ir.Constant(vec, ir.Undefined),
                                               ir.Constant(ir.VectorType(_I32, lanes),
                                                           [0] * lanes))
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
                        ptr = builder.bitcast(builder.gep(row, [ir.Constant(_I64, lanes * v)]),
                                              vp)
                        val = accs[i * nv + v]
                        old = load(ptr, v, masked)
                        val = builder.select(add, builder.fadd(old, val), val)
                        if masked:
                            builder.call(mstore, [val, ptr, align, masks[v]])
                        else:
                            builder.store(val, ptr, align=4)

            if not unmasked_full:
                block(True, "")
                return context.get_dummy_value()
            full = builder.append_basic_block("uk.full")
            edge = builder.append_basic_block("uk.edge")
            end = builder.append_basic_block("uk.end")
            builder.cbranch(builder.icmp_signed("==", n_v, ir.Constant(n_v.type, nr)),
                            full, edge)
            for target, masked in ((full, False), (edge, True)):
                builder.position_at_end(target)
                block(masked, ".m" if masked else ".f")
                builder.branch(end)
            builder.position_at_end(end)
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
    T, MR, NR, KC, MC = p["lanes"], p["mr"], p["nr"], p["kc"], p["mc"]
    ukmr, uk4, uk2, uk1 = (_make_ukernel(mr, T, NR, isa == "avx2") for mr in (MR, 4, 2, 1))
    copy_lanes = _make_copy_lanes(T)
    transpose = _make_transpose(T)

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
            for k in range(kc):
                copy_lanes(src + 4 * k * sa1, dst + 4 * k * MR, rows)

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
        pp = np.int64(scratch.ctypes.data) + 4 * (K * (j1 - j0) if packs else 0)
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
            if packs:  # (T columns at a time: T rows of b.T read, T floats written per k;
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
                            rows_packed(pp, kc, pb + 4 * (pk * sb0 + jr), sb0,
                                        pc + 4 * (ic * ldc + jr), ldc, mc, min(NR, j1 - jr),
                                        acc)
                        continue
                    for jr in range(j0, j1, NR):
                        n = min(NR, j1 - jr)
                        rows_(pa + 4 * (ic * sa0 + pk * sa1), sa0, sa1,
                              pb + 4 * (pk * sb0 + jr), sb0, kc,
                              pc + 4 * (ic * ldc + jr), ldc, mc, n, acc)

    return SimpleNamespace(product_blocks=product_blocks, **p)


_VARIANTS = {isa: _make_variant(isa) for isa in VARIANTS}
product_blocks_avx512 = _VARIANTS["avx512"].product_blocks
product_blocks_avx2 = _VARIANTS["avx2"].product_blocks
# the host's variant (what codegen.gemm's rule uses here; AVX-512's where neither is
# supported: LLVM splits its vectors, and the rule keeps numpy's BLAS there)
product_blocks = _VARIANTS[_gemm.host_isa() or "avx512"].product_blocks
