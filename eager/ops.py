"""The op registry: one row per primitive op.

Each `OpDef` holds, side by side, everything every layer needs to know about
a primitive:

* ``category``: ``elementwise``, ``reduction``, ``matmul``, ``shape``,
  ``indexing``, ``random``;
* ``infer(*types, **params) -> TensorType``: the shape and dtype rule (used by
  the tracer, the IR verifier and for eager error messages);
* ``impl(*arrays, **params) -> ndarray``: the numpy implementation;
* ``vjp``: one function per input, ``vjp_i(g, out, *inputs, **params)``, written
  with registry ops so that backward passes trace and differentiate again.
  Inputs the rule does not read arrive as a `TensorType` (shape and dtype
  only); ``saves`` lists the inputs it does read and ``saves_out`` whether it
  reads the output.  ``vjp=None`` marks a non-differentiable op.

Binary elementwise primitives take operands of one dtype: promotion happens in
the front end (`eager.functions`), which inserts explicit ``cast`` ops, so the
IR is explicitly typed.  Composites (gelu, softmax, layer_norm, ...) live in
`eager.nn.functional` and are written with these ops.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

import numpy as np

from . import dtypes
from .errors import op_error


class Dim:
    """A symbolic dimension size: a `None` of a @function's input_signature.

    It stands for a size that is bound at every call, so it has no value while tracing:
    it is hashable and compared by identity (`N0 == N0`, `N0 != 1`, `N0 != N1`), prints as
    its name, and anything that needs its value (`int()`, arithmetic, ordering) raises
    through `unknown` (the tracer's subclass raises `tracer.TracingError` naming the
    user's line).  Shape rules pass Dims through where an op does not care about the size.
    """

    __slots__ = ("name", "label")

    def __init__(self, name: str, label: str | None = None):
        self.name = name     # an identifier (generated kernels name their size arguments so)
        self.label = label   # what the user called it (a string in an input_signature)

    def __repr__(self) -> str:
        return self.name

    @property
    def display(self) -> str:
        """How IR printouts and messages show it: the user's name if it has one."""
        return self.label or self.name

    __str__ = __repr__

    def unknown(self, what: str):
        raise ValueError(f"{what} needs the value of the symbolic dimension {self.display}, "
                         f"which is only known at run time")

    def _arith(self, other=None):
        self.unknown(f"arithmetic on a symbolic dimension ({self.display} with {other!r})")

    def __int__(self):
        self.unknown(f"int({self.display})")

    def __index__(self):
        self.unknown(f"using the symbolic dimension {self.display} as an integer")

    def __float__(self):
        self.unknown(f"float({self.display})")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _arith
    __floordiv__ = __rfloordiv__ = __truediv__ = __rtruediv__ = __mod__ = __rmod__ = _arith
    __lt__ = __le__ = __gt__ = __ge__ = _arith
    __neg__ = _arith


def is_dim(d) -> bool:
    return isinstance(d, Dim)


def has_dims(shape) -> bool:
    for d in shape:
        if isinstance(d, Dim):
            return True
    return False


def symbolic_size(shape) -> tuple:
    """(product of the concrete sizes, the Dims with multiplicity as sorted ids): two shapes
    hold the same number of elements for every binding iff these agree (or both have a 0)."""
    n = 1
    dims = []
    for d in shape:
        if isinstance(d, Dim):
            dims.append(id(d))
        else:
            n *= d
    return n, tuple(sorted(dims))


class TensorType:
    """Shape and dtype of a value. Dimensions are ints, or `Dim`s for symbolic sizes.

    A plain slotted class rather than a frozen dataclass: autograd makes one per recorded
    input, so construction cost matters. Treat instances as immutable.
    """

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: tuple, dtype: np.dtype):
        self.shape = shape
        self.dtype = dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __eq__(self, other) -> bool:
        return (isinstance(other, TensorType) and tuple(self.shape) == tuple(other.shape)
                and self.dtype == other.dtype)

    def __hash__(self) -> int:
        return hash((tuple(self.shape), self.dtype))

    def __repr__(self) -> str:
        return f"TensorType({tuple(self.shape)}, {self.dtype})"

    def __str__(self) -> str:
        name = dtypes.SHORT_NAMES.get(self.dtype, str(self.dtype))
        return f"{name}[{','.join(getattr(d, 'display', None) or str(d) for d in self.shape)}]"


