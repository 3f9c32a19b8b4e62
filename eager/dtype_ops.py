"""`Tensor.view(dtype)`: the same bytes read as another dtype (PyTorch's rules).

Same itemsize: the shape is kept.  A different itemsize scales the last dimension by the
ratio of the sizes; PyTorch then asks the last dimension to be contiguous and, going to a
wider dtype, its size to be divisible by the ratio (we copy to contiguous first, values
are the same).  Unlike PyTorch the result is a copy, not an alias of the source."""
from __future__ import annotations

import numpy as np

from . import dtypes
from .errors import op_error
from .ops import TensorType, register

S = "shape"


def _view_shape(shape, src, dst, operands=()):
    if src.itemsize == dst.itemsize:
        return tuple(shape)
    if not shape:
        raise op_error("view", f"a 0-d tensor of {src} cannot be viewed as {dst}: the "
                       f"itemsizes differ ({src.itemsize} and {dst.itemsize} bytes)",
                       operands, hint="view a tensor of at least one dimension", exc=RuntimeError)
    last = shape[-1]
    if dst.itemsize > src.itemsize:
        ratio = dst.itemsize // src.itemsize
        if not isinstance(last, int) or last % ratio:
            raise op_error("view", f"the last dimension ({last}) of a {src} tensor must be "
                           f"divisible by {ratio} to view it as {dst}", operands,
                           hint="pad or slice the last dimension first", exc=RuntimeError)
        return tuple(shape[:-1]) + (last // ratio,)
    return tuple(shape[:-1]) + (last * (src.itemsize // dst.itemsize),)


def _infer(a, dtype):
    dtype = dtypes.canonical(dtype)
    return TensorType(_view_shape(tuple(a.shape), a.dtype, dtype), dtype)


def _impl(a, dtype):
    # a copy: eager and compiled calls then agree (no aliasing of the source's memory)
    return np.array(a, order="C").view(dtype)


VIEW_DTYPE = register("view_dtype", S, 1, _impl, _infer, params=("dtype",),
                      doc="The same bytes read as `dtype` (Tensor.view(dtype)); not "
                          "differentiable.")
