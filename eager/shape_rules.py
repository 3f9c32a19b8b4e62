"""Shape and dtype rules of the registry ops (each row's ``infer``), and the index helpers
they share with the front end: broadcasting, reductions, basic and integer indexing.

An ``infer(*types, **params) -> TensorType`` raises `eager.errors.op_error` naming the op,
the shapes and what to do instead; the tracer and the IR verifier call the same rules.
"""
from __future__ import annotations

import math
from functools import lru_cache

from . import dtypes
from .errors import op_error
from .types import Dim, TensorType, has_dims, symbolic_size

# --------------------------------------------------------------------------------------
# shape rules

def broadcast_shapes(op: str, *shapes) -> tuple:
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(-ndim, 0):
        size = 1
        for s in shapes:
            if len(s) < -axis:
                continue
            d = s[axis]
            if d == 1:
                continue
            if size == 1:
                size = d
            elif d is not size and (isinstance(d, Dim) or isinstance(size, Dim)):
                raise op_error(
                    op,
                    "shapes " + " and ".join(_shape_text(s) for s in shapes)
                    + f" cannot be broadcast together while tracing: dimension {axis} is "
                    f"{size} vs {d}, which may differ at run time",
                    hint="a symbolic (None) dimension broadcasts only with itself or 1; if "
                         "the sizes are equal, name the dimension alike in both TensorSpecs "
                         "(TensorSpec((\"batch\", 4))), else give it one fixed size")
            elif d != size:
                raise op_error(
                    op,
                    "shapes " + " and ".join(str(tuple(s)) for s in shapes)
                    + f" cannot be broadcast together (dimension {axis} is {size} vs {d})",
                    hint="make the sizes equal or 1, e.g. with reshape/unsqueeze",
                )
        out.append(size)
    return tuple(out)


