"""OpInfo entries of the indexing, shaping, scan and sampling ops (issue 16 item 4), appended
to `opinfo.OPINFOS`: each op forward against a Python-loop reference, gradients against
finite differences (test_grad.py) and traced against eager (test_registry_traced.py).

The references loop over elements in Python (itertools / np.ndindex), sharing no code with
the composites they check; einsum's is numpy's own einsum, which eager never calls.
"""
from __future__ import annotations

import math

import numpy as np
from opinfo import (ALL, BOOL, F32, F64, FLOATS, I64, NUMERIC, Case, OpInfo, Raw, Sample,
                    shapes, specials, values)

import eager

NAN = math.nan


def _e(name, op, call, ref, samples, dtypes=FLOATS, grad=None, **kw):
    return OpInfo(name, op, call, ref, samples, dtypes, grad, **kw)


def _grad_of(samples_fn):
    """The float64 samples without NaN/inf or ties (where the gradient is not defined)."""
    def samples(rng):
        return [s for s in samples_fn(rng, F64) if not s.special and "ties" not in s.desc]
    return samples


def _lines(x, axis):
    """(index prefix, 1-D list of values) for every line of x along `axis`."""
    moved = np.moveaxis(x, axis, -1)
    for idx in np.ndindex(moved.shape[:-1]):
        yield idx, [moved[idx + (j,)] for j in range(moved.shape[-1])]


def _per_line(x, axis, fn, dtype):
    if x.ndim == 0:  # a 0-d tensor is one line of one element
        return _per_line(x.reshape(1), 0, fn, dtype).reshape(())
    out = np.zeros(np.moveaxis(x, axis, -1).shape, dtype)
    for idx, line in _lines(x, axis):
        for j, v in enumerate(fn(line)):
            out[idx + (j,)] = v
    return np.moveaxis(out, -1, axis)


def _scan_dtype(x):
    return x.dtype if x.dtype.kind == "f" else I64


# --------------------------------------------------------------------------------------
# scans

def _running(op):
    def fn(line):
        acc, out = None, []
        for v in line:
            v = float(v) if isinstance(v, (float, np.floating)) else int(v)
            acc = v if acc is None else op(acc, v)
            out.append(acc)
        return out
    return fn


def cumsum_ref(x, dim):
    if x.ndim == 0:
        return np.asarray(x, _scan_dtype(x))
    return _per_line(x, dim, _running(lambda a, b: a + b), _scan_dtype(x))


def cumprod_ref(x, dim):
    if x.ndim == 0:
        return np.asarray(x, _scan_dtype(x))
    return _per_line(x, dim, _running(lambda a, b: a * b), _scan_dtype(x))


def _lse_line(line):
    out = []
    for j in range(len(line)):
        vals = [float(v) for v in line[:j + 1]]
        m = max(vals)
        if math.isnan(m) or any(math.isnan(v) for v in vals):
            out.append(NAN)
        elif m == -math.inf or m == math.inf:
            out.append(m)
        else:
            out.append(m + math.log(sum(math.exp(v - m) for v in vals)))
    return out


def logcumsumexp_ref(x, dim):
    return _per_line(x, dim, _lse_line, x.dtype)


def _cum_extreme_line(largest):
    def fn(line):
        best, at, vals, idxs = None, 0, [], []
        for j, v in enumerate(line):
            isnan = isinstance(v, (float, np.floating)) and math.isnan(v)
            if best is None or isnan:
                best, at = v, j
            elif not (isinstance(best, (float, np.floating)) and math.isnan(best)):
                if (v >= best) if largest else (v <= best):
                    best, at = v, j
            vals.append(best)
            idxs.append(at)
        return vals, idxs
    return fn


def cum_extreme_ref(largest):
    def ref(x, dim):
        fn = _cum_extreme_line(largest)
        vals = _per_line(x, dim, lambda line: fn(line)[0], x.dtype)
        idxs = _per_line(x, dim, lambda line: fn(line)[1], I64)
        return vals, idxs
    return ref


def _order(line, descending):
    def key(i):
        v = line[i]
        nan = isinstance(v, (float, np.floating)) and math.isnan(v)
        if descending:
            return (0, 0) if nan else (1, -float(v) if isinstance(v, (float, np.floating))
                                       else -int(v))
        return (1, 0) if nan else (0, v)
    return sorted(range(len(line)), key=key)  # Python's sort is stable


