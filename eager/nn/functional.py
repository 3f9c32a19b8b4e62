"""Composite ops written with registry primitives, so they trace, differentiate and fuse.

>>> import eager.nn.functional as F
>>> F.softmax(eager.tensor([[1.0, 2.0]]), dim=-1)
tensor([[0.2689, 0.7311]])
"""
from __future__ import annotations

import numpy as np

from .. import dtypes
from .. import functions as T
from ..functions.elementwise import _half_in_float32
from ..errors import op_error
from .activations import (  # noqa: F401 - re-exported: F.gelu, F.softmax, ...
    _check_float,
    _implicit_softmax_dim,
    celu,
    elu,
    gelu,
    glu,
    hardsigmoid,
    hardswish,
    hardtanh,
    leaky_relu,
    log_softmax,
    logsigmoid,
    mish,
    normalize,
    relu,
    relu6,
    selu,
    sigmoid,
    silu,
    softmax,
    softmin,
    softplus,
    softsign,
    tanh,
)
from .losses import (  # noqa: F401 - re-exported
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cross_entropy,
    huber_loss,
    kl_div,
    l1_loss,
    mse_loss,
    nll_loss,
    smooth_l1_loss,
)


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


@_half_in_float32
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


def embedding_padding_idx(padding_idx, num_embeddings: int):
    """`padding_idx` as a row number (a negative one counts from the end), as PyTorch."""
    if padding_idx is None:
        return None
    if not -num_embeddings <= padding_idx < num_embeddings:
        raise AssertionError("Padding_idx must be within num_embeddings")
    return padding_idx % num_embeddings


def embedding(idx, weight, padding_idx=None, max_norm=None, norm_type=2.0):
    """Rows of `weight` at `idx`; positions holding `padding_idx` pass no gradient to it.
    With `max_norm`, the rows looked up whose `norm_type`-norm exceeds it are first scaled
    in place to that norm, as PyTorch's embedding_renorm_ (no gradient: a write of the
    weight, in a compiled step too)."""
    if idx.dtype.kind not in "iu":
        raise op_error("embedding", f"indices must be integers, got {idx.dtype}", (idx,),
                       hint="use .long()", exc=TypeError)
    idx_checked = T.check_class_index(idx, weight.shape[0], "embedding")
    if max_norm is not None:
        _renorm_rows(weight, idx_checked, float(max_norm), float(norm_type))
    out = T.getitem(weight, idx_checked)
    if padding_idx is None:
        return out
    padding_idx = embedding_padding_idx(padding_idx, weight.shape[0])
    # the row is read as it is (PyTorch does not zero it); only its gradient is cut
    return T.where(T.unsqueeze(T.eq(idx, padding_idx), -1), out.detach(), out)


def _renorm_rows(weight, idx, max_norm: float, norm_type: float):
    # Every row's norm, then a scale of max_norm / (norm + 1e-7) (PyTorch's) for the rows
    # looked up (counted by a scatter, so that a traced index needs no unique()) whose norm
    # exceeds max_norm, 1 for the others.
    from ..autograd import no_grad

    with no_grad():
        flat = T.reshape(idx, (-1,))
        looked_up = T.gt(T.scatter_add(T.ones(flat.shape[0], dtype=weight.dtype), (flat,),
                                       (weight.shape[0],)), 0)
        a = T.abs(weight)
        if norm_type == float("inf"):
            norms = T.amax(a, dim=1)
        elif norm_type == 2.0:
            norms = T.sqrt(T.sum(a * a, dim=1))
        else:
            norms = T.pow(T.sum(T.pow(a, norm_type), dim=1), 1.0 / norm_type)
        over = T.gt(T.where(looked_up, norms, T.zeros_like(norms)), max_norm)
        scale = T.where(over, max_norm / (norms + 1e-7), T.ones_like(norms))
        weight.mul_(T.unsqueeze(scale, -1))


def one_hot(idx, num_classes: int = -1):
    """Rows of the identity at `idx` (int64), as PyTorch's: RuntimeError for a class out of
    [0, num_classes) (checked when the program runs, for a traced index: the call then runs
    eagerly and raises this); num_classes=-1 takes the largest class + 1."""
    data = idx._data
    if idx.dtype.kind not in "iu":
        raise op_error("one_hot", f"indices must be integers, got {idx.dtype}", (idx,),
                       hint="use .long()", exc=RuntimeError)
    if num_classes == -1:
        num_classes = int(T.amax(idx).item()) + 1 if idx.numel() else 0
    if type(data) is np.ndarray and data.size:
        if data.min() < 0:
            raise op_error("one_hot", "Class values must be non-negative.", (idx,),
                           exc=RuntimeError)
        if data.max() >= num_classes:
            raise op_error("one_hot", "Class values must be smaller than num_classes.",
                           (idx,), exc=RuntimeError)
    idx = T.check_class_index(idx, num_classes, "one_hot")
    return T.cast(T.eq(T.unsqueeze(idx, -1), T.arange(num_classes)), dtypes.int64)


# Convolution, pooling, padding and resampling live in their own modules (conv.py,
# pooling.py, resample.py); F.* re-exports them as PyTorch does.
from .conv import (conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d,  # noqa: E402
                   conv_transpose3d, fold, unfold)
from .pooling import (adaptive_avg_pool1d, adaptive_avg_pool2d,  # noqa: E402
                      adaptive_max_pool1d, adaptive_max_pool2d, avg_pool1d, avg_pool2d,
                      avg_pool3d, max_pool1d, max_pool2d, max_pool3d, max_unpool2d)
from .resample import interpolate, pad, upsample  # noqa: E402
from .normalization import (alpha_dropout, batch_norm, dropout1d, dropout2d,  # noqa: E402
                            dropout3d, group_norm, instance_norm, rms_norm)
from .similarity import (  # noqa: E402,F401 - re-exported
    cosine_similarity, pairwise_distance, pixel_shuffle, pixel_unshuffle)
