"""Registry rows of the math primitives (issue 16 item 5): trigonometric and hyperbolic
functions, log2/log10/exp2, erfinv, rounding, fmod/remainder/floor_divide, atan2, copysign,
hypot, logaddexp, bitwise ops and prod.  Their front-end functions are in
`eager.functions.math_fns`; their lowering rows in `codegen.lower`.

Float-only rows check their dtype with `_float_unary_infer`/`_float_binary_infer`, the
bitwise rows with `_bitwise_infer` (bool and integer categories of `eager.dtypes`), so a
new storage dtype joins by its category.
"""
from __future__ import annotations

import math

import numpy as np

from . import dtypes
from .ops import (_binary_infer, _float_unary_infer, _reduce_shape, _unary_infer, op_error,
                  register)
from .types import TensorType

E, R = "elementwise", "reduction"
_LN2, _LN10 = math.log(2.0), math.log(10.0)


def _float_binary_infer(name):
    base = _binary_infer(name)

    def infer(a, b):
        out = base(a, b)
        if not dtypes.is_floating(out.dtype):
            raise op_error(name, f"needs floating-point tensors, got {out.dtype}", (a, b),
                           hint="cast with .float() or .to(eager.float32)", exc=TypeError)
        return out
    return infer


def _bitwise_infer(name, nin=2, bool_ok=True):
    """Integer (and, unless a shift, bool) operands: by dtype category, so new integer
    storage dtypes join without a list here."""
    base = _binary_infer(name) if nin == 2 else _unary_infer
    lowest = dtypes.category(dtypes.bool_ if bool_ok else dtypes.int64)
    what = "integer and bool" if bool_ok else "integer"

    def infer(*types):
        out = base(*types)
        if not lowest <= dtypes.category(out.dtype) <= dtypes.category(dtypes.int64):
            raise op_error(name, f"is only defined on {what} tensors, got {out.dtype}",
                           types, hint=f"bitwise ops need {what} operands; for floats use "
                           "comparisons and logical ops", exc=TypeError)
        return out
    return infer


def _zeros_like(g, a):
    return fn.broadcast_to(fn.const(0, g.dtype), tuple(a.shape))


def _c(v, t):
    return fn.const(v, t.dtype)


# --------------------------------------------------------------------------------------
# unary float functions: (name, numpy impl, vjp(g, out, a), saves, saves_out, doc)

def _erfinv_impl(x):
    from scipy.special import erfinv

    return erfinv(x).astype(x.dtype, copy=False)


def _inv_sqrt_1m(a):  # 1 / sqrt(1 - a^2)
    return fn.rsqrt(fn.sub(_c(1, a), fn.mul(a, a)))


