"""Reductions (sum, mean, var, amax, argmax, max, logsumexp ...) and matmul."""
from __future__ import annotations

import builtins
import math
from collections import namedtuple

from .. import dtypes
from ..dispatch import apply
from ..errors import op_error
from ..ops import OPS, Dim
from .elementwise import _half_in_float32
from .elementwise import (abs, add, as_tensor, cast, const, div, eq, exp, log, logical_not,
                          maximum, minimum, mul, neg, sqrt, sub, where)
from .shapes import _norm_axes, _norm_dim, reshape, squeeze

Tensor = None  # bound by eager/__init__.py

__all__ = [
    "MaxResult",
    "amax",
    "amin",
    "argmax",
    "argmin",
    "detach",
    "dot",
    "logsumexp",
    "matmul",
    "max",
    "mean",
    "min",
    "std",
    "stop_gradient",
    "sum",
    "var",
]


# --------------------------------------------------------------------------------------
# numpy's argument names, which PyTorch accepts too: axis= for dim=, keepdims= for keepdim=

_ALIASES = {"axis": "dim", "keepdims": "keepdim"}


def _dim_aliases(fn):
    """`fn` also taking axis= for dim= and keepdims= for keepdim= (as PyTorch's functions
    and methods do); giving both names of one argument is a TypeError."""
    def with_aliases(*args, **kwargs):
        if kwargs and ("axis" in kwargs or "keepdims" in kwargs):
            for alias, name in _ALIASES.items():
                if alias in kwargs:
                    if name in kwargs:
                        raise TypeError(f"{fn.__name__}() got both {name}= and its alias "
                                        f"{alias}=: give one")
                    kwargs[name] = kwargs.pop(alias)
        return fn(*args, **kwargs)
    with_aliases.__name__ = fn.__name__
    with_aliases.__qualname__ = fn.__qualname__
    with_aliases.__doc__, with_aliases.__module__ = fn.__doc__, fn.__module__
    return with_aliases


# --------------------------------------------------------------------------------------
# reductions

@_dim_aliases
def sum(x, dim=None, keepdim=False, dtype=None):  # noqa: A001
    x = as_tensor(x, "sum")
    if dtype is not None:
        x = cast(x, dtype)
    return apply(OPS["sum"], x, axes=_norm_axes(dim, x.ndim, "sum"), keepdim=bool(keepdim))


def _float_reduction(x, op):
    x = as_tensor(x, op)
    if not dtypes.is_floating(x.dtype):
        raise op_error(op, f"needs a floating-point tensor, got {x.dtype}", (x,),
                       hint="cast with .float() first", exc=TypeError)
    return x


def _symbolic_count(x, axes):
    """How many elements a reduction over `axes` of `x` combines, where one of those sizes
    is symbolic (tracer): counted at run time, as the sum of ones broadcast to the reduced
    sizes (in int64: exact), cast to x's dtype."""
    ones = apply(OPS["broadcast_to"], const(1, dtypes.int64),
                 shape=tuple(x.shape[a] for a in axes))
    return cast(apply(OPS["sum"], ones, axes=tuple(range(len(axes))), keepdim=False), x.dtype)


@_dim_aliases
@_half_in_float32
def mean(x, dim=None, keepdim=False):
    x = _float_reduction(x, "mean")
    axes = _norm_axes(dim, x.ndim, "mean")
    total = apply(OPS["sum"], x, axes=axes, keepdim=bool(keepdim))
    if builtins.any(isinstance(x.shape[a], Dim) for a in axes):
        return div(total, _symbolic_count(x, axes))
    count = math.prod(x.shape[a] for a in axes)
    return mul(total, const(1.0 / count if count else float("nan"), x.dtype))


@_dim_aliases
@_half_in_float32
def var(x, dim=None, unbiased=True, keepdim=False, *, correction=None):
    """Variance over `dim` (torch.var): sum((x - mean)^2) / max(N - correction, 0), with
    Bessel's correction 1 unless ``unbiased=False`` or `correction` says otherwise. One
    element with correction 1 gives NaN, as in PyTorch."""
    x = _float_reduction(x, "var")
    c = (1 if unbiased else 0) if correction is None else correction
    axes = _norm_axes(dim, x.ndim, "var")
    d = sub(x, mean(x, axes, keepdim=True))
    total = apply(OPS["sum"], mul(d, d), axes=axes, keepdim=bool(keepdim))
    if builtins.any(isinstance(x.shape[a], Dim) for a in axes):
        return div(total, maximum(sub(_symbolic_count(x, axes), const(c, x.dtype)),
                                  const(0, x.dtype)))
    return div(total, const(builtins.max(math.prod(x.shape[a] for a in axes) - c, 0),
                            x.dtype))


@_dim_aliases
@_half_in_float32
def std(x, dim=None, unbiased=True, keepdim=False, *, correction=None):
    """sqrt(var(x, ...)) (torch.std). At zero spread the gradient is 0, as in PyTorch (the
    plain sqrt's 0.5 / 0 times the zero deviations would give NaN)."""
    v = var(x, dim, unbiased, keepdim, correction=correction)
    zero = eq(v, const(0, v.dtype))
    return where(zero, const(0, v.dtype), sqrt(where(zero, const(1, v.dtype), v)))


