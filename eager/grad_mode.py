"""Grad mode: whether ops record autograd history (`no_grad`, `enable_grad`,
`set_grad_enabled`, `inference_mode`), as context managers and decorators. The switch itself
is dispatch's (`dispatch.set_grad_enabled`); eager.autograd re-exports these names.
"""
from __future__ import annotations

import functools

from . import dispatch


class no_grad:
    """Context manager and decorator that turns off graph recording.

    >>> with no_grad():
    ...     y = x * 2        # y.requires_grad is False
    """

    def __enter__(self):
        self._prev = dispatch.set_grad_enabled(False)
        return self

    def __exit__(self, *exc):
        dispatch.set_grad_enabled(self._prev)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)
        return wrapper


class enable_grad(no_grad):
    """Context manager and decorator that turns graph recording back on."""

    def __enter__(self):
        self._prev = dispatch.set_grad_enabled(True)
        return self


class set_grad_enabled:
    """Sets grad mode on construction (as a function call), as a context manager restoring
    the previous mode on exit, and as a decorator (`@set_grad_enabled(False)`), as in PyTorch.
    """

    def __init__(self, mode: bool):
        self._mode = bool(mode)
        self._prev = dispatch.set_grad_enabled(mode)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        dispatch.set_grad_enabled(self._prev)
        return False

    def __call__(self, fn):
        # Used as a decorator: construction switched the mode; put it back, and switch it
        # only around each call.
        dispatch.set_grad_enabled(self._prev)
        mode = self._mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            prev = dispatch.set_grad_enabled(mode)
            try:
                return fn(*args, **kwargs)
            finally:
                dispatch.set_grad_enabled(prev)
        return wrapper


class inference_mode(no_grad):
    """`no_grad` under PyTorch's newer name: `with inference_mode():`, `@inference_mode()`,
    `@inference_mode`, `inference_mode(False)`. Tensors made inside do not record history;
    unlike PyTorch they are ordinary tensors afterwards (no "inference tensor" restrictions).
    """

    def __new__(cls, mode=True):
        if callable(mode) and not isinstance(mode, bool):  # bare @inference_mode
            return no_grad.__call__(object.__new__(cls), mode)
        return object.__new__(cls)

    def __init__(self, mode: bool = True):
        self._mode = bool(mode)

    def __enter__(self):
        self._prev = dispatch.set_grad_enabled(False) if self._mode else \
            dispatch.is_grad_enabled()
        return self

    def __call__(self, fn):
        mode = self._mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with inference_mode(mode):
                return fn(*args, **kwargs)
        return wrapper


is_grad_enabled = dispatch.is_grad_enabled
