"""The front end: PyTorch-style functions over tensors.

Argument handling lives here (Python scalars, type promotion, negative and
tuple dims, -1 in shapes, index keys); every computation goes through
`dispatch.apply` with a registry op.  Tensor methods call these functions.
"""
from __future__ import annotations

import builtins
import math
from collections import namedtuple

import numpy as np

from . import dispatch as _dispatch
from . import dtypes
from .dispatch import apply
from .errors import describe, op_error
from .ops import OPS, Dim, broadcast_shapes, has_dims, symbolic_size

_builtin_sum = builtins.sum
_builtin_max = builtins.max

Tensor = None  # bound by eager/__init__.py

ADD, SUB, MUL, DIV, POW = OPS["add"], OPS["sub"], OPS["mul"], OPS["div"], OPS["pow"]
_SCALARS = (int, float, bool, np.integer, np.floating, np.bool_)


# --------------------------------------------------------------------------------------
# scalars, constants and promotion

def const(value, dtype) -> "Tensor":
    """A 0-d constant tensor (broadcasts against anything)."""
    arr = np.array(value, dtype=dtype)
    arr.flags.writeable = False
    return Tensor._wrap(arr)


_SCALAR_CACHE: dict = {}


def _scalar_for(value, like_dtype):
    """Wrap a Python scalar for an op with a tensor of `like_dtype` (PyTorch promotion).

    Scalars recur (x * 2, x + 1, 1 - beta), so their 0-d tensors are cached; the arrays
    are read-only, so an in-place write to one fails instead of changing a constant.
    """
    # Floats are keyed by their bits (float.hex): 0.0 == -0.0 would share one constant (x / 0.0
    # after x / -0.0 gave -inf), and NaN != NaN would never hit.
    is_float = isinstance(value, (float, np.floating))
    key = (value.__class__, float(value).hex() if is_float else value, like_dtype)
    try:
        t = _SCALAR_CACHE.get(key)
    except TypeError:  # unhashable numpy scalar subclass
        t = None
    if t is not None:
        return t
    arr = np.array(value, dtype=dtypes.promote_weak(like_dtype, dtypes.scalar_dtype(value)))
    arr.flags.writeable = False
    t = Tensor._wrap(arr)
    if len(_SCALAR_CACHE) < 4096 and (is_float or value == value):
        _SCALAR_CACHE[key] = t
    return t


def as_tensor(value, op="op") -> "Tensor":
    if isinstance(value, Tensor):
        return value
    if isinstance(value, _SCALARS):
        return Tensor._wrap(np.array(value, dtype=dtypes.scalar_dtype(value)))
    raise op_error(op, f"expected a Tensor or a number, got {describe(value)}",
                   hint="wrap data with eager.tensor(...)", exc=TypeError)


def _result_dtype(a, b):
    da, db = a.dtype, b.dtype
    if da == db:
        return da
    a0, b0 = a.ndim == 0, b.ndim == 0
    if a0 and not b0:
        return dtypes.promote_weak(db, da)
    if b0 and not a0:
        return dtypes.promote_weak(da, db)
    return dtypes.promote(da, db)


def _operands(a, b, op):
    """Two tensors of one dtype, PyTorch promotion applied."""
    a_is = isinstance(a, Tensor)
    b_is = isinstance(b, Tensor)
    if a_is and b_is:
        da = a._data.dtype
        if da == b._data.dtype:
            return a, b
        dtype = _result_dtype(a, b)
        return cast(a, dtype), cast(b, dtype)
    if a_is:
        if not isinstance(b, _SCALARS):
            raise op_error(op, f"expected a Tensor or a number, got {describe(b)}",
                           (a, b), hint="wrap data with eager.tensor(...)", exc=TypeError)
        b = _scalar_for(b, a._data.dtype)
        return cast(a, b.dtype), b
    if b_is:
        if not isinstance(a, _SCALARS):
            raise op_error(op, f"expected a Tensor or a number, got {describe(a)}",
                           (a, b), hint="wrap data with eager.tensor(...)", exc=TypeError)
        a = _scalar_for(a, b._data.dtype)
        return a, cast(b, a.dtype)
    return as_tensor(a, op), as_tensor(b, op)


def _float_operands(a, b, op):
    a, b = _operands(a, b, op)
    if a.dtype.kind != "f":
        a, b = cast(a, dtypes.DEFAULT_FLOAT), cast(b, dtypes.DEFAULT_FLOAT)
    return a, b


def _floating(x, op):
    x = as_tensor(x, op)
    if x._data.dtype.kind != "f":
        return cast(x, dtypes.DEFAULT_FLOAT)
    return x


def cast(x, dtype) -> "Tensor":
    """Convert to `dtype` (no-op when it already has it)."""
    dtype = dtypes.canonical(dtype)
    if x._data.dtype == dtype:
        return x
    return apply(OPS["cast"], x, dtype=dtype)


to = cast


# --------------------------------------------------------------------------------------
# elementwise

def add(a, b, alpha=None):
    if alpha is not None:
        b = mul(b, alpha)
    if a.__class__ is not b.__class__ or a._data.dtype is not b._data.dtype:
        a, b = _operands(a, b, "add")
    return apply(ADD, a, b)


