"""Registry rows of the scan, sort and scatter primitives (issue 16 item 4).

Each row is an ordinary `OpDef` registered into `eager.ops.OPS` (the same one-row-per-op
table): a numpy implementation, a shape/dtype rule, and a vjp written with registry ops.
The front ends (dims, keyword arguments, PyTorch's return tuples) are in `eager.scan`
and `eager.indexing`; those are the functions users call.

* ``cumsum``, ``cumprod``, ``logcumsumexp`` along ``axis``;
* ``cum_argmax`` (``largest=False``: argmin): the running index of cummax/cummin, whose
  values are then gathered, so their gradient is the gather's (the grad goes to the
  position of the running max);
* ``argsort`` (always stable; ``descending``), NaN sorts as the largest value as in PyTorch;
* ``scatter`` (overwrite) and ``scatter_reduce`` (``amax``, ``amin``, ``prod``) of ``src``
  into ``base`` at integer-array indices of every dim (sum and mean are composites of
  ``scatter_add``).
"""
from __future__ import annotations

import numpy as np

from . import dtypes
from .errors import _symbolic_dim, op_error
from .ops import TensorType, _check_axes, _check_indices, broadcast_shapes, register

I = "indexing"
S = "shape"
R = "reduction"


def size_error(op: str, problem: str, operands=(), hint: str = "", exc=RuntimeError):
    """`op_error` with PyTorch's exception type; where a size check failed on a symbolic
    dimension (a traced input_signature's None), the tracer's TracingError instead, since
    the sizes may agree at run time."""
    if exc is not TypeError and _symbolic_dim(operands) is not None:
        return op_error(op, problem, operands, hint)
    return op_error(op, problem, operands, hint, exc=exc)


# --------------------------------------------------------------------------------------
# shape rules

def _scan_infer(name, int_to_int64=True, floats_only=False):
    def infer(a, axis):
        _check_axes(name, a.ndim, (axis,))
        if floats_only and not dtypes.is_floating(a.dtype):
            raise op_error(name, f"needs a floating-point tensor, got {a.dtype}", (a,),
                           hint="cast with .float()", exc=TypeError)
        dtype = a.dtype if dtypes.is_floating(a.dtype) or not int_to_int64 else dtypes.int64
        return TensorType(tuple(a.shape), dtype)
    return infer


def _index_infer(name):
    def infer(a, axis, **_):
        _check_axes(name, a.ndim, (axis,))
        return TensorType(tuple(a.shape), dtypes.int64)
    return infer


def _scatter_infer(name):
    def infer(base, src, *idx, **_):
        _check_indices(name, idx)
        if len(idx) != base.ndim:
            raise op_error(name, f"needs one index tensor per dim of the {base.ndim}-d "
                           f"target, got {len(idx)}", (base,), exc=IndexError)
        if base.dtype != src.dtype:
            raise op_error(name, f"src dtype {src.dtype} differs from the target's "
                           f"{base.dtype}", (base, src), hint="cast src with .to(x.dtype)",
                           exc=TypeError)
        shape = broadcast_shapes(name, *(t.shape for t in idx)) if idx else ()
        if tuple(src.shape) != tuple(shape):
            raise op_error(name, f"src shape {tuple(src.shape)} != index shape {shape}",
                           (base, src))
        return TensorType(tuple(base.shape), base.dtype)
    return infer


# --------------------------------------------------------------------------------------
# numpy implementations

def _cumsum_impl(a, axis):
    return np.cumsum(a, axis=axis, dtype=a.dtype if dtypes.is_floating(a.dtype) else np.int64)


def _cumprod_impl(a, axis):
    return np.cumprod(a, axis=axis, dtype=a.dtype if dtypes.is_floating(a.dtype) else np.int64)


def _logcumsumexp_impl(a, axis):
    return np.logaddexp.accumulate(a, axis=axis)


def _cum_argmax_impl(a, axis, largest):
    """The running index of the max (min): ties take the later index and NaN wins, then
    stays (a later NaN takes over), as PyTorch's cummax/cummin do."""
    x = np.moveaxis(a, axis, -1)
    out = np.zeros(x.shape, np.int64)
    n = x.shape[-1]
    if n == 0 or x.size == 0:
        return np.moveaxis(out, -1, axis)
    best = x[..., 0].copy()
    idx = np.zeros(best.shape, np.int64)
    floating = dtypes.is_floating(x.dtype)
    for j in range(1, n):
        v = x[..., j]
        better = (v >= best) if largest else (v <= best)
        if floating:
            better = np.isnan(v) | (~np.isnan(best) & better)
        best = np.where(better, v, best)
        idx = np.where(better, j, idx)
        out[..., j] = idx
    return np.moveaxis(out, -1, axis)


