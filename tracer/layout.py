"""Eager's memory layout of traced values, for `Tensor.view` inside a trace.

`x.view(shape)` raises in eager when `x`'s strides cannot express the new shape without a
copy (PyTorch's rule: a copy would silently drop writes through the "view"). A traced value
has no strides, so the trace rebuilds them: each value gets a *witness*, a numpy array of
its shape with the strides eager's array would have (over a one-byte buffer, never read),
made by applying the same view ops numpy applies eagerly. Elementwise results and
reductions follow numpy's order K (as numpy's iterator sorts the axes); other fresh results
(matmul, copies) and the function's inputs and captures count as C-ordered.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from eager.ops import OPS, has_dims, numpy_index

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


def _dense(shape, fastest_first) -> np.ndarray:
    """A dense witness of `shape` whose axes run from fastest (first) to slowest."""
    order = list(reversed(fastest_first))  # slowest first
    base = _c_witness(tuple(shape[i] for i in order))
    return np.transpose(base, tuple(np.argsort(order)))


def _ufunc_witness(shape, operands):
    """numpy's order-K layout of a ufunc result (its iterator's axis sort): iterator axes
    start fastest-first in C order; an axis moves before a faster one only if every operand
    with nonzero strides on both says so (zero strides, from broadcasting, are ambiguous)."""
    ops = [np.broadcast_to(w, shape).strides for w in operands]
    perm = list(range(len(shape)))[::-1]
    for i0 in range(1, len(perm)):
        pos = i0
        ax0 = perm[i0]
        for i1 in range(i0 - 1, -1, -1):
            ax1 = perm[i1]
            ambiguous, swap = True, False
            for st in ops:
                if st[ax0] != 0 and st[ax1] != 0:
                    if abs(st[ax1]) <= abs(st[ax0]):
                        swap = False
                    elif ambiguous:
                        swap = True
                    ambiguous = False
            if not ambiguous:
                if swap:
                    pos = i1
                else:
                    break
        if pos != i0:
            perm.insert(pos, perm.pop(i0))
    return _dense(shape, perm)


def _astype_witness(w):
    """ndarray.astype's layout (order K): axes sorted by decreasing |stride|, stably."""
    slowest = sorted(range(w.ndim), key=lambda i: -abs(w.strides[i]))
    return _dense(w.shape, slowest[::-1])


def _reduction_witness(src, shape, axes, keepdim):
    """numpy's layout for a sum/amax over `axes`: the kept axes in the input's order."""
    if src is None:
        return None
    if axes:
        kept = [i for i in range(src.ndim) if i not in axes]
        src = np.transpose(src, kept + list(axes))[(Ellipsis,) + (0,) * len(axes)]
        if keepdim:
            src = np.expand_dims(src, tuple(axes))
    return _ufunc_witness(shape, [src])


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
    op = OPS.get(producer.op) if producer is not None else None
    if op is not None and op.category == "elementwise" and not op.view:
        operands = [witness(trace, x) for x in producer.inputs if isinstance(x, Var)]
        if operands and all(o is not None for o in operands):
            w = _astype_witness(operands[0]) if producer.op == "cast" else \
                _ufunc_witness(var.type.shape, operands)
    elif op is not None and producer.op in ("sum", "amax") and isinstance(producer.inputs[0],
                                                                        Var):
        w = _reduction_witness(witness(trace, producer.inputs[0]), var.type.shape,
                               tuple(producer.params["axes"]), producer.params["keepdim"])
    elif op is not None and producer.inputs and isinstance(producer.inputs[0], Var):
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
