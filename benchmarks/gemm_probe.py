"""Probe (issue 17, task gemm): can a float32 matrix product written in Numba with an
explicit AVX-512 micro-kernel beat numpy's OpenBLAS (Haswell kernels under
OPENBLAS_CORETYPE=Haswell) on W9's and W10's product shapes?

The micro-kernel is emitted as LLVM IR through numba.extending.intrinsic: an MR x NR block
of C kept in <16 x float> registers, a loop over k doing one broadcast of A times NR/16
vector loads of B per row (llvm.fma), over packed A (MR-row panels) and B (NR-column
panels). No fast-math flags at all: the FMAs are explicit, NaN/inf propagate.

    python -m benchmarks.gemm_probe [--threads] [--asm]
"""

from __future__ import annotations

import sys
import time

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

F32 = ir.FloatType()
I64 = ir.IntType(64)


def make_ukernel(MR: int, NR: int):
    """An intrinsic ukernel(ap, aoff, bp, boff, kc, c, coff, ldc, accumulate): C[coff + i*ldc
    + j] (+)= sum_k ap[aoff + k*MR + i] * bp[boff + k*NR + j] for i < MR, j < NR."""
    assert NR % 16 == 0
    NV = NR // 16
    VT = ir.VectorType(F32, 16)

    @intrinsic
    def ukernel(typingctx, ap, rsa, csa, bp, rsb, kc, c, ldc, accumulate):
        sig = types.void(ap, rsa, csa, bp, rsb, kc, c, ldc, accumulate)

        def codegen(context, builder, signature, args):
            ap_v, rsa_v, csa_v, bp_v, rsb_v, kc_v, c_v, ldc_v, acc_v = args
            fp = F32.as_pointer()
            a_data = builder.inttoptr(ap_v, fp)
            b_data = builder.inttoptr(bp_v, fp)
            c_data = builder.inttoptr(c_v, fp)
            a0, b0, c0 = a_data, b_data, c_data
            fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(VT, [VT, VT, VT]), "llvm.fma.v16f32")
            zero = ir.Constant(VT, None)
            pre = builder.block
            loop = builder.append_basic_block("uk.loop")
            body = builder.append_basic_block("uk.body")
            done = builder.append_basic_block("uk.done")
            builder.branch(loop)
            builder.position_at_end(loop)
            k = builder.phi(I64)
            k.add_incoming(ir.Constant(I64, 0), pre)
            accs = []
            for i in range(MR * NV):
                p = builder.phi(VT)
                p.add_incoming(zero, pre)
                accs.append(p)
            builder.cbranch(builder.icmp_signed("<", k, kc_v), body, done)
            builder.position_at_end(body)
            bk = builder.gep(b0, [builder.mul(k, rsb_v)])
            ak = builder.gep(a0, [builder.mul(k, csa_v)])
            bv = []
            for v in range(NV):
                ptr = builder.bitcast(builder.gep(bk, [ir.Constant(I64, 16 * v)]), VT.as_pointer())
                bv.append(builder.load(ptr, align=4))
            new = []
            for i in range(MR):
                a = builder.load(builder.gep(ak, [builder.mul(rsa_v, ir.Constant(I64, i))]), align=4)
                splat = builder.insert_element(ir.Constant(VT, ir.Undefined), a, ir.Constant(ir.IntType(32), 0))
                splat = builder.shuffle_vector(splat, ir.Constant(VT, ir.Undefined),
                                               ir.Constant(ir.VectorType(ir.IntType(32), 16), [0] * 16))
                for v in range(NV):
                    new.append(builder.call(fma, [splat, bv[v], accs[i * NV + v]]))
            k1 = builder.add(k, ir.Constant(I64, 1))
            builder.branch(loop)
            k.add_incoming(k1, body)
            for p, n in zip(accs, new):
                p.add_incoming(n, body)
            builder.position_at_end(done)
            do_acc = builder.icmp_signed("!=", acc_v, ir.Constant(acc_v.type, 0))
            for i in range(MR):
                row = builder.gep(c0, [builder.mul(ldc_v, ir.Constant(I64, i))])
                for v in range(NV):
                    ptr = builder.bitcast(builder.gep(row, [ir.Constant(I64, 16 * v)]), VT.as_pointer())
                    val = accs[i * NV + v]
                    with builder.if_then(do_acc):
                        builder.store(builder.fadd(builder.load(ptr, align=4), val), ptr, align=4)
                    with builder.if_then(builder.not_(do_acc)):
                        builder.store(val, ptr, align=4)
            return context.get_dummy_value()

        return sig, codegen

    return ukernel


