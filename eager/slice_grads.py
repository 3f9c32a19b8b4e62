"""Gradients assembled from slices: the backward of unbind, chunk, split and of any other
set of basic-index reads of one tensor (an RNN's time steps, an LSTM's four gates).

The vjp of `x[index]` is zeros of x's shape with `g` written at `index` (scatter_slice).
Added up piece by piece, T slices of one tensor cost T full-size zero arrays and T - 1
full-size additions: O(T^2) memory traffic (W10, 35 time steps: a fifth of its step).
PyTorch's unbind/split backward is one stack/cat instead. So autograd keeps a tensor's
pieces apart (`Piece`, for an op whose row has `slice_grad`) until every contribution to
that tensor has arrived, then `total` writes pieces that lie along one dim without overlap
with ONE `cat` (zeros where no piece is), and adds any other contributions to that. Which
pieces lie where is known from the shapes and indices alone, so a trace records the same
ops eagerly and compiled. Pieces that do not fit (overlapping, strided, along several dims,
of a symbolic size) are added up as before, in the order they arrived, as is a single one.
"""
from __future__ import annotations

from . import functions as F


class Piece:
    """A gradient contribution of a tensor of `shape`: zeros, with `g` at basic `index`."""

    __slots__ = ("g", "shape", "index")

    def __init__(self, g, shape, index):
        self.g, self.shape, self.index = g, tuple(shape), tuple(index)

    def full(self):
        return F.scatter_slice(self.g, self.shape, self.index)


class Pending(list):
    """Contributions to one tensor's gradient (Tensors and Pieces), in arrival order."""


def add(prev, g):
    """`prev` (a Tensor, a Piece or Pending) with contribution `g` added to it."""
    if isinstance(prev, Pending):
        prev.append(g)
        return prev
    if not isinstance(prev, Piece) and not isinstance(g, Piece):
        return F.add(prev, g)
    return Pending([prev, g])


def total(value):
    """The Tensor a gradient entry stands for (None stays None)."""
    if isinstance(value, Piece):
        return value.full()
    if not isinstance(value, Pending):
        return value
    pieces = [c for c in value if isinstance(c, Piece)]
    joined = _join(pieces) if len(pieces) > 1 else None
    if joined is None:
        # (added up in arrival order, each piece a full-size array: what it always was)
        out = None
        for c in value:
            c = c.full() if isinstance(c, Piece) else c
            out = c if out is None else F.add(out, c)
        return out
    out = joined
    for c in value:
        if not isinstance(c, Piece):
            out = F.add(out, c)
    return out


def _join(pieces):
    """One `cat` of `pieces` (all of one tensor) along the one dim they split, zeros in the
    gaps; None when they are not such pieces."""
    shape = pieces[0].shape
    if not all(type(d) is int for d in shape):
        return None
    spans = []
    axis = None
    for p in pieces:
        if p.shape != shape or p.g.dtype != pieces[0].g.dtype:
            return None
        span = _span(p.index, shape)
        if span is None:
            return None
        k, start, stop = span
        if axis is not None and k != axis:
            return None
        axis = k
        spans.append((start, stop, p))
    spans.sort(key=lambda t: t[0])
    parts = []
    at = 0
    for start, stop, p in spans:
        if start < at:
            return None  # overlapping pieces: their sum, not a cat
        if start > at:
            parts.append(_zeros(shape, axis, stop=start, start=at, like=p.g))
        region = shape[:axis] + (stop - start,) + shape[axis + 1:]
        parts.append(F.reshape(p.g, region))
        at = stop
    if at < shape[axis]:
        parts.append(_zeros(shape, axis, stop=shape[axis], start=at, like=spans[0][2].g))
    return F.cat(parts, axis) if len(parts) > 1 else parts[0]


def _span(index, shape):
    """(dim, start, stop) of the region a basic `index` selects when it is all of `shape`
    but a run of consecutive positions along one dim (None otherwise)."""
    dim = 0
    found = None
    for item in index:
        if item is None:  # (a new axis of g: no dim of the tensor)
            continue
        size = shape[dim]
        if isinstance(item, tuple):
            start, stop, step = slice(*item).indices(size)
            n = len(range(start, stop, step))
            if n == size and step == 1:
                dim += 1
                continue
            if step != 1 and n > 1:
                return None
            region = (dim, start, start + n) if n else None
        else:
            i = item + size if item < 0 else item
            region = (dim, i, i + 1)
        if found is not None or region is None:
            return None
        found = region
        dim += 1
    return found


def _zeros(shape, axis, start, stop, like):
    region = shape[:axis] + (stop - start,) + shape[axis + 1:]
    return F.expand(F.const(0, like.dtype), region)
