"""``x[idx] = v``, ``x[idx] += v`` and ``x.index_put_(indices, values, accumulate)`` with
index tensors (integer-array indexing), in their functional form.

Eagerly without autograd the write goes straight into x's memory, by numpy's own indexing
(Tensor.__setitem__, `put_into`). While tracing, or when autograd records it, x takes a new
value: the registry's ``index_put`` row, whose numpy implementation makes that very numpy
write into a copy of x. Both run the same numpy call on the same key, so they agree bit for
bit, repeated indices included: without `accumulate` the last write of an element wins (in
the order of the broadcast index, numpy's rule; PyTorch leaves it unspecified), with it the
values add up one by one into x's element (np.add.at). An index out of range is numpy's
IndexError (negative indices count from the end, as in PyTorch); as a value check
(`raises=True`) a compiled program has written nothing in place when it raises.

The key may mix index tensors (or lists, numpy arrays, constant boolean masks) with ints,
slices and an Ellipsis; the index tensors broadcast together, and where they are not next
to each other their dimensions come first (numpy's and PyTorch's rule). An int selects
first, as in PyTorch (basic indexing), not as numpy's 0-d index array: ``x[0, :, idx]``
of a (2, 5, 7) x is (5, 3) in PyTorch and (3, 5) in numpy. So an int goes into the key as
a slice of one element, and the values take a unit axis where that element's axis lands
(`_int_axes`). ``index_get``, the same key read, is the values' gradient:

  index_put(x, v)  ->  dx = g with zeros where written (g itself with accumulate),
                       dv = index_get(g)   (every occurrence of a repeated index: PyTorch's)
  index_get(x)     ->  dx = index_put(zeros, g, accumulate=True)

>>> import eager
>>> x = eager.zeros(3, 2)
>>> x[eager.tensor([0, 2]), 1] = 5.0
>>> x.tolist()
[[0.0, 5.0], [0.0, 0.0], [0.0, 5.0]]
"""
from __future__ import annotations

import numpy as np

from . import dispatch as _dispatch
from .errors import op_error, user_location
from .ops import TensorType, _check_indices, is_dim, register

I = "indexing"
_SAVES = tuple(range(1, 17))  # (the index tensors; index_get's are inputs 1.., index_put's 2..)


# --------------------------------------------------------------------------------------
# the key: ("t", k) for index tensor k, ("s", start, stop, step) for a slice

def _numpy_key(key, idx) -> tuple:
    return tuple(idx[item[1]] if item[0] == "t" else slice(*item[1:]) for item in key)


def _c_order(idx) -> list:
    """The index arrays broadcast to one shape, each C-contiguous: numpy then visits them in
    C order whatever layout they came in (a transposed index, a broadcast one), so which of
    repeated indices writes last is the same eagerly and in any compiled program."""
    if len(idx) > 1:
        idx = np.broadcast_arrays(*idx)
    return [np.ascontiguousarray(i) for i in idx]


def _result_shape(shape, key, idx_shapes) -> tuple:
    """The shape of x[key] for x of `shape`: asked of numpy, on a proxy that holds no memory
    and index arrays of zeros (their values do not change it)."""
    for d in tuple(shape) + tuple(d for s in idx_shapes for d in s):
        if is_dim(d):  # (input_signature's None: a TracingError while tracing)
            d.unknown("x[index tensor] = v or index_put_ on a tensor of a symbolic size")
    proxy = np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), tuple(shape),
                                            (0,) * len(shape))
    zeros = [np.zeros(s, np.intp) for s in idx_shapes]
    try:
        return tuple(proxy[_numpy_key(key, zeros)].shape)
    except IndexError as exc:  # (an index into a dimension of size 0: always out of range)
        raise op_error("index_put", str(exc), exc=IndexError) from None


def _int_axes(shape, key, idx_shapes, int_dims) -> tuple:
    """The axes of x[key]'s shape that the ints of the key give (slices of one element at
    dims `int_dims` of x; each item of a key is one dim of x), asked of numpy: those axes
    become 2 long when the ints' dims and slices are made 2 long, and no other axis does."""
    if not int_dims:
        return ()
    one = _result_shape(shape, key, idx_shapes)
    wide = tuple(2 if d in int_dims else n for d, n in enumerate(shape))
    key2 = tuple(("s", 0, 2, 1) if d in int_dims else item for d, item in enumerate(key))
    two = _result_shape(wide, key2, idx_shapes)
    return tuple(a for a, (m, n) in enumerate(zip(one, two)) if m != n)