def _argsort_impl(a, axis, descending):
    if a.ndim == 0:
        return np.zeros((), np.int64)
    if a.dtype == np.bool_:
        a = a.astype(np.int8)
    if not descending:  # numpy sorts NaN last, as PyTorch's ascending sort does
        return np.argsort(a, axis=axis, kind="stable").astype(np.int64, copy=False)
    # Stable descending: sort the reversed array ascending and reverse the result, so equal
    # values keep their order and NaN (last ascending) comes first, as in PyTorch.
    n = a.shape[axis]
    rev = np.flip(a, axis)
    order = np.flip(np.argsort(rev, axis=axis, kind="stable"), axis)
    return (n - 1 - order).astype(np.int64)


def _scatter_impl(base, src, *idx):
    out = base.copy()
    out[idx] = src  # repeated indices: the last write wins (PyTorch leaves it unspecified)
    return out


_UFUNCS = {"amax": np.maximum, "amin": np.minimum, "prod": np.multiply}


def _identity(reduce, dtype):
    if reduce == "prod":
        return 1
    if dtypes.is_floating(dtype):
        return -np.inf if reduce == "amax" else np.inf
    if dtype == np.bool_:
        return reduce == "amin"
    info = np.iinfo(dtype)
    return info.min if reduce == "amax" else info.max


def _scatter_reduce_impl(base, src, *idx, reduce, include_self):
    out = base.copy()
    if not include_self:
        out[idx] = _identity(reduce, base.dtype)
    _UFUNCS[reduce].at(out, idx, src)  # np.maximum/minimum propagate NaN, as torch does
    return out


# --------------------------------------------------------------------------------------
# vjp rules (registry ops through the front end, imported at the end)

def _move_last(x, axis):
    perm = [d for d in range(x.ndim) if d != axis] + [axis]
    return fn.permute(x, tuple(perm)), perm


def _move_back(x, perm):
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return fn.permute(x, tuple(inv))


def _flip(x, axis):
    index = tuple((0, None, 1) if d != axis else (x.shape[axis] - 1, None, -1)
                  for d in range(x.ndim))
    return fn.getitem_basic(x, index)


def _cumsum_vjp(g, out, a, axis):
    return _flip(_dispatch_apply(CUMSUM, _flip(g, axis), axis=axis), axis)


def _pairs(n):
    """(eye, upper) bool constants of (n, n): i == k, and j >= i."""
    eye = np.eye(n, dtype=bool)
    upper = np.triu(np.ones((n, n), dtype=bool))
    return fn.const(eye, np.bool_), fn.const(upper, np.bool_)


def _cumprod_vjp(g, out, a, axis):
    # d out_j / d x_i = prod_{k <= j, k != i} x_k for j >= i: the products leaving x_i out
    # are a cumprod of x with x_i replaced by 1 (an (n, n) table per row), exact when x has
    # zeros, where the usual cumsum(g * out) / x gives NaN.
    x, perm = _move_last(a, axis)
    gl, _ = _move_last(g, axis)
    n = x.shape[-1]
    eye, upper = _pairs(n)
    table = fn.where(eye, fn.const(1, x.dtype), fn.unsqueeze(x, -2))  # [..., i, k]
    left_out = _dispatch_apply(CUMPROD, table, axis=table.ndim - 1)  # [..., i, j]
    terms = fn.where(upper, fn.mul(left_out, fn.unsqueeze(gl, -2)), fn.const(0, x.dtype))
    return _move_back(fn.sum(terms, -1), perm)


def _logcumsumexp_vjp(g, out, a, axis):
    # d out_j / d x_i = exp(x_i - out_j) for j >= i (never above 1, so no overflow); where
    # out_j is -inf (all of x_0..x_j are -inf) the weight is 0, not exp(NaN).
    x, perm = _move_last(a, axis)
    o, _ = _move_last(out, axis)
    gl, _ = _move_last(g, axis)
    n = x.shape[-1]
    _, upper = _pairs(n)
    ou = fn.unsqueeze(o, -2)  # [..., 1, j]
    keep = _and(upper, fn.ne(ou, fn.const(-np.inf, o.dtype)))
    diff = fn.where(keep, fn.sub(fn.unsqueeze(x, -1), ou), fn.const(-np.inf, x.dtype))
    terms = fn.mul(fn.exp(diff), fn.unsqueeze(gl, -2))
    return _move_back(fn.sum(terms, -1), perm)


def _and(a, b):
    return fn.where(a, b, fn.const(False, np.bool_))


def _scatter_vjp(g, out, base, src, *idx):
    zeros = fn.expand(fn.const(0, g.dtype), tuple(src.shape))
    return (_dispatch_apply(SCATTER, g, zeros, *idx), fn.gather(g, idx)) + (None,) * len(idx)


