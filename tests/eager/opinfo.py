"""The OpInfo table: every registry op (and the composites) with how to call it through the
public front end, sample inputs, and an independent numpy/Python reference.

`tests/eager/test_ops.py` checks forwards against the references, `tests/eager/test_grad.py`
checks gradients against central finite differences.  Both are generated from `OPINFOS`, and
both fail when a registry op has no entry, so a new op cannot skip testing.

An entry's `samples(rng, dtype)` returns `Sample`s.  A sample's numpy arrays become tensors
(`eager.tensor`, which keeps the array's dtype); `Raw(v)` passes `v` to the call unchanged
(index lists, numpy index arrays); anything else (ints, dims, dtypes) is passed as is.  The
reference receives the raw numpy arrays and returns the expected array *with the expected
dtype* (or a tuple of them), computed elementwise in Python floats/ints where practical so
it does not share code with the registry's numpy implementation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import eager
import eager.nn.functional as NF
from eager import functions as EF

F32, F64, I32, I64, BOOL = (np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64,
                                                   np.bool_))
FLOATS = (F32, F64)
NUMERIC = (F32, F64, I32, I64)
ALL = (F32, F64, I32, I64, BOOL)

NAN, INF = math.nan, math.inf
SPECIALS = [NAN, INF, -INF, 0.0, -0.0, 1.0, -1.5, 0.5, 3.0]

# Forward tolerances (rtol, atol) by output dtype.
TOLERANCES = {F32: (1e-5, 1e-5), F64: (1e-10, 1e-12)}


# --------------------------------------------------------------------------------------
# the table's types

class Raw:
    """An argument passed to the call unchanged (not converted to a tensor)."""

    def __init__(self, value):
        self.value = value

    def __repr__(self) -> str:
        return f"Raw({self.value!r})"


@dataclass
class Sample:
    args: tuple
    kwargs: dict = field(default_factory=dict)
    desc: str = ""
    special: bool = False  # holds NaN/inf (never used for gradient checks)

    def __repr__(self) -> str:
        shapes = [f"{a.dtype}{list(a.shape)}" if isinstance(a, np.ndarray) else repr(a)
                  for a in self.args]
        return f"Sample({', '.join(shapes)}, {self.kwargs}{', ' + self.desc if self.desc else ''})"


@dataclass
class OpInfo:
    name: str                   # unique test id
    op: str | None              # the registry op this entry exercises (None: a composite)
    call: Callable              # call(*tensors_and_args, **kwargs) through the public API
    ref: Callable | None        # ref(*numpy_args, **kwargs) -> expected array(s)
    samples: Callable           # samples(rng, dtype) -> list[Sample]
    dtypes: tuple = FLOATS
    grad_samples: Callable | None = None  # grad_samples(rng) -> float64 samples; None: no grad
    check: Callable | None = None  # check(out, sample) for ops without a reference (random)
    tol: dict = field(default_factory=dict)  # dtype -> (rtol, atol) overrides
    grad_eps: float = 1e-6
    grad_tol: tuple = (1e-6, 1e-8)  # (rtol, atol) of the directional-derivative check
    compiled: list | None = None  # `Case`s run compiled (None: derived, see compiled cases)
    domain: tuple = (-2.0, 2.0)  # the uniform samples of a derived compiled case

    def __repr__(self) -> str:
        return f"OpInfo({self.name})"


def to_call_arg(value):
    if isinstance(value, np.ndarray):
        return eager.tensor(value)
    if isinstance(value, Raw):
        return value.value
    return value


def to_ref_arg(value):
    return value.value if isinstance(value, Raw) else value


# --------------------------------------------------------------------------------------
# sample values

def values(rng, shape, dtype, kind="any"):
    """Random values of `dtype`; `kind` keeps them away from trouble for a given op.

    any: [-2, 2]; pos: [0.2, 2]; nonzero: |x| in [0.2, 2]; grid: distinct values spaced at
    least 0.1 apart (no ties for max/min/argmax); exponent: small non-negative ints for int
    pow, else [-2, 2].
    """
    shape = tuple(shape)
    n = math.prod(shape)
    if dtype == BOOL:
        return np.asarray(rng.random(shape) < 0.5)
    if dtype.kind in "iu":
        if kind == "pos":
            out = rng.integers(1, 5, shape)
        elif kind == "nonzero":
            out = rng.integers(1, 5, shape) * rng.choice([-1, 1], shape)
        elif kind == "exponent":
            out = rng.integers(0, 4, shape)
        elif kind == "grid":
            out = rng.permutation(np.arange(n) - n // 2).reshape(shape)
        else:
            out = rng.integers(-4, 5, shape)
        return np.asarray(out, dtype=dtype)
    if kind == "pos":
        out = rng.uniform(0.2, 2.0, shape)
    elif kind == "nonzero":
        out = rng.uniform(0.2, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
    elif kind == "grid":
        out = (rng.permutation(n) - n / 2) * 0.25 + rng.uniform(-0.05, 0.05, n)
        out = out.reshape(shape)
    else:
        out = rng.uniform(-2.0, 2.0, shape)
    return np.asarray(out, dtype=dtype)


UNARY_SHAPES = [(), (5,), (3, 4), (2, 3, 4), (0,), (2, 0, 3)]
BINARY_SHAPES = [((), ()), ((5,), (5,)), ((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 4), (3, 1)),
                 ((), (2, 3)), ((2, 3), ()), ((0,), (1,)), ((0, 3), (3,)), ((2, 0), (1, 0))]
GRAD_UNARY_SHAPES = [(), (5,), (3, 4), (0, 3)]
GRAD_BINARY_SHAPES = [((), ()), ((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 4), (3, 1)),
                      ((), (2, 3)), ((0, 3), (3,))]


def specials(dtype, shape=(len(SPECIALS),)):
    return np.asarray(SPECIALS, dtype=dtype).reshape(shape)


def unary_samples(kind="any", special=True):
    def samples(rng, dtype):
        out = [Sample((values(rng, s, dtype, kind),)) for s in UNARY_SHAPES]
        if special and dtype.kind == "f":
            out.append(Sample((specials(dtype),), special=True))
        return out
    return samples


def binary_samples(kind_a="any", kind_b="any", special=True):
    def samples(rng, dtype):
        out = [Sample((values(rng, sa, dtype, kind_a), values(rng, sb, dtype, kind_b)))
               for sa, sb in BINARY_SHAPES]
        if special and dtype.kind == "f":
            # every pair of special values
            n = len(SPECIALS)
            out.append(Sample((specials(dtype), specials(dtype, (n, 1))), special=True))
        return out
    return samples


def unary_grad(kind="any"):
    def samples(rng):
        return [Sample((values(rng, s, F64, kind),)) for s in GRAD_UNARY_SHAPES]
    return samples


def binary_grad(kind_a="any", kind_b="any"):
    def samples(rng):
        return [Sample((values(rng, sa, F64, kind_a), values(rng, sb, F64, kind_b)))
                for sa, sb in GRAD_BINARY_SHAPES]
    return samples


def disjoint_grad(rng):
    """Pairs that never tie: a on the grid k/4, b on the grid k/4 + 1/8."""
    out = []
    for sa, sb in GRAD_BINARY_SHAPES:
        a = rng.integers(-8, 9, sa) / 4.0
        b = rng.integers(-8, 9, sb) / 4.0 + 0.125
        out.append(Sample((np.asarray(a, F64), np.asarray(b, F64))))
    return out


# --------------------------------------------------------------------------------------
# references (Python scalars, elementwise; not the registry's numpy calls)

def float_result(*dts):
    """Result dtype of an op that computes in floating point (ints and bools -> float32)."""
    dt = dts[0]
    return dt if dt.kind == "f" else F32


def same_result(*dts):
    return dts[0]


def bool_result(*dts):
    return BOOL


def pointwise(fn, result=same_result):
    """Reference applying the Python scalar function `fn` to every broadcast element."""
    def ref(*arrays):
        dtype = result(*(a.dtype for a in arrays))
        bs = np.broadcast_arrays(*arrays)
        flat = [b.ravel().tolist() for b in bs]
        out = [fn(*v) for v in zip(*flat)]
        return np.array(out, dtype=object).astype(dtype).reshape(bs[0].shape)
    return ref


def _isnan(v):
    return isinstance(v, float) and v != v


def _div(a, b):
    a, b = float(a), float(b)
    if b == 0:
        if a == 0 or _isnan(a):
            return NAN
        return math.copysign(INF, a) * math.copysign(1.0, b)
    return a / b


def _pow(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a ** b
    a, b = float(a), float(b)
    try:
        return math.pow(a, b)
    except ValueError:  # domain errors: 0 ** negative is inf, negative ** fraction is nan
        if a == 0:
            odd = b == int(b) and int(b) % 2 == 1
            return math.copysign(INF, a) if odd else INF
        return NAN
    except OverflowError:
        return INF


def _maximum(a, b):
    if _isnan(a) or _isnan(b):
        return NAN
    return a if a > b else b


def _minimum(a, b):
    if _isnan(a) or _isnan(b):
        return NAN
    return a if a < b else b


def _exp(v):
    try:
        return math.exp(v)
    except OverflowError:
        return INF


def _log(v):
    v = float(v)
    if _isnan(v) or v < 0:
        return NAN
    if v == 0:
        return -INF
    return math.log(v)


def _log1p(v):
    v = float(v)
    if _isnan(v) or v < -1:
        return NAN
    if v == -1:
        return -INF
    return math.log1p(v)


def _expm1(v):
    try:
        return math.expm1(v)
    except OverflowError:
        return INF


# relative only: an atol would pass log(1 + a), which is 0 or off in every digit here
TINY_TOL = {F32: (1e-6, 0.0), F64: (1e-14, 0.0)}


def _tiny_samples(rng, dtype):
    """Arguments where log(1 + a) and exp(a) - 1 lose every digit, and the domain's ends."""
    return [Sample((np.array([1e-10, -1e-10, 3e-8, -2e-7, 1e-30, -1.0, 0.0, -0.0], dtype),),
                   special=True)]


