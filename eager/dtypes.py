"""dtypes and PyTorch-style type promotion.

dtypes are plain numpy dtypes.  Promotion follows PyTorch, not NumPy:

* categories are ordered bool < integer < floating; a higher category wins;
* inside one category the result is PyTorch's `torch.promote_types` table, written out
  as data below (`_PROMOTION`): the wider dtype wins, uint8 with int8 gives int16,
  float16 with a wider float gives the wider one, float16 with bfloat16 gives float32;
  uint16/uint32/uint64 promote only with themselves and with floating dtypes (PyTorch
  refuses the rest, so do we);
* a 0-d tensor or a Python scalar only decides the dtype when it is of a
  higher category than the tensor it meets (float32 tensor + 2.0 -> float32,
  int64 tensor + 2.5 -> float32, the default float dtype).

Storage types: bool, uint8, int8, int16, int32, int64, uint16, uint32, uint64,
float16, bfloat16, float32, float64.  bfloat16 is `ml_dtypes.bfloat16` (the numpy dtype JAX
uses; its numpy kind is "V", not "f": test floating dtypes with `is_floating`, never
``dtype.kind == "f"``).  The half types (`HALF`, each with its `COMPUTE` dtype) are storage
only, as in PyTorch's CPU kernels: every op that computes (registry rows with ``opmath``)
reads them as float32, computes and accumulates (sums, matmul) in float32 and rounds the
result once to the half type.  Integer overflow wraps (two's complement, as PyTorch and numpy);
float -> int casts truncate toward zero; NaN or out-of-range float -> int is
undefined in PyTorch and gives numpy's result here (INT_MIN on x86 for int32/int64).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

bool_ = np.dtype(np.bool_)
uint8 = np.dtype(np.uint8)
int8 = np.dtype(np.int8)
int16 = np.dtype(np.int16)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
uint16 = np.dtype(np.uint16)
uint32 = np.dtype(np.uint32)
uint64 = np.dtype(np.uint64)
float16 = np.dtype(np.float16)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)

# PyTorch's alias names (eager/__init__.py also binds eager.float, eager.int, eager.bool)
half, double, short, long = float16, float64, int16, int64

DEFAULT_FLOAT = float32  # (the start value; read the current one with default_float())
DEFAULT_INT = int64


class _Defaults(dict):
    """The default float dtype (eager.set_default_dtype), read through
    eager.dispatch.read_item so that a trace that used it is guarded by it."""

    name = "the default dtype (eager.set_default_dtype)"


DEFAULTS = _Defaults(float=float32)
READ_DEFAULT = [None]  # eager.dispatch.read_item (installed by eager.dispatch)


def default_float() -> np.dtype:
    """The dtype of Python floats, float factories and nn parameters: float32 unless
    eager.set_default_dtype changed it."""
    read = READ_DEFAULT[0]
    return DEFAULTS["float"] if read is None else read(DEFAULTS, "float")


def set_default_dtype(dtype) -> None:
    """Make `dtype` (a floating dtype) the default of Python floats, float factories and
    new nn layers, as torch.set_default_dtype; compiled functions that used the default
    trace again."""
    d = canonical(dtype)
    if d not in FLOATING:
        raise TypeError(f"only floating-point types are supported as the default type, got "
                        f"{d}")
    dict.__setitem__(DEFAULTS, "float", d)


def get_default_dtype() -> np.dtype:
    return default_float()

SUPPORTED = (bool_, uint8, int8, int16, int32, int64, uint16, uint32, uint64,
             float16, bfloat16, float32, float64)

# The half types: storage only; ops compute on them in their COMPUTE dtype and round the
# result once (registry rows with opmath, eager.ops; compiled programs run those rows' impls
# as numpy steps, codegen.program)
COMPUTE = {float16: float32, bfloat16: float32}
HALF = frozenset(COMPUTE)
FLOATING = frozenset((float16, bfloat16, float32, float64))

SHORT_NAMES = {bool_: "bool", uint8: "u8", int8: "i8", int16: "i16", int32: "i32",
               int64: "i64", uint16: "u16", uint32: "u32", uint64: "u64", float16: "f16",
               bfloat16: "bf16", float32: "f32", float64: "f64"}

# Tensor.type() names, PyTorch's with 'eager.' for 'torch.'
TYPE_NAMES = {bool_: "BoolTensor", uint8: "ByteTensor", int8: "CharTensor",
              int16: "ShortTensor", int32: "IntTensor", int64: "LongTensor",
              uint16: "UInt16Tensor", uint32: "UInt32Tensor", uint64: "UInt64Tensor",
              float16: "HalfTensor", bfloat16: "BFloat16Tensor", float32: "FloatTensor",
              float64: "DoubleTensor"}

_CATEGORY = {bool_: 0, uint8: 1, int8: 1, int16: 1, int32: 1, int64: 1, uint16: 1,
             uint32: 1, uint64: 1, float16: 2, bfloat16: 2, float32: 2, float64: 2}

# torch.promote_types, as data.  Row and column order is _ORDER; "--" is a pair PyTorch
# refuses ("Promotion for uint16, uint32, uint64 types is not supported").
_ORDER = ("bool", "u8", "i8", "i16", "i32", "i64", "u16", "u32", "u64", "f16", "bf16", "f32",
          "f64")
_TABLE = """
        bool  u8   i8   i16  i32  i64  u16  u32  u64  f16  bf16 f32  f64
  bool  bool  u8   i8   i16  i32  i64  --   --   --   f16  bf16 f32  f64
  u8    u8    u8   i16  i16  i32  i64  --   --   --   f16  bf16 f32  f64
  i8    i8    i16  i8   i16  i32  i64  --   --   --   f16  bf16 f32  f64
  i16   i16   i16  i16  i16  i32  i64  --   --   --   f16  bf16 f32  f64
  i32   i32   i32  i32  i32  i32  i64  --   --   --   f16  bf16 f32  f64
  i64   i64   i64  i64  i64  i64  i64  --   --   --   f16  bf16 f32  f64
  u16   --    --   --   --   --   --   u16  --   --   f16  bf16 f32  f64
  u32   --    --   --   --   --   --   --   u32  --   f16  bf16 f32  f64
  u64   --    --   --   --   --   --   --   --   u64  f16  bf16 f32  f64
  f16   f16   f16  f16  f16  f16  f16  f16  f16  f16  f16  f32  f32  f64
  bf16  bf16  bf16 bf16 bf16 bf16 bf16 bf16 bf16 bf16 f32  bf16 f32  f64
  f32   f32   f32  f32  f32  f32  f32  f32  f32  f32  f32  f32  f32  f64
  f64   f64   f64  f64  f64  f64  f64  f64  f64  f64  f64  f64  f64  f64
