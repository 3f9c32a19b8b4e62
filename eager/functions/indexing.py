"""Indexing: x[key] (basic and advanced keys), and the index ops autograd and nn use."""
from __future__ import annotations

import builtins

import numpy as np

from .. import dtypes
from ..dispatch import apply
from ..errors import describe, op_error
from ..ops import OPS, Dim, broadcast_shapes
from .shapes import _shape_text, permute

_builtin_sum = builtins.sum

Tensor = None  # bound by eager/__init__.py

__all__ = [
    "check_class_index",
    "check_finite",
    "gather",
    "getitem",
    "getitem_basic",
    "normalize_key",
    "scatter_add",
    "scatter_slice",
    "slice_update",
]


# --------------------------------------------------------------------------------------
# indexing

def _is_advanced(item):
    if isinstance(item, Tensor):
        return True
    if isinstance(item, np.ndarray):
        return True
    if isinstance(item, (list, tuple)):
        return True
    return False


def _index_tensor(item, size_hint):
    """Integer index tensors for an advanced index item (bool masks become nonzero())."""
    if not isinstance(item, Tensor):
        arr = np.asarray(item)
        if arr.dtype.kind not in "iub" and arr.size:
            raise op_error("index", f"index arrays must be integer or bool, got {arr.dtype}",
                           exc=IndexError)
        if arr.size == 0:
            arr = arr.astype(np.int64)
        item = Tensor._wrap(arr.astype(np.int64) if arr.dtype.kind in "iu" else arr)
    if item.dtype == dtypes.bool_:
        mask = item.numpy()
        return [Tensor._wrap(ix.astype(np.int64)) for ix in np.nonzero(mask)]
    if item.dtype.kind not in "iu":
        raise op_error("index", f"index tensors must be integer or bool, got {item.dtype}",
                       (item,), hint="use .long()", exc=IndexError)
    return [item]


def getitem(x, key):
    """x[key]: ints, slices, None, Ellipsis, and integer/bool arrays (advanced indexing)."""
    index, advanced = normalize_key(x, key)
    if builtins.all(isinstance(i, tuple) and (i == (0, x.shape[j], 1) or i == (0, None, 1))
           for j, i in enumerate(index)) and len(index) <= x.ndim:
        r = x
    else:
        r = getitem_basic(x, index)
    if not advanced:
        return r
    adv_axes = [a for a, _ in advanced]
    idx = [ti for _, ti in advanced]
    others = [a for a in range(r.ndim) if a not in adv_axes]
    r = permute(r, adv_axes + others)
    bshape = broadcast_shapes("index", *(ti.shape for ti in idx))
    out = apply(OPS["gather"], r, *idx)
    adjacent = adv_axes == list(range(adv_axes[0], adv_axes[0] + len(adv_axes)))
    if adjacent and adv_axes[0] > 0:
        nb = len(bshape)
        first = adv_axes[0]
        rest = list(range(nb, out.ndim))
        out = permute(out, rest[:first] + list(range(nb)) + rest[first:])
    return out


