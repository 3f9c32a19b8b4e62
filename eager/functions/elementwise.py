"""Scalars, constants and type promotion, and the elementwise functions."""
from __future__ import annotations

import builtins
import math

import numpy as np

from .. import dtypes
from ..dispatch import apply, tracing
from ..errors import describe, op_error
from ..ops import OPS

Tensor = None  # bound by eager/__init__.py

__all__ = [
    "abs",
    "add",
    "as_tensor",
    "cast",
    "clamp",
    "clip",
    "const",
    "div",
    "eq",
    "erf",
    "exp",
    "expm1",
    "ge",
    "gt",
    "isfinite",
    "isinf",
    "isnan",
    "le",
    "log",
    "log1p",
    "logical_not",
    "lt",
    "maximum",
    "minimum",
    "mul",
    "ne",
    "neg",
    "pow",
    "relu",
    "rsqrt",
    "sigmoid",
    "sign",
    "sqrt",
    "square",
    "sub",
    "tanh",
    "to",
    "where",
]

ADD, SUB, MUL, DIV, POW = OPS["add"], OPS["sub"], OPS["mul"], OPS["div"], OPS["pow"]
_SCALARS = (int, float, bool, np.integer, np.floating, np.bool_)



# --------------------------------------------------------------------------------------
# scalars, constants and promotion

def const(value, dtype) -> "Tensor":
    """A 0-d constant tensor (broadcasts against anything)."""
    arr = np.array(value, dtype=dtype)
    arr.flags.writeable = False
    return Tensor._wrap(arr)


_SCALAR_CACHE: dict = {}


def _scalar_for(value, like_dtype):
    """Wrap a Python scalar for an op with a tensor of `like_dtype` (PyTorch promotion).

    Scalars recur (x * 2, x + 1, 1 - beta), so their 0-d tensors are cached; the arrays
    are read-only, so an in-place write to one fails instead of changing a constant.
    """
    # Floats are keyed by their bits (float.hex): 0.0 == -0.0 would share one constant (x / 0.0
    # after x / -0.0 gave -inf), and NaN != NaN would never hit.
    is_float = isinstance(value, (float, np.floating))
    key = (value.__class__, float(value).hex() if is_float else value, like_dtype)
    try:
        t = _SCALAR_CACHE.get(key)
    except TypeError:  # unhashable numpy scalar subclass
        t = None
    if t is not None:
        return t
    if is_float and dtypes.is_floating(like_dtype):
        dtype = like_dtype  # (the tensor's float dtype wins: the default is not read)
    else:
        dtype = dtypes.promote_weak(like_dtype, dtypes.scalar_dtype(value))
        if is_float:  # (it depends on eager.set_default_dtype: not kept)
            key = None
    try:
        arr = np.array(value, dtype=dtype)
    except OverflowError:  # uint8 tensor + 300: the scalar wraps to the dtype, as in PyTorch
        arr = np.array(value).astype(dtype)
    arr.flags.writeable = False
    t = Tensor._wrap(arr)
    if key is not None and len(_SCALAR_CACHE) < 4096 and (is_float or value == value):
        _SCALAR_CACHE[key] = t
    return t


def as_tensor(value, op="op") -> "Tensor":
    if isinstance(value, Tensor):
        return value
    if isinstance(value, _SCALARS):
        return Tensor._wrap(np.array(value, dtype=dtypes.scalar_dtype(value)))
    raise op_error(op, f"expected a Tensor or a number, got {describe(value)}",
                   hint="wrap data with eager.tensor(...)", exc=TypeError)


def _result_dtype(a, b):
    da, db = a.dtype, b.dtype
    if da == db:
        return da
    a0, b0 = a.ndim == 0, b.ndim == 0
    if a0 and not b0:
        return dtypes.promote_weak(db, da)
    if b0 and not a0:
        return dtypes.promote_weak(da, db)
    return dtypes.promote(da, db)


def _operands(a, b, op):
    """Two tensors of one dtype, PyTorch promotion applied."""
    a_is = isinstance(a, Tensor)
    b_is = isinstance(b, Tensor)
    if a_is and b_is:
        da = a._data.dtype
        if da == b._data.dtype:
            return a, b
        dtype = _result_dtype(a, b)
        return cast(a, dtype), cast(b, dtype)
    if a_is:
        if not isinstance(b, _SCALARS):
            raise op_error(op, f"expected a Tensor or a number, got {describe(b)}",
                           (a, b), hint="wrap data with eager.tensor(...)", exc=TypeError)
        b = _scalar_for(b, a._data.dtype)
        return cast(a, b.dtype), b
    if b_is:
        if not isinstance(a, _SCALARS):
            raise op_error(op, f"expected a Tensor or a number, got {describe(a)}",
                           (a, b), hint="wrap data with eager.tensor(...)", exc=TypeError)
        a = _scalar_for(a, b._data.dtype)
        return a, cast(b, a.dtype)
    return as_tensor(a, op), as_tensor(b, op)


