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

from . import conv_kernels, runner_forms, step_kernels, step_kernels_rnn


@dataclass(frozen=True)
class Lowering:
    """How one registry op becomes code: its row in `LOWERING`, keyed by the op's name."""

    how: str  # "kernel", "view", "reduce", "blas", "numpy" or "control"
    # kernel: a scalar expression, a template of the operand names ({0}, {1}, ...) and typed
    # constants ({zero}, {one}, {minus_one}), or a function f(eqn, args, imports, const) -> str
    expr: str | Callable | None = None
    # kernel: float operands call codegen.vmath's <op>_f32/_f64 (vectorizable) with one argument
    # per operand, others math.<op>
    vmath: bool = False
    # kernel: recomputing it in a later pass of a row kernel costs more than a store and a
    # load of a row buffer (which stays in L1/L2)
    expensive: bool = False
    # kernel: the value depends on the element's position, not only on its operands: `expr`
    # is f(eqn, args, imports, const, row, col) with the rendered indices of the last two
    # dims (kernels keep the loop nest for it, never one flat loop)
    positions: bool = False
    # numpy: f(eqn) -> the source of a Numba module whose `kernel(in0, ..., out0)` computes
    # this equation (codegen.step_kernels), or None where the numpy implementation serves
    step_kernel: Callable | None = None
    # numpy/blas/view: f(gen, k, step, operands, direct, bound) -> bool writing the runner's
    # lines for this step in place of calling the implementation (codegen.runner_forms)
    inline: Callable | None = None
    # numpy: its runner form assigns instead of adding where no output position repeats
    # (codegen.program.Program._unique_positions)
    unique_positions: bool = False
    # kernel: the binary operator of a row whose int64 result must wrap on overflow as
    # numpy's does; Numba's signed arithmetic is `nsw` (LLVM assumes no overflow, so
    # (a * 3) > 7 may fold to a > 2), so int64 computes it in uint64 and casts back
    wrapping: str | None = None
    # numpy/blas/view: its part in codegen.placement (where values are written): "joins"
    # (pieces along params["axis"], each made in its place by its producer where it can),
    # "product" (np.matmul writes it into a given array), "permutes" (a view by
    # params["perm"]), "reshapes" (a view of the same elements in C order)
    placement: str = ""
    # numpy: its step kernel is one long sequential loop (an RNN's time loop) that releases
    # the GIL: the runner may run it on the kernel pool's thread while the calling thread
    # runs products that do not depend on it (codegen.overlap)
    sequential: bool = False


def _pow(e, args, imports, const):
    from tracer.ir import Literal

    pow_exponent = None
    if isinstance(e.inputs[1], Literal):
        v = e.inputs[1].value.item()
        if float(v).is_integer() and int(v) in INT_POWERS:
            pow_exponent = int(v)
        elif float(v) == 0.5:
            pow_exponent = 0.5  # numpy's scalar-exponent fast path: sqrt
    out = np.dtype(e.out.type.dtype)
    if out.kind in "iu":
        # products in uint64, which wrap by definition (Numba's signed ones are nsw: LLVM
        # would fold x * x < 0 to false), cast back to the integer dtype
        if pow_exponent is not None and pow_exponent != 0.5:
            return f"{np_type(out)}({_int_power(f'np.uint64({args[0]})', pow_exponent)})"
        imports.add(("codegen.vmath", "pow_uint64"))
        return f"{np_type(out)}(pow_uint64({args[0]}, {args[1]}))"
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


def _tril_fill(e, args, imports, const, row, col):
    # (hidden: so that a running maximum over the filled rows vectorizes, vmath.hidden)
    fill = const(e.params["value"], e.out.type.dtype, hidden=True)
    return f"({args[0]} if ({col}) - ({row}) <= {int(e.params['diagonal'])} else {fill})"


def _kernel(expr=None, vmath=False, expensive=False, positions=False, wrapping=None) -> Lowering:
    return Lowering("kernel", expr, vmath, expensive, positions, wrapping=wrapping)


