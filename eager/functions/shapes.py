"""Dims, shapes and views: reshape, permute, expand, cat and stack."""
from __future__ import annotations

import builtins
import math

import numpy as np

from .. import dtypes
from ..dispatch import apply
from ..errors import describe, op_error
from ..ops import OPS, Dim, has_dims, symbolic_size
from .elementwise import as_tensor, cast

_builtin_max = builtins.max

__all__ = [
    "broadcast_to",
    "cat",
    "concatenate",
    "contiguous",
    "expand",
    "expand_as",
    "flatten",
    "permute",
    "reshape",
    "squeeze",
    "stack",
    "sum_to",
    "t",
    "transpose",
    "unsqueeze",
    "view",
]


# --------------------------------------------------------------------------------------
# shapes and views

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
        # (r is traced when x is a tensor a trace captured: ask numpy of x's own array)
        out = r._data if type(r._data) is np.ndarray else data.reshape(r.shape)
        copied = bool(data.size) and not np.may_share_memory(out, data)
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
    data = flat._data
    if not (data.flags.c_contiguous if type(data) is np.ndarray else
            getattr(data, "c_contiguous", True)):
        # evenly strided memory (x[:, ::2] of a (3, 8)): numpy views even the 1-d reshape;
        # a product with one is the copy then (1-d: C-ordered), -0.0 and NaN kept
        from .elementwise import const

        flat = apply(OPS["mul"], flat, const(1, x.dtype))
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