def _float_operands(a, b, op):
    a, b = _operands(a, b, op)
    if not dtypes.is_floating(a.dtype):
        a, b = cast(a, dtypes.default_float()), cast(b, dtypes.default_float())
    return a, b


def _floating(x, op):
    x = as_tensor(x, op)
    if not dtypes.is_floating(x._data.dtype):
        return cast(x, dtypes.default_float())
    return x


def cast(x, dtype) -> "Tensor":
    """Convert to `dtype` (no-op when it already has it)."""
    dtype = dtypes.canonical(dtype)
    if x._data.dtype == dtype:
        return x
    return apply(OPS["cast"], x, dtype=dtype)


to = cast


def _half_in_float32(fn):
    """`fn(x, ...)` for a float16/bfloat16 `x` computes on x as float32 and rounds each
    float32 result once to x's dtype, as PyTorch's CPU kernels of composite ops (softmax,
    layer_norm, mean, var) do (their float32 "opmath"); each registry op of `fn` would
    otherwise round to the half type in between.  A call given a dtype (softmax(x, 1,
    eager.float32), dtype=...) runs as written."""
    def run(x, *args, **kwargs):
        storage = getattr(x, "dtype", None)
        if storage not in dtypes.HALF or kwargs.get("dtype") is not None \
                or builtins.any(isinstance(a, (np.dtype, type)) for a in args):
            return fn(x, *args, **kwargs)
        out = fn(cast(x, dtypes.float32), *args, **kwargs)
        if isinstance(out, tuple):
            return type(out)(*[_to_storage(o, storage) for o in out]) if hasattr(out, "_fields") \
                else tuple(_to_storage(o, storage) for o in out)
        return _to_storage(out, storage)
    run.__name__, run.__qualname__ = fn.__name__, fn.__qualname__
    run.__doc__, run.__module__ = fn.__doc__, fn.__module__
    run.__wrapped__ = fn
    return run


def _to_storage(out, storage):
    if getattr(out, "dtype", None) == dtypes.float32:
        return cast(out, storage)
    return out


# --------------------------------------------------------------------------------------
# elementwise

def add(a, b, alpha=None):
    if alpha is not None:
        b = mul(b, alpha)
    if a.__class__ is not b.__class__ or a._data.dtype is not b._data.dtype:
        a, b = _operands(a, b, "add")
    return apply(ADD, a, b)


def sub(a, b, alpha=None):
    if alpha is not None:
        b = mul(b, alpha)
    if a.__class__ is not b.__class__ or a._data.dtype is not b._data.dtype:
        a, b = _operands(a, b, "sub")
    if a.dtype == dtypes.bool_:
        raise op_error("sub", "subtraction of bool tensors is not supported", (a, b),
                       hint="use logical ops or cast to int", exc=TypeError)
    return apply(SUB, a, b)


def mul(a, b):
    if a.__class__ is not b.__class__ or a._data.dtype is not b._data.dtype:
        a, b = _operands(a, b, "mul")
    return apply(MUL, a, b)


def div(a, b, *, rounding_mode=None):
    if rounding_mode is not None:
        from .math_fns import _divide_rounded

        return _divide_rounded(a, b, rounding_mode)
    if a.__class__ is not b.__class__ or a._data.dtype is not b._data.dtype \
            or a._data.dtype.kind != "f" and a._data.dtype is not dtypes.bfloat16:
        a, b = _float_operands(a, b, "div")
    return apply(DIV, a, b)


_NEGATIVE_POWER = "Integers to negative integer powers are not allowed."


def pow(a, b):  # noqa: A001 - PyTorch's name
    number = b if isinstance(b, (int, np.integer)) else None
    a, b = _operands(a, b, "pow")
    if b.dtype.kind == "i":  # (both operands are integers: promotion gave them one dtype)
        b = _nonnegative_exponent(b, number)
    return apply(POW, a, b)


def _nonnegative_exponent(b, number):
    """`b`, after checking that no integer exponent is negative: RuntimeError as in PyTorch
    and numpy, eagerly and in compiled code alike (a kernel would compute 1 or 0)."""
    if number is not None:  # a Python number: checked here, once
        if number < 0:
            raise op_error("pow", _NEGATIVE_POWER, (b,), hint="use a float exponent, e.g. "
                           "x ** -1.0", exc=RuntimeError)
        return b

    if not tracing():
        if (b._data < 0).any():
            raise op_error("pow", _NEGATIVE_POWER, (b,), hint="use a float exponent",
                           exc=RuntimeError)
        return b
    # traced: a check that runs when the compiled program runs, feeding the exponent
    bad = where(lt(b, const(0, b.dtype)), float("nan"), 0.0)
    return add(b, cast(apply(OPS["check_finite"], bad, what=_NEGATIVE_POWER), b.dtype))


