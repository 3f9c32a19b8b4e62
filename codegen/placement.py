"""Where a program's cats, their pieces and permuted products live, so that no value is
copied into a layout its producer could have written it in.

numpy makes a cat by copying its pieces, and a reshape of a permuted value by copying it
again. Inside a program every value has one writer and a buffer of its own, so both
copies can go, by choosing where a value is written before its producer runs:

* a cat whose only reader is a permute is laid out in the permuted order: the permuted
  value is C-ordered and the reshapes after it are views. W9's attention backward cats the
  q, k, v gradients to [3,B,H,T,D], permutes them to [B,T,3,H,D] and reshapes that to
  [B*T,3*H*D] for the products: two 0.1 ms copies per layer before;
* a BLAS product whose only reader is a permute is written in the permuted order (W9's
  attention output [B,H,T,D], read as [B,T,H,D] and reshaped to [B*T,C]);
* a piece of a cat is made in its place in the cat's buffer by its producer: a BLAS
  product (each matrix of a place with a row stride: W9's q, k, v gradients), a kernel's
  pooled output or another cat (a C-ordered place, a block along the first dims: W10's
  per-step states and gate gradients stacked into [35,20,*]). The other pieces are copied.

Every value involved stays inside the program (its buffer is reused every call and never
handed to the caller), and a producer is given one place at most. The runner forms of
cat and matmul (codegen.runner_forms) and the runner's kernel outputs read the plan.
"""
from __future__ import annotations

import numpy as np

# ndarray.reshape(copy=False) (numpy 2.1) raises where only a copy would do.
_RESHAPE_COPY_KW = np.lib.NumpyVersion(np.__version__) >= "2.1.0"


def stays_inside(gen, v) -> bool:
    """Whether value `v` has a static shape and does not leave the program (so a buffer
    reused every call may hold it, as a kernel's pooled output)."""
    return id(v) not in gen.p._escaping \
        and all(isinstance(d, int) for d in v.type.shape)


def output_place(gen, slot):
    """The expression of the array a producer writes value `slot` into (a piece of a cat
    in its place, a product in its permuted layout), else None."""
    return plan(gen)["into"].get(slot)


def plan(gen) -> dict:
    """The plan of runner generator `gen`'s program, made once, when first asked:
    {"cats": {cat slot: (its value's expression, {piece j: the index of its place, or None
    where its producer writes it}, a note)}, "into": {slot: the expression of the array
    its producer writes it into}}."""
    made = gen.__dict__.get("_placement")
    if made is not None:
        return made
    made = gen._placement = {"cats": {}, "into": {}}
    p = gen.p
    if p.bind is not None or not _RESHAPE_COPY_KW:
        return made
    readers, producer = {}, {}
    for st in p.steps:
        for s in _reads(st):
            readers.setdefault(s, []).append(st)
        for s in _written(st):
            producer[s] = st
    # (outer cats first: an inner cat that is a piece of an outer one is made in its place)
    for st in reversed(p.steps):
        e = getattr(st, "eqn", None)
        role = _role(st)
        if role not in ("joins", "product") \
                or not all(isinstance(x, int) for x in st.inputs) \
                or not stays_inside(gen, e.out) or st.out in p.results:
            continue
        if role == "joins":
            _place_cat(gen, st, readers, producer, made)
        elif st.out not in made["into"]:
            _permuted_product(gen, st, readers, made)
    return made


def _permuted_by(st, readers):
    """The perm of the permute step that is the only reader of `st`'s value, else None."""
    users = readers.get(st.out, [])
    if len(users) != 1 or _role(users[0]) != "permutes":
        return None
    return tuple(int(i) for i in users[0].eqn.params["perm"])


def _place_cat(gen, st, readers, producer, made):
    e = st.eqn
    shape, dtype = tuple(e.out.type.shape), e.out.type.dtype
    size = np.dtype(dtype).itemsize
    dest, note = made["into"].get(st.out), ""
    perm = _permuted_by(st, readers) if dest is None else None
    if dest is not None:
        witness, note = _c_witness(shape, size), ", in its place in a cat"
    elif perm is not None:
        dest, witness = _permuted_buffer(gen, shape, dtype, perm)
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
        into = _producer_into(gen, s, readers, producer, witness[index], made)
        if into is not None:
            made["into"][into[0]] = f"{dest}[{pieces[j]}].reshape({into[1]})"
            pieces[j] = None
    made["cats"][st.out] = (dest, pieces, note)


