"""dtypes and PyTorch-style type promotion.

dtypes are plain numpy dtypes.  Promotion follows PyTorch, not NumPy:

* categories are ordered bool < integer < floating; a higher category wins;
* inside one category the wider dtype wins (int32 + int64 -> int64);
* a 0-d tensor or a Python scalar only decides the dtype when it is of a
  higher category than the tensor it meets (float32 tensor + 2.0 -> float32,
  int64 tensor + 2.5 -> float32, the default float dtype).
"""
from __future__ import annotations

import numpy as np

float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
bool_ = np.dtype(np.bool_)

DEFAULT_FLOAT = float32
DEFAULT_INT = int64

SUPPORTED = (float32, float64, int32, int64, bool_)

SHORT_NAMES = {float32: "f32", float64: "f64", int32: "i32", int64: "i64", bool_: "bool"}

_CATEGORY = {bool_: 0, int32: 1, int64: 1, float32: 2, float64: 2}


def category(dtype: np.dtype) -> int:
    return _CATEGORY[dtype]


def is_floating(dtype: np.dtype) -> bool:
    return dtype.kind == "f"


def canonical(dtype) -> np.dtype:
    """Return the supported numpy dtype for `dtype` (a numpy dtype, type or string)."""
    if dtype is float:
        return DEFAULT_FLOAT
    if dtype is int:
        return DEFAULT_INT
    if dtype is bool:
        return bool_
    d = np.dtype(dtype)
    if d in _CATEGORY:
        return d
    if d.kind == "f":
        return float64 if d.itemsize > 4 else float32
    if d.kind in "iu":
        return int64 if d.itemsize > 4 or d.kind == "u" and d.itemsize == 4 else int32
    from .errors import user_location

    raise TypeError(
        f"dtype {d} is not supported; tracejit supports float32, float64, int32, int64 and bool "
        f"(at {user_location()})"
    )


def scalar_dtype(value) -> np.dtype:
    """The dtype PyTorch gives a Python scalar on its own."""
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, (int, np.integer)):
        return DEFAULT_INT
    if isinstance(value, (float, np.floating)):
        return DEFAULT_FLOAT
    raise TypeError(f"expected a Python number, got {type(value).__name__}")


def promote(a: np.dtype, b: np.dtype) -> np.dtype:
    """Promote two tensor dtypes of equal standing."""
    if a is b or a == b:
        return a
    ca, cb = _CATEGORY[a], _CATEGORY[b]
    if ca != cb:
        return a if ca > cb else b
    return a if a.itemsize >= b.itemsize else b


def promote_weak(tensor_dtype: np.dtype, weak_dtype: np.dtype) -> np.dtype:
    """Promote a tensor dtype with a 'weak' one (Python scalar or 0-d tensor)."""
    if _CATEGORY[weak_dtype] > _CATEGORY[tensor_dtype]:
        return weak_dtype
    return tensor_dtype
