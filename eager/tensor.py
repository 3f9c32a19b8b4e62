"""eager.Tensor: a numpy array (or, while tracing, a traced value) plus autograd state."""
from __future__ import annotations

import numpy as np

from . import device as _device
from . import dtype_ops as _dtype_ops
from . import dtypes
from . import functions as F
from . import hooks as _hooks
from . import dispatch as _dispatch
from .dispatch import apply as _apply
from .ops import OPS as _OPS

_ADD, _SUB, _MUL = _OPS["add"], _OPS["sub"], _OPS["mul"]
from .errors import user_location
from .tensor_inplace import InPlaceWrites


class Tensor(InPlaceWrites):
    """An n-dimensional array with define-by-run autograd.

    >>> x = tensor([1.0, 2.0], requires_grad=True)
    >>> (x * x).sum().backward()
    >>> x.grad
    tensor([2., 4.])
    """

    # Rarely-set attributes live in the instance __dict__ (created on first write) with
    # class-level defaults, so making a tensor sets only three slots.
    __slots__ = ("_data", "grad_fn", "_version", "__dict__", "__weakref__")
    requires_grad = False
    _grad = None
    _retains_grad = False
    _grad_hooks = ()  # a leaf's register_hook hooks, ((key, fn), ...) (eager.hooks)

    # .grad is a property only so a trace can tell whether a function *read* a tensor's
    # incoming .grad (its result then depends on it) or overwrote it first (zero_grad).
    @property
    def grad(self):
        if _dispatch._hooked_threads:
            _dispatch.note_grad(self, False)
        return self._grad

    @grad.setter
    def grad(self, value):
        if _dispatch._hooked_threads:
            _dispatch.note_grad(self, True)
        self._grad = value
    _is_view = False    # made by a view op, shares its input's storage (set by dispatch.apply)
    _has_views = False  # some view op output shares this tensor's storage
    _view_of = None  # while tracing, a view's link to its base (tracer.views.ViewLink)
    __array_priority__ = 1000  # numpy scalars and arrays defer to Tensor's operators

    def __init__(self, data=None, *, dtype=None, requires_grad=False):
        if data is None:
            data = np.zeros((0,), np.float32)
        t = F.tensor(data, dtype=dtype)
        self._data = t._data
        self.requires_grad = False
        self.grad = None
        self.grad_fn = None
        self._version = [0]
        self._retains_grad = False
        if requires_grad:
            self.requires_grad_(True)

    @classmethod
    def _wrap(cls, data):
        t = object.__new__(cls)
        t._data = data
        t.grad_fn = None
        t._version = [0]
        return t

    # ---------------------------------------------------------------- attributes
    @property
    def shape(self) -> tuple:
        return tuple(self._data.shape)

    def size(self, dim=None):
        if dim is None:
            return self.shape
        return self.shape[F._norm_dim(dim, self.ndim, "size")]

    @property
    def dtype(self) -> np.dtype:
        return self._data.dtype

    @property
    def ndim(self) -> int:
        return len(self._data.shape)

    def dim(self) -> int:
        return self.ndim

    def numel(self) -> int:
        n = 1
        for s in self._data.shape:
            n *= s
        return n

    def __len__(self) -> int:
        if not self.ndim:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def data(self) -> "Tensor":
        """A tensor sharing storage with this one, outside autograd (like PyTorch's .data)."""
        if self._data.__class__ is not np.ndarray:
            # traced: a view for the trace, so that in-place writes to it reach this tensor
            return _apply(_OPS["stop_gradient"], self)
        t = Tensor._wrap(self._data)
        t._version = self._version
        return t

    @data.setter
    def data(self, value: "Tensor"):
        self._data = value._data
        if self._view_of is not None:
            self._view_of = None  # (traced) its own value now, no longer derived from a base

    @property
    def T(self) -> "Tensor":  # noqa: N802
        return F.permute(self, tuple(reversed(range(self.ndim))))

    @property
    def mT(self) -> "Tensor":  # noqa: N802
        return F.transpose(self, -2, -1)

    # ---------------------------------------------------------------- conversion
    def numpy(self) -> np.ndarray:
        """The underlying array (shared, not copied). Fails on tensors that require grad."""
        data = self._data
        if type(data) is not np.ndarray:
            return data.to_numpy()
        if self.requires_grad:
            raise RuntimeError("Can't call numpy() on a Tensor that requires grad; "
                               "use tensor.detach().numpy() instead")
        if _dispatch._hooked_threads:
            _dispatch.note_value_read(self, ".numpy()")
        return data

    def __array__(self, dtype=None, copy=None):
        # numpy's protocol: copy=True must hand back memory of its own (np.array(t, copy=True)
        # writes must not reach the tensor); copy=None shares where it can.
        data = self._data
        if type(data) is not np.ndarray:
            data = data.to_numpy()
        elif _dispatch._hooked_threads:
            _dispatch.note_value_read(self, "np.asarray()")
        if dtype is not None and np.dtype(dtype) != data.dtype:
            return data.astype(dtype)
        return data.copy() if copy else data

    def item(self):
        data = self._data
        if type(data) is not np.ndarray:
            return data.item()
        if data.size != 1:
            raise ValueError(f"item(): a Tensor with {data.size} elements cannot be converted "
                             f"to a Python scalar; index it first (at {user_location()})")
        if _dispatch._hooked_threads:
            _dispatch.note_value_read(self, ".item()")
        return data.reshape(()).item()

    def tolist(self):
        data = self._data
        if type(data) is not np.ndarray:
            return data.tolist()
        if _dispatch._hooked_threads:
            _dispatch.note_value_read(self, ".tolist()")
        return data.tolist()

    def __bool__(self) -> bool:
        data = self._data
        if type(data) is not np.ndarray:
            return data.__bool__()
        if data.size != 1:
            raise RuntimeError(f"Boolean value of a Tensor with {data.size} elements is "
                               "ambiguous; use .any() or .all()")
        if _dispatch._hooked_threads:
            _dispatch.note_value_read(self, "bool()")
        return bool(data.reshape(()))

    def __float__(self) -> float:
        data = self._data
        if type(data) is not np.ndarray:
            return data.__float__()
        return float(self.item())

    def __int__(self) -> int:
        data = self._data
        if type(data) is not np.ndarray:
            return data.__int__()
        return int(self.item())

    def __index__(self) -> int:
        if self.dtype.kind not in "iu":
            raise TypeError("only integer tensors of a single element can be used as an index")
        return int(self)

    def __hash__(self):
        return id(self)

    def __iter__(self):
        if not self.ndim:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    def __repr__(self) -> str:
        data = self._data
        if type(data) is not np.ndarray:
            body = repr(data)
        else:
            # (numpy formats ml_dtypes' bfloat16 as a generic object: its float32 values)
            shown = data.astype(dtypes.float32) if data.dtype == dtypes.bfloat16 else data
            body = np.array2string(shown, separator=", ", precision=4, prefix="tensor(")
        extras = []
        if type(data) is np.ndarray and data.dtype not in (dtypes.float32, dtypes.int64,
                                                           dtypes.bool_):
            extras.append(f"dtype=eager.{data.dtype}")
        if self.grad_fn is not None:
            extras.append(f"grad_fn=<{self.grad_fn.name()}>")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        return "tensor(" + body + "".join(", " + e for e in extras) + ")"

    # ---------------------------------------------------------------- autograd
    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        if requires_grad and not dtypes.is_floating(self.dtype):
            raise RuntimeError(f"only floating point tensors can require gradients, got "
                               f"{self.dtype}; cast with .float() first "
                               f"(at {user_location()})")
        if not requires_grad and self.grad_fn is not None:
            raise RuntimeError("requires_grad_(False) is only allowed on leaf tensors; "
                               f"use .detach() for a non-leaf (at {user_location()})")
        self.requires_grad = bool(requires_grad)
        return self

    def detach(self) -> "Tensor":
        data = self._data
        if data.__class__ is not np.ndarray:
            # Traced: record the cut, so a graph replayed for its gradients (tracer's IR
            # autodiff) still stops the gradient here.
            return _apply(_OPS["stop_gradient"], self)
        t = Tensor._wrap(data)
        t._version = self._version
        return t

    def detach_(self) -> "Tensor":
        if self._data.__class__ is not np.ndarray and self.requires_grad:
            # Traced: cut the value's history in the trace as well, or a backward of the
            # compiled call (made from the trace's equations) would still reach through.
            if self._view_of is not None:
                raise RuntimeError(f"detach_() of a view inside a compiled function is not "
                                   f"supported; use y = y.detach() (at {user_location()})")
            self._data = _apply(_OPS["stop_gradient"], self)._data
        self.grad_fn = None
        self.requires_grad = False
        return self

    def retain_grad(self) -> None:
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on a Tensor that has requires_grad=False")
        if self.grad_fn is not None:
            self._retains_grad = True
            self.grad_fn.retain(self)

    @property
    def retains_grad(self) -> bool:
        return self._retains_grad

    def register_hook(self, hook):
        """Run ``hook(grad)`` on this tensor's gradient at each backward; a returned tensor
        replaces the gradient. Returns a handle whose ``remove()`` takes the hook off.

        >>> h = w.register_hook(lambda g: g.clamp(-1, 1))
        """
        return _hooks.register_tensor_hook(self, hook)

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        from .autograd import backward

        backward(self, gradient, retain_graph=retain_graph, create_graph=create_graph,
                 inputs=inputs)

    def clone(self) -> "Tensor":
        data = self._data
        if data.__class__ is np.ndarray and not self.requires_grad \
                and not _dispatch.tracing():
            return Tensor._wrap(np.array(data, copy=True))
        # An op, so that autograd sees it and, while tracing, a clone of a captured tensor is
        # computed at every call rather than baked in; x * 1 keeps -0.0 (x + 0 would not).
        return F.mul(self, F.const(1, self.dtype))

    def contiguous(self) -> "Tensor":
        return F.contiguous(self)

    def is_contiguous(self) -> bool:
        data = self._data
        if type(data) is np.ndarray:
            return data.flags.c_contiguous
        return getattr(data, "c_contiguous", True)

    # ---------------------------------------------------------------- operators
    # Binary operators: a direct dispatch when both sides are plain tensors of one dtype
    # (the common case, kept to one Python call); the front end handles everything else.
    def __add__(self, other):
        if other.__class__ is Tensor and self._data.dtype is other._data.dtype:
            return _apply(_ADD, self, other)
        return F.add(self, other)

    def __radd__(self, other):
        return F.add(other, self)

    def __sub__(self, other):
        if other.__class__ is Tensor and self._data.dtype is other._data.dtype \
                and self._data.dtype.kind != "b":
            return _apply(_SUB, self, other)
        return F.sub(self, other)

    def __rsub__(self, other):
        return F.sub(other, self)

    def __mul__(self, other):
        if other.__class__ is Tensor and self._data.dtype is other._data.dtype:
            return _apply(_MUL, self, other)
        return F.mul(self, other)

    def __rmul__(self, other):
        return F.mul(other, self)

    def __truediv__(self, other):
        return F.div(self, other)

    def __rtruediv__(self, other):
        return F.div(other, self)

    def __pow__(self, other):
        return F.pow(self, other)

    def __rpow__(self, other):
        return F.pow(other, self)

    def __matmul__(self, other):
        return F.matmul(self, other)

    def __rmatmul__(self, other):
        return F.matmul(other, self)

    def __neg__(self):
        return F.neg(self)

    def __pos__(self):
        return self

    def __abs__(self):
        return F.abs(self)

    def __invert__(self):
        return F.bitwise_not(self)

    def __eq__(self, other):  # noqa: D105
        return F.eq(self, other)

    def __ne__(self, other):
        return F.ne(self, other)

    def __lt__(self, other):
        return F.lt(self, other)

    def __le__(self, other):
        return F.le(self, other)

    def __gt__(self, other):
        return F.gt(self, other)

    def __ge__(self, other):
        return F.ge(self, other)

    def __getitem__(self, key):
        return F.getitem(self, key)

    # ---------------------------------------------------------------- dtype methods
    def to(self, *args, **kwargs) -> "Tensor":
        """`to(dtype)`, `to(device, dtype=None)`, `to(other)`, `to(device=, dtype=, copy=)`,
        as in PyTorch; the device must be the CPU (eager/device.py)."""
        if not kwargs and len(args) == 1 and isinstance(args[0], (np.dtype, type)):
            return F.cast(self, args[0])  # the common to(dtype), without parsing overloads
        dtype, copy = _device.parse_to(args, kwargs, "to")
        out = self if dtype is None or dtype == self.dtype else F.cast(self, dtype)
        return out.clone() if copy and out is self else out

    @property
    def device(self):
        return _device.CPU

    is_cuda = False
    is_cpu = True

    def get_device(self) -> int:
        return -1  # PyTorch's answer for a CPU tensor

    def pin_memory(self) -> "Tensor":
        return self  # (page-locking helps copies to a GPU; there is none)

    def is_pinned(self) -> bool:
        return False

    def cpu(self) -> "Tensor":
        return self

    def cuda(self, device=None, non_blocking=False) -> "Tensor":
        _device.check_device("cuda" if device is None else device, "cuda")
        return self

    # ---------------------------------------------------------------- shape methods
    def reshape(self, *shape):
        return F.reshape(self, *shape)

    def view(self, *shape):
        if len(shape) == 1 and not isinstance(shape[0], (int, tuple, list)) and (
                isinstance(shape[0], (np.dtype, type, str))):
            return _dtype_ops.view_dtype(self, shape[0])
        return F.view(self, *shape)

    def view_as(self, other):
        return F.view(self, other.shape)

    def reshape_as(self, other):
        return F.reshape(self, other.shape)

    def expand(self, *shape):
        return F.expand(self, *shape)

    def permute(self, *dims):
        return F.permute(self, *dims)

    def sum(self, *args, **kwargs):  # (dim=None, keepdim=False, dtype=None; axis=, keepdims=)
        return F.sum(self, *args, **kwargs)

    def max(self, *args, **kwargs):
        return F.max(self, *args, **kwargs)

    def min(self, *args, **kwargs):
        return F.min(self, *args, **kwargs)