def _scatter_reduce_vjp(g, out, base, src, *idx, reduce, include_self):
    zero = fn.const(0, g.dtype)
    one = fn.const(1, g.dtype)
    out_at = fn.gather(out, idx)
    g_at = fn.gather(g, idx)
    if reduce in ("amax", "amin"):
        # As PyTorch: the gradient is shared evenly between the values equal to the result.
        src_hit = fn.cast(fn.eq(src, out_at), g.dtype)
        count = fn.scatter_add(src_hit, idx, tuple(base.shape))
        if include_self:
            self_hit = fn.cast(fn.eq(base, out), g.dtype)
            count = fn.add(count, self_hit)
        else:
            touched = fn.gt(fn.scatter_add(fn.expand(one, tuple(src.shape)), idx,
                                           tuple(base.shape)), zero)
            self_hit = fn.where(touched, zero, one)
        safe = fn.where(fn.gt(count, zero), count, one)
        share = fn.div(g, safe)
        return (fn.mul(share, self_hit), fn.mul(fn.gather(share, idx), src_hit)) \
            + (None,) * len(idx)
    # prod: the product of the other values of the element's group, exact with zeros:
    # out / x where x != 0; for a zero, the product of the nonzero others if it is the
    # group's only zero, else 0.
    touched_src = fn.expand(one, tuple(src.shape))
    src_zero = fn.cast(fn.eq(src, zero), g.dtype)
    zeros_n = fn.scatter_add(src_zero, idx, tuple(base.shape))
    nz_src = fn.where(fn.eq(src, zero), one, src)
    if include_self:
        base_zero = fn.cast(fn.eq(base, zero), g.dtype)
        zeros_n = fn.add(zeros_n, base_zero)
        nz_base = fn.where(fn.eq(base, zero), one, base)
    else:
        touched = fn.gt(fn.scatter_add(touched_src, idx, tuple(base.shape)), zero)
        nz_base = fn.expand(one, tuple(base.shape))
    nz_prod = _dispatch_apply(SCATTER_REDUCE, nz_base, nz_src, *idx, reduce="prod",
                       include_self=True)
    nz_at = fn.gather(nz_prod, idx)
    zeros_at = fn.gather(zeros_n, idx)

    def others(x, prod_all, nz_all, zcount):
        is_zero = fn.eq(x, zero)
        safe_x = fn.where(is_zero, one, x)
        nonzero_case = fn.where(fn.eq(zcount, zero), fn.div(prod_all, safe_x), zero)
        zero_case = fn.where(fn.eq(zcount, one), nz_all, zero)
        return fn.where(is_zero, zero_case, nonzero_case)

    g_src = fn.mul(g_at, others(src, out_at, nz_at, zeros_at))
    if include_self:
        g_base = fn.mul(g, others(base, out, nz_prod, zeros_n))
    else:
        g_base = fn.where(touched, zero, g)
    return (g_base, g_src) + (None,) * len(idx)


# --------------------------------------------------------------------------------------
# the rows

_IDX = (2, 3, 4, 5, 6, 7, 8, 9)

CUMSUM = register("cumsum", R, 1, _cumsum_impl, _scan_infer("cumsum"),
                  vjp=(_cumsum_vjp,), params=("axis",),
                  doc="Running sum along `axis`; ints and bools sum to int64.")
CUMPROD = register("cumprod", R, 1, _cumprod_impl, _scan_infer("cumprod"),
                   vjp=(_cumprod_vjp,), saves=(0,), params=("axis",),
                   doc="Running product along `axis`; the gradient is exact at zeros.")
LOGCUMSUMEXP = register("logcumsumexp", R, 1, _logcumsumexp_impl,
                        _scan_infer("logcumsumexp", floats_only=True),
                        vjp=(_logcumsumexp_vjp,), saves=(0,), saves_out=True,
                        params=("axis",),
                        doc="log(cumsum(exp(a))) along `axis`, without overflow or "
                            "underflow (a running logaddexp).")
CUM_ARGMAX = register("cum_argmax", R, 1, _cum_argmax_impl, _index_infer("cum_argmax"),
                      params=("axis", "largest"),
                      doc="Index of the running max (largest) or min along `axis`; ties "
                          "take the later index, NaN wins (cummax/cummin's indices).")
ARGSORT = register("argsort", R, 1, _argsort_impl, _index_infer("argsort"),
                   params=("axis", "descending"),
                   doc="Stable sorting permutation along `axis`; NaN counts as the largest "
                       "value (last ascending, first descending).")
SCATTER = register("scatter", I, -1, _scatter_impl, _scatter_infer("scatter"),
                   vjp=_scatter_vjp, saves=_IDX,
                   doc="`base` with `src` written at integer indices, one index tensor per "
                       "dim (repeated indices: the last write wins).")
SCATTER_REDUCE = register("scatter_reduce", I, -1, _scatter_reduce_impl,
                          _scatter_infer("scatter_reduce"), vjp=_scatter_reduce_vjp,
                          saves=(0, 1) + _IDX, saves_out=True,
                          params=("reduce", "include_self"), opmath=True,
                          doc="`base` with `src` reduced in (amax, amin or prod) at integer "
                              "indices, one index tensor per dim.")

from . import functions as fn
from .dispatch import apply as _dispatch_apply
