"""Indexing along a dim, PyTorch style: gather, take_along_dim, index_select, scatter,
scatter_add, scatter_reduce, masked_fill, and the eager-only masked_select and nonzero
(issue 16 item 4).

Dim-wise indexing is the registry's integer-array `gather`/`scatter_add` (and the
`scatter`/`scatter_reduce` rows of `eager.scan_ops`) with one index tensor per dim: the
index itself along `dim` and a broadcast `arange` along the others, so everything traces,
differentiates and compiles like any registry op. Index values are checked when the
program runs (traced too): an out-of-range or negative index is an IndexError, as in
PyTorch.

>>> import eager
>>> x = eager.tensor([[1., 2.], [3., 4.]])
>>> eager.gather(x, 1, eager.tensor([[1], [0]]))
tensor([[2.],
        [3.]])
"""
from __future__ import annotations

import numpy as np

from . import dispatch as _dispatch
from . import dtypes
from .dispatch import apply
from .functions import (
    _norm_dim,
    add,
    as_tensor,
    broadcast_to,
    cast,
    check_class_index,
    const,
    div,
    expand,
    flatten,
    getitem_basic,
    gt,
    permute,
    reshape,
)
from .functions import scatter_add as _scatter_add_prim
from .functions import where as _where
from .ops import OPS
from .scan_ops import SCATTER, SCATTER_REDUCE, size_error

__all__ = [
    "gather",
    "index_add",
    "index_copy",
    "index_put",
    "index_select",
    "masked_fill",
    "masked_select",
    "nonzero",
    "scatter",
    "scatter_add",
    "scatter_reduce",
    "take_along_dim",
]

_GATHER = OPS["gather"]


def _int_index(index, op):
    index = as_tensor(index, op)
    if index.dtype.kind not in "iu":
        raise size_error(op, f"index must be an integer tensor, got {index.dtype}", (index,),
                       hint="use .long() on the index", exc=RuntimeError)
    return index


def _aranges(shape, axis, index):
    """One index tensor per dim for element [i0, .., ik] of an index of `shape`: `index`
    along `axis`, the position itself along the others."""
    out = []
    for d, n in enumerate(shape):
        if d == axis:
            out.append(index)
        else:
            view = [1] * len(shape)
            view[d] = n
            out.append(const(np.arange(n, dtype=np.int64).reshape(view), np.int64))
    return tuple(out)


def _along(x, index, axis):
    """x[.., index[i], ..] along `axis` for an index of x's ndim (no value check)."""
    return apply(_GATHER, x, *_aranges(index.shape, axis, index))


def _check_sizes(op, x, index, axis, what="index"):
    if index.ndim != x.ndim and not (index.ndim <= 1 and x.ndim <= 1):
        raise size_error(op, f"{what} tensor must have the same number of dimensions as the "
                       f"input ({index.ndim} vs {x.ndim})", (x, index), exc=RuntimeError)
    for d in range(index.ndim):
        if d != axis and index.shape[d] > x.shape[d]:
            raise size_error(op, f"size of {what} ({tuple(index.shape)}) exceeds the input's "
                           f"({tuple(x.shape)}) at dimension {d}", (x, index),
                           exc=RuntimeError)


def gather(x, dim, index, *, sparse_grad=False):
    """out[i][j] = x[index[i][j]][j] (dim=0), as torch.gather; index has x's ndim."""
    x = as_tensor(x, "gather")
    index = _int_index(index, "gather")
    axis = _norm_dim(dim, x.ndim, "gather")
    if x.ndim == 0:
        x = reshape(x, (1,))
        return reshape(gather(x, 0, reshape(index, (-1,))), index.shape)
    _check_sizes("gather", x, index, axis)
    index = check_class_index(index, x.shape[axis], "gather")
    return _along(x, index, axis)