def sub(a, b, alpha=None):
    if alpha is not None:
        b = mul(b, alpha)
    if a.__class__ is not b.__class__ or a._data.dtype is not b._data.dtype:
        a, b = _operands(a, b, "sub")
    if a.dtype == dtypes.bool_:
        raise op_error("sub", "subtraction of bool tensors is not supported", (a, b),
                       hint="use logical ops or cast to int", exc=TypeError)
    return apply(SUB, a, b)


def mul(a, b):
    if a.__class__ is not b.__class__ or a._data.dtype is not b._data.dtype:
        a, b = _operands(a, b, "mul")
    return apply(MUL, a, b)


def div(a, b):
    if a.__class__ is not b.__class__ or a._data.dtype is not b._data.dtype \
            or a._data.dtype.kind != "f":
        a, b = _float_operands(a, b, "div")
    return apply(DIV, a, b)


def pow(a, b):  # noqa: A001 - PyTorch's name
    a, b = _operands(a, b, "pow")
    return apply(POW, a, b)


def maximum(a, b):
    a, b = _operands(a, b, "maximum")
    return apply(OPS["maximum"], a, b)


def minimum(a, b):
    a, b = _operands(a, b, "minimum")
    return apply(OPS["minimum"], a, b)


def _compare(name):
    op = OPS[name]

    def compare(a, b):
        a, b = _operands(a, b, name)
        return apply(op, a, b)
    compare.__name__ = name
    compare.__doc__ = f"Elementwise comparison `{name}`; returns a bool tensor."
    return compare


eq, ne, lt, le, gt, ge = (_compare(n) for n in ("eq", "ne", "lt", "le", "gt", "ge"))


def neg(x):
    x = as_tensor(x, "neg")
    if x.dtype == dtypes.bool_:
        raise op_error("neg", "negation of a bool tensor is not supported", (x,),
                       hint="use logical_not (~x)", exc=TypeError)
    return apply(OPS["neg"], x)


def _float_unary(name):
    op = OPS[name]

    def unary(x):
        if x.__class__ is not Tensor or x._data.dtype.kind != "f":
            x = _floating(x, name)
        return apply(op, x)
    unary.__name__ = name
    unary.__doc__ = op.doc
    return unary


exp, log, sqrt, tanh, sigmoid, erf = (_float_unary(n) for n in
                                      ("exp", "log", "sqrt", "tanh", "sigmoid", "erf"))
log1p, expm1 = (_float_unary(n) for n in ("log1p", "expm1"))


def relu(x):
    return apply(OPS["relu"], as_tensor(x, "relu"))


def abs(x):  # noqa: A001
    return apply(OPS["abs"], as_tensor(x, "abs"))


def sign(x):
    return apply(OPS["sign"], as_tensor(x, "sign"))


def square(x):
    """x * x (torch.square)."""
    x = as_tensor(x, "square")
    return mul(x, x)


def rsqrt(x):
    """1 / sqrt(x) (torch.rsqrt); integers give the default float, as sqrt does."""
    s = sqrt(as_tensor(x, "rsqrt"))
    return div(const(1, s.dtype), s)


def isnan(x):
    """Where x is NaN, as a bool tensor (all False for integers and bools)."""
    x = as_tensor(x, "isnan")
    return ne(x, x)


def isinf(x):
    """Where x is +inf or -inf, as a bool tensor."""
    x = as_tensor(x, "isinf")
    if x.dtype.kind != "f":
        return ne(x, x)
    return eq(abs(x), const(math.inf, x.dtype))


def isfinite(x):
    """Where x is neither NaN nor ±inf, as a bool tensor."""
    x = as_tensor(x, "isfinite")
    if x.dtype.kind != "f":
        return eq(x, x)
    return lt(abs(x), const(math.inf, x.dtype))


def logical_not(x):
    x = as_tensor(x, "logical_not")
    return eq(cast(x, dtypes.bool_), False)


def where(cond, a, b):
    """cond ? a : b with broadcasting; `a` and `b` may be numbers."""
    cond = as_tensor(cond, "where")
    if cond.dtype != dtypes.bool_:
        raise op_error("where", f"condition must be a bool tensor, got {cond.dtype}", (cond,),
                       hint="compare first, e.g. where(x > 0, ...)", exc=TypeError)
    a, b = _operands(a, b, "where")
    return apply(OPS["where"], cond, a, b)


def clamp(x, min=None, max=None):  # noqa: A002
    """Clamp into [min, max]; the gradient is 1 inside the closed interval."""
    if min is None and max is None:
        raise op_error("clamp", "at least one of min and max must be given", (x,))
    # Select the bound only where the comparison is true, so NaN (never comparable) stays
    # NaN as in PyTorch, and at the bound itself x is kept, so its gradient is 1 there
    # (maximum/minimum would split it in half) for number and tensor bounds alike.
    # A NaN bound gives NaN, as in PyTorch: no comparison with it is true, so it is selected
    # explicitly (a number: everywhere; a tensor: where it is NaN).
    if min is not None:
        x = _clamp_side(x, min, lt)
    if max is not None:
        x = _clamp_side(x, max, gt)
    return x