def make_gemm(MR=8, NR=32, KC=256, MC=128, parallel=False, PACKA=False, NOPACKB=True):
    uk = make_ukernel(MR, NR)
    NC = 4096

    @njit(inline="always")
    def pack_a(A, ic, mc, pc, kc, out):
        # panels of MR rows: out[ir*kc + k*MR + i] = A[ic+ir+i, pc+k], zero padded
        for ir in range(0, mc, MR):
            base = ir * kc
            m = min(MR, mc - ir)
            for k in range(kc):
                for i in range(m):
                    out[base + k * MR + i] = A[ic + ir + i, pc + k]
                for i in range(m, MR):
                    out[base + k * MR + i] = np.float32(0)

    @njit(inline="always")
    def pack_b(B, pc, kc, jc, nc, out, direct):
        for jr in range(0, nc, NR):
            base = jr * kc
            n = min(NR, nc - jr)
            if direct and n == NR:
                continue
            for k in range(kc):
                for j in range(n):
                    out[base + k * NR + j] = B[pc + k, jc + jr + j]
                for j in range(n, NR):
                    out[base + k * NR + j] = np.float32(0)

    @njit(inline="always")
    def macro(A, sa0, sa1, B, sb0, bdirect, apack, bpack, kc, mc, nc, Cf, ic, jc, pc, N, accumulate, tmp):
        # A and B used in place (strides in elements) unless packed; partial panels packed.
        pA = np.int64(A.ctypes.data)
        pB = np.int64(B.ctypes.data)
        pC = np.int64(Cf.ctypes.data)
        pAp = np.int64(apack.ctypes.data)
        pBp = np.int64(bpack.ctypes.data)
        pT = np.int64(tmp.ctypes.data)
        for jr in range(0, nc, NR):
            n = min(NR, nc - jr)
            if bdirect and n == NR:
                bad, bs = pB + 4 * (pc * sb0 + jc + jr), sb0
            else:
                bad, bs = pBp + 4 * jr * kc, NR
            for ir in range(0, mc, MR):
                m = min(MR, mc - ir)
                if PACKA:
                    aad, rs, cs = pAp + 4 * ir * kc, 1, MR
                elif m == MR:
                    aad, rs, cs = pA + 4 * ((ic + ir) * sa0 + pc * sa1), sa0, sa1
                else:
                    for k in range(kc):
                        for i in range(m):
                            apack[k * MR + i] = A[ic + ir + i, pc + k]
                        for i in range(m, MR):
                            apack[k * MR + i] = np.float32(0)
                    aad, rs, cs = pAp, 1, MR
                if m == MR and n == NR:
                    uk(aad, rs, cs, bad, bs, kc, pC + 4 * ((ic + ir) * N + jc + jr), N, accumulate)
                else:
                    uk(aad, rs, cs, bad, bs, kc, pT, NR, 0)
                    for i in range(m):
                        o = (ic + ir + i) * N + jc + jr
                        if accumulate:
                            for j in range(n):
                                Cf[o + j] += tmp[i * NR + j]
                        else:
                            for j in range(n):
                                Cf[o + j] = tmp[i * NR + j]

    def gemm_serial(A, B, C):
        M, K = A.shape
        N = B.shape[1]
        Cf = C.reshape(-1)
        if K == 0:
            Cf[:] = 0
            return
        sa0 = A.strides[0] // 4
        sa1 = A.strides[1] // 4
        sb0 = B.strides[0] // 4
        bdirect = B.strides[1] == 4 and NOPACKB
        ncp = min(NC, (N + NR - 1) // NR * NR)
        kcm = min(KC, K)
        bpack = np.empty(kcm * ncp, np.float32)
        apack = np.empty(kcm * (min(MC, M) + MR), np.float32)
        tmp = np.empty(MR * NR, np.float32)
        for jc in range(0, N, NC):
            nc = min(NC, N - jc)
            for pc in range(0, K, KC):
                kc = min(KC, K - pc)
                pack_b(B, pc, kc, jc, nc, bpack, bdirect)
                for ic in range(0, M, MC):
                    mc = min(MC, M - ic)
                    if PACKA:
                        pack_a(A, ic, mc, pc, kc, apack)
                    macro(A, sa0, sa1, B, sb0, bdirect, apack, bpack, kc, mc, nc, Cf, ic, jc, pc, N, pc > 0, tmp)

    def gemm_par(A, B, C):
        # prange over blocks of MC rows of C; B packed once per (jc, pc), shared
        M, K = A.shape
        N = B.shape[1]
        Cf = C.reshape(-1)
        if K == 0:
            Cf[:] = 0
            return
        sa0 = A.strides[0] // 4
        sa1 = A.strides[1] // 4
        sb0 = B.strides[0] // 4
        bdirect = B.strides[1] == 4 and NOPACKB
        ncp = min(NC, (N + NR - 1) // NR * NR)
        kcm = min(KC, K)
        bpack = np.empty(kcm * ncp, np.float32)
        nblk = (M + MC - 1) // MC
        for jc in range(0, N, NC):
            nc = min(NC, N - jc)
            for pc in range(0, K, KC):
                kc = min(KC, K - pc)
                pack_b(B, pc, kc, jc, nc, bpack, bdirect)
                for b in prange(nblk):
                    ic = b * MC
                    mc = min(MC, M - ic)
                    apack = np.empty(kcm * (MC + MR), np.float32)
                    tmp = np.empty(MR * NR, np.float32)
                    if PACKA:
                        pack_a(A, ic, mc, pc, kc, apack)
                    macro(A, sa0, sa1, B, sb0, bdirect, apack, bpack, kc, mc, nc, Cf, ic, jc, pc, N, pc > 0, tmp)

    if parallel:
        return njit(parallel=True, error_model="numpy")(gemm_par)
    return njit(error_model="numpy")(gemm_serial)


SHAPES = [  # (name, a_shape, b_shape, a_transposed)
    ("W9 qkv-ish 1024x128x512", (1024, 128), (128, 512), False),
    ("W9 mlp-down 1024x512x128", (1024, 512), (512, 128), False),
    ("W9 wgrad A^T 128x1024x512", (128, 1024), (1024, 512), True),
    ("W9 qkv 1024x128x384", (1024, 128), (128, 384), False),
    ("W10 dec 700x128x1000", (700, 128), (128, 1000), False),
    ("W10 dec-bwd 700x1000x128", (700, 1000), (1000, 128), False),
    ("W10 step 20x128x512", (20, 128), (128, 512), False),
    ("W10 wgrad 512x700x128", (512, 700), (700, 128), False),
]


def median_time(f, n=60):
    f()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def main(argv):
    par = "--threads" in argv
    MR = int(next((a.split("=")[1] for a in argv if a.startswith("--mr=")), 8))
    NR = int(next((a.split("=")[1] for a in argv if a.startswith("--nr=")), 32))
    KC = int(next((a.split("=")[1] for a in argv if a.startswith("--kc=")), 256))
    MC = int(next((a.split("=")[1] for a in argv if a.startswith("--mc=")), 128))
    gemm = make_gemm(MR, NR, KC, MC, parallel=par, PACKA="--packa" in argv, NOPACKB="--packb" not in argv)
    rng = np.random.default_rng(0)
    print(f"MR={MR} NR={NR} KC={KC} MC={MC} parallel={par}")
    for name, ash, bsh, at in SHAPES:
        a = rng.standard_normal(ash[::-1] if at else ash).astype(np.float32)
        a = a.T if at else a
        b = rng.standard_normal(bsh).astype(np.float32)
        c = np.empty((ash[0], bsh[1]), np.float32)
        gemm(a, b, c)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        err_ours = np.abs(c - ref).max() / np.abs(ref).max()
        err_blas = np.abs(a @ b - ref).max() / np.abs(ref).max()
        flop = 2.0 * ash[0] * ash[1] * bsh[1]
        tb, to = [], []
        for _ in range(3):  # interleaved A/B
            tb.append(median_time(lambda: np.matmul(a, b, out=c), 30))
            to.append(median_time(lambda: gemm(a, b, c), 30))
        tb, to = float(np.median(tb)), float(np.median(to))
        print(f"{name:28s} blas {tb*1e3:7.3f} ms {flop/tb/1e9:6.1f} GF/s | ours {to*1e3:7.3f} ms "
              f"{flop/to/1e9:6.1f} GF/s | x{tb/to:4.2f} | err ours {err_ours:.1e} blas {err_blas:.1e}")
    if "--asm" in argv:
        sig = gemm.signatures[0]
        asm = gemm.inspect_asm(sig)
        print("zmm fma:", asm.count("vfmadd231ps\t%zmm") + asm.count("vfmadd231ps\t(%"), "lines with zmm:",
              sum("zmm" in l for l in asm.splitlines()))
        open("/tmp/tjc-gemm/probe.s", "w").write(asm)


if __name__ == "__main__":
    main(sys.argv[1:])