def _round(e, args, imports, const):
    # numpy's rule (what eager runs): scale by 10^d, round half to even, scale back
    d = int(e.params["decimals"])
    if d == 0:
        return f"np.rint({args[0]})"
    f = const(10.0 ** abs(d), e.out.type.dtype)
    if d > 0:
        return f"(np.rint({args[0]} * {f}) / {f})"
    return f"(np.rint({args[0]} / {f}) * {f})"


def _fmod(e, args, imports, const):
    if np.dtype(e.out.type.dtype).kind == "f":
        return f"np.fmod({args[0]}, {args[1]})"
    # integers: the remainder of truncated division, sign of a (Numba's int np.fmod is not);
    # 0 for a zero divisor, as numpy (eager) gives
    a, b = args
    return (f"(({a} - {b} * ((abs({a}) // abs({b})) * (1 if ({a} < 0) == ({b} < 0) else -1)))"
            f" if {b} != 0 else {b})")


def _divmod(helper, int_expr):
    def lower(e, args, imports, const):
        if np.dtype(e.out.type.dtype).kind == "f":
            imports.add(("codegen.vmath", helper))
            return f"{helper}({args[0]}, {args[1]})"
        return int_expr.format(*args)
    return lower


def _shift(left):
    # numpy's rule: a count outside [0, bits) shifts everything out (0, or -1 for a negative
    # a shifted right); in LLVM such a shift is undefined
    def lower(e, args, imports, const):
        bits = np.dtype(e.out.type.dtype).itemsize * 8
        a, b = args
        if left:
            return f"(({a} << {b}) if 0 <= {b} < {bits} else {const(0, e.out.type.dtype)})"
        return (f"(({a} >> {b}) if 0 <= {b} < {bits} else "
                f"({const(-1, e.out.type.dtype)} if {a} < 0 else {const(0, e.out.type.dtype)}))")
    return lower


def _bitwise_not(e, args, imports, const):
    if np.dtype(e.out.type.dtype).kind == "b":
        return f"(not {args[0]})"
    return f"(~{args[0]})"


