"""Steps that run at the same time: a long sequential step (its lowering row's `sequential`:
an LSTM layer's time loop, one single-threaded Numba call that releases the GIL) runs on
the kernel pool's thread while the calling thread runs products that neither read what it
writes nor write what it reads.

W10's backward: the decoder's weight-gradient product does not wait for layer 2's
backward recurrence, nor layer 2's weight-gradient products for layer 1's; run one after
the other, the second core idled through each recurrence. A region's products are
codegen.gemm's (whose result does not depend on how it is split: the same bits as
before), never a parallel=True kernel (parallel._PRANGE_LOCK's rule) nor numpy's OpenBLAS
(its threads would spin against the loop). They split over the threads as ever: the
calling thread takes their pieces one by one, and the pool's thread, once the loop is done,
takes the rest (a helper it never got to is cancelled, not waited for: parallel._run_shared).

The plan (`plan`) is made from each step's reads and writes, by memory: a view is the
memory it looks into, a value made in its place in a cat (codegen.placement) any such
value. A product moves into a long step's region from before it only if no step it jumps
over (the long one included) reads what it writes or writes what it reads, and from after
it likewise; steps whose effects are not known that way (fallbacks, sub-graphs, writes into
the caller's arrays or in place into a capture, which may share memory with another) are
barriers no product crosses. Each step computes what it computed before (only the thread
and the time differ), so the results are the same bits. An exception comes out as the
sequential order would raise it: of two failing steps, the earlier one's (`settle`).
"""
from __future__ import annotations

import concurrent.futures

from . import parallel, runner_forms
from .lower import LOWERING
from .steps import FallbackStep, KernelCall, NumpyStep, SubgraphStep

_ALL = "*"        # a barrier's reads and writes: every memory
_PLACED = "placed"  # the memory of cats and of the values made in their places


def plan(gen) -> tuple[list, dict]:
    """(the runner's order of step indices, {index of a long step: [indices of the steps
    run on the calling thread meanwhile, in order]}) for runner generator `gen`'s program.
    Without a second thread, or a long step, the steps' own order and no regions."""
    steps = gen.p.steps
    order = list(range(len(steps)))
    if parallel._split_threads() < 2 or gen.p.bind is not None:
        return order, {}
    longs = [i for i, st in enumerate(steps) if _long(st)]
    if not longs:
        return order, {}
    effects = _effects(gen)
    regions, moved, floor = {}, set(), 0
    for i in longs:
        mine = []
        # from before: back to the previous long step (its region took what it could)
        for j in range(i - 1, floor - 1, -1):
            if j not in moved and _movable(gen, steps[j]) \
                    and not any(_conflict(effects[j], effects[m]) for m in range(j + 1, i + 1)
                                if m not in mine):
                mine.append(j)
        mine.reverse()
        # from after: up to the next long step
        end = next((m for m in longs if m > i), len(steps))
        for j in range(i + 1, end):
            if _movable(gen, steps[j]) \
                    and not any(_conflict(effects[j], effects[m]) for m in range(i, j)
                                if m not in mine):
                mine.append(j)
        if mine:
            regions[i] = mine
            moved.update(mine)
        floor = i + 1
    if not regions:
        return order, {}
    order = [j for j in order if j not in moved]
    return order, regions


def _long(st) -> bool:
    """A step that may run on the pool's thread: its row's kernel, one sequential call that
    releases the GIL (numpy's implementation, where it did not build, does not)."""
    if not isinstance(st, NumpyStep) or st.how != "numpy" or st.kernel is None:
        return False
    row = LOWERING.get(st.eqn.op)
    return row is not None and row.sequential


def _movable(gen, st) -> bool:
    """A product the calling thread can run beside a long step: codegen.gemm's kernel (its
    runner form's choice), into memory of the program's own."""
    if not isinstance(st, NumpyStep) or st.how != "blas" or st.dest >= 0 \
            or LOWERING.get(st.eqn.op) is None \
            or LOWERING[st.eqn.op].inline is not runner_forms.matmul \
            or not all(isinstance(s, int) for s in st.inputs):
        return False
    return runner_forms._product(gen, st.eqn) == "gemm"


def _effects(gen) -> list:
    """Per step, (the memories it reads, the memories it writes): a memory is the slot of
    the value that owns it (_roots), or _PLACED, or _ALL for a barrier."""
    p = gen.p
    root = _roots(gen)
    out = []
    for st in p.steps:
        if isinstance(st, (FallbackStep, SubgraphStep)) or getattr(st, "dest", -1) >= 0:
            out.append(({_ALL}, {_ALL}))
        elif isinstance(st, KernelCall):
            if any(o.dest >= 0 or o.io_slot is not None for o in st.outs):
                out.append(({_ALL}, {_ALL}))
                continue
            out.append(({root(s) for s in st.ins}, {root(o.slot) for o in st.outs}))
        else:
            reads = {root(s) for s in st.inputs if isinstance(s, int)}
            out.append((reads, {root(st.out)}))
    return out


def _roots(gen):
    """slot -> the memory it is (see _effects)."""
    from . import placement

    p = gen.p
    made = placement.plan(gen)
    parent = {}
    for s in list(made["into"]) + list(made["cats"]):
        parent[s] = _PLACED
    for st in p.steps:
        if isinstance(st, NumpyStep) and st.how == "view" and st.inputs \
                and isinstance(st.inputs[0], int):
            parent.setdefault(st.out, st.inputs[0])

    def root(s):
        while s in parent:
            s = parent[s]
        return s
    return root


def _conflict(a, b) -> bool:
    (ra, wa), (rb, wb) = a, b
    if _ALL in wa or _ALL in wb:
        return True
    return bool(wa & (rb | wb)) or bool(wb & ra)


# ------------------------------------------------------------------ run-time helpers
def spawn(fn):
    """`fn()` started on the kernel pool's thread: its future."""
    pool = parallel._SPLIT_POOL or parallel._split_pool()
    return pool.submit(fn)


def join(job, fn):
    """What the long step `fn`, started as `job`, returned (or raise what it raised). If the
    pool's thread has not started it yet (busy, or its core taken by another process), the
    calling thread runs it itself rather than wait: never slower than one after the other.
    Never returns before it is done, even when interrupted (it writes this thread's
    buffers)."""
    if job.cancel():
        return fn()
    try:
        return job.result()
    except BaseException:
        if not job.done():
            concurrent.futures.wait([job])
        raise


def settle(job, fn, exc: BaseException, at: int, pos: int):
    """After step `at` of the calling thread raised `exc` in long step `pos`'s region
    (`fn`, started as `job`): wait for it (or run it here, if it is earlier and the pool's
    thread never started it), then raise what the steps in their order would have raised
    first."""
    if job.cancel():
        if pos < at:
            fn()
        raise exc
    concurrent.futures.wait([job])
    first = job.exception()
    if first is not None and pos < at:
        raise first
    raise exc


__all__ = ["join", "plan", "settle", "spawn"]
