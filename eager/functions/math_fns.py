"""Math functions (issue 16 item 5): trigonometry, rounding, remainders, bitwise ops, prod,
any/all, isclose, norms, nan_to_num, addmm/baddbmm/outer.  The primitives' rows are in
`eager.ops_math` (imported by eager/__init__.py; the rows are looked up when called, so this
module does not import them); the rest are composites of registry ops."""
from __future__ import annotations

import builtins
import math

import numpy as np

from .. import dispatch as _dispatch
from .. import dtypes
from ..dispatch import apply
from ..errors import op_error, user_location
from ..ops import OPS
from .elementwise import (_float_operands, _floating, _operands, abs, add, as_tensor, cast,
                          const, div, eq, lt, mul, ne, sqrt, sub, where)
from .reductions import _norm_axes, amax, amin, mean, std, sum, var

Tensor = None  # bound by eager/__init__.py

_FLOAT_UNARY = ("sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh",
                "atanh", "log2", "log10", "exp2", "erfinv")
_FLOAT_BINARY = ("atan2", "copysign", "hypot", "logaddexp")
_NUMERIC_BINARY = ("fmod", "remainder", "floor_divide")
_BITWISE = ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift",
            "bitwise_right_shift")

__all__ = list(_FLOAT_UNARY + _FLOAT_BINARY + _NUMERIC_BINARY + _BITWISE) + [
    "addmm", "all", "allclose", "any", "baddbmm", "bitwise_not", "ceil", "clamp_max",
    "clamp_min", "floor", "frac", "isclose", "lerp", "nan_to_num", "norm", "outer", "prod",
    "reciprocal", "round", "std_mean", "trunc", "var_mean", "vector_norm", "true_divide",
]

#: Composites that are Tensor methods too (the primitives' rows say method=True).
METHODS = ("frac", "reciprocal", "lerp", "any", "all", "isclose", "allclose", "norm",
           "nan_to_num", "clamp_min", "clamp_max", "addmm", "baddbmm", "outer", "prod",
           "std_mean", "var_mean", "floor", "ceil", "trunc", "round")


def _float_unary(name):
    def unary(x):
        return apply(OPS[name], _floating(x, name))
    unary.__name__ = name
    unary.__doc__ = f"{name} elementwise (integers give the default float); the row's doc."
    return unary


def _float_binary(name):
    def binary(a, b):
        a, b = _float_operands(a, b, name)
        return apply(OPS[name], a, b)
    binary.__name__ = name
    binary.__doc__ = f"{name} elementwise, broadcasting (integers give the default float)."
    return binary


def _binary(name, allowed="bif"):
    def binary(a, b):
        number = b if isinstance(b, (int, np.integer)) else None  # (bool is an int)
        a, b = _operands(a, b, name)
        if a.dtype.kind not in allowed:
            raise op_error(name, f"is not defined on {a.dtype} tensors", (a, b),
                           hint="cast to an integer or floating dtype first", exc=TypeError)
        if b.dtype.kind in "iu":
            b = _nonzero_divisor(b, number, name)
        return apply(OPS[name], a, b)
    binary.__name__ = name
    binary.__doc__ = f"{name} elementwise, broadcasting, PyTorch type promotion."
    return binary


def _nonzero_divisor(b, number, op):
    """Integer divisor `b` of fmod, remainder or floor_divide, checked for zeros as PyTorch
    does (RuntimeError: ZeroDivisionError): a Python number now, a tensor now when eager and
    when the program runs when traced (numpy's integer division would give 0 silently)."""
    message = "ZeroDivisionError: integer division or remainder by zero"
    if number is not None:
        if number == 0:
            raise RuntimeError(f"{message} (at {user_location()})")
        return b
    if not _dispatch.tracing():
        try:
            return apply(OPS["check_nonzero"], b, what=message)
        except ValueError:  # dispatch's OpError for the zero (the line looked up only now)
            raise RuntimeError(f"{message} (at {user_location()})") from None
    return apply(OPS["check_nonzero"], b, what=f"{message} (at {user_location()})")


for _n in _FLOAT_UNARY:
    globals()[_n] = _float_unary(_n)
for _n in _FLOAT_BINARY:
    globals()[_n] = _float_binary(_n)
for _n in _NUMERIC_BINARY:
    globals()[_n] = _binary(_n, "iuf")
def _bitwise(name):
    kinds = "iu" if "shift" in name else "iub"

    def binary(a, b):
        a, b = _operands(a, b, name)
        if a._data.dtype.kind not in kinds:  # floats, bools for shifts: the row's rule raises
            OPS[name].infer(a, b)
        return apply(OPS[name], a, b)
    binary.__name__ = name
    binary.__doc__ = f"{name} on integer (and, except shifts, bool) tensors."
    return binary


for _n in _BITWISE:
    globals()[_n] = _bitwise(_n)


