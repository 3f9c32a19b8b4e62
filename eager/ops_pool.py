"""Registry rows for max pooling without window copies: `max_pool_index`, `plane_gather`
and its transpose `plane_scatter_add`.

``max_pool_index(x)`` reads the windows of x (N, C, *spatial) where they lie and gives, per
window, PyTorch's `return_indices` value: the flat position in the input plane of the
window's maximum, by PyTorch's CPU loop (start at the window's first position inside the
input with max = -inf, take `val > max or isnan(val)`): ties go to the first maximum, a
window holding NaN to its last NaN, a window of -inf (or only padding) to its first
position inside the input.  ``plane_gather(x, index)`` picks those values (N, C, *out);
its vjp ``plane_scatter_add(g, index, shape)`` adds each gradient at its position in a
zero (N, C, *shape), in C order of the windows (each is the other's vjp).

``pad`` is a tuple of (before, after) pairs, one per spatial dimension, as im2col's
(ceil-mode pooling has extra padding after); padding is never a maximum.
"""
from __future__ import annotations

import math

import numpy as np

from .dispatch import apply
from .errors import op_error
from .ops import OPS, TensorType, register
from .ops_conv import _check_geometry, _out_sizes


def window_starts(size: int, count: int, stride: int, dilation: int, lo: int) -> np.ndarray:
    """Per window along one dim: its first position inside the input (PyTorch's clamped
    start: step by the dilation from `o * stride - lo` until it is not negative)."""
    start = np.arange(count) * stride - lo
    return np.where(start < 0, start + (-start + dilation - 1) // dilation * dilation, start)


def check_windows_inside(op, spatial, out, kernel, stride, dilation, pad) -> None:
    """Raise unless every window holds an input position (PyTorch returns -inf for one
    that does not, with an index outside the plane)."""
    for size, count, k, s, d, (lo, _) in zip(spatial, out, kernel, stride, dilation, pad):
        if not all(isinstance(v, int) for v in (size, count)):
            continue
        first = window_starts(size, count, s, d, lo)
        if ((first >= size) | (first > np.arange(count) * s - lo + d * (k - 1))).any():
            raise op_error(op, f"with kernel {tuple(kernel)}, stride {tuple(stride)}, "
                           f"dilation {tuple(dilation)} and padding {tuple(pad)}, some window "
                           f"of the input {tuple(spatial)} holds no input position",
                           hint="use less padding or dilation")


def _max_pool_index_infer(x, kernel, stride, dilation, pad):
    nd = len(kernel)
    if x.ndim != nd + 2:
        raise op_error("max_pool_index", f"expected an input of shape (N, C, *spatial) with "
                       f"{nd} spatial dims, got {tuple(x.shape)}", (x,))
    spatial = tuple(x.shape[2:])
    out = _check_geometry("max_pool_index", x, spatial, kernel, stride, dilation, pad)
    check_windows_inside("max_pool_index", spatial, out, kernel, stride, dilation, pad)
    return TensorType(tuple(x.shape[:2]) + out, np.dtype(np.int64))


def _max_pool_index_impl(x, kernel, stride, dilation, pad):
    nd = len(kernel)
    n, c = x.shape[:2]
    spatial = x.shape[2:]
    out = _out_sizes(spatial, kernel, stride, dilation, pad)
    if any(lo or hi for lo, hi in pad):   # (-inf is never taken: padding is never the max)
        padded = np.full((n, c) + tuple(s + lo + hi for s, (lo, hi) in zip(spatial, pad)),
                         -np.inf, x.dtype)
        padded[(slice(None), slice(None))
               + tuple(slice(lo, lo + s) for s, (lo, _) in zip(spatial, pad))] = x
    else:
        padded = x
    plane = np.cumprod((1,) + tuple(spatial[::-1]))[:-1][::-1]    # row-major strides
    base = np.zeros(out, np.int64)    # plane position of each window's offset 0
    index = np.zeros(out, np.int64)   # ... of its first position inside the input
    for axis in range(nd):
        shape = (-1,) + (1,) * (nd - 1 - axis)
        begin = np.arange(out[axis]) * stride[axis] - pad[axis][0]
        base = base + (begin * plane[axis]).reshape(shape)
        inside = window_starts(spatial[axis], out[axis], stride[axis], dilation[axis],
                               pad[axis][0])
        index = index + (inside * plane[axis]).reshape(shape)
    # PyTorch's loop's answer, by whole-array steps over one kernel offset at a time (no
    # window copy; products of masks, not np.where: a random mask makes that branch):
    # the max (NaN if any), then the first offset equal to it, or the last NaN.
    views, positions = [], []
    for offsets in np.ndindex(*kernel):
        at = tuple(slice(j * d, j * d + s * (o - 1) + 1, s)
                   for j, d, s, o in zip(offsets, dilation, stride, out))
        views.append(padded[(slice(None), slice(None)) + at])
        positions.append(base + sum(j * d * st for j, d, st in zip(offsets, dilation, plane)))
    best = views[0].copy()
    for v in views[1:]:
        np.maximum(best, v, out=best)
    pick = np.zeros(best.shape, np.int64)
    for v, pos in zip(views[::-1], positions[::-1]):
        pick += (v == best) * (pos - pick)
    if np.isnan(best).any():
        for v, pos in zip(views, positions):
            pick += np.isnan(v) * (pos - pick)
    # a window whose maximum is -inf (or only padding): its first position inside
    pick += (best == -np.inf) * (index - pick)
    return pick


def _plane_check(op, x, index):
    if index.dtype.kind not in "iu" or tuple(index.shape[:2]) != tuple(x.shape[:2]):
        raise op_error(op, f"expected an integer index (N, C, ...) of the values' first two "
                       f"dims {tuple(x.shape[:2])}, got {index.dtype} {tuple(index.shape)}",
                       (x, index))


def _plane_gather_infer(x, index):
    _plane_check("plane_gather", x, index)
    return TensorType(tuple(index.shape), x.dtype)


def _check_positions(op, index, plane):
    """Indices outside the plane raise (numpy would wrap negative ones)."""
    if index.size and (index.min() < 0 or index.max() >= plane):
        raise IndexError(f"{op}: an index is outside the input plane of {plane} positions")


def _plane_gather_impl(x, index):
    n, c = x.shape[:2]
    _check_positions("plane_gather", index, math.prod(x.shape[2:]))
    flat = x.reshape(n, c, -1)
    return np.take_along_axis(flat, index.reshape(n, c, -1), axis=2).reshape(index.shape)


def _plane_scatter_add_infer(g, index, shape):
    _plane_check("plane_scatter_add", g, index)
    if tuple(index.shape) != tuple(g.shape):
        raise op_error("plane_scatter_add", f"the index {tuple(index.shape)} must have the "
                       f"values' shape {tuple(g.shape)}", (g, index))
    return TensorType(tuple(g.shape[:2]) + tuple(shape), g.dtype)


def _plane_scatter_add_impl(g, index, shape):
    n, c = g.shape[:2]
    plane = math.prod(shape)
    _check_positions("plane_scatter_add", index, plane)
    out = np.zeros(n * c * plane, g.dtype)
    at = (np.arange(n * c, dtype=np.int64) * plane).reshape(n, c, 1) \
        + index.reshape(n, c, -1)
    np.add.at(out, at.reshape(-1), g.reshape(-1))              # (in C order: as the kernel)
    return out.reshape((n, c) + tuple(shape))


def max_pool_index(x, kernel, stride, dilation, pad):
    """Per window of x (N, C, *spatial): the flat input-plane position of its max."""
    return apply(OPS["max_pool_index"], x, kernel=tuple(kernel), stride=tuple(stride),
                 dilation=tuple(dilation), pad=tuple(tuple(p) for p in pad))


def plane_gather(x, index):
    """x[n, c].flat[index[n, c, ...]]: (N, C, *index's window dims)."""
    return apply(OPS["plane_gather"], x, index)


def plane_scatter_add(g, index, shape):
    """Zeros (N, C, *shape) with each g added at its plane position `index`."""
    return apply(OPS["plane_scatter_add"], g, index, shape=tuple(int(s) for s in shape))


register("max_pool_index", "indexing", 1, _max_pool_index_impl, _max_pool_index_infer,
         params=("kernel", "stride", "dilation", "pad"), opmath=False,
         doc="Per window of x (N, C, *spatial): the flat plane position of its maximum "
             "(PyTorch's rule: first max, last NaN), int64 (N, C, *out).")
register("plane_gather", "indexing", 2, _plane_gather_impl, _plane_gather_infer,
         vjp=lambda g, out, x, index: (plane_scatter_add(g, index, x.shape[2:]), None),
         saves=(1,), opmath=False,
         doc="x[n, c].flat[index[n, c, ...]]: max pooling's values at its indices.")
register("plane_scatter_add", "indexing", 2, _plane_scatter_add_impl,
         _plane_scatter_add_infer, params=("shape",), opmath=True,
         vjp=lambda g, out, v, index, shape: (plane_gather(g, index), None), saves=(1,),
         doc="Zeros (N, C, *shape) with g added at plane positions `index` (C order): "
             "plane_gather's transpose, max pooling's gradient.")

__all__ = ["check_windows_inside", "max_pool_index", "plane_gather", "plane_scatter_add",
           "window_starts"]
