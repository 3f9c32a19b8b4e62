"""Shaping ops, PyTorch style, as composites of registry ops (issue 16 item 4): tril, triu,
split, chunk, unbind, narrow, unflatten, unfold, repeat, tile, repeat_interleave, flip,
roll, diag, diagonal, einsum, mm, bmm, mv.

Slices are `getitem` views, diagonal and unfold are strided views (eager/strided_ops.py),
masks of a shape (tril) are constants of that shape, and einsum is one
permute/reshape/batched matmul per pair of operands: they all trace, differentiate and
compile (the others with no op of their own).

>>> import eager
>>> eager.tril(eager.ones(2, 2))
tensor([[1., 0.],
        [1., 1.]])
"""
from __future__ import annotations

import numpy as np

from . import dtypes
from .dispatch import apply
from .functions import (
    _norm_dim,
    as_tensor,
    cat,
    const,
    expand,
    flatten,
    getitem_basic,
    matmul,
    permute,
    reshape,
)
from .functions import sum as _sum
from .indexing import index_select
from .ops import OPS
from .scan_ops import size_error

__all__ = [
    "bmm",
    "chunk",
    "diag",
    "diagonal",
    "einsum",
    "flip",
    "mm",
    "movedim",
    "mv",
    "narrow",
    "repeat",
    "repeat_interleave",
    "roll",
    "split",
    "tile",
    "tril",
    "triu",
    "unbind",
    "unflatten",
    "unfold",
]

_WHERE = OPS["where"]


def _whole(ndim):
    return [(0, None, 1)] * ndim


def _slice(x, axis, start, stop, step=1):
    index = _whole(x.ndim)
    index[axis] = (start, stop, step)
    return getitem_basic(x, tuple(index))


def movedim(x, source, destination):
    """x with dim `source` moved to position `destination` (ints only)."""
    x = as_tensor(x, "movedim")
    src = _norm_dim(source, x.ndim, "movedim")
    dst = _norm_dim(destination, x.ndim, "movedim")
    order = [d for d in range(x.ndim) if d != src]
    order.insert(dst, src)
    return permute(x, order) if order != list(range(x.ndim)) else x


# --------------------------------------------------------------------------------------
# triangles

def _triangle(x, diagonal, lower, op):
    x = as_tensor(x, op)
    if x.ndim < 2:
        raise size_error(op, f"input tensor must have at least 2 dimensions, got {x.ndim}", (x,),
                       exc=RuntimeError)
    n, m = x.shape[-2], x.shape[-1]
    keep = np.tri(n, m, int(diagonal), dtype=bool)
    if not lower:
        keep = ~np.tri(n, m, int(diagonal) - 1, dtype=bool)
    return apply(_WHERE, const(keep, np.bool_), x, const(0, x.dtype))


def tril(x, diagonal=0):
    """The lower triangle of the last two dims (on and below `diagonal`), zeros above."""
    return _triangle(x, diagonal, True, "tril")


def triu(x, diagonal=0):
    """The upper triangle of the last two dims (on and above `diagonal`), zeros below."""
    return _triangle(x, diagonal, False, "triu")


# --------------------------------------------------------------------------------------
# pieces

def split(x, split_size_or_sections, dim=0):
    """Views of `x` along `dim`: pieces of one size (the last may be smaller), or of the
    listed sizes."""
    x = as_tensor(x, "split")
    axis = _norm_dim(dim, x.ndim, "split")
    if x.ndim == 0:
        raise size_error("split", "cannot split a 0-d tensor", (x,), exc=RuntimeError)
    size = x.shape[axis]
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        if step <= 0 and not (step == 0 and size == 0):
            raise size_error("split", f"split_size must be positive, got {step}", (x,),
                           exc=RuntimeError)
        if size == 0:
            return (x,)
        sizes = [min(step, size - start) for start in range(0, size, step)]
    else:
        sizes = [int(s) for s in split_size_or_sections]
        if sum(sizes) != size or any(s < 0 for s in sizes):
            raise size_error("split", f"split_with_sizes expects split_sizes to sum exactly to "
                           f"{size} (input tensor's size at dimension {axis}), but got "
                           f"split_sizes={sizes}", (x,), exc=RuntimeError)
    out = []
    start = 0
    for s in sizes:
        out.append(_slice(x, axis, start, start + s))
        start += s
    return tuple(out)