def _sqrt(v):
    v = float(v)
    return NAN if v < 0 else math.sqrt(v)


def _rsqrt(v):
    r = _sqrt(v)
    return math.copysign(INF, r) if r == 0 else 1.0 / r


def _var_row(correction):
    def row_fn(r):
        n = len(r)
        if n == 0:
            return NAN
        m = _fsum(r) / n
        ss = _fsum([(v - m) * (v - m) for v in r])
        d = max(n - correction, 0)
        if d == 0:
            return NAN if (ss == 0 or ss != ss) else INF
        return ss / d
    return row_fn


def _sigmoid(v):
    # an identity independent of the registry's two-branch formula
    return 0.5 * (1.0 + math.tanh(float(v) / 2.0))


def _relu(v):
    if _isnan(v):
        return NAN
    return v if v > 0 else type(v)(0)


def _sign(v):
    # PyTorch: 0 for NaN (numpy's sign gives NaN)
    if _isnan(v):
        return 0.0
    return (v > 0) - (v < 0)


def _gelu(v):
    return 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0)))


def _gelu_tanh(v):
    return 0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3)))


def _axes(ndim, dim):
    if dim is None:
        return tuple(range(ndim))
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    return tuple(sorted(d % max(ndim, 1) for d in dims)) if ndim else ()


def reduce_rows(a, dim, keepdim, row_fn, dtype):
    """Apply `row_fn` (a Python list -> scalar) over the reduced axes of `a`."""
    axes = _axes(a.ndim, dim)
    kept = [i for i in range(a.ndim) if i not in axes]
    kept_shape = tuple(a.shape[i] for i in kept)
    n = math.prod(a.shape[i] for i in axes)
    rows = np.transpose(a, kept + list(axes)).reshape(kept_shape + (n,))
    flat = rows.reshape(math.prod(kept_shape), n).tolist()
    out = np.array([row_fn(r) for r in flat], dtype=object).astype(dtype).reshape(kept_shape)
    if keepdim:
        out = out.reshape(tuple(1 if i in axes else s for i, s in enumerate(a.shape)))
    return out


def _fsum(row):
    if all(math.isfinite(v) for v in row):
        return math.fsum(row)
    return sum(row, 0.0)


def _row_sum(row):
    if row and isinstance(row[0], float):
        return _fsum(row)
    return sum(int(v) for v in row)


def _row_max(row):
    return NAN if any(_isnan(v) for v in row) else max(row)


def _row_min(row):
    return NAN if any(_isnan(v) for v in row) else min(row)


def _row_argmax(row):
    best = max(row)
    return row.index(best)


def _row_argmin(row):
    return row.index(min(row))


def sum_ref(a, dim=None, keepdim=False):
    dtype = a.dtype if a.dtype.kind == "f" else I64
    return reduce_rows(a, dim, keepdim, _row_sum, dtype)


def mean_ref(a, dim=None, keepdim=False):
    return reduce_rows(a, dim, keepdim, lambda r: _fsum(r) / len(r) if r else NAN, a.dtype)


def var_ref(a, dim=None, keepdim=False, unbiased=True, correction=None):
    c = (1 if unbiased else 0) if correction is None else correction
    return reduce_rows(a, dim, keepdim, _var_row(c), a.dtype)


def _sqrt_array(a):
    return np.array([_sqrt(v) for v in a.ravel().tolist()], dtype=a.dtype).reshape(a.shape)


def _var_correction_samples(rng, dtype):
    return [Sample((values(rng, (3, 4), dtype), 1), {"correction": 0}),
            Sample((values(rng, (3, 4), dtype), (0, 1)), {"unbiased": False, "keepdim": True}),
            Sample((values(rng, (2, 5), dtype), None), {"correction": 2}),
            Sample((values(rng, (4, 3), dtype), 0), {"correction": 3})]


def _var_grad(rng):
    """(a reduction over one element with the correction is NaN: no gradient to check)"""
    return [s for s in reduce_grad()(rng) if _reduced_size(s.args[0].shape, s.args[1]) >= 2]


def amax_ref(a, dim=None, keepdim=False):
    return reduce_rows(a, dim, keepdim, _row_max, a.dtype)


def amin_ref(a, dim=None, keepdim=False):
    return reduce_rows(a, dim, keepdim, _row_min, a.dtype)


def argmax_ref(a, dim=None, keepdim=False):
    if dim is None:
        out = np.array(_row_argmax(a.ravel().tolist()), dtype=I64)
        return out.reshape((1,) * a.ndim) if keepdim else out
    return reduce_rows(a, dim, keepdim, _row_argmax, I64)


def argmin_ref(a, dim=None, keepdim=False):
    if dim is None:
        out = np.array(_row_argmin(a.ravel().tolist()), dtype=I64)
        return out.reshape((1,) * a.ndim) if keepdim else out
    return reduce_rows(a, dim, keepdim, _row_argmin, I64)


def matmul_ref(a, b):
    a1, b1 = a.ndim == 1, b.ndim == 1
    am = a[None, :] if a1 else a
    bm = b[:, None] if b1 else b
    batch = np.broadcast_shapes(am.shape[:-2], bm.shape[:-2])
    am = np.broadcast_to(am, batch + am.shape[-2:])
    bm = np.broadcast_to(bm, batch + bm.shape[-2:])
    work = F64 if a.dtype.kind == "f" else I64
    out = np.einsum("...ij,...jk->...ik", am.astype(work), bm.astype(work))
    if a1:
        out = out[..., 0, :]
    if b1:
        out = out[..., 0]
    return np.asarray(out).astype(a.dtype)


def permute_ref(a, perm):
    letters = "abcdefgh"[:a.ndim]
    return np.einsum(f"{letters}->{''.join(letters[p] for p in perm)}", a)


def expand_ref(a, shape):
    lead = len(shape) - a.ndim
    shape = tuple(a.shape[i - lead] if s == -1 else s for i, s in enumerate(shape))
    return a * np.ones(shape, a.dtype)


def cat_ref(arrays, dim=0):
    first = arrays[0]
    axis = dim % first.ndim
    shape = list(first.shape)
    shape[axis] = sum(a.shape[axis] for a in arrays)
    out = np.empty(shape, first.dtype)
    start = 0
    for a in arrays:
        index = (slice(None),) * axis + (slice(start, start + a.shape[axis]),)
        out[index] = a
        start += a.shape[axis]
    return out


def scatter_add_ref(g, *idx, shape):
    out = np.zeros(shape, g.dtype)
    idx = np.broadcast_arrays(*idx)
    lead = idx[0].shape
    for pos in np.ndindex(*lead):
        target = tuple(int(i[pos]) for i in idx)
        out[target] += g[pos]
    return out


def softmax_ref(x, dim):
    x = x.astype(F64)
    e = np.exp(x - x.max(axis=dim, keepdims=True, initial=-INF))  # (initial: an empty dim)
    return e / e.sum(axis=dim, keepdims=True)


def log_softmax_ref(x, dim):
    x64 = x.astype(F64)
    m = x64.max(axis=dim, keepdims=True, initial=-INF)
    return x64 - m - np.log(np.exp(x64 - m).sum(axis=dim, keepdims=True))


def logsumexp_ref(x, dim, keepdim=False):
    x64 = x.astype(F64)
    m = np.max(x64, axis=dim, keepdims=True)
    m = np.where(np.isinf(m), 0.0, m)
    out = np.log(np.sum(np.exp(x64 - m), axis=dim, keepdims=True)) + m
    return (out if keepdim else np.squeeze(out, dim)).astype(x.dtype)