def sort_ref(x, dim=-1, descending=False):
    if x.ndim == 0:
        return x.copy(), np.zeros((), I64)
    idx = _per_line(x, dim, lambda line: _order(line, descending), I64)
    vals = _per_line(x, dim, lambda line: [line[i] for i in _order(line, descending)], x.dtype)
    return vals, idx


def topk_ref(x, k, dim=-1, largest=True):
    axis = dim % x.ndim
    vals, idx = sort_ref(x, axis, descending=largest)
    cut = tuple(slice(None) if d != axis else slice(0, k) for d in range(x.ndim))
    return vals[cut], idx[cut]


def _scan_samples(kind="any"):
    def samples(rng, dtype):
        out = [Sample((values(rng, (3, 4), dtype, kind), 1)),
               Sample((values(rng, (3, 4), dtype, kind), 0)),
               Sample((values(rng, (2, 3, 4), dtype, kind), -1)),
               Sample((values(rng, (5,), dtype, kind), 0)),
               Sample((values(rng, (), dtype, kind), 0)),
               Sample((values(rng, (0, 3), dtype, kind), 1)),
               Sample((values(rng, (3, 0), dtype, kind), 1))]
        if dtype.kind == "f":
            out.append(Sample((specials(dtype, (1, 9)), 1), special=True))
        return out
    return samples


def _cumprod_samples(rng, dtype):
    out = _scan_samples()(rng, dtype)
    zeros = np.array([[1.5, 0, 2, -1], [0, 0, 3, 0.5], [2, 1, 0.5, 0]], dtype)
    out.append(Sample((zeros, 1), desc="zeros"))
    return out


def _lse_samples(rng, dtype):
    out = _scan_samples()(rng, dtype)
    spread = np.array([[-1000, 0, -1000, 5], [-np.inf, -np.inf, 1, -np.inf]], dtype)
    out.append(Sample((spread, 1), desc="spread and -inf"))
    return out


def _lse_grad(rng):
    return [s for s in _scan_samples()(rng, F64) if not s.special]


def _sort_samples(rng, dtype):
    out = _scan_samples("grid")(rng, dtype)
    out = [Sample(s.args, {"descending": d}, special=s.special)
           for s in out for d in (False, True)]
    ties = np.array([[1, 0, 1, 0, 2], [3, 3, 3, 1, 3]], dtype)
    out.append(Sample((ties, 1), {"descending": True}, desc="ties stay in order"))
    out.append(Sample((ties, 1), {"descending": False}, desc="ties stay in order"))
    return out


def _topk_samples(rng, dtype):
    out = [Sample((values(rng, (3, 5), dtype, "grid"), 2), {"dim": 1}),
           Sample((values(rng, (3, 5), dtype, "grid"), 3), {"dim": 0, "largest": False}),
           Sample((values(rng, (6,), dtype, "grid"), 6), {}),
           Sample((values(rng, (2, 0), dtype), 0), {"dim": 1})]
    if dtype.kind == "f":
        out.append(Sample((specials(dtype), 4), {}, special=True))
    return out


# --------------------------------------------------------------------------------------
# indexing

def gather_ref(x, dim, index):
    out = np.zeros(index.shape, x.dtype)
    for pos in np.ndindex(index.shape):
        src = list(pos)
        src[dim] = int(index[pos])
        out[pos] = x[tuple(src)]
    return out


def _gather_samples(rng, dtype):
    return [Sample((values(rng, (3, 4), dtype), 1, rng.integers(0, 4, (3, 2)))),
            Sample((values(rng, (3, 4), dtype), 0, rng.integers(0, 3, (2, 4)))),
            Sample((values(rng, (2, 3, 4), dtype), -1, rng.integers(0, 4, (2, 2, 5)))),
            Sample((values(rng, (3, 4), dtype), 1, np.zeros((3, 0), np.int64)))]


def index_select_ref(x, dim, index):
    picked = [np.take(x, [int(i)], axis=dim) for i in index]
    if not picked:
        shape = list(x.shape)
        shape[dim] = 0
        return np.zeros(shape, x.dtype)
    return np.concatenate(picked, axis=dim)


