"""Fusion: partition a graph's equations into the steps of a program.

Steps run in order; each is one of

* `KernelGroup` - a fused loop nest, emitted as Numba source (see emit.py):
    - ``elementwise``: equations of one output shape, one loop nest;
    - ``row``: reductions over *trailing* axes (softmax, layer_norm, a loss),
      with the elementwise work before, between and after them; per row, one
      pass per reduction stage, then a final pass for full-size outputs;
    - ``col``: reductions over *leading* axes (bias gradients), accumulating
      into the output while streaming over rows;
* `CallStep` - matmul through BLAS, or an op run by its numpy implementation;
* `ViewStep` - a zero-copy numpy view, when a non-kernel step needs the value.

Views (reshape, permute, broadcast_to, getitem) are index arithmetic inside
kernels: a kernel reads the view's *base* array with a composed affine index.
A value computed inside a kernel is written to memory only when something
outside that kernel needs it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from eager.ops import OPS, Dim
from tracer.ir import Graph, Literal, Var

from .lower import KERNEL_DTYPES, LOWERING
from .reshape_fold import folded_eqns


@dataclass(eq=False)
class KernelGroup:
    kind: str                     # "elementwise" | "row" | "col" | "multi"
    shape: tuple                  # the full iteration shape
    split: int = 0                # row: outer dims before it; col: reduced dims before it
    members: list = field(default_factory=list)   # Eqns in program order
    outputs: list = field(default_factory=list)   # Vars written to memory
    index: int = 0                # position in the step list
    name: str = ""
    summary: str = ""             # the ops it computes, as its name ends (add_sigmoid_mul)
    parts: list = field(default_factory=list)     # "multi": the groups it runs in turn
    carried: set = field(default_factory=set)     # "multi": ids of 0-d values kept local

    def member_outs(self) -> set:
        return {id(e.out) for e in self.members}


@dataclass(eq=False)
class CallStep:
    eqn: object
    how: str                      # "blas" | "numpy"
    index: int = 0


@dataclass(eq=False)
class ViewStep:
    eqn: object
    index: int = 0


def _is_float(t) -> bool:
    return t.dtype.kind == "f" and t.dtype.name in KERNEL_DTYPES  # (not float16)


class Partition:
    """The result of fusion: ordered steps plus bookkeeping the emitter needs."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.eqns = list(graph.eqns)  # what is partitioned (codegen.reshape_fold)
        self.steps: list = []
        self.views: dict = {}        # id(Var) -> view Eqn still virtual
        self.group_of: dict = {}     # id(Var) -> KernelGroup that computes it
        self.step_of: dict = {}      # id(Var) -> index of the step that materializes it
        self.view_steps: dict = {}   # id(Var) -> ViewStep
        self.external = set()        # ids of inputs, captures and consts
        for v in tuple(graph.inputs) + tuple(graph.captures):
            self.external.add(id(v))
        for v, _ in graph.consts:
            self.external.add(id(v))

    # -------------------------------------------------------------- views
    def base(self, x):
        """Follow virtual views from `x` to the value they read."""
        while isinstance(x, Var) and id(x) in self.views:
            x = self.views[id(x)].inputs[0]
        return x

    def ready_index(self, x) -> int:
        """Index of the step after which base value `x` exists in memory (-1: always)."""
        if not isinstance(x, Var) or id(x) in self.external:
            return -1
        if id(x) in self.step_of:
            return self.step_of[id(x)]
        g = self.group_of.get(id(x))
        if g is not None:
            return g.index
        raise KeyError(f"value {x!r} is produced by no step")

    def ensure_materialized(self, x, before: int | None = None):
        """Make value `x` exist in memory: mark kernel outputs, add view steps."""
        if not isinstance(x, Var) or id(x) in self.external or id(x) in self.step_of:
            return
        if id(x) in self.views:
            e = self.views[id(x)]
            self.ensure_materialized(e.inputs[0])
            step = ViewStep(e)
            self._append(step, e.out)
            self.view_steps[id(x)] = step
            return
        g = self.group_of.get(id(x))
        if g is not None and x not in g.outputs:
            g.outputs.append(x)

    def _append(self, step, *outs):
        step.index = len(self.steps)
        self.steps.append(step)
        for o in outs:
            self.step_of[id(o)] = step.index