@dataclass(frozen=True, eq=False)
class OpDef:
    name: str
    category: str
    nin: int  # number of tensor inputs; -1 for variadic
    impl: Callable
    infer: Callable
    vjp: tuple | Callable | None = None
    saves: tuple = ()
    saves_out: bool = False
    doc: str = ""
    params: tuple = field(default=())  # names of the op's static parameters
    # Eager output may alias the first input (shares its version counter); "whole": the
    # output is all of the input, in its layout (no element moves: a check, detach).
    view: bool | str = False

    def __repr__(self) -> str:
        return f"OpDef({self.name})"


OPS: dict[str, OpDef] = {}


def register(name, category, nin, impl, infer, vjp=None, saves=(), saves_out=False, doc="",
             params=(), view=False):
    op = OpDef(name, category, nin, impl, infer, vjp, tuple(saves), saves_out, doc, params, view)
    OPS[name] = op
    return op


# --------------------------------------------------------------------------------------
# shape rules

def broadcast_shapes(op: str, *shapes) -> tuple:
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(-ndim, 0):
        size = 1
        for s in shapes:
            if len(s) < -axis:
                continue
            d = s[axis]
            if d == 1:
                continue
            if size == 1:
                size = d
            elif d is not size and (isinstance(d, Dim) or isinstance(size, Dim)):
                raise op_error(
                    op,
                    "shapes " + " and ".join(_shape_text(s) for s in shapes)
                    + f" cannot be broadcast together while tracing: dimension {axis} is "
                    f"{size} vs {d}, which may differ at run time",
                    hint="a symbolic (None) dimension broadcasts only with itself or 1; if "
                         "the sizes are equal, name the dimension alike in both TensorSpecs "
                         "(TensorSpec((\"batch\", 4))), else give it one fixed size")
            elif d != size:
                raise op_error(
                    op,
                    "shapes " + " and ".join(str(tuple(s)) for s in shapes)
                    + f" cannot be broadcast together (dimension {axis} is {size} vs {d})",
                    hint="make the sizes equal or 1, e.g. with reshape/unsqueeze",
                )
        out.append(size)
    return tuple(out)


