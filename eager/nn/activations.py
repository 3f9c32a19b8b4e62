"""Activation functions (PyTorch's torch.nn.functional names), written with registry
primitives so they trace, differentiate and fuse."""
from __future__ import annotations

import math

from .. import functions as T
from ..errors import op_error

relu = T.relu
sigmoid = T.sigmoid
tanh = T.tanh

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)


def gelu(x, approximate: str = "none"):
    """x * Phi(x); ``approximate='tanh'`` uses 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    if approximate == "tanh":
        inner = T.mul(T.add(x, T.mul(T.mul(T.mul(x, x), x), 0.044715)), _SQRT_2_OVER_PI)
        return T.mul(T.mul(x, 0.5), T.add(T.tanh(inner), 1.0))
    if approximate != "none":
        raise op_error("gelu", f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return T.mul(T.mul(x, 0.5), T.add(T.erf(T.mul(x, _INV_SQRT_2)), 1.0))


def silu(x):
    return T.mul(x, T.sigmoid(x))


def _check_float(x, op):
    if x.dtype.kind != "f":
        raise op_error(op, f"needs a floating-point input, got {x.dtype}", (x,),
                       hint="cast with .float() first", exc=TypeError)


def softmax(x, dim: int = -1, dtype=None):
    """exp(x - max) / sum(exp(x - max)) along `dim` (the max is a constant for autodiff)."""
    if dtype is not None:
        x = T.cast(x, dtype)
    _check_float(x, "softmax")
    shifted = T.sub(x, T.amax(x, dim, keepdim=True).detach())
    e = T.exp(shifted)
    return T.div(e, T.sum(e, dim, keepdim=True))


def log_softmax(x, dim: int = -1, dtype=None):
    """x - max - log(sum(exp(x - max))) along `dim`."""
    if dtype is not None:
        x = T.cast(x, dtype)
    _check_float(x, "log_softmax")
    shifted = T.sub(x, T.amax(x, dim, keepdim=True).detach())
    return T.sub(shifted, T.log(T.sum(T.exp(shifted), dim, keepdim=True)))
