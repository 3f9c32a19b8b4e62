"""`Tensor.view(dtype)`: the same bytes read as another dtype (PyTorch's rules).

Same itemsize: the shape is kept.  A different itemsize scales the last dimension by the
ratio of the sizes; PyTorch then asks the last dimension to be contiguous (stride 1) and,
going to a wider dtype, its size and the other strides to be divisible by the ratio.  As in
PyTorch the result is a view: it aliases the source (x.view(eager.int32)[0] = 0 writes x).
Inside a trace a write through it is the inverse view of the written value (tracer/views.py);
compiled programs copy it."""
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
    dtype = dtypes.canonical(dtype)
    if a.dtype.itemsize != dtype.itemsize and a.ndim and a.shape[-1] != 1 and \
            a.strides[-1] != a.itemsize:
        # (eager checked the layout first, view_dtype(); a compiled program's array may be
        # laid out otherwise than eager's: its values are what count there)
        a = np.ascontiguousarray(a)
    return a.view(dtype)


def check_view_strides(shape, strides, src, dst, operands=()):
    """PyTorch's layout rules for viewing `src` elements (element `strides`) as a `dst` of
    another itemsize: RuntimeError where PyTorch raises one (numpy would copy or refuse)."""
    if len(shape) and shape[-1] != 1 and strides[-1] != 1:
        raise op_error("view", f"self.stride(-1) must be 1 to view {src} as {dst} (different "
                       f"element sizes), but got {strides[-1]}", operands,
                       hint="call .contiguous() first", exc=RuntimeError)
    if dst.itemsize > src.itemsize:
        ratio = dst.itemsize // src.itemsize
        for d, (size, stride) in enumerate(zip(shape[:-1], strides[:-1])):
            if size != 1 and stride % ratio:
                raise op_error("view", f"self.stride({d}) must be divisible by {ratio} to "
                               f"view {src} as {dst} (different element sizes), but got "
                               f"{stride}", operands, hint="call .contiguous() first",
                               exc=RuntimeError)


def view_dtype(x, dtype):
    """`x.view(dtype)`: PyTorch's layout rules checked on x's memory (eagerly; a trace checks
    its layout when it links the view, tracer/views.py), then the view."""
    from .dispatch import apply

    dtype = dtypes.canonical(dtype)
    data = x._data
    if data.__class__ is np.ndarray and data.dtype.itemsize != dtype.itemsize:
        _view_shape(tuple(data.shape), data.dtype, dtype, (x,))
        check_view_strides(tuple(data.shape), tuple(s // data.itemsize for s in data.strides),
                           data.dtype, dtype, (x,))
    return apply(VIEW_DTYPE, x, dtype=dtype)


VIEW_DTYPE = register("view_dtype", S, 1, _impl, _infer, params=("dtype",), view=True,
                      doc="The same bytes read as `dtype` (Tensor.view(dtype)): a view; not "
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
    "float": _converter(dtypes.float32, "float"),
    "double": _converter(dtypes.float64, "double"),
    "long": _converter(dtypes.int64, "long"),
    "int": _converter(dtypes.int32, "int"),
    "bool": _converter(dtypes.bool_, "bool"),
    "type_as": lambda self, other: _cast(self, other.dtype),
    "half": _converter(dtypes.float16, "half"),
    "short": _converter(dtypes.int16, "short"),
    "byte": _converter(dtypes.uint8, "byte"),
    "char": _converter(dtypes.int8, "char"),
    "bfloat16": _converter(dtypes.bfloat16, "bfloat16"),
    "type": type_,
    "__format__": format_,
}
