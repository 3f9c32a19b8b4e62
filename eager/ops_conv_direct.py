"""Registry rows of a convolution computed directly (no im2col columns in the graph):
`conv_direct`, `conv_direct_input_grad` and `conv_direct_weight_grad`, groups 1.

* ``conv_direct(x, w)``: x (N, C, *spatial), w (O, C, *kernel) -> (N, O, *out), the
  cross-correlation with ``stride``, ``dilation`` and ``pad`` ((before, after) per dim);
* ``conv_direct_input_grad(g, w)``: its gradient with respect to x (spatial size ``shape``);
* ``conv_direct_weight_grad(g, x)``: its gradient with respect to w (kernel ``kernel``).

Each is linear in both operands and the three are each other's vjps, so every derivative
order stays in these rows.  The numpy implementations (eager, the interpreter) are
im2col + one BLAS product, the numbers the im2col lowering of eager/nn/conv.py computes;
compiled, codegen/conv_kernels.py runs Numba loops that read the input where it lies
(eager/nn/conv.py's docstring says which shapes take these rows, with the figures).
"""
from __future__ import annotations

import math

import numpy as np

from .dispatch import apply
from .errors import op_error
from .ops import OPS, TensorType, register
from .ops_conv import _check_geometry, _col2im_impl, _im2col_impl

_GEOMETRY = ("stride", "dilation", "pad")


# (matrices reshaped with both sizes given: a zero-size batch has no -1 to infer)