def _method(fn):
    def method(self, *args, **kwargs):
        return fn(self, *args, **kwargs)
    method.__name__ = fn.__name__
    method.__doc__ = fn.__doc__
    return method


# Methods of the composites (the registry's ops say so in their rows: OpDef.method).
for _name in ("clamp", "clip", "mean", "amin", "argmin", "logsumexp",
              "dot", "transpose", "t", "unsqueeze", "squeeze", "flatten",
              "expand_as", "logical_not", "square", "rsqrt", "isnan", "isinf", "isfinite",
              "var", "std") + F.math_fns.METHODS:
    setattr(Tensor, _name, _method(getattr(F, _name)))
for _op in _OPS.values():
    if _op.method:
        setattr(Tensor, _op.name, _method(getattr(F, _op.name)))
Tensor.__eq__ = Tensor.__eq__  # keep identity hashing with elementwise ==


def _operator(name, reflected):
    fn = getattr(F, name)

    def op(self, other):
        return fn(other, self) if reflected else fn(self, other)
    return op


# &, |, ^, <<, >>, %, // and their reflected forms (5 & x), as PyTorch's
for _sym, _name in [("and", "bitwise_and"), ("or", "bitwise_or"), ("xor", "bitwise_xor"),
                    ("lshift", "bitwise_left_shift"), ("rshift", "bitwise_right_shift"),
                    ("mod", "remainder"), ("floordiv", "floor_divide")]:
    setattr(Tensor, f"__{_sym}__", _operator(_name, False))
    setattr(Tensor, f"__r{_sym}__", _operator(_name, True))


def _where(self, condition, other):
    """``x.where(condition, y)`` is ``where(condition, x, y)``, as in PyTorch."""
    return F.where(condition, self, other)


Tensor.where = _where
Tensor.multiply = Tensor.mul
Tensor.subtract = Tensor.sub
Tensor.divide = Tensor.div
Tensor.negative = Tensor.neg
# .float(), .double(), .long(), .int(), .bool(), .half(), .short(), .byte(), .char(),
# .type(), .type_as(), __format__ (eager/dtype_ops.py)
for _name, _fn in _dtype_ops.TENSOR_METHODS.items():
    setattr(Tensor, _name, _fn)