_UNARY = [
    ("sin", np.sin, lambda g, out, a: fn.mul(g, fn.cos(a)), (0,), False, "Sine."),
    ("cos", np.cos, lambda g, out, a: fn.neg(fn.mul(g, fn.sin(a))), (0,), False, "Cosine."),
    ("tan", np.tan, lambda g, out, a: fn.mul(g, fn.add(_c(1, out), fn.mul(out, out))), (),
     True, "Tangent."),
    ("asin", np.arcsin, lambda g, out, a: fn.mul(g, _inv_sqrt_1m(a)), (0,), False,
     "Inverse sine."),
    ("acos", np.arccos, lambda g, out, a: fn.neg(fn.mul(g, _inv_sqrt_1m(a))), (0,), False,
     "Inverse cosine."),
    ("atan", np.arctan, lambda g, out, a: fn.div(g, fn.add(_c(1, a), fn.mul(a, a))), (0,),
     False, "Inverse tangent."),
    ("sinh", np.sinh, lambda g, out, a: fn.mul(g, fn.cosh(a)), (0,), False, "Hyperbolic sine."),
    ("cosh", np.cosh, lambda g, out, a: fn.mul(g, fn.sinh(a)), (0,), False,
     "Hyperbolic cosine."),
    ("asinh", np.arcsinh, lambda g, out, a: fn.mul(g, fn.rsqrt(fn.add(fn.mul(a, a), _c(1, a)))),
     (0,), False, "Inverse hyperbolic sine."),
    ("acosh", np.arccosh, lambda g, out, a: fn.mul(g, fn.rsqrt(fn.sub(fn.mul(a, a), _c(1, a)))),
     (0,), False, "Inverse hyperbolic cosine."),
    ("atanh", np.arctanh, lambda g, out, a: fn.div(g, fn.sub(_c(1, a), fn.mul(a, a))), (0,),
     False, "Inverse hyperbolic tangent."),
    ("log2", np.log2, lambda g, out, a: fn.div(g, fn.mul(a, _c(_LN2, a))), (0,), False,
     "Base-2 logarithm."),
    ("log10", np.log10, lambda g, out, a: fn.div(g, fn.mul(a, _c(_LN10, a))), (0,), False,
     "Base-10 logarithm."),
    ("exp2", np.exp2, lambda g, out, a: fn.mul(g, fn.mul(out, _c(_LN2, out))), (), True,
     "2 ** a."),
    ("erfinv", _erfinv_impl,
     lambda g, out, a: fn.mul(g, fn.mul(_c(math.sqrt(math.pi) / 2, out),
                                        fn.exp(fn.mul(out, out)))), (), True,
     "Inverse of the error function."),
]
for _name, _impl, _vjp, _saves, _saves_out, _doc in _UNARY:
    register(_name, E, 1, _impl, _float_unary_infer(_name), vjp=(_vjp,), saves=_saves,
             saves_out=_saves_out, doc=_doc, method=True)


# --------------------------------------------------------------------------------------
# rounding (float in, same dtype out; a zero gradient)

def _round_impl(a, decimals):
    return np.round(a, decimals)


for _name, _impl, _doc in [("floor", np.floor, "Largest integer <= a."),
                           ("ceil", np.ceil, "Smallest integer >= a."),
                           ("trunc", np.trunc, "a rounded toward zero.")]:
    register(_name, E, 1, _impl, _float_unary_infer(_name),
             vjp=(lambda g, out, a: _zeros_like(g, a),), doc=_doc, recompute=True,
             method=True)
def _round_infer(a, decimals):
    return _float_unary_infer("round")(a)


register("round", E, 1, _round_impl, _round_infer,
         vjp=(lambda g, out, a, decimals: _zeros_like(g, a),), params=("decimals",),
         doc="Round half to even at `decimals` digits (numpy's and PyTorch's rule).",
         method=True)


# --------------------------------------------------------------------------------------
# binary functions

def _copysign_vjp_a(g, out, a, b):
    # d|a|*sign(b)/da: +1 where the sign was kept, -1 where it flipped
    return fn.where(fn.eq(out, a), g, fn.neg(g))


def _atan2_den(a, b):
    return fn.add(fn.mul(a, a), fn.mul(b, b))


register("atan2", E, 2, np.arctan2, _float_binary_infer("atan2"),
         vjp=(lambda g, out, a, b: fn.div(fn.mul(g, b), _atan2_den(a, b)),
              lambda g, out, a, b: fn.neg(fn.div(fn.mul(g, a), _atan2_den(a, b)))),
         saves=(0, 1), doc="Angle of the point (b, a), in (-pi, pi].", method=True)
register("copysign", E, 2, np.copysign, _float_binary_infer("copysign"),
         vjp=(_copysign_vjp_a, lambda g, out, a, b: _zeros_like(g, b)), saves=(0,),
         saves_out=True, doc="|a| with the sign of b.", method=True)
register("hypot", E, 2, np.hypot, _float_binary_infer("hypot"),
         vjp=(lambda g, out, a, b: fn.mul(g, fn.div(a, out)),
              lambda g, out, a, b: fn.mul(g, fn.div(b, out))),
         saves=(0, 1), saves_out=True, doc="sqrt(a^2 + b^2) without overflow.", method=True)
register("logaddexp", E, 2, np.logaddexp, _float_binary_infer("logaddexp"),
         vjp=(lambda g, out, a, b: fn.mul(g, fn.exp(fn.sub(a, out))),
              lambda g, out, a, b: fn.mul(g, fn.exp(fn.sub(b, out)))),
         saves=(0, 1), saves_out=True, doc="log(exp(a) + exp(b)) without overflow.",
         method=True)
