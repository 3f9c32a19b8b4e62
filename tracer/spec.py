"""`tracer.TensorSpec`: the shape and dtype an argument of a `tracer.function` with an
input_signature must have (moved unchanged out of tracer/function.py)."""
from __future__ import annotations

from eager.tensor import Tensor


class TensorSpec:
    """Shape and dtype an argument must have; `None` marks a dimension that may vary.

    A varying dimension is symbolic in the trace (`f32[N0,4]`), so one trace serves every
    size (see tracer.symbolic). Each `None` is its own symbol; a dimension named by a string
    instead is one symbol wherever that name appears, and calls must agree on its size:

    >>> @function(input_signature=[TensorSpec((None, 4), eager.float32)])
    ... def f(x): ...
    >>> @function(input_signature=[TensorSpec(("batch", 4)), TensorSpec(("batch",))])
    ... def loss(x, y): ...
    """

    def __init__(self, shape, dtype=None, name=None):
        from eager import dtypes

        self.shape = tuple(shape)
        self.dtype = dtypes.canonical(dtype) if dtype is not None else dtypes.float32
        self.name = name

    def matches(self, t: Tensor) -> bool:
        shape = t.shape
        return (len(shape) == len(self.shape) and t.dtype == self.dtype
                and all(s is None or isinstance(s, str) or s == d
                        for s, d in zip(self.shape, shape)))

    def __repr__(self):
        dims = ",".join("None" if d is None else repr(d) if isinstance(d, str) else str(d)
                        for d in self.shape)
        return f"TensorSpec(({dims}), {self.dtype})"