# --------------------------------------------------------------------------------------
# the partitioner

def partition(graph: Graph) -> Partition:
    p = Partition(graph)
    p.eqns = folded_eqns(graph)
    for e in _checks_of_inputs_first(p, p.eqns):
        row = LOWERING.get(e.op)
        how = row.how if row is not None else None
        if how == "view":
            _place_view(p, e)
        elif how == "kernel" and _kernel_types_ok(e):
            _place_elementwise(p, e)
        elif how == "reduce" and _place_reduction(p, e):
            pass
        else:
            for x in e.inputs:
                p.ensure_materialized(x)
            step = CallStep(e, "blas" if how == "blas" else "numpy")
            p._append(step, *e.outs)
    for x in graph.results:
        if x is not None:
            p.ensure_materialized(x)
    _name_groups(p)
    return p


def _checks_of_inputs_first(p: Partition, eqns) -> list:
    """The equations, those checking values the program is given (view="whole" ops run by
    numpy: an integer divisor's zeros, class labels) moved to the front, in their order: a
    check placed where it was traced would split the fused kernel around it."""
    def early(e):
        row = LOWERING.get(e.op)
        return OPS[e.op].view == "whole" and row is not None and row.how == "numpy" and all(
            not isinstance(x, Var) or id(x) in p.external for x in e.inputs)
    return [e for e in eqns if early(e)] + [e for e in eqns if not early(e)]


def _kernel_types_ok(e) -> bool:
    # the dtypes kernels have a Numba type for (lower._NP_TYPE); float16 has none on the CPU
    # and runs as numpy steps: eager's own per-op rounding to float16
    return all(x.type.dtype.name in KERNEL_DTYPES for x in tuple(e.inputs) + e.outs)


def _place_view(p: Partition, e):
    x = e.inputs[0]
    if e.op == "reshape" and isinstance(x, Var) and id(x) in p.views \
            and not _is_unit_reshape(x.type.shape, e.out.type.shape):
        # reshape of a strided view is not an affine index map: make the view real first
        p.ensure_materialized(x)
        step = ViewStep(e)
        p._append(step, e.out)
        p.view_steps[id(e.out)] = step
        return
    p.views[id(e.out)] = e


def _is_unit_reshape(a, b) -> bool:
    return [d for d in a if d != 1] == [d for d in b if d != 1]


def _deps(p: Partition, e):
    """Base values `e` reads (through views)."""
    out = []
    for x in e.inputs:
        b = p.base(x)
        if isinstance(b, Var):
            out.append((x, b))
    return out


def _can_join(p: Partition, g: KernelGroup, e, role: str) -> bool:
    """May equation `e` become a member of group `g` (playing `role`)?"""
    if role == "full" and g.kind == "col" and any(OPS[m.op].reduce for m in g.members):
        # A col group's reductions complete only after the whole loop: nothing after them.
        for x, b in _deps(p, e):
            if p.group_of.get(id(b)) is g and b.type.shape != g.shape:
                return False
    members = g.member_outs()
    sums = {id(m.out) for m in col_sums(g)}  # (complete only after the last row)
    for x, b in _deps(p, e):
        if id(b) in sums:
            return False
        if id(b) in members:
            if not _internal_read_ok(p, g, x, b, role):
                return False
            continue
        if p.ready_index(b) >= g.index:
            return False
    return True


