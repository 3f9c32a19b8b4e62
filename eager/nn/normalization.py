"""Normalization and channel dropout as composites of registry primitives (mean/var
reductions, rsqrt, elementwise), so they trace, differentiate and fuse.

Formulas as PyTorch documents them: batch statistics normalize with the BIASED variance,
running statistics are updated with the UNBIASED one, under no_grad, by in-place writes
that a compiled step carries as updates of its captured buffers (read live, call after
call). A momentum may be a tensor (the cumulative average 1 / num_batches_tracked), so
no value is read back into Python while tracing.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from .. import functions as T
from ..autograd import no_grad
from ..errors import op_error, user_location
from ..functions.reductions import _symbolic_count
from ..ops import Dim
from ..dtypes import finfo, is_floating

__all__ = [
    "alpha_dropout",
    "batch_norm",
    "dropout1d",
    "dropout2d",
    "dropout3d",
    "group_norm",
    "instance_norm",
    "rms_norm",
]


def _check_float(x, op):
    if not is_floating(x.dtype):
        raise op_error(op, f"needs a floating-point input, got {x.dtype}", (x,),
                       hint="convert it with .float()", exc=TypeError)


def _count(shape, axes):
    """The static element count over `axes`, or None when a dim is symbolic."""
    if any(isinstance(shape[a], Dim) for a in axes):
        return None
    return math.prod(shape[a] for a in axes)


def _per_channel(t, ndim):
    """A (C,) tensor shaped (1, C, 1, ...) to broadcast against an (N, C, ...) input."""
    return T.reshape(t, (1, -1) + (1,) * (ndim - 2))


def _check_channels(op, x, named):
    """Each per-channel tensor given must have shape (C,), C = input.shape[1]."""
    c = x.shape[1]
    for name, t in named.items():
        if t is not None and not isinstance(c, Dim) and tuple(t.shape) != (c,):
            raise op_error(op, f"{name} has shape {tuple(t.shape)}, expected ({c},) for an "
                           f"input of shape {tuple(x.shape)} (C = dim 1)", (x, t),
                           hint=f"give {name} one value per channel", exc=ValueError)


def _affine(out, weight, bias, ndim):
    if weight is not None:
        out = T.mul(out, _per_channel(weight, ndim))
    if bias is not None:
        out = T.add(out, _per_channel(bias, ndim))
    return out


def _update_running(buf, stat, momentum, count=None):
    """buf <- (1 - momentum) * buf + momentum * stat, in place and without history; where a
    run-time `count` (a symbolic batch) is 0, buf is left as it is (PyTorch's empty batch)."""
    with no_grad():
        stat = T.detach(stat)
        if isinstance(momentum, (int, float)):
            new = T.add(T.mul(buf, 1.0 - momentum), T.mul(stat, momentum))
        else:
            m = T.cast(momentum, stat.dtype)
            new = T.add(T.mul(buf, T.sub(1.0, m)), T.mul(stat, m))
        if count is not None and not isinstance(count, int):
            new = T.where(T.gt(count, 0.0), new, buf)
        buf.copy_(new)


def _check_count(op, x, n, what):
    """Training statistics need more than one value per channel (eagerly: n known). None
    (zero values: PyTorch's empty batch, an empty output) is checked by the caller."""
    if n is not None and n == 1:
        raise op_error(op, f"expected more than 1 {what} when training, got input size "
                       f"{tuple(x.shape)}", (x,), hint="use a larger input, or eval()",
                       exc=ValueError)


def _guard_count(op, x, axes, n, mean, what, empty_ok=False):
    """(mean, count). With a symbolic size the count is a run-time value, checked when the
    program runs (RuntimeError where the eager call raises ValueError) through the mean that
    every output and statistics update depends on (times an exact 1), so no trace turns a
    too-small batch into a result. `empty_ok`: a count of 0 passes (batch_norm's empty
    batch, whose running statistics `_update_running` then leaves alone)."""
    if n is not None:
        return mean, n
    count = _symbolic_count(x, axes)
    fits = T.ne(count, 1.0) if empty_ok else T.gt(count, 1.0)
    ok = T.check_finite(T.where(fits, 1.0, float("nan")),
                        f"{op}: expected more than 1 {what} when training, got a symbolic "
                        f"size of 1{'' if empty_ok else ' or 0'} at run time (traced at "
                        f"{user_location()})")
    return T.mul(mean, T.cast(ok, mean.dtype)), count


def _empty(x, weight, bias):
    """PyTorch's result for an input with no elements: an empty output (a new tensor, still
    connected to weight and bias for autograd); the running statistics stay as they are."""
    return _affine(T.mul(x, T.const(1, x.dtype)), weight, bias, x.ndim)


def _unbiased(biased_var, count):
    """The unbiased variance from the biased one: * n / (n - 1) (n > 1 is checked)."""
    if isinstance(count, int):
        return T.mul(biased_var, count / (count - 1))
    return T.mul(biased_var, T.div(count, T.maximum(T.sub(count, 1.0), 1.0)))


def batch_norm(input, running_mean, running_var, weight=None, bias=None,
               training: bool = False, momentum=0.1, eps: float = 1e-5):
    """F.batch_norm: statistics per channel (dim 1) over the batch and spatial dims."""
    x = input
    _check_float(x, "batch_norm")
    if x.ndim < 2:
        raise op_error("batch_norm", f"expected an input of at least 2 dims (N, C, ...), "
                       f"got shape {x.shape}", (x,))
    _check_channels("batch_norm", x, {"running_mean": running_mean, "running_var": running_var,
                                      "weight": weight, "bias": bias})
    axes = (0,) + tuple(range(2, x.ndim))
    n = _count(x.shape, axes)
    if training:
        _check_count("batch_norm", x, n, "value per channel")
        if n == 0 or 0 in tuple(d for d in x.shape if not isinstance(d, Dim)):
            return _empty(x, weight, bias)
        mean, n = _guard_count("batch_norm", x, axes, n, T.mean(x, axes, keepdim=True),
                               "value per channel", empty_ok=True)
        xc = T.sub(x, mean)
        var = T.mean(T.mul(xc, xc), axes, keepdim=True)
        if running_mean is not None:
            _update_running(running_mean, T.reshape(mean, (-1,)), momentum, n)
        if running_var is not None:
            unbiased = _unbiased(T.reshape(var, (-1,)), n)
            _update_running(running_var, unbiased, momentum, n)
        out = T.mul(xc, T.rsqrt(T.add(var, eps)))
    else:
        if running_mean is None or running_var is None:
            raise op_error("batch_norm", "running_mean and running_var are needed when "
                           "training=False", (x,), hint="pass training=True to normalize "
                           "with the batch statistics")
        mean = T.cast(_per_channel(running_mean, x.ndim), x.dtype)
        var = T.cast(_per_channel(running_var, x.ndim), x.dtype)
        out = T.mul(T.sub(x, mean), T.rsqrt(T.add(var, eps)))
    return _affine(out, weight, bias, x.ndim)


def instance_norm(input, running_mean=None, running_var=None, weight=None,
                  bias=None, use_input_stats: bool = True, momentum=0.1, eps: float = 1e-5):
    """F.instance_norm: statistics per sample and channel over the spatial dims. Running
    statistics (if given) move toward the batch average of the per-instance statistics
    (unbiased variance), as PyTorch's batch_norm over an (1, N*C, ...) view does."""
    x = input
    _check_float(x, "instance_norm")
    if x.ndim < 3:
        raise op_error("instance_norm", f"expected an input of at least 3 dims (N, C, L...), "
                       f"got shape {x.shape}", (x,))
    _check_channels("instance_norm", x, {"running_mean": running_mean,
                                         "running_var": running_var, "weight": weight,
                                         "bias": bias})
    axes = tuple(range(2, x.ndim))
    if not use_input_stats:
        return batch_norm(x, running_mean, running_var, weight, bias, False, momentum, eps)
    n = _count(x.shape, axes)
    _check_count("instance_norm", x, n, "spatial element")
    if n == 0:  # (an empty batch of N goes on: PyTorch's running stats become NaN then)
        return _empty(x, weight, bias)
    mean, n = _guard_count("instance_norm", x, axes, n, T.mean(x, axes, keepdim=True),
                           "spatial element")
    xc = T.sub(x, mean)
    var = T.mean(T.mul(xc, xc), axes, keepdim=True)
    if running_mean is not None:
        _update_running(running_mean, T.mean(T.reshape(mean, (x.shape[0], -1)), 0), momentum)
    if running_var is not None:
        unbiased = _unbiased(T.reshape(var, (x.shape[0], -1)), n)
        _update_running(running_var, T.mean(unbiased, 0), momentum)
    out = T.mul(xc, T.rsqrt(T.add(var, eps)))
    return _affine(out, weight, bias, x.ndim)


def group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5):
    """F.group_norm: channels split into `num_groups` groups, each normalized per sample
    over its channels and the spatial dims (biased variance)."""
    x = input
    _check_float(x, "group_norm")
    if x.ndim < 2:
        raise op_error("group_norm", f"expected an input of at least 2 dims (N, C, ...), "
                       f"got shape {x.shape}", (x,))
    c = x.shape[1]
    if not isinstance(c, Dim) and (num_groups < 1 or c % num_groups):
        raise op_error("group_norm", f"the number of channels ({c}) must be divisible by "
                       f"num_groups ({num_groups})", (x,), exc=ValueError)
    rest = _count(x.shape, range(1, x.ndim))  # explicit, so a zero-size batch reshapes
    _check_channels("group_norm", x, {"weight": weight, "bias": bias})
    g = T.reshape(x, (x.shape[0], num_groups, -1 if rest is None else rest // num_groups))
    mean = T.mean(g, 2, keepdim=True)
    gc = T.sub(g, mean)
    var = T.mean(T.mul(gc, gc), 2, keepdim=True)
    out = T.reshape(T.mul(gc, T.rsqrt(T.add(var, eps))), x.shape)
    return _affine(out, weight, bias, x.ndim)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """F.rms_norm: x / sqrt(mean(x^2 over the trailing normalized_shape dims) + eps);
    eps None is the machine epsilon of the input's dtype, as in PyTorch."""
    x = input
    _check_float(x, "rms_norm")
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    normalized_shape = tuple(normalized_shape)
    k = len(normalized_shape)
    if k == 0 or k > x.ndim or tuple(x.shape[x.ndim - k:]) != normalized_shape:
        raise op_error("rms_norm", f"normalized_shape {normalized_shape} does not match the "
                       f"trailing dims of the input {x.shape}", (x,))
    if eps is None:
        eps = float(finfo(x.dtype).eps)
    dims = tuple(range(x.ndim - k, x.ndim))
    ms = T.mean(T.mul(x, x), dims, keepdim=True)
    out = T.mul(x, T.rsqrt(T.add(ms, eps)))
    if weight is not None:
        out = T.mul(out, weight)
    return out


def _channel_dropout(x, p, training, op, batched_ndim):
    if not 0.0 <= p <= 1.0:
        raise op_error(op, f"p must be in [0, 1], got {p}")
    _check_float(x, op)
    if x.ndim not in (batched_ndim - 1, batched_ndim):
        raise op_error(op, f"expected a {batched_ndim - 1}D (unbatched) or {batched_ndim}D "
                       f"(batched) input, got shape {x.shape}", (x,))
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return T.mul(x, 0.0)
    lead = 2 if x.ndim == batched_ndim else 1
    mask_shape = tuple(x.shape[:lead]) + (1,) * (x.ndim - lead)
    keep = T.ge(T.rand(mask_shape, dtype=x.dtype), p)
    return T.mul(T.where(keep, x, 0.0), 1.0 / (1.0 - p))


def dropout1d(input, p: float = 0.5, training: bool = True):
    """Zeroes whole channels of (N, C, L) or (C, L) with probability p, scales by 1/(1-p)."""
    return _channel_dropout(input, p, training, "dropout1d", 3)


def dropout2d(input, p: float = 0.5, training: bool = True):
    """Zeroes whole channels of (N, C, H, W) or (C, H, W) with probability p. A 3D input
    is read as (N, C, L) with a warning, as PyTorch does (channel-wise 1D dropout)."""
    if input.ndim == 3:
        warnings.warn(f"dropout2d: received a 3D input {tuple(input.shape)}; it is read as "
                      f"(N, C, L) and whole 1D channels are dropped, as PyTorch does; use "
                      f"dropout1d for that (at {user_location()})", UserWarning, stacklevel=2)
        return _channel_dropout(input, p, training, "dropout2d", 3)
    return _channel_dropout(input, p, training, "dropout2d", 4)


def dropout3d(input, p: float = 0.5, training: bool = True):
    return _channel_dropout(input, p, training, "dropout3d", 5)


_ALPHA = 1.6732632423543772
_SCALE = 1.0507009873554805
_ALPHA_P = -_ALPHA * _SCALE  # the SELU negative saturation value


def alpha_dropout(input, p: float = 0.5, training: bool = False):
    """Dropout for SELU networks: dropped values become the negative saturation value and
    an affine map keeps the mean and variance (PyTorch's formula)."""
    x = input
    if not 0.0 <= p <= 1.0:
        raise op_error("alpha_dropout", f"p must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return T.mul(x, 0.0)
    q = 1.0 - p
    a = 1.0 / math.sqrt((_ALPHA_P ** 2 * p + 1.0) * q)
    b = -a * _ALPHA_P * p
    keep = T.ge(T.rand(x.shape, dtype=x.dtype), p)
    return T.add(T.mul(T.where(keep, x, _ALPHA_P), a), b)