def _index_select_samples(rng, dtype):
    return [Sample((values(rng, (3, 4), dtype), 1, np.array([3, 0, 3]))),
            Sample((values(rng, (3, 4), dtype), 0, np.array([2]))),
            Sample((values(rng, (2, 3, 4), dtype), -2, np.array([], np.int64)))]


def take_along_ref(x, index, dim):
    shape = list(np.broadcast_shapes(x.shape[:dim] + (1,) + x.shape[dim + 1:],
                                     index.shape[:dim] + (1,) + index.shape[dim + 1:]))
    xs, ins = list(shape), list(shape)
    xs[dim], ins[dim] = x.shape[dim], index.shape[dim]
    return gather_ref(np.broadcast_to(x, xs), dim, np.broadcast_to(index, ins))


def _take_along_samples(rng, dtype):
    return [Sample((values(rng, (3, 4), dtype), rng.integers(0, 4, (3, 2)), 1)),
            Sample((values(rng, (3, 1, 4), dtype), rng.integers(0, 4, (1, 2, 5)), 2)),
            Sample((values(rng, (2, 3), dtype), rng.integers(0, 2, (3, 3)), 0))]


def scatter_ref(x, dim, index, src, reduce=None, include_self=True):
    out = x.astype(np.float64 if x.dtype.kind == "f" else x.dtype).copy()
    groups = {}
    for pos in np.ndindex(index.shape):
        dst = list(pos)
        dst[dim] = int(index[pos])
        groups.setdefault(tuple(dst), []).append(src[pos])
    for dst, vals in groups.items():
        if reduce is None:
            out[dst] = vals[-1]
            continue
        if include_self:
            vals = [x[dst]] + vals
        if reduce == "sum":
            out[dst] = sum(vals)
        elif reduce == "mean":  # integers: PyTorch floor-divides the sum by the count
            out[dst] = sum(vals) / len(vals) if x.dtype.kind == "f" else sum(vals) // len(vals)
        elif reduce == "prod":
            out[dst] = math.prod(vals)
        elif reduce == "amax":
            out[dst] = NAN if any(math.isnan(v) for v in vals) else max(vals)
        else:
            out[dst] = NAN if any(math.isnan(v) for v in vals) else min(vals)
    return out.astype(x.dtype)


def _distinct_index(rng, n, shape, dim):
    """An index of `shape` with distinct values along `dim` (no overwrite races)."""
    idx = np.zeros(shape, np.int64)
    moved = np.moveaxis(idx, dim, -1)
    for pos in np.ndindex(moved.shape[:-1]):
        moved[pos] = rng.permutation(n)[:moved.shape[-1]]
    return idx


def _scatter_samples(rng, dtype):
    return [Sample((values(rng, (3, 4), dtype), 1, _distinct_index(rng, 4, (3, 2), 1),
                    values(rng, (3, 3), dtype))),
            Sample((values(rng, (3, 4), dtype), 0, _distinct_index(rng, 3, (2, 4), 0),
                    values(rng, (2, 4), dtype))),
            Sample((values(rng, (4,), dtype), 0, np.array([2, 0]), values(rng, (2,), dtype)))]


def _scatter_add_samples(rng, dtype):
    return [Sample((values(rng, (3, 4), dtype), 1, rng.integers(0, 4, (3, 5)),
                    values(rng, (3, 5), dtype))),
            Sample((values(rng, (3, 4), dtype), 0, rng.integers(0, 3, (2, 4)),
                    values(rng, (2, 4), dtype)))]