def _clamp_side(x, bound, beyond):
    if isinstance(bound, Tensor):
        x = where(beyond(x, bound), bound, x)
        if bound.dtype.kind == "f":
            x = where(ne(bound, bound), bound, x)
        return x
    if isinstance(bound, (float, np.floating)) and math.isnan(bound):
        return where(eq(x, x), bound, x)
    return where(beyond(x, bound), bound, x)


clip = clamp


# --------------------------------------------------------------------------------------
# reductions

def _norm_dim(d, ndim, op):
    if not isinstance(d, (int, np.integer)) or isinstance(d, bool):
        raise op_error(op, f"dim must be an int, got {describe(d)}", exc=TypeError)
    n = _builtin_max(ndim, 1)
    if not -n <= d < n:
        raise op_error(op, f"dim {d} out of range for a {ndim}-d tensor "
                       f"(expected in [{-n}, {n - 1}])", exc=IndexError)
    return d % n


def _norm_axes(dim, ndim, op):
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, (tuple, list)):
        axes = tuple(sorted({_norm_dim(d, ndim, op) for d in dim}))
        if len(axes) != len(dim):
            raise op_error(op, f"dim {tuple(dim)} names a dimension twice")
        return axes if ndim else ()
    d = _norm_dim(dim, ndim, op)  # a 0-d tensor takes dim 0 or -1 only, as in PyTorch
    return (d,) if ndim else ()


def sum(x, dim=None, keepdim=False, dtype=None):  # noqa: A001
    x = as_tensor(x, "sum")
    if dtype is not None:
        x = cast(x, dtype)
    return apply(OPS["sum"], x, axes=_norm_axes(dim, x.ndim, "sum"), keepdim=bool(keepdim))


def _float_reduction(x, op):
    x = as_tensor(x, op)
    if x.dtype.kind != "f":
        raise op_error(op, f"needs a floating-point tensor, got {x.dtype}", (x,),
                       hint="cast with .float() first", exc=TypeError)
    return x


def _symbolic_count(x, axes):
    """How many elements a reduction over `axes` of `x` combines, where one of those sizes
    is symbolic (tracer): counted at run time, as the sum of ones broadcast to the reduced
    sizes (in int64: exact), cast to x's dtype."""
    ones = apply(OPS["broadcast_to"], const(1, dtypes.int64),
                 shape=tuple(x.shape[a] for a in axes))
    return cast(apply(OPS["sum"], ones, axes=tuple(range(len(axes))), keepdim=False), x.dtype)


def mean(x, dim=None, keepdim=False):
    x = _float_reduction(x, "mean")
    axes = _norm_axes(dim, x.ndim, "mean")
    total = apply(OPS["sum"], x, axes=axes, keepdim=bool(keepdim))
    if any(isinstance(x.shape[a], Dim) for a in axes):
        return div(total, _symbolic_count(x, axes))
    count = math.prod(x.shape[a] for a in axes)
    return mul(total, const(1.0 / count if count else float("nan"), x.dtype))


def var(x, dim=None, unbiased=True, keepdim=False, *, correction=None):
    """Variance over `dim` (torch.var): sum((x - mean)^2) / max(N - correction, 0), with
    Bessel's correction 1 unless ``unbiased=False`` or `correction` says otherwise. One
    element with correction 1 gives NaN, as in PyTorch."""
    x = _float_reduction(x, "var")
    c = (1 if unbiased else 0) if correction is None else correction
    axes = _norm_axes(dim, x.ndim, "var")
    d = sub(x, mean(x, axes, keepdim=True))
    total = apply(OPS["sum"], mul(d, d), axes=axes, keepdim=bool(keepdim))
    if any(isinstance(x.shape[a], Dim) for a in axes):
        return div(total, maximum(sub(_symbolic_count(x, axes), const(c, x.dtype)),
                                  const(0, x.dtype)))
    return div(total, const(builtins.max(math.prod(x.shape[a] for a in axes) - c, 0),
                            x.dtype))


def std(x, dim=None, unbiased=True, keepdim=False, *, correction=None):
    """sqrt(var(x, ...)) (torch.std). At zero spread the gradient is 0, as in PyTorch (the
    plain sqrt's 0.5 / 0 times the zero deviations would give NaN)."""
    v = var(x, dim, unbiased, keepdim, correction=correction)
    zero = eq(v, const(0, v.dtype))
    return where(zero, const(0, v.dtype), sqrt(where(zero, const(1, v.dtype), v)))


def amax(x, dim=None, keepdim=False):
    x = as_tensor(x, "amax")
    return apply(OPS["amax"], x, axes=_norm_axes(dim, x.ndim, "amax"), keepdim=bool(keepdim))


def amin(x, dim=None, keepdim=False):
    x = as_tensor(x, "amin")
    if x.dtype == dtypes.bool_:
        return logical_not(amax(logical_not(x), dim, keepdim))
    if x.dtype.kind in "iu":
        return _reverse_order(amax(_reverse_order(x), dim, keepdim))
    return neg(amax(neg(x), dim, keepdim))


