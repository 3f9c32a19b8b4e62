"""Creation: tensor, from_numpy, zeros, ones, full, arange, eye, rand, randn ..."""
from __future__ import annotations

import builtins

import numpy as np

from .. import dispatch as _dispatch
from .. import dtypes
from ..dispatch import apply
from ..errors import describe, op_error
from ..ops import OPS, has_dims
from .shapes import _first_dim, _shape_arg, _shape_text

Tensor = None  # bound by eager/__init__.py

__all__ = [
    "arange",
    "eye",
    "from_numpy",
    "full",
    "full_like",
    "linspace",
    "ones",
    "ones_like",
    "rand",
    "rand_like",
    "randint",
    "randn",
    "randn_like",
    "tensor",
    "zeros",
    "zeros_like",
]


# --------------------------------------------------------------------------------------
# creation

def _dtype_of_data(data):
    # numpy scalars (np.float64(1.0), a 0-d result of array arithmetic) keep their dtype like
    # arrays do, as in torch.tensor; only Python numbers and lists get the defaults
    if isinstance(data, (np.ndarray, np.generic)):
        return dtypes.canonical(data.dtype)
    arr = np.asarray(data)
    if dtypes.is_floating(arr.dtype):
        return dtypes.default_float()
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
    return dtypes.canonical(dtype) if dtype is not None else (default or dtypes.default_float())


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
        is_float = builtins.any(isinstance(v, (float, np.floating)) for v in (start, end, step))
        dtype = dtypes.default_float() if is_float else dtypes.DEFAULT_INT
    return _make(np.arange(start, end, step).astype(dtypes.canonical(dtype)), requires_grad)


def linspace(start, end, steps, dtype=None):
    return _make(np.linspace(start, end, steps).astype(_creation_dtype(dtype)), False)


def eye(n, m=None, dtype=None, requires_grad=False):
    return _make(np.eye(n, m, dtype=_creation_dtype(dtype)), requires_grad)


def rand(*shape, dtype=None, requires_grad=False, generator=None):
    dtype = _creation_dtype(dtype)
    if generator is not None:
        return _own_draw(generator, "rand", OPS["uniform"], requires_grad,
                         shape=_shape_arg(shape), dtype=dtype)
    t = apply(OPS["uniform"], shape=_shape_arg(shape), dtype=dtype)
    return t.requires_grad_(True) if requires_grad else t


def randn(*shape, dtype=None, requires_grad=False, generator=None):
    dtype = _creation_dtype(dtype)
    if generator is not None:
        return _own_draw(generator, "randn", OPS["normal"], requires_grad,
                         shape=_shape_arg(shape), dtype=dtype)
    t = apply(OPS["normal"], shape=_shape_arg(shape), dtype=dtype)
    return t.requires_grad_(True) if requires_grad else t


def randint(low, high=None, size=None, dtype=None, generator=None):
    if high is None:
        low, high = 0, low
    if size is None:
        raise op_error("randint", "size is required, e.g. randint(0, 10, (3,))", exc=TypeError)
    dtype = _creation_dtype(dtype, dtypes.DEFAULT_INT)
    params = dict(shape=_shape_arg((size,)), dtype=dtype, low=int(low), high=int(high))
    if generator is not None:
        return _own_draw(generator, "randint", OPS["randint"], False, **params)
    return apply(OPS["randint"], **params)


def _own_draw(generator, op, random_op, requires_grad, **params):
    """`random_op`'s draw from `generator` (an eager.Generator) instead of the global one,
    advancing its state as the global draw would. Eager only: inside a trace the draw would
    be frozen into it (and the generator's state would not advance at each call)."""
    from .. import random

    if _dispatch.tracing():
        raise op_error(op, "generator= inside a @tracer.function is not supported: the draws "
                       "of a generator of one's own are not traced", hint="use the global "
                       "generator (eager.manual_seed) in compiled code, or draw outside the "
                       "function and pass the tensor in", exc=RuntimeError)
    drawn = random_op.impl(**params, rng=random.numpy_generator(generator))
    return _make(np.asarray(drawn).astype(params["dtype"], copy=False), requires_grad)


def rand_like(x):
    return rand(x.shape, dtype=x.dtype)


def randn_like(x):
    return randn(x.shape, dtype=x.dtype)