def bitwise_not(x):
    """~x on integer and bool tensors."""
    x = as_tensor(x, "bitwise_not")
    if dtypes.is_floating(x.dtype):
        OPS["bitwise_not"].infer(x)  # raises, naming the op and dtype
    return apply(OPS["bitwise_not"], x)


def _rounding(name):
    def rounding(x):
        x = as_tensor(x, name)
        if not dtypes.is_floating(x.dtype):
            return add(x, 0) if x.dtype != dtypes.bool_ else _bool_rounding(name, x)
        return apply(OPS[name], x)
    rounding.__name__ = name
    rounding.__doc__ = f"{name} of a float tensor; integers are returned unchanged (a copy)."
    return rounding


def _bool_rounding(name, x):
    raise op_error(name, "is not defined on bool tensors", (x,), exc=TypeError)


floor, ceil, trunc = (_rounding(n) for n in ("floor", "ceil", "trunc"))


def round(x, decimals=0):  # noqa: A001
    """Round half to even (torch.round), at `decimals` digits after the point."""
    x = as_tensor(x, "round")
    if not dtypes.is_floating(x.dtype):
        return _rounding("trunc")(x) if decimals >= 0 else \
            cast(round(cast(x, dtypes.float64), decimals), x.dtype)
    return apply(OPS["round"], x, decimals=int(decimals))


def frac(x):
    """x - trunc(x), with the sign of x (torch.frac)."""
    x = _floating(x, "frac")
    return sub(x, trunc(x))


def reciprocal(x):
    """1 / x; integers give the default float."""
    x = _floating(x, "reciprocal")
    return div(const(1, x.dtype), x)


def true_divide(a, b):
    return div(a, b)


def lerp(start, end, weight):
    """start + weight * (end - start), computed from the nearer end as PyTorch does (exact at
    weight 0 and 1)."""
    start, end = _float_operands(start, end, "lerp")
    w = weight if isinstance(weight, Tensor) else const(weight, start.dtype)
    w = cast(w, start.dtype)
    diff = sub(end, start)
    return where(lt(abs(w), const(0.5, start.dtype)), add(start, mul(w, diff)),
                 sub(end, mul(diff, sub(const(1, start.dtype), w))))


def _divide_rounded(a, b, rounding_mode):
    """div(a, b, rounding_mode=): None (true division), "trunc" or "floor"."""
    if rounding_mode is None:
        return div(a, b)
    if rounding_mode == "floor":
        return floor_divide(a, b)  # noqa: F821 - defined by the loop above
    if rounding_mode != "trunc":
        raise op_error("div", f"rounding_mode must be None, 'trunc' or 'floor', got "
                       f"{rounding_mode!r}", exc=ValueError)
    a, b = _operands(a, b, "div")
    if dtypes.is_floating(a.dtype):
        return trunc(div(a, b))
    q = floor_divide(a, b)  # noqa: F821
    # floor differs from trunc where the exact quotient is negative and not whole
    r = fmod(a, b)  # noqa: F821
    adjust = ne(lt(r, 0), lt(b, 0))
    return where(adjust & ne(r, 0), add(q, 1), q)


# --------------------------------------------------------------------------------------
# reductions

def prod(x, dim=None, keepdim=False, *, dtype=None):
    """Product over `dim` (all elements by default); ints and bools give int64."""
    x = as_tensor(x, "prod")
    if dtype is not None:
        x = cast(x, dtype)
    return apply(OPS["prod"], x, axes=_norm_axes(dim, x.ndim, "prod"), keepdim=bool(keepdim))


def any(x, dim=None, keepdim=False):  # noqa: A001
    """Whether any element over `dim` is non-zero (a bool tensor)."""
    x = as_tensor(x, "any")
    return ne(sum(cast(ne(x, 0), dtypes.int64), dim, keepdim), 0)


def all(x, dim=None, keepdim=False):  # noqa: A001
    """Whether every element over `dim` is non-zero (a bool tensor)."""
    x = as_tensor(x, "all")
    return eq(sum(cast(eq(x, 0), dtypes.int64), dim, keepdim), 0)


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """|a - b| <= atol + rtol * |b| elementwise (torch.isclose); equal infinities are close."""
    a, b = _operands(a, b, "isclose")
    if not dtypes.is_floating(a.dtype):
        return eq(a, b) if rtol == 0 and atol == 0 or a.dtype == dtypes.bool_ else \
            isclose(cast(a, dtypes.float64), cast(b, dtypes.float64), rtol, atol, equal_nan)
    close = eq(a, b)
    diff = abs(sub(a, b))
    tol = add(const(atol, a.dtype), mul(const(rtol, a.dtype), abs(b)))
    close = close | ((diff <= tol) & lt(abs(a), math.inf) & lt(abs(b), math.inf))
    if equal_nan:
        close = close | (ne(a, a) & ne(b, b))
    return close


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False) -> bool:
    """True when every element is close (torch.allclose): a Python bool."""
    return builtins.bool(all(isclose(a, b, rtol, atol, equal_nan)).item())


