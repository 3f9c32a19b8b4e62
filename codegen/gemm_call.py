"""A matrix product inside a Numba kernel through numpy's own OpenBLAS (its cblas ?gemm),
called by an address the kernel receives as an argument.

Numba's np.dot calls SciPy's BLAS (another OpenBLAS build): 41 us for W10's per-step
[20,128]x[128,512] where numpy's matmul takes 30 us (one thread, this machine); numpy's
library called from the kernel takes 29 us and gives numpy's bits. The address is looked
up in each process (codegen.step_kernels_rnn.gemm_address) and passed in at run time,
never compiled into a kernel: a cached object stays valid when the library loads elsewhere.

`gemm(address, trans_b, m, n, k, a, lda, b, ldb, c, ldc)`: C (m, n) = A (m, k) @ op(B),
row-major, op(B) = B^T (B is (n, k)) with `trans_b`, else B (k, n); a, b, c are data
addresses (`array.ctypes.data` plus a byte offset), of float32 with the float32 routine's
address, of float64 with the float64 one's (`gemm_f32` / `gemm_f64`).
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

__all__ = ["gemm_f32", "gemm_f64"]

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112


def _make(float_type, numba_float):
    @intrinsic
    def gemm(typingctx, address, trans_b, m, n, k, a, lda, b, ldb, c, ldc):
        i64 = types.int64
        sig = types.void(i64, types.boolean, i64, i64, i64, i64, i64, i64, i64, i64, i64)

        def codegen(context, builder, signature, args):
            address, trans_b, m, n, k, a, lda, b, ldb, c, ldc = args
            i32, i64t = ir.IntType(32), ir.IntType(64)
            ptr = float_type.as_pointer()
            fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, i64t, i64t, i64t, float_type,
                                                   ptr, i64t, ptr, i64t, float_type, ptr, i64t])
            fn = builder.inttoptr(address, fnty.as_pointer())
            tb = builder.select(trans_b, i32(_TRANS), i32(_NO_TRANS))
            builder.call(fn, [i32(_ROW_MAJOR), i32(_NO_TRANS), tb, m, n, k, float_type(1.0),
                              builder.inttoptr(a, ptr), lda, builder.inttoptr(b, ptr), ldb,
                              float_type(0.0), builder.inttoptr(c, ptr), ldc])
            return context.get_dummy_value()

        args = (address, trans_b, m, n, k, a, lda, b, ldb, c, ldc)
        if not all(isinstance(t, (types.Integer, types.Boolean)) for t in args):
            return None
        return sig, codegen
    gemm.__doc__ = f"C = A @ op(B) of {numba_float} through numpy's BLAS (see the module)."
    return gemm


gemm_f32 = _make(ir.FloatType(), "float32")
gemm_f64 = _make(ir.DoubleType(), "float64")


from numba import config as _numba_config  # noqa: E402

if _numba_config.DISABLE_JIT:  # pragma: no cover - exercised by a subprocess test
    # NUMBA_DISABLE_JIT=1 (debugging kernels as plain Python, see README): the same call of
    # the same library routine, through ctypes (an intrinsic cannot run as Python).
    import ctypes as _ctypes

    def _python(c_float, numba_float):
        i32, i64, ptr = _ctypes.c_int32, _ctypes.c_int64, _ctypes.c_void_p
        proto = _ctypes.CFUNCTYPE(None, i32, i32, i32, i64, i64, i64, c_float, ptr, i64,
                                  ptr, i64, c_float, ptr, i64)

        def gemm(address, trans_b, m, n, k, a, lda, b, ldb, c, ldc):
            proto(int(address))(_ROW_MAJOR, _NO_TRANS, _TRANS if trans_b else _NO_TRANS,
                                int(m), int(n), int(k), 1.0, int(a), int(lda), int(b),
                                int(ldb), 0.0, int(c), int(ldc))
        gemm.__doc__ = f"C = A @ op(B) of {numba_float} through numpy's BLAS, from Python."
        return gemm

    gemm_f32 = _python(_ctypes.c_float, "float32")  # noqa: F811
    gemm_f64 = _python(_ctypes.c_double, "float64")  # noqa: F811
