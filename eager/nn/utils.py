"""Training utilities with PyTorch's names: gradient clipping and flattening parameters.

`clip_grad_norm_` never reads a value back to Python (no ``.item()``): the total norm stays a
tensor and the gradients are scaled by ``clamp(max_norm / (norm + 1e-6), max=1)``, as in
PyTorch, so it traces into a compiled training step.
"""
from __future__ import annotations

import math
import sys

import numpy as np

from .. import functions as T
from ..autograd import no_grad
from ..dispatch import tracing
from ..tensor import Tensor


def _tensors(parameters) -> list:
    if isinstance(parameters, Tensor):
        return [parameters]
    return list(parameters)


def _vector_norm(x: Tensor, p: float) -> Tensor:
    """The p-norm of all elements of `x`, in x's dtype (0-d)."""
    if p == 2.0:
        return T.sqrt(T.sum(x * x))
    a = T.abs(x)
    if p == math.inf:
        return T.amax(a)
    if p == -math.inf:
        return T.amin(a)
    if p == 0.0:
        return T.sum(T.cast(T.ne(x, 0), x.dtype))
    if p == 1.0:
        return T.sum(a)
    return T.pow(T.sum(T.pow(a, p)), 1.0 / p)


@no_grad()
def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                    foreach=None) -> Tensor:
    """Scale the gradients of `parameters` in place so that their total `norm_type`-norm is at
    most `max_norm`; returns the total norm (a 0-d tensor) from before clipping.

    >>> norm = clip_grad_norm_(model.parameters(), max_norm=1.0)

    `foreach` is accepted and ignored. With `error_if_nonfinite`, a NaN or infinite total norm
    raises RuntimeError and leaves the gradients as they were (in a compiled step too: the
    check runs when the step does).
    """
    grads = [p.grad for p in _tensors(parameters) if p.grad is not None]
    max_norm, norm_type = float(max_norm), float(norm_type)
    if not grads:
        return T.const(0.0, np.float32)
    norms = [_vector_norm(g, norm_type) for g in grads]
    if len({n.dtype for n in norms}) > 1:  # (mixed precisions: PyTorch promotes the stack)
        wide = np.result_type(*(n.dtype for n in norms))
        norms = [T.cast(n, wide) for n in norms]
    total = _vector_norm(T.stack(norms), norm_type)
    if error_if_nonfinite:
        message = (f"The total norm of order {norm_type} for gradients from `parameters` is "
                   "non-finite, so it cannot be clipped. To disable this error and scale the "
                   "gradients by the non-finite norm anyway, set `error_if_nonfinite=False`")
        if tracing():  # checked when the compiled step runs, before any gradient is scaled
            total = T.check_finite(total, message)
        elif not bool(T.isfinite(total)):
            raise RuntimeError(message)
    coef = T.clamp(max_norm / (total + 1e-6), None, 1.0)
    for g in grads:
        g.mul_(T.cast(coef, g.dtype) if coef.dtype != g.dtype else coef)
    return total


@no_grad()
def clip_grad_value_(parameters, clip_value, foreach=None) -> None:
    """Clamp every gradient of `parameters` into [-clip_value, clip_value], in place."""
    clip_value = float(clip_value)
    for p in _tensors(parameters):
        if p.grad is not None:
            p.grad.clamp_(-clip_value, clip_value)


def parameters_to_vector(parameters) -> Tensor:
    """All of `parameters`, flattened and concatenated into one 1-d tensor (a copy)."""
    return T.cat([T.reshape(p, (-1,)) for p in _tensors(parameters)])


def vector_to_parameters(vec: Tensor, parameters) -> None:
    """Copy consecutive slices of the 1-d `vec` into `parameters` (the inverse of
    parameters_to_vector). PyTorch makes each parameter's ``.data`` a view of `vec`; here
    each parameter keeps its own storage and takes the values."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected a Tensor, but got {type(vec).__name__}")
    params = _tensors(parameters)
    total = sum(p.numel() for p in params)
    if vec.ndim != 1 or vec.shape[0] != total:
        raise ValueError(f"vector_to_parameters: vec has shape {tuple(vec.shape)}, the "
                         f"parameters have {total} elements in all")
    start = 0
    with no_grad():
        for p in params:
            n = p.numel()
            p.copy_(T.reshape(vec[start:start + n], p.shape))
            start += n


# eager.nn.utils.rnn, importable as a module (`from eager.nn.utils.rnn import pad_sequence`)
# as torch.nn.utils.rnn is, while this file stays one module
from . import rnn_utils as rnn  # noqa: E402

sys.modules[__name__ + ".rnn"] = rnn

__all__ = ["clip_grad_norm_", "clip_grad_value_", "parameters_to_vector", "rnn",
           "vector_to_parameters"]
