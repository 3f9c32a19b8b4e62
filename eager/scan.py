"""Scans and sorts, PyTorch style: cumsum, cumprod, cummax, cummin, logcumsumexp, sort,
argsort, topk (issue 16 item 4).

Running values and permutations are registry primitives (`eager.scan_ops`); values picked
by an index (cummax, sort, topk) are gathered with `take_along_dim`, so their gradient goes
back to the picked positions.

>>> import eager
>>> eager.cumsum(eager.tensor([1, 2, 3]), 0)
tensor([1, 3, 6])
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from . import dtypes
from .dispatch import apply
from .functions import _norm_dim, as_tensor, cast, getitem_basic, reshape
from .indexing import take_along_dim
from .scan_ops import ARGSORT, CUM_ARGMAX, CUMPROD, CUMSUM, LOGCUMSUMEXP, size_error

__all__ = ["argsort", "cummax", "cummin", "cumprod", "cumsum", "logcumsumexp", "sort", "topk"]

ValuesIndices = namedtuple("ValuesIndices", ["values", "indices"])


def _scan(op, x, dim, name, dtype=None):
    x = as_tensor(x, name)
    if dtype is not None:
        x = cast(x, dtype)
    axis = _norm_dim(dim, x.ndim, name)
    if x.ndim == 0:  # PyTorch takes dim 0 / -1 of a 0-d tensor: the value itself
        return reshape(apply(op, reshape(x, (1,)), axis=0), ())
    return apply(op, x, axis=axis)


def cumsum(x, dim, *, dtype=None):
    """Running sum along `dim`; integer and bool tensors sum to int64, as in PyTorch."""
    return _scan(CUMSUM, x, dim, "cumsum", dtype)


def cumprod(x, dim, *, dtype=None):
    """Running product along `dim` (its gradient is exact where x has zeros)."""
    return _scan(CUMPROD, x, dim, "cumprod", dtype)


def logcumsumexp(x, dim):
    """log(cumsum(exp(x))) along `dim`, computed as a running logaddexp (no overflow)."""
    x = as_tensor(x, "logcumsumexp")
    if not dtypes.is_floating(x.dtype):
        raise size_error("logcumsumexp", f"needs a floating-point tensor, got {x.dtype}", (x,),
                       hint="cast with .float()", exc=TypeError)
    return _scan(LOGCUMSUMEXP, x, dim, "logcumsumexp")


def _cum_extreme(x, dim, largest, name):
    x = as_tensor(x, name)
    axis = _norm_dim(dim, x.ndim, name)
    if x.ndim == 0:
        return ValuesIndices(x, reshape(apply(CUM_ARGMAX, reshape(x, (1,)), axis=0,
                                              largest=largest), ()))
    idx = apply(CUM_ARGMAX, x, axis=axis, largest=largest)
    return ValuesIndices(take_along_dim(x, idx, axis), idx)


def cummax(x, dim):
    """(values, indices) of the running max along `dim`; NaN propagates, ties take the
    later index, as in PyTorch."""
    return _cum_extreme(x, dim, True, "cummax")


def cummin(x, dim):
    """(values, indices) of the running min along `dim`."""
    return _cum_extreme(x, dim, False, "cummin")


def argsort(x, dim=-1, descending=False, stable=False):
    """Indices that sort `x` along `dim` (always stable; NaN sorts as the largest)."""
    x = as_tensor(x, "argsort")
    axis = _norm_dim(dim, x.ndim, "argsort")
    if x.ndim == 0:
        return reshape(apply(ARGSORT, reshape(x, (1,)), axis=0, descending=bool(descending)),
                       ())
    return apply(ARGSORT, x, axis=axis, descending=bool(descending))


def sort(x, dim=-1, descending=False, stable=False):
    """(values, indices) of `x` sorted along `dim`; equal values keep their order."""
    x = as_tensor(x, "sort")
    idx = argsort(x, dim, descending)
    if x.ndim == 0:
        return ValuesIndices(x, idx)
    return ValuesIndices(take_along_dim(x, idx, _norm_dim(dim, x.ndim, "sort")), idx)


def topk(x, k, dim=-1, largest=True, sorted=True):
    """(values, indices) of the `k` largest (smallest) along `dim`, in sorted order."""
    x = as_tensor(x, "topk")
    axis = _norm_dim(dim, x.ndim, "topk")
    size = x.shape[axis] if x.ndim else 1
    if isinstance(k, np.integer):
        k = int(k)
    if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= size:
        raise size_error("topk", f"k ({k!r}) is out of range for dimension {axis} of size "
                       f"{size}", (x,), hint="k must be an int in [0, size]",
                       exc=RuntimeError)
    if x.ndim == 0:
        return ValuesIndices(x, cast(argsort(x), dtypes.int64))
    idx = argsort(x, axis, descending=bool(largest))
    if k != size:
        idx = getitem_basic(idx, tuple((0, None, 1) if d != axis else (0, k, 1)
                                       for d in range(x.ndim)))
    return ValuesIndices(take_along_dim(x, idx, axis), idx)