def var_mean(x, dim=None, unbiased=True, keepdim=False, *, correction=None):
    """(var, mean) over `dim` (torch.var_mean)."""
    return (var(x, dim, unbiased, keepdim, correction=correction),
            mean(x, dim, keepdim=keepdim))


def std_mean(x, dim=None, unbiased=True, keepdim=False, *, correction=None):
    """(std, mean) over `dim` (torch.std_mean)."""
    return (std(x, dim, unbiased, keepdim, correction=correction),
            mean(x, dim, keepdim=keepdim))


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):  # noqa: A002
    """The p-norm over `dim` (torch.linalg.vector_norm): 2, 1, inf, -inf, 0 or any p."""
    x = as_tensor(x, "vector_norm")
    if dtype is not None:
        x = cast(x, dtype)
    x = _floating(x, "vector_norm")
    if isinstance(ord, str):
        if ord != "fro":
            raise op_error("norm", f"ord {ord!r} is not supported", (x,),
                           hint="use a number, inf, -inf or 'fro'", exc=ValueError)
        ord = 2
    a = abs(x)
    if ord == math.inf:
        return amax(a, dim, keepdim)
    if ord == -math.inf:
        return amin(a, dim, keepdim)
    if ord == 0:
        return sum(cast(ne(x, 0), x.dtype), dim, keepdim)
    if ord == 1:
        return sum(a, dim, keepdim)
    if ord == 2:
        s = sum(mul(x, x), dim, keepdim)
        # zero norm: gradient 0 as in PyTorch (sqrt's 0.5 / 0 would give NaN)
        zero = eq(s, const(0, s.dtype))
        return where(zero, const(0, s.dtype), sqrt(where(zero, const(1, s.dtype), s)))
    p = const(float(ord), x.dtype)
    s = sum(a ** p, dim, keepdim)
    return s ** const(1.0 / float(ord), x.dtype)


def norm(x, p="fro", dim=None, keepdim=False, dtype=None):
    """torch.norm / Tensor.norm over vectors: p in 'fro', 2, 1, inf, -inf, 0, any number."""
    if isinstance(dim, int):
        dim = (dim,)
    return vector_norm(x, 2 if p is None else p, dim, keepdim, dtype=dtype)


def nan_to_num(x, nan=0.0, posinf=None, neginf=None):
    """NaN, +inf and -inf replaced by `nan`, `posinf` (default: the dtype's max) and `neginf`
    (default: the dtype's lowest)."""
    x = as_tensor(x, "nan_to_num")
    if not dtypes.is_floating(x.dtype):
        return add(x, 0) if x.dtype != dtypes.bool_ else x
    info = dtypes.finfo(x.dtype)
    posinf = float(info.max) if posinf is None else posinf
    neginf = float(info.min) if neginf is None else neginf
    x = where(ne(x, x), const(nan, x.dtype), x)
    x = where(eq(x, math.inf), const(posinf, x.dtype), x)
    return where(eq(x, -math.inf), const(neginf, x.dtype), x)


def clamp_min(x, min):  # noqa: A002
    from .elementwise import clamp

    return clamp(x, min=min)


def clamp_max(x, max):  # noqa: A002
    from .elementwise import clamp

    return clamp(x, max=max)


# --------------------------------------------------------------------------------------
# products

def outer(a, b):
    """The outer product of two vectors (torch.outer)."""
    from .shapes import reshape

    a, b = _operands(a, b, "outer")
    if a.ndim != 1 or b.ndim != 1:
        raise op_error("outer", "needs two 1-d tensors", (a, b), exc=ValueError)
    return mul(reshape(a, (-1, 1)), reshape(b, (1, -1)))


def _scaled(t, s):
    return t if isinstance(s, (int, float)) and s == 1 else mul(t, s)


def addmm(input, mat1, mat2, *, beta=1, alpha=1):  # noqa: A002
    """beta * input + alpha * (mat1 @ mat2) (torch.addmm); beta=0 ignores input's NaNs."""
    from .reductions import matmul

    if mat1.ndim != 2 or mat2.ndim != 2:
        raise op_error("addmm", "mat1 and mat2 must be 2-d", (mat1, mat2), exc=ValueError)
    prod_ = _scaled(matmul(mat1, mat2), alpha)
    if isinstance(beta, (int, float)) and beta == 0:
        return add(prod_, const(0, prod_.dtype))
    return add(_scaled(as_tensor(input, "addmm"), beta), prod_)


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):  # noqa: A002
    """beta * input + alpha * (batch1 @ batch2) over a batch of 3-d matrices."""
    from .reductions import matmul

    if batch1.ndim != 3 or batch2.ndim != 3:
        raise op_error("baddbmm", "batch1 and batch2 must be 3-d", (batch1, batch2),
                       exc=ValueError)
    prod_ = _scaled(matmul(batch1, batch2), alpha)
    if isinstance(beta, (int, float)) and beta == 0:
        return add(prod_, const(0, prod_.dtype))
    return add(_scaled(as_tensor(input, "baddbmm"), beta), prod_)
