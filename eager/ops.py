"""The op registry: one row per primitive op.

Each `OpDef` holds, side by side, everything every layer needs to know about
a primitive:

* ``category``: ``elementwise``, ``reduction``, ``matmul``, ``shape``,
  ``indexing``, ``random``;
* ``infer(*types, **params) -> TensorType``: the shape and dtype rule (used by
  the tracer, the IR verifier and for eager error messages; `eager.shape_rules`);
* ``impl(*arrays, **params) -> ndarray``: the numpy implementation;
* the facts the other layers look up instead of keeping lists of op names:
  ``view`` (the output aliases the input), ``recompute`` (autodiff may recompute
  it in backward), ``reduce`` (a fusable accumulation), ``method`` (a Tensor
  method of the op's name), ``control``/``run`` (sub-graph ops, registered by
  `tracer.control`); how codegen lowers an op is its row in `codegen.lower`;
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
from typing import Callable

import numpy as np

from . import dtypes
from .errors import op_error  # noqa: F401  (re-exported for row files)
from .shape_rules import (  # noqa: F401  (re-exported: rows registered from other files use them)
    _amax_infer, _argmax_infer, _broadcast_to_infer, _binary_infer, _cast_infer, _cat_infer,
    _check_axes, _check_class_index_infer, _check_indices, _compare_infer, _float_unary_infer,
    _gather_infer, _getitem_infer, _matmul_infer, _permute_infer, _random_infer,
    _reduce_shape, _reshape_infer, _same_dtype, _scatter_add_infer, _scatter_slice_infer,
    _shape_text, _slice_update_infer, _sum_infer, _unary_infer, _where_infer,
    broadcast_shapes, index_shape, numpy_index,
)
from .types import Dim, TensorType, has_dims, is_dim, symbolic_size  # noqa: F401


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
    # output is all of the input, in its layout (no element moves: a check, detach);
    # "strided": strides of its own (diagonal, unfold), a write through it is a scatter.
    view: bool | str = False
    # Autodiff may compute the output again in the backward pass instead of saving it (cheap
    # elementwise and view ops: recomputing costs less than keeping the array alive).
    recompute: bool = False
    # A reduction the kernels fuse as an accumulation: "sum" (starts at 0) or "max" (starts
    # at -inf, NaN propagates); None for the others (argmax runs as a numpy step).
    reduce: str | None = None
    # Tensor has a method of the op's name calling the front-end function of that name
    # (x.exp() is eager.exp(x)), attached by eager.tensor.
    method: bool = False
    # Control flow holding sub-graphs in its params (cond, while_loop, registered by
    # tracer.control): `run(eqn, values, sizes) -> outputs` evaluates it (the interpreter
    # and codegen's runner call it), and there is no vjp yet.
    control: bool = False
    run: Callable | None = None
    # The gradient of input 0 is zeros with `g` written at the op's `index` param (its vjp
    # is scatter_slice): autograd keeps such pieces of one tensor's gradient apart and
    # writes them all with one `cat` (eager.slice_grads), not one full-size zero array and
    # one addition per piece (unbind over 35 time steps: 35 of each).
    slice_grad: bool = False
    # Half-type operands (dtypes.HALF: float16, bfloat16) are computed in their COMPUTE dtype
    # (float32) and the result rounded once to the half type, as PyTorch's CPU kernels do:
    # sums and matmul accumulate in float32, sigmoid rounds once.  `impl` is wrapped to do it
    # (so eager, the interpreter and compiled numpy steps all agree).  Default: reductions,
    # matmul and computing elementwise rows.  A numpy ufunc's half loops already compute
    # in float32 and round once, so for a ufunc row only bfloat16 takes the float32 route,
    # for speed (ml_dtypes' loops are 2-150x slower than two casts and numpy's float32
    # loop); rows whose bfloat16 loops are fast enough say opmath=False and keep the hot
    # float32 path free of the wrapper (add, mul, comparisons, ...).
    opmath: bool = False
    # Checks values when the program runs and may raise there, as eager raises at this op
    # (a class index out of range, an integer divisor 0): a compiled program writes no state
    # in place before such a step, so after the raise the tracer can run the call eagerly
    # and leave eager's state (tracer.function, "a run-time error").
    raises: bool = False
    # A dtype conversion, correctly rounded: of an argument (a value not computed in the
    # program) it gives the same bits eagerly and compiled, so check mode's precision walk
    # (tracer/check_compare.py) gives its result its own dtype's tolerance. Not an opmath row.
    converts: bool = False

    def __repr__(self) -> str:
        return f"OpDef({self.name})"


OPS: dict[str, OpDef] = {}


def register(name, category, nin, impl, infer, vjp=None, saves=(), saves_out=False, doc="",
             params=(), view=False, *, recompute=False, reduce=None, method=False,
             control=False, run=None, slice_grad=False, opmath=None, raises=False,
             converts=False):
    if opmath is None:
        opmath = category in ("reduction", "matmul") or (
            category == "elementwise" and not view and not converts)
    if opmath:
        impl = _opmath(impl, {dtypes.bfloat16} if isinstance(impl, np.ufunc) else dtypes.HALF)
    op = OpDef(name, category, nin, impl, infer, vjp, tuple(saves), saves_out, doc, params, view,
               recompute, reduce, method, control, run, slice_grad, opmath, raises, converts)
    OPS[name] = op
    return op


def _opmath(impl, half):
    """`impl`, computing operands of the half types `half` in float32 and rounding the
    result once to the half type (OpDef.opmath); other dtypes go straight through."""
    def run(*arrays, **params):
        for a in arrays:
            if a.dtype in half:
                return _in_compute_dtype(impl, arrays, params, a.dtype)
        return impl(*arrays, **params)
    run.__name__ = getattr(impl, "__name__", "impl")
    run.__doc__ = impl.__doc__
    run.__wrapped__ = impl
    return run


def _in_compute_dtype(impl, arrays, params, storage):
    wide = dtypes.COMPUTE[storage]
    out = impl(*[a.astype(wide) if a.dtype in dtypes.HALF else a for a in arrays], **params)
    if isinstance(out, tuple):
        return tuple(_round_to(o, wide, storage) for o in out)
    return _round_to(out, wide, storage)


def _round_to(out, wide, storage):
    out = np.asarray(out)
    return out.astype(storage) if out.dtype == wide else out



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
    if not dtypes.is_floating(x.dtype):
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


def _gather_impl(x, *idx):
    # (a named function: tracer.call_source.raised_by_check knows a value check's raise by
    # its implementation's code in the traceback)
    return x[idx]


def _check_nonzero_impl(x, what):
    if x.size and not x.all():
        raise RuntimeError(what)
    return x.view()


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
    # (a named function, as _gather_impl: a value check's raise is known by this code)
    out = np.zeros(shape, g.dtype)
    np.add.at(out, tuple(idx), g)
    return out


def _sum_impl(a, axes, keepdim):
    dtype = a.dtype if dtypes.is_floating(a.dtype) else np.int64
    return np.sum(a, axis=axes, dtype=dtype, keepdims=keepdim)


def _randomness():
    from . import random

    return random.generator()


# (rng: an eager generator= of one's own, eager draws only; else the global generator;
# half types: drawn in float32, rounded)
def _uniform_impl(shape, dtype, rng=None):
    out = (rng or _randomness()).random(shape, dtype=np.float64 if dtype == dtypes.float64
                                        else np.float32)
    return out if out.dtype == dtype else out.astype(dtype)


def _normal_impl(shape, dtype, rng=None):
    out = (rng or _randomness()).standard_normal(shape, dtype=np.float64 if
                                                 dtype == dtypes.float64 else np.float32)
    return out if out.dtype == dtype else out.astype(dtype)


def _randint_impl(shape, dtype, low, high, rng=None):
    return (rng or _randomness()).integers(low, high, size=shape, dtype=dtype)


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
    if b.ndim == 2 and a.ndim > 2:
        # A matrix shared by a batch (Linear on (B, T, C)): ONE product over the batch
        # folded into the contraction, (K, B*M) @ (B*M, N), rather than B products and a
        # sum over them (W9's weight gradients: 16 products into a 4 MiB array, then a sum).
        k, n = b.shape
        return fn.matmul(fn.transpose(fn.reshape(a, (-1, k)), 0, 1), fn.reshape(g, (-1, n)))
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
         doc="a + b, broadcasting.", recompute=True, method=True,
         opmath=False)
register("sub", E, 2, np.subtract, _binary_infer("sub"),
         vjp=(lambda g, out, a, b: g, lambda g, out, a, b: fn.neg(g)),
         doc="a - b, broadcasting.", recompute=True, method=True,
         opmath=False)
register("mul", E, 2, np.multiply, _binary_infer("mul"),
         vjp=(lambda g, out, a, b: fn.mul(g, b), lambda g, out, a, b: fn.mul(g, a)),
         saves=(0, 1), doc="a * b, broadcasting.", recompute=True, method=True,
         opmath=False)
register("div", E, 2, np.true_divide, _binary_infer("div"),
         vjp=(lambda g, out, a, b: fn.div(g, b),
              lambda g, out, a, b: fn.neg(fn.div(fn.mul(g, out), b))),
         saves=(1,), saves_out=True, doc="a / b (true division of floats), broadcasting.",
         recompute=True, method=True)
register("pow", E, 2, np.power, _binary_infer("pow"),
         vjp=(_pow_vjp_a, _pow_vjp_b),
         saves=(0, 1), saves_out=True, doc="a ** b, broadcasting.", method=True)
register("maximum", E, 2, np.maximum, _binary_infer("maximum"),
         vjp=(_maximum_vjp(True), _maximum_vjp(False)), saves=(0, 1),
         doc="Elementwise max; NaN propagates; ties split the gradient in half.",
         recompute=True, method=True, opmath=False)
register("minimum", E, 2, np.minimum, _binary_infer("minimum"),
         vjp=(_minimum_vjp(True), _minimum_vjp(False)), saves=(0, 1),
         doc="Elementwise min; NaN propagates; ties split the gradient in half.",
         recompute=True, method=True, opmath=False)
for _name, _ufunc in [("eq", np.equal), ("ne", np.not_equal), ("lt", np.less),
                      ("le", np.less_equal), ("gt", np.greater), ("ge", np.greater_equal)]:
    register(_name, E, 2, _ufunc, _compare_infer(_name), doc=f"Comparison {_name}; bool result.",
             recompute=True, method=True, opmath=False)
register("neg", E, 1, np.negative, _unary_infer,
         vjp=(lambda g, out, a: fn.neg(g),), doc="-a.", recompute=True, method=True,
         opmath=False)
register("exp", E, 1, np.exp, _float_unary_infer("exp"),
         vjp=(lambda g, out, a: fn.mul(g, out),), saves_out=True, doc="e ** a.",
         recompute=True, method=True)
register("log", E, 1, np.log, _float_unary_infer("log"),
         vjp=(lambda g, out, a: fn.div(g, a),), saves=(0,), doc="Natural logarithm.", method=True)
register("sqrt", E, 1, np.sqrt, _float_unary_infer("sqrt"),
         vjp=(lambda g, out, a: fn.div(fn.mul(g, fn.const(0.5, g.dtype)), out),),
         saves_out=True, doc="Square root.", method=True)
register("tanh", E, 1, np.tanh, _float_unary_infer("tanh"),
         vjp=(lambda g, out, a: fn.mul(g, fn.sub(fn.const(1, out.dtype), fn.mul(out, out))),),
         saves_out=True, doc="Hyperbolic tangent.", recompute=True, method=True)
register("sigmoid", E, 1, _sigmoid_impl, _float_unary_infer("sigmoid"),
         vjp=(lambda g, out, a: fn.mul(g, fn.mul(out, fn.sub(fn.const(1, out.dtype), out))),),
         saves_out=True, doc="1 / (1 + exp(-a)), computed without overflow.",
         recompute=True, method=True)
register("erf", E, 1, _erf_impl, _float_unary_infer("erf"),
         vjp=(lambda g, out, a: fn.mul(g, fn.mul(fn.const(2.0 / math.sqrt(math.pi), a.dtype),
                                                 fn.exp(fn.neg(fn.mul(a, a))))),),
         saves=(0,), doc="Gauss error function (for exact GELU).", method=True)
register("log1p", E, 1, np.log1p, _float_unary_infer("log1p"),
         vjp=(lambda g, out, a: fn.div(g, fn.add(a, fn.const(1, a.dtype))),), saves=(0,),
         doc="log(1 + a), accurate for small a.", method=True)
register("expm1", E, 1, np.expm1, _float_unary_infer("expm1"),
         vjp=(lambda g, out, a: fn.mul(g, fn.add(out, fn.const(1, out.dtype))),),
         saves_out=True, doc="exp(a) - 1, accurate for small a.", method=True)
register("relu", E, 1, _relu_impl, _unary_infer,
         vjp=(lambda g, out, a: fn.where(fn.gt(out, fn.const(0, out.dtype)), g,
                                         fn.const(0, g.dtype)),),
         saves_out=True,
         doc="max(a, 0). A primitive, so the gradient at 0 is 0 (as a composite "
             "maximum(a, 0) it would split in half).", recompute=True, method=True)
register("abs", E, 1, np.abs, _unary_infer,
         vjp=(lambda g, out, a: fn.mul(g, fn.sign(a)),), saves=(0,), doc="|a|.",
         recompute=True, method=True, opmath=False)
register("sign", E, 1, _sign_impl, _unary_infer,
         vjp=(lambda g, out, a: fn.broadcast_to(fn.const(0, g.dtype), tuple(a.shape)),),
         doc="-1, 0 or 1; 0 for NaN and a zero gradient, as in PyTorch.",
         recompute=True, method=True)
register("stop_gradient", E, 1, lambda a: a, _unary_infer, view="whole",
         doc="Identity that gradients do not flow through: `detach()` inside a trace.")
register("where", E, 3, np.where, _where_infer, opmath=False,
         vjp=(None,
              lambda g, out, c, a, b: fn.where(c, g, fn.const(0, g.dtype)),
              lambda g, out, c, a, b: fn.where(c, fn.const(0, g.dtype), g)),
         saves=(0,), doc="c ? a : b, broadcasting.", recompute=True)
register("cast", E, 1, lambda a, dtype: a.astype(dtype), _cast_infer,
         vjp=(lambda g, out, a, dtype: fn.cast(g, a.dtype),), params=("dtype",),
         doc="Convert to `dtype`.", recompute=True, converts=True)

register("sum", R, 1, _sum_impl, _sum_infer,
         vjp=(lambda g, out, a, axes, keepdim: _unbroadcast_keepdim(g, a.shape, axes, keepdim),),
         params=("axes", "keepdim"),
         doc="Sum over `axes` (a tuple of non-negative ints); ints sum to int64.", reduce="sum")
register("amax", R, 1, lambda a, axes, keepdim: np.amax(a, axis=axes, keepdims=keepdim), _amax_infer, vjp=(_amax_vjp,), saves=(0,), saves_out=True,
         params=("axes", "keepdim"),
         doc="Max over `axes`; the gradient is shared evenly between tied maxima.",
         method=True, reduce="max")
register("argmax", R, 1, lambda a, axis, keepdim: np.argmax(a, axis=axis, keepdims=keepdim),
         _argmax_infer, params=("axis", "keepdim"),
         doc="Index of the max over `axis` (None: flattened); int64.", method=True)

register("matmul", M, 2, np.matmul, _matmul_infer, vjp=(_matmul_vjp_a, _matmul_vjp_b),
         saves=(0, 1), doc="Batched matrix product of operands with ndim >= 2.", method=True)

register("reshape", S, 1, lambda a, shape: np.reshape(a, shape), _reshape_infer,
         vjp=(lambda g, out, a, shape: fn.reshape(g, a.shape),), params=("shape",),
         view=True, doc="View with a new shape of the same size.", recompute=True)
register("permute", S, 1, lambda a, perm: np.transpose(a, perm), _permute_infer,
         vjp=(lambda g, out, a, perm: fn.permute(g, _inverse(perm)),), params=("perm",),
         view=True, doc="Reorder dimensions.", recompute=True)
register("broadcast_to", S, 1, lambda a, shape: np.broadcast_to(a, shape), _broadcast_to_infer,
         vjp=(lambda g, out, a, shape: fn.sum_to(g, a.shape),), params=("shape",),
         view=True, doc="Expand size-1 (and new leading) dimensions without copying.",
         recompute=True)
register("cat", S, -1, lambda *xs, axis: np.concatenate(xs, axis=axis), _cat_infer,
         vjp=_cat_vjp, params=("axis",), doc="Concatenate along `axis`.")

register("getitem", I, 1, lambda a, index: a[numpy_index(index)], _getitem_infer,
         vjp=(lambda g, out, a, index: fn.scatter_slice(g, a.shape, index),), params=("index",),
         view=True, doc="Basic indexing: ints, slices and new axes (a view).", recompute=True,
         slice_grad=True)
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
register("gather", I, -1, _gather_impl, _gather_infer,
         vjp=lambda g, out, x, *idx: (fn.scatter_add(g, idx, x.shape),) + (None,) * len(idx),
         saves=(1, 2, 3, 4, 5, 6, 7, 8), raises=True,
         doc="Integer-array indexing of the leading len(idx) dims: x[i0, i1, ...]. Its own "
             "value check: an index out of range raises numpy's IndexError when the program "
             "runs (a traced index is unknown while tracing), before any state is written.")
register("check_class_index", I, 1, _check_class_index_impl,
         _check_class_index_infer, params=("size", "what"),
         view="whole", raises=True,
         doc="The index tensor itself, after checking every value is in [0, size): an "
             "IndexError otherwise (class labels, embedding rows; numpy's indexing would wrap "
             "a negative index around). Runs when the program runs, traced or not.")
register("check_finite", I, 1, _check_finite_impl, lambda x, what: x, params=("what",),
         view="whole", raises=True, vjp=lambda g, out, x, what: (g,),
         doc="The tensor itself, after checking every value is finite: RuntimeError(what) "
             "otherwise (clip_grad_norm_(error_if_nonfinite=True) in a compiled step). Runs "
             "when the program runs, traced or not.")
register("check_nonzero", I, 1, _check_nonzero_impl, lambda x, what: x, params=("what",),
         view="whole", raises=True,
         doc="The integer divisor itself, after checking no value is 0: RuntimeError(what) "
             "otherwise (PyTorch's ZeroDivisionError of integer //, %, fmod). Runs when the "
             "program runs, traced or not: a pass over the divisor, before the fused kernel.")
register("scatter_add", I, -1, _scatter_add_impl, _scatter_add_infer, opmath=True,
         vjp=lambda g, out, v, *idx, shape: (fn.gather(g, idx),) + (None,) * len(idx),
         saves=(1, 2, 3, 4, 5, 6, 7, 8), params=("shape",), raises=True,
         doc="Zeros of `shape` with `g` added at integer indices; repeated indices add up. "
             "Its own value check, as gather: an index out of range raises numpy's "
             "IndexError when the program runs, before any state is written.")

register("uniform", X, 0, _uniform_impl, _random_infer, params=("shape", "dtype"),
         doc="Uniform [0, 1) samples from the global generator (eager.manual_seed).")
register("normal", X, 0, _normal_impl, _random_infer, params=("shape", "dtype"),
         doc="Standard normal samples from the global generator.")
register("randint", X, 0, _randint_impl, _random_infer, params=("shape", "dtype", "low", "high"),
         doc="Integers in [low, high) from the global generator.")

from . import functions as fn  # noqa: E402  (vjp rules call the front end at run time)