def _scatter_reduce_samples(reduce):
    def samples(rng, dtype):
        kind = "grid" if reduce in ("amax", "amin") else "any"
        out = []
        for include_self in (True, False):
            out.append(Sample((values(rng, (3, 4), dtype, kind), 1,
                               rng.integers(0, 4, (3, 5)), values(rng, (3, 5), dtype, kind),
                               reduce), {"include_self": include_self}))
            out.append(Sample((values(rng, (3, 4), dtype, kind), 0,
                               rng.integers(0, 3, (4, 4)), values(rng, (4, 4), dtype, kind),
                               reduce), {"include_self": include_self}))
        if reduce == "prod":
            x = np.array([[1.5, 0.0, 2.0], [0.5, 3.0, -1.0]], dtype)
            src = np.array([[0.0, 2.0, 0.5, 0.0], [1.5, 2.0, 0.0, 3.0]], dtype)
            index = np.array([[0, 0, 1, 2], [1, 1, 2, 0]])
            for include_self in (True, False):
                out.append(Sample((x, 1, index, src, "prod"), {"include_self": include_self},
                                  desc="zeros"))
        return out
    return samples


def masked_fill_ref(x, mask, value):
    out = x.copy()
    full = np.broadcast_to(mask, x.shape)
    for pos in np.ndindex(x.shape):
        if full[pos]:
            out[pos] = value
    return out


def _masked_fill_samples(rng, dtype):
    return [Sample((values(rng, (3, 4), dtype), values(rng, (3, 4), BOOL), -7)),
            Sample((values(rng, (3, 4), dtype), values(rng, (4,), BOOL), 2)),
            Sample((values(rng, (2, 3), dtype), values(rng, (), BOOL), 1)),
            Sample((values(rng, (0, 3), dtype), values(rng, (3,), BOOL), 5))]


def _masked_fill_inplace(x, mask, value):
    y = x.clone()
    return y.masked_fill_(mask, value)


# --------------------------------------------------------------------------------------
# shaping

def tri_ref(lower):
    def ref(x, diagonal=0):
        out = x.copy()
        for pos in np.ndindex(x.shape):
            i, j = pos[-2], pos[-1]
            if (j - i > diagonal) if lower else (j - i < diagonal):
                out[pos] = 0
        return out
    return ref


def _tri_samples(rng, dtype):
    return [Sample((values(rng, (4, 4), dtype),)), Sample((values(rng, (3, 5), dtype), 1)),
            Sample((values(rng, (2, 4, 3), dtype), -1)), Sample((values(rng, (0, 3), dtype),))]


def _pieces(x, dim, sizes):
    out, start = [], 0
    for s in sizes:
        out.append(np.take(x, list(range(start, start + s)), axis=dim).reshape(
            x.shape[:dim] + (s,) + x.shape[dim + 1:]))
        start += s
    return tuple(out)


def split_ref(x, size, dim=0):
    n = x.shape[dim]
    sizes = [min(size, n - s) for s in range(0, n, size)] if isinstance(size, int) else size
    return _pieces(x, dim % x.ndim, sizes)


def _split_samples(rng, dtype):
    return [Sample((values(rng, (5, 3), dtype), 2)), Sample((values(rng, (5, 3), dtype), 1, 1)),
            Sample((values(rng, (4, 6), dtype), Raw([1, 0, 5]), -1)),
            Sample((values(rng, (4, 6), dtype), 6, 1))]


