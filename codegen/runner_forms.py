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
from tracer.ir import Var


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
    gen.lines.append(f"    v{step.out} = {a[0]}[{', '.join(a[1:])}]")
    return True


def scatter_add(gen, k, step, a, direct, bound) -> bool:
    if not (direct and step.unique):
        return False
    e, out = step.eqn, step.out
    gen.ns[f"t{out}"] = (tuple(e.params["shape"]), e.out.type.dtype)
    gen.lines.append(f"    v{out} = zeros(*t{out}); v{out}[{', '.join(a[1:])}] = {a[0]}"
                     "  # scatter_add, no position repeats")
    return True


def cat(gen, k, step, a, direct, bound) -> bool:
    """np.concatenate into a C-ordered reused buffer (fresh memory for a value that leaves
    the program) rather than into memory laid out as the pieces are; pieces whose producer
    wrote them in place already (_cat_plan) are not copied."""
    e = step.eqn
    if not direct or not all(isinstance(d, int) for d in e.out.type.shape):
        return False
    gen.ns["concatenate"], gen.ns["copyto"] = np.concatenate, np.copyto
    planned = _cat_plan(gen)["cats"].get(step.out)
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


def output_place(gen, slot):
    """The expression of the C-ordered array a kernel writes output `slot` into when that
    value is a piece of a cat, in its place in the cat's buffer (_cat_plan), else None."""
    return _cat_plan(gen)["into"].get(slot)


def _cat_plan(gen) -> dict:
    """Where cats and their pieces live, so that no piece is copied that its producer can
    write in place, and no reshape after a permuted cat copies:

    * a cat whose only reader is a permute is laid out in the permuted order. W9's
      attention backward cats the q, k, v gradients to [3,B,H,T,D], permutes them to
      [B,T,3,H,D] and reshapes that to [B*T,3*H*D] for the products: two 0.1 ms copies
      per layer, now views;
    * a piece made by a BLAS product is written by it into its place (a [T,D] block of
      the buffer is a matrix with a row stride: W9's q, k, v gradients);
    * a piece made by a kernel or by another cat, whose place is a C-ordered block (W10's
      35 per-step gate gradients stacked into [35,20,512]), is made in its place.

    A piece lives in the cat's buffer from the step that makes it: every value involved
    stays inside the program (a buffer reused every call), and a piece's producer is
    given one place at most. {"cats": {cat slot: (its value's expression, {piece j: the
    index of its place, or None where its producer writes it}, a note)}, "into": {slot:
    the expression of its place}}."""
    plan = gen.__dict__.get("_cat_plan")
    if plan is not None:
        return plan
    plan = gen._cat_plan = {"cats": {}, "into": {}}
    p = gen.p
    if p.bind is not None:
        return plan
    readers, producer = {}, {}
    for st in p.steps:
        for s in _reads(st):
            readers.setdefault(s, []).append(st)
        for s in _written(st):
            producer[s] = st
    # (outer cats first: an inner cat that is a piece of an outer one is made in its place)
    for st in reversed(p.steps):
        e = getattr(st, "eqn", None)
        if e is None or e.op != "cat" or getattr(st, "how", "") != "numpy" \
                or not all(isinstance(x, int) for x in st.inputs) \
                or not _stays_inside(gen, e.out) or st.out in p.results:
            continue
        shape, dtype = tuple(e.out.type.shape), e.out.type.dtype
        size = np.dtype(dtype).itemsize
        dest, note = plan["into"].get(st.out), ""
        users = readers.get(st.out, [])
        perm = None
        if dest is None and len(users) == 1 and getattr(users[0], "eqn", None) is not None \
                and users[0].eqn.op == "permute" and users[0].how == "view":
            perm = tuple(int(i) for i in users[0].eqn.params["perm"])
        if dest is not None:
            witness = _c_witness(shape, size)
            note = ", in its place in a cat"
        elif perm is not None:
            inv = tuple(int(i) for i in np.argsort(perm))
            laid = tuple(shape[i] for i in perm)
            dest = f"{gen.pool(laid, dtype)}.transpose({inv})"
            witness = _c_witness(laid, size).transpose(inv)
            note = ", laid out for the permute that reads it"
            if perm == (1, 0):
                gen.fortran.add(st.out)  # (its transpose, the permute, is C-ordered)
        else:
            dest, witness = gen.pool(shape, dtype), _c_witness(shape, size)
        axis, start, pieces = int(e.params["axis"]) % len(shape), 0, {}
        for j, (x, s) in enumerate(zip(e.inputs, st.inputs)):
            n = x.type.shape[axis]
            index = (slice(None),) * axis + (slice(start, start + n),)
            pieces[j] = f"{':, ' * axis}{start}:{start + n}"
            start += n
            made = _producer_into(gen, s, readers, producer, witness[index], plan)
            if made is not None:
                plan["into"][made[0]] = f"{dest}[{pieces[j]}].reshape({made[1]})"
                pieces[j] = None
        plan["cats"][st.out] = (dest, pieces, note)
    return plan


