"""Arithmetic with its own rounding rules inside kernels: an exact division, a
division by a loop-invariant divisor, a reassociable addition for running sums."""
import numpy as np
from numba import types
from numba.extending import intrinsic

from .intrinsics import _always_inline, _vjit

__all__ = ["add_reassoc", "muladd_reassoc", "div_exact", "div_invariant_f32", "div_invariant_f64"]


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


@intrinsic
def muladd_reassoc(typingctx, s, a, b):
    """s + a * b for running sums of products (dot products): the addition may be
    reassociated with others like it, as ``add_reassoc``'s, and may be contracted with its
    product into one fused multiply-add (the product is then not rounded on its own).

    ``add_reassoc(s, a * b)`` cannot become an FMA: LLVM fuses a multiply into an addition
    only when both carry 'contract', and add_reassoc's addition carries 'reassoc' alone, so
    a vectorized dot product costs a multiply and an add per term where an FMA does both
    (codegen.conv_kernels' weight gradient: half the instructions in its inner loop). As
    for add_reassoc, the reordering cannot change whether the sum is NaN or which infinity
    it is; the fused product can only be more exact.
    """
    if not isinstance(s, types.Float) or not (s == a == b):
        return None
    sig = s(s, a, b)

    def codegen(context, builder, signature, args):
        prod = builder.fmul(args[1], args[2], flags=("contract",))
        return builder.fadd(args[0], prod, flags=("reassoc", "contract"))

    return sig, codegen
