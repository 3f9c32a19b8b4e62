"""Attention: F.scaled_dot_product_attention and nn.MultiheadAttention (PyTorch's API).

Both are composites of registry ops, so they trace, differentiate and fuse: compiled, the
scores and the output are two BLAS products and the masked softmax between them is one row
kernel.  The causal mask is never an (L, S) tensor: it is the comparison of two position
vectors (an (L, 1) and a (1, S) arange), which the fuser reads by broadcast index
arithmetic inside the row kernel.

>>> import eager, eager.nn.functional as F
>>> q = k = v = eager.randn(2, 4, 8, 16)
>>> F.scaled_dot_product_attention(q, k, v, is_causal=True).shape
(2, 4, 8, 16)
"""
from __future__ import annotations

import math

import numpy as np

from .. import functions as T
from ..dispatch import apply
from ..errors import op_error
from ..ops import register
from . import functional as F
from . import init
from .layers import Linear
from .module import Module, Parameter
from ..dtypes import default_float, is_floating


class NonDynamicallyQuantizableLinear(Linear):
    """PyTorch's name for MultiheadAttention.out_proj (a plain Linear)."""


def _tril_fill_impl(a, diagonal, value):
    keep = np.tri(a.shape[-2], a.shape[-1], diagonal, dtype=bool)
    return np.where(keep, a, a.dtype.type(value))


def _tril_fill_infer(a, diagonal, value):
    if len(a.shape) < 2:
        raise ValueError(f"tril_fill needs at least 2 dims, got shape {tuple(a.shape)}")
    return a


# The causal mask as an elementwise op on the scores: a primitive (not where(const_mask, ..))
# because the mask is a fact of positions, not data.  A constant (L, S) bool array would be
# read from memory by every row; this row's lowering (codegen/lower.py) compares the loop
# indices of the last two dims inside the fused softmax kernel instead.
TRIL_FILL = register(
    "tril_fill", "elementwise", 1, _tril_fill_impl, _tril_fill_infer,
    vjp=(lambda g, out, a, diagonal, value: apply(TRIL_FILL, g, diagonal=diagonal,
                                                  value=0.0),),
    params=("diagonal", "value"),
    doc="a where column - row <= diagonal in the last two dims, else `value` (the causal "
        "mask of attention: value=-inf).", recompute=True)


def tril_fill(x, diagonal: int = 0, value: float = 0.0):
    """x on and below `diagonal` of the last two dims, `value` above (top-left aligned)."""
    return apply(TRIL_FILL, x, diagonal=int(diagonal), value=float(value))


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale=None, enable_gqa: bool = False):
    """softmax(q @ k^T * scale + mask) @ v over the last two dims, batch dims broadcast.

    `attn_mask`: bool (True = take part in attention) or a float mask added to the scores,
    broadcastable to (..., L, S).  `is_causal`: the top-left aligned lower triangle of
    (L, S).  A row with every position masked gives NaN, as in PyTorch.  `dropout_p` is
    applied whenever it is > 0 (the functional form has no training flag, as in PyTorch).
    """
    op = "scaled_dot_product_attention"
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.ndim < 2:
            raise op_error(op, f"{name} must have at least 2 dims (..., L, E), got {t.shape}",
                           (query, key, value))
        if not is_floating(t.dtype):
            raise op_error(op, f"{name} must be floating-point, got {t.dtype}",
                           (query, key, value), hint="cast with .float() first",
                           exc=TypeError)
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise op_error(op, f"query {query.shape}, key {key.shape}, value {value.shape}: "
                       "query and key need the same embedding size E and key and value "
                       "the same length S", (query, key, value))
    if enable_gqa:
        raise op_error(op, "enable_gqa is not supported", (query,),
                       hint="repeat the key/value heads with repeat_interleave first",
                       exc=NotImplementedError)
    if is_causal and attn_mask is not None:
        raise op_error(op, "attn_mask and is_causal cannot both be set", (query,),
                       hint="fold the causal mask into attn_mask", exc=RuntimeError)
    if not 0.0 <= dropout_p <= 1.0:
        raise op_error(op, f"dropout_p must be in [0, 1], got {dropout_p}")
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    scores = T.mul(T.matmul(query, T.transpose(key, -2, -1)), T.const(scale, query.dtype))
    minus_inf = T.const(-math.inf, scores.dtype)
    if is_causal:
        scores = tril_fill(scores, 0, -math.inf)
    elif attn_mask is not None:
        attn_mask = T.as_tensor(attn_mask, op)
        if attn_mask.dtype.kind == "b":
            scores = T.where(attn_mask, scores, minus_inf)
        elif is_floating(attn_mask.dtype):
            scores = T.add(scores, T.cast(attn_mask, scores.dtype))
        else:
            raise op_error(op, f"attn_mask must be bool or floating-point, got "
                           f"{attn_mask.dtype}", (attn_mask,), exc=TypeError)
    weights = F.softmax(scores, dim=-1)
    if dropout_p > 0.0:
        weights = F.dropout(weights, dropout_p, training=True)
    return T.matmul(weights, value)


