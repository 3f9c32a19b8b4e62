"""Pooling: max, average, adaptive and max-unpooling, PyTorch's signatures and conventions.

Max pooling is `max_pool_index` and `plane_gather` (eager/ops_pool.py): per window, PyTorch's
flat index into the input plane of its FIRST maximum (so the gradient goes to that one
position, as in PyTorch: amax would split it between ties), or in a window holding NaN its
LAST NaN, as PyTorch's CPU loop does; then the values there.  No window is copied, and the
gradient is added straight back into (N, C, *spatial).  Average pooling reads its windows
through `im2col` (eager/ops_conv.py), padded with 0; adaptive max pooling takes its
windows by gathers and picks as max pooling does.

>>> import eager, eager.nn.functional as F
>>> F.max_pool2d(eager.arange(16.0).reshape(1, 1, 4, 4), 2).flatten().tolist()
[5.0, 7.0, 13.0, 15.0]
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes
from .. import functions as T
from ..dispatch import apply
from ..errors import op_error
from ..ops_conv import im2col, window_count
from ..ops_pool import check_windows_inside, max_pool_index, plane_gather
from ..scan_ops import SCATTER
from .conv import _check_input, ntuple


def _geometry(op, spatial, kernel, stride, padding, dilation, ceil_mode):
    """Per dim: (out size, (pad before, pad after)) with PyTorch's ceil_mode rule (the last
    window must start inside the input or its left padding)."""
    result = []
    for size, k, s, p, d in zip(spatial, kernel, stride, padding, dilation):
        if p > k // 2:
            raise op_error(op, f"padding {tuple(padding)} should be at most half the kernel "
                           f"size {tuple(kernel)}")
        span = size + 2 * p - d * (k - 1) - 1
        if span < 0:
            raise op_error(op, f"the input {tuple(spatial)} (padding {tuple(padding)}) is "
                           f"smaller than the kernel {tuple(kernel)}",
                           hint="use a smaller kernel or more padding")
        out = (span + (s - 1 if ceil_mode else 0)) // s + 1
        if ceil_mode and (out - 1) * s >= size + p:
            out -= 1
        after = max(p, (out - 1) * s + d * (k - 1) + 1 - size - p)
        assert window_count(size, k, s, d, p, after) == out
        result.append((out, (p, after)))
    return result


def _pool_args(op, nd, x, kernel_size, stride, padding, dilation):
    kernel = ntuple(kernel_size, nd, op, "kernel_size")
    stride = kernel if stride is None or stride == [] or stride == () else ntuple(
        stride, nd, op, "stride")
    return kernel, stride, ntuple(padding, nd, op, "padding"), ntuple(dilation, nd, op,
                                                                      "dilation")


def _tiles(kernel, stride, padding, dilation, out, spatial) -> bool:
    """Windows that tile the input (stride == kernel, no padding or dilation, every window
    inside): then they are a reshape and a permute of it, no im2col copy, and their
    gradient is the inverse views (no col2im)."""
    return (tuple(stride) == tuple(kernel) and not any(padding) and set(dilation) == {1}
            and all(o * k <= s for o, k, s in zip(out, kernel, spatial)))


def _tile_windows(x, kernel, out):
    """im2col's layout (C, *kernel, N, *out) of tiling windows, by views of x."""
    nd = len(kernel)
    if any(o * k != s for o, k, s in zip(out, kernel, x.shape[2:])):
        x = T.getitem(x, (slice(None), slice(None)) + tuple(slice(0, o * k)
                                                            for o, k in zip(out, kernel)))
    split = tuple(x.shape[:2]) + tuple(v for o, k in zip(out, kernel) for v in (o, k))
    perm = (1,) + tuple(3 + 2 * i for i in range(nd)) + (0,) + tuple(2 + 2 * i
                                                                      for i in range(nd))
    return T.permute(T.reshape(x, split), perm)


