"""Activation functions (PyTorch's torch.nn.functional names), written with registry
primitives so they trace, differentiate and fuse."""
from __future__ import annotations

import math
import warnings

from .. import functions as T
from ..errors import op_error
from ..functions.reductions import _dim_aliases
from ..dtypes import is_floating
from ..functions.elementwise import _half_in_float32

sigmoid = T.sigmoid
tanh = T.tanh

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)


@_half_in_float32
def gelu(x, approximate: str = "none"):
    """x * Phi(x); ``approximate='tanh'`` uses 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    if approximate == "tanh":
        inner = T.mul(T.add(x, T.mul(T.mul(T.mul(x, x), x), 0.044715)), _SQRT_2_OVER_PI)
        return T.mul(T.mul(x, 0.5), T.add(T.tanh(inner), 1.0))
    if approximate != "none":
        raise op_error("gelu", f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return T.mul(T.mul(x, 0.5), T.add(T.erf(T.mul(x, _INV_SQRT_2)), 1.0))


@_half_in_float32
def silu(x):
    return T.mul(x, T.sigmoid(x))


def _check_float(x, op):
    if not is_floating(x.dtype):
        raise op_error(op, f"needs a floating-point input, got {x.dtype}", (x,),
                       hint="cast with .float() first", exc=TypeError)


def _shifted(x, dim):
    """x - max(x) along `dim` (the max a constant for autodiff); x itself when that dim is
    empty: there is no max, and the result is empty as in PyTorch."""
    if isinstance(dim, int) and -x.ndim <= dim < x.ndim and x.shape[dim] == 0:
        return x  # (a bad dim is amax's error, naming it)
    return T.sub(x, T.amax(x, dim, keepdim=True).detach())


@_dim_aliases  # (torch.softmax and Tensor.softmax take axis= too)
@_half_in_float32
def softmax(x, dim: int = -1, dtype=None):
    """exp(x - max) / sum(exp(x - max)) along `dim` (the max is a constant for autodiff)."""
    if dtype is not None:
        x = T.cast(x, dtype)
    _check_float(x, "softmax")
    e = T.exp(_shifted(x, dim))
    return T.div(e, T.sum(e, dim, keepdim=True))


@_dim_aliases
@_half_in_float32
def log_softmax(x, dim: int = -1, dtype=None):
    """x - max - log(sum(exp(x - max))) along `dim`."""
    if dtype is not None:
        x = T.cast(x, dtype)
    _check_float(x, "log_softmax")
    shifted = _shifted(x, dim)
    return T.sub(shifted, T.log(T.sum(T.exp(shifted), dim, keepdim=True)))


# --------------------------------------------------------------------------------------
# issue 16 item 6: PyTorch's other activations. Each is written so its gradient at a kink
# is PyTorch's (a `where` picks the branch PyTorch's backward picks) and so no branch that
# `where` discards can overflow: an inf in the unused branch would turn its zero gradient
# into NaN (0 * inf), so the input of exp is made safe first ("double where").

def _inplace(x, inplace: bool, op: str, fn):
    """fn(x), written into `x` when inplace (PyTorch's inplace=True): fn reads a snapshot
    of x, so what autograd saved of x is not the value overwritten."""
    if not inplace:
        return fn(x)
    x._check_inplace(op)
    return x._inplace(op, fn(x._snapshot()))


def _softplus(z):
    """log(1 + exp(z)) for any z: max(z, 0) + log1p(exp(-|z|)), with the maximum and the
    absolute value as `where`s so the gradient at 0 is sigmoid(0) = 1/2 (relu and abs
    would each take the subgradient 0 there)."""
    pos = T.gt(z, 0.0)
    return T.add(T.where(pos, z, 0.0), T.log1p(T.exp(T.where(pos, T.neg(z), z))))


def _expm1_nonpositive(x):
    """expm1(min(x, 0)) with the gradient of expm1 at x <= 0 (the branch ELU-like functions
    take there) and no overflow for large x."""
    return T.expm1(T.where(T.gt(x, 0.0), 0.0, x))


def relu(x, inplace: bool = False):
    """max(x, 0) (the registry op; its gradient at 0 is 0, as PyTorch's)."""
    return _inplace(x, inplace, "relu_", T.relu)


def leaky_relu(x, negative_slope: float = 0.01, inplace: bool = False):
    """x where x > 0, else negative_slope * x (the gradient at 0 is negative_slope)."""
    _check_float(x, "leaky_relu")
    return _inplace(x, inplace, "leaky_relu_",
                    lambda v: T.where(T.gt(v, 0.0), v, T.mul(v, negative_slope)))


def elu(x, alpha: float = 1.0, inplace: bool = False):
    """x where x > 0, else alpha * (exp(x) - 1)."""
    _check_float(x, "elu")
    return _inplace(x, inplace, "elu_", lambda v: T.where(
        T.gt(v, 0.0), v, T.mul(_expm1_nonpositive(v), alpha)))


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(x, inplace: bool = False):
    """scale * elu(x, alpha) with the self-normalizing constants."""
    _check_float(x, "selu")
    return _inplace(x, inplace, "selu_", lambda v: T.mul(T.where(
        T.gt(v, 0.0), v, T.mul(_expm1_nonpositive(v), _SELU_ALPHA)), _SELU_SCALE))


def celu(x, alpha: float = 1.0, inplace: bool = False):
    """x where x > 0, else alpha * (exp(x / alpha) - 1)."""
    _check_float(x, "celu")
    if alpha == 0:
        raise op_error("celu", "alpha must not be 0 (ZeroDivisionError in PyTorch)", (x,))
    return _inplace(x, inplace, "celu_", lambda v: T.where(
        T.gt(v, 0.0), v, T.mul(_expm1_nonpositive(T.div(v, alpha)), alpha)))


def hardtanh(x, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
    """x clamped into [min_val, max_val]; as PyTorch, the gradient is 1 only strictly inside
    (0 at the bounds themselves) and NaN stays NaN."""
    _check_float(x, "hardtanh")
    if min_val > max_val:
        raise op_error("hardtanh", f"min_val {min_val} must not exceed max_val {max_val}", (x,))
    return _inplace(x, inplace, "hardtanh_", lambda v: T.where(
        T.le(v, min_val), T.const(min_val, v.dtype),
        T.where(T.ge(v, max_val), T.const(max_val, v.dtype), v)))


def relu6(x, inplace: bool = False):
    """min(max(x, 0), 6), as PyTorch: hardtanh(x, 0, 6) (gradient 0 at 0 and at 6)."""
    return hardtanh(x, 0.0, 6.0, inplace)


def hardsigmoid(x, inplace: bool = False):
    """relu6(x + 3) / 6; the gradient is 1/6 strictly inside (-3, 3), else 0."""
    _check_float(x, "hardsigmoid")
    return _inplace(x, inplace, "hardsigmoid_", lambda v: T.where(
        T.le(v, -3.0), 0.0, T.where(T.ge(v, 3.0), 1.0, T.div(T.add(v, 3.0), 6.0))))


def hardswish(x, inplace: bool = False):
    """x * relu6(x + 3) / 6; the gradient is PyTorch's: 0 below -3, x/3 + 1/2 on [-3, 3]
    (so -1/2 at -3 and 3/2 at 3), 1 above."""
    _check_float(x, "hardswish")
    return _inplace(x, inplace, "hardswish_", lambda v: T.where(
        T.lt(v, -3.0), 0.0, T.where(T.le(v, 3.0), T.div(T.mul(v, T.add(v, 3.0)), 6.0), v)))


def softplus(x, beta: float = 1.0, threshold: float = 20.0):
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (as PyTorch)."""
    _check_float(x, "softplus")
    bx = T.mul(x, beta)
    linear = T.gt(bx, threshold)
    soft = T.div(T.log1p(T.exp(T.where(linear, 0.0, bx))), beta)
    return T.where(linear, x, soft)


def softsign(x):
    """x / (1 + |x|)."""
    _check_float(x, "softsign")
    return T.div(x, T.add(T.abs(x), 1.0))


def mish(x, inplace: bool = False):
    """x * tanh(softplus(x))."""
    _check_float(x, "mish")
    return _inplace(x, inplace, "mish_", lambda v: T.mul(v, T.tanh(_softplus(v))))


def logsigmoid(x):
    """log(sigmoid(x)) = -softplus(-x), without overflow or log(0)."""
    _check_float(x, "logsigmoid")
    return T.neg(_softplus(T.neg(x)))


def glu(x, dim: int = -1):
    """a * sigmoid(b), where a and b are the two halves of x along `dim`."""
    _check_float(x, "glu")
    if x.ndim == 0:
        raise op_error("glu", "does not support scalars because halving size must be even",
                       (x,))
    axis = dim + x.ndim if dim < 0 else dim
    if not 0 <= axis < x.ndim:
        raise op_error("glu", f"dim {dim} is out of range for a {x.ndim}-d input", (x,),
                       exc=IndexError)
    size = x.shape[axis]
    if size % 2:
        raise op_error("glu", f"halving dimension must be even, but dimension {axis} is size "
                       f"{size}", (x,))
    half = size // 2
    lead = (slice(None),) * axis
    a = T.getitem(x, lead + (slice(0, half),))
    b = T.getitem(x, lead + (slice(half, size),))
    return T.mul(a, T.sigmoid(b))


def normalize(x, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out=None):
    """x / max(||x||_p along dim, eps). The norm of an all-zero slice has gradient 0 (not
    NaN), as in PyTorch."""
    if out is not None:
        raise op_error("normalize", "out= is not supported", (x,), hint="assign the result")
    _check_float(x, "normalize")
    if p == math.inf:
        norm = T.amax(T.abs(x), dim, keepdim=True)
    elif p == 1:
        norm = T.sum(T.abs(x), dim, keepdim=True)
    else:
        # sum |x|^p, and its p-th root taken only where it is positive: the root's
        # gradient at 0 is infinite and would make the (masked) zero gradient NaN
        powered = T.mul(x, x) if p == 2 else T.pow(T.abs(x), float(p))
        s = T.sum(powered, dim, keepdim=True)
        pos = T.gt(s, 0.0)
        safe = T.where(pos, s, 1.0)
        root = T.sqrt(safe) if p == 2 else T.pow(safe, 1.0 / p)
        norm = T.where(pos, root, 0.0)
    return T.div(x, T.where(T.lt(norm, eps), T.const(eps, norm.dtype), norm))


def _implicit_softmax_dim(op, ndim):
    # PyTorch's legacy rule for dim=None (it warns, and so do we)
    warnings.warn(f"Implicit dimension choice for {op} has been deprecated. Change the call "
                  f"to include dim=X as an argument.", UserWarning, stacklevel=3)
    return 0 if ndim in (0, 1, 3) else 1


def softmin(x, dim=None, _stacklevel: int = 3, dtype=None):
    """softmax(-x) along `dim`."""
    if dim is None:
        dim = _implicit_softmax_dim("softmin", x.ndim)
    if dtype is not None:
        x = T.cast(x, dtype)
    return softmax(T.neg(x), dim)