def _internal_read_ok(p: Partition, g: KernelGroup, x, b, role: str) -> bool:
    """Can a member of `g` read internal value `b` through operand `x` without memory?"""
    full = g.shape
    if g.kind == "elementwise" or g.kind == "col":
        return x is b and b.type.shape == full
    # row group: full-size values at the same point, row values at the same row
    outer = full[:g.split]
    row_shapes = (outer, outer + (1,) * (len(full) - g.split))
    if b.type.shape == full:
        return x is b and role in ("full", "reduce")
    if b.type.shape in row_shapes:
        shape = x.type.shape
        if role == "row":
            return shape in row_shapes and _views_keep_rows(p, x, outer)
        # Read at full size, `x` broadcasts from the right: a (3,) row value against
        # (3, 3) runs along the columns, so it must keep the row axes where they are.
        padded = (1,) * (len(full) - len(shape)) + tuple(shape)
        if padded[:g.split] == tuple(outer) and all(d == 1 for d in padded[g.split:]):
            return _views_keep_rows(p, x, outer)
        # A row value broadcast to the full shape by views (softmax's backward:
        # broadcast_to(reshape(sum(...), (..., 1)))): it is read in place of the row value
        # when the views read element (i0.., j..) at the row value's (i0..).
        return tuple(shape) == tuple(full) and _reads_its_row(p, g, x, b)
    return False


def _reads_its_row(p: Partition, g: KernelGroup, x, b) -> bool:
    """Whether view `x` (of `g`'s full shape) reads row value `b` at element (i0.., j..)'s
    row (i0..): the views' composed index into `b`, worked out as the emitter does."""
    from .kernel_source import Aff, _view_index  # (kernel_source imports this module)

    idx = [Aff.var(f"i{k}") for k in range(len(g.shape))]
    while x is not b:
        e = p.views.get(id(x)) if isinstance(x, Var) else None
        if e is None:
            return False
        idx = _view_index(e, e.inputs[0].type.shape, idx)
        if idx is None:
            return False
        x = e.inputs[0]
    want = [Aff.var(f"i{k}") for k in range(g.split)] + [Aff(0)] * (len(b.type.shape) - g.split)
    return [i.render() for i in idx] == [w.render() for w in want]


def _views_keep_rows(p: Partition, x, outer) -> bool:
    """Views between a row value and `x` only add/remove size-1 dims or broadcast inner dims."""
    while isinstance(x, Var) and id(x) in p.views:
        e = p.views[id(x)]
        if e.op == "reshape" and not _is_unit_reshape(e.inputs[0].type.shape, e.out.type.shape):
            return False
        if e.op not in ("reshape", "broadcast_to"):
            return False
        if e.op == "broadcast_to" and tuple(e.out.type.shape[:len(outer)]) != tuple(outer):
            return False
        x = e.inputs[0]
    return True


def _new_group(p: Partition, kind: str, shape: tuple, split: int = 0) -> KernelGroup:
    g = KernelGroup(kind, tuple(shape), split)
    p._append(g)
    return g


def _join(p: Partition, g: KernelGroup, e):
    # A cheap value of an earlier kernel is computed again here rather than written out
    # there and read back (_recompute_chain); not one `e` also reads through a view (y.T +
    # y): a kernel reads the values it computes only at the element it computes.
    viewed = {id(b) for x, b in _deps(p, e) if x is not b}
    for x, b in _deps(p, e):
        if x is b and id(b) not in g.member_outs():
            chain = _recompute_chain(p, g, b, viewed)
            if chain is not None:
                g.members.extend(chain)
                for m in chain:
                    for _, c in _deps(p, m):
                        if id(c) not in g.member_outs():
                            p.ensure_materialized(c)
    g.members.append(e)
    p.group_of[id(e.out)] = g
    members = g.member_outs()
    # Anything read from another kernel must be in memory.
    for x, b in _deps(p, e):
        if id(b) not in members:
            p.ensure_materialized(b)


# Rematerialization, as torch.compile's min-cut partitioner does for a training step: a
# backward kernel reading what a forward kernel computed from its inputs with a few cheap
# elementwise operations (GELU's 0.5 * x, x * x, 1 + tanh(...): OpDef.recompute, and not
# Lowering.expensive) computes them again from those inputs. The forward kernel then
# writes fewer full-size arrays and the backward one reads fewer (GELU forward 6 outputs
# -> 2 in W9). It is the same expression in the same kind of kernel, so the same bits.
# At most this many equations are computed twice for one value.
RECOMPUTE_MAX = 12


