"""Registry rows for sliding windows: `im2col` and its transpose `col2im`.

Convolution, transposed convolution, pooling, `F.unfold` and `F.fold` are all built from
these two primitives plus registry ops (matmul, reductions, elementwise):

* ``im2col(x)``: x of shape (N, C, *spatial), padded per side by ``pad`` with the value
  ``fill``, is cut into windows of ``kernel`` (with ``stride`` and ``dilation``) and laid out
  as columns of shape (C, *kernel, N, *out).  Channels and kernel offsets lead so that a
  convolution is ONE matrix product ``W (O, C*K) @ cols (C*K, N*L)`` without a copy.
* ``col2im(cols)``: the transpose (the scatter-add of the windows back onto the padded
  input, then the crop); each is the other's vjp.

``pad`` is a tuple of (before, after) pairs, one per spatial dimension, so "same" padding
with an even kernel and ceil-mode pooling (extra padding after) need no special case.
"""
from __future__ import annotations

import itertools

import numpy as np

from .dispatch import apply
from .errors import op_error
from .ops import OPS, TensorType, register


def window_count(size: int, kernel: int, stride: int, dilation: int, lo: int, hi: int) -> int:
    """Number of windows along one dimension of `size` padded by (lo, hi)."""
    return (size + lo + hi - dilation * (kernel - 1) - 1) // stride + 1


def _out_sizes(spatial, kernel, stride, dilation, pad) -> tuple:
    return tuple(window_count(n, k, s, d, lo, hi)
                 for n, k, s, d, (lo, hi) in zip(spatial, kernel, stride, dilation, pad))


def _window_slices(offsets, stride, dilation, out_sizes) -> tuple:
    return tuple(slice(o * d, o * d + s * (n - 1) + 1, s)
                 for o, s, d, n in zip(offsets, stride, dilation, out_sizes))


def _check_geometry(op, x, spatial, kernel, stride, dilation, pad):
    nd = len(kernel)
    if not (len(stride) == len(dilation) == len(pad) == nd == len(spatial)):
        raise op_error(op, f"kernel {kernel}, stride {stride}, dilation {dilation} and "
                       f"padding {pad} must all have one entry per spatial dimension "
                       f"({len(spatial)})", (x,))
    for v in kernel + stride + dilation:
        if not isinstance(v, int) or v < 1:
            raise op_error(op, f"kernel {kernel}, stride {stride} and dilation {dilation} "
                           f"must be positive ints", (x,))
    for lo_hi in pad:
        if min(lo_hi) < 0:
            raise op_error(op, f"padding {pad} must be non-negative", (x,))
    out = _out_sizes(spatial, kernel, stride, dilation, pad)
    if min(out, default=1) < 1:
        raise op_error(op, f"the padded input {tuple(spatial)} (padding {pad}) is smaller than "
                       f"the kernel {kernel} with dilation {dilation}: no window fits", (x,),
                       hint="use a smaller kernel, more padding, or a larger input")
    return out


def _im2col_infer(x, kernel, stride, dilation, pad, fill):
    nd = len(kernel)
    if x.ndim != nd + 2:
        raise op_error("im2col", f"expected an input of shape (N, C, *spatial) with {nd} "
                       f"spatial dims, got {tuple(x.shape)}", (x,))
    out = _check_geometry("im2col", x, tuple(x.shape[2:]), kernel, stride, dilation, pad)
    return TensorType((x.shape[1],) + tuple(kernel) + (x.shape[0],) + out, x.dtype)


def _col2im_infer(cols, shape, kernel, stride, dilation, pad):
    nd = len(kernel)
    if cols.ndim != 2 * nd + 2 or tuple(cols.shape[1:1 + nd]) != tuple(kernel):
        raise op_error("col2im", f"expected columns of shape (C, *{tuple(kernel)}, N, *out), "
                       f"got {tuple(cols.shape)}", (cols,))
    out = _check_geometry("col2im", cols, tuple(shape), kernel, stride, dilation, pad)
    if tuple(cols.shape[2 + nd:]) != out:
        raise op_error("col2im", f"columns hold {tuple(cols.shape[2 + nd:])} windows, but an "
                       f"output of {tuple(shape)} with kernel {kernel}, stride {stride}, "
                       f"dilation {dilation} and padding {pad} has {out}", (cols,))
    return TensorType((cols.shape[1 + nd], cols.shape[0]) + tuple(shape), cols.dtype)


