"""Runner lines for single ops that a numpy/blas/view step writes inline instead of calling
the registry's implementation (a lowering row's ``inline``): each is one op's algorithm
(numpy's own view call, BLAS through np.matmul, an inlined check), kept out of the generic
runner so the runner holds no op names.

Each form is ``f(gen, k, step, a, direct, bound) -> bool``: `gen` the runner generator
(codegen.runner._Generator: its `lines`, `ns`, `fortran`), `k` the step's position, `a`
the operand expressions when every operand is a slot and no parameter depends on a
symbolic size (`direct`), `bound` whether parameters are bound per call. It appends its
lines and returns True, or returns False to let the implementation be called.
"""
from __future__ import annotations

import math

import numpy as np

from eager.dtypes import is_half
from eager.ops_conv import im2col_padded_shape
from eager.shape_rules import numpy_index
from tracer.ir import Var

from . import gemm, placement


def permute(gen, k, step, a, direct, bound) -> bool:
    if not direct:
        return False
    e, out = step.eqn, step.out
    gen.lines.append(f"    v{out} = {a[0]}.transpose({tuple(e.params['perm'])})")
    if tuple(e.params["perm"]) == (1, 0) and step.inputs[0] not in gen.fortran:
        gen.fortran.add(out)  # the transpose of a C-ordered matrix (as a rule)
    return True


def reshape(gen, k, step, a, direct, bound) -> bool:
    if not direct:
        return False
    e, shape = step.eqn, tuple(step.eqn.params["shape"])
    if _RESHAPE_COPY_KW and _stays_inside(gen, e.out) \
            and math.prod(shape) * np.dtype(e.out.type.dtype).itemsize >= _REUSE_MIN_BYTES:
        # A reshape numpy can only make by copying (of a permuted value: W8's pooling
        # windows, its convolution gradients' layout changes) copies into a reused buffer
        # rather than fresh memory; one it can make as a view stays a view.
        gen.ns["reshape_into"] = _reshape_into
        buf = gen.pool(shape, e.out.type.dtype)
        gen.lines.append(f"    v{step.out} = reshape_into({a[0]}, {shape}, {buf})")
        return True
    gen.lines.append(f"    v{step.out} = {a[0]}.reshape({shape})")
    return True


# ndarray.reshape(copy=False) (numpy 2.1) raises where only a copy would do.
_RESHAPE_COPY_KW = np.lib.NumpyVersion(np.__version__) >= "2.1.0"
# Below this a fresh array comes from numpy's or glibc's caches: nothing to save.
_REUSE_MIN_BYTES = 1 << 15


def _reshape_into(a, shape, buf):
    """`a.reshape(shape)`: a view of `a` where one exists, else a copy written into `buf`
    (C-contiguous, of `shape`)."""
    try:
        return a.reshape(shape, copy=False)
    except ValueError:
        np.copyto(buf.reshape(a.shape), a)
        return buf


def gather(gen, k, step, a, direct, bound) -> bool:
    if not direct:
        return False
    # An index out of range (the op's value check) raises through the op's implementation,
    # so that the caller knows it for a value check and runs the call eagerly (zero cost
    # when nothing raises).
    gen.lines += ["    try:",
                  f"        v{step.out} = {a[0]}[{', '.join(a[1:])}]",
                  "    except IndexError:",
                  f"        op{k}({', '.join(a)})  # gather raises: an index out of range",
                  "        raise"]
    return True


def scatter_add(gen, k, step, a, direct, bound) -> bool:
    if not (direct and step.unique):
        return False
    e, out = step.eqn, step.out
    gen.ns[f"t{out}"] = (tuple(e.params["shape"]), e.out.type.dtype)
    # (an index out of range raises through the op's implementation, as gather's)
    gen.lines += ["    try:",
                  f"        v{out} = zeros(*t{out}); v{out}[{', '.join(a[1:])}] = {a[0]}"
                  "  # scatter_add, no position repeats",
                  "    except IndexError:",
                  f"        op{k}({', '.join(a)}, **p{k})  # scatter_add raises: an index out "
                  "of range",
                  "        raise"]
    return True