def take_along_dim(x, indices, dim=None):
    """numpy's take_along_axis: x and indices broadcast except along `dim` (None: the
    flattened x)."""
    x = as_tensor(x, "take_along_dim")
    indices = _int_index(indices, "take_along_dim")
    if dim is None:
        x = flatten(x)
        indices = flatten(indices)
        axis = 0
    else:
        axis = _norm_dim(dim, x.ndim, "take_along_dim")
        if indices.ndim != x.ndim:
            raise size_error("take_along_dim", f"input and indices must have the same number "
                           f"of dimensions ({x.ndim} vs {indices.ndim})", (x, indices),
                           exc=RuntimeError)
        xs = list(x.shape)
        ins = list(indices.shape)
        for d in range(x.ndim):
            if d == axis:
                continue
            if xs[d] != ins[d]:
                if xs[d] == 1:
                    xs[d] = ins[d]
                elif ins[d] == 1:
                    ins[d] = xs[d]
                else:
                    raise size_error("take_along_dim", f"shapes {tuple(x.shape)} and "
                                   f"{tuple(indices.shape)} do not broadcast outside dim "
                                   f"{axis}", (x, indices), exc=RuntimeError)
        x = expand(x, tuple(xs))
        indices = expand(indices, tuple(ins))
    # A negative index is an IndexError, as in PyTorch (numpy's take_along_axis wraps it).
    indices = check_class_index(indices, x.shape[axis], "take_along_dim")
    return _along(x, indices, axis)


def index_select(x, dim, index):
    """The entries of `x` at the 1-D `index` along `dim`."""
    x = as_tensor(x, "index_select")
    index = _int_index(index, "index_select")
    if index.ndim > 1:
        raise size_error("index_select", f"index must be 0-d or 1-d, got {index.ndim}-d",
                       (index,), exc=IndexError)
    axis = _norm_dim(dim, x.ndim, "index_select")
    if x.ndim == 0:
        return reshape(index_select(reshape(x, (1,)), 0, index), ())
    index = check_class_index(reshape(index, (-1,)), x.shape[axis], "index_select")
    perm = [axis] + [d for d in range(x.ndim) if d != axis]
    out = apply(_GATHER, permute(x, perm), index)
    inv = [0] * x.ndim
    for i, p in enumerate(perm):
        inv[p] = i
    return permute(out, inv)


def _src_for(op, x, index, src, axis):
    """`src` cut (or a number broadcast) to the index's shape, in x's dtype."""
    if isinstance(src, (int, float, bool, np.number, np.bool_)):
        return broadcast_to(const(np.array(src).astype(x.dtype), x.dtype), tuple(index.shape))
    src = as_tensor(src, op)
    if src.dtype != x.dtype:
        raise size_error(op, f"expected src ({src.dtype}) to have the input's dtype {x.dtype}",
                       (x, src), hint="cast src with .to(x.dtype)", exc=RuntimeError)
    _check_sizes(op, src, index, -1, what="index")
    if tuple(src.shape) != tuple(index.shape):
        src = getitem_basic(src, tuple((0, n, 1) for n in index.shape))
    return src


def _scatter_setup(op, x, dim, index, src):
    x = as_tensor(x, op)
    index = _int_index(index, op)
    axis = _norm_dim(dim, x.ndim, op)
    if x.ndim == 0:
        raise size_error(op, "a 0-d input is not supported; reshape it to (1,)", (x,))
    _check_sizes(op, x, index, axis)
    src = _src_for(op, x, index, src, axis)
    index = check_class_index(index, x.shape[axis], op)
    return x, axis, _aranges(index.shape, axis, index), src


def scatter(x, dim, index, src=None, *, value=None, reduce=None):
    """x with src (or `value`) written at `index` along `dim`, as torch.scatter: x[index[i]
    [j]][j] = src[i][j] (dim=0). With repeated indices the last write wins."""
    if src is None:
        src = value
    if src is None:
        raise size_error("scatter", "needs src or value", exc=TypeError)
    if reduce is not None:
        return scatter_reduce(x, dim, index, src, {"add": "sum", "multiply": "prod"}.get(
            reduce, reduce))
    x, _axis, idx, src = _scatter_setup("scatter", x, dim, index, src)
    return apply(SCATTER, x, src, *idx)


def scatter_add(x, dim, index, src):
    """x with src added at `index` along `dim`; repeated indices add up."""
    x, _axis, idx, src = _scatter_setup("scatter_add", x, dim, index, src)
    return add(x, _scatter_add_prim(src, idx, x.shape))