def _nbytes(v) -> int:
    return math.prod(v.type.shape) * v.type.dtype.itemsize


def _in_memory(p: Partition, b) -> bool:
    if id(b) in p.external or id(b) in p.step_of:
        return True
    owner = p.group_of.get(id(b))
    return owner is not None and b in owner.outputs


def _recompute_chain(p: Partition, g: KernelGroup, b, viewed=frozenset()) -> list | None:
    """Equations of an earlier elementwise kernel that compute `b` for `g` from values in
    memory (or computed in `g`), in program order; None when reading `b` is better: when
    `b` is in memory already, when a step is not a cheap kernel equation of `g`'s shape,
    when the chain would compute a value `g` reads through a view (ids `viewed`), or when
    it would read more bytes of full-size arrays that `g` does not read yet than the one
    array `b` has (the expensive values it stops at are then written out instead of `b`;
    a ReLU's bool mask stays one byte an element read, not the float it compares)."""
    if g.kind not in ("elementwise", "col") or not _concrete(g.shape) or _in_memory(p, b):
        return None
    full = math.prod(g.shape)
    inside = g.member_outs()
    reads = {id(c) for m in g.members for _, c in _deps(p, m) if id(c) not in inside}
    chain: dict = {}
    new_reads: dict = {}

    def visit(v) -> bool:
        if id(v) in chain or id(v) in inside:
            return True
        src = p.group_of.get(id(v))
        e = next((m for m in src.members if m.out is v), None) if src is not None else None
        row = LOWERING.get(e.op) if e is not None else None
        if (e is None or src is g or not _recomputable_in(src, v) or row is None
                or row.how != "kernel" or row.expensive or row.positions
                or not OPS[e.op].recompute or tuple(v.type.shape) != tuple(g.shape)
                or not _kernel_types_ok(e)):
            return False
        for x, c in _deps(p, e):
            if id(c) in chain or id(c) in inside:
                if x is not c:
                    return False  # (a view of a value computed here: read it from memory)
                continue
            if x is c and not _in_memory(p, c):
                kept = dict(chain), dict(new_reads)
                if visit(c):
                    continue
                chain.clear(), new_reads.clear()  # (read `c` instead: forget its part)
                chain.update(kept[0]), new_reads.update(kept[1])
            if p.ready_index(c) >= g.index:
                return False
            if id(c) not in reads and math.prod(c.type.shape) >= full:
                new_reads[id(c)] = c
        chain[id(v)] = e
        return len(chain) <= RECOMPUTE_MAX

    if not visit(b) or any(k in viewed for k in chain):
        return None
    if sum(_nbytes(c) for c in new_reads.values()) > _nbytes(b):
        return None
    order = {id(m): i for i, m in enumerate(p.eqns)}
    return sorted(chain.values(), key=lambda m: order.get(id(m), 0))


def _recomputable_in(src: KernelGroup, v) -> bool:
    """Whether a value `v` that kernel `src` computes may be computed again elsewhere:
    any of an elementwise kernel's; of a row kernel, a full-size value (layer_norm's
    normalized x, (x - mean) * rstd: its backward reads it with (x - mean) and rstd, which
    it reads anyway), not a row value."""
    if src.kind == "elementwise":
        return True
    return src.kind == "row" and tuple(v.type.shape) == tuple(src.shape)