def _permuted_product(gen, st, readers, made):
    """A product read only by a permute that keeps the last dim last: written through
    the inverse transpose of a C-ordered buffer of the permuted shape."""
    e = st.eqn
    perm = _permuted_by(st, readers)
    shape, dtype = tuple(e.out.type.shape), e.out.type.dtype
    if perm is None or perm[-1] != len(perm) - 1 or st.dest >= 0 or not _blas_dtypes(e):
        return
    inv = tuple(int(i) for i in np.argsort(perm))
    laid = tuple(shape[i] for i in perm)
    if _blas_place(_c_witness(laid, np.dtype(dtype).itemsize).transpose(inv), shape, dtype):
        made["into"][st.out] = _permuted_buffer(gen, shape, dtype, perm)[0]


def _permuted_buffer(gen, shape, dtype, perm):
    """(expression, witness) of a reused C-ordered buffer of the permuted shape, seen
    through the inverse transpose (so it has `shape`)."""
    inv = tuple(int(i) for i in np.argsort(perm))
    laid = tuple(shape[i] for i in perm)
    witness = _c_witness(laid, np.dtype(dtype).itemsize).transpose(inv)
    return f"{gen.pool(laid, dtype)}.transpose({inv})", witness


def _producer_into(gen, s, readers, producer, place, made):
    """(slot, shape) of the value that piece `s` of a cat is (itself, or through a
    reshape that is a view) when its producer can make it in `place` (a witness of the
    piece's place in the cat's buffer), else None: a BLAS product (its matrices with a row
    stride; the piece's only reader unless the place is C-ordered), a kernel's pooled
    output or another cat (a C-ordered place), none of them leaving the program nor
    placed already."""
    st = producer.get(s)
    if st is None:
        return None
    e = getattr(st, "eqn", None)
    if _role(st) == "reshapes" and isinstance(st.inputs[0], int):
        if len(readers.get(s, [])) != 1:
            return None
        s = st.inputs[0]
        st = producer.get(s)
        if st is None:
            return None
        e = getattr(st, "eqn", None)
    slot_vars = gen.p.slot_vars
    v = e.out if e is not None else (slot_vars[s] if 0 <= s < len(slot_vars) else None)
    if v is None or s in made["into"] or s in gen.p.results or not stays_inside(gen, v):
        return None
    shape, dtype = tuple(v.type.shape), v.type.dtype
    try:
        view = place.reshape(shape, copy=False)
    except ValueError:
        return None
    c_ordered = view.strides == _c_witness(shape, np.dtype(dtype).itemsize).strides
    if e is None:  # a kernel's output
        outs = [o for o in getattr(st, "outs", ()) if getattr(o, "slot", None) == s]
        if not (c_ordered and len(outs) == 1 and outs[0].pooled and outs[0].dest < 0
                and outs[0].io_slot is None):
            return None
        return s, shape
    if _role(st) == "joins":
        return (s, shape) if c_ordered and all(isinstance(x, int) for x in st.inputs) \
            else None
    if _role(st) != "product" or st.dest >= 0 \
            or not all(isinstance(x, int) for x in st.inputs) or not _blas_dtypes(e) \
            or not _blas_place(view, shape, dtype) \
            or not (c_ordered or len(readers.get(s, [])) == 1):
        return None
    return s, shape


def _role(st) -> str:
    """The part a numpy/blas/view step's op plays here (its lowering row's `placement`)."""
    return getattr(st, "placement", "")


def _blas_dtypes(e) -> bool:
    """Whether runner_forms.matmul writes product `e` with np.matmul (not half types)."""
    return e.out.type.dtype in (np.float32, np.float64) and len(e.out.type.shape) >= 2 \
        and all(x.type.dtype == e.out.type.dtype for x in e.inputs)


def _blas_place(view, shape, dtype) -> bool:
    """Whether BLAS writes into `view` (a witness) directly: each matrix with unit column
    stride and a row stride of at least a row (numpy's matmul checks the same)."""
    size = np.dtype(dtype).itemsize
    return view.strides[-1] == size and view.strides[-2] >= shape[-1] * size


def _c_witness(shape, itemsize):
    """A read-only array of `shape` with the C strides of `itemsize`, over one byte (never
    read): numpy's view arithmetic without the memory."""
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


__all__ = ["output_place", "plan", "stays_inside"]
