"""Functionalized views: in-place writes through views inside a trace, as eager does them.

Eagerly a view (``x[:3]``, ``x.view(-1)``, ``x.T``, ``x[0]``) shares its base's numpy
memory, so a write through either is seen by both. In a trace every value is immutable
and an in-place op only rebinds the written tensor to a new value. So, as PyTorch's
functionalization does, a traced view remembers its base and how it was derived (a
`ViewLink`); a write to the view is carried on to the base as a new value of the base
(``slice_update`` for basic indexing, the inverse reshape or permutation otherwise), and
a view whose base has a newer value than the one it was derived from is derived again
when next read. The IR stays pure; the runtime writes the final values back to the real
tensors once.

Whether a view op shares memory eagerly is numpy's call (a reshape of a non-contiguous
array copies). The trace asks numpy too, on a *layout proxy*: an int8 array with the
value's shape and element strides over one byte of memory, so deciding costs no memory
and reads none (numpy reads only when it has to copy, and `reshape(copy=False)` refuses).
A traced value that is no view is taken as C-contiguous; a value with a symbolic size has
no proxy, and a reshape of a view of one is refused when written through.
"""
from __future__ import annotations

import numpy as np

from eager.errors import user_location
from eager.ops import OPS, has_dims, is_dim

from .errors import TracingError

_BYTE = np.zeros(1, np.int8)


class ViewLink:
    """How a traced view was derived: `op[params]` of `base`, last derived from (or written
    back into) `base_value`; `layout` is its proxy (None: unknown)."""

    __slots__ = ("base", "base_value", "layout", "op", "params", "readonly")

    def __init__(self, base, op, params, base_value, layout, readonly):
        self.base = base
        self.op = op
        self.params = params
        self.base_value = base_value
        self.layout = layout
        self.readonly = readonly  # eagerly a read-only array (an expand, or a view of one)


def _proxy(shape, strides, writeable=True):
    return np.lib.stride_tricks.as_strided(_BYTE, shape, strides, writeable=writeable)