def _put(out, key, idx, value, accumulate) -> None:
    """The write itself, shared by the eager path and the row: the same numpy call."""
    k = _numpy_key(key, _c_order(idx))
    if accumulate:
        np.add.at(out, k, value)
    else:
        out[k] = value


# --------------------------------------------------------------------------------------
# the rows

def _index_put_impl(base, value, *idx, key, accumulate):
    # (a named function: tracer.call_source.raised_by_check knows a value check's raise by
    # its implementation's code in the traceback)
    out = base.copy()
    _put(out, key, idx, value, accumulate)
    return out


def _index_get_impl(x, *idx, key):
    return np.ascontiguousarray(x[_numpy_key(key, idx)])


def _index_put_infer(base, value, *idx, key, accumulate):
    _check_indices("index_put", idx)
    if base.dtype != value.dtype:
        raise op_error("index_put", f"values of dtype {value.dtype} for a {base.dtype} "
                       f"tensor", (base, value), hint="cast with .to(x.dtype)", exc=TypeError)
    shape = _result_shape(base.shape, key, [t.shape for t in idx])
    if tuple(value.shape) != shape:
        raise op_error("index_put", f"values of shape {tuple(value.shape)} for the {shape} "
                       f"elements the index selects", (base, value))
    return TensorType(tuple(base.shape), base.dtype)


def _index_get_infer(x, *idx, key):
    _check_indices("index_get", idx)
    return TensorType(_result_shape(x.shape, key, [t.shape for t in idx]), x.dtype)


def _index_put_vjp(g, out, base, value, *idx, key, accumulate):
    from . import functions as fn

    if accumulate:
        g_base = g
    else:  # (what was written over does not reach the result)
        zeros = fn.expand(fn.const(0, g.dtype), tuple(value.shape))
        g_base = _dispatch.apply(INDEX_PUT, g, zeros, *idx, key=key, accumulate=False)
    g_value = _dispatch.apply(INDEX_GET, g, *idx, key=key)
    return (g_base, g_value) + (None,) * len(idx)


def _index_get_vjp(g, out, x, *idx, key):
    from . import functions as fn

    zeros = fn.expand(fn.const(0, g.dtype), tuple(x.shape))  # (index_put writes a copy)
    return (_dispatch.apply(INDEX_PUT, zeros, g, *idx, key=key, accumulate=True),) \
        + (None,) * len(idx)


INDEX_PUT = register(
    "index_put", I, -1, _index_put_impl, _index_put_infer, vjp=_index_put_vjp,
    saves=tuple(k + 1 for k in _SAVES), params=("key", "accumulate"), raises=True,
    doc="`base` with `value` written (or, accumulate, added one by one) at an integer-array "
        "key of index tensors, slices and ints, as numpy's x[key] = v / np.add.at on a copy "
        "(repeated indices: the last write wins). Its own value check: an index out of range "
        "raises numpy's IndexError when the program runs, before any state is written.")
INDEX_GET = register(
    "index_get", I, -1, _index_get_impl, _index_get_infer, vjp=_index_get_vjp,
    saves=_SAVES, params=("key",), raises=True,
    doc="x[key] for an integer-array key of index tensors, slices and ints, numpy's rule "
        "(index_put's values gradient). Its own value check, as gather.")


# --------------------------------------------------------------------------------------
# the front end

def _refuse(problem):
    return NotImplementedError(f"item assignment with an index tensor: {problem} (at "
                               f"{user_location()})")