@_dim_aliases
def amax(x, dim=None, keepdim=False):
    x = as_tensor(x, "amax")
    return apply(OPS["amax"], x, axes=_norm_axes(dim, x.ndim, "amax"), keepdim=bool(keepdim))


@_dim_aliases
def amin(x, dim=None, keepdim=False):
    x = as_tensor(x, "amin")
    if x.dtype == dtypes.bool_:
        return logical_not(amax(logical_not(x), dim, keepdim))
    if x.dtype.kind in "iu":
        return _reverse_order(amax(_reverse_order(x), dim, keepdim))
    return neg(amax(neg(x), dim, keepdim))


def _reverse_order(x):
    """An order-reversing bijection of an integer tensor without overflow: -x - 1, which is
    ~x in wrapping two's complement (-x alone maps INT_MIN to itself, so min and argmin
    computed as -max(-x) missed INT_MIN)."""
    return sub(neg(x), const(1, x.dtype))


@_dim_aliases
def argmax(x, dim=None, keepdim=False):
    x = as_tensor(x, "argmax")
    axis = None if dim is None else _norm_dim(dim, x.ndim, "argmax")
    if x.ndim == 0:
        axis = None
    return apply(OPS["argmax"], x, axis=axis, keepdim=bool(keepdim))


@_dim_aliases
def argmin(x, dim=None, keepdim=False):
    x = as_tensor(x, "argmin")
    if x.dtype == dtypes.bool_:
        return argmax(logical_not(x), dim, keepdim)
    return argmax(_reverse_order(x) if x.dtype.kind in "iu" else neg(x), dim, keepdim)


MaxResult = namedtuple("MaxResult", ["values", "indices"])


@_dim_aliases
def max(x, dim=None, keepdim=False):  # noqa: A001
    """max(x) -> 0-d max; max(x, dim) -> (values, indices); max(x, y) -> maximum."""
    if isinstance(dim, Tensor):
        return maximum(x, dim)
    if dim is None:
        return amax(x)
    return MaxResult(amax(x, dim, keepdim), argmax(x, dim, keepdim))


@_dim_aliases
def min(x, dim=None, keepdim=False):  # noqa: A001
    if isinstance(dim, Tensor):
        return minimum(x, dim)
    if dim is None:
        return amin(x)
    return MaxResult(amin(x, dim, keepdim), argmin(x, dim, keepdim))


@_dim_aliases
def logsumexp(x, dim, keepdim=False):
    m = detach(amax(x, dim, keepdim=True))
    m = where(eq(abs(m), float("inf")), const(0, m.dtype), m)
    r = add(log(sum(exp(sub(x, m)), dim, keepdim=True)), m)
    return r if keepdim else squeeze(r, dim)


def detach(x):
    return x.detach()


def stop_gradient(x):
    """x, with gradients not flowing back through it (JAX's name; like detach, but always
    an op, so it is visible in traced graphs)."""
    return apply(OPS["stop_gradient"], as_tensor(x, "stop_gradient"))


# --------------------------------------------------------------------------------------
# matmul

def matmul(a, b):
    """Matrix product with NumPy/PyTorch semantics for 1-D, 2-D and batched operands."""
    a = as_tensor(a, "matmul")
    b = as_tensor(b, "matmul")
    if a.ndim == 0 or b.ndim == 0:
        raise op_error("matmul", "both arguments must be at least 1-D", (a, b),
                       hint="use * for scalar multiplication")
    if a.dtype != b.dtype:
        dtype = dtypes.promote(a.dtype, b.dtype)
        a, b = cast(a, dtype), cast(b, dtype)
    if a.dtype.kind == "b":
        raise op_error("matmul", "bool operands are not supported", (a, b), exc=TypeError)
    a1, b1 = a.ndim == 1, b.ndim == 1
    if a1 and b1 and a.shape[0] != b.shape[0]:
        raise op_error("matmul", f"1-D operands of different lengths {a.shape} and {b.shape}",
                       (a, b))
    if a1:
        a = reshape(a, (1, a.shape[0]))
    if b1:
        b = reshape(b, (b.shape[0], 1))
    if a.ndim > 2 and b.ndim == 2 \
            and builtins.all(type(d) is int for d in a.shape + b.shape):
        # A matrix applied to a batch (a linear layer on (L, N, K)) is one product of all
        # the batch's rows: numpy multiplies batches one at a time, and with a C-ordered b
        # without BLAS (W10's decoder (35, 20, 128) @ (128, 1000): 17 ms, 1.6 ms as one
        # product); its gradient for b is then one product too, not one per batch summed.
        lead = a.shape[:-1]
        rows = apply(OPS["matmul"], reshape(a, (math.prod(lead), a.shape[-1])), b)
        out = reshape(rows, lead + b.shape[-1:])
        return reshape(out, out.shape[:-1]) if b1 else out
    out = apply(OPS["matmul"], a, b)
    if a1 and b1:
        return reshape(out, ())
    if a1:
        return reshape(out, out.shape[:-2] + out.shape[-1:])
    if b1:
        return reshape(out, out.shape[:-1])
    return out


def dot(a, b):
    return matmul(a, b)

