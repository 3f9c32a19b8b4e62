"""The Tensor methods of the indexing, shaping, scan and sampling ops (issue 16 item 4),
attached in one block (the functions are in eager.indexing, eager.shaping, eager.scan and
eager.sampling)."""
from __future__ import annotations

from . import indexing, sampling, scan, shaping
from .device import check_device
from .functions import full, ones, tensor, zeros
from .tensor import Tensor, _method


def _inplace(fn, name):
    def method(self, *args, **kwargs):
        return self._inplace(name, fn(self, *args, **kwargs))
    method.__name__ = name
    method.__doc__ = f"In-place {fn.__name__}."
    return method


def _new(make):
    def method(self, *size, dtype=None, device=None, requires_grad=False, **kwargs):
        if device is not None:
            check_device(device, make.__name__)
        if len(size) == 1 and isinstance(size[0], (tuple, list)):
            size = tuple(size[0])
        return make(size, dtype=dtype or self.dtype, requires_grad=requires_grad, **kwargs)
    return method


def _new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False):
    if device is not None:
        check_device(device, "new_full")
    return full(tuple(size), fill_value, dtype=dtype or self.dtype, requires_grad=requires_grad)


def _new_tensor(self, data, *, dtype=None, device=None, requires_grad=False):
    if device is not None:
        check_device(device, "new_tensor")
    return tensor(data, dtype=dtype or self.dtype, requires_grad=requires_grad)


def _scatter_method(self, dim, index, src=None, *, value=None, reduce=None):
    return indexing.scatter(self, dim, index, src, value=value, reduce=reduce)


_FUNCTIONS = {
    indexing: ("gather", "take_along_dim", "index_select", "scatter_add", "scatter_reduce",
               "masked_fill", "masked_select", "nonzero", "index_add", "index_copy"),
    shaping: ("select", "tril", "triu", "split", "chunk", "unbind", "narrow", "unflatten", "unfold",
              "repeat", "tile", "repeat_interleave", "flip", "roll", "diag", "diagonal",
              "mm", "bmm", "mv", "movedim"),
    scan: ("cumsum", "cumprod", "cummax", "cummin", "logcumsumexp", "sort", "argsort",
           "topk"),
    sampling: ("multinomial",),
}


def attach() -> None:
    for module, names in _FUNCTIONS.items():
        for name in names:
            setattr(Tensor, name, _method(getattr(module, name)))
    Tensor.scatter = _scatter_method
    for name, fn in (("masked_fill_", indexing.masked_fill), ("scatter_", _scatter_method),
                     ("scatter_add_", indexing.scatter_add),
                     ("scatter_reduce_", indexing.scatter_reduce),
                     ("tril_", shaping.tril), ("triu_", shaping.triu),
                     ("index_add_", indexing.index_add), ("index_copy_", indexing.index_copy)):
        setattr(Tensor, name, _inplace(fn, name))
    Tensor.new_zeros = _new(zeros)
    Tensor.new_ones = _new(ones)
    Tensor.new_empty = _new(zeros)
    Tensor.new_full = _new_full
    Tensor.new_tensor = _new_tensor
    Tensor.moveaxis = Tensor.movedim
    # Augmented assignment writes in place, as PyTorch's does: `p -= lr * p.grad` under
    # no_grad() updates the parameter (it rebound the name to a new tensor before).
    Tensor.__iadd__, Tensor.__isub__ = Tensor.add_, Tensor.sub_
    Tensor.__imul__, Tensor.__itruediv__ = Tensor.mul_, Tensor.div_
    Tensor.bernoulli = _method(sampling.bernoulli)
    for name in ("uniform_", "normal_", "bernoulli_"):  # (they write in place themselves)
        setattr(Tensor, name, _method(getattr(sampling, name)))
