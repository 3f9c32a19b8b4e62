"""The lowering table: how each registry op becomes Numba code (or why it doesn't).

One row per op name, like the registry itself.  Elementwise ops lower to a
scalar Python expression inside a fused loop; the others are executed as
steps of the program:

* ``"blas"``  - matmul, through numpy's BLAS;
* ``"view"``  - reshape/permute/broadcast_to/getitem: index arithmetic inside
  kernels, or a zero-copy numpy view when a non-kernel step needs the value;
* ``"reduce"`` - sum/amax, fused as row or column reductions when the axes
  allow, else numpy;
* ``"numpy"`` - runs the registry's numpy implementation inside the program
  (gathers, scatters, concatenation, argmax, random numbers);
* ``"control"`` - cond/while_loop: the registry row's ``run`` evaluates the sub-graphs.

An elementwise row also says how the kernel computes it (an expression, a
function, or the vmath function of the op's name) and whether it is expensive
to recompute.  An op registered from another file adds its row with
`lower_as` next to its ``register(...)``.  `tests/codegen` checks that every
op in `eager.ops.OPS` has a row here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

@dataclass(frozen=True)
class Lowering:
    """How one registry op becomes code: its row in `LOWERING`, keyed by the op's name."""

    how: str  # "kernel", "view", "reduce", "blas", "numpy" or "control"
    # kernel: a scalar expression, a template of the operand names ({0}, {1}, ...) and typed
    # constants ({zero}, {one}, {minus_one}), or a function f(eqn, args, imports, const) -> str
    expr: str | Callable | None = None
    # kernel: float operands call codegen.vmath's <op>_f32/_f64 (vectorizable), others math.<op>
    vmath: bool = False
    # kernel: recomputing it in a later pass of a row kernel costs more than a store and a
    # load of a row buffer (which stays in L1/L2)
    expensive: bool = False
    # kernel: the binary operator of a row whose int64 result must wrap on overflow as
    # numpy's does; Numba's signed arithmetic is `nsw` (LLVM assumes no overflow, so
    # (a * 3) > 7 may fold to a > 2), so int64 computes it in uint64 and casts back
    wrapping: str | None = None


def _pow(e, args, imports, const):
    from tracer.ir import Literal

    pow_exponent = None
    if isinstance(e.inputs[1], Literal):
        v = e.inputs[1].value.item()
        if float(v).is_integer() and int(v) in INT_POWERS:
            pow_exponent = int(v)
        elif float(v) == 0.5:
            pow_exponent = 0.5  # numpy's scalar-exponent fast path: sqrt
    if pow_exponent == 0.5:
        # np.power with a scalar exponent 0.5 computes sqrt(x), as eager does: there
        # (-inf) ** 0.5 is NaN (and -0.0 stays -0.0), where C's pow gives +inf.
        return f"np.sqrt({args[0]})"
    if pow_exponent is not None:
        return _int_power(args[0], pow_exponent)
    return f"({args[0]} ** {args[1]})"


def _cast(e, args, imports, const):
    target = np.dtype(e.params["dtype"])
    if target.kind == "b":
        return f"({args[0]} != 0)"
    return f"{np_type(target)}({args[0]})"


def _kernel(expr=None, vmath=False, expensive=False, wrapping=None) -> Lowering:
    return Lowering("kernel", expr, vmath, expensive, wrapping)


_VIEW, _REDUCE, _BLAS = Lowering("view"), Lowering("reduce"), Lowering("blas")
_NUMPY, _CONTROL = Lowering("numpy"), Lowering("control")

LOWERING: dict[str, Lowering] = {
    "add": _kernel("({0} + {1})", wrapping="+"),
    "sub": _kernel("({0} - {1})", wrapping="-"),
    "mul": _kernel("({0} * {1})", wrapping="*"),
    "div": _kernel("({0} / {1})", expensive=True),
    "eq": _kernel("({0} == {1})"),
    "ne": _kernel("({0} != {1})"),
    "lt": _kernel("({0} < {1})"),
    "le": _kernel("({0} <= {1})"),
    "gt": _kernel("({0} > {1})"),
    "ge": _kernel("({0} >= {1})"),
    # np.maximum/np.minimum: NaN if either operand is NaN (operands are plain names)
    "maximum": _kernel("({0} if ({0} > {1} or {0} != {0}) else {1})"),
    "minimum": _kernel("({0} if ({0} < {1} or {0} != {0}) else {1})"),
    "pow": _kernel(_pow, expensive=True),
    "neg": _kernel("(-{0})"),
    "stop_gradient": _kernel("{0}"),
    "abs": _kernel("abs({0})"),
    "sqrt": _kernel("np.sqrt({0})", expensive=True),
    # max(x, 0) with NaN propagating, as np.maximum(x, 0)
    "relu": _kernel("({0} if ({0} > {zero} or {0} != {0}) else {zero})"),
    # the registry's sign: -1, 0, +1, and 0 for NaN as in PyTorch
    "sign": _kernel("({one} if {0} > {zero} else ({minus_one} if {0} < {zero} else {zero}))"),
    "exp": _kernel(vmath=True, expensive=True),
    "log": _kernel(vmath=True, expensive=True),
    "tanh": _kernel(vmath=True, expensive=True),
    "sigmoid": _kernel(vmath=True, expensive=True),
    "erf": _kernel(vmath=True, expensive=True),
    "log1p": _kernel(vmath=True, expensive=True),
    "expm1": _kernel(vmath=True, expensive=True),
    "where": _kernel("({1} if {0} else {2})"),
    "cast": _kernel(_cast),
    "reshape": _VIEW,
    "permute": _VIEW,
    "broadcast_to": _VIEW,
    "getitem": _VIEW,
    "sum": _REDUCE,
    "amax": _REDUCE,
    "matmul": _BLAS,
    "argmax": _NUMPY,
    "check_class_index": _NUMPY,
    "check_finite": _NUMPY,
    "gather": _NUMPY,
    "scatter_add": _NUMPY,
    "scatter_slice": _NUMPY,
    "slice_update": _NUMPY,
    "cat": _NUMPY,
    "uniform": _NUMPY,
    "normal": _NUMPY,
    "randint": _NUMPY,
    # eager/scan_ops.py (cumulative ops, sort, scatters)
    "cumsum": _NUMPY,
    "cumprod": _NUMPY,
    "logcumsumexp": _NUMPY,
    "cum_argmax": _NUMPY,
    "argsort": _NUMPY,
    "scatter": _NUMPY,
    "scatter_reduce": _NUMPY,
    # eager/ops_conv.py (sliding windows of convolution and pooling)
    "im2col": _NUMPY,
    "col2im": _NUMPY,
    # eager/dtype_ops.py (Tensor.view(dtype))
    "view_dtype": _NUMPY,
    "cond": _CONTROL,
    "while_loop": _CONTROL,
}