def layer_norm_ref(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    x64 = x.astype(F64)
    mu = x64.mean(axis=axes, keepdims=True)
    var = ((x64 - mu) ** 2).mean(axis=axes, keepdims=True)
    out = (x64 - mu) / np.sqrt(var + eps)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out.astype(x.dtype)


def _reduce_ref(loss, reduction, dtype):
    if reduction == "mean":
        loss = loss.mean()
    elif reduction == "sum":
        loss = loss.sum()
    return np.asarray(loss).astype(dtype)


def cross_entropy_ref(x, target, reduction="mean", label_smoothing=0.0):
    logp = log_softmax_ref(x, -1)
    if target.dtype.kind == "f":
        return _reduce_ref(-(logp * target).sum(axis=1), reduction, x.dtype)
    picked = np.array([logp[i, t] for i, t in enumerate(target.tolist())], dtype=F64)
    loss = -picked * (1 - label_smoothing) - logp.mean(axis=-1) * label_smoothing
    return _reduce_ref(loss, reduction, x.dtype)


def mse_ref(a, b, reduction="mean"):
    d = a.astype(F64) - b.astype(F64)
    return _reduce_ref(d * d, reduction, a.dtype)


def linear_ref(x, w, b=None):
    out = matmul_ref(x.astype(F64), w.astype(F64).T)
    if b is not None:
        out = out + b
    return out.astype(x.dtype)


# --------------------------------------------------------------------------------------
# samples for the non-elementwise ops

REDUCE_CASES = [((), None, False), ((), 0, False), ((5,), None, False), ((5,), 0, True),
                ((3, 4), 1, False), ((3, 4), -2, True), ((3, 4), None, True),
                ((2, 3, 4), (0, 2), False), ((2, 3, 4), (-1, 1), True), ((2, 3, 4), 1, False),
                ((0,), None, False), ((2, 0, 3), 1, False), ((2, 0, 3), 0, True)]


def _reduced_size(shape, dim):
    return math.prod(shape[a] for a in _axes(len(shape), dim))


def reduce_samples(kind="any", nonempty=False, special=True, cases=REDUCE_CASES):
    def samples(rng, dtype):
        out = []
        for shape, dim, keepdim in cases:
            if nonempty and _reduced_size(shape, dim) == 0:
                continue
            out.append(Sample((values(rng, shape, dtype, kind), dim, keepdim)))
        if special and dtype.kind == "f":
            x = specials(dtype, (3, 3))
            out.append(Sample((x, 1, False), special=True))
            out.append(Sample((x, 0, True), special=True))
        return out
    return samples


def reduce_grad(kind="any", nonempty=False):
    def samples(rng):
        return [s for s in reduce_samples(kind, nonempty, special=False)(rng, F64)]
    return samples


MATMUL_SHAPES = [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)),
                 ((5, 2, 3), (3, 4)), ((2, 3), (5, 3, 4)), ((5, 1, 2, 3), (4, 3, 2)),
                 ((3,), (5, 3, 2)), ((5, 2, 3), (3,)), ((0, 3), (3, 4)), ((2, 0), (0, 3)),
                 ((2, 3), (3, 0))]


def matmul_samples(rng, dtype):
    return [Sample((values(rng, sa, dtype), values(rng, sb, dtype))) for sa, sb in MATMUL_SHAPES]


def matmul_grad(rng):
    return matmul_samples(rng, F64)


RESHAPE_CASES = [((2, 3, 4), (6, 4)), ((2, 3, 4), (-1,)), ((2, 3, 4), (4, -1, 2)), ((), (1, 1)),
                 ((5,), (5, 1)), ((1,), ()), ((0, 3), (3, 0)), ((0, 3), (-1, 3)), ((6,), (2, 3))]


def reshape_samples(rng, dtype):
    return [Sample((values(rng, s, dtype), shape)) for s, shape in RESHAPE_CASES]


PERMUTE_CASES = [((2, 3, 4), (2, 0, 1)), ((2, 3, 4), (-1, 0, 1)), ((3, 4), (1, 0)),
                 ((2, 0, 3), (1, 2, 0)), ((1, 2, 3, 4), (3, 1, 0, 2))]


def permute_samples(rng, dtype):
    return [Sample((values(rng, s, dtype), perm)) for s, perm in PERMUTE_CASES]


EXPAND_CASES = [((3, 1), (3, 4)), ((1,), (5,)), ((), (2, 3)), ((4,), (2, 3, 4)),
                ((2, 1, 3), (2, 4, 3)), ((3, 1), (-1, 4)), ((1, 1), (2, 0)),
                ((2, 1), (5, 2, 3))]


def expand_samples(rng, dtype):
    return [Sample((values(rng, s, dtype), shape)) for s, shape in EXPAND_CASES]


CAT_CASES = [([(2, 3), (4, 3)], 0), ([(2, 3), (2, 1), (2, 2)], 1), ([(2, 3), (2, 3)], -1),
             ([(2, 3, 4), (2, 1, 4)], 1), ([(0, 3), (2, 3)], 0), ([(3,), (0,), (2,)], 0),
             ([(2, 2)], 0)]


def cat_samples(rng, dtype):
    return [Sample((Raw([values(rng, s, dtype) for s in shapes]), dim), desc=str(shapes))
            for shapes, dim in CAT_CASES]


def _cat_call(arrays, dim):
    return eager.cat([eager.tensor(a) for a in arrays], dim=dim)


def cat_parts_samples(rng, dtype):
    return [Sample(tuple(values(rng, s, dtype) for s in shapes), {"dim": dim})
            for shapes, dim in CAT_CASES]


def _stack_samples(rng, dtype):
    cases = [([(3,), (3,)], 0), ([(2, 3)] * 3, 1), ([(2, 3)] * 2, -1), ([()] * 3, 0),
             ([(0, 2)] * 2, 1), ([(2,)], 0)]
    return [Sample(tuple(values(rng, s, dtype) for s in shapes), {"dim": dim})
            for shapes, dim in cases]


def _stack_ref(*arrays, dim):
    expanded = [a.reshape(a.shape[:dim % (a.ndim + 1)] + (1,) + a.shape[dim % (a.ndim + 1):])
                for a in arrays]
    return cat_ref(expanded, dim % (arrays[0].ndim + 1))


BASIC_KEYS = [1, -1, slice(1, 3), slice(None, None, -1), slice(None, None, -2),
              slice(3, 0, -1), (Ellipsis, 1), (None, 0), (slice(None), None, 1),
              (slice(1, -1), slice(None, None, 2)), (Ellipsis,), slice(3, 1), (0, 1, 2),
              (Ellipsis, None), (-1, slice(None, None, -3)),
              (slice(-2, None), Ellipsis, slice(None, 1))]


def getitem_samples(rng, dtype):
    return [Sample((values(rng, (4, 5, 3), dtype), Raw(key)), desc=repr(key))
            for key in BASIC_KEYS]


def getitem_grad(rng):
    return getitem_samples(rng, F64)


# scatter_slice takes the registry's normalized index: ints, None, (start, stop, step) with
# stop None meaning "to the end" (negative steps)
SCATTER_SLICE_CASES = [((4, 5), ((1, 3, 1),)), ((4, 5), (2, (4, None, -2))),
                       ((4, 5), (None, (0, 4, 2), 1)), ((3,), ((2, None, -1),)),
                       ((2, 3), ((1, 1, 1),))]


def _normalized_to_numpy(index):
    return tuple(slice(*i) if isinstance(i, tuple) else i for i in index)


def scatter_slice_samples(rng, dtype):
    out = []
    for shape, index in SCATTER_SLICE_CASES:
        gshape = np.zeros(shape)[_normalized_to_numpy(index)].shape
        out.append(Sample((values(rng, gshape, dtype), shape, index), desc=repr(index)))
    return out


def scatter_slice_ref(g, shape, index):
    out = np.zeros(shape, g.dtype)
    view = out[_normalized_to_numpy(index)]
    # element by element, to not reuse the registry's slice assignment
    for pos in np.ndindex(*view.shape):
        view[pos] = g[pos]
    return out


def embedding_samples(rng, dtype):
    w = values(rng, (5, 3), dtype)
    return [Sample((w, np.array([0, 4, 2, 2])), desc="rows"),
            Sample((w, np.array([[1, 0], [4, 4]])), desc="2-d rows"),
            Sample((w, np.zeros(0, np.int64)), desc="no rows")]


def slice_update_samples(rng, dtype):
    out = []
    for shape, index in SCATTER_SLICE_CASES:
        vshape = np.zeros(shape)[_normalized_to_numpy(index)].shape
        out.append(Sample((values(rng, shape, dtype), values(rng, vshape, dtype), index),
                          desc=repr(index)))
    return out


def slice_update_ref(base, value, index):
    out = base.copy()
    # the region's flat positions in `out`, element by element (not slice assignment)
    positions = np.arange(out.size).reshape(out.shape)[_normalized_to_numpy(index)]
    flat = out.reshape(-1)
    for pos in np.ndindex(*positions.shape):
        flat[positions[pos]] = value[pos]
    return out


def _setitem_call(base, value, index):
    out = base * 1 if base.requires_grad else base.clone()
    out[_normalized_to_numpy(index)] = value
    return out


