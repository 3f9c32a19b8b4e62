"""Composite ops written with registry primitives, so they trace, differentiate and fuse.

>>> import eager.nn.functional as F
>>> F.softmax(eager.tensor([[1.0, 2.0]]), dim=-1)
tensor([[0.2689, 0.7311]])
"""
from __future__ import annotations

import math

from .. import dtypes
from .. import functions as T
from ..errors import op_error
from ..functions.reductions import _dim_aliases
from ..ops import Dim

relu = T.relu
sigmoid = T.sigmoid
tanh = T.tanh

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)


def gelu(x, approximate: str = "none"):
    """x * Phi(x); ``approximate='tanh'`` uses 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    if approximate == "tanh":
        inner = T.mul(T.add(x, T.mul(T.mul(T.mul(x, x), x), 0.044715)), _SQRT_2_OVER_PI)
        return T.mul(T.mul(x, 0.5), T.add(T.tanh(inner), 1.0))
    if approximate != "none":
        raise op_error("gelu", f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return T.mul(T.mul(x, 0.5), T.add(T.erf(T.mul(x, _INV_SQRT_2)), 1.0))


def silu(x):
    return T.mul(x, T.sigmoid(x))


def _check_float(x, op):
    if x.dtype.kind != "f":
        raise op_error(op, f"needs a floating-point input, got {x.dtype}", (x,),
                       hint="cast with .float() first", exc=TypeError)


@_dim_aliases  # (torch.softmax and Tensor.softmax take axis= too)
def softmax(x, dim: int = -1, dtype=None):
    """exp(x - max) / sum(exp(x - max)) along `dim` (the max is a constant for autodiff)."""
    if dtype is not None:
        x = T.cast(x, dtype)
    _check_float(x, "softmax")
    shifted = T.sub(x, T.amax(x, dim, keepdim=True).detach())
    e = T.exp(shifted)
    return T.div(e, T.sum(e, dim, keepdim=True))


@_dim_aliases
def log_softmax(x, dim: int = -1, dtype=None):
    """x - max - log(sum(exp(x - max))) along `dim`."""
    if dtype is not None:
        x = T.cast(x, dtype)
    _check_float(x, "log_softmax")
    shifted = T.sub(x, T.amax(x, dim, keepdim=True).detach())
    return T.sub(shifted, T.log(T.sum(T.exp(shifted), dim, keepdim=True)))


def _reduce(loss, reduction, op):
    if reduction == "mean":
        return T.mean(loss)
    if reduction == "sum":
        return T.sum(loss)
    if reduction == "none":
        return loss
    raise op_error(op, f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def nll_loss(logp, target, reduction: str = "mean"):
    if target.dtype.kind not in "iu":
        raise op_error("nll_loss", f"class-index targets must be integers, got {target.dtype}",
                       (logp, target), hint="pass labels as an int64 tensor (.long())",
                       exc=TypeError)
    if logp.ndim == 2 and target.ndim == 1 and target.shape[0] is not logp.shape[0] and (
            isinstance(logp.shape[0], Dim) or isinstance(target.shape[0], Dim)):
        d = logp.shape[0] if isinstance(logp.shape[0], Dim) else target.shape[0]
        d.unknown(f"nll_loss of input {tuple(logp.shape)} and target {tuple(target.shape)} "
                  f"(their batch sizes may differ at run time; name that dimension alike in "
                  f"both TensorSpecs, e.g. TensorSpec((\"batch\", C)) and "
                  f"TensorSpec((\"batch\",), eager.int64))")
    if logp.ndim != 2 or target.ndim != 1 or target.shape[0] != logp.shape[0]:
        raise op_error("nll_loss", "expected input (N, C) and target (N,)", (logp, target),
                       hint="flatten extra dimensions first")
    target = T.check_class_index(target, logp.shape[1], "nll_loss")
    if isinstance(logp.shape[0], Dim):
        # A symbolic batch has no arange(N) to gather rows with: pick each row's target
        # class through a one-hot mask over the classes instead (where, not a product, so a
        # -inf elsewhere in the row cannot turn the zeros into NaN).
        classes = T.reshape(T.arange(logp.shape[1]), (1, logp.shape[1]))
        mask = T.eq(classes, T.reshape(target, (target.shape[0], 1)))
        zero, one = T.const(0, logp.dtype), T.const(1, logp.dtype)
        picked = T.sum(T.where(mask, logp, zero), 1)
        # A label outside [0, C) raised above; were it to reach here, it matches no class
        # and that row's loss is NaN rather than a plausible 0.
        hit = T.gt(T.sum(T.where(mask, one, zero), 1), zero)
        picked = T.where(hit, picked, T.const(float("nan"), logp.dtype))
        return _reduce(T.neg(picked), reduction, "nll_loss")
    rows = T.arange(logp.shape[0])
    # logp[rows, target] as the gather op getitem would end in, without getitem's key
    # parsing and the identity permute it records first (both show in a training step).
    picked = T.gather(logp, (rows, target))
    return _reduce(T.neg(picked), reduction, "nll_loss")


def cross_entropy(input, target, reduction: str = "mean", label_smoothing: float = 0.0):
    """Cross-entropy of logits `input` (N, C) with class indices `target` (N,)."""
    _check_float(input, "cross_entropy")
    if target.dtype.kind == "f":
        if target.shape != input.shape:
            raise op_error("cross_entropy", "probability targets must have the input's shape; "
                           "class-index targets must be integers", (input, target),
                           hint="pass class indices as an int64 tensor (.long())",
                           exc=TypeError)
        if label_smoothing:  # PyTorch mixes the target with the uniform distribution
            classes = input.shape[1]
            target = T.add(T.mul(target, 1.0 - label_smoothing), label_smoothing / classes)
        loss = T.neg(T.sum(T.mul(log_softmax(input, 1), target), 1))
        return _reduce(loss, reduction, "cross_entropy")
    logp = log_softmax(input, dim=-1)
    if label_smoothing:
        nll = nll_loss(logp, target, reduction="none")
        smooth = T.neg(T.mean(logp, -1))
        loss = T.add(T.mul(nll, 1.0 - label_smoothing), T.mul(smooth, label_smoothing))
        return _reduce(loss, reduction, "cross_entropy")
    return nll_loss(logp, target, reduction)


def mse_loss(input, target, reduction: str = "mean"):
    # PyTorch rejects integer targets ("Found dtype Long but expected Float"); promoting them
    # silently would hide labels passed where regression targets belong.
    _check_float(input, "mse_loss")
    if target.dtype.kind != "f":
        raise op_error("mse_loss", f"target must be floating-point, got {target.dtype}",
                       (input, target), hint="cast the target with .float() (class labels "
                       "belong in cross_entropy)", exc=TypeError)
    if input.shape != target.shape:
        raise op_error("mse_loss", f"input shape {input.shape} and target shape "
                       f"{target.shape} differ (PyTorch would broadcast with a warning)",
                       (input, target), hint="reshape the target to the input's shape")
    d = T.sub(input, target)
    return _reduce(T.mul(d, d), reduction, "mse_loss")


def linear(x, weight, bias=None):
    """x @ weight.T + bias."""
    if x.shape[-1:] != weight.shape[-1:]:
        raise op_error("linear", f"input features {x.shape[-1] if x.ndim else None} != weight "
                       f"in_features {weight.shape[-1]}", (x, weight),
                       hint=f"the input's last dimension must be {weight.shape[-1]}")
    out = T.matmul(x, T.t(weight))
    if bias is not None:
        out = T.add(out, bias)
    return out


def layer_norm(x, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    normalized_shape = tuple(normalized_shape)
    if x.shape[x.ndim - len(normalized_shape):] != normalized_shape:
        raise op_error("layer_norm", f"normalized_shape {normalized_shape} does not match the "
                       f"trailing dims of the input {x.shape}", (x,))
    dims = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    mu = T.mean(x, dims, keepdim=True)
    xc = T.sub(x, mu)
    var = T.mean(T.mul(xc, xc), dims, keepdim=True)
    out = T.mul(xc, T.div(1.0, T.sqrt(T.add(var, eps))))
    if weight is not None:
        out = T.mul(out, weight)
    if bias is not None:
        out = T.add(out, bias)
    return out


def dropout(x, p: float = 0.5, training: bool = True):
    if not 0.0 <= p <= 1.0:
        raise op_error("dropout", f"p must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return T.mul(x, 0.0)
    keep = T.ge(T.rand(x.shape, dtype=x.dtype), p)
    return T.mul(T.where(keep, x, 0.0), 1.0 / (1.0 - p))


def embedding(idx, weight):
    if idx.dtype.kind not in "iu":
        raise op_error("embedding", f"indices must be integers, got {idx.dtype}", (idx,),
                       hint="use .long()", exc=TypeError)
    return T.getitem(weight, T.check_class_index(idx, weight.shape[0], "embedding"))


def one_hot(idx, num_classes: int):
    return T.cast(T.eq(T.unsqueeze(idx, -1), T.arange(num_classes)), dtypes.int64)


# Convolution, pooling, padding and resampling live in their own modules (conv.py,
# pooling.py, resample.py); F.* re-exports them as PyTorch does.
from .conv import (conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d,  # noqa: E402
                   conv_transpose3d, fold, unfold)
from .pooling import (adaptive_avg_pool1d, adaptive_avg_pool2d,  # noqa: E402
                      adaptive_max_pool1d, adaptive_max_pool2d, avg_pool1d, avg_pool2d,
                      avg_pool3d, max_pool1d, max_pool2d, max_pool3d, max_unpool2d)
from .resample import interpolate, pad, upsample  # noqa: E402