def _window_pick(cols, axis):
    """The window offset max pooling takes along `axis`: the first maximum, or, in a window
    holding NaN, the last NaN (PyTorch's CPU loop keeps `val > max or isnan(val)`: the value
    is NaN and the index points at it)."""
    first = T.argmax(cols, axis)
    if cols.dtype.kind != "f":
        return first
    kk = cols.shape[axis]
    where = [1] * cols.ndim
    where[axis] = kk
    positions = T.reshape(T.arange(kk), tuple(where))
    last_nan = T.amax(T.where(T.isnan(cols), positions, T.const(-1, dtypes.int64)), axis)
    return T.where(T.ge(last_nan, 0), last_nan, first)


def _to_nc_first(y, nd):
    """(C, N, *out) -> (N, C, *out)."""
    return T.permute(y, (1, 0) + tuple(range(2, nd + 2)))


def _max_poolnd(op, nd, x, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    unbatched = _check_input(op, x, nd)
    if unbatched:
        x = T.unsqueeze(x, 0)
    kernel, stride, padding, dilation = _pool_args(op, nd, x, kernel_size, stride, padding,
                                                   dilation)
    geo = _geometry(op, tuple(x.shape[2:]), kernel, stride, padding, dilation, ceil_mode)
    check_windows_inside(op, tuple(x.shape[2:]), tuple(g[0] for g in geo), kernel, stride,
                         dilation, tuple(g[1] for g in geo))
    # PyTorch's index (the flat position in the input plane), then the values there: both
    # read the input where it lies; the gradient adds back at the same positions.
    index = max_pool_index(x, kernel, stride, dilation, tuple(g[1] for g in geo))
    values = plane_gather(x, index)
    if unbatched:
        values, index = T.squeeze(values, 0), T.squeeze(index, 0)
    return (values, index) if return_indices else values


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    return _max_poolnd("max_pool1d", 1, input, kernel_size, stride, padding, dilation,
                       ceil_mode, return_indices)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """Max over kernel windows of (N, C, H, W); stride defaults to the kernel size."""
    return _max_poolnd("max_pool2d", 2, input, kernel_size, stride, padding, dilation,
                       ceil_mode, return_indices)


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    return _max_poolnd("max_pool3d", 3, input, kernel_size, stride, padding, dilation,
                       ceil_mode, return_indices)


def _avg_poolnd(op, nd, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                divisor_override):
    unbatched = _check_input(op, x, nd)
    if unbatched:
        x = T.unsqueeze(x, 0)
    kernel, stride, padding, dilation = _pool_args(op, nd, x, kernel_size, stride, padding, 1)
    spatial = tuple(x.shape[2:])
    geo = _geometry(op, spatial, kernel, stride, padding, dilation, ceil_mode)
    out = tuple(g[0] for g in geo)
    if _tiles(kernel, stride, padding, dilation, out, spatial):
        cols = _tile_windows(x, kernel, out)
    else:
        cols = im2col(x, kernel, stride, dilation, tuple(g[1] for g in geo), 0.0)
    total = T.sum(cols, tuple(range(1, nd + 1)))               # (C, N, *out)
    if divisor_override:
        divisor = np.full(out, float(divisor_override))
    else:
        # PyTorch's divisor: the window clipped to the padded input (count_include_pad), or
        # to the input itself; one factor per dim.
        divisor = np.ones(out)
        for axis, (size, k, s, p) in enumerate(zip(spatial, kernel, stride, padding)):
            start = np.arange(out[axis]) * s - p
            end = np.minimum(start + k, size + p)
            if count_include_pad:
                count = end - start
            else:
                count = np.minimum(end, size) - np.maximum(start, 0)
            divisor = divisor * count.reshape((-1,) + (1,) * (nd - 1 - axis))
    y = T.div(total, T.tensor(divisor, dtype=x.dtype))
    y = _to_nc_first(y, nd)
    return T.squeeze(y, 0) if unbatched else y


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    return _avg_poolnd("avg_pool1d", 1, input, kernel_size, stride, padding, ceil_mode,
                       count_include_pad, None)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """Mean over kernel windows of (N, C, H, W); stride defaults to the kernel size."""
    return _avg_poolnd("avg_pool2d", 2, input, kernel_size, stride, padding, ceil_mode,
                       count_include_pad, divisor_override)


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    return _avg_poolnd("avg_pool3d", 3, input, kernel_size, stride, padding, ceil_mode,
                       count_include_pad, divisor_override)


def _adaptive_windows(size: int, out: int):
    """PyTorch's adaptive windows: [floor(i*L/out), ceil((i+1)*L/out))."""
    starts = [(i * size) // out for i in range(out)]
    ends = [-((-(i + 1) * size) // out) for i in range(out)]
    return starts, ends


def _out_size(op, output_size, spatial):
    nd = len(spatial)
    sizes = output_size if isinstance(output_size, (tuple, list)) else (output_size,) * nd
    if len(sizes) != nd:
        raise op_error(op, f"output_size must be an int or {nd} ints, got {output_size!r}")
    return tuple(s if o is None else int(o) for o, s in zip(sizes, spatial))


def _adaptive_avg(op, nd, x, output_size):
    _check_input(op, x, nd)  # (unbatched works as is: the dims count from the end)
    spatial = tuple(x.shape[x.ndim - nd:])
    out = _out_size(op, output_size, spatial)
    # Separable and linear: one averaging matrix per dim, applied as a matrix product.
    for axis in range(nd):
        size = spatial[axis]
        starts, ends = _adaptive_windows(size, out[axis])
        avg = np.zeros((size, out[axis]))
        for i, (a, b) in enumerate(zip(starts, ends)):
            avg[a:b, i] = 1.0 / (b - a)
        dim = x.ndim - nd + axis
        x = T.transpose(T.matmul(T.transpose(x, dim, -1), T.tensor(avg, dtype=x.dtype)),
                        dim, -1)
    return x


def adaptive_avg_pool1d(input, output_size):
    return _adaptive_avg("adaptive_avg_pool1d", 1, input, output_size)


def adaptive_avg_pool2d(input, output_size):
    """Averages over PyTorch's adaptive windows to an (oh, ow) output (None keeps a size)."""
    return _adaptive_avg("adaptive_avg_pool2d", 2, input, output_size)


def take(x, dim: int, index: np.ndarray):
    """x indexed along `dim` by a static int array (a gather; its vjp a scatter-add)."""
    idx = T.tensor(np.asarray(index, np.int64), dtype=dtypes.int64)
    if dim == 0:
        return T.gather(x, (idx,))
    perm = (dim,) + tuple(i for i in range(x.ndim) if i != dim)
    inverse = tuple(perm.index(i) for i in range(x.ndim))
    return T.permute(T.gather(T.permute(x, perm), (idx,)), inverse)


def _adaptive_max(op, nd, x, output_size, return_indices):
    unbatched = _check_input(op, x, nd)
    if unbatched:
        x = T.unsqueeze(x, 0)
    spatial = tuple(x.shape[2:])
    out = _out_size(op, output_size, spatial)
    # Every window padded to the widest one (repeating its last index, masked with -inf),
    # then the max pooling above's first-max pick over the flattened window.
    widths, valid, flat = [], [], np.zeros((), np.int64)
    plane = np.cumprod((1,) + spatial[::-1])[:-1][::-1]
    for axis in range(nd):
        starts, ends = _adaptive_windows(spatial[axis], out[axis])
        width = max(b - a for a, b in zip(starts, ends))
        idx = np.array([[min(a + j, b - 1) for j in range(width)]
                        for a, b in zip(starts, ends)])
        ok = np.array([[a + j < b for j in range(width)] for a, b in zip(starts, ends)])
        x = take(x, 2 + 2 * axis, idx.reshape(-1))
        x = T.reshape(x, tuple(x.shape[:2 + 2 * axis]) + (out[axis], width)
                      + tuple(x.shape[3 + 2 * axis:]))
        widths.append(width)
        valid.append(ok)
        flat = np.add.outer(flat, idx * plane[axis])
    # x: (N, C, o0, w0, o1, w1, ...) -> (N, C, *out, w0*w1*...)
    perm = (0, 1) + tuple(2 + 2 * a for a in range(nd)) + tuple(3 + 2 * a for a in range(nd))
    kk = math.prod(widths)
    x = T.reshape(T.permute(x, perm), tuple(x.shape[:2]) + out + (kk,))
    mask = np.ones((), bool)
    for ok in valid:
        mask = np.logical_and.outer(mask, ok)
    mask = np.transpose(mask, tuple(2 * a for a in range(nd))
                        + tuple(2 * a + 1 for a in range(nd))).reshape(out + (kk,))
    x = T.where(T.tensor(mask), x, T.const(-math.inf, x.dtype))
    first = _window_pick(x, x.ndim - 1)
    hit = T.eq(T.arange(kk), T.unsqueeze(first, -1))
    values = T.sum(T.where(hit, x, T.const(0, x.dtype)), -1)
    if unbatched:
        values = T.squeeze(values, 0)
    if not return_indices:
        return values
    flat = np.transpose(flat, tuple(2 * a for a in range(nd))
                        + tuple(2 * a + 1 for a in range(nd))).reshape(out + (kk,))
    index = T.gather(T.tensor(flat.reshape(-1), dtype=dtypes.int64),
                     (T.add(T.mul(T.tensor(np.arange(math.prod(out)).reshape(out)), kk),
                            first),))
    return values, (T.squeeze(index, 0) if unbatched else index)


def adaptive_max_pool1d(input, output_size, return_indices=False):
    return _adaptive_max("adaptive_max_pool1d", 1, input, output_size, return_indices)


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """Max over PyTorch's adaptive windows to an (oh, ow) output (None keeps a size)."""
    return _adaptive_max("adaptive_max_pool2d", 2, input, output_size, return_indices)


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Places each value at its max_pool2d index in a zero plane (N, C, H, W); where indices
    repeat, the last value written stays (PyTorch's CPU result)."""
    op = "max_unpool2d"
    unbatched = _check_input(op, input, 2)
    if unbatched:
        input, indices = T.unsqueeze(input, 0), T.unsqueeze(indices, 0)
    if tuple(indices.shape) != tuple(input.shape) or indices.dtype.kind not in "iu":
        raise op_error(op, f"indices must be an integer tensor of the input's shape "
                       f"{tuple(input.shape)}, got {indices.dtype} {tuple(indices.shape)}",
                       (input, indices), hint="pass the indices max_pool2d(..., "
                       "return_indices=True) returned")
    kernel, stride, padding, _ = _pool_args(op, 2, input, kernel_size, stride, padding, 1)
    n, c, h, w = input.shape
    if output_size is None:
        size = tuple((i - 1) * s - 2 * p + k for i, s, p, k in
                     zip((h, w), stride, padding, kernel))
    else:
        size = tuple(int(v) for v in tuple(output_size)[-2:])
    plane = size[0] * size[1]
    idx = T.check_class_index(T.reshape(indices, (n, c, h * w)), plane, op)
    rows = T.tensor(np.arange(n).reshape(n, 1, 1), dtype=dtypes.int64)
    chans = T.tensor(np.arange(c).reshape(1, c, 1), dtype=dtypes.int64)
    # Written, not added: at a repeated index the last write wins, as in PyTorch (whose
    # gradient, a gather, reaches every duplicate: SCATTER's vjp is that gather too).
    zeros = T.expand(T.const(0, input.dtype), (n, c, plane))
    out = apply(SCATTER, zeros, T.reshape(input, (n, c, h * w)), rows, chans, idx)
    out = T.reshape(out, (n, c) + size)
    return T.squeeze(out, 0) if unbatched else out
