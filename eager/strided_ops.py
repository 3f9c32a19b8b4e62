"""True strided views: `diagonal` and `Tensor.unfold` (views in PyTorch, views here).

Each is a numpy view of its input with strides of its own (`as_strided`, writable where the
input is), so eagerly a write through it (`x.diagonal().fill_(0)`, `w.unfold(0, 2, 1)[0]
.zero_()`) reaches the input, as in PyTorch. Inside a trace the tracer links them to their
base like any view (tracer/views.py): a write through one, or through a view of one, is a
`scatter` into the base at the element positions it covers (`positions`: the same
implementation run on the base's element numbers). Their gradients are `scatter_add`s at
those positions, so unfold's overlapping windows add up. Compiled programs run them as
numpy steps that copy (a compiled value never aliases another's memory).

>>> import eager
>>> x = eager.zeros(2, 2)
>>> x.diagonal().fill_(1)
tensor([1., 1.])
>>> x
tensor([[1., 0.],
        [0., 1.]])
"""
from __future__ import annotations

import math

import numpy as np

from .errors import op_error
from .ops import TensorType, has_dims, register

_as_strided = np.lib.stride_tricks.as_strided


def _diagonal_length(n, m, offset):
    return max(0, min(n, m - offset)) if offset >= 0 else max(0, min(n + offset, m))


def _diagonal_impl(a, offset, dim1, dim2):
    length = _diagonal_length(a.shape[dim1], a.shape[dim2], offset)
    start = [slice(None)] * a.ndim
    if length:  # (the diagonal's first element; an empty one reads nothing)
        start[dim2 if offset >= 0 else dim1] = slice(abs(offset), None)
    a0 = a[tuple(start)]
    rest = [d for d in range(a.ndim) if d not in (dim1, dim2)]
    shape = tuple(a.shape[d] for d in rest) + (length,)
    strides = tuple(a.strides[d] for d in rest) + (a.strides[dim1] + a.strides[dim2],)
    return _as_strided(a0, shape, strides)


def _diagonal_infer(a, offset, dim1, dim2):
    _static("diagonal", a)
    shape = tuple(a.shape)
    rest = tuple(shape[d] for d in range(len(shape)) if d not in (dim1, dim2))
    return TensorType(rest + (_diagonal_length(shape[dim1], shape[dim2], offset),), a.dtype)


def _unfold_impl(a, dim, size, step):
    shape = list(a.shape)
    shape[dim] = (a.shape[dim] - size) // step + 1
    strides = list(a.strides)
    strides[dim] = a.strides[dim] * step
    return _as_strided(a, tuple(shape) + (size,), tuple(strides) + (a.strides[dim],))


def _unfold_infer(a, dim, size, step):
    _static("unfold", a)
    shape = list(a.shape)
    shape[dim] = (shape[dim] - size) // step + 1
    return TensorType(tuple(shape) + (size,), a.dtype)


def _static(op, a):
    if has_dims(tuple(a.shape)):
        raise op_error(op, "needs static sizes: its element positions are constants of the "
                       "trace", (a,), hint="trace with a fixed shape (no None in the "
                       "input_signature) for this input")


def positions(op: str, shape: tuple, params: dict) -> np.ndarray:
    """The element numbers (C order) of a tensor of `shape` that view `op[params]` of it
    covers, in the view's shape (repeated where unfold's windows overlap)."""
    from .ops import OPS

    numbers = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    return np.asarray(OPS[op].impl(numbers, **params))


def _scatter_back(op):
    def vjp(g, out, a, **params):
        index = np.unravel_index(positions(op, tuple(a.shape), params), tuple(a.shape))
        # (from_numpy: a trace records the positions as constants of its graph; a bare
        # wrapped array would be captured, which a joint forward-backward graph has no
        # input for)
        return fn.scatter_add(g, tuple(fn.from_numpy(np.ascontiguousarray(i, dtype=np.int64))
                                       for i in index), tuple(a.shape))
    return (vjp,)


S = "shape"
register("diagonal", S, 1, _diagonal_impl, _diagonal_infer, vjp=_scatter_back("diagonal"),
         params=("offset", "dim1", "dim2"), view="strided", recompute=True,
         doc="The `offset` diagonal of dims (dim1, dim2) as a last dim: a strided view.")
register("unfold", S, 1, _unfold_impl, _unfold_infer, vjp=_scatter_back("unfold"),
         params=("dim", "size", "step"), view="strided", recompute=True,
         doc="Windows of `size` every `step` along `dim`, in a new last dim: a strided view "
             "(windows overlap where step < size).")

from . import functions as fn  # noqa: E402  (vjp rules call the front end at run time)
