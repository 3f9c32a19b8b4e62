"""The float32 matrix-product kernel's Numba side (codegen.gemm is the Python side and the
rule that picks it): an AVX-512 micro-kernel written as LLVM IR, and the loops over blocks
of C that call it. Imported only by the generated module codegen.gemm compiles (it imports
Numba).

The micro-kernel keeps an MR x 32 block of C in 2*MR <16 x float> registers and, for each
k, broadcasts MR elements of A and multiplies them with two 16-float vectors of B through
`llvm.fma.v16f32`: explicit FMAs and no fast-math flags, so NaN and inf propagate as in
any IEEE product, and the only difference from BLAS is the order of the sums (each
element is a dot product accumulated in k order, in blocks of KC). A is read in place with
any strides (x.T views included), B in place when its rows are contiguous (else copied
into a scratch buffer the caller gives), C needs unit column stride; edge columns are
loaded and stored under a lane mask, edge rows go through the MR = 4, 2, 1 kernels.
Nothing is allocated.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

MR = 8      # rows of C per micro-kernel call (16 accumulators: no spills, W9's shapes fastest)
NR = 32     # columns of C per call: two zmm vectors
KC = 256    # k per pass over a block (longer sums gave larger rounding errors, no speed)
MC = 128    # rows of A per block (kept in L2 while a 32-column panel of B sits in L1)

_F32 = ir.FloatType()
_I64 = ir.IntType(64)
_I32 = ir.IntType(32)
_VEC = ir.VectorType(_F32, 16)
_MASK = ir.VectorType(ir.IntType(1), 16)


def _masked(builder, name, fnty):
    return cgutils.get_or_insert_function(builder.module, fnty, name)


def _make_ukernel(mr: int):
    """ukernel(a, rsa, csa, b, rsb, kc, c, ldc, n, accumulate): for i < mr, j < n (<= 32):
    c[i*ldc + j] (+)= sum over k < kc of a[i*rsa + k*csa] * b[k*rsb + j]; a, b, c are
    addresses of float32 elements, strides in elements."""
    nv = NR // 16

    @intrinsic
    def ukernel(typingctx, a, rsa, csa, b, rsb, kc, c, ldc, n, accumulate):
        sig = types.void(a, rsa, csa, b, rsb, kc, c, ldc, n, accumulate)

        def codegen(context, builder, signature, args):
            a_v, rsa_v, csa_v, b_v, rsb_v, kc_v, c_v, ldc_v, n_v, acc_v = args
            fp = _F32.as_pointer()
            vp = _VEC.as_pointer()
            a0 = builder.inttoptr(a_v, fp)
            b0 = builder.inttoptr(b_v, fp)
            c0 = builder.inttoptr(c_v, fp)
            fma = _masked(builder, "llvm.fma.v16f32", ir.FunctionType(_VEC, [_VEC] * 3))
            mload = _masked(builder, "llvm.masked.load.v16f32.p0",
                            ir.FunctionType(_VEC, [vp, _I32, _MASK, _VEC]))
            mstore = _masked(builder, "llvm.masked.store.v16f32.p0",
                             ir.FunctionType(ir.VoidType(), [_VEC, vp, _I32, _MASK]))
            align = ir.Constant(_I32, 4)
            zero = ir.Constant(_VEC, None)
            # lane masks: lane j of vector v is column 16*v + j, kept when < n
            nsplat = builder.insert_element(ir.Constant(ir.VectorType(_I64, 16), ir.Undefined),
                                            n_v, ir.Constant(_I32, 0))
            nsplat = builder.shuffle_vector(nsplat, ir.Constant(ir.VectorType(_I64, 16),
                                                                ir.Undefined),
                                            ir.Constant(ir.VectorType(_I32, 16), [0] * 16))
            masks = [builder.icmp_signed("<", ir.Constant(ir.VectorType(_I64, 16),
                                                          [16 * v + j for j in range(16)]),
                                         nsplat) for v in range(nv)]
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
                p = builder.phi(_VEC)
                p.add_incoming(zero, pre)
                accs.append(p)
            builder.cbranch(builder.icmp_signed("<", k, kc_v), body, done)
            builder.position_at_end(body)
            bk = builder.gep(b0, [builder.mul(k, rsb_v)])
            koff = builder.mul(k, csa_v)
            bv = [builder.call(mload, [builder.bitcast(builder.gep(bk, [ir.Constant(_I64, 16 * v)]),
                                                       vp), align, masks[v], zero])
                  for v in range(nv)]
            new = []
            for i in range(mr):
                x = builder.load(builder.gep(rows[i], [koff]), align=4)
                s = builder.insert_element(ir.Constant(_VEC, ir.Undefined), x,
                                           ir.Constant(_I32, 0))
                s = builder.shuffle_vector(s, ir.Constant(_VEC, ir.Undefined),
                                           ir.Constant(ir.VectorType(_I32, 16), [0] * 16))
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
                    ptr = builder.bitcast(builder.gep(row, [ir.Constant(_I64, 16 * v)]), vp)
                    val = accs[i * nv + v]
                    old = builder.call(mload, [ptr, align, masks[v], zero])
                    val = builder.select(add, builder.fadd(old, val), val)
                    builder.call(mstore, [val, ptr, align, masks[v]])
            return context.get_dummy_value()

        return sig, codegen

    return ukernel


@intrinsic
def _copy_lanes(typingctx, src, dst, n):
    """dst[j] = src[j] for j < n (<= 16): float32 addresses, one masked vector move (the
    lanes past n are neither read nor written)."""
    sig = types.void(src, dst, n)

    def codegen(context, builder, signature, args):
        src_v, dst_v, n_v = args
        vp = _VEC.as_pointer()
        mload = _masked(builder, "llvm.masked.load.v16f32.p0",
                        ir.FunctionType(_VEC, [vp, _I32, _MASK, _VEC]))
        mstore = _masked(builder, "llvm.masked.store.v16f32.p0",
                         ir.FunctionType(ir.VoidType(), [_VEC, vp, _I32, _MASK]))
        lanes = ir.VectorType(_I64, 16)
        nsplat = builder.insert_element(ir.Constant(lanes, ir.Undefined), n_v,
                                        ir.Constant(_I32, 0))
        nsplat = builder.shuffle_vector(nsplat, ir.Constant(lanes, ir.Undefined),
                                        ir.Constant(ir.VectorType(_I32, 16), [0] * 16))
        mask = builder.icmp_signed("<", ir.Constant(lanes, list(range(16))), nsplat)
        align = ir.Constant(_I32, 4)
        val = builder.call(mload, [builder.inttoptr(src_v, vp), align, mask,
                                   ir.Constant(_VEC, None)])
        builder.call(mstore, [val, builder.inttoptr(dst_v, vp), align, mask])
        return context.get_dummy_value()

    return sig, codegen


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


@intrinsic
def _transpose16(typingctx, src, lds, dst, ldd):
    """dst[k * ldd + j] = src[j * lds + k] for j, k < 16 (float32 addresses, strides in
    floats): 16 row loads, four rounds of 16 two-vector shuffles (round b swaps bit b of
    the row and the lane index), 16 row stores. Values are moved, never computed."""
    sig = types.void(src, lds, dst, ldd)

    def codegen(context, builder, signature, args):
        src_v, lds_v, dst_v, ldd_v = args
        fp = _F32.as_pointer()
        vp = _VEC.as_pointer()
        s0 = builder.inttoptr(src_v, fp)
        d0 = builder.inttoptr(dst_v, fp)
        rows = [builder.load(builder.bitcast(
                    builder.gep(s0, [builder.mul(lds_v, ir.Constant(_I64, r))]), vp), align=4)
                for r in range(16)]
        for b in range(4):
            h = 1 << b
            low = [c if not c & h else 16 + c - h for c in range(16)]
            high = [c + h if not c & h else 16 + c for c in range(16)]
            new = list(rows)
            for r in range(16):
                if r & h:
                    continue
                x, y = rows[r], rows[r + h]
                new[r] = builder.shuffle_vector(x, y, ir.Constant(ir.VectorType(_I32, 16), low))
                new[r + h] = builder.shuffle_vector(x, y,
                                                    ir.Constant(ir.VectorType(_I32, 16), high))
            rows = new
        for k in range(16):
            ptr = builder.gep(d0, [builder.mul(ldd_v, ir.Constant(_I64, k))])
            builder.store(rows[k], builder.bitcast(ptr, vp), align=4)
        return context.get_dummy_value()

    return sig, codegen


_UK8 = _make_ukernel(8)
_UK4 = _make_ukernel(4)
_UK2 = _make_ukernel(2)
_UK1 = _make_ukernel(1)


@njit(inline="always")
def _rows(pa, sa0, sa1, pb, sb0, kc, pc_, ldc, m, n, acc):
    """C rows [0, m) of one 32-column panel: MR rows at a time, then 4, 2, 1."""
    i = 0
    while i + MR <= m:
        _UK8(pa + 4 * i * sa0, sa0, sa1, pb, sb0, kc, pc_ + 4 * i * ldc, ldc, n, acc)
        i += MR
    if i + 4 <= m:
        _UK4(pa + 4 * i * sa0, sa0, sa1, pb, sb0, kc, pc_ + 4 * i * ldc, ldc, n, acc)
        i += 4
    if i + 2 <= m:
        _UK2(pa + 4 * i * sa0, sa0, sa1, pb, sb0, kc, pc_ + 4 * i * ldc, ldc, n, acc)
        i += 2
    if i < m:
        _UK1(pa + 4 * i * sa0, sa0, sa1, pb, sb0, kc, pc_ + 4 * i * ldc, ldc, n, acc)


@njit(inline="always")
def _panel(pp, kc, i):
    """Address of row i of an A block packed by `_pack_a`."""
    return pp + 4 * ((i // MR) * MR * kc + i % MR)


@njit(inline="always")
def _rows_packed(pp, kc, pb, sb0, pc_, ldc, m, n, acc):
    """`_rows` for an A block packed by `_pack_a` (row stride 1, k stride MR)."""
    i = 0
    while i + MR <= m:
        _UK8(_panel(pp, kc, i), 1, MR, pb, sb0, kc, pc_ + 4 * i * ldc, ldc, n, acc)
        i += MR
    if i + 4 <= m:
        _UK4(_panel(pp, kc, i), 1, MR, pb, sb0, kc, pc_ + 4 * i * ldc, ldc, n, acc)
        i += 4
    if i + 2 <= m:
        _UK2(_panel(pp, kc, i), 1, MR, pb, sb0, kc, pc_ + 4 * i * ldc, ldc, n, acc)
        i += 2
    if i < m:
        _UK1(_panel(pp, kc, i), 1, MR, pb, sb0, kc, pc_ + 4 * i * ldc, ldc, n, acc)


@njit(inline="always")
def _pack_a(pa, sa1, mc, kc, pp):
    """The block of mc rows x kc columns of a transposed A at address pa (unit row stride,
    column stride sa1 floats) into panels of MR rows at address pp, each k's MR elements
    side by side (a k stride of MR floats; a short last panel keeps the stride)."""
    for p in range(0, mc, MR):
        rows = min(MR, mc - p)
        src = pa + 4 * p
        dst = pp + 4 * p * kc
        for k in range(kc):
            _copy_lanes(src + 4 * k * sa1, dst + 4 * k * MR, rows)


@njit(inline="always")
def product_blocks(a, b, c, scratch, b0, b1, i0, i1, j0, j1):
    """c[q, i0:i1, j0:j1] = a[q, i0:i1, :] @ b[q, :, j0:j1] for the matrices q in [b0, b1)
    of the stacks (4-D float32 arrays, q running over their first two axes in C order);
    c with unit stride along its last axis. A b without it (x.T, k.transpose(-2, -1)) is
    copied a matrix at a time into `scratch` (k * (j1 - j0) floats) first. A transposed
    a (x.T: unit row stride, as a weight gradient's x.T @ dy) is copied a block of MC x KC
    at a time into panels after it in `scratch` (MC * KC more floats) when B has at least
    two 32-column panels to reuse it: read in place, each k of a micro-kernel call touched
    another cache line of the strided A, at the same few cache sets (dW products 15-25%
    slower than with a row-major A)."""
    K = a.shape[3]
    nb2 = c.shape[1]
    sa0 = a.strides[2] // 4
    sa1 = a.strides[3] // 4
    ldc = c.strides[2] // 4
    packs = b.strides[3] != 4
    pack_a = sa0 == 1 and sa1 != 1 and j1 - j0 > NR and i1 - i0 >= MR
    pp = np.int64(scratch.ctypes.data) + 4 * (K * (j1 - j0) if packs else 0)
    sb0_, sb1_ = b.strides[2] // 4, b.strides[3] // 4
    for q in range(b0, b1):
        q1 = q // nb2
        q2 = q - q1 * nb2
        pa = np.int64(a.ctypes.data) + q1 * a.strides[0] + q2 * a.strides[1]
        pc = np.int64(c.ctypes.data) + q1 * c.strides[0] + q2 * c.strides[1]
        if q + 1 < b1:  # (a stack of small matrices: the next one's lines are asked for
            n1 = (q + 1) // nb2  # now, as its strided rows are not prefetched by the CPU)
            n2 = q + 1 - n1 * nb2
            _prefetch_matrix(np.int64(a.ctypes.data) + n1 * a.strides[0] + n2 * a.strides[1]
                             + 4 * i0 * sa0, i1 - i0, K, sa0, sa1, False)
            _prefetch_matrix(np.int64(b.ctypes.data) + n1 * b.strides[0] + n2 * b.strides[1]
                             + 4 * j0 * sb1_, K, j1 - j0, sb0_, sb1_, False)
            _prefetch_matrix(np.int64(c.ctypes.data) + n1 * c.strides[0] + n2 * c.strides[1]
                             + 4 * (i0 * ldc + j0), i1 - i0, j1 - j0, ldc, 1, True)
        if K == 0:
            for i in range(i0, i1):
                for j in range(j0, j1):
                    c[q1, q2, i, j] = np.float32(0)
            continue
        if packs:  # (16 columns at a time: 16 rows of b.T read, 16 floats written per k;
            nn = j1 - j0  # 19x faster than a column at a time for W10's [128,512] w.T)
            bq = b[q1, q2, :, j0:j1]
            full = nn - nn % 16
            kfull = K - K % 16 if b.strides[2] == 4 else 0
            pbq = np.int64(b.ctypes.data) + q1 * b.strides[0] + q2 * b.strides[1] \
                + j0 * b.strides[3]
            pscr = np.int64(scratch.ctypes.data)
            for jb in range(0, full, 16):
                # (b.T of a row-major matrix, as w.T and k.transpose(-2, -1): 16 x 16
                # blocks transposed in registers, 4x faster than element by element)
                for kb in range(0, kfull, 16):
                    _transpose16(pbq + jb * b.strides[3] + 4 * kb, sb1_,
                                 pscr + 4 * (kb * nn + jb), nn)
                for k in range(kfull, K):
                    for j in range(16):
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
                if pack_a:
                    _pack_a(pa + 4 * (ic + pk * sa1), sa1, mc, kc, pp)
                    for jr in range(j0, j1, NR):
                        _rows_packed(pp, kc, pb + 4 * (pk * sb0 + jr), sb0,
                                     pc + 4 * (ic * ldc + jr), ldc, mc, min(NR, j1 - jr), acc)
                    continue
                for jr in range(j0, j1, NR):
                    n = min(NR, j1 - jr)
                    _rows(pa + 4 * (ic * sa0 + pk * sa1), sa0, sa1,
                          pb + 4 * (pk * sb0 + jr), sb0, kc,
                          pc + 4 * (ic * ldc + jr), ldc, mc, n, acc)
