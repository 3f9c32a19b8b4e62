"""Value types the registry, the tracer and codegen share: `TensorType` (shape and dtype of
a value) and `Dim` (a symbolic dimension size of a @function's input_signature)."""
from __future__ import annotations

import numpy as np

from . import dtypes


class Dim:
    """A symbolic dimension size: a `None` of a @function's input_signature.

    It stands for a size that is bound at every call, so it has no value while tracing:
    it is hashable and compared by identity (`N0 == N0`, `N0 != 1`, `N0 != N1`), prints as
    its name, and anything that needs its value (`int()`, arithmetic, ordering) raises
    through `unknown` (the tracer's subclass raises `tracer.TracingError` naming the
    user's line).  Shape rules pass Dims through where an op does not care about the size.
    """

    __slots__ = ("name", "label")

    def __init__(self, name: str, label: str | None = None):
        self.name = name     # an identifier (generated kernels name their size arguments so)
        self.label = label   # what the user called it (a string in an input_signature)

    def __repr__(self) -> str:
        return self.name

    @property
    def display(self) -> str:
        """How IR printouts and messages show it: the user's name if it has one."""
        return self.label or self.name

    __str__ = __repr__

    def unknown(self, what: str):
        raise ValueError(f"{what} needs the value of the symbolic dimension {self.display}, "
                         f"which is only known at run time")

    def _arith(self, other=None):
        self.unknown(f"arithmetic on a symbolic dimension ({self.display} with {other!r})")

    def __int__(self):
        self.unknown(f"int({self.display})")

    def __index__(self):
        self.unknown(f"using the symbolic dimension {self.display} as an integer")

    def __float__(self):
        self.unknown(f"float({self.display})")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _arith
    __floordiv__ = __rfloordiv__ = __truediv__ = __rtruediv__ = __mod__ = __rmod__ = _arith
    __lt__ = __le__ = __gt__ = __ge__ = _arith
    __neg__ = _arith


def is_dim(d) -> bool:
    return isinstance(d, Dim)


def has_dims(shape) -> bool:
    for d in shape:
        if isinstance(d, Dim):
            return True
    return False


def symbolic_size(shape) -> tuple:
    """(product of the concrete sizes, the Dims with multiplicity as sorted ids): two shapes
    hold the same number of elements for every binding iff these agree (or both have a 0)."""
    n = 1
    dims = []
    for d in shape:
        if isinstance(d, Dim):
            dims.append(id(d))
        else:
            n *= d
    return n, tuple(sorted(dims))


class TensorType:
    """Shape and dtype of a value. Dimensions are ints, or `Dim`s for symbolic sizes.

    A plain slotted class rather than a frozen dataclass: autograd makes one per recorded
    input, so construction cost matters. Treat instances as immutable.
    """

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: tuple, dtype: np.dtype):
        self.shape = shape
        self.dtype = dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __eq__(self, other) -> bool:
        return (isinstance(other, TensorType) and tuple(self.shape) == tuple(other.shape)
                and self.dtype == other.dtype)

    def __hash__(self) -> int:
        return hash((tuple(self.shape), self.dtype))

    def __repr__(self) -> str:
        return f"TensorType({tuple(self.shape)}, {self.dtype})"

    def __str__(self) -> str:
        name = dtypes.SHORT_NAMES.get(self.dtype, str(self.dtype))
        return f"{name}[{','.join(getattr(d, 'display', None) or str(d) for d in self.shape)}]"
