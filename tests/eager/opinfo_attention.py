"""OpInfo entries of attention (eager/nn/attention.py): the `tril_fill` primitive (the causal
mask) and `F.scaled_dot_product_attention`, against references written here from PyTorch's
documented formula with Python loops over query rows, sharing no code with the composite.

Imported at the end of opinfo.py (which appends `ATTENTION_OPINFOS` to its table).
"""
from __future__ import annotations

import math

import numpy as np
from opinfo import BOOL, F32, F64, FLOATS, Case, OpInfo, Raw, Sample, shapes, specials, values

import eager.nn.functional as NF
from eager.nn.attention import tril_fill

TOL = {F32: (1e-5, 1e-6)}


def tril_fill_ref(x, diagonal=0, value=0.0):
    out = x.copy()
    for pos in np.ndindex(x.shape):
        if pos[-1] - pos[-2] > diagonal:
            out[pos] = value
    return out


def _tril_fill_samples(rng, dtype):
    return [Sample((values(rng, (4, 4), dtype),)),
            Sample((values(rng, (2, 3, 5), dtype), Raw(1), Raw(-math.inf))),
            Sample((values(rng, (5, 3), dtype), Raw(-1), Raw(2.5))),
            Sample((values(rng, (2, 0, 3), dtype),)),
            Sample((specials(dtype).reshape(1, -1), Raw(-1), Raw(-math.inf)), special=True),
            Sample((specials(dtype).reshape(-1, 1) * np.ones((1, 3), dtype), Raw(1)),
                   special=True)]


def _tril_fills(x):
    """Compiled: alone, on a transposed view, broadcast, and inside a row softmax (the
    kernel compares the loop indices of the last two dims)."""
    return (tril_fill(x, 0, -math.inf).exp(), tril_fill(x * 2, 1, 2.5),
            tril_fill(x.transpose(1, 2), -1, 0.0) + 1,
            tril_fill(x[:1] + x, 0, 0.0),
            NF.softmax(tril_fill(x, 0, -math.inf), dim=-1))


def sdpa_ref(q, k, v, attn_mask=None, is_causal=False, scale=None):
    """Row by row: s_j = q.k_j * scale (+ mask), p = softmax(s) (NaN when every s_j is -inf,
    as PyTorch's math kernel gives), out = sum_j p_j v_j."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    if attn_mask is not None:
        attn_mask = np.broadcast_to(attn_mask, batch + (L, S))
    out = np.zeros(batch + (L, v.shape[-1]))
    qb, kb, vb = (np.broadcast_to(a, batch + a.shape[-2:]) for a in (q, k, v))
    for b in np.ndindex(batch):
        for i in range(L):
            s = np.array([sum(qb[b][i, e] * kb[b][j, e] for e in range(E)) * scale
                          for j in range(S)])
            for j in range(S):
                if is_causal and j > i:
                    s[j] = -math.inf
                elif attn_mask is not None and attn_mask.dtype == bool:
                    s[j] = s[j] if attn_mask[b][i, j] else -math.inf
                elif attn_mask is not None:
                    s[j] = s[j] + attn_mask[b][i, j]
            if np.all(s == -math.inf):
                out[b][i] = math.nan
                continue
            p = np.exp(s - s.max())
            p = p / p.sum()
            out[b][i] = sum(p[j] * vb[b][j] for j in range(S))
    return out.astype(q.dtype if q.dtype == np.float32 else np.float64)


def _sdpa_call(q, k, v, attn_mask=None, is_causal=False, scale=None):
    return NF.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal,
                                           scale=scale)


def _sdpa_ref(q, k, v, attn_mask=None, is_causal=False, scale=None):
    return sdpa_ref(q, k, v, attn_mask, is_causal, scale).astype(q.dtype)


def _sdpa_samples(rng, dtype, grad=False):
    def x(*shape):
        return values(rng, shape, dtype)

    keep = values(rng, (3, 5), BOOL)
    keep[:, 0] = True  # every row attends somewhere (the gradient needs finite rows)
    out = [
        Sample((x(2, 3, 4), x(2, 5, 4), x(2, 5, 3)), desc="no mask"),
        Sample((x(2, 2, 3, 4), x(2, 2, 5, 4), x(2, 2, 5, 3), keep), desc="bool mask"),
        Sample((x(2, 2, 3, 4), x(2, 2, 5, 4), x(2, 2, 5, 3), x(2, 1, 3, 5)),
               desc="additive mask broadcast over heads"),
        Sample((x(2, 3, 4), x(2, 5, 4), x(2, 5, 3)), {"is_causal": Raw(True)},
               desc="causal L<S"),
        Sample((x(2, 5, 4), x(2, 3, 4), x(2, 3, 2)), {"is_causal": Raw(True)},
               desc="causal L>S"),
        Sample((x(1, 3, 4), x(1, 4, 4), x(1, 4, 2)), {"scale": Raw(0.7)}, desc="scale"),
    ]
    if not grad:
        dead = keep.copy()
        dead[1] = False  # query row 1 attends nowhere: NaN, as in PyTorch
        out.append(Sample((x(2, 3, 4), x(2, 5, 4), x(2, 5, 3), dead),
                          desc="fully masked row"))
    return out


ATTENTION_OPINFOS = [
    OpInfo("tril_fill", "tril_fill",
           lambda x, diagonal=0, value=0.0: tril_fill(x, diagonal, value), tril_fill_ref,
           _tril_fill_samples, FLOATS,
           lambda rng: [s for s in _tril_fill_samples(rng, F64)
                        if not s.special
                        and not (len(s.args) > 2 and math.isinf(s.args[2].value))],
           compiled=[Case("tril_fill", _tril_fills, shapes([(2, 3, 5)], None, [(2, 0, 3)]))]),
    OpInfo("scaled_dot_product_attention", None, _sdpa_call, _sdpa_ref, _sdpa_samples, FLOATS,
           lambda rng: _sdpa_samples(rng, F64, grad=True), tol=TOL),
]