def maximum(a, b):
    a, b = _operands(a, b, "maximum")
    return apply(OPS["maximum"], a, b)


def minimum(a, b):
    a, b = _operands(a, b, "minimum")
    return apply(OPS["minimum"], a, b)


def _compare(name):
    op = OPS[name]

    def compare(a, b):
        a, b = _operands(a, b, name)
        return apply(op, a, b)
    compare.__name__ = name
    compare.__doc__ = f"Elementwise comparison `{name}`; returns a bool tensor."
    return compare


eq, ne, lt, le, gt, ge = (_compare(n) for n in ("eq", "ne", "lt", "le", "gt", "ge"))


def neg(x):
    x = as_tensor(x, "neg")
    if x.dtype == dtypes.bool_:
        raise op_error("neg", "negation of a bool tensor is not supported", (x,),
                       hint="use logical_not (~x)", exc=TypeError)
    return apply(OPS["neg"], x)


def _float_unary(name):
    op = OPS[name]

    def unary(x):
        if x.__class__ is not Tensor or x._data.dtype.kind != "f" \
                and x._data.dtype is not dtypes.bfloat16:  # (the hot path: no call)
            x = _floating(x, name)
        return apply(op, x)
    unary.__name__ = name
    unary.__doc__ = op.doc
    return unary


exp, log, sqrt, tanh, sigmoid, erf = (_float_unary(n) for n in
                                      ("exp", "log", "sqrt", "tanh", "sigmoid", "erf"))
log1p, expm1 = (_float_unary(n) for n in ("log1p", "expm1"))


def relu(x):
    return apply(OPS["relu"], as_tensor(x, "relu"))


def abs(x):  # noqa: A001
    return apply(OPS["abs"], as_tensor(x, "abs"))


def sign(x):
    return apply(OPS["sign"], as_tensor(x, "sign"))


def square(x):
    """x * x (torch.square)."""
    x = as_tensor(x, "square")
    return mul(x, x)


def rsqrt(x):
    """1 / sqrt(x) (torch.rsqrt); integers give the default float, as sqrt does."""
    s = sqrt(as_tensor(x, "rsqrt"))
    return div(const(1, s.dtype), s)


def isnan(x):
    """Where x is NaN, as a bool tensor (all False for integers and bools)."""
    x = as_tensor(x, "isnan")
    return ne(x, x)


def isinf(x):
    """Where x is +inf or -inf, as a bool tensor."""
    x = as_tensor(x, "isinf")
    if not dtypes.is_floating(x.dtype):
        return ne(x, x)
    return eq(abs(x), const(math.inf, x.dtype))


def isfinite(x):
    """Where x is neither NaN nor ±inf, as a bool tensor."""
    x = as_tensor(x, "isfinite")
    if not dtypes.is_floating(x.dtype):
        return eq(x, x)
    return lt(abs(x), const(math.inf, x.dtype))


def logical_not(x):
    x = as_tensor(x, "logical_not")
    return eq(cast(x, dtypes.bool_), False)


def where(cond, a, b):
    """cond ? a : b with broadcasting; `a` and `b` may be numbers."""
    cond = as_tensor(cond, "where")
    if cond.dtype != dtypes.bool_:
        raise op_error("where", f"condition must be a bool tensor, got {cond.dtype}", (cond,),
                       hint="compare first, e.g. where(x > 0, ...)", exc=TypeError)
    a, b = _operands(a, b, "where")
    return apply(OPS["where"], cond, a, b)


def clamp(x, min=None, max=None):  # noqa: A002
    """Clamp into [min, max]; the gradient is 1 inside the closed interval."""
    if min is None and max is None:
        raise op_error("clamp", "at least one of min and max must be given", (x,))
    # Select the bound only where the comparison is true, so NaN (never comparable) stays
    # NaN as in PyTorch, and at the bound itself x is kept, so its gradient is 1 there
    # (maximum/minimum would split it in half) for number and tensor bounds alike.
    # A NaN bound gives NaN, as in PyTorch: no comparison with it is true, so it is selected
    # explicitly (a number: everywhere; a tensor: where it is NaN).
    if min is not None:
        x = _clamp_side(x, min, lt)
    if max is not None:
        x = _clamp_side(x, max, gt)
    return x


def _clamp_side(x, bound, beyond):
    if isinstance(bound, Tensor):
        x = where(beyond(x, bound), bound, x)
        if dtypes.is_floating(bound.dtype):
            x = where(ne(bound, bound), bound, x)
        return x
    if isinstance(bound, (float, np.floating)) and math.isnan(bound):
        return where(eq(x, x), bound, x)
    return where(beyond(x, bound), bound, x)


clip = clamp
