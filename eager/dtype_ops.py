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


# --------------------------------------------------------------------------------------
# Tensor's dtype methods (bound to eager.Tensor by eager/tensor.py)

_TYPE_BY_NAME = {name: dt for dt, name in dtypes.TYPE_NAMES.items()}  # Tensor.type('...')


def _cast(x, dtype):
    from .functions.elementwise import cast

    return cast(x, dtype)


def _converter(dtype, name):
    def convert(self):
        return _cast(self, dtype)
    convert.__name__ = convert.__qualname__ = name
    convert.__doc__ = f"The tensor as {dtype} (Tensor.to({dtype}))."
    return convert


def type_(self, dtype=None):
    """`t.type()`: the 'eager.FloatTensor'-style name (PyTorch's 'torch.' ones); `t.type(dtype)`
    (a dtype or such a name): the tensor cast to it."""
    if dtype is None:
        return "eager." + dtypes.TYPE_NAMES[self.dtype]
    if isinstance(dtype, str) and dtype.split(".")[-1] in _TYPE_BY_NAME:
        dtype = _TYPE_BY_NAME[dtype.split(".")[-1]]
    return _cast(self, dtype)


def format_(self, spec: str) -> str:
    """As PyTorch: a 0-d tensor formats its item; any other is str(t) with an empty spec and
    raises TypeError with a non-empty one."""
    if self.ndim == 0:
        return format(self.item(), spec)
    return object.__format__(self, spec)


def is_floating_point(self) -> bool:
    return dtypes.is_floating(self.dtype)


def element_size(self) -> int:
    """Bytes per element (Tensor.element_size(), .itemsize)."""
    return self.dtype.itemsize


def promote_types(a, b) -> np.dtype:
    """torch.promote_types: the dtype two tensor dtypes promote to (eager/dtypes.py's table)."""
    return dtypes.promote(dtypes.canonical(a), dtypes.canonical(b))


def result_type(a, b) -> np.dtype:
    """torch.result_type: the dtype of an arithmetic op on `a` and `b` (tensors or Python
    numbers; a number or 0-d tensor decides it only from a higher category)."""
    from .functions.elementwise import _result_dtype, as_tensor

    return _result_dtype(as_tensor(a, "result_type"), as_tensor(b, "result_type"))


TENSOR_METHODS = {
    "is_floating_point": is_floating_point,
    "element_size": element_size,
    "itemsize": property(element_size),
    "half": _converter(dtypes.float16, "half"),
    "short": _converter(dtypes.int16, "short"),
    "byte": _converter(dtypes.uint8, "byte"),
    "char": _converter(dtypes.int8, "char"),
    "bfloat16": _converter(dtypes.bfloat16, "bfloat16"),
    "type": type_,
    "__format__": format_,
}