def scatter_slice(gen, k, step, a, direct, bound) -> bool:
    """The registry's scatter_slice (zeros, the value in a slice of them) into a buffer
    reused every call and zeroed once, when made: each call writes the slice, and the rest
    stays zero (no step but this one writes a step's reused buffer). W10's gradients of an
    LSTM layer's stacked outputs, [35,20,128] into [210,20,128] of zeros: 0.1 ms each in
    fresh zeroed memory."""
    e = step.eqn
    if not direct or bound or gen.p.bind is not None or not _stays_inside(gen, e.out):
        return False
    gen.ns[f"i{k}"] = numpy_index(e.params["index"])
    buf = gen.pool(tuple(e.out.type.shape), e.out.type.dtype, zeroed=True)
    gen.lines.append(f"    v{step.out} = {buf}; v{step.out}[i{k}] = {a[0]}"
                     "  # scatter_slice into zeros made once")
    return True


def cat(gen, k, step, a, direct, bound) -> bool:
    """np.concatenate into a C-ordered reused buffer (fresh memory for a value that leaves
    the program) rather than into memory laid out as the pieces are; pieces whose producer
    wrote them in place already (codegen.placement) are not copied."""
    e = step.eqn
    if not direct or not all(isinstance(d, int) for d in e.out.type.shape):
        return False
    gen.ns["concatenate"], gen.ns["copyto"] = np.concatenate, np.copyto
    planned = placement.plan(gen)["cats"].get(step.out)
    if planned is not None:
        dest, pieces, note = planned
        done = sum(v is None for v in pieces.values())
        gen.lines.append(f"    v{step.out} = {dest}  # cat{note} ({done} of {len(pieces)} "
                         f"pieces written in place)")
        for j, index in pieces.items():
            if index is not None:  # (None: written in place by its producer)
                gen.lines.append(f"    copyto(v{step.out}[{index}], {a[j]})")
        return True
    shape, dtype = tuple(e.out.type.shape), e.out.type.dtype
    if _stays_inside(gen, e.out):
        buf = gen.pool(shape, dtype)
    else:
        gen.ns[f"t{step.out}"] = (shape, dtype)
        buf = f"empty(*t{step.out})"
    gen.lines.append(f"    v{step.out} = concatenate(({''.join(x + ', ' for x in a)}), "
                     f"axis={int(e.params['axis'])}, out={buf})")
    return True


def matmul(gen, k, step, a, direct, bound) -> bool:
    if not direct or is_half(step.eqn.out.type.dtype):
        return False  # (half types: the registry's impl multiplies in float32, as eager)
    e, out, lines = step.eqn, step.out, gen.lines
    mm = _product(gen, e)
    if mm == "matmul":
        a = gen.tuned_operands(e, step.inputs, a)
    place = placement.plan(gen)["into"].get(out)
    if place is not None:  # a cat's piece in its place, or laid out for its permute
        lines.append(f"    v{out} = {mm}({a[0]}, {a[1]}, out={place})")
    elif step.dest >= 0:
        lines.append(f"    d = dests[{step.dest}] if dests is not None else None")
        lines.append(f"    v{out} = {mm}({a[0]}, {a[1]}) if d is None else "
                     f"{mm}({a[0]}, {a[1]}, out=d)")
    elif id(e.out) not in gen.p._escaping and len(e.out.type.shape) >= 2 \
            and all(x.type.dtype == e.out.type.dtype for x in e.inputs):
        # A value that stays inside the program: into a buffer reused every call, as a
        # kernel's pooled output. W9's step spent more time page-faulting fresh matmul
        # outputs (numpy asks the OS for fresh pages) than multiplying.
        buf = gen.pool(e.out.type.shape, e.out.type.dtype)
        lines.append(f"    v{out} = {mm}({a[0]}, {a[1]}, out={buf})")
    else:
        lines.append(f"    v{out} = {mm}({a[0]}, {a[1]})")
    return True


