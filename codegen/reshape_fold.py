"""An elementwise equation that only a reshape reads is computed at the reshape's shape;
a reduction over the leading axes of a reshape, over those of the value reshaped.

A linear layer on a 3-D input traces as reshape -> 2-D matmul -> reshape back -> bias add,
and a loss then reshapes the logits to 2-D again (W10: `%35 = reshape %34` to [35,20,1000],
`%36 = add %35, %k9`, `%37 = reshape %36` to [700,1000], then the cross-entropy's row
reductions of %37). The fuser groups equations of one shape, so the bias add stayed an
elementwise loop nest of its own that wrote %36 (2.7 MiB) for the row nest to read back.
For the fuser, `%37 = add %34, %k9` at [700,1000] computes the same numbers: both shapes
have the same elements in the same (C) order, and a broadcast operand that spans only
trailing dims the two shapes share is read at the same elements. The equation then fuses
with its readers (W10: into the cross-entropy's row kernel).

Only what the fuser sees changes: the graph (and its printout) keeps both equations; a
kernel's comment cites the folded equation, `%37 = add %34, %k9`.
"""
from __future__ import annotations

import math

from tracer.ir import Eqn, Graph, Literal, Var

from .lower import KERNEL_DTYPES, LOWERING


def folded_eqns(graph: Graph) -> list:
    """`graph.eqns`, each reshape of a foldable elementwise equation replaced by that
    equation computed at the reshape's shape (and the equation itself dropped)."""
    eqns = list(graph.eqns)
    uses = graph.use_counts()
    producer = {id(e.out): e for e in eqns if isinstance(e.out, Var)}
    results = {id(x) for x in graph.results if isinstance(x, Var)}
    dropped, replaced = set(), {}
    for r in eqns:
        summed = _rows_summed(r, producer)
        if summed is not None:
            replaced[id(r)] = summed
            continue
        if r.op != "reshape" or not isinstance(r.out, Var):
            continue
        y = r.inputs[0]
        e = producer.get(id(y)) if isinstance(y, Var) else None
        if e is None or id(e) in dropped or uses.get(id(y)) != 1 or id(y) in results:
            continue
        inputs = _inputs_at(e, producer, tuple(y.type.shape), tuple(r.out.type.shape))
        if inputs is None:
            continue
        dropped.add(id(e))
        replaced[id(r)] = Eqn(e.op, inputs, e.params, r.out, e.loc)
    if not replaced:
        return eqns
    return [replaced.get(id(e), e) for e in eqns if id(e) not in dropped]


def _inputs_at(e, producer: dict, shape: tuple, to: tuple):
    """`e`'s operands for computing it at shape `to` instead of `shape`, or None when that
    would not compute the same elements in the same order, or when no operand is the
    reshape of a value of shape `to` (the pattern this is for)."""
    row = LOWERING.get(e.op)
    if (row is None or row.how != "kernel" or row.positions or not isinstance(e.out, Var)
            or not _concrete(shape) or not _concrete(to) or shape == to
            or math.prod(shape) != math.prod(to)
            or any(x.type.dtype.name not in KERNEL_DTYPES for x in (*e.inputs, e.out))):
        return None
    shared = 0  # trailing dims both shapes have
    while shared < min(len(shape), len(to)) and shape[-1 - shared] == to[-1 - shared]:
        shared += 1
    inputs, full = [], 0
    for x in e.inputs:
        if isinstance(x, Literal) or (isinstance(x, Var) and len(x.type.shape) <= shared):
            inputs.append(x)  # (a scalar, or a broadcast along the shared dims only)
            continue
        # a full-size operand: the reshape of a value that has the new shape
        src = producer.get(id(x)) if isinstance(x, Var) else None
        if (src is None or src.op != "reshape" or tuple(x.type.shape) != shape
                or not isinstance(src.inputs[0], Var)
                or tuple(src.inputs[0].type.shape) != to):
            return None
        inputs.append(src.inputs[0])
        full += 1
    # (not without one: a 0-d value's reshape to [1] fuses where it is, as a row value)
    return tuple(inputs) if full else None


def _rows_summed(e, producer: dict):
    """A reduction over the leading axes of a reshape that only splits or merges those
    axes (W10's bias gradient: the sum over [35, 20] of the [700, 1000] logits' gradient,
    reshaped) as the same reduction of the reshaped value (over [700]), or None. The rows
    are the same rows, in the same order."""
    from eager.ops import OPS

    x = e.inputs[0] if e.inputs else None
    src = producer.get(id(x)) if isinstance(x, Var) else None
    if (OPS[e.op].reduce is None or src is None or src.op != "reshape"
            or e.params.get("keepdim") or not isinstance(src.inputs[0], Var)):
        return None
    y = src.inputs[0]
    shape, to = tuple(x.type.shape), tuple(y.type.shape)
    axes = tuple(e.params.get("axes") or ())
    if not axes or axes != tuple(range(len(axes))) or not _concrete(shape + to):
        return None
    kept = shape[len(axes):]
    lead = len(to) - len(kept)
    if lead < 1 or to[lead:] != kept or (lead, to[:lead]) == (len(axes), shape[:len(axes)]):
        return None
    return Eqn(e.op, (y,), {**e.params, "axes": tuple(range(lead))}, e.out, e.loc)


def _concrete(shape) -> bool:
    return all(type(d) is int for d in shape)
