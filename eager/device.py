"""Devices as PyTorch CPU code spells them: `eager.device("cpu")`, `device=` and `.to(device)`.

This runtime computes on the CPU only. Every place PyTorch accepts a device accepts
`"cpu"`, `"cpu:0"`, `eager.device("cpu")` or None; a CUDA (or any other) device raises a
`RuntimeError` saying so, instead of silently running somewhere the user did not ask for.

>>> import eager
>>> dev = eager.device("cuda" if eager.cuda.is_available() else "cpu")
>>> eager.zeros(2, device=dev).device
device(type='cpu')
"""
from __future__ import annotations

import functools

import numpy as np

from .errors import user_location

_KNOWN_TYPES = ("cpu", "cuda", "mps", "xpu", "meta", "hip", "xla", "ipu", "vulkan", "mkldnn")


class device:  # (lower case: PyTorch's name)
    """A device description: `device("cpu")`, `device("cuda", 0)`, `device("cuda:1")`.

    Making a non-CPU device object is allowed (as in PyTorch, scripts build one before
    checking `eager.cuda.is_available()`); using it for a tensor raises.
    """

    __slots__ = ("type", "index")

    def __init__(self, type, index=None):  # (`type`: PyTorch's argument name)
        if isinstance(type, device):
            if index is not None:
                raise ValueError("device(): an index cannot be given with a device object")
            type, index = type.type, type.index
        elif isinstance(type, int) and not isinstance(type, bool):
            type, index = "cuda", type  # PyTorch: a bare ordinal means a CUDA device
        elif not isinstance(type, str):
            raise TypeError(f"device() expected a string or a device, got "
                            f"{type.__class__.__name__}")
        else:
            text = type
            if ":" in text:
                text, _, ordinal = text.partition(":")
                if index is not None:
                    raise RuntimeError(f"device(): type {type!r} already has an index")
                if not ordinal.isdigit():
                    raise RuntimeError(f"Invalid device string: {type!r}")
                index = int(ordinal)
            if text not in _KNOWN_TYPES:
                raise RuntimeError(f"Expected one of {', '.join(_KNOWN_TYPES)} device type at "
                                   f"start of device string: {type}")
            type = text
        if index is not None and (not isinstance(index, int) or index < 0):
            raise RuntimeError(f"Device index must not be negative, got {index}")
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "index", index)

    def __setattr__(self, name, value):
        raise AttributeError("eager.device is immutable")

    def __eq__(self, other):
        if isinstance(other, str):
            try:
                other = device(other)
            except (RuntimeError, ValueError):
                return False
        if not isinstance(other, device):
            return NotImplemented
        return self.type == other.type and self.index == other.index

    def __hash__(self):
        return hash((self.type, self.index))

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self):
        if self.index is None:
            return f"device(type='{self.type}')"
        return f"device(type='{self.type}', index={self.index})"

    def __reduce__(self):
        return (device, (self.type, self.index))

    # `with eager.device("cpu"):` sets the default device in PyTorch; CPU is the only one.
    def __enter__(self):
        check_device(self, "with device(...)")
        return self

    def __exit__(self, *exc):
        return False


CPU = device("cpu")


def check_device(dev, op: str = "device") -> device:
    """`dev` as a CPU device; raises a RuntimeError naming the caller's line for any other."""
    if dev is None:
        return CPU
    if not isinstance(dev, device):
        dev = device(dev)
    if dev.type != "cpu":
        raise RuntimeError(
            f"{op}: device {str(dev)!r} is not available: eager runs on the CPU only "
            f"(eager.cuda.is_available() is False). Use device='cpu', or pick the device "
            f"with `'cuda' if eager.cuda.is_available() else 'cpu'` (at {user_location()})")
    if dev.index not in (None, 0):
        raise RuntimeError(f"{op}: there is one CPU device, got {str(dev)!r} "
                           f"(at {user_location()})")
    return CPU


def set_default_device(dev) -> None:
    """PyTorch's `set_default_device`: the CPU (or None) is accepted; anything else raises."""
    check_device(dev, "set_default_device")


def get_default_device() -> device:
    return CPU


def is_device_like(value) -> bool:
    """True for what `.to()` reads as a device: a device object or a device string."""
    if isinstance(value, device):
        return True
    if isinstance(value, str):
        try:
            device(value)
        except (RuntimeError, ValueError):
            return False
        return True
    return False


def with_device(fn):
    """`fn` (a creation function) with PyTorch's `device=` and `pin_memory=` keywords."""
    name = fn.__name__

    @functools.wraps(fn)
    def create(*args, device=None, pin_memory=False, **kwargs):
        if device is not None:
            check_device(device, name)
        return fn(*args, **kwargs)

    return create


def parse_to(args, kwargs, op: str = "to"):
    """PyTorch's `.to(...)` overloads read as (dtype or None, copy):
    `to(dtype)`, `to(device, dtype=None)`, `to(tensor)`, `to(device=..., dtype=...,
    non_blocking=False, copy=False)`. A non-CPU device raises."""
    from . import dtypes
    from .tensor import Tensor

    kwargs = dict(kwargs)
    dev = kwargs.pop("device", None)
    dtype = kwargs.pop("dtype", None)
    copy = bool(kwargs.pop("copy", False))
    kwargs.pop("non_blocking", None)
    kwargs.pop("memory_format", None)
    if kwargs:
        raise TypeError(f"{op}() got an unexpected keyword argument {next(iter(kwargs))!r}")
    args = list(args)
    if args and isinstance(args[0], Tensor):
        other = args.pop(0)
        dtype = other.dtype if dtype is None else dtype
    elif args and (is_device_like(args[0]) or isinstance(args[0], int)
                   and not isinstance(args[0], bool)):
        dev = args.pop(0)
    if args and dtype is None and not isinstance(args[0], bool):
        dtype = args.pop(0)
    if args:  # positional non_blocking, copy
        args.pop(0)
    if args:
        copy = bool(args.pop(0))
    if args:
        raise TypeError(f"{op}() got too many arguments")
    check_device(dev, op)
    if dtype is not None:
        try:
            dtype = dtypes.canonical(dtype)
        except Exception as exc:  # (re-raised with the user's line)
            raise TypeError(f"{op}(): expected a dtype or a device, got {dtype!r} "
                            f"(at {user_location()})") from exc
    return dtype, copy


def as_tensor(data, dtype=None, device=None):
    """PyTorch's `as_tensor`: `data` itself when it is already a tensor of that dtype, a
    tensor sharing memory with a numpy array of a supported dtype, else a new tensor."""
    from . import dtypes, functions
    from .tensor import Tensor

    check_device(device, "as_tensor")
    if isinstance(data, Tensor):
        return data if dtype is None else data.to(dtype)
    if isinstance(data, np.ndarray) and data.dtype == dtypes.canonical(data.dtype) and (
            dtype is None or dtypes.canonical(dtype) == data.dtype):
        return functions.from_numpy(data)
    return functions.tensor(data, dtype=dtype)