def _index_source(op, x, dim, index, source):
    """The 1-D `index` of index_add / index_copy spread over `source`'s shape (a scatter
    index), after PyTorch's checks."""
    x, source = as_tensor(x, op), as_tensor(source, op)
    index = _int_index(index, op)
    if index.ndim > 1:
        raise size_error(op, f"index must be 0-d or 1-d, got {index.ndim}-d", (index,),
                         exc=IndexError)
    axis = _norm_dim(dim, max(x.ndim, 1), op)
    index = reshape(index, (-1,))
    want = tuple(x.shape[:axis]) + (index.shape[0],) + tuple(x.shape[axis + 1:])
    if x.ndim == 0 or tuple(source.shape) != want:
        raise size_error(op, f"source of shape {tuple(source.shape)} does not fit: along "
                         f"dim {axis} it needs the index's length ({index.shape[0]}) and "
                         f"elsewhere the input's sizes {tuple(x.shape)}, i.e. {want}",
                         (x, index, source), exc=RuntimeError)
    view = [1] * x.ndim
    view[axis] = index.shape[0]
    return x, axis, broadcast_to(reshape(index, tuple(view)), want), source


def index_add(x, dim, index, source, *, alpha=1):
    """x with alpha * source[.., i, ..] added into x[.., index[i], ..] along `dim`;
    repeated indices add up, as torch.index_add."""
    x, axis, full, source = _index_source("index_add", x, dim, index, source)
    if alpha != 1:
        source = source * alpha
    return scatter_add(x, axis, full, source)


def index_copy(x, dim, index, source):
    """x with x[.., index[i], ..] = source[.., i, ..] along `dim`, as torch.index_copy."""
    x, axis, full, source = _index_source("index_copy", x, dim, index, source)
    return scatter(x, axis, full, source)


_REDUCES = ("sum", "prod", "mean", "amax", "amin")


def scatter_reduce(x, dim, index, src, reduce, *, include_self=True):
    """x with src reduced in at `index` along `dim` (reduce: sum, prod, mean, amax, amin);
    include_self=False leaves x's values out where something is scattered."""
    if reduce not in _REDUCES:
        raise size_error("scatter_reduce", f"reduce must be one of {_REDUCES}, got {reduce!r}",
                       exc=RuntimeError)
    x, _axis, idx, src = _scatter_setup("scatter_reduce", x, dim, index, src)
    if reduce in ("amax", "amin", "prod"):
        return apply(SCATTER_REDUCE, x, src, *idx, reduce=reduce,
                     include_self=bool(include_self))
    if x.dtype == dtypes.bool_:
        raise size_error("scatter_reduce", f"reduce={reduce!r} of a bool tensor", (x,),
                       exc=TypeError)
    total = _scatter_add_prim(src, idx, x.shape)
    ones = broadcast_to(const(1, x.dtype), tuple(src.shape))
    count = _scatter_add_prim(ones, idx, x.shape)
    touched = gt(count, const(0, x.dtype))
    if include_self:
        total = add(total, x)
        count = add(count, const(1, x.dtype))
    if reduce == "mean":
        count = _where(touched, count, const(1, x.dtype))  # (no division by 0 anywhere)
        # integers: the sum floor-divided by the count, as PyTorch's div_(count, "floor")
        total = div(total, count,
                    rounding_mode=None if dtypes.is_floating(x.dtype) else "floor")
    return _where(touched, total, x)


def masked_fill(x, mask, value):
    """x with `value` where `mask` is True (value: a number or a 0-d tensor, cast to x's
    dtype)."""
    x = as_tensor(x, "masked_fill")
    mask = as_tensor(mask, "masked_fill")
    if mask.dtype != dtypes.bool_:
        raise size_error("masked_fill", f"only supports boolean masks, but got mask with dtype "
                       f"{mask.dtype}", (x, mask), hint="compare first, e.g. mask == 0",
                       exc=RuntimeError)
    if hasattr(value, "_data"):
        if value.ndim != 0:
            raise size_error("masked_fill", f"only supports a 0-dimensional value tensor, but "
                           f"got tensor with {value.ndim} dimension(s)", (value,),
                           exc=RuntimeError)
        fill = cast(value, x.dtype)
    else:
        fill = const(np.array(value).astype(x.dtype), x.dtype)
    return apply(OPS["where"], mask, fill, x)


