"""Tensor's in-place writes (add_, mul_, copy_, fill_, x[k] = v, ...): eagerly a write
into the tensor's memory; with autograd or while tracing, the functional form (the tensor
takes the new value and its history). `eager.Tensor` inherits them from `InPlaceWrites`."""
from __future__ import annotations

import numpy as np

from . import dtypes
from . import functions as F
from . import dispatch as _dispatch
from .dispatch import _state
from .dispatch import apply as _apply
from .errors import op_error, user_location
from .index_assign import index_put_value as _index_put_value
from .index_assign import put_into as _put_into
from .mask_assign import masked_value as _masked_value
from .ops import OPS as _OPS
from .ops import index_shape as _index_shape


class InPlaceWrites:
    """The in-place methods of eager.Tensor (a base class of it, holding no state)."""

    __slots__ = ()
    def _check_inplace(self, op):
        if _state.grad_enabled and self.requires_grad and self.grad_fn is None:
            raise RuntimeError(
                f"{op}: a leaf Variable that requires grad is being used in an in-place "
                "operation; wrap the update in `with eager.no_grad():` (as optimizers do) "
                f"(at {user_location()})")

    def _inplace(self, op, result: InPlaceWrites) -> InPlaceWrites:
        if result.shape != self.shape:
            raise op_error(op, f"the result shape {result.shape} differs from the tensor's "
                           f"shape {self.shape}; in-place ops cannot broadcast the target",
                           (self, result))
        if result.dtype != self.dtype:
            if dtypes.category(result.dtype) > dtypes.category(self.dtype):
                raise op_error(op, f"result type {result.dtype} can't be cast to the desired "
                               f"output type {self.dtype}", (self, result), exc=TypeError)
            result = F.cast(result, self.dtype)
        if result.requires_grad and (self._is_view or self._has_views):
            raise RuntimeError(
                f"{op}: in-place write with autograd to a tensor that shares storage with a "
                f"{'base tensor it is a view of' if self._is_view else 'view of it'}; the "
                f"other tensor's gradient would miss the update (this is not supported yet). "
                f"Use the out-of-place op (y = y.add(...)) or clone() before viewing "
                f"(at {user_location()})")
        data, new = self._data, result._data
        history = result.grad_fn
        if type(new) is np.ndarray and _dispatch.tracing():
            # A concrete value (a captured tensor, a constant) written while tracing: as a
            # value of the trace, so the write happens at every call, not once now.
            result = F.mul(result, F.const(1, result.dtype)) if result.requires_grad \
                else _apply(_OPS["stop_gradient"], result)
            new = result._data
        if type(data) is np.ndarray and type(new) is np.ndarray:
            if not data.flags.writeable:
                raise RuntimeError(f"{op}: this tensor is a read-only (expanded) view; "
                                   f"clone() it before writing in place (at {user_location()})")
            np.copyto(data, new)
        else:
            if data.__class__ is np.ndarray:
                _dispatch.note_mutated(self)  # a trace captures it before it is rebound
            # traced: rebinding is the functional form of the update; the trace carries it
            # on to the base this tensor is a view of
            _dispatch.write_traced(self, new)
        self._version[0] += 1
        if history is not None:  # (as eagerly: a leaf written in keeps this tensor's history;
            self.grad_fn = result.grad_fn  # the trace's x * 1 of it must not replace it)
            self.requires_grad = True
        return self

    def _snapshot(self) -> InPlaceWrites:
        """This tensor's current value and history, decoupled from later in-place writes."""
        if not (_state.grad_enabled and self.requires_grad):
            return self
        data = self._data
        t = self._wrap(data.copy() if type(data) is np.ndarray else data)
        t.requires_grad = True
        t.grad_fn = self.grad_fn
        return t

    def _fast_inplace(self, ufunc, other, alpha=None) -> bool:
        """The eager no-autograd case of add_/sub_/mul_/div_ (optimizer updates): one
        numpy call writing into this tensor's memory. False when the general path is
        needed (tracing, autograd, dtype or shape changes, read-only memory)."""
        if _dispatch._hooked_threads:
            return False
        data = self._data
        if data.__class__ is not np.ndarray or not data.flags.writeable \
                or not dtypes.is_floating(data.dtype):
            return False
        if isinstance(other, InPlaceWrites):
            if other.requires_grad and _state.grad_enabled:
                return False
            value = other._data
            if value.__class__ is not np.ndarray or value.dtype != data.dtype \
                    or value.ndim > data.ndim:
                return False
        elif other.__class__ is float or other.__class__ is int:
            value = other
        else:
            return False
        if self.requires_grad and _state.grad_enabled:
            return False
        if alpha is not None:
            if alpha.__class__ is not float and alpha.__class__ is not int:
                return False
            value = value * data.dtype.type(alpha) if value.__class__ is np.ndarray \
                else value * alpha
        try:
            ufunc(data, value, out=data)
        except ValueError:  # does not broadcast into self's shape: let the general path say so
            return False
        self._version[0] += 1
        return True

    def add_(self, other, alpha=None) -> InPlaceWrites:
        if self._fast_inplace(np.add, other, alpha):
            return self
        self._check_inplace("add_")
        return self._inplace("add_", F.add(self._snapshot(), other, alpha=alpha))

    def sub_(self, other, alpha=None) -> InPlaceWrites:
        if self._fast_inplace(np.subtract, other, alpha):
            return self
        self._check_inplace("sub_")
        return self._inplace("sub_", F.sub(self._snapshot(), other, alpha=alpha))

    def mul_(self, other) -> InPlaceWrites:
        if self._fast_inplace(np.multiply, other):
            return self
        self._check_inplace("mul_")
        return self._inplace("mul_", F.mul(self._snapshot(), other))

    def div_(self, other) -> InPlaceWrites:
        if self._fast_inplace(np.true_divide, other):
            return self
        self._check_inplace("div_")
        return self._inplace("div_", F.div(self._snapshot(), other))

    def clamp_(self, min=None, max=None) -> InPlaceWrites:  # noqa: A002
        self._check_inplace("clamp_")
        return self._inplace("clamp_", F.clamp(self._snapshot(), min, max))

    def copy_(self, src) -> InPlaceWrites:
        self._check_inplace("copy_")
        src = F.as_tensor(src, "copy_")
        if not _state.grad_enabled and src.requires_grad:
            # Under no_grad the copy has no history: without this, copying a tensor that
            # requires grad (p2.copy_(p1)) would hand its grad_fn/requires_grad to self.
            src = src.detach()
        if src.dtype != self.dtype:
            src = F.cast(src, self.dtype)
        return self._inplace("copy_", F.expand(src, self.shape))

    def fill_(self, value) -> InPlaceWrites:
        self._check_inplace("fill_")
        if isinstance(value, InPlaceWrites):  # as PyTorch: a 0-d tensor, whose gradient is the sum
            if value.ndim != 0:
                raise op_error("fill_", f"takes a number or a 0-dimensional tensor, got a "
                               f"tensor of shape {value.shape}", (self, value),
                               hint="use copy_(value) to write a tensor of values",
                               exc=RuntimeError)
            fill = value if value.dtype == self.dtype else F.cast(value, self.dtype)
        else:
            fill = F.const(value, self.dtype)
        result = F.expand(fill, self.shape)
        if _state.grad_enabled and self.requires_grad:  # as PyTorch: old's gradient is 0
            # where(False, old, new) is new exactly (old * 0 + new: NaN where old is inf)
            result = F.where(F.const(False, dtypes.bool_), self._snapshot(), result)
        return self._inplace("fill_", result)

    def zero_(self) -> InPlaceWrites:
        return self.fill_(0)

    def index_put_(self, indices, values, accumulate=False) -> InPlaceWrites:
        """PyTorch's index_put_: ``self[indices] = values``, or with `accumulate` the values
        added at the indices (repeated ones add up); `indices` a tuple of index tensors."""
        key = _index_key(indices)
        data = self._data
        if type(data) is np.ndarray and not _dispatch.tracing() and not (
                _state.grad_enabled and (self.requires_grad or getattr(values, "requires_grad",
                                                                         False))):
            if not data.flags.writeable:
                raise RuntimeError("index_put_: this tensor is a read-only (expanded) view; "
                                   f"clone() it before writing in place (at {user_location()})")
            _put_into(self, key, values, accumulate, InPlaceWrites)
            self._version[0] += 1
            return self
        self._check_inplace("index_put_")
        return self._inplace("index_put_",
                             _index_put_value(self, key, values, accumulate, InPlaceWrites))

    def index_put(self, indices, values, accumulate=False) -> InPlaceWrites:
        """Out-of-place index_put_: a new tensor, self unchanged."""
        return _index_put_value(self, _index_key(indices), values, accumulate, InPlaceWrites)

    def t_(self) -> InPlaceWrites:
        """Transpose this (at most 2-d) tensor in place: it takes the shape of t()."""
        if self.ndim > 2:
            raise RuntimeError(f"t_() expects a tensor with <= 2 dimensions, but self is "
                               f"{self.ndim}D; use transpose_(0, 1) or x = x.mT "
                               f"(at {user_location()})")
        if self.ndim < 2:
            return self
        self._check_inplace("t_")
        data = self._data
        if type(data) is np.ndarray and not _dispatch.tracing() and not self.requires_grad:
            self._data = data.T  # (the same memory, as PyTorch's t_ of a view)
            self._version[0] += 1
            return self
        if self._is_view or self._has_views:
            raise RuntimeError(f"t_: this tensor shares storage with "
                               f"{'its base' if self._is_view else 'a view of it'}, whose "
                               f"shape would not follow; use x = x.t() "
                               f"(at {user_location()})")
        if type(self._data) is np.ndarray and _dispatch.tracing():
            raise RuntimeError(f"t_ on a tensor the traced function did not make (an "
                               f"argument read as a constant, a captured tensor) is not "
                               f"supported; use x = x.t() (at {user_location()})")
        result = F.t(self._snapshot())
        # (a recorded value is rebound: the trace sees an argument's new value as its
        # update, as other in-place writes)
        self._data = result._data
        self._version[0] += 1
        if result.grad_fn is not None:
            self.grad_fn = result.grad_fn
        return self

    def __setitem__(self, key, value):
        """``x[key] = value``: eagerly a write into x's memory; while tracing, or with
        autograd, the functional form: x takes ``slice_update(x, value, index)`` (an index
        tensor in the key: ``index_put``, eager/index_assign.py)."""
        data = self._data
        if type(data) is np.ndarray and not _dispatch.tracing() and not (
                _state.grad_enabled and (self.requires_grad or getattr(value, "requires_grad",
                                                                        False))):
            if isinstance(value, InPlaceWrites):
                value = value._data
            items = key if isinstance(key, tuple) else (key,)
            # Decide by the key, not by a probe's memory: an advanced index in a middle
            # position comes back as a *view* of a gathered copy, and writing into it would
            # be lost.
            if any(F._is_advanced(k) for k in items):
                # (numpy's own write, on the key index_put's row writes with: eager.index_put)
                _put_into(self, key, value, False, InPlaceWrites)
            else:
                probe = F.getitem(self._wrap(data), key)  # validates the key, the target
                if not probe._data.flags.writeable:
                    raise RuntimeError("item assignment: this tensor is a read-only "
                                       "(expanded) view; clone() it before writing in place "
                                       f"(at {user_location()})")
                probe._data[...] = value
            self._version[0] += 1
            return
        new = _masked_value(self, key, value, InPlaceWrites)  # (x[mask] = v: where(mask, v, x))
        if new is not None:
            self._check_inplace("__setitem__")
            return self._inplace("__setitem__", new)
        items = key if isinstance(key, tuple) else (key,)
        if any(F._is_advanced(k) for k in items):
            # (functional: x takes index_put(x, v); eager.index_put)
            self._check_inplace("__setitem__")
            return self._inplace("__setitem__",
                                 _index_put_value(self, key, value, False, InPlaceWrites))
        index, _advanced = F.normalize_key(self, key)
        self._check_inplace("__setitem__")
        value = F.as_tensor(value, "__setitem__")
        if value.dtype != self.dtype:
            value = F.cast(value, self.dtype)  # as in PyTorch: the target's dtype wins
        shape = _index_shape(self.shape, index)
        while value.ndim > len(shape) and value.shape[0] == 1:
            value = F.reshape(value, value.shape[1:])
        value = F.expand(value, shape)
        return self._inplace("__setitem__", F.slice_update(self._snapshot(), value, index))


def _index_key(indices) -> tuple:
    if not isinstance(indices, (tuple, list)) or not indices:
        raise TypeError(f"index_put_: indices must be a non-empty tuple of index tensors, got "
                        f"{type(indices).__name__} (at {user_location()})")
    if not all(isinstance(i, InPlaceWrites) for i in indices):
        raise TypeError(f"index_put_: indices must be tensors (at {user_location()})")
    return tuple(indices)