def _shape_text(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _same_dtype(op, *types):
    first = types[0].dtype
    for t in types[1:]:
        if t.dtype != first:
            raise op_error(op, f"operands must have one dtype, got {first} and {t.dtype}",
                           types, hint="cast with .to(dtype)", exc=TypeError)
    return first


def _binary_infer(name):
    def infer(a, b):
        return TensorType(broadcast_shapes(name, a.shape, b.shape), _same_dtype(name, a, b))
    return infer


def _compare_infer(name):
    def infer(a, b):
        _same_dtype(name, a, b)
        return TensorType(broadcast_shapes(name, a.shape, b.shape), dtypes.bool_)
    return infer


def _float_unary_infer(name):
    def infer(a):
        if not dtypes.is_floating(a.dtype):
            raise op_error(name, f"needs a floating-point tensor, got {a.dtype}", (a,),
                           hint="cast with .float() or .to(eager.float32)", exc=TypeError)
        return a
    return infer


def _unary_infer(a):
    return a


def _check_axes(op, ndim, axes):
    for ax in axes:
        if not 0 <= ax < max(ndim, 1):
            raise op_error(op, f"axis {ax} out of range for a {ndim}-d tensor")


def _reduce_shape(shape, axes, keepdim):
    if keepdim:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _sum_infer(a, axes, keepdim):
    _check_axes("sum", a.ndim, axes)
    dtype = a.dtype if dtypes.is_floating(a.dtype) else dtypes.int64
    return TensorType(_reduce_shape(a.shape, axes, keepdim), dtype)


def _amax_infer(a, axes, keepdim):
    _check_axes("amax", a.ndim, axes)
    for ax in axes:
        if a.ndim and a.shape[ax] == 0:
            raise op_error("amax", f"cannot reduce over dimension {ax} of size 0", (a,),
                           hint="max/min of an empty tensor is undefined; check the shape")
    return TensorType(_reduce_shape(a.shape, axes, keepdim), a.dtype)


def _argmax_infer(a, axis, keepdim):
    if axis is None:
        shape = (1,) * a.ndim if keepdim else ()
    else:
        _check_axes("argmax", a.ndim, (axis,))
        shape = _reduce_shape(a.shape, (axis,), keepdim)
    # Only an empty *reduced* extent is an error (numpy's rule): argmax over dim 0 of a
    # (2, 0, 3) tensor is a (0, 3) result.
    if (axis is None and 0 in a.shape) or (axis is not None and a.shape[axis] == 0):
        raise op_error("argmax", "cannot take argmax over an empty dimension", (a,))
    return TensorType(shape, dtypes.int64)


def _matmul_infer(a, b):
    dtype = _same_dtype("matmul", a, b)
    if a.ndim < 2 or b.ndim < 2:
        raise op_error("matmul", "the primitive takes operands with ndim >= 2", (a, b))
    if a.shape[-1] != b.shape[-2]:
        raise op_error(
            "matmul",
            f"inner dimensions do not match: {tuple(a.shape)} @ {tuple(b.shape)} "
            f"({a.shape[-1]} != {b.shape[-2]})", (a, b),
            hint="the last dimension of the left operand must equal the second-to-last "
                 "of the right one; transpose one of them?")
    batch = broadcast_shapes("matmul", a.shape[:-2], b.shape[:-2])
    return TensorType(batch + (a.shape[-2], b.shape[-1]), dtype)


def _reshape_infer(a, shape):
    if has_dims(a.shape) or has_dims(shape):
        if symbolic_size(a.shape) != symbolic_size(shape):
            raise op_error("reshape", f"cannot reshape {_shape_text(a.shape)} into "
                           f"{_shape_text(shape)}: a symbolic dimension can be kept, not "
                           f"merged or split", (a,))
        return TensorType(tuple(shape), a.dtype)
    if math.prod(a.shape) != math.prod(shape):
        raise op_error("reshape", f"cannot reshape {tuple(a.shape)} into {tuple(shape)}", (a,))
    return TensorType(tuple(shape), a.dtype)


def _permute_infer(a, perm):
    if sorted(perm) != list(range(a.ndim)):
        raise op_error("permute", f"{perm} is not a permutation of the {a.ndim} dims", (a,))
    return TensorType(tuple(a.shape[p] for p in perm), a.dtype)


def _broadcast_to_infer(a, shape):
    lead = len(shape) - a.ndim
    if lead < 0:
        raise op_error("expand", f"cannot expand {tuple(a.shape)} to fewer dims {shape}", (a,))
    for d, s in zip(a.shape, shape[lead:]):
        if d != s and d != 1:
            raise op_error("expand", f"cannot expand {tuple(a.shape)} to {tuple(shape)}: "
                           f"only size-1 dimensions can be expanded", (a,))
    return TensorType(tuple(shape), a.dtype)


# Basic indices are tuples of: an int (picks and drops a dim), None (new axis of
# size 1), or a (start, stop, step) triple from slice.indices with stop None
# meaning "run to the end" (needed for negative steps).

@lru_cache(maxsize=4096)
def numpy_index(index: tuple) -> tuple:
    # The trailing Ellipsis makes an index of only ints give a 0-d *view*, not a numpy
    # scalar (a copy): x[0].mul_(2) must write into x.
    return tuple(slice(*i) if isinstance(i, tuple) else i for i in index) + (Ellipsis,)


def _slice_len(start, stop, step, size):
    return len(range(*slice(start, stop, step).indices(size)))


def index_shape(shape, index) -> tuple:
    out = []
    axis = 0
    for item in index:
        if item is None:
            out.append(1)
        elif isinstance(item, tuple):
            size = shape[axis]
            if isinstance(size, Dim):
                if item != (0, None, 1):  # only a whole `:` keeps a symbolic size
                    size.unknown(f"the slice {item[0]}:{item[1]}:{item[2]} of the symbolic "
                                 f"dimension {size}")
                out.append(size)
            else:
                out.append(_slice_len(*item, size))
            axis += 1
        else:
            axis += 1
    out.extend(shape[axis:])
    return tuple(out)


def _getitem_infer(a, index):
    return TensorType(index_shape(a.shape, index), a.dtype)


def _scatter_slice_infer(g, shape, index):
    expect = index_shape(shape, index)
    if tuple(g.shape) != expect:
        raise op_error("scatter_slice", f"value shape {g.shape} != indexed shape {expect}")
    return TensorType(tuple(shape), g.dtype)


def _slice_update_infer(base, value, index):
    expect = index_shape(base.shape, index)
    if tuple(value.shape) != tuple(expect):
        raise op_error("slice_update", f"value shape {tuple(value.shape)} != the indexed "
                       f"region's shape {tuple(expect)}", (base, value))
    return TensorType(tuple(base.shape), _same_dtype("slice_update", base, value))


def _check_indices(op, idx):
    for t in idx:
        if t.dtype.kind not in "iu":
            raise op_error(op, f"index tensors must be integer, got {t.dtype}", idx,
                           hint="use .long() on the index", exc=IndexError)


def _gather_infer(x, *idx):
    _check_indices("gather", idx)
    if len(idx) > x.ndim:
        raise op_error("gather", f"too many indices ({len(idx)}) for a {x.ndim}-d tensor", (x,),
                       exc=IndexError)
    bshape = broadcast_shapes("gather", *(t.shape for t in idx))
    return TensorType(bshape + tuple(x.shape[len(idx):]), x.dtype)


def _check_class_index_infer(idx, size, what):
    _check_indices(what, (idx,))
    return idx


def _scatter_add_infer(g, *idx, shape):
    _check_indices("scatter_add", idx)
    return TensorType(tuple(shape), g.dtype)


def _cat_infer(*xs, axis):
    if not xs:
        raise op_error("cat", "needs at least one tensor")
    first = xs[0]
    dtype = _same_dtype("cat", *xs)
    size = 0
    for x in xs:
        if x.ndim != first.ndim or any(
                d != e for i, (d, e) in enumerate(zip(x.shape, first.shape)) if i != axis):
            raise op_error("cat", f"shapes must match except in dim {axis}", xs)
        if isinstance(x.shape[axis], Dim):
            x.shape[axis].unknown(f"cat along the symbolic dimension {x.shape[axis]} (the "
                                  f"result's size is a sum of run-time sizes)")
        size += x.shape[axis]
    shape = list(first.shape)
    shape[axis] = size
    return TensorType(tuple(shape), dtype)


def _where_infer(c, a, b):
    if c.dtype != dtypes.bool_:
        raise op_error("where", f"condition must be bool, got {c.dtype}", (c,), exc=TypeError)
    dtype = _same_dtype("where", a, b)
    return TensorType(broadcast_shapes("where", c.shape, a.shape, b.shape), dtype)


def _cast_infer(a, dtype):
    return TensorType(a.shape, dtype)


def _random_infer(shape, dtype, **_):
    return TensorType(tuple(shape), dtype)