def _candidate_groups(p: Partition, e):
    seen = []
    for x, b in _deps(p, e):
        g = p.group_of.get(id(b))
        if g is not None and g not in seen:
            seen.append(g)
    # the latest kernel too: sibling fusion of independent work of the same shape
    for step in reversed(p.steps):
        if isinstance(step, KernelGroup):
            if step not in seen:
                seen.append(step)
            break
    # and the earliest elementwise kernel of exactly this shape: independent scalar work
    # (an optimizer's per-parameter bias corrections) then shares one kernel instead of
    # compiling and launching one each
    shape = tuple(e.out.type.shape)
    if _concrete(shape) and math.prod(shape) <= 1:
        for step in p.steps:
            if isinstance(step, KernelGroup) and step.kind == "elementwise" \
                    and step.shape == shape and step not in seen:
                seen.append(step)
                break
    return sorted(seen, key=lambda g: -g.index)


def _role_in(g: KernelGroup, shape) -> str | None:
    if shape == g.shape:
        return "full"
    if g.kind == "row":
        outer = g.shape[:g.split]
        if shape == outer or shape == outer + (1,) * (len(g.shape) - g.split):
            return "row"
    return None


def _place_elementwise(p: Partition, e):
    shape = tuple(e.out.type.shape)
    for g in _candidate_groups(p, e):
        role = _role_in(g, shape)
        if role is None:
            continue
        if role == "row" and not _row_member_ok(p, g, e):
            continue
        if not _can_join(p, g, e, role):
            _hoist_next(p, g, e)
        if _can_join(p, g, e, role):
            _join(p, g, e)
            return
    g = _new_group(p, "elementwise", shape)
    _join(p, g, e)


def _hoist_next(p: Partition, g: KernelGroup, e) -> None:
    """Run the kernel right after `g` before it instead, when `e` reads that kernel's
    output and that kernel reads nothing `g` computes: then `e` may still join `g`.
    (Batch norm in eval after a convolution: the bias add opens the full-size kernel,
    then the per-channel 1/sqrt(var + eps) gets a small kernel of its own; without the
    swap, (x - mean) stayed in the first kernel and was written out, 1 MiB, for a second
    full-size kernel to read back.)"""
    if g.index + 1 >= len(p.steps):
        return
    nxt = p.steps[g.index + 1]
    if not isinstance(nxt, KernelGroup) or nxt.kind != "elementwise" or nxt.parts \
            or not any(p.group_of.get(id(b)) is nxt for _, b in _deps(p, e)):
        return
    for m in nxt.members:
        for _, b in _deps(p, m):
            if p.group_of.get(id(b)) is not nxt and p.ready_index(b) >= g.index:
                return
    p.steps[g.index], p.steps[nxt.index] = nxt, g
    g.index, nxt.index = nxt.index, g.index


def _row_member_ok(p: Partition, g: KernelGroup, e) -> bool:
    # a per-row scalar may only read row values and row-shaped arrays (not full-size data)
    full = g.shape
    for x in e.inputs:
        if x.type.shape == full and len(full) > g.split:
            return False
    return True


def _place_reduction(p: Partition, e) -> bool:
    x = e.inputs[0]
    if not _is_float(x.type) or not x.type.shape or 0 in x.type.shape:
        return False
    ndim = len(x.type.shape)
    axes = tuple(e.params["axes"])
    if not axes:
        return False
    shape = tuple(x.type.shape)
    if axes == tuple(range(ndim - len(axes), ndim)):
        kind, split = "row", ndim - len(axes)
    elif axes == tuple(range(len(axes))):
        kind, split = "col", len(axes)
        if e.params.get("keepdim") and all(shape[a] == 1 for a in axes):
            # Reduces nothing: the result has the group's full shape, so the group's
            # elementwise consumers would join and read the sums before the loop over the
            # reduced axes completed them (emit found no value). Rare: numpy does it.
            return False
    else:
        return False
    b = p.base(x)
    src = p.group_of.get(id(b)) if isinstance(b, Var) else None
    if _sums_rows_of(src, kind, shape, split) and _can_join_as(p, src, e, "row", split):
        src.kind = "row"  # (a col kernel's sums become the row kernel's col_sums)
        _join(p, src, e)
        return True
    if src is not None and src.shape == shape and (
            (src.kind == kind and src.split == split)
            or (src.kind == "elementwise" and _upgradable(p, src))):
        if _can_join(p, src, e, "reduce") or (src.kind == "elementwise" and
                                               _can_join_as(p, src, e, kind, split)):
            src.kind, src.split = kind, split
            _join(p, src, e)
            return True
    g = _new_group(p, kind, shape, split)
    if not _can_join(p, g, e, "reduce"):
        p.steps.pop()
        return False
    _join(p, g, e)
    return True


