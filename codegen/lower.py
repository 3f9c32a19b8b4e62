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
  (gathers, scatters, concatenation, argmax, random numbers, control flow).

`tests/codegen` checks that every op in `eager.ops.OPS` has a row here.
"""
from __future__ import annotations

import numpy as np

from eager.ops import OPS

# scalar helpers emitted code imports from codegen.scalar
_BINARY = {
    "add": "({0} + {1})",
    "sub": "({0} - {1})",
    "mul": "({0} * {1})",
    "div": "({0} / {1})",
    "eq": "({0} == {1})",
    "ne": "({0} != {1})",
    "lt": "({0} < {1})",
    "le": "({0} <= {1})",
    "gt": "({0} > {1})",
    "ge": "({0} >= {1})",
    # np.maximum/np.minimum: NaN if either operand is NaN (operands are plain names)
    "maximum": "({0} if ({0} > {1} or {0} != {0}) else {1})",
    "minimum": "({0} if ({0} < {1} or {0} != {0}) else {1})",
}

_UNARY = {
    "neg": "(-{0})",
    "stop_gradient": "{0}",
    "abs": "abs({0})",
    "sqrt": "np.sqrt({0})",
    # max(x, 0) with NaN propagating, as np.maximum(x, 0)
    "relu": "({0} if ({0} > {zero} or {0} != {0}) else {zero})",
    # the registry's sign: -1, 0, +1, and 0 for NaN as in PyTorch
    "sign": "({one} if {0} > {zero} else ({minus_one} if {0} < {zero} else {zero}))",
}

# ops whose float versions come from codegen.vmath (vectorizable)
_VMATH = ("exp", "log", "tanh", "sigmoid", "erf", "log1p", "expm1")

ELEMENTWISE = set(_BINARY) | set(_UNARY) | set(_VMATH) | {"pow", "where", "cast"}
VIEWS = {"reshape", "permute", "broadcast_to", "getitem"}
REDUCTIONS = {"sum", "amax"}
BLAS = {"matmul"}
NUMPY = {"argmax", "check_class_index", "gather", "scatter_add", "scatter_slice", "slice_update",
         "cat", "uniform", "normal", "randint", "check_finite"}

LOWERING = {}
for _name in OPS:
    if _name in ELEMENTWISE:
        LOWERING[_name] = "kernel"
    elif _name in VIEWS:
        LOWERING[_name] = "view"
    elif _name in REDUCTIONS:
        LOWERING[_name] = "reduce"
    elif _name in BLAS:
        LOWERING[_name] = "blas"
    elif _name in NUMPY:
        LOWERING[_name] = "numpy"

_NP_TYPE = {"float32": "np.float32", "float64": "np.float64", "int32": "np.int32",
            "int64": "np.int64", "bool": "np.bool_"}


def np_type(dtype) -> str:
    return _NP_TYPE[np.dtype(dtype).name]


def expression(op: str, args: list, in_types: list, out_type, params: dict, imports: set,
               const, pow_exponent=None) -> str:
    """A Numba scalar expression computing `op` on operand names `args`.

    `const(value, dtype)` returns the name of a typed module-level constant.
    """
    if op in _BINARY:
        return _BINARY[op].format(*args)
    if op in _UNARY:
        dt = out_type.dtype
        return _UNARY[op].format(*args, zero=const(0, dt), one=const(1, dt),
                                 minus_one=const(-1, dt))
    if op in _VMATH:
        name = _vmath_name(op, out_type.dtype)
        if name is None:
            imports.add(("math", None))
            return f"math.{op}({args[0]})"
        imports.add(("codegen.vmath", name))
        return f"{name}({args[0]})"
    if op == "pow":
        if pow_exponent == 0.5:
            # np.power with a scalar exponent 0.5 computes sqrt(x), as eager does: there
            # (-inf) ** 0.5 is NaN (and -0.0 stays -0.0), where C's pow gives +inf.
            return f"np.sqrt({args[0]})"
        if pow_exponent is not None:
            return _int_power(args[0], pow_exponent)
        return f"({args[0]} ** {args[1]})"
    if op == "where":
        return f"({args[1]} if {args[0]} else {args[2]})"
    if op == "cast":
        target = np.dtype(params["dtype"])
        if target.kind == "b":
            return f"({args[0]} != 0)"
        return f"{np_type(target)}({args[0]})"
    raise KeyError(f"no kernel lowering for {op}")


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