def gather_samples(rng, dtype):
    x = values(rng, (5, 4, 3), dtype)
    idx = np.array([0, 4, 2, 2, 0])
    return [
        Sample((x, idx), desc="x[tensor]"),
        Sample((x, Raw([0, 0, 1])), desc="x[list] repeated"),
        Sample((x, Raw(np.array([[1, 3], [-1, 0]]))), desc="x[2-d numpy array], negative"),
        Sample((x, Raw((slice(None), np.array([3, 1, 1])))), desc="x[:, idx]"),
        Sample((x, Raw((Ellipsis, [2, 0]))), desc="x[..., idx]"),
        Sample((x, Raw((np.array([0, 4, 4]), np.array([1, 3, 1])))), desc="x[rows, cols]"),
        Sample((x, Raw((np.array([[0], [4]]), np.array([1, 3, 2])))), desc="x[bcast rows, cols]"),
        Sample((x, Raw((1, [0, 3]))), desc="x[int, list]"),
        Sample((x, Raw((slice(1, 4), np.array([0, 2]), slice(None, None, -1)))),
               desc="x[1:4, idx, ::-1]"),
        Sample((x, Raw(np.array([], dtype=np.int64))), desc="empty index"),
    ]


def gather_grad(rng):
    return gather_samples(rng, F64)


def _index_call(x, key):
    return x[key]


def scatter_add_samples(rng, dtype):
    return [
        Sample((values(rng, (5, 3), dtype), Raw((np.array([0, 2, 0, 1, 0]),)), (4, 3)),
               desc="repeated rows"),
        Sample((values(rng, (4,), dtype), Raw((np.array([1, 1, 2, 1]), np.array([0, 0, 2, 0]))),
                (3, 3)), desc="two index arrays"),
        Sample((values(rng, (2, 3), dtype), Raw((np.array([[0], [1]]), np.array([2, 2, 0]))),
                (2, 3)), desc="broadcast indices"),
        Sample((values(rng, (0, 3), dtype), Raw((np.array([], np.int64),)), (2, 3)),
               desc="empty"),
    ]


def _scatter_add_call(g, idx, shape):
    return EF.scatter_add(g, tuple(eager.tensor(i) for i in idx), shape)


def _scatter_add_ref(g, idx, shape):
    return scatter_add_ref(g, *idx, shape=shape)


def where_samples(rng, dtype):
    cases = [((), (), ()), ((5,), (5,), (5,)), ((3, 4), (4,), ()), ((3, 1), (1, 4), (3, 4)),
             ((0, 2), (2,), (1,)), ((2, 3), (), ())]
    out = [Sample((values(rng, sc, BOOL), values(rng, sa, dtype), values(rng, sb, dtype)))
           for sc, sa, sb in cases]
    if dtype.kind == "f":
        n = len(SPECIALS)
        out.append(Sample((values(rng, (n,), BOOL), specials(dtype), specials(dtype)[::-1].copy()),
                          special=True))
    return out


def where_grad(rng):
    return [s for s in where_samples(rng, F64) if not s.special]


def cast_samples(rng, dtype):
    out = [Sample((values(rng, s, dtype), target), desc=str(target))
           for s in [(), (3, 4), (0,)] for target in ALL]
    if dtype.kind == "f":
        out += [Sample((specials(dtype), target), special=True, desc=str(target))
                for target in (F32, F64, BOOL)]
    return out


def _cast_value(v, dtype):
    if dtype == BOOL:
        return bool(v)
    if dtype.kind in "iu":
        return int(v)  # truncates toward zero
    return float(v)


def cast_ref(a, dtype):
    return np.array([_cast_value(v, dtype) for v in a.ravel().tolist()],
                    dtype=object).astype(dtype).reshape(a.shape)


def cast_grad(rng):
    # f64 -> f32 rounds; with a large step the finite difference of this linear map is exact
    return [Sample((values(rng, s, F64), F32)) for s in [(), (3, 4)]]


# --------------------------------------------------------------------------------------
# random ops: no reference, properties instead

def _check_uniform(out, sample):
    shape, dtype = sample.args
    assert out.shape == shape and out.dtype == (dtype or F32)
    data = out.numpy()
    assert ((data >= 0) & (data < 1)).all()
    if data.size > 1000:
        assert abs(data.mean() - 0.5) < 0.02


def _check_normal(out, sample):
    shape, dtype = sample.args
    assert out.shape == shape and out.dtype == (dtype or F32)
    data = out.numpy()
    assert np.isfinite(data).all()
    if data.size > 1000:
        assert abs(data.mean()) < 0.05 and abs(data.std() - 1) < 0.05


def _check_randint(out, sample):
    low, high, size, dtype = sample.args
    assert out.shape == tuple(size) and out.dtype == (dtype or I64)
    data = out.numpy()
    assert ((data >= low) & (data < high)).all()
    if data.size > 1000:
        assert set(np.unique(data)) == set(range(low, high))


def random_samples(rng, dtype):
    return [Sample(((), dtype)), Sample(((0, 3), dtype)), Sample(((3, 4), dtype)),
            Sample(((100, 50), dtype))]


def randint_samples(rng, dtype):
    return [Sample((0, 10, (3, 4), dtype)), Sample((-3, 2, (100, 50), dtype)),
            Sample((0, 5, (), dtype)), Sample((5, 6, (0,), dtype))]


# --------------------------------------------------------------------------------------
# composites' samples

def _softmax_samples(rng, dtype):
    out = [Sample((values(rng, s, dtype), d)) for s, d in
           [((5,), 0), ((3, 4), -1), ((3, 4), 0), ((2, 3, 4), 1), ((0, 3), 1), ((2, 0), 0),
            ((2, 0), 1)]]  # (the last: softmax over an empty dim is empty, as in PyTorch)
    out.append(Sample((values(rng, (2, 3), dtype) * 40 + 500, -1), desc="large logits"))
    if dtype.kind == "f":
        masked = np.array([[0.0, -INF, 1.0], [2.0, 3.0, -INF]], dtype)
        out.append(Sample((masked, -1), special=True, desc="-inf masked"))
    return out


def _softmax_grad(rng):
    return [s for s in _softmax_samples(rng, F64) if not s.special and "large" not in s.desc]


def _logsumexp_samples(rng, dtype):
    out = [Sample((values(rng, s, dtype), d, k)) for s, d, k in
           [((5,), 0, False), ((3, 4), -1, True), ((3, 4), 0, False), ((2, 3, 4), 1, False)]]
    out.append(Sample((values(rng, (2, 3), dtype) * 40 + 500, 1, False), desc="large"))
    if dtype.kind == "f":
        x = np.array([[0.0, -INF, 1.0], [-INF, -INF, -INF], [INF, 0.0, 1.0]], dtype)
        out.append(Sample((x, 1, False), special=True))
    return out


def _layer_norm_samples(rng, dtype):
    return [
        Sample((values(rng, (4, 6), dtype), (6,))),
        Sample((values(rng, (2, 3, 4), dtype), (3, 4))),
        Sample((values(rng, (3, 5), dtype), (5,), values(rng, (5,), dtype),
                values(rng, (5,), dtype))),
        Sample((values(rng, (2, 2, 5), dtype), 5, values(rng, (5,), dtype), None)),
    ]


def _layer_norm_call(x, shape, weight=None, bias=None):
    return NF.layer_norm(x, shape, weight, bias)


def _layer_norm_ref(x, shape, weight=None, bias=None):
    return layer_norm_ref(x, (shape,) if isinstance(shape, int) else shape, weight, bias)


def _cross_entropy_samples(rng, dtype):
    out = []
    for reduction in ("mean", "sum", "none"):
        out.append(Sample((values(rng, (5, 4), dtype), rng.integers(0, 4, (5,))),
                          {"reduction": reduction}))
    out.append(Sample((values(rng, (6, 3), dtype), rng.integers(0, 3, (6,)).astype(np.int32)),
                      {"label_smoothing": 0.1}, desc="int32 labels, smoothing"))
    probs = softmax_ref(values(rng, (4, 3), F64), 1).astype(dtype)
    out.append(Sample((values(rng, (4, 3), dtype), probs), desc="probability targets"))
    out.append(Sample((values(rng, (2, 3), dtype) * 30 + 200, np.array([2, 0])), desc="large"))
    return out


def _mse_samples(rng, dtype):
    return [Sample((values(rng, s, dtype), values(rng, s, dtype)), {"reduction": r})
            for s, r in [((5,), "mean"), ((3, 4), "sum"), ((3, 4), "none"), ((), "mean")]]


def _linear_samples(rng, dtype):
    return [
        Sample((values(rng, (5, 3), dtype), values(rng, (4, 3), dtype), values(rng, (4,), dtype))),
        Sample((values(rng, (2, 5, 3), dtype), values(rng, (4, 3), dtype))),
        Sample((values(rng, (3,), dtype), values(rng, (2, 3), dtype), values(rng, (2,), dtype))),
        Sample((values(rng, (0, 3), dtype), values(rng, (2, 3), dtype), values(rng, (2,), dtype))),
    ]