def build_key(t, key, tensor_type):
    """(key param, index tensors, the dims of t its ints select) for ``t[key]`` with at least
    one advanced item: lists, numpy arrays and constant boolean masks become constant index
    tensors, ints slices of one element, the Ellipsis slices; a traced boolean mask or None
    in the key is refused."""
    from . import functions as fn

    items = key if isinstance(key, tuple) else (key,)
    if any(k is None for k in items):
        raise _refuse("None (a new axis) in the key is not supported; index without it")
    real = 0
    for k in items:
        if k is Ellipsis:
            continue
        arr = k if isinstance(k, (tensor_type, np.ndarray)) else None
        real += arr.ndim if arr is not None and arr.dtype == np.bool_ else 1
    if real > t.ndim:
        raise op_error("index", f"too many indices for a {t.ndim}-d tensor", (t,),
                       exc=IndexError)
    if sum(1 for k in items if k is Ellipsis) > 1:
        raise op_error("index", "an index can only have a single ellipsis", (t,),
                       exc=IndexError)
    for d in t.shape:
        if is_dim(d):  # (input_signature's None: a TracingError while tracing)
            d.unknown("x[index tensor] = v or index_put_ on a tensor of a symbolic size")
    out, idx, ints, axis = [], [], [], 0
    for k in items:
        if k is Ellipsis:
            for _ in range(t.ndim - real):
                out.append(("s",) + slice(None).indices(t.shape[axis]))
                axis += 1
            continue
        if isinstance(k, slice):
            out.append(("s",) + k.indices(t.shape[axis]))
            axis += 1
            continue
        if isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)):
            size = t.shape[axis]  # (an int selects first, as in PyTorch: module doc)
            if not -size <= int(k) < size:
                raise op_error("index", f"index {int(k)} is out of bounds for dimension "
                               f"{axis} with size {size}", (t,), exc=IndexError)
            start = int(k) % size
            out.append(("s", start, start + 1, 1))
            ints.append(axis)
            axis += 1
            continue
        if isinstance(k, tensor_type) and k.dtype == np.bool_:
            # (a mask made before the call: its contents are guarded; one computed inside:
            # the tracer's TracingError, as its values decide where the values go)
            k = k.numpy()
        if isinstance(k, tensor_type):
            tensors = [k]
        else:
            arr = np.asarray(k)
            if arr.dtype == np.bool_:
                tensors = [fn.const(np.ascontiguousarray(i, np.int64), np.int64)
                           for i in np.nonzero(arr)]
            elif arr.dtype.kind in "iu" or arr.size == 0:
                tensors = [fn.const(np.array(arr, np.int64), np.int64)]
            else:
                raise op_error("index", f"index arrays must be integer or bool, got "
                               f"{arr.dtype}", exc=IndexError)
        for ti in tensors:
            out.append(("t", len(idx)))
            idx.append(ti)
            axis += 1
    return tuple(out), idx, tuple(ints)


def _shapes(t, kparam, idx, ints) -> tuple:
    """(numpy's shape of t[key], PyTorch's: without the ints' unit axes)."""
    shape = _result_shape(t.shape, kparam, [ti.shape for ti in idx])
    drop = _int_axes(t.shape, kparam, [ti.shape for ti in idx], ints)
    return shape, tuple(n for a, n in enumerate(shape) if a not in drop)


def index_put_value(t, key, value, accumulate, tensor_type):
    """t's new value for ``t[key] = value`` (or index_put with `accumulate`): the
    `index_put` row applied to t's current value."""
    from . import functions as fn

    kparam, idx, ints = build_key(t, key, tensor_type)
    if not isinstance(value, tensor_type):  # (a number, a list, an array: in t's dtype, as
        value = fn.const(np.asarray(value), t.dtype)  # numpy's write takes it eagerly)
    if value.dtype != t.dtype:
        value = fn.cast(value, t.dtype)  # as in PyTorch: the target's dtype wins
    shape, torch_shape = _shapes(t, kparam, idx, ints)
    while value.ndim > len(torch_shape) and value.shape[0] == 1:
        value = fn.reshape(value, value.shape[1:])
    value = fn.expand(value, torch_shape)
    if torch_shape != shape:
        value = fn.reshape(value, shape)
    return _dispatch.apply(INDEX_PUT, t._snapshot(), value, *idx, key=kparam,
                           accumulate=bool(accumulate))


def put_into(t, key, value, accumulate, tensor_type) -> None:
    """The eager write into t's memory (no trace, no autograd): `_put` on t's array."""
    kparam, idx, ints = build_key(t, key, tensor_type)
    shape, torch_shape = _shapes(t, kparam, idx, ints)
    data = value._data if isinstance(value, tensor_type) else np.asarray(value)
    data = data.astype(t.dtype, copy=False)
    while data.ndim > len(torch_shape) and data.shape[0] == 1:
        data = data.reshape(data.shape[1:])
    data = np.broadcast_to(data, torch_shape).reshape(shape)
    _put(t._data, kparam, [ti._data for ti in idx], data, accumulate)


__all__ = ["INDEX_GET", "INDEX_PUT", "build_key", "index_put_value", "put_into"]