def _producer_into(gen, s, readers, producer, place, plan):
    """(slot, shape) of the value that piece `s` of a cat is (itself, or through a
    reshape that is a view) when its producer can make it in `place` (a witness of the
    piece's place in the cat's buffer), else None: a BLAS product (its matrices with a row
    stride; the piece's only reader), a kernel's pooled output or another cat (a C-ordered
    place), none of them leaving the program nor placed already."""
    st = producer.get(s)
    if st is None:
        return None
    e = getattr(st, "eqn", None)
    if e is not None and e.op == "reshape" and st.how == "view" \
            and isinstance(st.inputs[0], int):
        if len(readers.get(s, [])) != 1:
            return None
        s = st.inputs[0]
        st = producer.get(s)
        if st is None:
            return None
        e = getattr(st, "eqn", None)
    v = e.out if e is not None else p_var(gen, s)
    if v is None or s in plan["into"] or s in gen.p.results or not _stays_inside(gen, v):
        return None
    shape = tuple(v.type.shape)
    size = np.dtype(v.type.dtype).itemsize
    try:
        view = place.reshape(shape, copy=False) if _RESHAPE_COPY_KW else None
    except ValueError:
        return None
    if view is None:
        return None
    c_ordered = view.strides == _c_witness(shape, size).strides
    if e is None:  # a kernel's output
        outs = [o for o in getattr(st, "outs", ()) if getattr(o, "slot", None) == s]
        if not (c_ordered and len(outs) == 1 and outs[0].pooled and outs[0].dest < 0
                and outs[0].io_slot is None):
            return None
        return s, shape
    if e.op == "cat" and st.how == "numpy":
        return (s, shape) if c_ordered and all(isinstance(x, int) for x in st.inputs) \
            else None
    if e.op != "matmul" or st.how != "blas" or st.dest >= 0 \
            or not all(isinstance(x, int) for x in st.inputs) \
            or e.out.type.dtype not in (np.float32, np.float64) \
            or any(x.type.dtype != e.out.type.dtype for x in e.inputs) or len(shape) < 2:
        return None
    # BLAS writes each matrix with a row stride (numpy's matmul checks it can); a strided
    # place is for the product's only reader (others would copy it to read it)
    if view.strides[-1] != size or view.strides[-2] < shape[-1] * size \
            or not (c_ordered or len(readers.get(s, [])) == 1):
        return None
    return s, shape


def p_var(gen, s):
    """The IR value in slot `s` of the program, or None."""
    slot_vars = gen.p.slot_vars
    return slot_vars[s] if 0 <= s < len(slot_vars) else None


def _c_witness(shape, itemsize):
    """A read-only array of `shape` with C strides over one byte (never read): numpy's
    view arithmetic without the memory."""
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), shape=shape,
                                           strides=tuple(reversed(strides)), writeable=False)


def _written(st) -> list:
    """The slots a step writes (a kernel's outputs are KernelOut records)."""
    if hasattr(st, "out"):
        return [st.out]
    return [o if isinstance(o, int) else o.slot for o in st.outs]


def _reads(st) -> list:
    """The slots a step reads."""
    ins = getattr(st, "inputs", None)
    if ins is None:
        ins = st.reads if hasattr(st, "reads") else st.ins
    return [s for s in ins if isinstance(s, int)]


def matmul(gen, k, step, a, direct, bound) -> bool:
    if not direct or is_half(step.eqn.out.type.dtype):
        return False  # (half types: the registry's impl multiplies in float32, as eager)
    e, out, lines = step.eqn, step.out, gen.lines
    a = gen.tuned_operands(e, step.inputs, a)
    place = _cat_plan(gen)["into"].get(out)
    if place is not None:  # a piece of a cat: written in its place (_cat_plan)
        lines.append(f"    v{out} = matmul({a[0]}, {a[1]}, out={place})")
    elif step.dest >= 0:
        lines.append(f"    d = dests[{step.dest}] if dests is not None else None")
        lines.append(f"    v{out} = matmul({a[0]}, {a[1]}) if d is None else "
                     f"matmul({a[0]}, {a[1]}, out=d)")
    elif id(e.out) not in gen.p._escaping and len(e.out.type.shape) >= 2 \
            and all(x.type.dtype == e.out.type.dtype for x in e.inputs):
        # A value that stays inside the program: into a buffer reused every call, as a
        # kernel's pooled output. W9's step spent more time page-faulting fresh matmul
        # outputs (numpy asks the OS for fresh pages) than multiplying.
        buf = gen.pool(e.out.type.shape, e.out.type.dtype)
        lines.append(f"    v{out} = matmul({a[0]}, {a[1]}, out={buf})")
    else:
        lines.append(f"    v{out} = matmul({a[0]}, {a[1]})")
    return True


def _stays_inside(gen, v) -> bool:
    """Whether value `v` has a static shape and does not leave the program (so a buffer
    reused every call may hold it, as a kernel's pooled output)."""
    return id(v) not in gen.p._escaping \
        and all(isinstance(d, int) for d in v.type.shape)


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