def col_sums(g: KernelGroup) -> list:
    """A row kernel's reductions over exactly its row axes (layer_norm's weight and bias
    gradients, a bias gradient summed from the rows it computes): accumulated in its last
    pass, row by row, in the order a col kernel adds them (emit._row_code)."""
    lead = tuple(range(g.split))
    return [e for e in g.members if g.kind == "row" and OPS[e.op].reduce is not None
            and tuple(e.params["axes"]) == lead]


def _sums_rows_of(src, kind: str, shape: tuple, split: int) -> bool:
    """Whether a reduction of `kind` over `split` axes of a value of `src` may make `src`
    a row kernel with col sums: one reduces the rows of the other's values. Not a row
    kernel that runs its rows in parallel: a sum's additions would race (and reorder)."""
    from .emit import runs_parallel  # (emit imports this module)

    return (src is not None and src.shape == shape and src.split == split and not src.parts
            and {src.kind, kind} == {"row", "col"} and split > 0 and not runs_parallel(shape))


def _upgradable(p: Partition, g: KernelGroup) -> bool:
    return all(m.out.type.shape == g.shape for m in g.members)


def _can_join_as(p: Partition, g, e, kind, split) -> bool:
    old = (g.kind, g.split)
    g.kind, g.split = kind, split
    ok = _can_join(p, g, e, "reduce")
    g.kind, g.split = old
    return ok


def merge_adjacent(p: Partition, small) -> None:
    """Runs of adjacent kernels for which `small(group)` holds become one "multi" kernel
    that runs their loop nests in turn (an optimizer's per-parameter updates; a loss's
    gradient and the bias gradient summed from it): one call instead of several, and one
    Numba compile (each costs ~0.05 s of fixed work and ~5 ms per array argument). Values
    passed between them still go through memory, in program order, so nothing else
    changes. Row kernels that stream their outputs stay on their own."""
    steps, run = [], []

    def flush():
        if len(run) > 1:
            steps.append(KernelGroup("multi", (), members=[m for g in run for m in g.members],
                                     outputs=[v for g in run for v in g.outputs],
                                     parts=list(run)))
        else:
            steps.extend(run)
        run.clear()

    for step in p.steps:
        if isinstance(step, KernelGroup) and step.kind in ("elementwise", "row", "col") \
                and small(step) and not _streams_any(step):
            run.append(step)
        else:
            flush()
            steps.append(step)
    flush()
    if len(steps) == len(p.steps):
        return
    _carry_scalars(p, steps)
    new_index = {}
    for i, step in enumerate(steps):
        for s in (step.parts or [step]) if isinstance(step, KernelGroup) else [step]:
            new_index[s.index] = i
            s.index = i
        step.index = i
    p.step_of = {k: new_index[i] for k, i in p.step_of.items()}
    p.steps = steps
    _name_groups(p)


def _streams_any(g: KernelGroup) -> bool:
    """Whether a row kernel writes an output with streaming stores (emit._streams)."""
    if g.kind != "row":
        return False
    from .emit import _streams

    return any(_streams(g, v) for v in g.outputs)


