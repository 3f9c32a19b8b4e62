"""OpInfo entries for the sliding-window ops (eager/ops_conv.py) and the convolution, pooling,
padding and resampling composites built on them (eager/nn/conv.py, pooling.py,
resample.py), with independent references: direct nested loops over output positions,
written here from PyTorch's documented formulas, sharing no code with the implementation.

Imported at the end of opinfo.py (which appends `CONV_OPINFOS` to its table).
"""
from __future__ import annotations

import itertools
import math

import numpy as np

import eager.nn.functional as NF
from eager import ops_conv, ops_conv_direct, ops_pool
from opinfo import F32, F64, FLOATS, Case, OpInfo, Raw, Sample, shapes, values

TOL = {F32: (1e-4, 1e-5)}


# --------------------------------------------------------------------------------------
# references (loops over output positions)

def _out_len(n, k, s, lo, hi, d=1):
    return (n + lo + hi - d * (k - 1) - 1) // s + 1


def _padded(x, pads, fill):
    """x (N, C, *sp) in a bigger array of `fill`, pads: (lo, hi) per spatial dim."""
    shape = x.shape[:2] + tuple(n + lo + hi for n, (lo, hi) in zip(x.shape[2:], pads))
    out = np.full(shape, fill, np.float64)
    out[(slice(None), slice(None)) + tuple(slice(lo, lo + n) for n, (lo, _) in
                                           zip(x.shape[2:], pads))] = x
    return out


