"""Who else holds a tensor: when a compiled call may reuse memory eager would not.

Eager's backward gives a parameter a new `.grad` tensor at every step (`zero_grad()` drops
the old one; accumulation makes `old + g`), so a gradient a user kept from an earlier step
never changes. A compiled step writes gradients straight into the old `.grad` array for
speed; that is only unobservable when nothing but the parameter's `.grad` slot refers to
the old tensor and its array (no kept tensor, no `numpy()` array, no view). The rule is
the one the output pool uses (codegen.outpool._recycled): reference counts, measured here
rather than assumed, since interpreters differ in the references a call holds.
"""
from __future__ import annotations

import sys

import numpy as np

from eager.tensor import Tensor

_getrefcount = sys.getrefcount


def _counts(g):
    return _getrefcount(g), _getrefcount(g._data)


def _calibrate():
    # The same shape of call as the real ones: the owner's .grad slot, the caller's local
    # `g`, and the callee's argument.
    owner = Tensor._wrap(np.zeros(1, np.float32))
    owner.grad = Tensor._wrap(np.zeros(1, np.float32))
    g = owner._grad
    return _counts(g)


_FREE_TENSOR, _FREE_ARRAY = _calibrate()


def unshared(g, held_array: int = 0, held_tensor: int = 0) -> bool:
    """Whether nothing refers to the tensor `g` (its owner's `.grad`, which the caller holds
    in one local variable) or to its array, beyond `held_array` / `held_tensor` references
    the caller knows of (its own locals and caches). A view of the array counts: it
    refers to the array as its base."""
    return (_getrefcount(g) <= _FREE_TENSOR + held_tensor
            and _getrefcount(g._data) <= _FREE_ARRAY + held_array)


def assign_grad(t: Tensor, value):
    """Set `t.grad` to the array `value` the way eager's backward does: a new tensor of its
    own, unless the program wrote `value` into the current `.grad`'s array, which the
    caller passed it only after checking nothing else can see that array."""
    if value is None:
        t.grad = None
        return
    g = t._grad
    if g is not None and g._data is value:  # written in place, unobservably
        return
    # A new array: `value` may be a view of an input or a buffer the program returns again.
    t.grad = Tensor._wrap(np.array(value))