def _reverse_order(x):
    """An order-reversing bijection of an integer tensor without overflow: -x - 1, which is
    ~x in wrapping two's complement (-x alone maps INT_MIN to itself, so min and argmin
    computed as -max(-x) missed INT_MIN)."""
    return sub(neg(x), const(1, x.dtype))


def argmax(x, dim=None, keepdim=False):
    x = as_tensor(x, "argmax")
    axis = None if dim is None else _norm_dim(dim, x.ndim, "argmax")
    if x.ndim == 0:
        axis = None
    return apply(OPS["argmax"], x, axis=axis, keepdim=bool(keepdim))


def argmin(x, dim=None, keepdim=False):
    x = as_tensor(x, "argmin")
    if x.dtype == dtypes.bool_:
        return argmax(logical_not(x), dim, keepdim)
    return argmax(_reverse_order(x) if x.dtype.kind in "iu" else neg(x), dim, keepdim)


MaxResult = namedtuple("MaxResult", ["values", "indices"])


def max(x, dim=None, keepdim=False):  # noqa: A001
    """max(x) -> 0-d max; max(x, dim) -> (values, indices); max(x, y) -> maximum."""
    if isinstance(dim, Tensor):
        return maximum(x, dim)
    if dim is None:
        return amax(x)
    return MaxResult(amax(x, dim, keepdim), argmax(x, dim, keepdim))


def min(x, dim=None, keepdim=False):  # noqa: A001
    if isinstance(dim, Tensor):
        return minimum(x, dim)
    if dim is None:
        return amin(x)
    return MaxResult(amin(x, dim, keepdim), argmin(x, dim, keepdim))


def logsumexp(x, dim, keepdim=False):
    m = detach(amax(x, dim, keepdim=True))
    m = where(eq(abs(m), float("inf")), const(0, m.dtype), m)
    r = add(log(sum(exp(sub(x, m)), dim, keepdim=True)), m)
    return r if keepdim else squeeze(r, dim)


def detach(x):
    return x.detach()


def stop_gradient(x):
    """x, with gradients not flowing back through it (JAX's name; like detach, but always
    an op, so it is visible in traced graphs)."""
    return apply(OPS["stop_gradient"], as_tensor(x, "stop_gradient"))


# --------------------------------------------------------------------------------------
# matmul

def matmul(a, b):
    """Matrix product with NumPy/PyTorch semantics for 1-D, 2-D and batched operands."""
    a = as_tensor(a, "matmul")
    b = as_tensor(b, "matmul")
    if a.ndim == 0 or b.ndim == 0:
        raise op_error("matmul", "both arguments must be at least 1-D", (a, b),
                       hint="use * for scalar multiplication")
    if a.dtype != b.dtype:
        dtype = dtypes.promote(a.dtype, b.dtype)
        a, b = cast(a, dtype), cast(b, dtype)
    if a.dtype.kind == "b":
        raise op_error("matmul", "bool operands are not supported", (a, b), exc=TypeError)
    a1, b1 = a.ndim == 1, b.ndim == 1
    if a1 and b1 and a.shape[0] != b.shape[0]:
        raise op_error("matmul", f"1-D operands of different lengths {a.shape} and {b.shape}",
                       (a, b))
    if a1:
        a = reshape(a, (1, a.shape[0]))
    if b1:
        b = reshape(b, (b.shape[0], 1))
    out = apply(OPS["matmul"], a, b)
    if a1 and b1:
        return reshape(out, ())
    if a1:
        return reshape(out, out.shape[:-2] + out.shape[-1:])
    if b1:
        return reshape(out, out.shape[:-1])
    return out


def dot(a, b):
    return matmul(a, b)


# --------------------------------------------------------------------------------------
# shapes and views