def _shape_text(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _same_dtype(op, *types):
    first = types[0].dtype
    for t in types[1:]:
        if t.dtype != first:
            raise op_error(op, f"operands must have one dtype, got {first} and {t.dtype}",
                           types, hint="cast with .to(dtype)", exc=TypeError)
    return first


def _binary_infer(name):
    def infer(a, b):
        return TensorType(broadcast_shapes(name, a.shape, b.shape), _same_dtype(name, a, b))
    return infer


def _compare_infer(name):
    def infer(a, b):
        _same_dtype(name, a, b)
        return TensorType(broadcast_shapes(name, a.shape, b.shape), dtypes.bool_)
    return infer


def _float_unary_infer(name):
    def infer(a):
        if a.dtype.kind != "f":
            raise op_error(name, f"needs a floating-point tensor, got {a.dtype}", (a,),
                           hint="cast with .float() or .to(eager.float32)", exc=TypeError)
        return a
    return infer


def _unary_infer(a):
    return a


def _check_axes(op, ndim, axes):
    for ax in axes:
        if not 0 <= ax < max(ndim, 1):
            raise op_error(op, f"axis {ax} out of range for a {ndim}-d tensor")


def _reduce_shape(shape, axes, keepdim):
    if keepdim:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _sum_infer(a, axes, keepdim):
    _check_axes("sum", a.ndim, axes)
    dtype = a.dtype if a.dtype.kind == "f" else dtypes.int64
    return TensorType(_reduce_shape(a.shape, axes, keepdim), dtype)


def _amax_infer(a, axes, keepdim):
    _check_axes("amax", a.ndim, axes)
    for ax in axes:
        if a.ndim and a.shape[ax] == 0:
            raise op_error("amax", f"cannot reduce over dimension {ax} of size 0", (a,),
                           hint="max/min of an empty tensor is undefined; check the shape")
    return TensorType(_reduce_shape(a.shape, axes, keepdim), a.dtype)


def _argmax_infer(a, axis, keepdim):
    if axis is None:
        shape = (1,) * a.ndim if keepdim else ()
    else:
        _check_axes("argmax", a.ndim, (axis,))
        shape = _reduce_shape(a.shape, (axis,), keepdim)
    # Only an empty *reduced* extent is an error (numpy's rule): argmax over dim 0 of a
    # (2, 0, 3) tensor is a (0, 3) result.
    if (axis is None and 0 in a.shape) or (axis is not None and a.shape[axis] == 0):
        raise op_error("argmax", "cannot take argmax over an empty dimension", (a,))
    return TensorType(shape, dtypes.int64)


def _matmul_infer(a, b):
    dtype = _same_dtype("matmul", a, b)
    if a.ndim < 2 or b.ndim < 2:
        raise op_error("matmul", "the primitive takes operands with ndim >= 2", (a, b))
    if a.shape[-1] != b.shape[-2]:
        raise op_error(
            "matmul",
            f"inner dimensions do not match: {tuple(a.shape)} @ {tuple(b.shape)} "
            f"({a.shape[-1]} != {b.shape[-2]})", (a, b),
            hint="the last dimension of the left operand must equal the second-to-last "
                 "of the right one; transpose one of them?")
    batch = broadcast_shapes("matmul", a.shape[:-2], b.shape[:-2])
    return TensorType(batch + (a.shape[-2], b.shape[-1]), dtype)


def _reshape_infer(a, shape):
    if has_dims(a.shape) or has_dims(shape):
        if symbolic_size(a.shape) != symbolic_size(shape):
            raise op_error("reshape", f"cannot reshape {_shape_text(a.shape)} into "
                           f"{_shape_text(shape)}: a symbolic dimension can be kept, not "
                           f"merged or split", (a,))
        return TensorType(tuple(shape), a.dtype)
    if math.prod(a.shape) != math.prod(shape):
        raise op_error("reshape", f"cannot reshape {tuple(a.shape)} into {tuple(shape)}", (a,))
    return TensorType(tuple(shape), a.dtype)


def _permute_infer(a, perm):
    if sorted(perm) != list(range(a.ndim)):
        raise op_error("permute", f"{perm} is not a permutation of the {a.ndim} dims", (a,))
    return TensorType(tuple(a.shape[p] for p in perm), a.dtype)


def _broadcast_to_infer(a, shape):
    lead = len(shape) - a.ndim
    if lead < 0:
        raise op_error("expand", f"cannot expand {tuple(a.shape)} to fewer dims {shape}", (a,))
    for d, s in zip(a.shape, shape[lead:]):
        if d != s and d != 1:
            raise op_error("expand", f"cannot expand {tuple(a.shape)} to {tuple(shape)}: "
                           f"only size-1 dimensions can be expanded", (a,))
    return TensorType(tuple(shape), a.dtype)


# Basic indices are tuples of: an int (picks and drops a dim), None (new axis of
# size 1), or a (start, stop, step) triple from slice.indices with stop None
# meaning "run to the end" (needed for negative steps).

@lru_cache(maxsize=4096)
def numpy_index(index: tuple) -> tuple:
    # The trailing Ellipsis makes an index of only ints give a 0-d *view*, not a numpy
    # scalar (a copy): x[0].mul_(2) must write into x.
    return tuple(slice(*i) if isinstance(i, tuple) else i for i in index) + (Ellipsis,)


def _slice_len(start, stop, step, size):
    return len(range(*slice(start, stop, step).indices(size)))


def index_shape(shape, index) -> tuple:
    out = []
    axis = 0
    for item in index:
        if item is None:
            out.append(1)
        elif isinstance(item, tuple):
            size = shape[axis]
            if isinstance(size, Dim):
                if item != (0, None, 1):  # only a whole `:` keeps a symbolic size
                    size.unknown(f"the slice {item[0]}:{item[1]}:{item[2]} of the symbolic "
                                 f"dimension {size}")
                out.append(size)
            else:
                out.append(_slice_len(*item, size))
            axis += 1
        else:
            axis += 1
    out.extend(shape[axis:])
    return tuple(out)


def _getitem_infer(a, index):
    return TensorType(index_shape(a.shape, index), a.dtype)


def _scatter_slice_infer(g, shape, index):
    expect = index_shape(shape, index)
    if tuple(g.shape) != expect:
        raise op_error("scatter_slice", f"value shape {g.shape} != indexed shape {expect}")
    return TensorType(tuple(shape), g.dtype)


def _slice_update_infer(base, value, index):
    expect = index_shape(base.shape, index)
    if tuple(value.shape) != tuple(expect):
        raise op_error("slice_update", f"value shape {tuple(value.shape)} != the indexed "
                       f"region's shape {tuple(expect)}", (base, value))
    return TensorType(tuple(base.shape), _same_dtype("slice_update", base, value))


def _check_indices(op, idx):
    for t in idx:
        if t.dtype.kind not in "iu":
            raise op_error(op, f"index tensors must be integer, got {t.dtype}", idx,
                           hint="use .long() on the index", exc=IndexError)


def _gather_infer(x, *idx):
    _check_indices("gather", idx)
    if len(idx) > x.ndim:
        raise op_error("gather", f"too many indices ({len(idx)}) for a {x.ndim}-d tensor", (x,),
                       exc=IndexError)
    bshape = broadcast_shapes("gather", *(t.shape for t in idx))
    return TensorType(bshape + tuple(x.shape[len(idx):]), x.dtype)


def _check_class_index_infer(idx, size, what):
    _check_indices(what, (idx,))
    return idx


def _scatter_add_infer(g, *idx, shape):
    _check_indices("scatter_add", idx)
    return TensorType(tuple(shape), g.dtype)


def _cat_infer(*xs, axis):
    if not xs:
        raise op_error("cat", "needs at least one tensor")
    first = xs[0]
    dtype = _same_dtype("cat", *xs)
    size = 0
    for x in xs:
        if x.ndim != first.ndim or any(
                d != e for i, (d, e) in enumerate(zip(x.shape, first.shape)) if i != axis):
            raise op_error("cat", f"shapes must match except in dim {axis}", xs)
        if isinstance(x.shape[axis], Dim):
            x.shape[axis].unknown(f"cat along the symbolic dimension {x.shape[axis]} (the "
                                  f"result's size is a sum of run-time sizes)")
        size += x.shape[axis]
    shape = list(first.shape)
    shape[axis] = size
    return TensorType(tuple(shape), dtype)


def _where_infer(c, a, b):
    if c.dtype != dtypes.bool_:
        raise op_error("where", f"condition must be bool, got {c.dtype}", (c,), exc=TypeError)
    dtype = _same_dtype("where", a, b)
    return TensorType(broadcast_shapes("where", c.shape, a.shape, b.shape), dtype)


def _cast_infer(a, dtype):
    return TensorType(a.shape, dtype)


def _random_infer(shape, dtype, **_):
    return TensorType(tuple(shape), dtype)


# --------------------------------------------------------------------------------------
# numpy implementations that need more than one call

def _sigmoid_impl(x):
    # Never overflows: exp of a non-positive number.
    e = np.exp(-np.abs(x))
    one = x.dtype.type(1)
    return np.where(x >= 0, one / (one + e), e / (one + e))


def _erf_impl(x):
    from scipy.special import erf

    return erf(x).astype(x.dtype, copy=False)


def _sign_impl(x):
    if x.dtype.kind != "f":
        return np.sign(x)
    # (x > 0) - (x < 0): 0 for NaN (and +0 for both zeros) as in PyTorch; np.sign gives NaN.
    return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_MAX = np.maximum.reduce


def _check_class_index_impl(idx, size, what):
    # One reduction: seen as unsigned, a negative index is larger than any size (the
    # ufunc's own reduce: ndarray.max's Python layer costs a third more on class labels).
    if idx.size and _MAX(idx.view(_UNSIGNED[idx.dtype.itemsize]), None) >= size:
        bad = (idx < 0) | (idx >= size)
        raise IndexError(f"{what}: index {int(idx[bad].flat[0])} is out of bounds for size "
                         f"{size} (a negative index does not count from the end here)")
    return idx.view()


def _check_finite_impl(x, what):
    if not np.isfinite(x).all():
        raise RuntimeError(what)
    return x.view()


def _relu_impl(x):
    return np.maximum(x, x.dtype.type(0))


def _scatter_slice_impl(g, shape, index):
    out = np.zeros(shape, g.dtype)
    out[numpy_index(index)] = g
    return out


def _slice_update_impl(base, value, index):
    out = base.copy()
    out[numpy_index(index)] = value
    return out


def _scatter_add_impl(g, *idx, shape):
    out = np.zeros(shape, g.dtype)
    np.add.at(out, tuple(idx), g)
    return out


def _sum_impl(a, axes, keepdim):
    dtype = a.dtype if a.dtype.kind == "f" else np.int64
    return np.sum(a, axis=axes, dtype=dtype, keepdims=keepdim)


def _randomness():
    from . import random

    return random.generator()


def _uniform_impl(shape, dtype):
    return _randomness().random(shape, dtype=np.float64 if dtype == dtypes.float64 else
                                np.float32)


def _normal_impl(shape, dtype):
    return _randomness().standard_normal(shape, dtype=np.float64 if dtype == dtypes.float64
                                         else np.float32)


def _randint_impl(shape, dtype, low, high):
    return _randomness().integers(low, high, size=shape, dtype=dtype)


# --------------------------------------------------------------------------------------
# vjp helpers (registry ops only, through the front end `fn`)

def _unbroadcast_keepdim(g, a_shape, axes, keepdim):
    """Bring a reduced gradient back to `a_shape` by broadcasting."""
    if not keepdim:
        g = fn.reshape(g, _reduce_shape(a_shape, axes, True))
    return fn.expand(g, a_shape)


def _amax_vjp(g, out, a, axes, keepdim):
    outb = _unbroadcast_keepdim(out, a.shape, axes, keepdim)
    mask = fn.cast(fn.eq(a, outb), g.dtype)
    count = fn.sum(mask, axes, True)
    gb = _unbroadcast_keepdim(g, a.shape, axes, keepdim)
    return fn.div(fn.mul(gb, mask), count)


def _matmul_vjp_a(g, out, a, b):
    return fn.matmul(g, fn.transpose(b, -1, -2))


def _matmul_vjp_b(g, out, a, b):
    return fn.matmul(fn.transpose(a, -1, -2), g)


def _maximum_vjp(first):
    def vjp(g, out, a, b):
        x, y = (a, b) if first else (b, a)
        zero = fn.const(0, g.dtype)
        half = fn.mul(g, fn.const(0.5, g.dtype))
        return fn.where(fn.gt(x, y), g, fn.where(fn.eq(x, y), half, zero))
    return vjp


def _minimum_vjp(first):
    def vjp(g, out, a, b):
        x, y = (a, b) if first else (b, a)
        zero = fn.const(0, g.dtype)
        half = fn.mul(g, fn.const(0.5, g.dtype))
        return fn.where(fn.lt(x, y), g, fn.where(fn.eq(x, y), half, zero))
    return vjp


def _pow_vjp_a(g, out, a, b):
    # PyTorch's rule: b * a ** (b - 1), but 0 where b == 0 (at a = 0 that is 0 * inf).
    d = fn.mul(b, fn.pow(a, fn.sub(b, fn.const(1, b.dtype))))
    data = b._data
    if data.__class__ is np.ndarray and data.size and (data != 0).all():
        return fn.mul(g, d)  # a known exponent without zeros (x ** 2): no select needed
    zero = fn.const(0, g.dtype)
    return fn.mul(g, fn.where(fn.eq(b, zero), zero, d))


def _pow_vjp_b(g, out, a, b):
    # out * log(a), as PyTorch: 0 where a == 0 and b >= 0; at a == 0, b < 0 that is
    # inf * log(0) = -inf; NaN for a < 0 (and b NaN). log is only taken of positive numbers
    # (no warnings).
    zero = fn.const(0, out.dtype)
    positive = fn.gt(a, zero)
    safe = fn.where(positive, a, fn.const(1, a.dtype))
    # constants (not out * -inf: where's other branch would get 0 * inf = NaN second derivatives)
    below = fn.where(fn.lt(b, zero), fn.const(-math.inf, out.dtype), fn.const(math.nan, out.dtype))
    at_zero = fn.where(fn.ge(b, zero), zero, below)
    return fn.mul(g, fn.where(positive, fn.mul(out, fn.log(safe)),
                              fn.where(fn.eq(a, zero), at_zero,
                                       fn.const(float("nan"), out.dtype))))


def _cat_vjp(g, out, *xs, axis):
    grads = []
    start = 0
    for x in xs:
        size = x.shape[axis]
        index = (slice(None),) * axis + (slice(start, start + size),)
        grads.append(fn.getitem(g, index))
        start += size
    return tuple(grads)


def _inverse(perm):
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


# --------------------------------------------------------------------------------------
# the registry

E, R, M, S, I, X = "elementwise", "reduction", "matmul", "shape", "indexing", "random"

register("add", E, 2, np.add, _binary_infer("add"),
         vjp=(lambda g, out, a, b: g, lambda g, out, a, b: g),
         doc="a + b, broadcasting.")
register("sub", E, 2, np.subtract, _binary_infer("sub"),
         vjp=(lambda g, out, a, b: g, lambda g, out, a, b: fn.neg(g)),
         doc="a - b, broadcasting.")
register("mul", E, 2, np.multiply, _binary_infer("mul"),
         vjp=(lambda g, out, a, b: fn.mul(g, b), lambda g, out, a, b: fn.mul(g, a)),
         saves=(0, 1), doc="a * b, broadcasting.")
register("div", E, 2, np.true_divide, _binary_infer("div"),
         vjp=(lambda g, out, a, b: fn.div(g, b),
              lambda g, out, a, b: fn.neg(fn.div(fn.mul(g, out), b))),
         saves=(1,), saves_out=True, doc="a / b (true division of floats), broadcasting.")
register("pow", E, 2, np.power, _binary_infer("pow"),
         vjp=(_pow_vjp_a, _pow_vjp_b),
         saves=(0, 1), saves_out=True, doc="a ** b, broadcasting.")
register("maximum", E, 2, np.maximum, _binary_infer("maximum"),
         vjp=(_maximum_vjp(True), _maximum_vjp(False)), saves=(0, 1),
         doc="Elementwise max; NaN propagates; ties split the gradient in half.")
register("minimum", E, 2, np.minimum, _binary_infer("minimum"),
         vjp=(_minimum_vjp(True), _minimum_vjp(False)), saves=(0, 1),
         doc="Elementwise min; NaN propagates; ties split the gradient in half.")
for _name, _ufunc in [("eq", np.equal), ("ne", np.not_equal), ("lt", np.less),
                      ("le", np.less_equal), ("gt", np.greater), ("ge", np.greater_equal)]:
    register(_name, E, 2, _ufunc, _compare_infer(_name), doc=f"Comparison {_name}; bool result.")
register("neg", E, 1, np.negative, _unary_infer,
         vjp=(lambda g, out, a: fn.neg(g),), doc="-a.")
register("exp", E, 1, np.exp, _float_unary_infer("exp"),
         vjp=(lambda g, out, a: fn.mul(g, out),), saves_out=True, doc="e ** a.")
register("log", E, 1, np.log, _float_unary_infer("log"),
         vjp=(lambda g, out, a: fn.div(g, a),), saves=(0,), doc="Natural logarithm.")
register("sqrt", E, 1, np.sqrt, _float_unary_infer("sqrt"),
         vjp=(lambda g, out, a: fn.div(fn.mul(g, fn.const(0.5, g.dtype)), out),),
         saves_out=True, doc="Square root.")
register("tanh", E, 1, np.tanh, _float_unary_infer("tanh"),
         vjp=(lambda g, out, a: fn.mul(g, fn.sub(fn.const(1, out.dtype), fn.mul(out, out))),),
         saves_out=True, doc="Hyperbolic tangent.")
register("sigmoid", E, 1, _sigmoid_impl, _float_unary_infer("sigmoid"),
         vjp=(lambda g, out, a: fn.mul(g, fn.mul(out, fn.sub(fn.const(1, out.dtype), out))),),
         saves_out=True, doc="1 / (1 + exp(-a)), computed without overflow.")
register("erf", E, 1, _erf_impl, _float_unary_infer("erf"),
         vjp=(lambda g, out, a: fn.mul(g, fn.mul(fn.const(2.0 / math.sqrt(math.pi), a.dtype),
                                                 fn.exp(fn.neg(fn.mul(a, a))))),),
         saves=(0,), doc="Gauss error function (for exact GELU).")
register("log1p", E, 1, np.log1p, _float_unary_infer("log1p"),
         vjp=(lambda g, out, a: fn.div(g, fn.add(a, fn.const(1, a.dtype))),), saves=(0,),
         doc="log(1 + a), accurate for small a.")
register("expm1", E, 1, np.expm1, _float_unary_infer("expm1"),
         vjp=(lambda g, out, a: fn.mul(g, fn.add(out, fn.const(1, out.dtype))),),
         saves_out=True, doc="exp(a) - 1, accurate for small a.")
register("relu", E, 1, _relu_impl, _unary_infer,
         vjp=(lambda g, out, a: fn.where(fn.gt(out, fn.const(0, out.dtype)), g,
                                         fn.const(0, g.dtype)),),
         saves_out=True,
         doc="max(a, 0). A primitive, so the gradient at 0 is 0 (as a composite "
             "maximum(a, 0) it would split in half).")
register("abs", E, 1, np.abs, _unary_infer,
         vjp=(lambda g, out, a: fn.mul(g, fn.sign(a)),), saves=(0,), doc="|a|.")
register("sign", E, 1, _sign_impl, _unary_infer,
         vjp=(lambda g, out, a: fn.broadcast_to(fn.const(0, g.dtype), tuple(a.shape)),),
         doc="-1, 0 or 1; 0 for NaN and a zero gradient, as in PyTorch.")
register("stop_gradient", E, 1, lambda a: a, _unary_infer, view="whole",
         doc="Identity that gradients do not flow through: `detach()` inside a trace.")
register("where", E, 3, np.where, _where_infer,
         vjp=(None,
              lambda g, out, c, a, b: fn.where(c, g, fn.const(0, g.dtype)),
              lambda g, out, c, a, b: fn.where(c, fn.const(0, g.dtype), g)),
         saves=(0,), doc="c ? a : b, broadcasting.")
register("cast", E, 1, lambda a, dtype: a.astype(dtype), _cast_infer,
         vjp=(lambda g, out, a, dtype: fn.cast(g, a.dtype),), params=("dtype",),
         doc="Convert to `dtype`.")

register("sum", R, 1, _sum_impl, _sum_infer,
         vjp=(lambda g, out, a, axes, keepdim: _unbroadcast_keepdim(g, a.shape, axes, keepdim),),
         params=("axes", "keepdim"),
         doc="Sum over `axes` (a tuple of non-negative ints); ints sum to int64.")
register("amax", R, 1, lambda a, axes, keepdim: np.amax(a, axis=axes, keepdims=keepdim), _amax_infer, vjp=(_amax_vjp,), saves=(0,), saves_out=True,
         params=("axes", "keepdim"),
         doc="Max over `axes`; the gradient is shared evenly between tied maxima.")
register("argmax", R, 1, lambda a, axis, keepdim: np.argmax(a, axis=axis, keepdims=keepdim),
         _argmax_infer, params=("axis", "keepdim"),
         doc="Index of the max over `axis` (None: flattened); int64.")

register("matmul", M, 2, np.matmul, _matmul_infer, vjp=(_matmul_vjp_a, _matmul_vjp_b),
         saves=(0, 1), doc="Batched matrix product of operands with ndim >= 2.")

register("reshape", S, 1, lambda a, shape: np.reshape(a, shape), _reshape_infer,
         vjp=(lambda g, out, a, shape: fn.reshape(g, a.shape),), params=("shape",),
         view=True, doc="View with a new shape of the same size.")
register("permute", S, 1, lambda a, perm: np.transpose(a, perm), _permute_infer,
         vjp=(lambda g, out, a, perm: fn.permute(g, _inverse(perm)),), params=("perm",),
         view=True, doc="Reorder dimensions.")
register("broadcast_to", S, 1, lambda a, shape: np.broadcast_to(a, shape), _broadcast_to_infer,
         vjp=(lambda g, out, a, shape: fn.sum_to(g, a.shape),), params=("shape",),
         view=True, doc="Expand size-1 (and new leading) dimensions without copying.")
register("cat", S, -1, lambda *xs, axis: np.concatenate(xs, axis=axis), _cat_infer,
         vjp=_cat_vjp, params=("axis",), doc="Concatenate along `axis`.")

register("getitem", I, 1, lambda a, index: a[numpy_index(index)], _getitem_infer,
         vjp=(lambda g, out, a, index: fn.scatter_slice(g, a.shape, index),), params=("index",),
         view=True, doc="Basic indexing: ints, slices and new axes (a view).")
register("scatter_slice", I, 1, _scatter_slice_impl, _scatter_slice_infer,
         vjp=(lambda g, out, a, shape, index: fn.getitem_basic(g, index),),
         params=("shape", "index"),
         doc="Zeros of `shape` with `g` written at a basic `index` (getitem's vjp).")
register("slice_update", I, 2, _slice_update_impl, _slice_update_infer,
         vjp=(lambda g, out, base, value, index: fn.slice_update(
                  g, fn.expand(fn.const(0, g.dtype), value.shape), index),
              lambda g, out, base, value, index: fn.getitem_basic(g, index)),
         params=("index",),
         doc="`base` with the region at a basic `index` replaced by `value` (a new array): "
             "an in-place write through a view, functionalized (x[1:3] = v, x[0].mul_(2)).")
register("gather", I, -1, lambda x, *idx: x[idx], _gather_infer,
         vjp=lambda g, out, x, *idx: (fn.scatter_add(g, idx, x.shape),) + (None,) * len(idx),
         saves=(1, 2, 3, 4, 5, 6, 7, 8),
         doc="Integer-array indexing of the leading len(idx) dims: x[i0, i1, ...].")
register("check_class_index", I, 1, _check_class_index_impl,
         _check_class_index_infer, params=("size", "what"),
         view="whole",
         doc="The index tensor itself, after checking every value is in [0, size): an "
             "IndexError otherwise (class labels, embedding rows; numpy's indexing would wrap "
             "a negative index around). Runs when the program runs, traced or not.")
register("check_finite", I, 1, _check_finite_impl, lambda x, what: x, params=("what",),
         view="whole", vjp=lambda g, out, x, what: (g,),
         doc="The tensor itself, after checking every value is finite: RuntimeError(what) "
             "otherwise (clip_grad_norm_(error_if_nonfinite=True) in a compiled step). Runs "
             "when the program runs, traced or not.")
register("scatter_add", I, -1, _scatter_add_impl, _scatter_add_infer,
         vjp=lambda g, out, v, *idx, shape: (fn.gather(g, idx),) + (None,) * len(idx),
         saves=(1, 2, 3, 4, 5, 6, 7, 8), params=("shape",),
         doc="Zeros of `shape` with `g` added at integer indices; repeated indices add up.")

register("uniform", X, 0, _uniform_impl, _random_infer, params=("shape", "dtype"),
         doc="Uniform [0, 1) samples from the global generator (eager.manual_seed).")
register("normal", X, 0, _normal_impl, _random_infer, params=("shape", "dtype"),
         doc="Standard normal samples from the global generator.")
register("randint", X, 0, _randint_impl, _random_infer, params=("shape", "dtype", "low", "high"),
         doc="Integers in [low, high) from the global generator.")

from . import functions as fn  # noqa: E402  (vjp rules call the front end at run time)