def chunk(x, chunks, dim=0):
    """`chunks` views of (nearly) equal size along `dim`; the last may be smaller and there
    may be fewer, as in PyTorch."""
    x = as_tensor(x, "chunk")
    if not isinstance(chunks, int) or chunks <= 0:
        raise size_error("chunk", f"chunk expects `chunks` to be greater than 0, got: {chunks}",
                       (x,), exc=RuntimeError)
    axis = _norm_dim(dim, x.ndim, "chunk")
    size = x.shape[axis]
    step = -(-size // chunks)
    if step == 0:
        return tuple(_slice(x, axis, 0, 0) for _ in range(chunks)) if size == 0 else (x,)
    return split(x, step, axis)


def unbind(x, dim=0):
    """The slices of `x` along `dim`, that dim removed (views)."""
    x = as_tensor(x, "unbind")
    axis = _norm_dim(dim, x.ndim, "unbind")
    out = []
    for i in range(x.shape[axis]):
        index = _whole(x.ndim)
        index[axis] = i
        out.append(getitem_basic(x, tuple(index)))
    return tuple(out)


def select(x, dim, index):
    """x[.., index, ..] along `dim`: a view with that dimension removed, as torch.select."""
    x = as_tensor(x, "select")
    if x.ndim == 0:
        raise size_error("select", "cannot be applied to a 0-dim tensor", (x,),
                         exc=IndexError)
    axis = _norm_dim(dim, x.ndim, "select")
    size = x.shape[axis]
    index = int(index)
    if not -size <= index < size:
        raise size_error("select", f"index {index} is out of range for dimension {axis} of "
                         f"size {size}", (x,), exc=IndexError)
    key = _whole(x.ndim)
    key[axis] = index % size
    return getitem_basic(x, tuple(key))


def narrow(x, dim, start, length):
    """The view x[.., start:start + length, ..] along `dim` (start may be negative)."""
    x = as_tensor(x, "narrow")
    axis = _norm_dim(dim, x.ndim, "narrow")
    size = x.shape[axis]
    start = int(start)
    if not -size <= start <= size:
        raise size_error("narrow", f"start ({start}) is out of range for dimension {axis} of "
                       f"size {size}", (x,), exc=IndexError)
    start %= size if size else 1
    if length < 0 or start + length > size:
        raise size_error("narrow", f"start ({start}) + length ({length}) exceeds dimension "
                       f"size ({size})", (x,), exc=RuntimeError)
    return _slice(x, axis, start, start + int(length))


def unflatten(x, dim, sizes):
    """Dim `dim` split into `sizes` (one of them may be -1)."""
    x = as_tensor(x, "unflatten")
    axis = _norm_dim(dim, x.ndim, "unflatten")
    sizes = tuple(int(s) for s in sizes)
    if sizes.count(-1) > 1:
        raise size_error("unflatten", "only one dimension can be inferred", (x,),
                       exc=RuntimeError)
    known = int(np.prod([s for s in sizes if s != -1]))
    if -1 in sizes:
        sizes = tuple(x.shape[axis] // known if s == -1 and known else s for s in sizes)
    if int(np.prod(sizes)) != x.shape[axis]:
        raise size_error("unflatten", f"provided sizes {sizes} don't multiply up to the size "
                       f"of dim {axis} ({x.shape[axis]}) in the input tensor", (x,),
                       exc=RuntimeError)
    return reshape(x, x.shape[:axis] + sizes + x.shape[axis + 1:])


def unfold(x, dimension, size, step):
    """Sliding windows of `size` with stride `step` along `dimension`: that dim becomes the
    window count and a new last dim of `size` holds each window (Tensor.unfold; a view, as
    in PyTorch: writing to a window writes to x)."""
    x = as_tensor(x, "unfold")
    if x.ndim == 0:
        x = reshape(x, (1,))
    axis = _norm_dim(dimension, x.ndim, "unfold")
    n = x.shape[axis]
    if size > n or size < 0:
        raise size_error("unfold", f"maximum size for tensor at dimension {axis} is {n} but "
                       f"size is {size}", (x,), exc=RuntimeError)
    if step <= 0:
        raise size_error("unfold", f"step is {step} but must be > 0", (x,), exc=RuntimeError)
    return apply(OPS["unfold"], x, dim=axis, size=int(size), step=int(step))


# --------------------------------------------------------------------------------------
# repetition

def repeat(x, *sizes):
    """x tiled `sizes` times along each dim (len(sizes) >= x.ndim; new dims lead)."""
    x = as_tensor(x, "repeat")
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    sizes = tuple(int(s) for s in sizes)
    if len(sizes) < x.ndim:
        raise size_error("repeat", f"number of dimensions of repeat dims ({len(sizes)}) can not "
                       f"be smaller than number of dimensions of tensor ({x.ndim})", (x,),
                       exc=RuntimeError)
    shape = (1,) * (len(sizes) - x.ndim) + tuple(x.shape)
    inter = []
    target = []
    for r, d in zip(sizes, shape):
        inter += [1, d]
        target += [r, d]
    y = expand(reshape(x, tuple(inter)), tuple(target))
    return reshape(y, tuple(r * d for r, d in zip(sizes, shape)))


def tile(x, *dims):
    """x repeated `dims` times per dim; fewer dims than x.ndim are padded with ones:
    tile(x, (2, 2)) or x.tile(2, 2)."""
    x = as_tensor(x, "tile")
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    dims = tuple(int(d) for d in dims)
    if len(dims) < x.ndim:
        dims = (1,) * (x.ndim - len(dims)) + dims
    return repeat(x, dims)


def repeat_interleave(x, repeats, dim=None, *, output_size=None):
    """Each element repeated `repeats` times along `dim` (None: the flattened x). A tensor of
    repeats (one per element) works eagerly; traced, its values would set the output shape,
    so it must be an int."""
    x = as_tensor(x, "repeat_interleave")
    if dim is None:
        x = flatten(x)
        axis = 0
    else:
        axis = _norm_dim(dim, x.ndim, "repeat_interleave")
        if x.ndim == 0:
            x = reshape(x, (1,))
    if hasattr(repeats, "_data"):
        from .indexing import _refuse_traced

        _refuse_traced(repeats, "repeat_interleave() with a tensor of repeats (the output "
                                "size depends on their values; pass an int)")
        if repeats.ndim == 0 or repeats.numel() == 1:
            repeats = int(reshape(repeats, ()).item())
        else:
            counts = repeats.detach().numpy()
            if counts.shape != (x.shape[axis],):
                raise size_error("repeat_interleave", f"repeats must have the same size as "
                               f"input along dim, got {counts.shape} for size "
                               f"{x.shape[axis]}", (x, repeats), exc=RuntimeError)
            if (counts < 0).any():
                raise size_error("repeat_interleave", "repeats can not be negative",
                               (repeats,), exc=RuntimeError)
            index = np.repeat(np.arange(x.shape[axis], dtype=np.int64), counts)
            return index_select(x, axis, const(index, np.int64))
    repeats = int(repeats)
    if repeats < 0:
        raise size_error("repeat_interleave", "repeats can not be negative", (x,),
                       exc=RuntimeError)
    y = reshape(x, x.shape[:axis + 1] + (1,) + x.shape[axis + 1:])
    y = expand(y, x.shape[:axis + 1] + (repeats,) + x.shape[axis + 1:])
    return reshape(y, x.shape[:axis] + (x.shape[axis] * repeats,) + x.shape[axis + 1:])


# --------------------------------------------------------------------------------------
# reordering

def flip(x, *dims):
    """x reversed along each of `dims` (a view with negative strides): flip(x, (0, 1)) or
    x.flip(0, 1)."""
    x = as_tensor(x, "flip")
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    axes = {_norm_dim(d, x.ndim, "flip") for d in dims}
    if x.ndim == 0 or not axes:
        return x
    index = _whole(x.ndim)
    for a in axes:
        index[a] = (x.shape[a] - 1, None, -1)
    return getitem_basic(x, tuple(index))


def roll(x, shifts, dims=None):
    """x shifted circularly by `shifts` along `dims` (None: the flattened x, then reshaped
    back)."""
    x = as_tensor(x, "roll")
    if dims is None:
        if isinstance(shifts, (tuple, list)):
            if len(shifts) != 1:
                raise size_error("roll", "shifts and dims must align when dims is not given",
                               (x,), exc=RuntimeError)
            shifts = shifts[0]
        return reshape(roll(flatten(x), shifts, 0), x.shape)
    if isinstance(shifts, int):
        shifts = (shifts,)
    if isinstance(dims, int):
        dims = (dims,)
    if len(shifts) != len(dims):
        raise size_error("roll", f"shifts and dimensions must align. shifts: {len(shifts)}, "
                       f"dims: {len(dims)}", (x,), exc=RuntimeError)
    for s, d in zip(shifts, dims):
        axis = _norm_dim(d, x.ndim, "roll")
        n = x.shape[axis]
        if n == 0:
            continue
        s = int(s) % n
        if s:
            x = cat([_slice(x, axis, n - s, n), _slice(x, axis, 0, n - s)], axis)
    return x


def _diag_index(n, m, offset):
    """(rows, cols) of the `offset` diagonal of an n x m matrix."""
    if offset >= 0:
        length = max(0, min(n, m - offset))
        rows = np.arange(length)
        cols = rows + offset
    else:
        length = max(0, min(n + offset, m))
        cols = np.arange(length)
        rows = cols - offset
    return rows.astype(np.int64), cols.astype(np.int64)


def diagonal(x, offset=0, dim1=0, dim2=1):
    """The `offset` diagonal of the dims (dim1, dim2), as a last dim (PyTorch's layout); a
    view, as in PyTorch: x.diagonal().fill_(0) writes to x."""
    x = as_tensor(x, "diagonal")
    if x.ndim < 2:
        raise size_error("diagonal", f"needs at least 2 dims, got {x.ndim}", (x,),
                       exc=RuntimeError)
    d1 = _norm_dim(dim1, x.ndim, "diagonal")
    d2 = _norm_dim(dim2, x.ndim, "diagonal")
    if d1 == d2:
        raise size_error("diagonal", f"diagonal dimensions cannot be identical {dim1}, {dim2}",
                       (x,), exc=RuntimeError)
    return apply(OPS["diagonal"], x, offset=int(offset), dim1=d1, dim2=d2)


def diag(x, diagonal=0):
    """1-D x: the square matrix with x on the `diagonal`; 2-D x: that diagonal."""
    x = as_tensor(x, "diag")
    if x.ndim == 2:  # (a new tensor, as torch.diag's: not a view)
        return x.diagonal(diagonal, 0, 1).clone()
    if x.ndim != 1:
        raise size_error("diag", f"expected a 1-D or 2-D tensor, got {x.ndim}-D", (x,),
                       exc=RuntimeError)
    n = x.shape[0] + abs(int(diagonal))
    rows, cols = _diag_index(n, n, int(diagonal))
    from .functions import scatter_add

    return scatter_add(x, (const(rows, np.int64), const(cols, np.int64)), (n, n))


# --------------------------------------------------------------------------------------
# matrix products with PyTorch's shape checks

def mm(a, b):
    """The product of two 2-D matrices."""
    a, b = as_tensor(a, "mm"), as_tensor(b, "mm")
    if a.ndim != 2 or b.ndim != 2:
        raise size_error("mm", f"expected 2-D tensors, got {a.ndim}-D and {b.ndim}-D", (a, b),
                       exc=RuntimeError)
    return matmul(a, b)


def bmm(a, b):
    """Batched product of two 3-D tensors with one batch size (no broadcasting)."""
    a, b = as_tensor(a, "bmm"), as_tensor(b, "bmm")
    if a.ndim != 3 or b.ndim != 3:
        raise size_error("bmm", f"expected 3-D tensors, got {a.ndim}-D and {b.ndim}-D", (a, b),
                       exc=RuntimeError)
    if a.shape[0] != b.shape[0]:
        raise size_error("bmm", f"batch sizes differ: {a.shape[0]} and {b.shape[0]}", (a, b),
                       exc=RuntimeError)
    return matmul(a, b)


def mv(a, v):
    """Matrix (2-D) times vector (1-D)."""
    a, v = as_tensor(a, "mv"), as_tensor(v, "mv")
    if a.ndim != 2 or v.ndim != 1:
        raise size_error("mv", f"expected a 2-D matrix and a 1-D vector, got {a.ndim}-D and "
                       f"{v.ndim}-D", (a, v), exc=RuntimeError)
    return matmul(a, v)


# --------------------------------------------------------------------------------------
# einsum

def _parse_einsum(equation, operands):
    eq = equation.replace(" ", "")
    if "->" in eq:
        lhs, rhs = eq.split("->")
    else:
        lhs, rhs = eq, None
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise size_error("einsum", f"{len(terms)} subscripts for {len(operands)} operands",
                       operands, exc=RuntimeError)
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in eq]
    ell_ndim = 0
    for t, x in zip(terms, operands):
        if "..." in t:
            ell_ndim = max(ell_ndim, x.ndim - (len(t) - 3))
    ell = "".join(spare[:ell_ndim])
    out_terms = []
    for t, x in zip(terms, operands):
        if "..." in t:
            k = x.ndim - (len(t) - 3)
            t = t.replace("...", ell[ell_ndim - k:])
        if len(t) != x.ndim or not all(c.isalpha() for c in t):
            raise size_error("einsum", f"subscripts {t!r} do not match an operand of "
                           f"{x.ndim} dims", operands, exc=RuntimeError)
        out_terms.append(t)
    if rhs is None:
        counts = {}
        for t in out_terms:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        rhs = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    else:
        rhs = rhs.replace("...", ell)
    return out_terms, rhs


def _einsum_single(x, term, keep):
    """Sum out the letters of `term` not in `keep`; repeated letters take the diagonal."""
    while len(set(term)) != len(term):
        for i, c in enumerate(term):
            j = term.find(c, i + 1)
            if j >= 0:
                x = diagonal(x, 0, i, j)
                term = term[:i] + term[i + 1:j] + term[j + 1:] + c
                break
    drop = [i for i, c in enumerate(term) if c not in keep]
    if drop:
        x = _sum(x, tuple(drop))
        term = "".join(c for c in term if c in keep)
    return x, term


def _contract(a, ta, b, tb, keep):
    """One pair as a batched matmul: batch = shared kept letters, k = shared summed ones."""
    batch = [c for c in ta if c in tb and c in keep]
    inner = [c for c in ta if c in tb and c not in keep]
    left = [c for c in ta if c not in tb]
    right = [c for c in tb if c not in ta]
    sizes = {}
    for t, x in ((ta, a), (tb, b)):
        for c, n in zip(t, x.shape):
            if c in sizes and sizes[c] != n and 1 not in (sizes[c], n):
                raise size_error("einsum", f"subscript {c} has size {sizes[c]} and {n}", (a, b),
                               exc=RuntimeError)
            sizes[c] = max(sizes.get(c, n), n)

    def arrange(x, t, order):
        x = permute(x, [t.index(c) for c in order])
        return expand(x, tuple(sizes[c] for c in order))

    a2 = arrange(a, ta, batch + left + inner)
    b2 = arrange(b, tb, batch + inner + right)
    nb = [sizes[c] for c in batch]
    m = int(np.prod([sizes[c] for c in left]))
    k = int(np.prod([sizes[c] for c in inner]))
    n = int(np.prod([sizes[c] for c in right]))
    out = matmul(reshape(a2, tuple(nb) + (m, k)), reshape(b2, tuple(nb) + (k, n)))
    out = reshape(out, tuple(nb) + tuple(sizes[c] for c in left + right))
    return out, "".join(batch + left + right)


def einsum(equation, *operands):
    """Einstein summation, lowered to permute/reshape/sum and one batched matmul per pair
    of operands (left to right), never a loop over elements."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    xs = [as_tensor(x, "einsum") for x in operands]
    if not xs:
        raise size_error("einsum", "needs at least one operand", exc=RuntimeError)
    dtype = xs[0].dtype
    for x in xs[1:]:
        dtype = dtypes.promote(dtype, x.dtype)
    from .functions import cast

    xs = [cast(x, dtype) for x in xs]
    terms, rhs = _parse_einsum(equation, xs)
    for c in rhs:
        if not any(c in t for t in terms):
            raise size_error("einsum", f"output subscript {c} does not appear in the inputs",
                           xs, exc=RuntimeError)
    acc, ta = xs[0], terms[0]
    later = "".join(terms[1:]) + rhs
    acc, ta = _einsum_single(acc, ta, later)
    for i in range(1, len(xs)):
        b, tb = xs[i], terms[i]
        later = "".join(terms[i + 1:]) + rhs
        b, tb = _einsum_single(b, tb, later + ta)
        acc, ta = _contract(acc, ta, b, tb, later)
    acc, ta = _einsum_single(acc, ta, rhs)
    if ta != rhs:
        acc = permute(acc, [ta.index(c) for c in rhs])
    return acc