register("fmod", E, 2, np.fmod, _binary_infer("fmod"),
         vjp=(lambda g, out, a, b: g,
              lambda g, out, a, b: fn.neg(fn.mul(g, fn.trunc(fn.div(a, b))))),
         saves=(0, 1), doc="C-style remainder: the sign of a.", method=True)
register("remainder", E, 2, np.remainder, _binary_infer("remainder"),
         vjp=(lambda g, out, a, b: g,
              lambda g, out, a, b: fn.neg(fn.mul(g, fn.floor(fn.div(a, b))))),
         saves=(0, 1), doc="Python-style remainder (a % b): the sign of b.", method=True)
register("floor_divide", E, 2, np.floor_divide, _binary_infer("floor_divide"),
         doc="floor(a / b) (a // b); not differentiable.", method=True)

# bitwise ops (integer and bool tensors)
for _name, _impl in [("bitwise_and", np.bitwise_and), ("bitwise_or", np.bitwise_or),
                     ("bitwise_xor", np.bitwise_xor), ("bitwise_left_shift", np.left_shift),
                     ("bitwise_right_shift", np.right_shift)]:
    register(_name, E, 2, _impl, _bitwise_infer(_name, bool_ok="shift" not in _name),
             doc=f"Elementwise {_name}.",
             recompute=True, method=True)
register("bitwise_not", E, 1, np.invert, _bitwise_infer("bitwise_not", 1),
         doc="~a: bitwise complement (logical not for bool).", recompute=True, method=True)


# --------------------------------------------------------------------------------------
# prod

def _prod_infer(a, axes, keepdim):
    dt = dtypes.int64 if a.dtype.kind in "biu" else a.dtype
    return TensorType(_reduce_shape(a.shape, axes, keepdim), dt)


def _prod_impl(a, axes, keepdim):
    dt = np.int64 if a.dtype.kind in "biu" else a.dtype
    return np.asarray(np.prod(a, axis=axes, keepdims=keepdim, dtype=dt))


def _prod_vjp(g, out, a, axes, keepdim):
    """The product of the other elements, exactly (zeros included): exclusive running
    products from both ends of the reduced elements, moved last and flattened."""
    nd = len(a.shape)
    keep = [i for i in range(nd) if i not in axes]
    perm = tuple(keep) + tuple(axes)
    xp = fn.permute(a, perm)
    lead = tuple(a.shape[i] for i in keep)
    n = math.prod(a.shape[i] for i in axes)
    if n == 0 or math.prod(lead) == 0:
        return _zeros_like(g, a)
    flat = fn.reshape(xp, lead + (n,))
    one = fn.broadcast_to(fn.const(1, a.dtype), lead + (1,))
    last = len(lead)
    left = fn.cat([one, fn.getitem(_cumprod(flat, last), (Ellipsis, slice(None, n - 1)))], last)
    rev = _flip(flat, last)
    right = _flip(fn.cat([one, fn.getitem(_cumprod(rev, last), (Ellipsis, slice(None, n - 1)))],
                         last), last)
    others = fn.reshape(fn.mul(left, right), tuple(xp.shape))
    gk = g if keepdim else fn.reshape(g, tuple(1 if i in axes else d
                                               for i, d in enumerate(a.shape)))
    gp = fn.permute(gk, perm)
    return fn.permute(fn.mul(gp, others), tuple(np.argsort(perm)))


def _cumprod(x, dim):
    from .scan import cumprod

    return cumprod(x, dim)


def _flip(x, dim):
    from .shaping import flip

    return flip(x, dim)


register("prod", R, 1, _prod_impl, _prod_infer, vjp=(_prod_vjp,), saves=(0,),
         params=("axes", "keepdim"),
         doc="Product over `axes`; integers and bools multiply in int64. The gradient is the "
             "product of the other elements (exact where some are zero).")

from . import functions as fn  # noqa: E402  (vjp rules call the front end at run time)