def lower_as(name: str, how: str, expr=None, vmath=False, expensive=False) -> Lowering:
    """Add the lowering row of an op registered from another file (next to its register())."""
    row = LOWERING[name] = Lowering(how, expr, vmath, expensive)
    return row


def is_expensive(op: str) -> bool:
    row = LOWERING.get(op)
    return row is not None and row.expensive


# The dtypes kernels compute in (fuse.py places equations of other dtypes as numpy steps):
# Numba has no float16 on the CPU, so float16 equations run through numpy's half loops,
# which round after every op as eager (and PyTorch's CPU kernels) do.
_NP_TYPE = {"float32": "np.float32", "float64": "np.float64", "int32": "np.int32",
            "int64": "np.int64", "bool": "np.bool_", "int8": "np.int8", "int16": "np.int16",
            "uint8": "np.uint8", "uint16": "np.uint16", "uint32": "np.uint32",
            "uint64": "np.uint64"}


# Numba's signature names of the same dtypes
NUMBA_TYPES = {"float32": "float32", "float64": "float64", "int32": "int32", "int64": "int64",
               "bool": "boolean", "int8": "int8", "int16": "int16", "uint8": "uint8",
               "uint16": "uint16", "uint32": "uint32", "uint64": "uint64"}
KERNEL_DTYPES = frozenset(_NP_TYPE)


def np_type(dtype) -> str:
    return _NP_TYPE[np.dtype(dtype).name]


def expression(e, args: list, imports: set, const) -> str:
    """A Numba scalar expression computing equation `e` on operand names `args`.

    `const(value, dtype)` returns the name of a typed module-level constant; `imports`
    collects the (module, name) pairs the expression needs.  An integer result narrower
    than 64 bits is cast back to its dtype: Numba computes int8/int16/int32 (and uint8 ...)
    arithmetic in 64 bits, where numpy (and PyTorch) wrap after every op, so without the
    cast a fused (a * b) > c or a max of wrapped values would differ from eager.
    """
    dt = np.dtype(e.out.type.dtype)
    row = LOWERING.get(e.op)
    if dt == np.int64 and row is not None and row.wrapping and all(
            np.dtype(x.type.dtype) == dt for x in e.inputs if hasattr(x, "type")):
        a, b = args
        return f"np.int64(np.uint64({a}) {row.wrapping} np.uint64({b}))"
    text = _expression(e, args, imports, const)
    if dt.kind in "iu" and dt.itemsize < 8:
        return f"{np_type(dt)}({text})"
    return text


def _expression(e, args: list, imports: set, const) -> str:
    op, out_type = e.op, e.out.type
    row = LOWERING.get(op)
    if row is None or row.how != "kernel":
        raise KeyError(f"no kernel lowering for {op}")
    if row.vmath:
        name = _vmath_name(op, out_type.dtype)
        if name is None:
            imports.add(("math", None))
            return f"math.{op}({args[0]})"
        imports.add(("codegen.vmath", name))
        return f"{name}({args[0]})"
    if callable(row.expr):
        return row.expr(e, args, imports, const)
    if "{zero}" in row.expr or "{one}" in row.expr:
        dt = out_type.dtype
        return row.expr.format(*args, zero=const(0, dt), one=const(1, dt),
                               minus_one=const(-1, dt))
    return row.expr.format(*args)


# The functions codegen.vmath defines, by (op, dtype name): its VMATH_NAMES is this table,
# kept here so that generating a kernel's source does not import vmath (and Numba).
VMATH_NAMES = {
    (op, dt): "%s_%s" % (op, "f32" if dt == "float32" else "f64")
    for op in ("exp", "expm1", "log", "log1p", "tanh", "sigmoid", "erf")
    for dt in ("float32", "float64")
}


def _vmath_name(op, dtype):
    return VMATH_NAMES.get((op, np.dtype(dtype).name))


INT_POWERS = (1, 2, 3, 4)


def _int_power(x: str, n: int) -> str:
    """x ** n for n in INT_POWERS as multiplications (what numpy computes, without pow())."""
    return "(" + " * ".join([x] * n) + ")"