def _clamp_samples(rng, dtype):
    out = [
        Sample((values(rng, (3, 4), dtype),), {"min": -1, "max": 1}),
        Sample((values(rng, (5,), dtype),), {"min": 0.5}),
        Sample((values(rng, (5,), dtype),), {"max": -0.25}),
        Sample((values(rng, (), dtype),), {"min": 0, "max": 1}),
        Sample((values(rng, (3, 4), dtype),), {"min": values(rng, (4,), dtype) - 1,
                                               "max": values(rng, (3, 1), dtype) + 1}),
    ]
    if dtype.kind == "f":
        out.append(Sample((specials(dtype),), {"min": -1.0, "max": 1.0}, special=True))
    return out


def _clamp_call(x, min=None, max=None):  # noqa: A002
    return eager.clamp(x, to_call_arg(min), to_call_arg(max))


def _clamp_ref(x, min=None, max=None):  # noqa: A002
    # PyTorch: min(max(x, lo), hi), so hi wins when lo > hi; NaN stays NaN
    def one(v, lo, hi):
        if _isnan(v):
            return NAN
        r = v if lo is None or v >= lo else lo
        return r if hi is None or r <= hi else hi
    # a Python float bound promotes an integer tensor to float32, as in PyTorch
    dtype = F32 if x.dtype.kind != "f" and isinstance(min if min is not None else max, float) \
        else x.dtype
    lo = np.asarray(min, dtype) if min is not None else np.full((), None, object)
    hi = np.asarray(max, dtype) if max is not None else np.full((), None, object)
    return pointwise(one, lambda *dts: dtype)(x.astype(dtype), lo, hi)


def _clamp_grad(rng):
    # values kept at least 0.05 away from the bounds (the kinks)
    x = values(rng, (3, 4), F64, "grid")
    lo, hi = values(rng, (4,), F64, "grid") * 0.1 - 1.02, values(rng, (3, 1), F64) * 0 + 1.01
    return [Sample((x,), {"min": -0.51, "max": 0.49}), Sample((x,), {"min": lo, "max": hi}),
            Sample((values(rng, (5,), F64),), {"min": 0.01})]


def _max_dim_samples(rng, dtype):
    out = [Sample((values(rng, s, dtype, "grid"), d, k)) for s, d, k in
           [((5,), 0, False), ((3, 4), 1, False), ((3, 4), -2, True), ((2, 3, 4), 1, True)]]
    if dtype.kind in "iu":
        out.append(Sample((np.array([[1, 3, 3], [2, 2, 0]], dtype), 1, False), desc="ties"))
    return out


def _max_dim_ref(x, dim, keepdim):
    return amax_ref(x, dim, keepdim), argmax_ref(x, dim, keepdim)


def _min_dim_ref(x, dim, keepdim):
    return amin_ref(x, dim, keepdim), argmin_ref(x, dim, keepdim)


def _shape_samples(cases):
    def samples(rng, dtype):
        return [Sample((values(rng, s, dtype),) + tuple(args)) for s, *args in cases]
    return samples


def _grad_of(samples_fn, drop_special=True):
    def samples(rng):
        return [s for s in samples_fn(rng, F64) if not (drop_special and s.special)]
    return samples


def _dropout_samples(rng, dtype):
    return [Sample((values(rng, (3, 4), dtype),), {"p": 0.5}),
            Sample((values(rng, (0, 2), dtype),), {"p": 0.9})]


def _dropout_module_eval(x, p):
    layer = eager.nn.Dropout(p)
    layer.eval()
    return layer(x)


# --------------------------------------------------------------------------------------
# compiled cases: how tests/codegen/test_numba_backend.py runs an entry's op compiled
#
# An entry's `compiled` lists them; None (the default) derives one for an elementwise op's
# main entry (its name is the op's): the call on uniform samples in `domain` of shapes
# UNARY or BINARY.  The compiled run compares the "numba" and "interpret" backends with
# eager in several memory layouts and with NaN/inf planted (see that file).

@dataclass
class Case:
    name: str
    fn: Callable                  # fn(*tensors) -> tensor or tuple/namedtuple of tensors
    inputs: Callable              # inputs(rng, dtype, kind) -> list of arrays, or None
    tol: str = "default"
    specials: bool = True         # also run with NaN/inf/0 planted in the float inputs
    dtypes: tuple = FLOATS
    random: bool = False          # reseed before each run (random ops)

    def __repr__(self) -> str:
        return self.name


def shapes(main, scalar=None, empty=None, lo=-2.0, hi=2.0, ints=None):
    """inputs(rng, dtype, kind) drawing uniform floats of the given shapes per kind.

    `ints` maps an argument position to (low, high): that argument is an int64 array.
    """
    table = {"main": main, "scalar": scalar, "empty": empty}
    ints = ints or {}

    def inputs(rng, dtype, kind):
        kind_shapes = table[kind]
        if kind_shapes is None:
            return None
        out = []
        for i, s in enumerate(kind_shapes):
            if i in ints:
                low, high = ints[i]
                out.append(rng.integers(low, high, size=s).astype(np.int64))
            else:
                out.append(rng.uniform(lo, hi, size=s).astype(dtype))
        return out
    return inputs


UNARY = shapes([(3, 5)], [()], [(0, 3)])
BINARY = shapes([(2, 3, 4), (3, 1)], [(), ()], [(0, 4), (4,)])


def _casts(a):
    other = eager.float64 if a.dtype == eager.float32 else eager.float32
    return a.to(other), (a > 0).to(a.dtype), (a > 0).to(eager.int64).to(a.dtype), a.to(eager.bool_)


def _int_casts(a):
    return a.to(eager.int32), a.to(eager.int64), (a * 3).to(eager.int32).to(a.dtype)


def _sums(x):
    return (x.sum(-1), x.sum(0), x.sum(1), x.sum(), x.sum((1, 2), keepdim=True),
            x.sum((0, 1)), eager.sum(x > 0, -1))


def _amaxes(x):
    return (eager.amax(x, -1), eager.amax(x, 0, keepdim=True), eager.amax(x, 1), eager.amax(x),
            eager.amax(x, (1, 2)))


def _views(x):
    return (x.reshape(4, 6) + 1, x.reshape(-1) * 2, x.permute(2, 0, 1) - 1,
            x.transpose(0, 1) * x.transpose(0, 1), x.reshape(2, 12).T + 0.5,
            x.permute(1, 2, 0).reshape(12, 2) * 3, x.unsqueeze(1).squeeze(1) - 2)


def _broadcasts(x, y):
    return x.expand(2, 3, 4) + 1, y.expand(4, 3, 4) * y, x.expand(3, 4).reshape(12) - 1


def _getitems(x):
    return (x[1:3, ::2] + 1, x[::-1] * 2, x[:, ::-2] - 1, x[1] + 0.5, x[None, -1, 1:] * 3,
            x[-1:0:-2, 3:0:-1], x[..., 2], x[:, None, 1] + 1, x[::-1, ::-1].reshape(24))


def _gathers(x, idx):
    return (x[idx] + 1, x[idx, 1:] * 2, x[:, idx] - 1, x[idx, idx] * x[idx, idx],
            x[idx.reshape(2, -1)])


def _scatter_adds(g, idx):
    return EF.scatter_add(g, (idx,), (4, 3)), EF.scatter_add(g * 2, (idx,), (4, 3)) + 1


def _scatter_add_rows(g, idx):
    return (EF.scatter_add(g * 2, (idx,), (4, 3)) + 1,)


def _scatter_slices(g):
    return (EF.scatter_slice(g, (4, 6), ((3, None, -1), (0, 6, 2))),
            EF.scatter_slice(g * 2, (5, 3), ((1, 5, 1),)) + 1)


def _slice_updates(x, v):
    return (EF.slice_update(x, v, ((1, 3, 1), (0, 6, 2))),
            EF.slice_update(x * 2, v + 1, ((3, 0, -2), (5, None, -2))) + 1)


def _cats(a, b):
    return (eager.cat([a, b], 0), eager.cat([a, b * 2], 0) + 1, eager.cat([a.T, b.T], 1),
            eager.stack([a, b], 1) * 2, eager.stack([a, a, b]))


def _matmuls(a, b, v, w, batch):
    return (v @ w, a @ w, v @ b, a @ b, batch @ b, eager.matmul(batch, batch.transpose(1, 2)),
            (a @ b) * 2 + 1)


# --------------------------------------------------------------------------------------
# the table

def _e(name, op, call, ref, samples, dtypes=FLOATS, grad=None, **kw):
    return OpInfo(name, op, call, ref, samples, dtypes, grad, **kw)