def _flat_grad(g):
    """(O, N * L) of g (N, O, *out)."""
    return np.ascontiguousarray(np.swapaxes(g, 0, 1)).reshape(g.shape[1], g.size // g.shape[1])


def _weight_matrix(w):
    """(O, C * K) of w (O, C, *kernel)."""
    return w.reshape(w.shape[0], math.prod(w.shape[1:]))


def _conv_impl(x, w, stride, dilation, pad):
    kernel = tuple(w.shape[2:])
    cols = _im2col_impl(x, kernel, stride, dilation, pad, 0.0)      # (C, *k, N, *out)
    n, out = x.shape[0], cols.shape[2 + len(kernel):]
    y = _weight_matrix(w) @ cols.reshape(math.prod(w.shape[1:]), n * math.prod(out))
    return np.ascontiguousarray(np.swapaxes(y.reshape((w.shape[0], n) + tuple(out)), 0, 1))


def _input_grad_impl(g, w, shape, stride, dilation, pad):
    kernel = tuple(w.shape[2:])
    cols = _weight_matrix(w).T @ _flat_grad(g)                      # (C*K, N*L)
    cols = cols.reshape((w.shape[1],) + kernel + (g.shape[0],) + tuple(g.shape[2:]))
    return _col2im_impl(cols, shape, kernel, stride, dilation, pad)


def _weight_grad_impl(g, x, kernel, stride, dilation, pad):
    cols = _im2col_impl(x, kernel, stride, dilation, pad, 0.0)
    ck = x.shape[1] * math.prod(kernel)
    dw = _flat_grad(g) @ cols.reshape(ck, cols.size // ck).T
    return dw.reshape((g.shape[1], x.shape[1]) + tuple(kernel))


def _operands(op, a, b, what_a, what_b):
    if a.ndim != b.ndim or a.ndim < 3:
        raise op_error(op, f"expected a {what_a} and a {what_b} of one rank >= 3, got "
                       f"{tuple(a.shape)} and {tuple(b.shape)}", (a, b))
    if a.dtype != b.dtype:
        raise op_error(op, f"operands of one dtype, got {a.dtype} and {b.dtype}", (a, b),
                       hint="cast one with .to(dtype)", exc=TypeError)


def _conv_infer(x, w, stride, dilation, pad):
    _operands("conv_direct", x, w, "(N, C, *spatial) input", "(O, C, *kernel) weight")
    if x.shape[1] != w.shape[1]:
        raise op_error("conv_direct", f"input {tuple(x.shape)} has {x.shape[1]} channels, "
                       f"weight {tuple(w.shape)} expects {w.shape[1]}", (x, w))
    out = _check_geometry("conv_direct", x, tuple(x.shape[2:]), tuple(w.shape[2:]), stride,
                          dilation, pad)
    return TensorType((x.shape[0], w.shape[0]) + out, x.dtype)


def _input_grad_infer(g, w, shape, stride, dilation, pad):
    op = "conv_direct_input_grad"
    _operands(op, g, w, "(N, O, *out) gradient", "(O, C, *kernel) weight")
    out = _check_geometry(op, g, tuple(shape), tuple(w.shape[2:]), stride, dilation, pad)
    if g.shape[1] != w.shape[0] or tuple(g.shape[2:]) != out:
        raise op_error(op, f"gradient {tuple(g.shape)} does not fit weight {tuple(w.shape)} "
                       f"and input size {tuple(shape)} (output {out})", (g, w))
    return TensorType((g.shape[0], w.shape[1]) + tuple(shape), g.dtype)


def _weight_grad_infer(g, x, kernel, stride, dilation, pad):
    op = "conv_direct_weight_grad"
    _operands(op, g, x, "(N, O, *out) gradient", "(N, C, *spatial) input")
    out = _check_geometry(op, x, tuple(x.shape[2:]), tuple(kernel), stride, dilation, pad)
    if g.shape[0] != x.shape[0] or tuple(g.shape[2:]) != out:
        raise op_error(op, f"gradient {tuple(g.shape)} does not fit input {tuple(x.shape)} "
                       f"with kernel {tuple(kernel)} (output {out})", (g, x))
    return TensorType((g.shape[1], x.shape[1]) + tuple(kernel), g.dtype)


def _geometry(stride, dilation, pad) -> dict:
    return {"stride": tuple(int(s) for s in stride),
            "dilation": tuple(int(d) for d in dilation),
            "pad": tuple((int(lo), int(hi)) for lo, hi in pad)}


def conv_direct(x, w, stride, dilation, pad):
    """The cross-correlation (N, O, *out) of x (N, C, *spatial) with w (O, C, *kernel)."""
    return apply(OPS["conv_direct"], x, w, **_geometry(stride, dilation, pad))


def conv_direct_input_grad(g, w, shape, stride, dilation, pad):
    """conv_direct's gradient (N, C, *shape) with respect to its input, of g (N, O, *out)."""
    return apply(OPS["conv_direct_input_grad"], g, w, shape=tuple(int(s) for s in shape),
                 **_geometry(stride, dilation, pad))


def conv_direct_weight_grad(g, x, kernel, stride, dilation, pad):
    """conv_direct's gradient (O, C, *kernel) with respect to its weight."""
    return apply(OPS["conv_direct_weight_grad"], g, x, kernel=tuple(int(k) for k in kernel),
                 **_geometry(stride, dilation, pad))


register("conv_direct", "indexing", 2, _conv_impl, _conv_infer,
         vjp=(lambda g, out, x, w, stride, dilation, pad:
              conv_direct_input_grad(g, w, x.shape[2:], stride, dilation, pad),
              lambda g, out, x, w, stride, dilation, pad:
              conv_direct_weight_grad(g, x, w.shape[2:], stride, dilation, pad)),
         saves=(0, 1), params=_GEOMETRY, opmath=True,
         doc="Cross-correlation of x (N, C, *spatial) with w (O, C, *kernel): a convolution "
             "computed by loops over the input where it lies (no im2col columns).")
register("conv_direct_input_grad", "indexing", 2, _input_grad_impl, _input_grad_infer,
         vjp=(lambda h, out, g, w, shape, stride, dilation, pad:
              conv_direct(h, w, stride, dilation, pad),
              lambda h, out, g, w, shape, stride, dilation, pad:
              conv_direct_weight_grad(g, h, w.shape[2:], stride, dilation, pad)),
         saves=(0, 1), params=("shape",) + _GEOMETRY, opmath=True,
         doc="conv_direct's input gradient (the transposed convolution of g).")
register("conv_direct_weight_grad", "indexing", 2, _weight_grad_impl, _weight_grad_infer,
         vjp=(lambda h, out, g, x, kernel, stride, dilation, pad:
              conv_direct(x, h, stride, dilation, pad),
              lambda h, out, g, x, kernel, stride, dilation, pad:
              conv_direct_input_grad(g, h, x.shape[2:], stride, dilation, pad)),
         saves=(0, 1), params=("kernel",) + _GEOMETRY, opmath=True,
         doc="conv_direct's weight gradient: sum over the batch and positions of g times "
             "the input's windows.")

__all__ = ["conv_direct", "conv_direct_input_grad", "conv_direct_weight_grad"]