# --------------------------------------------------------------------------------------
# nn.MultiheadAttention

def _merge_masks(attn_mask, key_padding_mask, B, H, L, S, dtype, op):
    """One additive float mask broadcastable to (B, H, L, S), or None (PyTorch converts
    bool masks to -inf additive masks and adds them)."""
    merged = None
    if attn_mask is not None:
        attn_mask = T.as_tensor(attn_mask, op)
        if attn_mask.ndim == 2:
            if tuple(attn_mask.shape) != (L, S):
                raise op_error(op, f"the 2-D attn_mask should be {(L, S)}, got "
                               f"{attn_mask.shape}", (attn_mask,))
        elif attn_mask.ndim == 3:
            if tuple(attn_mask.shape) != (B * H, L, S):
                raise op_error(op, f"the 3-D attn_mask should be {(B * H, L, S)}, got "
                               f"{attn_mask.shape}", (attn_mask,))
            attn_mask = T.reshape(attn_mask, (B, H, L, S))
        else:
            raise op_error(op, f"attn_mask must be 2-D or 3-D, got {attn_mask.ndim}-D",
                           (attn_mask,))
        merged = _as_additive(attn_mask, dtype, op)
    if key_padding_mask is not None:
        key_padding_mask = T.as_tensor(key_padding_mask, op)
        if tuple(key_padding_mask.shape) != (B, S):
            raise op_error(op, f"key_padding_mask should be {(B, S)}, got "
                           f"{key_padding_mask.shape}", (key_padding_mask,))
        # True in key_padding_mask means "ignore this key" (the opposite of SDPA's bool mask).
        pad = _as_additive(key_padding_mask, dtype, op)
        pad = T.reshape(pad, (B, 1, 1, S))
        merged = pad if merged is None else T.add(merged, pad)
    return merged


def _as_additive(mask, dtype, op):
    if mask.dtype.kind == "b":
        # MultiheadAttention's bool masks mark positions NOT allowed to attend.
        return T.where(mask, T.const(-math.inf, dtype), T.const(0.0, dtype))
    if is_floating(mask.dtype):
        return T.cast(mask, dtype)
    raise op_error(op, f"masks must be bool or floating-point, got {mask.dtype}", (mask,),
                   exc=TypeError)