def ref_conv(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    nd = x.ndim - 2
    k = w.shape[2:]
    st = (stride,) * nd if isinstance(stride, int) else stride
    dl = (dilation,) * nd if isinstance(dilation, int) else dilation
    if padding == "same":
        pads = tuple((d * (kk - 1) // 2, d * (kk - 1) - d * (kk - 1) // 2) for kk, d in zip(k, dl))
    elif padding == "valid":
        pads = ((0, 0),) * nd
    else:
        p = (padding,) * nd if isinstance(padding, int) else padding
        pads = tuple((q, q) for q in p)
    xp = _padded(x, pads, 0.0)
    n_, o_, cg = x.shape[0], w.shape[0], w.shape[1]
    og = o_ // groups
    outs = tuple(_out_len(n, kk, s, lo, hi, d) for n, kk, s, (lo, hi), d in
                 zip(x.shape[2:], k, st, pads, dl))
    y = np.zeros((n_, o_) + outs)
    for n in range(n_):
        for o in range(o_):
            g = o // og
            for pos in itertools.product(*(range(m) for m in outs)):
                window = tuple(slice(p * s, p * s + d * (kk - 1) + 1, d)
                               for p, s, d, kk in zip(pos, st, dl, k))
                patch = xp[(n, slice(g * cg, (g + 1) * cg)) + window]
                y[(n, o) + pos] = np.sum(patch * w[o]) + (0.0 if b is None else b[o])
    return y.astype(x.dtype)


def ref_conv_transpose(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1,
                       dilation=1):
    nd = x.ndim - 2
    k = w.shape[2:]
    st, p, op, dl = ((v,) * nd if isinstance(v, int) else v
                     for v in (stride, padding, output_padding, dilation))
    n_, c_ = x.shape[:2]
    og = w.shape[1]
    cg = c_ // groups
    outs = tuple((i - 1) * s - 2 * q + d * (kk - 1) + e + 1
                 for i, s, q, d, kk, e in zip(x.shape[2:], st, p, dl, k, op))
    y = np.zeros((n_, og * groups) + outs)
    for n in range(n_):
        for c in range(c_):
            g = c // cg
            for pos in itertools.product(*(range(m) for m in x.shape[2:])):
                for kp in itertools.product(*(range(kk) for kk in k)):
                    at = tuple(i * s + j * d - q for i, s, j, d, q in zip(pos, st, kp, dl, p))
                    if all(0 <= a < m for a, m in zip(at, outs)):
                        for o in range(og):
                            y[(n, g * og + o) + at] += x[(n, c) + pos] * w[(c, o) + kp]
    if b is not None:
        y += b.reshape((-1,) + (1,) * nd)
    return y.astype(x.dtype)


def _pool_out(n, k, s, p, d, ceil):
    out = (n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= n + p:
        out -= 1
    return out


def ref_max_pool(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                 return_indices=False):
    nd = x.ndim - 2
    k, st, p, dl = ((v,) * nd if isinstance(v, int) else v
                    for v in (kernel_size, stride or kernel_size, padding, dilation))
    sp = x.shape[2:]
    outs = tuple(_pool_out(n, kk, s, q, d, ceil_mode) for n, kk, s, q, d in zip(sp, k, st, p, dl))
    vals = np.zeros(x.shape[:2] + outs, x.dtype)
    idx = np.zeros(x.shape[:2] + outs, np.int64)
    for n, c in itertools.product(range(x.shape[0]), range(x.shape[1])):
        for pos in itertools.product(*(range(m) for m in outs)):
            best, where = -math.inf, -1
            for kp in itertools.product(*(range(kk) for kk in k)):
                at = tuple(i * s - q + j * d for i, s, q, j, d in zip(pos, st, p, kp, dl))
                if all(0 <= a < m for a, m in zip(at, sp)):
                    v = x[(n, c) + at]
                    if v > best or where < 0:
                        best, where = v, int(np.ravel_multi_index(at, sp))
            vals[(n, c) + pos], idx[(n, c) + pos] = best, where
    return (vals, idx) if return_indices else vals


def ref_avg_pool(x, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None):
    nd = x.ndim - 2
    k, st, p = ((v,) * nd if isinstance(v, int) else v
                for v in (kernel_size, stride or kernel_size, padding))
    sp = x.shape[2:]
    outs = tuple(_pool_out(n, kk, s, q, 1, ceil_mode) for n, kk, s, q in zip(sp, k, st, p))
    y = np.zeros(x.shape[:2] + outs)
    for n, c in itertools.product(range(x.shape[0]), range(x.shape[1])):
        for pos in itertools.product(*(range(m) for m in outs)):
            lo = [i * s - q for i, s, q in zip(pos, st, p)]
            hi = [min(a + kk, m + q) for a, kk, m, q in zip(lo, k, sp, p)]
            size = math.prod(b - a for a, b in zip(lo, hi))
            lo_c = [max(a, 0) for a in lo]
            hi_c = [min(b, m) for b, m in zip(hi, sp)]
            total = np.sum(x[(n, c) + tuple(slice(a, b) for a, b in zip(lo_c, hi_c))])
            if divisor_override:
                div = divisor_override
            elif count_include_pad:
                div = size
            else:
                div = math.prod(b - a for a, b in zip(lo_c, hi_c))
            y[(n, c) + pos] = total / div
    return y.astype(x.dtype)


def _adaptive_ref(x, output_size, reduce):
    nd = len(output_size)
    sp = x.shape[-nd:]
    y = np.zeros(x.shape[:-nd] + tuple(output_size))
    for pos in itertools.product(*(range(m) for m in output_size)):
        win = tuple(slice(math.floor(i * n / m), math.ceil((i + 1) * n / m))
                    for i, n, m in zip(pos, sp, output_size))
        part = x[(Ellipsis,) + win]
        y[(Ellipsis,) + pos] = reduce(part.reshape(part.shape[:-nd] + (-1,)), axis=-1)
    return y.astype(x.dtype)


_NP_PAD = {"constant": "constant", "reflect": "reflect", "replicate": "edge",
           "circular": "wrap"}


def ref_pad(x, pad, mode="constant", value=None):
    widths = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        widths[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    crop = tuple(slice(-lo if lo < 0 else 0, n + hi if hi < 0 else n)
                 for (lo, hi), n in zip(widths, x.shape))
    x = x[crop]
    widths = [(max(lo, 0), max(hi, 0)) for lo, hi in widths]
    kw = {"constant_values": value or 0.0} if mode == "constant" else {}
    return np.pad(x, widths, mode=_NP_PAD[mode], **kw)


def ref_interpolate(x, size=None, scale_factor=None, mode="nearest", align_corners=None):
    nd = x.ndim - 2
    sp = x.shape[2:]
    if size is not None:
        outs = (size,) * nd if isinstance(size, int) else tuple(size)
        scales = [n / m for n, m in zip(sp, outs)]
    else:
        sf = (scale_factor,) * nd if not isinstance(scale_factor, tuple) else scale_factor
        outs = tuple(int(math.floor(n * f)) for n, f in zip(sp, sf))
        scales = [1.0 / f for f in sf]
    y = np.zeros(x.shape[:2] + outs)
    for pos in itertools.product(*(range(m) for m in outs)):
        if mode == "nearest":
            src = tuple(min(int(np.floor(np.float32(i) * np.float32(s))), n - 1)
                        for i, s, n in zip(pos, scales, sp))
            y[(Ellipsis,) + pos] = x[(Ellipsis,) + src]
            continue
        corners = []
        for i, s, n, m in zip(pos, scales, sp, outs):
            if align_corners:
                r = i * (n - 1) / (m - 1) if m > 1 else 0.0
            else:
                r = max((i + 0.5) * s - 0.5, 0.0)
            i0 = min(int(math.floor(r)), n - 1)
            i1 = min(i0 + 1, n - 1)
            corners.append(((i0, 1 - (r - i0)), (i1, r - i0)))
        acc = 0.0
        for choice in itertools.product(*corners):
            wgt = math.prod(c[1] for c in choice)
            acc = acc + wgt * x[(Ellipsis,) + tuple(c[0] for c in choice)]
        y[(Ellipsis,) + pos] = acc
    return y.astype(x.dtype)


def ref_unfold(x, kernel_size, dilation=1, padding=0, stride=1):
    k, d, p, s = ((v, v) if isinstance(v, int) else v
                  for v in (kernel_size, dilation, padding, stride))
    xp = _padded(x, ((p[0], p[0]), (p[1], p[1])), 0.0)
    outs = [_out_len(n, kk, ss, q, q, dd) for n, kk, ss, q, dd in zip(x.shape[2:], k, s, p, d)]
    cols = np.zeros((x.shape[0], x.shape[1] * k[0] * k[1], outs[0] * outs[1]))
    for n, c, i, j, a, b in itertools.product(range(x.shape[0]), range(x.shape[1]),
                                              range(k[0]), range(k[1]), range(outs[0]),
                                              range(outs[1])):
        cols[n, (c * k[0] + i) * k[1] + j, a * outs[1] + b] = \
            xp[n, c, a * s[0] + i * d[0], b * s[1] + j * d[1]]
    return cols.astype(x.dtype)


def ref_fold(cols, output_size, kernel_size, dilation=1, padding=0, stride=1):
    k, d, p, s = ((v, v) if isinstance(v, int) else v
                  for v in (kernel_size, dilation, padding, stride))
    size = (output_size,) * 2 if isinstance(output_size, int) else output_size
    outs = [_out_len(n, kk, ss, q, q, dd) for n, kk, ss, q, dd in zip(size, k, s, p, d)]
    c_ = cols.shape[1] // (k[0] * k[1])
    y = np.zeros((cols.shape[0], c_, size[0] + 2 * p[0], size[1] + 2 * p[1]))
    for n, c, i, j, a, b in itertools.product(range(cols.shape[0]), range(c_), range(k[0]),
                                              range(k[1]), range(outs[0]), range(outs[1])):
        y[n, c, a * s[0] + i * d[0], b * s[1] + j * d[1]] += \
            cols[n, (c * k[0] + i) * k[1] + j, a * outs[1] + b]
    return y[:, :, p[0]:p[0] + size[0], p[1]:p[1] + size[1]].astype(cols.dtype)


# --------------------------------------------------------------------------------------
# the registry ops themselves (im2col / col2im) against the same loops

def _im2col_ref(x, kernel, stride, dilation, pad, fill):
    xp = _padded(x, pad, fill)
    outs = tuple(_out_len(n, k, s, lo, hi, d) for n, k, s, d, (lo, hi) in
                 zip(x.shape[2:], kernel, stride, dilation, pad))
    cols = np.zeros((x.shape[1],) + kernel + (x.shape[0],) + outs)
    for c, n in itertools.product(range(x.shape[1]), range(x.shape[0])):
        for kp in itertools.product(*(range(k) for k in kernel)):
            for pos in itertools.product(*(range(m) for m in outs)):
                at = tuple(i * s + j * d for i, s, j, d in zip(pos, stride, kp, dilation))
                cols[(c,) + kp + (n,) + pos] = xp[(n, c) + at]
    return cols.astype(x.dtype)


def _col2im_ref(cols, shape, kernel, stride, dilation, pad):
    nd = len(kernel)
    c_, n_ = cols.shape[0], cols.shape[1 + nd]
    outs = cols.shape[2 + nd:]
    y = np.zeros((n_, c_) + tuple(s + lo + hi for s, (lo, hi) in zip(shape, pad)))
    for c, n in itertools.product(range(c_), range(n_)):
        for kp in itertools.product(*(range(k) for k in kernel)):
            for pos in itertools.product(*(range(m) for m in outs)):
                at = tuple(i * s + j * d for i, s, j, d in zip(pos, stride, kp, dilation))
                y[(n, c) + at] += cols[(c,) + kp + (n,) + pos]
    return y[(slice(None), slice(None)) + tuple(slice(lo, lo + s) for s, (lo, _) in
                                                zip(shape, pad))].astype(cols.dtype)


_IM2COL_CASES = [  # (x shape, kernel, stride, dilation, pad)
    ((2, 3, 5, 6), (3, 2), (1, 2), (1, 1), ((1, 0), (0, 2))),
    ((1, 2, 7), (3,), (2,), (2,), ((1, 1),)),
]


def _im2col_samples(rng, dtype):
    return [Sample((values(rng, xs, dtype), Raw(k), Raw(s), Raw(d), Raw(p)))
            for xs, k, s, d, p in _IM2COL_CASES]


def _col2im_samples(rng, dtype):
    out = []
    for xs, k, s, d, p in _IM2COL_CASES:
        outs = tuple(_out_len(n, kk, ss, lo, hi, dd) for n, kk, ss, dd, (lo, hi) in
                     zip(xs[2:], k, s, d, p))
        cols = values(rng, (xs[1],) + k + (xs[0],) + outs, dtype)
        out.append(Sample((cols, Raw(xs[2:]), Raw(k), Raw(s), Raw(d), Raw(p))))
    return out


def _conv_direct_ref(x, w, stride, dilation, pad):
    return ref_conv(_padded(x, pad, 0.0), w, stride=stride, dilation=dilation).astype(x.dtype)


def _conv_direct_input_grad_ref(g, w, shape, stride, dilation, pad):
    """The sum of each output gradient times the weight, placed back on the window's
    positions: loops over (n, o, output position, kernel offset)."""
    dxp = np.zeros((g.shape[0], w.shape[1]) + tuple(s + lo + hi for s, (lo, hi) in
                                                    zip(shape, pad)))
    for n, o in itertools.product(range(g.shape[0]), range(g.shape[1])):
        for pos in itertools.product(*(range(m) for m in g.shape[2:])):
            for kp in itertools.product(*(range(k) for k in w.shape[2:])):
                at = tuple(p * s + j * d for p, s, j, d in zip(pos, stride, kp, dilation))
                dxp[(n, slice(None)) + at] += g[(n, o) + pos] * w[(o, slice(None)) + kp]
    crop = tuple(slice(lo, lo + s) for s, (lo, _) in zip(shape, pad))
    return dxp[(slice(None), slice(None)) + crop].astype(g.dtype)


def _conv_direct_weight_grad_ref(g, x, kernel, stride, dilation, pad):
    xp = _padded(x, pad, 0.0)
    dw = np.zeros((g.shape[1], x.shape[1]) + tuple(kernel))
    for o, kp in itertools.product(range(g.shape[1]),
                                   itertools.product(*(range(k) for k in kernel))):
        for n in range(g.shape[0]):
            for pos in itertools.product(*(range(m) for m in g.shape[2:])):
                at = tuple(p * s + j * d for p, s, j, d in zip(pos, stride, kp, dilation))
                dw[(o, slice(None)) + kp] += g[(n, o) + pos] * xp[(n, slice(None)) + at]
    return dw.astype(g.dtype)


_DIRECT_CASES = [  # (x shape, weight shape, stride, dilation, pad)
    ((2, 1, 6, 7), (3, 1, 3, 3), (1, 1), (1, 1), ((1, 1), (2, 0))),
    ((1, 2, 7, 5), (2, 2, 2, 3), (2, 1), (2, 1), ((0, 1), (1, 1))),
]


def _direct_out(xs, ws, stride, dilation, pad):
    return (xs[0], ws[0]) + tuple(_out_len(n, k, s, lo, hi, d) for n, k, s, d, (lo, hi) in
                                  zip(xs[2:], ws[2:], stride, dilation, pad))


def _conv_direct_samples(rng, dtype):
    return [Sample((values(rng, xs, dtype), values(rng, ws, dtype), Raw(s), Raw(d), Raw(p)))
            for xs, ws, s, d, p in _DIRECT_CASES]


def _conv_direct_input_grad_samples(rng, dtype):
    return [Sample((values(rng, _direct_out(xs, ws, s, d, p), dtype), values(rng, ws, dtype),
                    Raw(xs[2:]), Raw(s), Raw(d), Raw(p))) for xs, ws, s, d, p in _DIRECT_CASES]


def _conv_direct_weight_grad_samples(rng, dtype):
    return [Sample((values(rng, _direct_out(xs, ws, s, d, p), dtype), values(rng, xs, dtype),
                    Raw(ws[2:]), Raw(s), Raw(d), Raw(p))) for xs, ws, s, d, p in _DIRECT_CASES]


# The compiled cases of the direct rows share one geometry (their kernels compile once):
# x (2, 2, 6, 7), w (3, 2, 5, 5), padding 2; an empty batch takes the numpy rows.
_DIRECT_PAD = ((2, 2), (2, 2))


def _direct_convs(x, w, b):
    return (NF.conv2d(x, w, b, padding=2),
            NF.conv2d(x, w[:, :, 1:, ::2], padding="same", dilation=(2, 1)))


def _max_pool_index_ref(x, kernel, stride, dilation, pad):
    """PyTorch's loop per window: from its first position inside the input with -inf, keep
    `v > best or isnan(v)`."""
    sp = x.shape[2:]
    outs = tuple(_out_len(n, k, s, lo, hi, d) for n, k, s, d, (lo, hi) in
                 zip(sp, kernel, stride, dilation, pad))
    idx = np.zeros(x.shape[:2] + outs, np.int64)
    for n, c in itertools.product(range(x.shape[0]), range(x.shape[1])):
        for pos in itertools.product(*(range(m) for m in outs)):
            inside = []
            for i, s, (lo, _), d, k, m in zip(pos, stride, pad, dilation, kernel, sp):
                inside.append([i * s - lo + j * d for j in range(k)
                               if 0 <= i * s - lo + j * d < m])
            best, where = -math.inf, int(np.ravel_multi_index(tuple(v[0] for v in inside), sp))
            for at in itertools.product(*inside):
                v = x[(n, c) + at]
                if v > best or np.isnan(v):
                    best, where = v, int(np.ravel_multi_index(at, sp))
            idx[(n, c) + pos] = where
    return idx


_POOL_INDEX_CASES = [  # (x shape, kernel, stride, dilation, pad)
    ((2, 3, 7, 6), (3, 3), (2, 2), (1, 1), ((1, 2), (1, 1))),     # ceil mode's extra after
    ((1, 2, 7, 7), (2, 3), (1, 2), (2, 1), ((0, 0), (1, 1))),
    ((2, 2, 8), (3,), (3,), (1,), ((1, 1),)),
    ((1, 1, 3, 4, 5), (2, 2, 3), (2, 1, 2), (1, 1, 1), ((0, 1), (1, 1), (1, 1))),
]


def _max_pool_index_samples(rng, dtype):
    out = [Sample((values(rng, xs, dtype, "grid"), Raw(k), Raw(s), Raw(d), Raw(p)))
           for xs, k, s, d, p in _POOL_INDEX_CASES]
    x = values(rng, (1, 2, 5, 6), dtype).astype(dtype)
    x[0, 0, :2, :2] = 1.0                              # a tie: the first one
    x[0, 0, 2:4, 2:4] = [[np.nan, 0.5], [1.0, np.nan]]  # two NaNs: the last one
    x[0, 1, :, :3] = -np.inf                           # -inf windows: the first inside
    out.append(Sample((x, Raw((2, 2)), Raw((2, 3)), Raw((1, 1)), Raw(((1, 1), (1, 1)))),
                      desc="ties, NaN, -inf", special=True))
    return out


def _plane_index(rng, lead, plane, window):
    return rng.integers(0, plane, lead + window).astype(np.int64)


def _plane_gather_samples(rng, dtype):
    return [Sample((values(rng, (2, 3, 4, 5), dtype), _plane_index(rng, (2, 3), 20, (2, 3)))),
            Sample((values(rng, (1, 2, 7), dtype), _plane_index(rng, (1, 2), 7, (9,))),
                   desc="repeated positions")]


def _plane_scatter_add_samples(rng, dtype):
    return [Sample((values(rng, (2, 3, 2, 3), dtype), _plane_index(rng, (2, 3), 20, (2, 3)),
                    Raw((4, 5)))),
            Sample((values(rng, (1, 2, 9), dtype), _plane_index(rng, (1, 2), 4, (9,)),
                    Raw((4,))), desc="repeated positions add up")]


def _plane_gather_ref(x, index):
    out = np.zeros(index.shape, x.dtype)
    for i in itertools.product(*(range(m) for m in index.shape)):
        out[i] = x[i[:2]].reshape(-1)[index[i]]
    return out


def _plane_scatter_add_ref(g, index, shape):
    out = np.zeros(g.shape[:2] + tuple(shape))
    for i in itertools.product(*(range(m) for m in index.shape)):
        plane = out[i[:2]].reshape(-1)
        plane[index[i]] += g[i]
    return out.astype(g.dtype)


def _grad(samples_fn):
    def samples(rng):
        return samples_fn(rng, F64)
    return samples


def _conv2d_samples(rng, dtype):
    return [
        Sample((values(rng, (2, 4, 5, 6), dtype), values(rng, (3, 4, 3, 2), dtype),
                values(rng, (3,), dtype)), {"stride": (2, 1), "padding": 1}),
        Sample((values(rng, (1, 4, 7, 5), dtype), values(rng, (4, 2, 3, 3), dtype)),
               {"dilation": 2, "padding": (2, 1), "groups": 2}, desc="groups, dilation"),
        Sample((values(rng, (1, 3, 5, 4), dtype), values(rng, (3, 1, 2, 2), dtype)),
               {"padding": "same", "groups": 3}, desc="depthwise, even kernel same"),
        Sample((values(rng, (2, 2, 5, 6), dtype), values(rng, (3, 2, 2, 3), dtype),
                values(rng, (3,), dtype)), {"padding": "same", "dilation": (2, 1)},
               desc="2 channels, stride 1: the direct rows"),
    ]


def _conv1d_samples(rng, dtype):
    return [Sample((values(rng, (2, 3, 9), dtype), values(rng, (2, 3, 4), dtype),
                    values(rng, (2,), dtype)), {"stride": 2, "padding": 1, "dilation": 2})]


def _conv3d_samples(rng, dtype):
    return [Sample((values(rng, (1, 2, 4, 3, 5), dtype), values(rng, (2, 2, 2, 2, 3), dtype)),
                   {"padding": (1, 0, 1), "stride": (1, 1, 2)})]


def _convt2d_samples(rng, dtype):
    return [
        Sample((values(rng, (2, 4, 3, 4), dtype), values(rng, (4, 3, 3, 2), dtype),
                values(rng, (3,), dtype)), {"stride": 2, "padding": 1, "output_padding": 1}),
        Sample((values(rng, (1, 4, 3, 3), dtype), values(rng, (4, 1, 2, 3), dtype)),
               {"groups": 2, "dilation": (2, 1), "output_padding": (1, 0)},
               desc="groups, dilation, output_padding < dilation (stride 1)"),
    ]


def _convt1d_samples(rng, dtype):
    return [Sample((values(rng, (2, 2, 5), dtype), values(rng, (2, 3, 3), dtype)),
                   {"stride": 3, "padding": 1, "output_padding": 2})]


def _pool2d_samples(rng, dtype):
    return [
        Sample((values(rng, (2, 3, 7, 6), dtype, "grid"), 3),
               {"stride": 2, "padding": 1, "ceil_mode": True}, desc="ceil, padded"),
        Sample((values(rng, (1, 2, 5, 6), dtype, "grid"), (2, 3)),
               {"stride": (1, 2), "padding": (1, 0)}),
    ]


def _tile_samples(rng, dtype):
    """Windows that tile the input (stride == kernel): views instead of im2col; a crop."""
    return [Sample((values(rng, (2, 3, 7, 6), dtype, "grid"), 2)),
            Sample((values(rng, (1, 2, 6, 9), dtype, "grid"), (3, 2)), {"ceil_mode": True})]


def _maxpool2d_samples(rng, dtype):
    return _pool2d_samples(rng, dtype) + _tile_samples(rng, dtype) + [
        Sample((values(rng, (1, 2, 7, 7), dtype, "grid"), 2),
               {"dilation": 2, "return_indices": True}, desc="dilation, indices")]


def _maxpool1d_samples(rng, dtype):
    return [Sample((values(rng, (2, 2, 8), dtype, "grid"), 3),
                   {"stride": 2, "padding": 1, "ceil_mode": True, "return_indices": True}),
            Sample((values(rng, (2, 2, 7), dtype, "grid"), 2), {"return_indices": True})]


def _avgpool2d_samples(rng, dtype):
    return _pool2d_samples(rng, dtype) + _tile_samples(rng, dtype) + [
        Sample((values(rng, (1, 2, 7, 6), dtype), 3),
               {"stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False})]


def _adaptive_samples(rng, dtype):
    return [Sample((values(rng, (2, 2, 7, 5), dtype, "grid"), Raw((3, 2)))),
            Sample((values(rng, (2, 5, 6), dtype, "grid"), Raw((4, 4))), desc="unbatched")]


def _pad_samples(rng, dtype):
    x = values(rng, (2, 3, 4, 5), dtype)
    return [Sample((x, Raw((2, 1, 0, 3))), {"mode": m}) for m in
            ("reflect", "replicate", "circular")] + [
        Sample((x, Raw((1, -2, 2, 0))), {"value": 1.5}, desc="constant, crop")]


def _interp_samples(rng, dtype):
    x = values(rng, (1, 2, 4, 5), dtype)
    return [Sample((x,), {"size": (7, 3), "mode": "nearest"}),
            Sample((x,), {"scale_factor": 1.5, "mode": "nearest"}),
            Sample((x,), {"size": (6, 9), "mode": "bilinear", "align_corners": False}),
            Sample((x,), {"size": (3, 8), "mode": "bilinear", "align_corners": True}),
            Sample((x,), {"scale_factor": 2.5, "mode": "bilinear", "align_corners": False})]


def _unfold_samples(rng, dtype):
    return [Sample((values(rng, (2, 2, 5, 6), dtype), (2, 3)),
                   {"dilation": (2, 1), "padding": 1, "stride": (1, 2)})]


def _fold_samples(rng, dtype):
    return [Sample((values(rng, (2, 12, 15), dtype), (5, 6), (2, 3)),
                   {"dilation": (2, 1), "padding": 1, "stride": (1, 2)})]


def _grad_drop_indices(samples_fn):
    def samples(rng):
        out = []
        for s in samples_fn(rng, F64):
            out.append(Sample(s.args, {k: v for k, v in s.kwargs.items()
                                       if k != "return_indices"}, s.desc))
        return out
    return samples


def _e(name, op, call, ref, samples, grad=True, **kw):
    return OpInfo(name, op, call, ref, samples, FLOATS,
                  (_grad(samples) if grad is True else grad) or None, tol=TOL, **kw)


CONV_OPINFOS = [
    _e("im2col", "im2col", lambda x, k, s, d, p: ops_conv.im2col(x, k, s, d, p),
       lambda x, k, s, d, p: _im2col_ref(x, k, s, d, p, 0.0), _im2col_samples,
       compiled=[Case("im2col", lambda x, w: (NF.conv2d(x, w, padding=1, stride=(1, 2)),
                                              NF.max_pool2d(x, 2)),
                      shapes([(2, 3, 5, 6), (4, 3, 3, 3)]))]),
    _e("col2im", "col2im", ops_conv.col2im, _col2im_ref, _col2im_samples,
       compiled=[Case("col2im", lambda x, w: NF.conv_transpose2d(x, w, stride=2) * 2,
                      shapes([(2, 3, 3, 4), (3, 2, 3, 3)]))]),
    _e("max_pool_index", "max_pool_index",
       lambda x, k, s, d, p: ops_pool.max_pool_index(x, k, s, d, p), _max_pool_index_ref,
       _max_pool_index_samples, grad=False,
       compiled=[Case("max_pool_index",
                      lambda x: NF.max_pool2d(x * 2, 3, stride=2, padding=1, ceil_mode=True,
                                              return_indices=True),
                      shapes([(2, 3, 7, 6)]))]),
    _e("plane_gather", "plane_gather",
       ops_pool.plane_gather, _plane_gather_ref,
       _plane_gather_samples,
       compiled=[Case("plane_gather", lambda x, i: (ops_pool.plane_gather(x * 2, i) + 1,),
                      shapes([(2, 3, 4, 5), (2, 3, 2, 3)], ints={1: (0, 20)}))]),
    _e("plane_scatter_add", "plane_scatter_add",
       ops_pool.plane_scatter_add,
       _plane_scatter_add_ref, _plane_scatter_add_samples,
       compiled=[Case("plane_scatter_add",
                      lambda g, i: (ops_pool.plane_scatter_add(g * 2, i, (4, 5)) + 1,),
                      shapes([(2, 3, 2, 3), (2, 3, 2, 3)], ints={1: (0, 20)}))]),
    _e("conv_direct", "conv_direct", ops_conv_direct.conv_direct, _conv_direct_ref,
       _conv_direct_samples,
       compiled=[Case("conv_direct", _direct_convs,
                      shapes([(2, 2, 6, 7), (3, 2, 5, 5), (3,)], None,
                             [(0, 2, 6, 7), (3, 2, 5, 5), (3,)]), tol="reduce")]),
    _e("conv_direct_input_grad", "conv_direct_input_grad",
       ops_conv_direct.conv_direct_input_grad, _conv_direct_input_grad_ref,
       _conv_direct_input_grad_samples,
       compiled=[Case("conv_direct_input_grad",
                      lambda g, w: ops_conv_direct.conv_direct_input_grad(
                          g * 2, w, (6, 7), (1, 1), (1, 1), _DIRECT_PAD),
                      shapes([(2, 3, 6, 7), (3, 2, 5, 5)]), tol="reduce")]),
    _e("conv_direct_weight_grad", "conv_direct_weight_grad",
       ops_conv_direct.conv_direct_weight_grad, _conv_direct_weight_grad_ref,
       _conv_direct_weight_grad_samples,
       compiled=[Case("conv_direct_weight_grad",
                      lambda g, x: ops_conv_direct.conv_direct_weight_grad(
                          g, x, (5, 5), (1, 1), (1, 1), _DIRECT_PAD),
                      shapes([(2, 3, 6, 7), (2, 2, 6, 7)]), tol="reduce")]),
    _e("conv2d", None, NF.conv2d, ref_conv, _conv2d_samples),
    _e("conv1d", None, NF.conv1d, ref_conv, _conv1d_samples),
    _e("conv3d", None, NF.conv3d, ref_conv, _conv3d_samples),
    _e("conv_transpose2d", None, NF.conv_transpose2d, ref_conv_transpose, _convt2d_samples),
    _e("conv_transpose1d", None, NF.conv_transpose1d, ref_conv_transpose, _convt1d_samples),
    _e("max_pool2d", None, NF.max_pool2d, ref_max_pool, _maxpool2d_samples,
       _grad_drop_indices(_maxpool2d_samples)),
    _e("max_pool1d", None, NF.max_pool1d, ref_max_pool, _maxpool1d_samples,
       _grad_drop_indices(_maxpool1d_samples)),
    _e("avg_pool2d", None, NF.avg_pool2d, ref_avg_pool, _avgpool2d_samples),
    _e("adaptive_avg_pool2d", None, NF.adaptive_avg_pool2d,
       lambda x, o: _adaptive_ref(x, o, np.mean), _adaptive_samples),
    _e("adaptive_max_pool2d", None, NF.adaptive_max_pool2d,
       lambda x, o: _adaptive_ref(x, o, np.max), _adaptive_samples),
    _e("pad", None, NF.pad, ref_pad, _pad_samples),
    _e("interpolate", None, NF.interpolate, ref_interpolate, _interp_samples),
    _e("nn_unfold", None, NF.unfold, ref_unfold, _unfold_samples),
    _e("nn_fold", None, NF.fold, ref_fold, _fold_samples),
]


# max pooling of windows holding NaN (test_conv_pool.py, tracer/test_conv_traced.py)

def _pytorch_window_pick(window):
    """PyTorch's CPU max-pool loop: keep `val > max or isnan(val)` (the last NaN, else the
    first maximum)."""
    best, at = -np.inf, -1
    for j, v in enumerate(window):
        if v > best or np.isnan(v):
            best, at = v, j
    return best, at


def max_pool_nan_cases():
    """(input, kernel) in 1, 2 and 3 dims whose windows hold two NaNs, one NaN, a tie and
    none, with PyTorch's values and flat indices."""
    cases = []
    x = np.array([[[np.nan, 1, np.nan, 0, 5, 5, 2, 5, 3, np.nan, 7, 7]]], np.float32)
    cases.append((x, 4))
    x2 = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4) % 5
    x2[0, 0, 0, 1] = x2[0, 0, 1, 0] = np.nan      # window (0, 0): two NaNs
    x2[0, 0, 2, 3] = np.nan                       # window (1, 1): one
    cases.append((x2, 2))
    x3 = np.zeros((1, 1, 2, 2, 4), np.float32)
    x3[0, 0, 0, 1, 0] = x3[0, 0, 1, 0, 1] = np.nan
    x3[0, 0, :, :, 2:] = 3.0                      # a four-way tie
    cases.append((x3, 2))
    out = []
    for x, k in cases:
        nd = x.ndim - 2
        windows = np.lib.stride_tricks.sliding_window_view(x[0, 0], (k,) * nd)[
            (slice(None, None, k),) * nd]
        values = np.empty(windows.shape[:nd], np.float32)
        index = np.empty(windows.shape[:nd], np.int64)
        for pos in np.ndindex(*values.shape):
            v, j = _pytorch_window_pick(windows[pos].reshape(-1))
            offset = np.unravel_index(j, (k,) * nd)
            values[pos] = v
            index[pos] = np.ravel_multi_index(tuple(p * k + o for p, o in zip(pos, offset)),
                                              x.shape[2:])
        out.append((x, k, values[None, None], index[None, None]))
    return out
