"""OpInfo entries of the PyTorch APIs added for real programs (select, index_add, index_copy,
cosine_similarity, pairwise_distance, pixel_shuffle, pixel_unshuffle), appended to
`opinfo.OPINFOS`: forward against Python-loop references, gradients by finite differences,
traced against eager. (Compiled with numba: tests/tracer/test_api_breadth.py.)
"""
from __future__ import annotations

import math

import numpy as np
from opinfo import F64, FLOATS, NUMERIC, OpInfo, Raw, Sample, specials, values

import eager
import eager.nn.functional as NF


def _e(name, call, ref, samples, dtypes=FLOATS, grad=None, **kw):
    return OpInfo(name, None, call, ref, samples, dtypes, grad, **kw)


def _grad_of(samples_fn):
    def samples(rng):
        return [s for s in samples_fn(rng, F64) if not s.special]
    return samples


def select_ref(x, dim, index):
    out = np.zeros(x.shape[:dim] + x.shape[dim + 1:], x.dtype)
    for idx in np.ndindex(out.shape):
        out[idx] = x[idx[:dim] + (index % x.shape[dim],) + idx[dim:]]
    return out


def _select_samples(rng, dtype):
    return [Sample((values(rng, (3, 4), dtype), 1, -1)),
            Sample((values(rng, (2, 3, 4), dtype), 0, 1)),
            Sample((values(rng, (5,), dtype), 0, 2)),
            Sample((values(rng, (2, 0, 3), dtype), 2, 0))]


def _index_ref(add):
    def ref(x, dim, index, source, alpha=1):
        out = x.copy()
        for idx in np.ndindex(source.shape):
            target = idx[:dim] + (int(index[idx[dim]]),) + idx[dim + 1:]
            if add:
                out[target] = out[target] + alpha * source[idx]
            else:
                out[target] = source[idx]
        return out
    return ref


def _index_samples(repeats):
    def samples(rng, dtype):
        index = np.array([3, 0, 3] if repeats else [3, 0, 1])
        return [Sample((values(rng, (4, 3), dtype), 0, index, values(rng, (3, 3), dtype))),
                Sample((values(rng, (2, 4, 3), dtype), -2, index, values(rng, (2, 3, 3), dtype))),
                Sample((values(rng, (4,), dtype), 0, np.array([], np.int64),
                        values(rng, (0,), dtype)))]
    return samples


def cosine_ref(x1, x2, dim=1, eps=1e-8):
    a, b = np.broadcast_arrays(x1.astype(np.float64), x2.astype(np.float64))
    a, b = np.moveaxis(a, dim, -1), np.moveaxis(b, dim, -1)
    out = np.zeros(a.shape[:-1])
    for idx in np.ndindex(out.shape):
        u, v = a[idx], b[idx]
        nu = max(math.sqrt(sum(t * t for t in u)), eps)
        nv = max(math.sqrt(sum(t * t for t in v)), eps)
        out[idx] = sum((p / nu) * (q / nv) for p, q in zip(u, v))
    return out.astype(x1.dtype)


def _cosine_samples(rng, dtype):
    return [Sample((values(rng, (4, 5), dtype), values(rng, (4, 5), dtype))),
            Sample((values(rng, (2, 3, 4), dtype), values(rng, (3, 1), dtype)), {"dim": -1}),
            Sample((values(rng, (3, 4), dtype), np.zeros((3, 4), dtype)), {"dim": 0},
                   desc="zero vector: eps"),
            Sample((values(rng, (0, 3), dtype), values(rng, (0, 3), dtype))),
            Sample((specials(dtype, (3, 3)), values(rng, (3, 3), dtype)), special=True)]


