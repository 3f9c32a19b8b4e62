"""The in-place plan: which updates a program writes straight into the memory of the
tensor they update (codegen.program builds it with `_plan_inplace` for each program)."""

from __future__ import annotations

from dataclasses import dataclass

from tracer.ir import Graph, UpdateKind, Var, may_raise

from .fuse import CallStep, KernelGroup

@dataclass(frozen=True)
class InplaceUpdate:
    """An update computed straight into the array of the tensor it updates."""

    update: int          # index into graph.updates
    old: object          # the Var holding the target's value before the call, or None
    io: bool             # its kernel reads `old` and writes the update at the same index


def _plan_inplace(graph: Graph, part, escaping: set) -> dict:
    """Which updates can be written into their target's memory while the program runs,
    instead of into a buffer that the caller then copies over the target.

    The new value of a captured tensor overwrites the old one, so every read of the old
    value (through any view of it) must come before the step that writes it, or be in
    that step at the very element it writes (an elementwise kernel, which then takes the
    array once, as an input it also writes: two arguments on one buffer would fail LLVM's
    run-time alias check and run scalar). A `.grad` the function does not read has no old
    value; the caller passes its array in `dests` (see `Program.__call__`).

    No update is written in place by a step before one that may raise (a class index
    out of range, an integer divisor 0: `OpDef.raises`): a program that raises has then
    changed no tensor, and the caller can run the call eagerly for eager's error and state.

    Returns {id(update Var): InplaceUpdate}."""
    grad_capture = graph.grad_captures   # owner capture -> its .grad's capture
    reads = []  # per step: ids of the base values it reads
    last_raise = -1  # the last step that may raise
    for k, step in enumerate(part.steps):
        eqns = step.members if isinstance(step, KernelGroup) else [step.eqn]
        if any(map(may_raise, eqns)):
            last_raise = k
        inside = step.member_outs() if isinstance(step, KernelGroup) else set()
        ids = set()
        for e in eqns:
            for x in e.inputs:
                b = part.base(x)
                if isinstance(b, Var) and id(b) not in inside:
                    ids.add(id(b))
        reads.append(ids)
    # An output or an update whose value is (a view of) a value the program also writes in
    # place would be read after that write: a.copy_(b); b.add_(x) updates a with b's old value.
    escaping_bases = {id(part.base(x)) for x in tuple(graph.outputs) + tuple(graph.updates)
                      if isinstance(x, Var)}
    counts: dict = {}
    for v in graph.updates:
        counts[id(v)] = counts.get(id(v), 0) + 1
    plan = {}
    for u, (v, (kind, i)) in enumerate(zip(graph.updates, graph.update_targets)):
        if not isinstance(v, Var) or counts[id(v)] > 1 or id(v) in escaping \
                or id(v) in part.external or id(v) in part.views:
            continue
        if kind == UpdateKind.DATA:
            old = graph.captures[i]
        elif kind == UpdateKind.GRAD:
            j = grad_capture.get(i)
            old = graph.captures[j] if j is not None else None
        else:
            continue  # arguments and state created by the trace: copied back as before
        group = part.group_of.get(id(v))
        if group is not None:
            if v not in group.outputs:
                continue
            at = group.index
        else:
            at = part.step_of.get(id(v))
            step = part.steps[at] if at is not None else None
            if not (isinstance(step, CallStep) and step.how == "blas"):
                continue
        if at <= last_raise:
            continue
        io = False
        if old is not None:
            if id(old) in escaping_bases or any(id(old) in r for r in reads[at + 1:]):
                continue
            if id(old) in reads[at]:
                if group is None or group.kind != "elementwise" \
                        or not _aligned_reads(part, group, old):
                    continue
                io = True
            elif kind == UpdateKind.DATA:
                continue  # its array is an input anyway; a dest would be the same buffer
        elif kind != UpdateKind.GRAD:
            continue
        plan[id(v)] = InplaceUpdate(u, old, io)
    return plan


def _aligned_reads(part, group, old) -> bool:
    """True when every read of `old` in elementwise `group` is the element being written:
    read directly (no view), full-size, by members of the group's own shape."""
    if tuple(old.type.shape) != tuple(group.shape):
        return False
    for e in group.members:
        for x in e.inputs:
            if x is old:
                if tuple(e.out.type.shape) != tuple(group.shape):
                    return False
            elif isinstance(x, Var) and part.base(x) is old:
                return False  # through a view: another element
    return True
