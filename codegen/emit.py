"""Emission: Numba source text for one fused kernel.

Generated code is meant to be read: one module per kernel, named after what it
does, literal shapes, typed constants (``np.float32(0.5)``, never a bare float
literal that would promote float32 math to float64), and each line commented
with the IR equation and the user's file:line it implements.

Every array reaches a kernel as a flat C-contiguous 1-D view (the runtime
guarantees contiguity), so any view composed into a load is an affine flat
offset in the loop indices.
"""
from __future__ import annotations

import math
import re

import numpy as np

from eager.dtypes import SHORT_NAMES
from eager.ops import OPS, Dim
from tracer import settings
from tracer.ir import Var
from tracer.symbolic import graph_dims

from .fuse import KernelGroup, Partition, col_sums
from .kernel_source import (Aff, KernelSource, _eqn_comment, _flat, _is_row_value,  # noqa: F401
                            _row_index, c_strides)
from .loops import _col_loops, _loops
from .lower import NUMBA_TYPES, is_expensive, needs_positions, np_type

# A kernel's float arithmetic gets no fast-math flags: each of them changed results of
# finite inputs from NaN or inf to something else (tests/codegen/test_fastmath_semantics):
# 'reassoc' folded (x + inf) - inf to x and regrouped x * (x * 0) into (x * x) * 0 (NaN
# where x * x overflows); 'arcp' made x / c into x * (1 / c) (inf for a denormal c);
# 'nsz' made 0 - x into -x (so 1 / (0 - 0) was -inf); 'contract' fused x * x - y * y into
# fma(x, x, -(y * y)) (-inf where eager's inf - inf is NaN); 'nnan', 'ninf' and 'afn'
# delete NaN checks and bring in estimates. What they bought is kept by hand: a running
# sum's additions alone may be reordered (vmath.add_reassoc: the sum vectorizes), and a
# division by a value the loop does not change is two multiplications by a reciprocal
# computed once (vmath.div_invariant_*).
FASTMATH = frozenset()


# Kernels with at least this many iterations run in parallel (runs_parallel): a flat
# elementwise loop and a row kernel's blocks of rows split among threads by the runtime
# (SPLIT_DOC), a nested elementwise loop with prange over its outer axis (its sizes are
# literals: a large kernel compiles once per size). TRACEJIT_PARALLEL_MIN_SIZE overrides
# it (0: never parallel).
PARALLEL_MIN_SIZE = settings.PARALLEL_MIN_SIZE.value()
# A row kernel's full-size output of at least this many bytes is written with streaming
# (non-temporal) stores: each row is computed into a small buffer, then streamed out (see
# codegen.vmath.stream_copy). Half the L3 cache: an output this large does not stay in the
# cache for its reader, and writing it through the cache first reads every line. Not an
# output whose row keeps an intermediate for the last pass (softmax's exp): streaming it
# costs one pass more, through a buffer of its own. Medians of 3 processes each, streamed
# against plain stores, (rows, 1024) float32: layer_norm 4096 rows (16 MiB) 0.63 against
# 0.65 ms, and 1.53-1.58 against 1.67-2.28 ms with another job copying 128 MiB arrays;
# 16384 rows 3.34 against 3.85 ms. Softmax 4096 rows 1.01 against 0.91 ms (2.0-2.3
# against 1.6-1.7 with that job), 16384 rows 3.90 against 3.67 ms.
# Elementwise kernels do not stream: W1 (GELU, 64 MiB out) was 1.14-1.22x slower. Its
# output is fresh memory that the kernel's page-fault handler has just zeroed through the
# cache; plain stores hit those lines, streaming ones gain nothing, and the extra pass
# through a buffer costs a compute-bound loop. TRACEJIT_STREAM_MIN_BYTES overrides it
# (0: never).
STREAM_MIN_BYTES = settings.STREAM_MIN_BYTES.value()
# Rows longer than this are not streamed: their buffer would not stay in the L2 cache.
STREAM_ROW_MAX_BYTES = 1 << 18

_NUMBA_TYPES = NUMBA_TYPES  # (lower.py keeps the one table of kernel dtypes)


# --------------------------------------------------------------------------------------
# kernel kinds

