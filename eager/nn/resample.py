"""F.pad and F.interpolate: composites of gathers with static index arrays, cat and slices.

Shapes are static, so every index array and interpolation weight is computed here with
numpy once per trace; the gradient of each gather is a scatter-add (a reflected or
replicated border element collects the gradient of all its copies, as in PyTorch).

>>> import eager, eager.nn.functional as F
>>> F.pad(eager.tensor([[1.0, 2.0, 3.0]]), (2, 1), mode="reflect").tolist()
[[3.0, 2.0, 1.0, 2.0, 3.0, 2.0]]
"""
from __future__ import annotations

import math

import numpy as np

from .. import functions as T
from ..errors import op_error
from .pooling import take
from ..dtypes import is_floating


def _pairs(op, pad, ndim):
    pad = tuple(int(p) for p in pad)
    if len(pad) % 2 or len(pad) // 2 > ndim:
        raise op_error(op, f"padding {pad} must have an even length of at most 2 * the "
                       f"input's {ndim} dims", hint="give (left, right[, top, bottom, ...]) "
                       "pairs, starting with the last dimension")
    # pairs run from the last dim backwards
    return {ndim - 1 - i: (pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)}


def _border_index(mode, size, lo, hi):
    i = np.arange(-lo, size + hi)
    if mode == "reflect":
        period = 2 * (size - 1)
        j = np.abs(i) % period if period else np.zeros_like(i)
        return np.where(j >= size, period - j, j)
    if mode == "replicate":
        return np.clip(i, 0, size - 1)
    return i % size  # circular


def pad(input, pad, mode: str = "constant", value=None):
    """PyTorch's F.pad: (left, right, top, bottom, ...) from the last dim backwards;
    negative amounts crop. Modes: constant, reflect, replicate, circular."""
    x = input
    pairs = _pairs("pad", pad, x.ndim)
    if mode == "constant":
        fill = 0.0 if value is None else value
        for dim, (lo, hi) in sorted(pairs.items()):
            size = x.shape[dim]
            if lo < 0 or hi < 0:
                start, stop = max(-lo, 0), size - max(-hi, 0)
                x = T.getitem(x, (slice(None),) * dim + (slice(start, max(stop, start)),))
            parts = [x]
            for amount, at_end in ((lo, False), (hi, True)):
                if amount > 0:
                    shape = tuple(x.shape[:dim]) + (amount,) + tuple(x.shape[dim + 1:])
                    block = T.expand(T.const(fill, x.dtype), shape)
                    parts = parts + [block] if at_end else [block] + parts
            if len(parts) > 1:
                x = T.cat(parts, dim)
        return x
    if mode not in ("reflect", "replicate", "circular"):
        raise op_error("pad", f"mode must be 'constant', 'reflect', 'replicate' or "
                       f"'circular', got {mode!r}")
    if value:
        raise op_error("pad", f"a padding value applies to mode='constant' only, not {mode!r}")
    for dim, (lo, hi) in sorted(pairs.items()):
        size = x.shape[dim]
        limit = size - 1 if mode == "reflect" else size
        if max(lo, hi) > limit or (mode == "replicate" and size == 0):
            raise op_error("pad", f"{mode} padding ({lo}, {hi}) of dimension {dim} must be "
                           f"{'smaller than' if mode == 'reflect' else 'at most'} its size "
                           f"{size}", (input,), hint="pad less, or use mode='constant'")
        if lo or hi:
            x = take(x, dim, _border_index(mode, size, lo, hi))
    return x


def _sizes(op, x, size, scale_factor, nd):
    spatial = tuple(x.shape[2:])
    if (size is None) == (scale_factor is None):
        raise op_error(op, "give exactly one of size and scale_factor", (x,))
    if size is not None:
        out = size if isinstance(size, (tuple, list)) else (size,) * nd
        if len(out) != nd:
            raise op_error(op, f"size {size!r} must have {nd} entries for a {x.ndim}-d input",
                           (x,))
        return tuple(int(s) for s in out), None
    scales = scale_factor if isinstance(scale_factor, (tuple, list)) else (scale_factor,) * nd
    if len(scales) != nd:
        raise op_error(op, f"scale_factor {scale_factor!r} must have {nd} entries for a "
                       f"{x.ndim}-d input", (x,))
    return tuple(int(math.floor(n * float(s))) for n, s in zip(spatial, scales)), tuple(
        float(s) for s in scales)


_LINEAR = {"linear": 1, "bilinear": 2, "trilinear": 3}


def interpolate(input, size=None, scale_factor=None, mode: str = "nearest",
                align_corners=None, recompute_scale_factor=None, antialias=False):
    """Resize the spatial dims of (N, C, *spatial): nearest, nearest-exact, (bi/tri)linear."""
    op = "interpolate"
    x = input
    nd = x.ndim - 2
    if nd < 1 or nd > 3:
        raise op_error(op, f"expected a 3-d, 4-d or 5-d input (N, C, *spatial), got shape "
                       f"{tuple(x.shape)}", (x,), hint="add batch and channel dimensions")
    if mode in _LINEAR and _LINEAR[mode] != nd:
        raise op_error(op, f"mode {mode!r} needs a {_LINEAR[mode] + 2}-d input, got shape "
                       f"{tuple(x.shape)}", (x,))
    if mode not in _LINEAR and mode not in ("nearest", "nearest-exact"):
        raise op_error(op, f"mode {mode!r} is not supported", (x,),
                       hint="use 'nearest', 'nearest-exact', 'linear', 'bilinear' or "
                            "'trilinear'")
    if align_corners is not None and mode not in _LINEAR:
        raise op_error(op, "align_corners only applies to the linear modes", (x,))
    if antialias:
        raise op_error(op, "antialias=True is not supported", (x,))
    if not is_floating(x.dtype):
        raise op_error(op, f"needs a floating-point input, got {x.dtype}", (x,),
                       exc=TypeError)
    out, scales = _sizes(op, x, size, scale_factor, nd)
    if recompute_scale_factor:
        scales = None
    for axis in range(nd):
        dim, n, m = 2 + axis, x.shape[2 + axis], out[axis]
        if m < 1:
            raise op_error(op, f"output size {out} must be positive", (x,))
        scale = 1.0 / scales[axis] if scales else n / m
        dst = np.arange(m)
        if mode in ("nearest", "nearest-exact"):
            # PyTorch computes these in float32
            s32 = np.float32(scale)
            pos = dst.astype(np.float32) + (np.float32(0.5) if mode == "nearest-exact" else 0)
            x = take(x, dim, np.minimum(np.floor(pos * s32).astype(np.int64), n - 1))
            continue
        if align_corners:
            src = dst * ((n - 1) / (m - 1) if m > 1 else 0.0)
        else:
            src = np.maximum((dst + 0.5) * scale - 0.5, 0.0)
        i0 = np.minimum(np.floor(src).astype(np.int64), n - 1)
        i1 = np.minimum(i0 + 1, n - 1)
        frac = (src - i0).reshape((m,) + (1,) * (nd - 1 - axis))
        w0, w1 = T.tensor(1.0 - frac, dtype=x.dtype), T.tensor(frac, dtype=x.dtype)
        x = T.add(T.mul(take(x, dim, i0), w0), T.mul(take(x, dim, i1), w1))
    return x


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    return interpolate(input, size, scale_factor, mode, align_corners)