def _refuse_traced(x, what):
    """While tracing, raise the tracer's error (naming the user's line) for an op whose
    output shape depends on values."""
    if not _dispatch.tracing():
        return
    if type(x._data) is np.ndarray:  # a captured tensor: make it a value of the trace
        x = apply(OPS["stop_gradient"], x)
    fail = getattr(x._data, "_fail", None)
    if fail is not None:
        fail(what)
    x._data.to_numpy()


def masked_select(x, mask):
    """The 1-D tensor of x's values where mask (broadcast) is True. Eager only: the output's
    size depends on the mask's values."""
    x = as_tensor(x, "masked_select")
    mask = as_tensor(mask, "masked_select")
    if mask.dtype != dtypes.bool_:
        raise size_error("masked_select", f"expected a bool mask, got {mask.dtype}", (mask,),
                       exc=RuntimeError)
    _refuse_traced(mask, "masked_select() (its output's size depends on the mask's values; "
                         "keep the shape with masked_fill(x, ~mask, 0) or where(mask, x, 0))")
    shape = tuple(np.broadcast_shapes(x.shape, mask.shape)) or (1,)
    x = expand(reshape(x, (1,)) if not x.ndim else x, shape)
    rows = np.nonzero(np.broadcast_to(mask.numpy(), shape))
    idx = tuple(const(r.astype(np.int64), np.int64) for r in rows)
    return apply(_GATHER, x, *idx)


def nonzero(x, *, as_tuple=False):
    """Indices of the nonzero entries: an (n, ndim) int64 tensor (as_tuple: one 1-D tensor
    per dim). Eager only: n depends on the values."""
    return _nonzero(x, as_tuple, "nonzero")


_ONE_ARG = object()


def where(cond, a=_ONE_ARG, b=_ONE_ARG):
    """eager.where: cond ? a : b with broadcasting (`a` and `b` may be numbers); `where(cond)`
    alone is `nonzero(cond, as_tuple=True)` (eager only: its size depends on the values)."""
    if a is _ONE_ARG and b is _ONE_ARG:
        return _nonzero(cond, True, "where")
    if a is _ONE_ARG or b is _ONE_ARG:
        raise size_error("where", "takes a condition alone or a condition and two values",
                         hint="where(cond, x, y), or where(cond) for the indices",
                         exc=TypeError)
    return _where(cond, a, b)


def _nonzero(x, as_tuple, op):
    x = as_tensor(x, op)
    what = "where(cond) with one argument" if op == "where" else f"{op}()"
    _refuse_traced(x, f"{what} (its output's size depends on the values; keep the shape "
                      f"with a mask: where(x != 0, ..., ...) or masked_fill)")
    data = x.detach().numpy()
    if data.ndim == 0:  # PyTorch: (1, 0) or (0, 0)
        return _new(np.zeros((int(data != 0), 0), np.int64)) if not as_tuple else \
            (_new(np.zeros(int(data != 0), np.int64)),)
    rows = np.nonzero(data)
    if as_tuple:
        return tuple(_new(r.astype(np.int64)) for r in rows)
    return _new(np.stack(rows, axis=1).astype(np.int64) if rows else
                np.zeros((0, 0), np.int64))


def _new(arr):
    from .functions import from_numpy

    return from_numpy(np.ascontiguousarray(arr))


def index_put(input, indices, values, accumulate=False):  # noqa: A002 - (PyTorch's name)
    """torch.index_put: `input` with `values` written (or, `accumulate`, added) at the index
    tensors `indices`, a new tensor (Tensor.index_put_, eager/index_assign.py, writes in place).

    >>> import eager
    >>> eager.index_put(eager.zeros(3), (eager.tensor([0, 0]),), eager.ones(2), True).tolist()
    [2.0, 0.0, 0.0]
    """
    return as_tensor(input, "index_put").index_put(indices, values, accumulate)