def emit_kernel(part: Partition, group: KernelGroup, io=None) -> tuple[str, KernelSource]:
    """Source of `group`'s kernel module. `io` (elementwise kernels only) maps outputs to
    the inputs they overwrite in place (see inplace_plan._plan_inplace)."""
    assert not io or group.kind in ("elementwise", "multi"), "in-place: elementwise only"
    ks = KernelSource(part, group, io)
    shape = group.shape
    loop_vars = [f"i{k}" for k in range(len(shape))]
    idx = [Aff.var(v) for v in loop_vars]
    parallel = runs_parallel(shape)
    if group.kind == "elementwise":
        loop_vars, loop_shape, idx = _loops(ks, group)
        # The outer loop runs lo..hi-1 (SPLIT_DOC), in pieces or at once (0, n) as the
        # program decides from the size (runs_parallel): the code holds no size of that
        # axis, so one compiled kernel serves every batch size (DYNAMIC_DOC). Not a large
        # nest: it runs its outer axis with prange (parallel=True, Numba's own threads).
        split = (not _symbolic(shape) and len(loop_shape) > 0 and loop_shape[0] > 1
                 and not any(needs_positions(e.op) for e in group.members)
                 and not (parallel and len(loop_shape) > 1))
        if split and len(loop_shape) > 1:
            # (a nest: pieces of rows, whose first index is not known at compile time)
            ks.split_type, ks.split_align, ks.unknown_range_var = "int64", 1, loop_vars[0]
        body = _elementwise_body(ks, idx, group.members, ks.outputs)
        doc = ("One loop over the output's elements: every array is read and written at the "
               "same flat offset." if len(loop_shape) < len(shape) else
               "One loop nest over the output shape.")
        if split:
            ks.split = loop_shape[0]
            code = [f"    for {loop_vars[0]} in range(lo, hi):"] \
                + _nest(loop_vars[1:], loop_shape[1:], body, False, indent=2)
            return _module(ks, code, False, doc + SPLIT_DOC.format(n=ks.split)), ks
        code = _nest(loop_vars, loop_shape, body, parallel)
    elif group.kind == "multi":
        code = []
        first = 0
        carried: dict = {}  # 0-d values of earlier nests, as local variables
        for k, sub in enumerate(group.parts):
            kind = "" if sub.kind == "elementwise" else " " + sub.kind
            code.append(f"    # {list(sub.shape)}{kind}"
                        f": {_eqn_comment(sub.members[0]).split('  (')[0]}"
                        + (" ..." if len(sub.members) > 1 else ""))
            if sub.kind != "elementwise":
                code.extend(_reduction_part(ks, sub, k))
                continue
            sub_vars, sub_shape, sub_idx = _loops(ks, sub)
            scope = dict(carried)
            body = _elementwise_body(ks, sub_idx, sub.members,
                                     [v for v in sub.outputs if id(v) not in group.carried],
                                     first, scope)
            carried.update((k, scope[k]) for k in group.carried if k in scope)
            first += len(sub.members)
            code.extend(_nest(sub_vars, sub_shape, body, False, sized=ks))
        parallel = False
        kinds = "elementwise " if all(p.kind == "elementwise" for p in group.parts) else ""
        doc = (f"Several small {kinds}loop nests, run in turn (one call instead of "
               f"{len(group.parts)}).")
    elif group.kind == "row":
        # A reduction over all axes has no outer loop to run in parallel.
        parallel = parallel and group.split > 0
        ks.unknown_range_var = loop_vars[0] if parallel else None
        buffers, code = _row_code(ks, loop_vars, idx)
        doc = ("Reductions over trailing axes: per row, one pass per reduction stage, then "
               "the full-size outputs.")
        if parallel:
            helper = _rows_function(ks, buffers, code, loop_vars[0])
            call = _row_blocks_call(ks)
            ks.split, ks.split_type = -(-group.shape[0] // _block_rows(group)), "int64"
            ks.split_align = 1
            return _module(ks, call, False, doc + _ROWS_DOC, helper=helper), ks
        code = buffers + code
    else:
        code = _col_code(ks, loop_vars, idx)
        doc = "Reductions over leading axes, accumulated into the outputs row by row."
        parallel = False
    return _module(ks, code, parallel, doc), ks


def _reduction_part(ks: KernelSource, sub: KernelGroup, k: int) -> list:
    """The code of a multi kernel's row or col part: emitted as that kernel alone would be
    (the part's group, members and outputs in place of the whole kernel's), its local
    names suffixed with the part's number so that no two parts share one."""
    saved = ks.group, ks.members, ks.outputs
    ks.group, ks.members, ks.outputs = sub, {id(e.out): e for e in sub.members}, \
        list(sub.outputs)
    try:
        loop_vars = [f"i{d}" for d in range(len(sub.shape))]
        idx = [Aff.var(v) for v in loop_vars]
        if sub.kind == "row":
            buffers, code = _row_code(ks, loop_vars, idx)
            code = buffers + code
        else:
            code = _col_code(ks, loop_vars, idx)
        added = [v for v in ks.outputs if v not in sub.outputs]
    finally:
        ks.group, ks.members, ks.outputs = saved
    ks.outputs.extend(v for v in added if v not in ks.outputs)
    return [_LOCAL.sub(lambda m: f"{m.group(0)}_{k}", line) for line in code]


# The local names row and col code make up (v3, acc0, r2, row1).
_LOCAL = re.compile(r"\b(?:v|acc|r|row)\d+\b")


def _elementwise_body(ks: KernelSource, idx, members, outputs, first=0, scope=None) -> list:
    scope = {} if scope is None else scope
    body: list = []
    for n, e in enumerate(members, first):
        ks.compute(e, idx, scope, body, f"v{n}")
    for v in outputs:
        flat = _flat(v.type.shape, idx)
        old = ks.io.get(id(v))
        name = ks.out_names[id(v)] if old is None else ks.arg(old)
        body.append(f"{name}[{ks.index(flat)}] = {scope[id(v)]}")
    return body


def _nest(loop_vars, shape, body, parallel, indent=1, ks=None, sized=None) -> list:
    """The loop nest; with `ks`, loops of UNROLL_MAX or more iterations get their count
    through trip_count (see codegen.vmath.trip_count); with `sized` (the KernelSource), the
    outer loop's count is a size argument (KernelSource.size, DYNAMIC_DOC)."""
    lines = []
    pad = "    " * indent
    for k, (v, n) in enumerate(zip(loop_vars, shape)):
        rng = "prange" if (k == 0 and parallel) else "range"
        count = str(n)
        if k == 0 and sized is not None:
            count = sized.size(n)
        elif ks is not None and k == 0 and ks.group.split == 0 and type(n) is int and n > 1:
            # A reduction over all axes: its leading axis is the batch, a count LLVM does
            # not see at any size (a short one is not unrolled: a tiny kernel's loss).
            ks.imports.add(("codegen.vmath", "trip_count"))
            count = f"trip_count({ks.size(n)})"
        elif ks is not None and not isinstance(n, Dim) and n >= UNROLL_MAX:
            ks.imports.add(("codegen.vmath", "trip_count"))
            count = f"trip_count({n})"
        lines.append(f"{pad}for {v} in {rng}({count}):")
        pad += "    "
    lines.extend(pad + b for b in body)
    return lines


def _stages(ks: KernelSource):
    """Stage of each member: reductions of stage k finish in pass k."""
    g = ks.group
    stage = {}
    for e in g.members:
        s = 0
        for x in e.inputs:
            b = ks.part.base(x)
            if isinstance(b, Var) and id(b) in stage:
                s = max(s, stage[id(b)])
        if _accumulates(e):
            s += 1
        stage[id(e.out)] = s
    return stage


def _needed_full(ks: KernelSource, targets, row_ready: set, cached=()) -> list:
    """Full-size members needed to compute `targets`, in program order (the targets too,
    when they are full-size); traversal stops at row values and at `cached` members."""
    g = ks.group
    members = ks.members
    need = set()
    stack = []
    for t in targets:
        if id(t.out) in row_ready:
            continue
        if not _is_row_value(g, t.out) and not _accumulates(t):
            need.add(id(t.out))
        stack.append(t)
    while stack:
        e = stack.pop()
        if id(e.out) in cached and not _accumulates(e):
            continue
        for x in e.inputs:
            b = ks.part.base(x)
            if not isinstance(b, Var) or id(b) not in members or id(b) in row_ready:
                continue
            if id(b) not in need and not _is_row_value(g, b):
                need.add(id(b))
                stack.append(members[id(b)])
    return [e for e in g.members if id(e.out) in need]


# A row loop this long is not unrolled completely: LLVM would turn its vectorized
# reduction into one dependency chain (layer_norm (4096,1024) serial: 1.6 -> 1.1 ms), and
# a short row of literal length is unrolled before it is vectorized, into scalar code:
# rows of 16 to ~100 elements ran 2-6x slower than with the count hidden (4096 rows,
# medians of 100 calls: log_softmax + softmax of 64: 1290 -> 224 us, of 65: 1330 -> 256,
# of 20: 600 -> 257; layer_norm of 64: 106 -> 47 us; the W9 cross-entropy row kernel
# [1024, 65]: 326 -> 58 us). Below 16 the unrolled row stays faster (softmax of 8: 31 vs
# 117 us). With the count hidden the vector loop does 64 elements a turn and the rest
# runs scalar, so some lengths past 80 lose a little (softmax of 96: 240 -> 410 us,
# layer_norm of 96 gains: 181 -> 90 us).
UNROLL_MAX = 16

# where a reduction's accumulator starts, by its kind (OpDef.reduce)
_IDENTITY = {"sum": 0, "max": -np.inf}


def _accumulates(e) -> bool:
    """A fused reduction (sum, amax): its row's OpDef.reduce names the accumulation."""
    return OPS[e.op].reduce is not None


def _identity(ks: KernelSource, e) -> str:
    """The typed constant a sum (0) or amax (-inf) accumulator starts from."""
    return ks.const(_IDENTITY[OPS[e.op].reduce], e.out.type.dtype)


def _row_code(ks: KernelSource, loop_vars, idx) -> tuple[list, list]:
    """(buffer allocations, the loop nest over the rows) of a row kernel."""
    g = ks.group
    split = g.split
    outer_vars, inner_vars = loop_vars[:split], loop_vars[split:]
    outer_shape, inner_shape = g.shape[:split], g.shape[split:]
    inner_flat = ks.index(_flat(inner_shape, idx[split:]))
    stage = _stages(ks)
    sums = col_sums(g)  # (outputs, added to the last pass)
    summed = {id(e.out) for e in sums}
    for e in sums:
        if e.out not in ks.outputs:
            ks.outputs.append(e.out)
            ks.out_names[id(e.out)] = f"out{len(ks.out_names)}"
    reductions = [e for e in g.members if _accumulates(e) and id(e.out) not in summed]
    row_members = [e for e in g.members if not _accumulates(e)
                   and _is_row_value(g, e.out)]
    full_outputs = [v for v in ks.outputs if not _is_row_value(g, v)]
    row_outputs = [v for v in ks.outputs if _is_row_value(g, v) and id(v) not in summed]
    n_passes = max((stage[id(e.out)] for e in reductions), default=0)

    # The passes: reductions of stage p, then (if any) the full-size outputs and sums.
    passes = [[e for e in reductions if stage[id(e.out)] == p] for p in range(1, n_passes + 1)]
    if full_outputs or sums:
        passes.append([ks.members[id(v)] for v in full_outputs] + sums)
    # Which full-size values to keep in a row buffer rather than recompute in later passes.
    plain_needs = [{id(e.out) for e in _needed_full(ks, t, set())} for t in passes]
    cache = set()
    for p, need in enumerate(plain_needs):
        later = set().union(*plain_needs[p + 1:]) if p + 1 < len(plain_needs) else set()
        for e in g.members:
            if id(e.out) in need and id(e.out) in later and is_expensive(e.op):
                cache.add(id(e.out))
    # A full-size output's row is a free buffer until the last pass, which reads a kept
    # value at the position it then writes (the stores come after all loads): softmax keeps
    # exp(x - max) in its output row (saves a buffer's traffic: 6% of softmax (4096,1024)).
    # A kept value that is itself a full-size output is kept in its own row: written once,
    # where it ends up (W10's cross-entropy kept exp(x - max) in the log-softmax output's
    # row and copied it to its own output in the last pass: one more 2.7 MiB stream).
    host = {}  # kept value -> the output whose row keeps it
    kept = [k for e in g.members for k in [id(e.out)] if k in cache]
    free_rows = [v for v in full_outputs if id(v) not in kept]
    for v in full_outputs:
        if id(v) in kept:
            host[id(v)] = v
    for key in [k for k in kept if k not in host]:
        out = next((v for v in free_rows if v.type.dtype == ks.members[key].out.type.dtype),
                   None)
        if out is not None:
            free_rows.remove(out)
            host[key] = out
    # Such an output is stored plainly: streaming it would cost a pass through a buffer of
    # its own (see STREAM_MIN_BYTES).
    hosts = {id(v) for v in host.values()}
    streamed = {id(v) for v in full_outputs if id(v) not in hosts and _streams(g, v)}
    buffers = {}
    # Allocated once, not per row (a heap allocation per row cost softmax (4096,1024) 7%).
    buffer_lines: list = []

    row_scope: dict = {}
    row_body: list = []
    row_ready: set = set()
    stored: set = set()
    counter = [0]

    # A streamed output is written from a row buffer of its own.
    stream_rows = {}
    for v in full_outputs:
        if id(v) in streamed:
            stream_rows[id(v)] = f"row{len(buffer_lines)}"
            buffer_lines.append(f"    {stream_rows[id(v)]} = np.empty({math.prod(inner_shape)}, "
                                f"{np_type(v.type.dtype)})  # a row of "
                                f"{ks.out_names[id(v)]}, streamed to it")
    for key in [k for e in g.members for k in [id(e.out)] if k in cache]:
        e = ks.members[key]
        if key in host:
            # (only here: with a symbolic inner size this index needs it as a stride)
            buffers[key] = (ks.out_names[id(host[key])], ks.index(_flat(g.shape, idx)))
            continue
        name = f"row{len(buffer_lines)}"
        buffers[key] = (name, inner_flat)
        buffer_lines.append(f"    {name} = np.empty({math.prod(inner_shape)}, "
                            f"{np_type(e.out.type.dtype)})  # keeps {e.out!r} of a row")

    def emit_row_members(max_stage):
        for e in row_members:
            if id(e.out) in row_ready or stage[id(e.out)] > max_stage:
                continue
            ks.compute(e, idx, row_scope, row_body, f"r{counter[0]}")
            counter[0] += 1
            row_ready.add(id(e.out))

    def emit_pass(targets):
        inner_scope = dict(row_scope)
        inner: list = []
        for e in _needed_full(ks, targets, row_ready, stored):
            name = f"v{counter[0]}"
            counter[0] += 1
            if id(e.out) in stored:
                array, at = buffers[id(e.out)]
                inner.append(f"{name} = {array}[{at}]  # {e.out!r}")
                inner_scope[id(e.out)] = name
                continue
            ks.compute(e, idx, inner_scope, inner, name)
            if id(e.out) in cache:
                array, at = buffers[id(e.out)]
                inner.append(f"{array}[{at}] = {name}  # keeps {e.out!r}")
        return inner_scope, inner

    emit_row_members(0)
    for p, targets in enumerate(passes[:n_passes], start=1):
        accs = []
        for e in targets:
            acc = f"acc{counter[0]}"
            counter[0] += 1
            row_body.append(f"{acc} = {_identity(ks, e)}  # {_eqn_comment(e)}")
            accs.append((e, acc))
        inner_scope, inner = emit_pass(targets)
        for e, acc in accs:
            x = e.inputs[0]
            val = inner_scope.get(id(x)) or ks.load(x, idx, inner_scope, inner)
            if OPS[e.op].reduce == "sum" and e.out.type.dtype.kind == "f":
                # only the accumulation may be reordered, so that it vectorizes (FASTMATH)
                ks.imports.add(("codegen.vmath", "add_reassoc"))
                inner.append(f"{acc} = add_reassoc({acc}, {val})  # {e.out!r}")
            elif OPS[e.op].reduce == "sum":
                inner.append(f"{acc} += {val}  # {e.out!r}")
            elif e.out.type.dtype.kind == "f":
                # llvm.maximum: NaN propagates, and the running max vectorizes (a
                # compare-select chain needs 'nnan' to)
                ks.imports.add(("codegen.vmath", "maximum"))
                inner.append(f"{acc} = maximum({acc}, {val})  # {e.out!r}")
            else:
                inner.append(f"{acc} = {val} if {val} > {acc} else {acc}  # {e.out!r}")
        row_body.extend(_nest(inner_vars, inner_shape, inner, False, indent=0, ks=ks))
        for e, acc in accs:
            row_scope[id(e.out)] = acc
            row_ready.add(id(e.out))
        stored.update(k for k in cache if k in plain_needs[p - 1])
        emit_row_members(p)
    if full_outputs or sums:
        inner_scope, inner = emit_pass(passes[-1])
        for e in sums:
            x = e.inputs[0]
            val = inner_scope.get(id(x)) or ks.load(x, idx, inner_scope, inner)
            inner.append(_col_accumulate(ks, e, inner_flat, val))
        streams = []
        for v in full_outputs:
            out = ks.out_names[id(v)]
            if host.get(id(v)) is v:
                continue  # (stored in its own row by the pass that computed it)
            if id(v) in streamed:
                row = stream_rows[id(v)]
                inner.append(f"{row}[{inner_flat}] = {inner_scope[id(v)]}")
                streams.append((out, row))
                continue
            inner.append(f"{out}[{ks.index(_flat(v.type.shape, idx))}] = {inner_scope[id(v)]}")
        row_body.extend(_nest(inner_vars, inner_shape, inner, False, indent=0, ks=ks))
        start = ks.index(_flat(g.shape, idx[:split] + [Aff(0)] * len(inner_shape)))
        for out, row in streams:
            ks.imports.add(("codegen.vmath", "stream_copy"))
            row_body.append(f"stream_copy({out}, {start}, {row}, {math.prod(inner_shape)})"
                            "  # streaming stores, past the cache")
    for v in row_outputs:
        ridx = _row_index(v.type.shape, outer_shape, idx)
        row_body.append(f"{ks.out_names[id(v)]}[{ks.index(_flat(v.type.shape, ridx))}] = "
                        f"{row_scope[id(v)]}")
    # (blocks of rows in parallel: their bounds come from _rows_function instead)
    assert not (sums and ks.unknown_range_var), "col sums of rows in parallel"
    code = [line for e in sums for line in _col_init(ks, e, math.prod(inner_shape))]
    code += _nest(outer_vars, outer_shape, row_body, False,
                  sized=ks if ks.unknown_range_var is None else None)
    if streamed:
        ks.imports.add(("codegen.vmath", "store_fence"))
        code.append("    store_fence()  # streamed stores are weakly ordered: finish them")
    return buffer_lines, code


def _streams(g, v) -> bool:
    """Whether a row kernel writes full-size output `v` with streaming stores."""
    if _symbolic(g.shape) or g.split == 0:  # (no rows: the buffer would be all of it)
        return False
    row_bytes = math.prod(g.shape[g.split:]) * v.type.dtype.itemsize
    return (row_bytes <= STREAM_ROW_MAX_BYTES
            and math.prod(g.shape) * v.type.dtype.itemsize >= STREAM_MIN_BYTES)


# Past PARALLEL_MIN_SIZE, a row kernel runs blocks of rows in parallel. The rows are a
# function of their own, called per block (it was the body of a prange loop, which Numba
# lowers without the kernel's fastmath flags: there the per-row sums stopped vectorizing,
# layer_norm over (4096,1024) measured 5.4 ms with the rows inline, 1.4 ms serial).
# Indices using the row are unsigned: a block's first row is not known at compile time, so
# a signed index could be negative and Numba wraps each load in a negative-index fix-up,
# which keeps LLVM from vectorizing the row loops (softmax blocks ran 4x slower).
# A block is at least ROW_BLOCK_SIZE elements, so it pays for its call and its buffers.
# The kernel runs blocks lo..hi-1; the runtime shares the blocks out evenly to its threads
# (SPLIT_DOC), which compiles without Numba's parallel pipeline.
ROW_BLOCK_SIZE = 1 << 16
_ROWS_DOC = ("\nBlocks of rows run in parallel: the kernel does blocks lo..hi-1, on as many "
             "threads at once as the runtime splits them among; `rows` does one block.")


def _block_rows(g) -> int:
    per_row = max(math.prod(g.shape[1:]), 1)
    return max(1, -(-ROW_BLOCK_SIZE // per_row))


def _rows_function(ks: KernelSource, buffers: list, code: list, var: str) -> list:
    """`rows(..., block)`: the row loop nest restricted to one block of its first axis."""
    g = ks.group
    n, b = g.shape[0], _block_rows(g)
    head = f"    for {var} in range("
    assert code[0].startswith(head), code[0]
    if b == 1:
        rng = f"{var}_block, {var}_block + 1"
    else:
        rng = f"{var}_block * {b}, min({var}_block * {b} + {b}, {ks.size(n)})"
    code = [f"{head}{rng}):"] + code[1:]
    params = _params(ks) + [f"{var}_block"]
    # (the hidden constants are locals of the function whose loops read them: here)
    return [_decorator(_types(ks) + ["int64"], False), f"def rows({', '.join(params)}):"] \
        + _hidden_lines(ks) + buffers + code


def _hidden_lines(ks: KernelSource) -> list:
    return [f"    {local} = hidden({name})  # (a masked running max vectorizes)"
            for name, local in getattr(ks, "hidden", {}).items()]


def _row_blocks_call(ks: KernelSource) -> list:
    return ["    for i0_block in range(lo, hi):",
            f"        rows({', '.join(_params(ks))}, i0_block)"]


def _col_code(ks: KernelSource, loop_vars, idx) -> list:
    g = ks.group
    split = g.split
    kept_shape = g.shape[split:]
    reductions = [e for e in g.members if _accumulates(e)]
    for e in reductions:
        if e.out not in ks.outputs:
            ks.outputs.append(e.out)
            ks.out_names[id(e.out)] = f"out{len(ks.out_names)}"
    lines = [line for e in reductions for line in _col_init(ks, e, math.prod(kept_shape))]
    loop_vars, loop_shape, idx = _col_loops(ks, loop_vars, idx)
    scope: dict = {}
    body: list = []
    counter = 0
    for e in g.members:
        if _accumulates(e):
            continue
        ks.compute(e, idx, scope, body, f"v{counter}")
        counter += 1
    kept_flat = ks.index(_flat(kept_shape, idx[split:]))
    for e in reductions:
        x = e.inputs[0]
        val = scope.get(id(x)) or ks.load(x, idx, scope, body)
        body.append(_col_accumulate(ks, e, kept_flat, val))
    reduced = {id(e.out) for e in reductions}
    for v in ks.outputs:
        # (a keepdim reduction over size-1 leading dims has the group's shape too: it is
        # written above, per kept element)
        if v.type.shape == g.shape and id(v) not in reduced:
            body.append(f"{ks.out_names[id(v)]}[{ks.index(_flat(v.type.shape, idx))}] = "
                        f"{scope[id(v)]}")
    lines.extend(_nest(loop_vars, loop_shape, body, False, sized=ks))
    return lines


def _col_init(ks: KernelSource, e, n: int) -> list:
    """The lines setting a reduction over leading axes to its identity, before its rows."""
    return [f"    for t in range({n}):  # {_eqn_comment(e)}",
            f"        {ks.out_names[id(e.out)]}[t] = {_identity(ks, e)}"]


def _col_accumulate(ks: KernelSource, e, kept_flat: str, val: str) -> str:
    """The line adding one row's element `val` to a reduction over leading axes."""
    o = f"{ks.out_names[id(e.out)]}[{kept_flat}]"
    if OPS[e.op].reduce == "sum":
        return f"{o} += {val}"
    return f"{o} = {val} if ({val} > {o} or {val} != {val}) else {o}"


def runs_parallel(shape) -> bool:
    """Whether a kernel of iteration shape `shape` runs on several threads: a split kernel's
    pieces (decided by the program, which knows the sizes: the code does not), a row
    kernel's blocks, a nest's prange. Symbolic sizes (tracer.symbolic) are run-time
    arguments named as printed (N0): their loops stay serial, as the size is not known
    when choosing."""
    return bool(not _symbolic(shape) and len(shape) and math.prod(shape) >= PARALLEL_MIN_SIZE
                and shape[0] > 1)


def _symbolic(shape) -> bool:
    return any(isinstance(d, Dim) for d in shape)


def _used_dims(ks: KernelSource, code: list) -> list:
    """The symbolic sizes the kernel's code names (run-time int64 arguments after the arrays)."""
    part = ks.part
    dims = getattr(part, "dims", None)
    if dims is None:  # (once per program: a walk of the whole graph per kernel took W10 13 s)
        dims = part.dims = graph_dims(part.graph)
    if not dims:
        return []
    text = "\n".join(code)
    return [d for d in dims if re.search(rf"\b{d.name}\b", text)]


def _outputs(ks: KernelSource) -> list:
    """The outputs that are arguments of their own (not written through an input)."""
    return [v for v in ks.outputs if id(v) not in ks.io]


SPLIT_DOC = """

Its outer loop runs lo..hi-1, so its code holds no count of that axis and one compiled
kernel serves every size of it (here {n}). The program calls it with 0, n; past
PARALLEL_MIN_SIZE, it runs [0, n) in pieces on its threads at once, each a call of this
kernel for its own lo..hi (codegen.parallel._split_call): the kernel releases the GIL (nogil)
and compiles without Numba's parallel pipeline (prange), which added about 0.2 s to the
first compile of a GELU. Unsigned bounds, or indices cast to unsigned: Numba adds no
negative-index checks."""


DYNAMIC_DOC = """

Sizes it takes as arguments, so that one compiled kernel serves every value of them (a
training step at another batch size): {sizes}. It assumes what its code says: each is at
least 2 (a size-1 axis broadcasts, a size-0 one runs nothing: other code), and the arrays
hold that many rows of the literal sizes. The program passes its own sizes, the ones it
allocated the arrays with (Program._kernel_op checks them once)."""


def _params(ks: KernelSource) -> list:
    return [ks.arg_names[id(v)] for v in ks.args] + [ks.out_names[id(v)] for v in _outputs(ks)] \
        + [d.name for d in ks.dims] + list(ks.sizes.values()) \
        + (["lo", "hi"] if ks.split is not None else [])


def _types(ks: KernelSource) -> list:
    return [_NUMBA_TYPES[v.type.dtype.name] + "[::1]" for v in ks.args + _outputs(ks)] \
        + ["int64"] * (len(ks.dims) + len(ks.sizes)) \
        + ([ks.split_type] * 2 if ks.split is not None else [])


def _decorator(types: list, parallel: bool, nogil: bool = False) -> str:
    flags = "{" + ", ".join(repr(f) for f in sorted(FASTMATH)) + "}" if FASTMATH else "set()"
    return (f'@njit("void({", ".join(types)})", cache=True, fastmath={flags}, '
            f'error_model="numpy"{", parallel=True" if parallel else ""}'
            f'{", nogil=True" if nogil else ""})')


def _module(ks: KernelSource, code: list, parallel: bool, doc: str, helper=()) -> str:
    g = ks.group
    code, helper = ks.place_loads(code), ks.place_loads(helper)
    ks.dims = _used_dims(ks, list(code) + list(helper))
    if ks.sizes:
        doc += DYNAMIC_DOC.format(sizes=", ".join(f"{name} = {n} here"
                                                  for n, name in ks.sizes.items()))
    outputs = _outputs(ks)
    lines = ks.header(doc)
    lines.append("import math  # noqa: F401")
    lines.append("")
    lines.append("import numpy as np")
    lines.append("from numba import prange  # noqa: F401")
    lines.append("from codegen.build import njit  # numba.njit with a leaner cache load")
    for module, name in sorted(ks.imports, key=lambda t: (t[0], t[1] or "")):
        if name is not None:
            lines.append(f"from {module} import {name}")
    lines.append("")
    for (dtype, text), name in ks.consts.items():
        lines.append(f"{name} = {np_type(dtype)}({text})")
    lines.append("")
    lines.append("")
    if helper:
        lines.extend(helper)
        lines.append("")
        lines.append("")
    lines.append(_decorator(_types(ks), parallel, nogil=ks.split is not None))
    lines.append(f"def {_fn_name(g)}({', '.join(_params(ks))}):")
    written = {id(old): v for v, old in
               ((v, ks.io[id(v)]) for v in ks.outputs if id(v) in ks.io)}
    for v in ks.args:
        note = f", overwritten with %{written[id(v)].name}" if id(v) in written else ""
        start = ks.offsets.get(ks.arg_names[id(v)])
        note += f", passed from flat offset {start}" if start else ""
        lines.append(f"    # {ks.arg_names[id(v)]}: {_describe_var(v)}{note}")
    for v in outputs:
        lines.append(f"    # {ks.out_names[id(v)]}: {_describe_var(v)}")
    if not helper:
        lines.extend(_hidden_lines(ks))
    lines.extend(code)
    if not code:
        lines.append("    pass")
    return "\n".join(lines) + "\n"


def _describe_var(v) -> str:
    return f"%{v.name} {SHORT_NAMES[v.type.dtype]}{list(v.type.shape)}"


def _fn_name(g: KernelGroup) -> str:
    return "kernel"


__all__ = ["emit_kernel", "FASTMATH", "c_strides"]
