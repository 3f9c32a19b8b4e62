"""``x[mask] = value`` with a boolean mask and one value, in its functional form.

Eagerly without autograd the write goes straight into x's memory (Tensor.__setitem__).
While tracing, or when autograd records it, it becomes ``where(mask, value, x)``: x takes
that new value (the same numbers as PyTorch's index_put_, and its gradients: none to x where
the mask is set, the masked sum of the cotangent to value). A mask of x's leading dimensions
sets whole rows, as in PyTorch.
"""
from __future__ import annotations

import numpy as np

from . import functions as F


def _bool_mask(t, key, tensor_type):
    """The mask tensor if `key` is one boolean tensor over t's leading dimensions (its shape
    their shape), else None."""
    if not isinstance(key, tensor_type) or key.dtype != np.bool_ or key.ndim == 0 \
            or key.ndim > t.ndim or tuple(key.shape) != tuple(t.shape[:key.ndim]):
        return None
    return key


def masked_value(t, key, value, tensor_type):
    """t's new value for ``t[key] = value`` when `key` is a boolean mask over t's leading
    dimensions and `value` one number (a Python scalar or a one-element tensor); None where
    this form does not apply (the general path decides). `tensor_type`: eager.Tensor (passed
    in: eager.tensor imports this module)."""
    mask = _bool_mask(t, key, tensor_type)
    if mask is None:
        return None
    if isinstance(value, tensor_type):
        if value.numel() != 1:
            return None  # (as many values as the mask sets: their places depend on it)
    elif not isinstance(value, (bool, int, float, np.number)):
        return None
    value = F.as_tensor(value, "__setitem__")
    if value.dtype != t.dtype:
        value = F.cast(value, t.dtype)  # as in PyTorch: the target's dtype wins
    value = F.reshape(value, ())
    if mask.ndim < t.ndim:
        mask = F.reshape(mask, tuple(mask.shape) + (1,) * (t.ndim - mask.ndim))
    return F.where(mask, value, t._snapshot())