def _carry_scalars(p: Partition, steps) -> None:
    """0-d values that a multi kernel computes in one loop nest and reads only in its
    later elementwise ones stay local variables (a bias correction of Adam, read by every
    element): not stored, not re-read from memory inside the loops."""
    readers: dict = {}
    for step in steps:
        for part in (step.parts or [step]) if isinstance(step, KernelGroup) else [step]:
            eqns = part.members if isinstance(part, KernelGroup) else [part.eqn]
            for e in eqns:
                for x in e.inputs:
                    b = p.base(x)
                    if isinstance(b, Var):
                        readers.setdefault(id(b), set()).add((id(step), part.kind if
                                                              isinstance(part, KernelGroup)
                                                              else ""))
    results = {id(p.base(x)) for x in p.graph.results if isinstance(x, Var)}
    for step in steps:
        if not (isinstance(step, KernelGroup) and step.kind == "multi"):
            continue
        for sub in step.parts:
            if sub.shape != () or sub.kind != "elementwise":
                continue
            for v in sub.outputs:
                if id(v) not in results and \
                        readers.get(id(v), set()) <= {(id(step), "elementwise")}:
                    step.carried.add(id(v))
        step.outputs = [v for v in step.outputs if id(v) not in step.carried]


def _name_groups(p: Partition):
    name = p.graph.name
    k = 0
    for step in p.steps:
        if isinstance(step, KernelGroup):
            ops = []
            for m in step.members:
                if m.op not in ops:
                    ops.append(m.op)
            summary = "_".join(ops[:4]) + ("_etc" if len(ops) > 4 else "")
            step.name = f"{name}_k{k}_{summary}"
            step.summary = summary
            k += 1


def describe(p: Partition) -> str:
    """The fusion groups, one line per step (what `str(concrete)` shows)."""
    lines = ["fused kernels:"]
    for i, step in enumerate(p.steps):
        if isinstance(step, KernelGroup):
            ms = step.members
            inside = step.member_outs()  # (with values it computes again: _recompute_chain)
            reads = sorted({repr(p.base(x)) for m in ms for x in m.inputs
                            if isinstance(p.base(x), Var) and id(p.base(x)) not in inside},
                           key=_var_sort)
            writes = ", ".join(repr(v) for v in step.outputs)
            size = _size_text(step.shape)
            if step.kind == "multi":
                lines.append(f"  {step.name}  multi       {_span(ms)}  "
                             f"{len(step.parts)} loop nests in one kernel:")
                for sub in step.parts:
                    sub_reads = sorted({repr(p.base(x)) for m in sub.members for x in m.inputs
                                        if isinstance(p.base(x), Var)
                                        and p.group_of.get(id(p.base(x))) is not sub},
                                       key=_var_sort)
                    lines.append(f"    {sub.kind:<11} {_span(sub.members)}  reads "
                                 f"{', '.join(sub_reads)}  writes "
                                 f"{', '.join(repr(v) for v in sub.outputs)}  "
                                 f"{_size_text(sub.shape)} iterations")
                continue
            lines.append(f"  {step.name}  {step.kind:<11} {_span(ms)}  reads {', '.join(reads)}"
                         f"  writes {writes}  {size} iterations")
        elif isinstance(step, CallStep):
            e = step.eqn
            lines.append(f"  {step.how:<5} {', '.join(repr(o) for o in e.outs)} = {e.op} "
                         + ", ".join(repr(x) for x in e.inputs))
        else:
            e = step.eqn
            lines.append(f"  view  {e.out!r} = {e.op} {e.inputs[0]!r}")
    return "\n".join(lines)


def _size_text(shape) -> str:
    """The iteration count: a number, or a product naming the symbolic sizes (N0*4)."""
    if _concrete(shape):
        return str(math.prod(shape))
    return "*".join(str(d) for d in shape)


def _concrete(shape) -> bool:
    """No symbolic (run-time) sizes in `shape` (see tracer.symbolic)."""
    return not any(isinstance(d, Dim) for d in shape)


def _span(ms) -> str:
    if len(ms) == 1:
        return repr(ms[0].out)
    return f"{ms[0].out!r}..{ms[-1].out!r} ({len(ms)} eqns)"


def _var_sort(name: str):
    return (len(name), name)


__all__ = ["partition", "merge_adjacent", "Partition", "KernelGroup", "CallStep", "ViewStep",
           "describe", "Literal", "col_sums"]
