"""Integer powers that wrap on overflow as numpy's (eager's) do.

Numba's signed integer arithmetic is `nsw` (LLVM assumes it never overflows), so a power
written as int64 multiplications lets LLVM fold e.g. ``x * x < 0`` to false although the
wrapped product eager computes is negative.  Unsigned 64-bit products wrap by definition:
the kernel computes the power in uint64 and casts back to the operands' integer type
(codegen.lower's pow row)."""
import numpy as np

from .intrinsics import _always_inline, _vjit

__all__ = ["pow_uint64"]


@_vjit
def pow_uint64(a, b):
    """a ** b modulo 2**64 (square and multiply), a and b integers; b <= 0 gives 1, the
    empty product (numpy refuses negative integer exponents: eager raises there)."""
    _always_inline()
    result = np.uint64(1)
    base = np.uint64(a)
    n = np.int64(b)
    while n > 0:
        if n & 1:
            result = result * base
        base = base * base
        n = n >> 1
    return result
