"""OpInfo entries of index_put / index_get (eager/index_assign.py: `x[idx] = v`,
`index_put_`), appended to `opinfo.OPINFOS`.

The references walk the broadcast index element by element in C order, writing (the last
write wins) or adding one value at a time: no numpy advanced indexing, which eager uses.
Gradient samples repeat no index where values are written over (a value written over has
no derivative, while PyTorch's rule, kept here, gives it its element's cotangent)."""
from __future__ import annotations

import numpy as np
from opinfo import ALL, FLOATS, Case, OpInfo, Raw, Sample, shapes, values

import eager
from eager.dispatch import apply
from eager.ops import OPS

F64 = np.dtype("float64")


def _positions(shape, key):
    """(position in the result, element of x) pairs of x[key] for a key of index arrays
    (leading dims, broadcast together) and trailing whole dims."""
    idx = [np.asarray(i) for i in key]
    bshape = np.broadcast_shapes(*(i.shape for i in idx))
    idx = [np.broadcast_to(i, bshape) for i in idx]
    rest = shape[len(idx):]
    for pos in np.ndindex(*bshape):
        lead = tuple(int(i[pos]) % shape[d] if -shape[d] <= int(i[pos]) < shape[d] else None
                     for d, i in enumerate(idx))
        if None in lead:
            raise IndexError("index out of range")
        for tail in np.ndindex(*rest):
            yield pos + tail, lead + tail


def _put_ref(base, value, key, accumulate=False):
    out = base.copy()
    for src, dst in _positions(base.shape, key):
        if accumulate:
            out[dst] = out[dst] + value[src]
        else:
            out[dst] = value[src]
    return out


def _get_ref(x, key):
    idx = [np.asarray(i) for i in key]
    bshape = np.broadcast_shapes(*(i.shape for i in idx))
    out = np.zeros(bshape + x.shape[len(idx):], x.dtype)
    for src, dst in _positions(x.shape, key):
        out[src] = x[dst]
    return out


def _put_call(base, value, key, accumulate=False):
    out = base * 1 if base.requires_grad else base.clone()
    return out.index_put(tuple(eager.tensor(np.asarray(i)) for i in key), value, accumulate)


def _get_call(x, key):
    idx = tuple(eager.tensor(np.asarray(i)) for i in key)
    k = tuple(("t", j) for j in range(len(idx)))
    return apply(OPS["index_get"], x, *idx, key=k)


def _put_samples(rng, dtype, repeats=True):
    rows = np.array([0, 3, -1, 0]) if repeats else np.array([0, 2, -1])  # (-1 is 3)
    out = [
        Sample((values(rng, (4, 3), dtype), values(rng, (len(rows), 3), dtype),
                Raw((rows,))), desc="rows"),
        Sample((values(rng, (4, 3), dtype), values(rng, (2, 3), dtype),
                Raw((np.array([[1], [2]]), np.array([0, 2, -3])))), desc="broadcast pairs"),
        Sample((values(rng, (4, 3), dtype), values(rng, (0, 3), dtype),
                Raw((np.array([], np.int64),))), desc="empty index"),
    ]
    if dtype.kind == "f":
        v = values(rng, (len(rows), 3), dtype)
        v[0, 0], v[-1, 1] = np.nan, -np.inf
        out.append(Sample((values(rng, (4, 3), dtype), v, Raw((rows,))), desc="NaN, inf",
                          special=True))
    return out


def _accumulate_samples(rng, dtype):
    return [Sample(s.args, {"accumulate": True}, s.desc + ", accumulate", s.special)
            for s in _put_samples(rng, dtype)]


def _grad_samples(rng):
    return [s for s in _put_samples(rng, F64, repeats=False) if not s.special][:1] + \
        [s for s in _accumulate_samples(rng, F64) if not s.special]


def _get_samples(rng, dtype):
    x = values(rng, (5, 3), dtype)
    return [Sample((x, Raw((np.array([4, 0, 0, -2]),))), desc="rows, repeated"),
            Sample((x, Raw((np.array([[0], [4]]), np.array([2, -1, 0])))), desc="pairs")]


def _index_gets(x, rows):
    k = (("t", 0), ("s", 1, 3, 1))
    return (apply(OPS["index_get"], x, rows, key=k) * 2,)


def _index_puts(x, v, rows):
    y = x.clone()
    y[rows] = v
    z = x.clone()
    z.index_put_((rows,), v * 2, accumulate=True)
    return y + 1, z * 2


INDEX_PUT_OPINFOS = [
    OpInfo("index_put", "index_put", _put_call, _put_ref, _put_samples, ALL,
           _grad_samples,
           compiled=[Case("index_put", _index_puts,
                          shapes([(5, 3), (4, 3), (4,)], None, [(5, 3), (0, 3), (0,)],
                                 ints={2: (-5, 5)}))]),
    OpInfo("index_put_accumulate", "index_put", _put_call, _put_ref, _accumulate_samples,
           FLOATS),
    OpInfo("index_get", "index_get", _get_call, _get_ref, _get_samples, ALL,
           lambda rng: _get_samples(rng, F64),
           compiled=[Case("index_get", _index_gets,
                          shapes([(5, 3), (4,)], None, [(5, 3), (0,)], ints={1: (-5, 5)}))]),
]