_VIEW, _REDUCE = Lowering("view"), Lowering("reduce")
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
    # eager/ops_math.py; the trigonometric ones call codegen/vmath/trig.py
    "sin": _kernel(vmath=True, expensive=True),
    "cos": _kernel(vmath=True, expensive=True),
    "tan": _kernel(vmath=True, expensive=True),
    "asin": _kernel(vmath=True, expensive=True),
    "acos": _kernel(vmath=True, expensive=True),
    "atan": _kernel(vmath=True, expensive=True),
    # eager/ops_math.py: codegen.vmath's hyperbolic.py and explog.py
    "sinh": _kernel(vmath=True, expensive=True),
    "cosh": _kernel(vmath=True, expensive=True),
    "asinh": _kernel(vmath=True, expensive=True),
    "acosh": _kernel(vmath=True, expensive=True),
    "atanh": _kernel(vmath=True, expensive=True),
    "log2": _kernel(vmath=True, expensive=True),
    "log10": _kernel(vmath=True, expensive=True),
    "exp2": _kernel(vmath=True, expensive=True),
    "erfinv": _NUMPY,  # scipy.special.erfinv: no Numba implementation
    "floor": _kernel("np.floor({0})"),
    "ceil": _kernel("np.ceil({0})"),
    "trunc": _kernel("np.trunc({0})"),
    "round": _kernel(_round),
    "atan2": _kernel(vmath=True, expensive=True),
    "copysign": _kernel("np.copysign({0}, {1})"),
    "hypot": _kernel(vmath=True, expensive=True),
    "logaddexp": _kernel(vmath=True, expensive=True),
    "fmod": _kernel(_fmod, expensive=True),
    "remainder": _kernel(_divmod("remainder_float", "np.remainder({0}, {1})"), expensive=True),
    "floor_divide": _kernel(_divmod("floor_divide_float", "np.floor_divide({0}, {1})"),
                            expensive=True),
    "bitwise_and": _kernel("({0} & {1})"),
    "bitwise_or": _kernel("({0} | {1})"),
    "bitwise_xor": _kernel("({0} ^ {1})"),
    "bitwise_left_shift": _kernel(_shift(True)),
    "bitwise_right_shift": _kernel(_shift(False)),
    "bitwise_not": _kernel(_bitwise_not),
    "prod": _NUMPY,
    "where": _kernel("({1} if {0} else {2})"),
    "cast": _kernel(_cast),
    # eager/nn/attention.py (the causal mask from loop indices)
    "tril_fill": _kernel(_tril_fill, positions=True),
    "reshape": Lowering("view", inline=runner_forms.reshape, placement="reshapes"),
    "permute": Lowering("view", inline=runner_forms.permute, placement="permutes"),
    "broadcast_to": _VIEW,
    "getitem": _VIEW,
    "sum": _REDUCE,
    "amax": _REDUCE,
    "matmul": Lowering("blas", inline=runner_forms.matmul, placement="product"),
    "argmax": Lowering("numpy", step_kernel=step_kernels.argmax),
    "check_class_index": Lowering("numpy", inline=runner_forms.check_class_index),
    "check_finite": _NUMPY,
    "check_nonzero": _NUMPY,
    "gather": Lowering("numpy", inline=runner_forms.gather),
    "scatter_add": Lowering("numpy", inline=runner_forms.scatter_add,
                            step_kernel=step_kernels.scatter_add, unique_positions=True),
    "scatter_slice": Lowering("numpy", inline=runner_forms.scatter_slice),
    "slice_update": _NUMPY,
    "cat": Lowering("numpy", inline=runner_forms.cat, placement="joins"),
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
    # eager/index_assign.py (x[idx] = v, index_put_: numpy's own write into a copy)
    "index_put": _NUMPY,
    "index_get": _NUMPY,
    # eager/ops_conv.py (sliding windows of convolution and pooling)
    # (im2col: a Numba copy with uint64 indices, 2x numpy's slice copies on W8's shapes;
    # where it is not built, numpy's copies into reused buffers)
    "im2col": Lowering("numpy", inline=runner_forms.im2col, step_kernel=step_kernels.im2col),
    "col2im": Lowering("numpy", step_kernel=step_kernels.col2im),
    # eager/ops_conv_direct.py (convolutions read where the input lies; codegen.conv_kernels)
    "conv_direct": Lowering("numpy", step_kernel=conv_kernels.forward_kernel),
    "conv_direct_input_grad": Lowering("numpy", step_kernel=conv_kernels.input_grad_kernel),
    "conv_direct_weight_grad": Lowering("numpy", step_kernel=conv_kernels.weight_grad_kernel),
    # eager/ops_pool.py (max pooling: windows read where they lie, no copies)
    "max_pool_index": Lowering("numpy", step_kernel=step_kernels.max_pool_index),
    "plane_gather": Lowering("numpy", step_kernel=step_kernels.plane_gather),
    "plane_scatter_add": Lowering("numpy", step_kernel=step_kernels.plane_scatter_add),
    # eager/ops_rnn.py (an LSTM layer's time loop: one Numba call, numpy's BLAS per step)
    "lstm_recurrence": Lowering("numpy", step_kernel=step_kernels_rnn.lstm_recurrence,
                                sequential=True),
    "lstm_recurrence_backward": Lowering("numpy",
                                         step_kernel=step_kernels_rnn.lstm_recurrence_backward,
                                         sequential=True),
    # eager/dtype_ops.py (Tensor.view(dtype)), eager/strided_ops.py: strided views, copied
    "view_dtype": Lowering("numpy", inline=runner_forms.copied_view),
    "diagonal": Lowering("numpy", inline=runner_forms.copied_view),
    "unfold": Lowering("numpy", inline=runner_forms.copied_view),
    "cond": _CONTROL,
    "while_loop": _CONTROL,
}