def normalize_key(x, key):
    """`x[key]` as (the registry's basic index, [(output axis, index tensor)] of the
    advanced items), checking the key against `x`'s shape."""
    if not isinstance(key, tuple):
        key = (key,)
    n_real = _builtin_sum(1 for k in key if k is not None and k is not Ellipsis and not (
        isinstance(k, (Tensor, np.ndarray)) and k.dtype == np.bool_ and k.ndim > 1))
    n_real += _builtin_sum(k.ndim for k in key
                           if isinstance(k, (Tensor, np.ndarray)) and k.dtype == np.bool_
                           and k.ndim > 1)
    if _builtin_sum(1 for k in key if k is Ellipsis) > 1:
        raise op_error("index", "an index can only have a single ellipsis", (x,), exc=IndexError)
    if n_real > x.ndim:
        raise op_error("index", f"too many indices for a {x.ndim}-d tensor: {len(key)} given",
                       (x,), exc=IndexError)
    expanded = []
    for k in key:
        if k is Ellipsis:
            expanded.extend([slice(None)] * (x.ndim - n_real))
        else:
            expanded.append(k)
    basic = []
    advanced = []  # (output axis after the basic step, index tensors)
    axis = 0
    out_axis = 0
    for k in expanded:
        if k is None:
            basic.append(None)
            out_axis += 1
        elif isinstance(k, slice) and isinstance(x.shape[axis], Dim):
            # Only a whole `:` keeps a symbolic size: (0, None, 1) runs to the end.
            if k.start not in (None, 0) or k.stop is not None or k.step not in (None, 1):
                x.shape[axis].unknown(f"the slice {k.start}:{k.stop}:{k.step} along the "
                                      f"symbolic dimension {x.shape[axis]} of "
                                      f"{_shape_text(x.shape)}")
            basic.append((0, None, 1))
            axis += 1
            out_axis += 1
        elif isinstance(k, slice):
            start, stop, step = k.indices(x.shape[axis])
            basic.append((start, stop if stop >= 0 else None, step))
            axis += 1
            out_axis += 1
        elif isinstance(k, (bool, np.bool_)):
            raise op_error("index", "bool scalars are not supported as indices", (x,),
                           exc=IndexError)
        elif isinstance(k, (int, np.integer)):
            size = x.shape[axis]
            if isinstance(size, Dim):
                size.unknown(f"the integer index {k} along the symbolic dimension {size} of "
                             f"{_shape_text(x.shape)}")
            if not -size <= k < size:
                raise op_error("index", f"index {k} is out of bounds for dimension {axis} "
                               f"with size {size}", (x,), exc=IndexError)
            basic.append(int(k) % size)
            axis += 1
        elif _is_advanced(k):
            tensors = _index_tensor(k, x.shape[axis])
            for ti in tensors:
                _check_index_bounds(x, ti, axis)
                advanced.append((out_axis, ti))
                basic.append((0, None, 1) if isinstance(x.shape[axis], Dim)
                             else (0, x.shape[axis], 1))
                axis += 1
                out_axis += 1
        else:
            raise op_error("index", f"unsupported index {describe(k)}", (x,),
                           hint="use ints, slices, None, ... or integer tensors",
                           exc=IndexError)
    return tuple(basic), advanced


def _check_index_bounds(x, ti, axis):
    # numpy would report this from inside gather as "numpy failed"; say it like basic indexing
    # does, as an IndexError (traced index values are unknown, so only concrete ones are checked)
    data = ti._data
    if type(data) is not np.ndarray or not data.size:
        return
    size = x.shape[axis]
    if isinstance(size, Dim):  # checked by numpy at run time
        return
    bad = (data < -size) | (data >= size)
    if bad.any():
        raise op_error("index", f"index {int(data[bad].flat[0])} is out of bounds for dimension "
                       f"{axis} with size {size}", (x, ti), exc=IndexError)


def getitem_basic(x, index):
    """Apply a normalized basic index (see eager.ops) directly."""
    return apply(OPS["getitem"], x, index=tuple(index))


def scatter_slice(g, shape, index):
    return apply(OPS["scatter_slice"], g, shape=tuple(shape), index=tuple(index))


def slice_update(base, value, index):
    """`base` with the region `base[index]` (a normalized basic index) replaced by `value`."""
    return apply(OPS["slice_update"], base, value, index=tuple(index))


def gather(x, idx):
    return apply(OPS["gather"], x, *idx)


def check_class_index(idx, size, op):
    """`idx` after checking (when the program runs) that every value is in [0, size): class
    labels and embedding rows raise IndexError for a negative index, as in PyTorch, where
    indexing would count it from the end."""
    if isinstance(size, Dim):
        return idx
    return apply(OPS["check_class_index"], idx, size=int(size), what=op)


def check_finite(x, what: str):
    """`x` after checking, when the program runs (traced too), that it holds no NaN or
    infinity: RuntimeError(what) otherwise."""
    return apply(OPS["check_finite"], x, what=what)


def scatter_add(g, idx, shape):
    return apply(OPS["scatter_add"], g, *idx, shape=tuple(shape))
