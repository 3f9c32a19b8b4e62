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

from functools import lru_cache

import numpy as np
from numpy.lib.stride_tricks import as_strided

from eager.ops import OPS, has_dims, numpy_index

from .ir import Var

_BUFFER = np.zeros(1, np.int8)


@lru_cache(maxsize=1024)
def _c_witness(shape) -> np.ndarray:
    strides = []
    step = 1
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return as_strided(_BUFFER, shape=tuple(shape), strides=tuple(reversed(strides)),
                      writeable=False)


def _view_witness(op: str, w: np.ndarray, params: dict, src=None):
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
    if OPS[op].view == "strided":  # (diagonal, unfold: numpy's own strided view of w)
        return np.asarray(OPS[op].impl(w, **params))
    if op == "view_dtype" and src is not None:
        return _dtype_witness(w, np.dtype(src), np.dtype(params["dtype"]))
    return None


def _dtype_witness(w, src, dst):
    """x.view(dtype)'s witness: x's strides, the others in the new itemsize's units (eager
    checked the last dim is contiguous)."""
    if src.itemsize == dst.itemsize:
        return w
    if w.ndim == 0 or (w.shape[-1] != 1 and w.strides[-1] != 1):
        return None
    if dst.itemsize > src.itemsize:
        ratio = dst.itemsize // src.itemsize
        if any(s % ratio for s in w.strides[:-1]):
            return None
        shape = w.shape[:-1] + (w.shape[-1] // ratio,)
        strides = tuple(s // ratio for s in w.strides[:-1]) + (1,)
    else:
        ratio = src.itemsize // dst.itemsize
        shape = w.shape[:-1] + (w.shape[-1] * ratio,)
        strides = tuple(s * ratio for s in w.strides[:-1]) + (1,)
    return as_strided(_BUFFER, shape, strides)


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


class _Layouts:
    """Per trace: the producer of each value seen so far, and the witnesses made."""

    def __init__(self):
        self.producer: dict = {}
        self.scanned = 0
        self.memo: dict = {}  # id(Var) -> (Var, witness or None); the Var keeps the id unique

    def index(self, eqns):
        for e in eqns[self.scanned:]:
            if isinstance(e.out, Var):
                self.producer[id(e.out)] = e
        self.scanned = len(eqns)


def _reads(e) -> list:
    """The operands whose layout decides `e`'s result's layout."""
    if e is None:
        return []
    op = OPS.get(e.op)
    if op is None:
        return []
    if op.category == "elementwise" or op.view or op.reduce:
        vars_ = [x for x in e.inputs if isinstance(x, Var)]
        return vars_ if op.category == "elementwise" and not op.view else vars_[:1]
    return []


def _make(e, var, got):
    """The witness of `var` made by `e` from its operands' witnesses `got` (or None)."""
    if has_dims(var.type.shape):
        return None
    w = None
    if e is not None and got and all(g is not None for g in got):
        op = OPS[e.op]
        if not op.view and all(g.flags.c_contiguous for g in got):
            return _c_witness(tuple(var.type.shape))  # the common case: C in, C out
        if op.category == "elementwise" and not op.view:
            w = _astype_witness(got[0]) if e.op == "cast" else \
                _ufunc_witness(var.type.shape, got)
        elif op.reduce:
            w = _reduction_witness(got[0], var.type.shape, tuple(e.params["axes"]),
                                   e.params["keepdim"])
        else:
            w = _view_witness(e.op, got[0], e.params, e.inputs[0].type.dtype)
    return _c_witness(tuple(var.type.shape)) if w is None else w


def witness(trace, var) -> np.ndarray | None:
    """`var`'s witness (None for symbolic shapes: layout unknown, taken as C-ordered).
    Made for the values it depends on first, with a stack (chains can be long)."""
    state = trace.__dict__.get("_layouts")
    if state is None:
        state = trace.__dict__["_layouts"] = _Layouts()
    state.index(trace.eqns)
    memo = state.memo
    stack = [var]
    while stack:
        v = stack[-1]
        if id(v) in memo:
            stack.pop()
            continue
        e = state.producer.get(id(v))
        reads = _reads(e)
        missing = [x for x in reads if id(x) not in memo]
        if missing:
            stack.extend(missing)
            continue
        root = trace._root()
        given = root.input_strides.get(id(v)) if e is None else None
        if e is None and any(v is x for x in root.inputs):
            root.layout_reads.add(id(v))
        if given is not None and not has_dims(v.type.shape):
            # a non-C-contiguous argument, as eager's array is laid out
            memo[id(v)] = (v, as_strided(_BUFFER, shape=tuple(v.type.shape), strides=given[1],
                                         writeable=False))
        else:
            memo[id(v)] = (v, _make(e, v, [memo[id(x)][1] for x in reads]))
        stack.pop()
    return memo[id(var)][1]


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


# ----------------------------------------------------- captured arrays' layouts, per call
def layout_key(data):
    """None for a C-contiguous array (or no array), else its strides: a captured array
    with another key than at trace time fails the trace's guards (its view-or-copy
    decisions read the layout, as eager's do)."""
    if data.__class__ is not np.ndarray or data.flags.c_contiguous:
        return None
    return data.strides


def layout_change(name, was, data) -> str:
    return (f"capture {name}: strides {was or 'C-contiguous'} -> "
            f"{layout_key(data) or 'C-contiguous'}")


class _AnyLayout:
    """Equal to every layout key (a captured .grad: its layout is not checked)."""

    def __ne__(self, other):
        return False


ANY_LAYOUT = _AnyLayout()