def _shape_arg(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    # Symbolic sizes (tracer: None dims of an input_signature) pass through as they are.
    return tuple(s if isinstance(s, Dim) else int(s) for s in shape)


def _first_dim(*shapes) -> Dim:
    for shape in shapes:
        for d in shape:
            if isinstance(d, Dim):
                return d
    raise AssertionError("no symbolic dimension")


def _shape_text(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _reshape_symbolic(x, shape):
    """reshape with symbolic dimensions: each must be kept as a whole (concrete dimensions
    around it may merge and split, and one -1 may stand for concrete ones)."""
    size, dims = symbolic_size(x.shape)
    if -1 in shape:
        known, kdims = symbolic_size(s for s in shape if s != -1)
        if kdims == dims and known and size % known == 0:
            shape = tuple(size // known if s == -1 else s for s in shape)
    if symbolic_size(shape) != (size, dims) or -1 in shape:
        _first_dim(x.shape, shape).unknown(
            f"reshape of {_shape_text(x.shape)} into {_shape_text(shape)} (it merges or "
            f"splits a symbolic dimension, so the sizes are known only at run time)")
    if shape == x.shape:
        return x
    return apply(OPS["reshape"], x, shape=shape)


def reshape(x, *shape):
    x = as_tensor(x, "reshape")
    shape = _shape_arg(shape)
    if shape.count(-1) > 1:
        raise op_error("reshape", f"only one dimension can be -1, got {shape}", (x,))
    if has_dims(shape) or has_dims(x.shape):
        return _reshape_symbolic(x, shape)
    size = math.prod(x.shape)
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        if known == 0 or size % known:
            raise op_error("reshape", f"cannot reshape {tuple(x.shape)} into {shape}", (x,))
        shape = tuple(size // known if s == -1 else s for s in shape)
    if shape == x.shape:
        return x
    if math.prod(shape) != size:
        raise op_error("reshape", f"cannot reshape {tuple(x.shape)} (size {size}) into {shape}",
                       (x,), hint="the number of elements must stay the same")
    return apply(OPS["reshape"], x, shape=shape)


def view(x, *shape):
    """x with a new shape, sharing its memory (torch.view). Where x's strides cannot take
    the shape without a copy (a transpose, a strided slice) it raises, as PyTorch does:
    writes through a silent copy would not reach x. reshape copies when it must."""
    x = as_tensor(x, "view")
    r = reshape(x, *shape)
    if r is x:
        return r
    data = x._data
    if type(data) is np.ndarray:
        copied = bool(data.size) and not np.may_share_memory(r._data, data)
    else:
        needs_copy = getattr(data, "view_needs_copy", None)  # a traced value
        copied = needs_copy is not None and needs_copy(r.shape)
    if copied:
        raise op_error("view", f"a tensor of shape {_shape_text(x.shape)} that is not "
                       f"contiguous in memory (a transpose, permute or strided slice of "
                       f"another) cannot be viewed as {_shape_text(r.shape)} without a copy, "
                       f"and writes through a copy would not reach it", (x,),
                       hint="use .reshape(...) instead (it copies when it must), or "
                            ".contiguous().view(...)", exc=RuntimeError)
    return r


def contiguous(x):
    """x itself if its memory is C-ordered, else a C-ordered copy (torch.contiguous)."""
    x = as_tensor(x, "contiguous")
    data = x._data
    ordered = data.flags.c_contiguous if type(data) is np.ndarray else \
        getattr(data, "c_contiguous", True)
    if ordered or x.ndim < 2:
        return x
    # reshape to 1-d copies in C order (numpy cannot view it), and back is a view of that
    flat = apply(OPS["reshape"], x, shape=(math.prod(x.shape),))
    return apply(OPS["reshape"], flat, shape=tuple(x.shape))


def permute(x, *dims):
    x = as_tensor(x, "permute")
    dims = _shape_arg(dims)
    if len(dims) != x.ndim:
        raise op_error("permute", f"got {len(dims)} dims {dims} for a {x.ndim}-d tensor", (x,))
    perm = tuple(_norm_dim(d, x.ndim, "permute") for d in dims)
    if sorted(perm) != list(range(x.ndim)):
        raise op_error("permute", f"{dims} is not a permutation of the dims", (x,))
    if perm == tuple(range(x.ndim)):
        return x
    return apply(OPS["permute"], x, perm=perm)


def transpose(x, dim0, dim1):
    x = as_tensor(x, "transpose")
    if x.ndim < 2 and dim0 in (0, -1) and dim1 in (0, -1):
        return x
    d0 = _norm_dim(dim0, x.ndim, "transpose")
    d1 = _norm_dim(dim1, x.ndim, "transpose")
    perm = list(range(x.ndim))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return permute(x, perm)


def t(x):
    if x.ndim > 2:
        raise op_error("t", f"expects a tensor with <= 2 dims, got {x.ndim}", (x,),
                       hint="use transpose(x, dim0, dim1) or permute")
    return transpose(x, 0, -1) if x.ndim == 2 else x


def unsqueeze(x, dim):
    x = as_tensor(x, "unsqueeze")
    d = _norm_dim(dim, x.ndim + 1, "unsqueeze")
    return reshape(x, x.shape[:d] + (1,) + x.shape[d:])


def squeeze(x, dim=None):
    x = as_tensor(x, "squeeze")
    if dim is None:
        return reshape(x, tuple(s for s in x.shape if s != 1))
    axes = _norm_axes(dim, x.ndim, "squeeze")
    return reshape(x, tuple(s for i, s in enumerate(x.shape) if not (i in axes and s == 1)))


def flatten(x, start_dim=0, end_dim=-1):
    x = as_tensor(x, "flatten")
    if x.ndim == 0:
        return reshape(x, (1,))
    s = _norm_dim(start_dim, x.ndim, "flatten")
    e = _norm_dim(end_dim, x.ndim, "flatten")
    if s == e:
        return x
    return reshape(x, x.shape[:s] + (math.prod(x.shape[s:e + 1]),) + x.shape[e + 1:])


def expand(x, *shape):
    x = as_tensor(x, "expand")
    shape = _shape_arg(shape)
    lead = len(shape) - x.ndim
    if lead < 0:
        raise op_error("expand", f"cannot expand {tuple(x.shape)} to fewer dims {shape}", (x,))
    shape = tuple(x.shape[i - lead] if s == -1 and i >= lead else s for i, s in enumerate(shape))
    if shape == x.shape:
        return x
    return apply(OPS["broadcast_to"], x, shape=shape)


broadcast_to = expand


def sum_to(g, shape):
    """Sum `g` down to `shape` (undo broadcasting)."""
    shape = tuple(shape)
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        i + lead for i, s in enumerate(shape) if s == 1 and g.shape[i + lead] != 1)
    if axes:
        g = apply(OPS["sum"], g, axes=axes, keepdim=False)
    return reshape(g, shape)


def expand_as(x, other):
    return expand(x, other.shape)


def cat(tensors, dim=0):
    tensors = [as_tensor(x, "cat") for x in tensors]
    if not tensors:
        raise op_error("cat", "expected a non-empty sequence of tensors")
    # PyTorch skips legacy empty 1-D tensors.
    if tensors[0].ndim:
        tensors = [x for x in tensors if not (x.ndim == 1 and x.shape[0] == 0)] or tensors[:1]
    dtype = tensors[0].dtype
    for x in tensors[1:]:
        dtype = dtypes.promote(dtype, x.dtype)
    tensors = [cast(x, dtype) for x in tensors]
    axis = _norm_dim(dim, tensors[0].ndim, "cat")
    for x in tensors:
        if x.ndim != tensors[0].ndim:
            raise op_error("cat", "tensors must have the same number of dims", tensors)
    if len(tensors) == 1:
        return tensors[0]
    return apply(OPS["cat"], *tensors, axis=axis)


concatenate = cat


def stack(tensors, dim=0):
    tensors = [as_tensor(x, "stack") for x in tensors]
    if not tensors:
        raise op_error("stack", "expected a non-empty sequence of tensors")
    first = tensors[0].shape
    for x in tensors:
        if x.shape != first:
            raise op_error("stack", "all tensors must have the same shape", tensors)
    d = _norm_dim(dim, len(first) + 1, "stack")
    dtype = tensors[0].dtype
    for x in tensors[1:]:
        dtype = dtypes.promote(dtype, x.dtype)
    tensors = [cast(x, dtype) for x in tensors]  # as cat does (PyTorch promotes)
    expanded = [reshape(x, first[:d] + (1,) + first[d:]) for x in tensors]
    if len(expanded) == 1:
        return expanded[0]
    return apply(OPS["cat"], *expanded, axis=d)


# --------------------------------------------------------------------------------------
# indexing

def _is_advanced(item):
    if isinstance(item, Tensor):
        return True
    if isinstance(item, np.ndarray):
        return True
    if isinstance(item, (list, tuple)):
        return True
    return False


def _index_tensor(item, size_hint):
    """Integer index tensors for an advanced index item (bool masks become nonzero())."""
    if not isinstance(item, Tensor):
        arr = np.asarray(item)
        if arr.dtype.kind not in "iub" and arr.size:
            raise op_error("index", f"index arrays must be integer or bool, got {arr.dtype}",
                           exc=IndexError)
        if arr.size == 0:
            arr = arr.astype(np.int64)
        item = Tensor._wrap(arr.astype(np.int64) if arr.dtype.kind in "iu" else arr)
    if item.dtype == dtypes.bool_:
        mask = item.numpy()
        return [Tensor._wrap(ix.astype(np.int64)) for ix in np.nonzero(mask)]
    if item.dtype.kind not in "iu":
        raise op_error("index", f"index tensors must be integer or bool, got {item.dtype}",
                       (item,), hint="use .long()", exc=IndexError)
    return [item]


def getitem(x, key):
    """x[key]: ints, slices, None, Ellipsis, and integer/bool arrays (advanced indexing)."""
    index, advanced = normalize_key(x, key)
    if all(isinstance(i, tuple) and (i == (0, x.shape[j], 1) or i == (0, None, 1))
           for j, i in enumerate(index)) and len(index) <= x.ndim:
        r = x
    else:
        r = getitem_basic(x, index)
    if not advanced:
        return r
    adv_axes = [a for a, _ in advanced]
    idx = [ti for _, ti in advanced]
    others = [a for a in range(r.ndim) if a not in adv_axes]
    r = permute(r, adv_axes + others)
    bshape = broadcast_shapes("index", *(ti.shape for ti in idx))
    out = apply(OPS["gather"], r, *idx)
    adjacent = adv_axes == list(range(adv_axes[0], adv_axes[0] + len(adv_axes)))
    if adjacent and adv_axes[0] > 0:
        nb = len(bshape)
        first = adv_axes[0]
        rest = list(range(nb, out.ndim))
        out = permute(out, rest[:first] + list(range(nb)) + rest[first:])
    return out


def normalize_key(x, key):
    """`x[key]` as (the registry's basic index, [(output axis, index tensor)] of the
    advanced items), checking the key against `x`'s shape."""
    if not isinstance(key, tuple):
        key = (key,)
    n_real = _builtin_sum(1 for k in key if k is not None and k is not Ellipsis and not (
        isinstance(k, (Tensor, np.ndarray)) and k.dtype == np.bool_ and k.ndim > 1))
    n_real += _builtin_sum(k.ndim for k in key
                           if isinstance(k, (Tensor, np.ndarray)) and k.dtype == np.bool_
                           and k.ndim > 1)
    if _builtin_sum(1 for k in key if k is Ellipsis) > 1:
        raise op_error("index", "an index can only have a single ellipsis", (x,), exc=IndexError)
    if n_real > x.ndim:
        raise op_error("index", f"too many indices for a {x.ndim}-d tensor: {len(key)} given",
                       (x,), exc=IndexError)
    expanded = []
    for k in key:
        if k is Ellipsis:
            expanded.extend([slice(None)] * (x.ndim - n_real))
        else:
            expanded.append(k)
    basic = []
    advanced = []  # (output axis after the basic step, index tensors)
    axis = 0
    out_axis = 0
    for k in expanded:
        if k is None:
            basic.append(None)
            out_axis += 1
        elif isinstance(k, slice) and isinstance(x.shape[axis], Dim):
            # Only a whole `:` keeps a symbolic size: (0, None, 1) runs to the end.
            if k.start not in (None, 0) or k.stop is not None or k.step not in (None, 1):
                x.shape[axis].unknown(f"the slice {k.start}:{k.stop}:{k.step} along the "
                                      f"symbolic dimension {x.shape[axis]} of "
                                      f"{_shape_text(x.shape)}")
            basic.append((0, None, 1))
            axis += 1
            out_axis += 1
        elif isinstance(k, slice):
            start, stop, step = k.indices(x.shape[axis])
            basic.append((start, stop if stop >= 0 else None, step))
            axis += 1
            out_axis += 1
        elif isinstance(k, (bool, np.bool_)):
            raise op_error("index", "bool scalars are not supported as indices", (x,),
                           exc=IndexError)
        elif isinstance(k, (int, np.integer)):
            size = x.shape[axis]
            if isinstance(size, Dim):
                size.unknown(f"the integer index {k} along the symbolic dimension {size} of "
                             f"{_shape_text(x.shape)}")
            if not -size <= k < size:
                raise op_error("index", f"index {k} is out of bounds for dimension {axis} "
                               f"with size {size}", (x,), exc=IndexError)
            basic.append(int(k) % size)
            axis += 1
        elif _is_advanced(k):
            tensors = _index_tensor(k, x.shape[axis])
            for ti in tensors:
                _check_index_bounds(x, ti, axis)
                advanced.append((out_axis, ti))
                basic.append((0, None, 1) if isinstance(x.shape[axis], Dim)
                             else (0, x.shape[axis], 1))
                axis += 1
                out_axis += 1
        else:
            raise op_error("index", f"unsupported index {describe(k)}", (x,),
                           hint="use ints, slices, None, ... or integer tensors",
                           exc=IndexError)
    return tuple(basic), advanced


def _check_index_bounds(x, ti, axis):
    # numpy would report this from inside gather as "numpy failed"; say it like basic indexing
    # does, as an IndexError (traced index values are unknown, so only concrete ones are checked)
    data = ti._data
    if type(data) is not np.ndarray or not data.size:
        return
    size = x.shape[axis]
    if isinstance(size, Dim):  # checked by numpy at run time
        return
    bad = (data < -size) | (data >= size)
    if bad.any():
        raise op_error("index", f"index {int(data[bad].flat[0])} is out of bounds for dimension "
                       f"{axis} with size {size}", (x, ti), exc=IndexError)


def getitem_basic(x, index):
    """Apply a normalized basic index (see eager.ops) directly."""
    return apply(OPS["getitem"], x, index=tuple(index))


def scatter_slice(g, shape, index):
    return apply(OPS["scatter_slice"], g, shape=tuple(shape), index=tuple(index))


def slice_update(base, value, index):
    """`base` with the region `base[index]` (a normalized basic index) replaced by `value`."""
    return apply(OPS["slice_update"], base, value, index=tuple(index))


def gather(x, idx):
    return apply(OPS["gather"], x, *idx)


def check_class_index(idx, size, op):
    """`idx` after checking (when the program runs) that every value is in [0, size): class
    labels and embedding rows raise IndexError for a negative index, as in PyTorch, where
    indexing would count it from the end."""
    if isinstance(size, Dim):
        return idx
    return apply(OPS["check_class_index"], idx, size=int(size), what=op)


def check_finite(x, what: str):
    """`x` after checking, when the program runs (traced too), that it holds no NaN or
    infinity: RuntimeError(what) otherwise."""
    return apply(OPS["check_finite"], x, what=what)


def scatter_add(g, idx, shape):
    return apply(OPS["scatter_add"], g, *idx, shape=tuple(shape))


# --------------------------------------------------------------------------------------
# creation

def _dtype_of_data(data):
    # numpy scalars (np.float64(1.0), a 0-d result of array arithmetic) keep their dtype like
    # arrays do, as in torch.tensor; only Python numbers and lists get the defaults
    if isinstance(data, (np.ndarray, np.generic)):
        return dtypes.canonical(data.dtype)
    arr = np.asarray(data)
    if arr.dtype.kind == "f":
        return dtypes.DEFAULT_FLOAT
    if arr.dtype.kind in "iu":
        return dtypes.DEFAULT_INT
    if arr.dtype.kind == "b":
        return dtypes.bool_
    raise op_error("tensor", f"cannot make a tensor from {describe(data)}", exc=TypeError)


def tensor(data, dtype=None, requires_grad=False) -> "Tensor":
    """A new tensor that owns a copy of `data` (nested lists, numbers, arrays, tensors).

    >>> tensor([1.0, 2.0]).dtype
    dtype('float32')
    """
    if isinstance(data, Tensor):
        data = data.numpy()
    if dtype is None:
        dtype = _dtype_of_data(data)
    else:
        dtype = dtypes.canonical(dtype)
    arr = np.array(data, dtype=dtype)
    t = Tensor._wrap(arr)
    if _dispatch._hooked_threads:
        _dispatch.note_created(t)
    if requires_grad:
        t.requires_grad_(True)
    return t


def from_numpy(a: np.ndarray) -> "Tensor":
    """A tensor sharing memory with `a` and keeping its dtype."""
    if not isinstance(a, np.ndarray):
        raise op_error("from_numpy", f"expected a numpy array, got {describe(a)}", exc=TypeError)
    dtype = dtypes.canonical(a.dtype)
    t = Tensor._wrap(a if a.dtype == dtype else a.astype(dtype))
    if _dispatch._hooked_threads:
        _dispatch.note_created(t)
    return t


def _creation_dtype(dtype, default=None):
    return dtypes.canonical(dtype) if dtype is not None else (default or dtypes.DEFAULT_FLOAT)


def _make(arr, requires_grad):
    t = Tensor._wrap(arr)
    if _dispatch._hooked_threads:
        _dispatch.note_created(t)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _creation_shape(shape, op):
    """A creation function's shape; a symbolic size (tracer) has no array to fill."""
    shape = _shape_arg(shape)
    if has_dims(shape):
        _first_dim(shape).unknown(
            f"{op} of shape {_shape_text(shape)} (creation functions make concrete arrays; a "
            f"read-only broadcast keeps the size symbolic: "
            f"eager.{op}(1, *x.shape[1:]).expand(x.shape))")
    return shape


def zeros(*shape, dtype=None, requires_grad=False):
    return _make(np.zeros(_creation_shape(shape, "zeros"), _creation_dtype(dtype)),
                 requires_grad)


def ones(*shape, dtype=None, requires_grad=False):
    return _make(np.ones(_creation_shape(shape, "ones"), _creation_dtype(dtype)),
                 requires_grad)


def full(shape, fill_value, dtype=None, requires_grad=False):
    if dtype is None:
        dtype = dtypes.scalar_dtype(fill_value)
    return _make(np.full(_creation_shape((shape,), "full"), fill_value,
                         _creation_dtype(dtype)), requires_grad)


def zeros_like(x, dtype=None, requires_grad=False):
    return zeros(x.shape, dtype=dtype or x.dtype, requires_grad=requires_grad)


def ones_like(x, dtype=None, requires_grad=False):
    return ones(x.shape, dtype=dtype or x.dtype, requires_grad=requires_grad)


def full_like(x, fill_value, dtype=None, requires_grad=False):
    return full(x.shape, fill_value, dtype=dtype or x.dtype, requires_grad=requires_grad)


def arange(start, end=None, step=1, dtype=None, requires_grad=False):
    if end is None:
        start, end = 0, start
    if dtype is None:
        is_float = any(isinstance(v, (float, np.floating)) for v in (start, end, step))
        dtype = dtypes.DEFAULT_FLOAT if is_float else dtypes.DEFAULT_INT
    return _make(np.arange(start, end, step).astype(dtypes.canonical(dtype)), requires_grad)


def linspace(start, end, steps, dtype=None):
    return _make(np.linspace(start, end, steps).astype(_creation_dtype(dtype)), False)


def eye(n, m=None, dtype=None, requires_grad=False):
    return _make(np.eye(n, m, dtype=_creation_dtype(dtype)), requires_grad)


def rand(*shape, dtype=None, requires_grad=False):
    dtype = _creation_dtype(dtype)
    t = apply(OPS["uniform"], shape=_shape_arg(shape), dtype=dtype)
    return t.requires_grad_(True) if requires_grad else t


def randn(*shape, dtype=None, requires_grad=False):
    dtype = _creation_dtype(dtype)
    t = apply(OPS["normal"], shape=_shape_arg(shape), dtype=dtype)
    return t.requires_grad_(True) if requires_grad else t


def randint(low, high=None, size=None, dtype=None):
    if high is None:
        low, high = 0, low
    if size is None:
        raise op_error("randint", "size is required, e.g. randint(0, 10, (3,))", exc=TypeError)
    dtype = _creation_dtype(dtype, dtypes.DEFAULT_INT)
    return apply(OPS["randint"], shape=_shape_arg((size,)), dtype=dtype, low=int(low),
                 high=int(high))


def rand_like(x):
    return rand(x.shape, dtype=x.dtype)


def randn_like(x):
    return randn(x.shape, dtype=x.dtype)