def pairwise_ref(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    a, b = np.broadcast_arrays(x1.astype(np.float64), x2.astype(np.float64))
    out = np.zeros(a.shape[:-1])
    for idx in np.ndindex(out.shape):
        d = [abs(u - v + eps) for u, v in zip(a[idx], b[idx])]
        out[idx] = max(d) if p == math.inf else sum(t ** p for t in d) ** (1.0 / p)
    if keepdim:
        out = out[..., None]
    return out.astype(x1.dtype)


def _pairwise_samples(rng, dtype):
    return [Sample((values(rng, (4, 5), dtype), values(rng, (4, 5), dtype))),
            Sample((values(rng, (2, 3, 4), dtype), values(rng, (4,), dtype)),
                   {"p": 1.0, "keepdim": True}),
            Sample((values(rng, (3, 4), dtype), values(rng, (3, 4), dtype)), {"p": 3.0}),
            Sample((specials(dtype, (3, 3)), values(rng, (3, 3), dtype)), special=True)]


def shuffle_ref(x, r):
    *batch, c, h, w = x.shape
    out = np.zeros((*batch, c // (r * r), h * r, w * r), x.dtype)
    for idx in np.ndindex(out.shape):
        *b, k, i, j = idx
        out[idx] = x[tuple(b) + (k * r * r + (i % r) * r + (j % r), i // r, j // r)]
    return out


def unshuffle_ref(x, r):
    *batch, c, h, w = x.shape
    out = np.zeros((*batch, c * r * r, h // r, w // r), x.dtype)
    for idx in np.ndindex(out.shape):
        *b, k, i, j = idx
        ch, off = divmod(k, r * r)
        out[idx] = x[tuple(b) + (ch, i * r + off // r, j * r + off % r)]
    return out


def _shuffle_samples(rng, dtype):
    return [Sample((values(rng, (2, 8, 2, 3), dtype), 2)),
            Sample((values(rng, (9, 1, 2), dtype), 3)),
            Sample((values(rng, (0, 4, 2, 2), dtype), 2))]


def _unshuffle_samples(rng, dtype):
    return [Sample((values(rng, (2, 2, 4, 6), dtype), 2)),
            Sample((values(rng, (1, 3, 6), dtype), 3))]


API_OPINFOS = [
    _e("select", lambda x, d, i: x.select(d, i), select_ref, _select_samples, NUMERIC,
       _grad_of(_select_samples)),
    _e("index_add", lambda x, d, i, s: x.index_add(d, i, s), _index_ref(True),
       _index_samples(True), NUMERIC, _grad_of(_index_samples(True))),
    _e("index_add_alpha", lambda x, d, i, s: eager.index_add(x, d, i, s, alpha=2),
       lambda x, d, i, s: _index_ref(True)(x, d, i, s, 2), _index_samples(True), FLOATS,
       _grad_of(_index_samples(True))),
    _e("index_add_", lambda x, d, i, s: x.clone().index_add_(d, i, s), _index_ref(True),
       _index_samples(True), FLOATS, _grad_of(_index_samples(True))),
    _e("index_copy", lambda x, d, i, s: x.index_copy(d, i, s), _index_ref(False),
       _index_samples(False), NUMERIC, _grad_of(_index_samples(False))),
    _e("index_copy_", lambda x, d, i, s: x.clone().index_copy_(d, i, s), _index_ref(False),
       _index_samples(False), FLOATS, _grad_of(_index_samples(False))),
    _e("cosine_similarity", NF.cosine_similarity, cosine_ref, _cosine_samples, FLOATS,
       _grad_of(lambda rng, dt: [s for s in _cosine_samples(rng, dt) if not s.desc])),
    _e("pairwise_distance", NF.pairwise_distance, pairwise_ref, _pairwise_samples, FLOATS,
       _grad_of(_pairwise_samples)),
    _e("pixel_shuffle", NF.pixel_shuffle, shuffle_ref, _shuffle_samples, NUMERIC,
       _grad_of(_shuffle_samples)),
    _e("pixel_unshuffle", NF.pixel_unshuffle, unshuffle_ref, _unshuffle_samples, NUMERIC,
       _grad_of(_unshuffle_samples)),
]
del Raw
