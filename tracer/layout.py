"""Eager's memory layout of traced values, for `Tensor.view` inside a trace.

`x.view(shape)` raises in eager when `x`'s strides cannot express the new shape without a
copy (PyTorch's rule: a copy would silently drop writes through the "view"). A traced value
has no strides, so the trace rebuilds them: each value gets a *witness*, a numpy array of
its shape with the strides eager's array would have (over a one-byte buffer, never read),
made by applying the same view ops numpy applies eagerly. Values that are not views (the
result of arithmetic, a reduction, a copy) and the function's inputs count as C-ordered,
as fresh numpy results mostly are.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from eager.ops import has_dims, numpy_index

from .ir import Var

_BUFFER = np.zeros(1, np.int8)


def _c_witness(shape) -> np.ndarray:
    strides = []
    step = 1
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return as_strided(_BUFFER, shape=tuple(shape), strides=tuple(reversed(strides)),
                      writeable=False)


def _view_witness(op: str, w: np.ndarray, params: dict):
    """The witness of a view op's result, or None where eager's result is a fresh array."""
    if op == "permute":
        return np.transpose(w, params["perm"])
    if op == "getitem":
        return w[numpy_index(params["index"])]
    if op == "broadcast_to":
        return np.broadcast_to(w, params["shape"])
    if op == "reshape":
        try:
            return np.reshape(w, params["shape"], copy=False)
        except ValueError:  # numpy copies: a fresh, C-ordered array
            return None
    if op == "stop_gradient":
        return w
    return None


def witness(trace, var) -> np.ndarray | None:
    """`var`'s witness (None for symbolic shapes: layout unknown, taken as C-ordered)."""
    if has_dims(var.type.shape):
        return None
    memo = trace.__dict__.setdefault("_layout_memo", {})
    found = memo.get(id(var))
    if found is not None:
        return found[1]
    producer = None
    for e in reversed(trace.eqns):
        if e.out is var:
            producer = e
            break
    w = None
    if producer is not None and producer.inputs and isinstance(producer.inputs[0], Var):
        src = witness(trace, producer.inputs[0])
        if src is not None:
            w = _view_witness(producer.op, src, producer.params)
    if w is None:
        w = _c_witness(var.type.shape)
    memo[id(var)] = (var, w)  # (var kept alive so its id stays unique)
    return w


def view_needs_copy(trace, var, shape) -> bool:
    """Whether eager's reshape of `var` to `shape` copies (so a view must raise)."""
    w = witness(trace, var)
    if w is None or has_dims(shape):
        return False
    try:
        np.reshape(w, tuple(shape), copy=False)
    except ValueError:
        return True
    return False


def is_c_contiguous(trace, var) -> bool:
    w = witness(trace, var)
    return w is None or w.flags.c_contiguous