def layout_of(t):
    """`t`'s layout proxy, or None when it has a symbolic size (or its layout is unknown)."""
    link = t._view_of
    if link is not None:
        return link.layout
    data = t._data
    kept = getattr(data, "kept", None)
    if kept is not None:
        return kept[0]
    if data.__class__ is np.ndarray:
        size = data.itemsize
        return _proxy(data.shape, tuple(s // size for s in data.strides),
                      data.flags.writeable)
    shape = data.shape
    given = _input_strides(data)
    if given is not None:
        return _proxy(shape, given)
    if has_dims(shape):
        return None
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return _proxy(shape, tuple(reversed(strides)))


def _input_strides(value):
    """The element strides of a traced input whose array was not C-contiguous, or None."""
    if not hasattr(value, "var"):  # (not a TracedValue)
        return None
    entry = value.trace._root().input_strides.get(id(value.var))
    return None if entry is None else entry[1]


def _note_layout_read(t) -> None:
    """A decision that depends on memory layout (does this reshape copy?) was made about
    `t`: if `t` is an argument or a view of one, and the trace writes anything in place (only
    then does a view differ from a copy), the trace holds only for that argument's layout
    (tracer.tracing._read_layouts; a C-contiguous argument's layout counts too)."""
    while t._view_of is not None:
        t = t._view_of.base
    value = t._data
    if getattr(value, "kept", None) is not None:  # an argument written in place
        if value.kept[1] is not None:
            value.trace._root().layout_if_written.add(value.kept[1])
    elif value.__class__ is not np.ndarray and hasattr(value, "var"):  # a TracedValue
        root = value.trace._root()
        if any(value.var is x for x in root.inputs):
            root.layout_if_written.add(id(value.var))


def link_view(op, base, params, out):
    """`out = op[params](base)` was just traced: link it to `base` if eager's result would
    share `base`'s memory (marking both as eager's dispatch does)."""
    layout = None if has_dims(out._data.shape) else layout_of(base)
    if layout is not None:
        try:
            if op.view == "whole":
                pass  # (its impl may look at the values, which a layout stand-in lacks)
            elif op.name == "view_dtype":
                layout = _dtype_layout(base, layout, params["dtype"])
            elif op.name == "reshape":
                _note_layout_read(base)
                layout = np.reshape(layout, params["shape"], copy=False)
            else:
                layout = np.asarray(op.impl(layout, **params))
        except ValueError:
            return  # numpy copies here: eagerly the result shares nothing
    elif op.name == "reshape" and base._view_of is not None:
        layout = False  # a view's reshape with symbolic sizes: a copy or a view, unknown
    link = base._view_of
    readonly = op.name == "broadcast_to" or (link.readonly if link is not None else (
        base._data.__class__ is np.ndarray and not base._data.flags.writeable))
    out._view_of = ViewLink(base, op, params, base._data, layout, readonly)
    out._version = base._version  # in-place writes to either are seen by both (autograd)
    if op.name != "stop_gradient":  # (eager's detach() is not marked either)
        out._is_view = True
        base._has_views = True


def _dtype_layout(base, layout, dtype):
    """The layout proxy of base.view(dtype) (element strides in the new dtype's units), after
    PyTorch's layout checks on base's layout (eager's check, on the proxy)."""
    from eager.dtype_ops import check_view_strides

    src = base.dtype
    if src.itemsize == dtype.itemsize:
        return layout
    value = base._data
    witness = None
    if value.__class__ is not np.ndarray and hasattr(value, "var"):
        from .layout import witness as layout_witness

        # (the trace then holds only for the arguments' layouts it read, as eager's check)
        witness = layout_witness(value.trace, value.var)
    strides = (witness if witness is not None else layout).strides  # (int8: element strides)
    check_view_strides(tuple(layout.shape), strides, src, dtype, (base,))
    strides = layout.strides
    shape = tuple(_dtype_shape(layout.shape, src, dtype))
    if dtype.itemsize > src.itemsize:
        ratio = dtype.itemsize // src.itemsize
        new = tuple(s // ratio for s in strides[:-1]) + (1,)
    else:
        ratio = src.itemsize // dtype.itemsize
        new = tuple(s * ratio for s in strides[:-1]) + (1,)
    return _proxy(shape, new, layout.flags.writeable)


def _dtype_shape(shape, src, dst):
    from eager.dtype_ops import _view_shape

    return _view_shape(tuple(shape), src, dst)


def refresh(trace, t):
    """Derive view `t` again if its base has had an in-place write since."""
    link = t._view_of
    base = link.base
    if base._view_of is not None:
        refresh(trace, base)
    if base._data is not link.base_value:
        _check_known(link, "read after an in-place write to the tensor it views")
        t._data = trace.compute(link.op, (base,), link.params)
        link.base_value = base._data


def write(trace, t, value):
    """`t` takes traced `value` in place; the write reaches its base (and so its views)."""
    if trace.parent is not None and not _made_in(trace, t._data):
        raise TracingError(
            f"{user_location()}: an in-place update, inside a tracer.cond / tracer.while_loop "
            f"body, of a tensor the body did not make (an operand or an outside value, or a "
            f"view of one) is not supported; return the new value from the body instead")
    link = t._view_of
    if link is not None:
        if link.readonly:
            raise RuntimeError(f"this tensor is a read-only (expanded) view; clone() it "
                               f"before writing in place (at {user_location()})")
        _check_known(link, "written in place")
        refresh(trace, t)  # (bring the link up to date: only `t`'s own value is new)
    else:
        value = _keep_layout(t, value)
    t._data = value
    if link is None:
        return
    if _write_strided(trace, t, value):
        return
    base = link.base
    op = link.op
    if op.name == "getitem":
        new = trace.compute(OPS["slice_update"], (base, t), {"index": link.params["index"]})
    elif op.name == "reshape":
        new = trace.compute(op, (t,), {"shape": tuple(base.shape)})
    elif op.name == "permute":
        perm = link.params["perm"]
        inverse = [0] * len(perm)
        for i, p in enumerate(perm):
            inverse[p] = i
        new = trace.compute(op, (t,), {"perm": tuple(inverse)})
    elif op.name == "view_dtype":  # (the same bytes read back as the base's dtype)
        new = trace.compute(op, (t,), {"dtype": base.dtype})
    else:  # stop_gradient (detach): the same values
        new = value
    if base._data.__class__ is np.ndarray:
        from eager import dispatch

        dispatch.note_mutated(base)  # a capture (or created state) of the trace now
    write(trace, base, new)
    link.base_value = base._data


def _keep_layout(t, value):
    """`value`, as `t`'s value after an in-place write, carrying `t`'s memory layout when `t`
    is an argument or an outside tensor: eagerly an in-place op keeps the tensor's array, so
    a later reshape, view() or is_contiguous() of `t` sees that array's layout (a transposed
    argument's), not the C order taken for a computed value."""
    old = t._data
    if value.__class__ is np.ndarray or not hasattr(value, "var"):
        return value
    kept = getattr(old, "kept", None) if old.__class__ is not np.ndarray else None
    if kept is None:
        if old.__class__ is np.ndarray:
            origin = None  # (an outside tensor: its array is read at every call)
        elif hasattr(old, "var"):
            origin = id(old.var)
            if not any(old.var is x for x in old.trace._root().inputs):
                return value  # (a value the trace computed: taken as C-ordered, as before)
        else:
            return value
        layout = layout_of(t)
        if layout is None:
            return value
        kept = (layout, origin)
    from .trace import TracedValue

    new = TracedValue(value.var, value.trace)
    new.kept = kept
    return new


def kept_needs_copy(value, shape) -> bool:
    """TracedValue.view_needs_copy for a value with a kept layout (`_keep_layout`)."""
    _note_kept_read(value)
    try:
        np.reshape(value.kept[0], tuple(shape), copy=False)
    except ValueError:
        return True
    return False


def kept_c_contiguous(value) -> bool:
    _note_kept_read(value)
    return value.kept[0].flags.c_contiguous


def _note_kept_read(value) -> None:
    if value.kept[1] is not None:
        value.trace._root().layout_reads.add(value.kept[1])


def _write_strided(trace, t, value) -> bool:
    """A write to `t` whose chain of views passes through a diagonal or unfold (eager/
    strided_ops.py): `scatter` `value` into that view's base at the element positions `t`
    covers, composed along the chain. (Unfold's windows overlap: writing a window back
    whole would also write the stale copies of its elements in the other windows.) The
    views in between are derived again from the new base when next read."""
    chain, u = [], t
    while u._view_of is not None:
        chain.append(u._view_of)
        if u._view_of.op.view == "strided":  # (its write-back: a scatter at its positions)
            break
        u = u._view_of.base
    else:
        return False
    root = chain[-1].base
    if any(link.op.name == "view_dtype" for link in chain) or has_dims(tuple(root.shape)):
        raise TracingError(
            f"{user_location()}: an in-place write through a view of a diagonal/unfold view "
            f"that also changes the dtype, or of a tensor with a symbolic size, is not "
            f"supported; write to a clone() or to the original tensor instead")
    from eager import functions as fn

    shape = tuple(root.shape)
    pos = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)  # element numbers
    for link in reversed(chain):
        pos = np.asarray(link.op.impl(pos, **link.params))
    # (np.array, not np.ascontiguousarray: that makes a 0-d position, one element of the
    # view written, 1-d, and the scatter's index no longer has the written value's shape)
    index = np.unravel_index(np.array(pos, order="C"), shape)
    consts = tuple(fn.const(np.array(i, dtype=np.int64, order="C"), np.int64) for i in index)
    new = trace.compute(OPS["scatter"], (root, t) + consts, {})
    if root._data.__class__ is np.ndarray:
        from eager import dispatch

        dispatch.note_mutated(root)  # a capture (or created state) of the trace now
    write(trace, root, new)
    # `t` too is derived again when read: where windows overlap, `value` may disagree with
    # what the base now holds (the last write of an element wins, as eagerly)
    t._view_of.base_value = None
    return True


def _check_known(link, what):
    if link.layout is False:
        raise TracingError(
            f"{user_location()}: a reshape of a view with a symbolic size is {what}; whether "
            f"eager's reshape shares memory there depends on run-time sizes. Call .clone() on "
            f"the reshape's result (a copy) or write to the original tensor instead")


def _made_in(trace, value) -> bool:
    """Whether traced `value` is computed by an equation of `trace` itself."""
    var = getattr(value, "var", None)
    if var is None or value.trace is not trace:
        return False
    for e in trace.eqns:
        outs = e.out if isinstance(e.out, tuple) else (e.out,)
        for o in outs:
            if o is var:
                return True
    return False


# ------------------------------------------------------------ outputs that are views
def view_chain(t):
    """(root, ((op, params), ...)) when traced `t` is a view, through view ops only, of
    `root` (an argument or captured tensor, say), the ops in the order applied; else None.
    Eagerly such an output shares the root's memory: the compiled call derives it again
    from the real root (`derive`), so the caller's writes through either reach the other."""
    chain, u = [], t
    while u._view_of is not None:
        link = u._view_of
        if link.layout is False:
            return None  # (whether eager's reshape shares memory depends on the sizes)
        chain.append((link.op, link.params))
        u = link.base
    return (u, tuple(reversed(chain))) if chain else None


def derive(base, chain, grad: bool, where, leaves):
    """The view `chain` (from `view_chain`) of real tensor `base`, made as eager makes it;
    with autograd history only where the traced output had it (`grad`). `where` gives each
    symbolic size in the chain's params as (argument index, axis) of the call's `leaves`."""
    from eager import dispatch

    from .symbolic import bind_params

    sizes = {d: leaves[k].shape[axis] for d, (k, axis) in where.items()}
    before = dispatch.set_grad_enabled(grad and dispatch.is_grad_enabled())
    try:
        for op, params in chain:
            base = dispatch.apply(op, base, **(bind_params(params, sizes) if sizes else params))
    finally:
        dispatch.set_grad_enabled(before)
    return base