OPINFOS: list[OpInfo] = [
    # elementwise binary
    _e("add", "add", eager.add, pointwise(lambda a, b: a + b), binary_samples(), ALL,
       binary_grad()),
    _e("add_operator", "add", lambda a, b: a + b, pointwise(lambda a, b: a + b),
       binary_samples(), NUMERIC, binary_grad()),
    _e("add_alpha", "add", lambda a, b: eager.add(a, b, alpha=2), pointwise(lambda a, b: a + 2 * b),
       binary_samples(special=False), NUMERIC, binary_grad()),
    _e("sub", "sub", eager.sub, pointwise(lambda a, b: a - b), binary_samples(), NUMERIC,
       binary_grad()),
    _e("sub_operator", "sub", lambda a, b: a - b, pointwise(lambda a, b: a - b),
       binary_samples(), NUMERIC, binary_grad()),
    _e("mul", "mul", eager.mul, pointwise(lambda a, b: a * b), binary_samples(), ALL,
       binary_grad()),
    _e("mul_operator", "mul", lambda a, b: a * b, pointwise(lambda a, b: a * b),
       binary_samples(), NUMERIC, binary_grad()),
    _e("div", "div", eager.div, pointwise(_div, float_result), binary_samples("any", "nonzero"),
       NUMERIC, binary_grad("any", "nonzero")),
    _e("div_operator", "div", lambda a, b: a / b, pointwise(_div, float_result),
       binary_samples(), NUMERIC, binary_grad("any", "nonzero")),
    _e("pow", "pow", eager.pow, pointwise(_pow), binary_samples("any", "exponent"), NUMERIC,
       binary_grad("pos", "any"),
       compiled=[Case("pow", lambda a, b: a ** b, shapes([(2, 3, 4), (3, 1)], [(), ()],
                                                       [(0, 4), (4,)], lo=-2.0, hi=3.0)),
                 Case("pow_literal", lambda a: (a ** 2, a ** 3, a ** 4, a ** 0.5, a ** -1.0,
                                                2.0 ** a), UNARY)]),
    _e("pow_operator", "pow", lambda a, b: a ** b, pointwise(_pow),
       binary_samples("pos", "any"), FLOATS, binary_grad("pos", "any")),
    _e("maximum", "maximum", eager.maximum, pointwise(_maximum), binary_samples(), NUMERIC,
       disjoint_grad),
    _e("minimum", "minimum", eager.minimum, pointwise(_minimum), binary_samples(), NUMERIC,
       disjoint_grad),
    _e("max_binary", "maximum", eager.max, pointwise(_maximum), binary_samples(), NUMERIC,
       disjoint_grad),
    _e("min_binary", "minimum", eager.min, pointwise(_minimum), binary_samples(), NUMERIC,
       disjoint_grad),
    _e("eq", "eq", eager.eq, pointwise(lambda a, b: a == b, bool_result), binary_samples(), ALL),
    _e("ne", "ne", eager.ne, pointwise(lambda a, b: a != b, bool_result), binary_samples(), ALL),
    _e("lt", "lt", eager.lt, pointwise(lambda a, b: a < b, bool_result), binary_samples(), ALL),
    _e("le", "le", eager.le, pointwise(lambda a, b: a <= b, bool_result), binary_samples(), ALL),
    _e("gt", "gt", eager.gt, pointwise(lambda a, b: a > b, bool_result), binary_samples(), ALL),
    _e("ge", "ge", eager.ge, pointwise(lambda a, b: a >= b, bool_result), binary_samples(), ALL),
    _e("eq_operator", "eq", lambda a, b: a == b, pointwise(lambda a, b: a == b, bool_result),
       binary_samples(), NUMERIC),
    _e("lt_operator", "lt", lambda a, b: a < b, pointwise(lambda a, b: a < b, bool_result),
       binary_samples(), NUMERIC),
    _e("ge_operator", "ge", lambda a, b: a >= b, pointwise(lambda a, b: a >= b, bool_result),
       binary_samples(), NUMERIC),
    # elementwise unary
    _e("neg", "neg", eager.neg, pointwise(lambda a: -a), unary_samples(), NUMERIC, unary_grad()),
    _e("neg_operator", "neg", lambda a: -a, pointwise(lambda a: -a), unary_samples(), NUMERIC,
       unary_grad()),
    _e("exp", "exp", eager.exp, pointwise(_exp, float_result), unary_samples(), ALL,
       unary_grad(),
       domain=(-100.0, 100.0)),
    _e("log", "log", eager.log, pointwise(_log, float_result), unary_samples(), ALL,
       unary_grad("pos"),
       domain=(-0.5, 50.0)),
    _e("sqrt", "sqrt", eager.sqrt, pointwise(_sqrt, float_result), unary_samples(), ALL,
       unary_grad("pos"),
       domain=(-0.5, 50.0)),
    _e("tanh", "tanh", eager.tanh, pointwise(math.tanh, float_result), unary_samples(), ALL,
       unary_grad(),
       domain=(-12.0, 12.0)),
    _e("sigmoid", "sigmoid", eager.sigmoid, pointwise(_sigmoid, float_result),
       unary_samples(), ALL, unary_grad(),
       domain=(-60.0, 60.0)),
    _e("sigmoid_large", "sigmoid", eager.sigmoid, pointwise(_sigmoid, float_result),
       lambda rng, dt: [Sample((np.array([-800.0, -100.0, -30.0, 30.0, 100.0, 800.0], dt),))],
       FLOATS),
    _e("erf", "erf", eager.erf, pointwise(math.erf, float_result), unary_samples(), ALL,
       unary_grad(),
       domain=(-5.0, 5.0)),
    _e("log1p", "log1p", eager.log1p, pointwise(_log1p, float_result), unary_samples(), ALL,
       unary_grad("pos"),
       domain=(-0.99, 50.0)),
    _e("log1p_tiny", "log1p", lambda a: a.log1p(), pointwise(_log1p, float_result),
       _tiny_samples, FLOATS, tol=TINY_TOL),
    _e("expm1", "expm1", eager.expm1, pointwise(_expm1, float_result), unary_samples(), ALL,
       unary_grad(),
       domain=(-60.0, 60.0)),
    _e("expm1_tiny", "expm1", lambda a: a.expm1(), pointwise(_expm1, float_result),
       _tiny_samples, FLOATS, tol=TINY_TOL),
    _e("relu", "relu", eager.relu, pointwise(_relu), unary_samples(), NUMERIC,
       unary_grad("nonzero")),
    _e("relu_functional", "relu", NF.relu, pointwise(_relu), unary_samples(), FLOATS,
       unary_grad("nonzero")),
    _e("abs", "abs", eager.abs, pointwise(abs), unary_samples(), NUMERIC, unary_grad("nonzero")),
    _e("abs_operator", "abs", lambda a: abs(a), pointwise(abs), unary_samples(), NUMERIC,
       unary_grad("nonzero")),
    _e("square", None, eager.square, pointwise(lambda v: v * v), unary_samples(), NUMERIC,
       unary_grad()),
    _e("rsqrt", None, lambda x: x.rsqrt(), pointwise(_rsqrt, float_result), unary_samples(),
       NUMERIC, unary_grad("pos")),
    _e("isnan", None, lambda x: x.isnan(), pointwise(lambda v: v != v, bool_result),
       unary_samples(), ALL),
    _e("isinf", None, eager.isinf, pointwise(lambda v: v in (INF, -INF), bool_result),
       unary_samples(), ALL),
    _e("isfinite", None, eager.isfinite, pointwise(lambda v: math.isfinite(v), bool_result),
       unary_samples(), ALL),
    _e("sign", "sign", eager.sign, pointwise(_sign), unary_samples(), NUMERIC,
       unary_grad("nonzero")),
    _e("stop_gradient", "stop_gradient", eager.stop_gradient, pointwise(lambda v: v),
       unary_samples(), ALL,
       compiled=[Case("stop_gradient", lambda a: (a.detach() * 2, a.detach().exp()),
                      UNARY)]),
    _e("where", "where", eager.where, pointwise(lambda c, a, b: a if c else b,
                                                lambda c, a, b: a),
       where_samples, ALL, where_grad,
       compiled=[Case("where", lambda a, b: eager.where(a > 0, a, b), BINARY),
                 Case("where_scalar", lambda a: eager.where(a < 0.5, 1.0, a), UNARY)]),
    _e("cast", "cast", lambda a, dtype: a.to(dtype), cast_ref, cast_samples, ALL, cast_grad,
       grad_eps=1e-2, grad_tol=(1e-5, 1e-6),
       compiled=[Case("cast", _casts, UNARY),
                 Case("cast_int", _int_casts, UNARY, specials=False)]),
    # reductions
    _e("sum", "sum", lambda a, dim, keepdim: a.sum(dim=dim, keepdim=keepdim), sum_ref,
       reduce_samples(), ALL, reduce_grad(),
       compiled=[Case("sum", _sums, shapes([(2, 3, 4)], None, [(2, 0, 4)]), tol="reduce"),
                 Case("sum_1d", lambda x: (x.sum(), x.sum(-1, keepdim=True), x.sum(0) * 2),
                      shapes([(5,)], [()], [(0,)]), tol="reduce")]),
    _e("sum_function", "sum", lambda a, dim, keepdim: eager.sum(a, dim, keepdim), sum_ref,
       reduce_samples(), NUMERIC, reduce_grad()),
    _e("amax", "amax", lambda a, dim, keepdim: a.amax(dim=dim, keepdim=keepdim), amax_ref,
       reduce_samples("grid", nonempty=True), ALL, reduce_grad("grid", nonempty=True),
       compiled=[Case("amax", _amaxes, shapes([(2, 3, 4)])),
                 Case("amax_1d", lambda x: (eager.amax(x), eager.amax(x, 0, keepdim=True) + 1),
                      shapes([(5,)], [()], None))]),
    _e("max_all", "amax", lambda a: eager.max(a), amax_ref,
       _shape_samples([((5,),), ((3, 4),), ((),)]), ALL,
       lambda rng: [Sample((values(rng, s, F64, "grid"),)) for s in [(5,), (3, 4), ()]]),
    _e("argmax", "argmax", lambda a, dim, keepdim: eager.argmax(a, dim, keepdim), argmax_ref,
       reduce_samples(nonempty=True, special=False,
                      cases=[c for c in REDUCE_CASES if not isinstance(c[1], tuple)]), ALL,
       compiled=[Case("argmax", lambda x: (x.argmax(1), x.argmax(), x.argmax(0, keepdim=True)),
                      shapes([(3, 5)], None, None))]),
    _e("argmin", "argmax", lambda a, dim, keepdim: a.argmin(dim, keepdim), argmin_ref,
       reduce_samples(nonempty=True, special=False,
                      cases=[c for c in REDUCE_CASES if not isinstance(c[1], tuple)]), NUMERIC),
    # matmul
    _e("matmul", "matmul", eager.matmul, matmul_ref, matmul_samples, NUMERIC, matmul_grad,
       compiled=[Case("matmul", _matmuls,
                      shapes([(3, 4), (4, 5), (4,), (4,), (2, 3, 4)], None,
                             [(0, 4), (4, 0), (4,), (4,), (2, 0, 4)]))]),
    _e("matmul_operator", "matmul", lambda a, b: a @ b, matmul_ref, matmul_samples, NUMERIC,
       matmul_grad),
    # shapes
    _e("reshape", "reshape", lambda a, shape: a.reshape(shape), lambda a, s: a.reshape(s),
       reshape_samples, ALL, _grad_of(reshape_samples),
       compiled=[Case("reshape", _views, shapes([(2, 3, 4)])),
                 Case("reshape_small", lambda x: (x.reshape(1) + 1, x.reshape(1, 1, 1) * 2,
                                                  x.reshape(()) - 1),
                      shapes([(1,)], [()], None))]),
    _e("reshape_varargs", "reshape", lambda a, shape: eager.reshape(a, *shape),
       lambda a, s: a.reshape(s), reshape_samples, FLOATS),
    _e("view", "reshape", lambda a, shape: a.view(*shape), lambda a, s: a.reshape(s),
       reshape_samples, ALL, _grad_of(reshape_samples)),
    _e("permute", "permute", lambda a, perm: a.permute(*perm),
       lambda a, p: permute_ref(a, [d % a.ndim for d in p]), permute_samples, ALL,
       _grad_of(permute_samples),
       compiled=[Case("permute", lambda x: (x.permute(1, 0, 2) * 2, x.permute(2, 1, 0),
                                            x.permute(0, 2, 1).sum(-1)),
                      shapes([(2, 3, 4)], None, [(2, 0, 4)]), tol="reduce")]),
    _e("permute_function", "permute", lambda a, perm: eager.permute(a, perm),
       lambda a, p: permute_ref(a, [d % a.ndim for d in p]), permute_samples, FLOATS),
    _e("expand", "broadcast_to", lambda a, shape: a.expand(*shape), expand_ref, expand_samples,
       ALL, _grad_of(expand_samples)),
    _e("broadcast_to", "broadcast_to", lambda a, shape: eager.broadcast_to(a, shape), expand_ref,
       expand_samples, FLOATS, _grad_of(expand_samples),
       compiled=[Case("broadcast_to", _broadcasts,
                      shapes([(3, 1), (1, 3, 4)], [(), ()], None)),
                 Case("broadcast_to_rows", lambda x: (x.expand(2, x.shape[0], 4) + 1,
                                                      x.expand(x.shape[0], 4) * 2),
                      shapes([(3, 1)], None, [(0, 1)]))]),
    _e("cat", "cat", lambda *parts, dim: eager.cat(list(parts), dim=dim),
       lambda *parts, dim: cat_ref(list(parts), dim), cat_parts_samples, ALL,
       _grad_of(cat_parts_samples),
       compiled=[Case("cat", _cats, shapes([(2, 3), (2, 3)], None, [(0, 3), (0, 3)]))]),
    _e("cat_list", "cat", _cat_call, cat_ref, cat_samples, FLOATS),
    # indexing
    _e("getitem", "getitem", lambda a, key: a[key], lambda a, key: a[key], getitem_samples, ALL,
       getitem_grad,
       compiled=[Case("getitem", _getitems, shapes([(4, 6)], None, None)),
                 Case("getitem_3d", lambda x: (x[:, ::-1, 1:] + 1, x[0, :, ::3], x[1:2, -1]),
                      shapes([(2, 3, 4)], None, [(2, 3, 0)]))]),
    _e("scatter_slice", "scatter_slice", EF.scatter_slice, scatter_slice_ref,
       scatter_slice_samples, ALL, _grad_of(scatter_slice_samples),
       compiled=[Case("scatter_slice", _scatter_slices, shapes([(4, 3)], None, None))]),
    _e("slice_update", "slice_update", EF.slice_update, slice_update_ref, slice_update_samples,
       ALL, _grad_of(slice_update_samples),
       compiled=[Case("slice_update", _slice_updates,
                      shapes([(4, 6), (2, 3)], None, None))]),
    _e("setitem", None, _setitem_call, slice_update_ref, slice_update_samples,
       FLOATS, _grad_of(slice_update_samples)),
    _e("gather", "gather", _index_call, lambda a, key: a[key], gather_samples, ALL, gather_grad,
       compiled=[Case("gather", _gathers, shapes([(5, 5), (4,)], None, [(5, 5), (0,)],
                                                 ints={1: (-5, 5)}))]),
    _e("embedding", "check_class_index", lambda w, idx: NF.embedding(idx, w),
       lambda w, idx: w[idx], embedding_samples, ALL,
       compiled=[Case("check_class_index",
                      lambda w, idx: (NF.embedding(idx, w) + 1,),
                      shapes([(5, 3), (4,)], None, [(5, 3), (0,)], ints={1: (0, 5)}))]),
    _e("check_finite", "check_finite", lambda a: EF.check_finite(a, "not finite"),
       pointwise(lambda a: a), unary_samples(special=False), FLOATS, unary_grad(),
       compiled=[Case("check_finite", lambda a: (EF.check_finite(a * 2, "not finite") + 1,),
                      shapes([(3, 5)], [()], [(0, 3)]), specials=False)]),
    _e("scatter_add", "scatter_add", _scatter_add_call, _scatter_add_ref, scatter_add_samples,
       NUMERIC, _grad_of(scatter_add_samples),
       compiled=[Case("scatter_add", _scatter_adds,
                      shapes([(6, 3), (6,)], None, [(0, 3), (0,)], ints={1: (0, 4)})),
                 # an embedding's gradient: rows by a [2,5] id array, negatives and (9 ids
                 # over 8 values) duplicates, through codegen.step_kernels.scatter_add
                 Case("scatter_add_rows", _scatter_add_rows,
                      shapes([(2, 5, 3), (2, 5)], None, [(0, 5, 3), (0, 5)],
                             ints={1: (-4, 4)}))]),
    # random
    _e("rand", "uniform", lambda shape, dtype: eager.rand(*shape, dtype=dtype), None,
       random_samples, FLOATS, check=_check_uniform,
       compiled=[Case("uniform", lambda x: x + eager.rand(3, 5, dtype=x.dtype),
                      shapes([(3, 5)]), random=True)]),
    _e("randn", "normal", lambda shape, dtype: eager.randn(shape, dtype=dtype), None,
       random_samples, FLOATS, check=_check_normal,
       compiled=[Case("normal", lambda x: x * eager.randn(3, 5, dtype=x.dtype),
                      shapes([(3, 5)]), random=True)]),
    _e("randint", "randint", lambda lo, hi, size, dtype: eager.randint(lo, hi, size, dtype=dtype),
       None, randint_samples, (I32, I64), check=_check_randint,
       compiled=[Case("randint", lambda x: x + eager.randint(-3, 3, (3, 5)).to(x.dtype),
                      shapes([(3, 5)]), random=True)]),

    # ---------------------------------------------------------------- composites
    _e("gelu", None, NF.gelu, pointwise(_gelu), unary_samples(), FLOATS, unary_grad()),
    _e("gelu_tanh", None, lambda x: NF.gelu(x, approximate="tanh"), pointwise(_gelu_tanh),
       unary_samples(special=False), FLOATS, unary_grad()),
    _e("gelu_module", None, lambda x: eager.nn.GELU(approximate="tanh")(x), pointwise(_gelu_tanh),
       unary_samples(special=False), FLOATS),
    _e("silu", None, NF.silu, pointwise(lambda v: v * _sigmoid(v)), unary_samples(special=False),
       FLOATS, unary_grad()),
    _e("softmax", None, lambda x, d: NF.softmax(x, dim=d),
       lambda x, d: softmax_ref(x, d).astype(x.dtype), _softmax_samples, FLOATS,
       _softmax_grad),
    _e("softmax_method", None, lambda x, d: eager.softmax(x, d),
       lambda x, d: softmax_ref(x, d).astype(x.dtype), _softmax_samples, FLOATS),
    _e("log_softmax", None, lambda x, d: NF.log_softmax(x, dim=d),
       lambda x, d: log_softmax_ref(x, d).astype(x.dtype), _softmax_samples, FLOATS,
       _softmax_grad),
    _e("logsumexp", None, eager.logsumexp, logsumexp_ref, _logsumexp_samples, FLOATS,
       _grad_of(lambda rng, dt: [s for s in _logsumexp_samples(rng, dt) if not s.desc])),
    _e("layer_norm", None, _layer_norm_call, _layer_norm_ref, _layer_norm_samples, FLOATS,
       _grad_of(_layer_norm_samples), tol={F32: (1e-4, 1e-5)}),
    _e("cross_entropy", None, NF.cross_entropy, cross_entropy_ref, _cross_entropy_samples,
       FLOATS, _grad_of(_cross_entropy_samples)),
    _e("cross_entropy_module", None, lambda x, t: eager.nn.CrossEntropyLoss()(x, t),
       cross_entropy_ref,
       lambda rng, dt: [s for s in _cross_entropy_samples(rng, dt) if not s.kwargs], FLOATS),
    _e("mse_loss", None, NF.mse_loss, mse_ref, _mse_samples, FLOATS, _grad_of(_mse_samples)),
    _e("linear", None, NF.linear, linear_ref, _linear_samples, FLOATS, _grad_of(_linear_samples)),
    _e("dropout_eval", None, lambda x, p: NF.dropout(x, p, training=False), lambda x, p: x,
       _dropout_samples, FLOATS, _grad_of(_dropout_samples)),
    _e("dropout_module_eval", None, _dropout_module_eval, lambda x, p: x, _dropout_samples,
       FLOATS),
    _e("clamp", None, _clamp_call, _clamp_ref, _clamp_samples, NUMERIC, _clamp_grad),
    _e("clamp_method", None, lambda x, min=None, max=None: x.clamp(min=min, max=max),  # noqa
       _clamp_ref, lambda rng, dt: [s for s in _clamp_samples(rng, dt)
                                    if not isinstance(s.kwargs.get("min"), np.ndarray)],
       NUMERIC),
    _e("mean", None, lambda a, dim, keepdim: a.mean(dim=dim, keepdim=keepdim), mean_ref,
       reduce_samples(), FLOATS, reduce_grad(), tol={F32: (1e-5, 1e-6)}),
    _e("var", None, lambda a, dim, keepdim: a.var(dim=dim, keepdim=keepdim), var_ref,
       reduce_samples(), FLOATS, _var_grad, tol={F32: (1e-4, 1e-5)}),
    _e("var_correction", None, eager.var, var_ref, _var_correction_samples, FLOATS,
       lambda rng: _var_correction_samples(rng, F64), tol={F32: (1e-4, 1e-5)}),
    _e("std", None, lambda a, dim, keepdim: eager.std(a, dim, keepdim=keepdim),
       lambda a, dim, keepdim: _sqrt_array(var_ref(a, dim, keepdim)), reduce_samples(), FLOATS,
       _var_grad, tol={F32: (1e-4, 1e-5)}),
    _e("amin", None, lambda a, dim, keepdim: a.amin(dim=dim, keepdim=keepdim), amin_ref,
       reduce_samples("grid", nonempty=True), ALL, reduce_grad("grid", nonempty=True)),
    _e("min_all", None, lambda a: a.min(), amin_ref, _shape_samples([((5,),), ((3, 4),)]),
       NUMERIC),
    _e("max_dim", None, lambda x, d, k: tuple(eager.max(x, d, keepdim=k)), _max_dim_ref,
       _max_dim_samples, NUMERIC, _grad_of(_max_dim_samples)),
    _e("max_dim_method", None, lambda x, d, k: tuple(x.max(dim=d, keepdim=k)), _max_dim_ref,
       _max_dim_samples, NUMERIC),
    _e("min_dim", None, lambda x, d, k: tuple(x.min(d, keepdim=k)), _min_dim_ref,
       _max_dim_samples, NUMERIC, _grad_of(_max_dim_samples)),
    _e("stack", None, lambda *xs, dim: eager.stack(list(xs), dim=dim), _stack_ref,
       _stack_samples, ALL, _grad_of(_stack_samples)),
    _e("transpose", None, lambda x, a, b: x.transpose(a, b), lambda x, a, b: np.swapaxes(x, a, b),
       _shape_samples([((2, 3, 4), 0, 2), ((3, 4), -1, 0), ((5,), 0, -1), ((2, 3, 4), 1, 1)]),
       ALL, _grad_of(_shape_samples([((2, 3, 4), 0, 2), ((3, 4), -1, 0)]))),
    _e("T", None, lambda x: x.T, lambda x: x.T,
       _shape_samples([((3, 4),), ((5,),), ((),), ((2, 3, 4),)]), ALL,
       _grad_of(_shape_samples([((3, 4),), ((2, 3, 4),)]))),
    _e("t", None, lambda x: x.t(), lambda x: x.T, _shape_samples([((3, 4),), ((5,),)]), FLOATS),
    _e("unsqueeze", None, lambda x, d: x.unsqueeze(d), lambda x, d: np.expand_dims(x, d),
       _shape_samples([((3, 4), 0), ((3, 4), 2), ((3, 4), -1), ((), 0), ((3, 4), -3)]), ALL,
       _grad_of(_shape_samples([((3, 4), 1)]))),
    _e("squeeze", None, lambda x, d=None: x.squeeze(d),
       lambda x, d=None: np.squeeze(x, d) if d is None or x.shape[d] == 1 else x,
       _shape_samples([((1, 3, 1),), ((1, 3, 1), 0), ((1, 3, 1), -1), ((1, 3, 1), 1), ((1,),)]),
       ALL, _grad_of(_shape_samples([((1, 3, 1),), ((1, 3, 1), 2)]))),
    _e("flatten", None, lambda x, s=0, e=-1: x.flatten(s, e),
       lambda x, s=0, e=-1: x.reshape(x.shape[:s % max(x.ndim, 1)] + (-1,)
                                      + x.shape[e % max(x.ndim, 1) + 1:]) if x.ndim else
       x.reshape(1),
       _shape_samples([((2, 3, 4),), ((2, 3, 4), 1), ((2, 3, 4), 0, 1), ((),), ((2, 0, 3), 1)]),
       ALL, _grad_of(_shape_samples([((2, 3, 4), 1)]))),
]