def im2col_padded_shape(shape, pad) -> tuple | None:
    """The shape of im2col's padded copy (C, N, *padded spatial) of an input of `shape`,
    or None when nothing is padded."""
    if not any(lo or hi for lo, hi in pad):
        return None
    n, c = shape[:2]
    return (c, n) + tuple(s + lo + hi for s, (lo, hi) in zip(shape[2:], pad))


def _im2col_impl(x, kernel, stride, dilation, pad, fill, out=None, padded=None):
    """`out` and `padded` (of im2col_padded_shape), when given, are arrays of x's dtype
    to write the columns and the padded copy into (a compiled program's reused buffers)."""
    n, c = x.shape[:2]
    spatial = x.shape[2:]
    out_sizes = _out_sizes(spatial, kernel, stride, dilation, pad)
    xt = x.transpose((1, 0) + tuple(range(2, x.ndim)))  # (C, N, *spatial): a view
    padded_shape = im2col_padded_shape(x.shape, pad)
    if padded_shape is not None:
        if padded is None:
            padded = np.full(padded_shape, fill, x.dtype)
        else:
            padded.fill(fill)
        padded[(slice(None), slice(None))
               + tuple(slice(lo, lo + s) for s, (lo, _) in zip(spatial, pad))] = xt
        xt = padded
    cols = out if out is not None else np.empty((c,) + tuple(kernel) + (n,) + out_sizes,
                                                x.dtype)
    for offsets in itertools.product(*(range(k) for k in kernel)):
        src = xt[(slice(None), slice(None)) + _window_slices(offsets, stride, dilation,
                                                              out_sizes)]
        cols[(slice(None),) + offsets] = src
    return cols


def _col2im_impl(cols, shape, kernel, stride, dilation, pad):
    nd = len(kernel)
    c, n = cols.shape[0], cols.shape[1 + nd]
    out_sizes = cols.shape[2 + nd:]
    buf = np.zeros((c, n) + tuple(s + lo + hi for s, (lo, hi) in zip(shape, pad)), cols.dtype)
    for offsets in itertools.product(*(range(k) for k in kernel)):
        buf[(slice(None), slice(None)) + _window_slices(offsets, stride, dilation,
                                                         out_sizes)] += cols[(slice(None),)
                                                                             + offsets]
    crop = buf[(slice(None), slice(None))
               + tuple(slice(lo, lo + s) for s, (lo, _) in zip(shape, pad))]
    return np.ascontiguousarray(crop.transpose((1, 0) + tuple(range(2, crop.ndim))))


def im2col(x, kernel, stride, dilation, pad, fill=0.0):
    """Columns (C, *kernel, N, *out) of the windows of x (N, C, *spatial); see the module."""
    return apply(OPS["im2col"], x, kernel=tuple(kernel), stride=tuple(stride),
                 dilation=tuple(dilation), pad=tuple(tuple(p) for p in pad), fill=float(fill))


def col2im(cols, shape, kernel, stride, dilation, pad):
    """The sum of the windows `cols` (C, *kernel, N, *out) placed back: (N, C, *shape)."""
    return apply(OPS["col2im"], cols, shape=tuple(int(s) for s in shape), kernel=tuple(kernel),
                 stride=tuple(stride), dilation=tuple(dilation),
                 pad=tuple(tuple(p) for p in pad))


register("im2col", "indexing", 1, _im2col_impl, _im2col_infer,
         vjp=(lambda g, out, x, kernel, stride, dilation, pad, fill:
              col2im(g, x.shape[2:], kernel, stride, dilation, pad),),
         params=("kernel", "stride", "dilation", "pad", "fill"),
         doc="Sliding windows of x (N, C, *spatial), padded with `fill`, as columns "
             "(C, *kernel, N, *out): convolution's and pooling's window view (F.unfold).")
register("col2im", "indexing", 1, _col2im_impl, _col2im_infer,
         vjp=(lambda g, out, cols, shape, kernel, stride, dilation, pad:
              im2col(g, kernel, stride, dilation, pad, 0.0),),
         params=("shape", "kernel", "stride", "dilation", "pad"), opmath=True,
         doc="Columns (C, *kernel, N, *out) summed back onto (N, C, *shape): im2col's "
             "transpose (F.fold, transposed convolution).")

__all__ = ["im2col", "col2im", "im2col_padded_shape", "window_count"]
