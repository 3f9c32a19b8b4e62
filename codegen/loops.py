"""The loops of a fused kernel: which counts its code runs, and how each loop index
reaches the arrays (emit.py writes the loops). The fewer and larger the counts, the less
code there is to compile and the more kernels share it: a batch of any size or layout is
one loop count, which the code takes as a run-time value (emit.DYNAMIC_DOC), so that a
training step at another batch size compiles no new kernel.
"""
from __future__ import annotations

import math

from eager.ops import OPS, Dim
from tracer.ir import Var

from .fuse import KernelGroup
from .kernel_source import Aff, KernelSource, _view_index
from .lower import needs_positions


def _loops(ks: KernelSource, group: KernelGroup):
    """(loop variables, loop shape, index) of an elementwise group. When every value it
    reads or writes is either 0-d or of the group's full shape and read directly (no view,
    no broadcast), element k of each is at flat offset k: one loop over all elements
    instead of a nest (simpler index arithmetic, a single vectorized loop without a
    remainder per row, and less for Numba to compile). When besides those it reads values
    of the shape's trailing dims from some axis k on (a bias: (35, 10, 512) + (512,)), two
    loops: rows (the leading dims, merged: a batch of any layout is one count, taken as an
    argument) and the trailing elements, at row * inner + i1 and i1."""
    shape = tuple(group.shape)
    names = [f"i{k}" for k in range(len(shape))]
    full = [Aff.var(v) for v in names]
    if len(shape) < 2 or _symbolic(shape):
        return names, shape, full
    if any(needs_positions(e.op) for e in group.members):
        return names, shape, full  # its expression reads the row and column indices
    if any(tuple(e.out.type.shape) not in ((), shape) for e in group.members):
        return names, shape, full
    trailing = set()  # the axes k from which inputs hold shape[k:]
    for _, _, xs in _outside_reads(ks, group):
        if xs is None:
            return names, shape, full
        if xs not in ((), shape):
            # (exactly the trailing dims: a size-1 dim would broadcast differently)
            if not xs or shape[len(shape) - len(xs):] != xs:
                return names, shape, full
            trailing.add(len(shape) - len(xs))
    if any(tuple(v.type.shape) != shape for v in group.outputs):
        return names, shape, full
    if len(trailing) > 1:
        return names, shape, full
    if trailing:
        k = trailing.pop()
        rows, inner = math.prod(shape[:k]), math.prod(shape[k:])
        # (leading dims 0, then the row at axis k - 1 (stride `inner`), the element last)
        idx = [Aff(0)] * (k - 1) + [Aff.var("i0")] + [Aff(0)] * (len(shape) - k - 1) \
            + [Aff.var("i1")]
        return ["i0", "i1"], (rows, inner), idx
    # The last index is the flat offset; leading ones are 0, so any flat index renders as
    # just the loop variable.
    return ["i0"], (math.prod(shape),), [Aff(0)] * (len(shape) - 1) + [Aff.var("i0")]


def _outside_reads(ks: KernelSource, group: KernelGroup):
    """(member, input, shape) of every tensor the members of `group` read from outside it;
    shape None when that input is not read at its own flat offsets (a view that moves
    elements), which rules out merged loops."""
    members = {id(e.out) for e in group.members}
    for e in group.members:
        for x in e.inputs:
            if not isinstance(x, Var) or id(x) in members:
                continue
            yield e, x, (tuple(x.type.shape) if _read_flat(ks, x) else None)


def _read_flat(ks: KernelSource, x) -> bool:
    """Whether input `x` is read at its own flat offsets: an array, or a reshape that
    merges or splits dims of one (the same flat offset in its contiguous base)."""
    e = ks.part.views.get(id(x))
    return e is None or _view_index(e, e.inputs[0].type.shape,
                                    [Aff(0)] * len(x.type.shape)) is None


def _col_loops(ks: KernelSource, loop_vars, idx):
    """(loop variables, loop shape, index) of a col kernel: its reduced leading dims as one
    loop (a batch of any layout is one count, taken as an argument), when every value it
    reads is 0-d, of its full shape read at its own flat offsets, or of trailing kept dims;
    else the nest over its shape."""
    g = ks.group
    shape, split = tuple(g.shape), g.split
    if split < 2 or _symbolic(shape) or any(needs_positions(e.op) for e in g.members):
        return loop_vars, shape, idx
    if any(not _accumulates(e) and tuple(e.out.type.shape) not in ((), shape)
           for e in g.members):
        return loop_vars, shape, idx
    for _, _, xs in _outside_reads(ks, g):
        if xs is None:
            return loop_vars, shape, idx
        if xs not in ((), shape) and (len(xs) > len(shape) - split
                                      or shape[len(shape) - len(xs):] != xs):
            return loop_vars, shape, idx
    merged = Aff.var(loop_vars[split - 1])
    return (loop_vars[split - 1:], (math.prod(shape[:split]),) + shape[split:],
            [Aff(0)] * (split - 1) + [merged] + list(idx[split:]))


def _symbolic(shape) -> bool:
    return any(isinstance(d, Dim) for d in shape)


def _accumulates(e) -> bool:
    return OPS[e.op].reduce is not None