def chunk_ref(x, chunks, dim=0):
    n = x.shape[dim]
    step = -(-n // chunks)
    return split_ref(x, step, dim)


def _chunk_samples(rng, dtype):
    return [Sample((values(rng, (5, 3), dtype), 3)), Sample((values(rng, (6, 4), dtype), 4, 1)),
            Sample((values(rng, (2, 3), dtype), 5, 0))]


def unbind_ref(x, dim=0):
    return tuple(np.take(x, i, axis=dim) for i in range(x.shape[dim]))


def narrow_ref(x, dim, start, length):
    start = start % x.shape[dim]
    return _pieces(x, dim % x.ndim, [start, length])[1] if start else \
        _pieces(x, dim % x.ndim, [length])[0]


def unfold_ref(x, dim, size, step):
    n = x.shape[dim]
    count = (n - size) // step + 1
    windows = [np.stack([np.take(x, w * step + k, axis=dim) for k in range(size)], axis=-1)
               for w in range(count)]
    return np.stack(windows, axis=dim)


def repeat_ref(x, *sizes):
    shape = (1,) * (len(sizes) - x.ndim) + x.shape
    x = x.reshape(shape)
    for axis, r in enumerate(sizes):
        x = np.concatenate([x] * r, axis=axis) if r else np.take(x, [], axis=axis)
    return x


def repeat_interleave_ref(x, repeats, dim=None):
    if dim is None:
        x, dim = x.reshape(-1), 0
    reps = [repeats] * x.shape[dim] if isinstance(repeats, int) else list(repeats)
    parts = [np.take(x, [i] * r, axis=dim) for i, r in enumerate(reps)]
    return np.concatenate(parts, axis=dim) if parts else x


def flip_ref(x, dims):
    out = x
    for d in dims:
        out = np.stack([np.take(out, i, axis=d) for i in reversed(range(out.shape[d]))], axis=d) \
            if out.shape[d] else out
    return out


def roll_ref(x, shifts, dims=None):
    if dims is None:
        flat = list(x.reshape(-1))
        n = len(flat)
        s = shifts % n if n else 0
        return np.array(flat[n - s:] + flat[:n - s], x.dtype).reshape(x.shape)
    out = x
    for s, d in zip(shifts, dims):
        n = out.shape[d]
        order = [(i - s) % n for i in range(n)]
        out = np.stack([np.take(out, i, axis=d) for i in order], axis=d)
    return out


def diagonal_ref(x, offset=0, dim1=0, dim2=1):
    d1, d2 = dim1 % x.ndim, dim2 % x.ndim
    rest = [d for d in range(x.ndim) if d not in (d1, d2)]
    moved = np.transpose(x, [d1, d2] + rest)
    n, m = moved.shape[:2]
    items = [moved[i, i + offset] for i in range(n) if 0 <= i + offset < m]
    if not items:
        return np.zeros(moved.shape[2:] + (0,), x.dtype)
    return np.stack(items, axis=-1)


def diag_ref(x, diagonal=0):
    if x.ndim == 2:
        return diagonal_ref(x, diagonal)
    n = len(x) + abs(diagonal)
    out = np.zeros((n, n), x.dtype)
    for k, v in enumerate(x):
        i, j = (k, k + diagonal) if diagonal >= 0 else (k - diagonal, k)
        out[i, j] = v
    return out


def _einsum_samples(rng, dtype):
    cases = [("ij,jk->ik", (3, 4), (4, 5)), ("bij,bjk->bik", (2, 3, 4), (2, 4, 5)),
             ("ii->i", (3, 3)), ("ij->", (3, 4)), ("i,i->", (4,), (4,)), ("i,j->ij", (3,), (2,)),
             ("bhqd,bhkd->bhqk", (2, 2, 3, 4), (2, 2, 5, 4)), ("...ij,...jk", (2, 3, 4), (4, 2)),
             ("ij,ij->ij", (2, 3), (2, 3)), ("ij,jk,kl->il", (2, 3), (3, 4), (4, 2)),
             ("ji", (3, 4)), ("ij,kj->ki", (3, 0), (2, 0))]
    return [Sample((eq,) + tuple(values(rng, s, dtype) for s in shapes)) for eq, *shapes in cases]


def _samples(cases):
    def samples(rng, dtype):
        return [Sample((values(rng, s, dtype),) + tuple(Raw(a) for a in args))
                for s, *args in cases]
    return samples


def _sample_pairs(cases):
    def samples(rng, dtype):
        return [Sample(tuple(values(rng, s, dtype) for s in shapes)) for shapes in cases]
    return samples


# --------------------------------------------------------------------------------------
# sampling (checked, not referenced: random)

def _check_multinomial(out, sample):
    p, n = sample.args[0], sample.args[1]
    replacement = sample.kwargs.get("replacement", False)
    assert out.dtype == I64 and out.shape == p.shape[:-1] + (n,)
    data = out.numpy().reshape(-1, n)
    rows = p.reshape(-1, p.shape[-1])
    for row, probs in zip(data, rows):
        assert all(probs[i] > 0 for i in row), (row, probs)
        if not replacement:
            assert len(set(row.tolist())) == n


def _multinomial_samples(rng, dtype):
    p = np.array([[0.1, 0.0, 0.6, 0.3], [0.0, 0.5, 0.5, 0.0]], dtype)
    return [Sample((p, 2)), Sample((p, 50), {"replacement": True}),
            Sample((p[0] * 3, 3)), Sample((p[1], 7), {"replacement": True})]


def _check_randperm(out, sample):
    n = sample.args[0]
    assert out.dtype == I64 and sorted(out.numpy().tolist()) == list(range(n))


# compiled cases (tests/codegen/test_numba_backend.py): the scan rows run as numpy steps

def _scans(x):
    return (eager.cumsum(x, 1), eager.cumsum(x, 0) * 2, eager.cumprod(x, 1) + 1,
            eager.logcumsumexp(x, -1), eager.logcumsumexp(x * 30, 0))


def _cum_extremes(x):
    mx, mn = eager.cummax(x, 1), eager.cummin(x, 0)
    return mx.values * 2, mx.indices, mn.values, mn.indices


def _sorts(x):
    s = eager.sort(x, 1)
    d = eager.sort(x, 0, descending=True)
    t = eager.topk(x, 2, dim=-1)
    return s.values, s.indices, d.values + 1, d.indices, t.values, t.indices, x.argsort(0)


def _scatters(x, idx, src):
    return (eager.scatter(x, 0, idx, src), eager.scatter_add(x, 0, idx, src * 2) + 1,
            x.scatter(0, idx, value=-1.0))


def _scatter_reduces(x, idx, src):
    return tuple(eager.scatter_reduce(x, 0, idx, src, r, include_self=s)
                 for r in ("amax", "amin", "prod", "sum", "mean") for s in (True, False))


SHAPING_OPINFOS = [
    # scans (registry ops of eager.scan_ops)
    _e("cumsum", "cumsum", eager.cumsum, cumsum_ref, _scan_samples(), ALL,
       _grad_of(_scan_samples()),
       compiled=[Case("cumsum", _scans, shapes([(3, 5)], None, [(0, 5)]), tol="reduce")]),
    _e("cumsum_method", "cumsum", lambda x, d: x.cumsum(d), cumsum_ref, _scan_samples(),
       (F32, I64)),
    _e("cumprod", "cumprod", eager.cumprod, cumprod_ref, _cumprod_samples, NUMERIC,
       _grad_of(_cumprod_samples),
       compiled=[Case("cumprod", lambda x: (x.cumprod(0), eager.cumprod(x, -1) * 2),
                     shapes([(3, 5)], None, [(3, 0)]))]),
    _e("logcumsumexp", "logcumsumexp", eager.logcumsumexp, logcumsumexp_ref, _lse_samples,
       FLOATS, _lse_grad,
       compiled=[Case("logcumsumexp", lambda x: (x.logcumsumexp(1) + 1,),
                     shapes([(3, 5)], None, [(0, 5)]))]),
    # (cum_argmax and argsort are not differentiable: their values are gathered, and the
    # gradient checks of those composites go with op=None entries)
    _e("cummax", None, lambda x, d: tuple(eager.cummax(x, d)), cum_extreme_ref(True),
       _scan_samples("grid"), NUMERIC, _grad_of(_scan_samples("grid"))),
    _e("cummin", "cum_argmax", lambda x, d: tuple(x.cummin(d)), cum_extreme_ref(False),
       _scan_samples("grid"), NUMERIC,
       compiled=[Case("cum_argmax", _cum_extremes, shapes([(3, 5)], None, [(0, 5)]))]),
    _e("cummin_grad", None, lambda x, d: tuple(x.cummin(d)), cum_extreme_ref(False),
       _scan_samples("grid"), (F64,), _grad_of(_scan_samples("grid"))),
    _e("sort", None, lambda x, d, **kw: tuple(eager.sort(x, d, **kw)), sort_ref,
       _sort_samples, NUMERIC, _grad_of(_sort_samples)),
    _e("argsort", "argsort", lambda x, d, **kw: x.argsort(d, **kw),
       lambda x, d, **kw: sort_ref(x, d, **kw)[1], _sort_samples, NUMERIC,
       compiled=[Case("argsort", _sorts, shapes([(3, 5)], None, [(0, 5)]))]),
    _e("topk", None, lambda x, k, **kw: tuple(eager.topk(x, k, **kw)), topk_ref,
       _topk_samples, NUMERIC, _grad_of(_topk_samples)),
    # indexing
    _e("gather_dim", None, eager.gather, gather_ref, _gather_samples, NUMERIC,
       _grad_of(_gather_samples)),
    _e("take_along_dim", None, eager.take_along_dim, take_along_ref, _take_along_samples,
       FLOATS, _grad_of(_take_along_samples)),
    _e("index_select", None, lambda x, d, i: x.index_select(d, i), index_select_ref,
       _index_select_samples, NUMERIC, _grad_of(_index_select_samples)),
    _e("scatter", "scatter", eager.scatter, scatter_ref, _scatter_samples, NUMERIC,
       _grad_of(_scatter_samples),
       compiled=[Case("scatter", _scatters, shapes([(4, 3), (2, 3), (2, 3)], None, None,
                                            ints={1: (0, 4)}))]),
    _e("scatter_value", "scatter", lambda x, d, i, s: x.scatter(d, i, value=2.5),
       lambda x, d, i, s: scatter_ref(x, d, i, np.full(i.shape, 2.5, x.dtype)),
       _scatter_samples, FLOATS),
    _e("scatter_add_dim", None, eager.scatter_add, lambda x, d, i, s: scatter_ref(
        x, d, i, s, "sum"), _scatter_add_samples, NUMERIC, _grad_of(_scatter_add_samples)),
]
for _reduce in ("sum", "mean", "prod", "amax", "amin"):
    SHAPING_OPINFOS.append(_e(
        f"scatter_reduce_{_reduce}", "scatter_reduce" if _reduce in ("prod", "amax", "amin")
        else None, eager.scatter_reduce, scatter_ref, _scatter_reduce_samples(_reduce),
        NUMERIC if _reduce == "mean" else FLOATS, _grad_of(_scatter_reduce_samples(_reduce)),
        tol={F32: (1e-5, 1e-5)},
        compiled=[Case("scatter_reduce", _scatter_reduces, shapes(
            [(4, 3), (5, 3), (5, 3)], None, None, ints={1: (0, 4)}))] if _reduce == "amax"
        else None))
SHAPING_OPINFOS += [
    _e("masked_fill", None, eager.masked_fill, masked_fill_ref, _masked_fill_samples, NUMERIC,
       _grad_of(_masked_fill_samples)),
    _e("masked_fill_", None, _masked_fill_inplace, masked_fill_ref, _masked_fill_samples,
       FLOATS),
    # shaping
    _e("tril", None, eager.tril, tri_ref(True), _tri_samples, ALL, _grad_of(_tri_samples)),
    _e("triu", None, lambda x, d=0: x.triu(d), tri_ref(False), _tri_samples, ALL,
       _grad_of(_tri_samples)),
    _e("split", None, lambda x, s, d=0: eager.split(x, s, d), split_ref, _split_samples, ALL,
       _grad_of(_split_samples)),
    _e("chunk", None, lambda x, c, d=0: x.chunk(c, d), chunk_ref, _chunk_samples, FLOATS,
       _grad_of(_chunk_samples)),
    _e("unbind", None, lambda x, d=0: eager.unbind(x, d), unbind_ref,
       _samples([((3, 2),), ((2, 3), 1), ((2, 0), 0)]), ALL,
       _grad_of(_samples([((3, 2),), ((2, 3), 1)]))),
    _e("narrow", None, lambda x, d, s, n: x.narrow(d, s, n), narrow_ref,
       _samples([((5, 3), 0, 1, 3), ((5, 3), 1, -2, 2), ((5, 3), 0, 2, 0)]), FLOATS,
       _grad_of(_samples([((5, 3), 0, 1, 3)]))),
    _e("unflatten", None, lambda x, d, s: x.unflatten(d, s),
       lambda x, d, s: x.reshape(x.shape[:d] + tuple(v if v != -1 else x.shape[d] // 2
                                                    for v in s) + x.shape[d + 1:]),
       _samples([((6, 4), 0, (2, 3)), ((3, 4), 1, (2, -1))]), ALL,
       _grad_of(_samples([((6, 4), 0, (2, 3))]))),
    _e("unfold", "unfold", lambda x, d, s, t: x.unfold(d, s, t), unfold_ref,
       _samples([((10,), 0, 3, 2), ((3, 7), 1, 2, 1), ((5, 2), 0, 5, 3), ((4, 3), 0, 2, 2)]),
       ALL, _grad_of(_samples([((10,), 0, 3, 2), ((3, 7), 1, 2, 1)])),
       compiled=[Case("unfold", lambda x: (x.unfold(1, 2, 1) * 2, x.unfold(0, 2, 1).sum(-1),
                                           x.unfold(1, 2, 3) + 1), shapes([(3, 5)]))]),
    _e("repeat", None, lambda x, *s: x.repeat(*s), repeat_ref,
       _samples([((2, 3), 2, 1), ((3,), 2, 2), ((2, 3), 1, 2, 2), ((), 3), ((2,), 0)]), ALL,
       _grad_of(_samples([((2, 3), 2, 1), ((3,), 2, 2)]))),
    _e("tile", None, lambda x, d: x.tile(d), lambda x, d: np.tile(x, d),
       _samples([((2, 3), (2,)), ((3,), (2, 2))]), FLOATS, _grad_of(_samples([((2, 3), (2,))]))),
    _e("repeat_interleave", None, lambda x, r, d=None: x.repeat_interleave(r, d),
       repeat_interleave_ref, _samples([((2, 3), 2), ((2, 3), 3, 1), ((4,), 2, 0)]), ALL,
       _grad_of(_samples([((2, 3), 2, 1)]))),
    _e("flip", None, lambda x, d: x.flip(d), flip_ref,
       _samples([((3, 4), (0,)), ((3, 4), (0, 1)), ((2, 3, 4), (-1,)), ((0, 2), (0,))]), ALL,
       _grad_of(_samples([((3, 4), (0, 1))]))),
    _e("roll", None, lambda x, s, d=None: x.roll(s, d), roll_ref,
       _samples([((3, 4), (1,), (0,)), ((3, 4), (-1, 5), (1, 0)), ((3, 4), 5), ((0,), 2)]),
       ALL, _grad_of(_samples([((3, 4), (-1, 5), (1, 0)), ((3, 4), 5)]))),
    _e("diagonal", "diagonal", lambda x, o=0, a=0, b=1: x.diagonal(o, a, b), diagonal_ref,
       _samples([((3, 4),), ((3, 4), 1), ((3, 4), -2), ((2, 3, 4), 0, 1, 2), ((3, 4), 5),
                 ((2, 3, 3), -1, -1, 0)]), ALL,
       _grad_of(_samples([((3, 4), 1), ((2, 3, 4), 0, 1, 2)])),
       compiled=[Case("diagonal", lambda x: (x.diagonal() + 1, x.diagonal(2) * 2,
                                             x.diagonal(-1).exp()),
                      shapes([(3, 5)], None, [(0, 3)]))]),
    _e("diag", None, eager.diag, diag_ref,
       _samples([((3,),), ((3,), 1), ((2,), -2), ((3, 4),), ((3, 4), 1)]), ALL,
       _grad_of(_samples([((3,), 1), ((3, 4),)]))),
    _e("einsum", None, eager.einsum, lambda eq, *xs: np.einsum(eq, *xs), _einsum_samples,
       FLOATS, _grad_of(_einsum_samples), tol={F32: (1e-5, 1e-5)}),
    _e("mm", None, lambda a, b: a.mm(b), lambda a, b: a @ b, _sample_pairs([((3, 4), (4, 2))]),
       FLOATS, _grad_of(_sample_pairs([((3, 4), (4, 2))]))),
    _e("bmm", None, eager.bmm, lambda a, b: a @ b, _sample_pairs([((2, 3, 4), (2, 4, 2))]),
       FLOATS, _grad_of(_sample_pairs([((2, 3, 4), (2, 4, 2))]))),
    _e("mv", None, lambda a, v: a.mv(v), lambda a, v: a @ v, _sample_pairs([((3, 4), (4,))]),
       FLOATS, _grad_of(_sample_pairs([((3, 4), (4,))]))),
    # sampling
    _e("multinomial", None, eager.multinomial, None, _multinomial_samples, FLOATS,
       check=_check_multinomial),
    _e("randperm", None, lambda n: eager.randperm(n), None,
       lambda rng, dt: [Sample((5,)), Sample((1,)), Sample((0,))], (F64,),
       check=_check_randperm),
]