class MultiheadAttention(Module):
    """PyTorch's nn.MultiheadAttention: the same parameters (in_proj_weight (3E, E) or
    q/k/v_proj_weight when kdim/vdim differ, in_proj_bias, out_proj, bias_k/bias_v not
    supported), so a state dict maps one to one."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim=None, vdim=None,
                 batch_first: bool = False, device=None, dtype=None):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0 or embed_dim % num_heads:
            raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads "
                             f"({num_heads}) and both positive")
        if add_bias_kv or add_zero_attn:
            raise NotImplementedError("MultiheadAttention: add_bias_kv and add_zero_attn are "
                                      "not supported")
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        def zeros(*shape):
            return Parameter(T.Tensor._wrap(np.zeros(shape, default_float())))
        if self._qkv_same_embed_dim:
            self.in_proj_weight = zeros(3 * embed_dim, embed_dim)
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.register_parameter("in_proj_weight", None)
            self.q_proj_weight = zeros(embed_dim, embed_dim)
            self.k_proj_weight = zeros(embed_dim, self.kdim)
            self.v_proj_weight = zeros(embed_dim, self.vdim)
        if bias:
            self.in_proj_bias = zeros(3 * embed_dim)
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias)
        self._reset_parameters()
        if dtype is not None:
            for p in self.parameters():
                p._data = p._data.astype(dtype)

    def _reset_parameters(self):
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.zeros_(self.in_proj_bias)
            init.zeros_(self.out_proj.bias)

    def _project(self, query, key, value):
        E = self.embed_dim
        b = self.in_proj_bias
        bq, bk, bv = (None, None, None) if b is None else (b[0:E], b[E:2 * E], b[2 * E:])
        if self._qkv_same_embed_dim:
            w = self.in_proj_weight
            if query is key and key is value:  # self-attention: one product for q, k and v
                qkv = F.linear(query, w, b)
                return qkv[..., 0:E], qkv[..., E:2 * E], qkv[..., 2 * E:]
            wq, wk, wv = w[0:E], w[E:2 * E], w[2 * E:]
        else:
            wq, wk, wv = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        return F.linear(query, wq, bq), F.linear(key, wk, bk), F.linear(value, wv, bv)

    def forward(self, query, key, value, key_padding_mask=None, need_weights: bool = True,
                attn_mask=None, average_attn_weights: bool = True, is_causal: bool = False):
        op = "MultiheadAttention"
        batched = query.ndim == 3
        if not batched:
            query, key, value = (T.unsqueeze(t, 1) for t in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = T.unsqueeze(key_padding_mask, 0)
        elif self.batch_first:
            same_kv = key is value
            same_qk = query is key
            query = T.transpose(query, 0, 1)
            key = query if same_qk else T.transpose(key, 0, 1)
            value = key if same_kv else T.transpose(value, 0, 1)
        if query.ndim != 3:
            raise op_error(op, f"query must be (L, N, E) or (N, L, E) (batch_first), got "
                           f"{query.shape}", (query,))
        L, B, E = query.shape
        S = key.shape[0]
        H, D = self.num_heads, self.head_dim
        if E != self.embed_dim:
            raise op_error(op, f"query embedding size {E} != embed_dim {self.embed_dim}",
                           (query,))
        if is_causal and attn_mask is None:
            raise op_error(op, "is_causal=True needs attn_mask too (as in PyTorch: it is a "
                           "hint that attn_mask is the causal mask)", (query,),
                           exc=RuntimeError)
        q, k, v = self._project(query, key, value)

        def heads(x, n):  # (n, B, E) -> (B, H, n, D)
            return T.permute(T.reshape(x, (n, B, H, D)), (1, 2, 0, 3))

        q, k, v = heads(q, L), heads(k, S), heads(v, S)
        dropout_p = self.dropout if self.training else 0.0
        if need_weights:
            mask = _merge_masks(attn_mask, key_padding_mask, B, H, L, S, q.dtype, op)
            scores = T.mul(T.matmul(q, T.transpose(k, -2, -1)), 1.0 / math.sqrt(D))
            if mask is not None:
                scores = T.add(scores, mask)
            weights = F.softmax(scores, dim=-1)
            if dropout_p > 0.0:
                weights = F.dropout(weights, dropout_p, training=True)
            out = T.matmul(weights, v)
        elif is_causal and key_padding_mask is None and attn_mask is not None:
            out = scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
            weights = None
        else:
            mask = _merge_masks(attn_mask, key_padding_mask, B, H, L, S, q.dtype, op)
            out = scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
            weights = None
        out = T.reshape(T.permute(out, (2, 0, 1, 3)), (L, B, E))
        out = self.out_proj(out)
        if self.batch_first and batched:
            out = T.transpose(out, 0, 1)
        if not batched:
            out = T.squeeze(out, 1)
        if weights is not None:
            if average_attn_weights:
                weights = T.mean(weights, 1)
            if not batched:
                weights = T.squeeze(weights, 0)
        return out, weights

    def extra_repr(self):
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
                f"dropout={self.dropout}, batch_first={self.batch_first}")