def uses_gemm(e) -> bool:
    """Whether product `e` runs through codegen.gemm's kernel (its rule picks it), if the
    kernel builds."""
    x, y = e.inputs
    return isinstance(x, Var) and isinstance(y, Var) \
        and x.type.dtype == e.out.type.dtype and y.type.dtype == e.out.type.dtype \
        and gemm.use_for(tuple(x.type.shape), tuple(y.type.shape), e.out.type.dtype)


def _product(gen, e) -> str:
    """The runner's name of the function computing product `e`: "gemm" (codegen.gemm's
    kernel, where its rule picks it and the kernel builds) or "matmul" (numpy's BLAS)."""
    if not uses_gemm(e):
        return "matmul"
    try:
        gemm.prepare()
    except Exception:  # noqa: BLE001 - never a crash: numpy's BLAS computes it
        return "matmul"
    gen.ns["gemm"] = gemm.matmul
    return "gemm"


def _stays_inside(gen, v) -> bool:
    """Whether value `v` has a static shape and does not leave the program (so a buffer
    reused every call may hold it, as a kernel's pooled output)."""
    return placement.stays_inside(gen, v)


def im2col(gen, k, step, a, direct, bound) -> bool:
    """The registry's im2col, writing the columns (and the padded copy) into reused
    buffers: into fresh memory, W8's two im2col steps took 1.4-1.8 ms each (page faults),
    over 4x what the copies cost."""
    e = step.eqn
    if not direct or not _stays_inside(gen, e.out) \
            or not all(isinstance(d, int) for d in e.inputs[0].type.shape):
        return False
    dtype = e.out.type.dtype
    padded = im2col_padded_shape(tuple(e.inputs[0].type.shape), e.params["pad"])
    extra = f", padded={gen.pool(padded, dtype)}" if padded is not None else ""
    gen.lines.append(f"    v{step.out} = op{k}({a[0]}, out={gen.pool(e.out.type.shape, dtype)}"
                     f"{extra}, **p{k})  # im2col into reused buffers")
    return True


def check_class_index(gen, k, step, a, direct, bound) -> bool:
    e, slots = step.eqn, step.inputs
    x = e.inputs[0] if e.inputs else None
    if not (isinstance(x, Var) and not bound and np.dtype(x.type.dtype).kind == "i"
            and isinstance(slots[0], int) and all(isinstance(d, int) for d in x.type.shape)):
        return False
    # The registry's check, inlined (a third of its cost was the call): seen as
    # unsigned, a negative index exceeds any size; on a hit the op's own
    # implementation raises its IndexError.
    v = f"v{slots[0]}"
    if math.prod(x.type.shape):
        gen.ns["umax"] = np.maximum.reduce
        gen.ns[f"u{k}"] = np.dtype(f"u{np.dtype(x.type.dtype).itemsize}")
        gen.lines.append(f"    if umax({v}.view(u{k}), None) >= {int(e.params['size'])}: "
                         f"op{k}({v}, **p{k})  # check_class_index raises")
    gen.lines.append(f"    v{step.out} = {v}.view()")
    return True


def copied_view(gen, k, step, a, direct, bound) -> bool:
    """A strided view op (diagonal, unfold, view(dtype)): its implementation's numpy view,
    copied. Eagerly the view aliases its input; a program's value never aliases another's
    memory (buffers are reused per call, outputs are fresh)."""
    if bound:
        return False
    ops = a if direct else [gen.operand(x, f"l{k}_{j}") for j, x in enumerate(step.inputs)]
    gen.lines.append(f"    v{step.out} = op{k}({', '.join(ops)}, **p{k}).copy()"
                     f"  # {step.eqn.op} (a copy of the view)")
    return True