from opinfo_shaping import SHAPING_OPINFOS  # noqa: E402  (issue 16 item 4's ops)

OPINFOS += SHAPING_OPINFOS
from opinfo_conv import CONV_OPINFOS  # noqa: E402  (sliding windows: conv, pooling, pad)
OPINFOS += CONV_OPINFOS
from opinfo_attention import ATTENTION_OPINFOS  # noqa: E402  (tril_fill, attention)
OPINFOS += ATTENTION_OPINFOS
from opinfo_math import MATH_OPINFOS  # noqa: E402  (issue 16 item 5: math ops)
OPINFOS += MATH_OPINFOS
from opinfo_dtypes import DTYPE_OPINFOS  # noqa: E402  (issue 16 item 7: view(dtype))
OPINFOS += DTYPE_OPINFOS
from opinfo_index_put import INDEX_PUT_OPINFOS  # noqa: E402  (x[idx] = v, index_put_)
OPINFOS += INDEX_PUT_OPINFOS
from opinfo_rnn import RNN_OPINFOS  # noqa: E402  (an LSTM layer's time loop)
OPINFOS += RNN_OPINFOS
from opinfo_apis import API_OPINFOS  # noqa: E402  (select, index_add, pixel_shuffle ...)
OPINFOS += API_OPINFOS

BY_NAME = {info.name: info for info in OPINFOS}
_DUPLICATE = [n for n in BY_NAME if sum(i.name == n for i in OPINFOS) > 1]
assert not _DUPLICATE, f"OpInfo names must be unique: {_DUPLICATE}"


def forward_cases():
    """(info, dtype) pairs for the forward tests."""
    return [(info, dt) for info in OPINFOS for dt in info.dtypes]


def grad_cases():
    return [info for info in OPINFOS if info.grad_samples is not None]