def lower_as(name: str, how: str, expr=None, vmath=False, expensive=False) -> Lowering:
    """Add the lowering row of an op registered from another file (next to its register())."""
    row = LOWERING[name] = Lowering(how, expr, vmath, expensive)
    return row


def needs_positions(op: str) -> bool:
    row = LOWERING.get(op)
    return row is not None and row.positions


def is_expensive(op: str) -> bool:
    row = LOWERING.get(op)
    return row is not None and row.expensive


# The dtypes kernels compute in (fuse.py places equations of other dtypes as numpy steps):
# Numba has no bfloat16 and only partial CPU float16, so half-type equations run as numpy
# steps through the registry's impls, which round after every op as eager (and PyTorch's
# CPU kernels) do: compiled half-type results are eager's, bit for bit.
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


def expression(e, args: list, imports: set, const, positions=None) -> str:
    """A Numba scalar expression computing equation `e` on operand names `args`.

    `const(value, dtype)` returns the name of a typed module-level constant; `imports`
    collects the (module, name) pairs the expression needs; `positions` the rendered
    (row, column) indices of the element, for a row with ``positions=True``.  An integer
    result narrower than 64 bits is cast back to its dtype: Numba computes int8/int16/int32
    (and uint8 ...) arithmetic in 64 bits, where numpy (and PyTorch) wrap after every op, so
    without the cast a fused (a * b) > c or a max of wrapped values would differ from eager.
    """
    dt = np.dtype(e.out.type.dtype)
    row = LOWERING.get(e.op)
    if dt == np.int64 and row is not None and row.wrapping and all(
            np.dtype(x.type.dtype) == dt for x in e.inputs if hasattr(x, "type")):
        a, b = args
        return f"np.int64(np.uint64({a}) {row.wrapping} np.uint64({b}))"
    text = _expression(e, args, imports, const, positions)
    if dt == np.bool_ and row is not None and row.wrapping:
        return f"({text} != 0)"  # (Numba: True + True is 2; numpy's bool add is an or)
    if dt.kind in "iu" and dt.itemsize < 8:
        return f"{np_type(dt)}({text})"
    return text


def _expression(e, args: list, imports: set, const, positions) -> str:
    op, out_type = e.op, e.out.type
    row = LOWERING.get(op)
    if row is None or row.how != "kernel":
        raise KeyError(f"no kernel lowering for {op}")
    if row.vmath:
        name = _vmath_name(op, out_type.dtype)
        if name is None:
            imports.add(("math", None))
            return f"math.{op}({', '.join(args)})"
        imports.add(("codegen.vmath", name))
        return f"{name}({', '.join(args)})"  # one argument per operand (hypot: two)
    if row.positions:
        return row.expr(e, args, imports, const, *positions)
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
    for op in ("exp", "expm1", "log", "log1p", "tanh", "sigmoid", "erf",
               "sinh", "cosh", "asinh", "acosh", "atanh", "log2", "log10", "exp2",
               "hypot", "logaddexp")
    for dt in ("float32", "float64")
}
# codegen/vmath/trig.py (atan2 takes two operands, y and x)
VMATH_NAMES.update({
    (op, dt): "%s_%s" % (op, "f32" if dt == "float32" else "f64")
    for op in ("sin", "cos", "tan", "asin", "acos", "atan", "atan2")
    for dt in ("float32", "float64")
})


def _vmath_name(op, dtype):
    return VMATH_NAMES.get((op, np.dtype(dtype).name))


INT_POWERS = (1, 2, 3, 4)


def _int_power(x: str, n: int) -> str:
    """x ** n for n in INT_POWERS as multiplications (what numpy computes, without pow())."""
    return "(" + " * ".join([x] * n) + ")"