"""
_BY_SHORT = {v: k for k, v in SHORT_NAMES.items()}
_PROMOTION: dict = {}
for _line in _TABLE.strip().splitlines()[1:]:
    _row, *_cells = _line.split()
    for _col, _cell in zip(_ORDER, _cells):
        _PROMOTION[_BY_SHORT[_row], _BY_SHORT[_col]] = _BY_SHORT.get(_cell)
del _line, _row, _cells, _col, _cell


def category(dtype: np.dtype) -> int:
    return _CATEGORY[dtype]


def is_floating(dtype: np.dtype) -> bool:
    """A floating dtype, bfloat16 included (whose numpy kind is "V")."""
    return dtype.kind == "f" or dtype in FLOATING


def finfo(dtype: np.dtype):
    """np.finfo, bfloat16 included (numpy's refuses it: ml_dtypes.finfo)."""
    return ml_dtypes.finfo(dtype) if dtype == bfloat16 else np.finfo(dtype)


def is_integer(dtype: np.dtype) -> bool:
    """An integer dtype, signed or unsigned (not bool)."""
    return dtype.kind in "iu"


def is_unsigned(dtype: np.dtype) -> bool:
    return dtype.kind == "u"


def is_half(dtype: np.dtype) -> bool:
    """float16 or bfloat16: computed in float32 (`COMPUTE`), rounded on store."""
    return dtype in HALF


def canonical(dtype) -> np.dtype:
    """Return the supported numpy dtype for `dtype` (a numpy dtype, type or string)."""
    if dtype is float:
        return default_float()
    if dtype is int:
        return DEFAULT_INT
    if dtype is bool:
        return bool_
    try:
        d = np.dtype(dtype)
    except TypeError:
        _refuse(dtype)
    if d in _CATEGORY:
        return d
    _refuse(d)


def _refuse(d):
    from .errors import user_location

    raise TypeError(
        f"dtype {d} is not supported; tracejit supports bool, uint8, int8, int16, int32, "
        f"int64, uint16, uint32, uint64, float16, bfloat16, float32 and float64 "
        f"(at {user_location()})"
    )


def scalar_dtype(value) -> np.dtype:
    """The dtype PyTorch gives a Python scalar on its own."""
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, (int, np.integer)):
        return DEFAULT_INT
    if isinstance(value, (float, np.floating)):
        return default_float()
    raise TypeError(f"expected a Python number, got {type(value).__name__}")


def promote(a: np.dtype, b: np.dtype) -> np.dtype:
    """Promote two tensor dtypes of equal standing (torch.promote_types)."""
    if a is b or a == b:
        return a
    out = _PROMOTION[a, b]
    if out is None:
        from .errors import user_location

        raise TypeError(
            f"promotion of {a} with {b} is not supported, as in PyTorch (uint16, uint32 and "
            f"uint64 promote only with themselves and floating dtypes): cast one operand "
            f"first, e.g. .long() (at {user_location()})")
    return out


def promote_weak(tensor_dtype: np.dtype, weak_dtype: np.dtype) -> np.dtype:
    """Promote a tensor dtype with a 'weak' one (Python scalar or 0-d tensor)."""
    if _CATEGORY[weak_dtype] > _CATEGORY[tensor_dtype]:
        return weak_dtype
    return tensor_dtype
