"""Floor division and Python-style remainder of floats, as numpy computes them (eager's
np.floor_divide / np.remainder: npy_divmod), so compiled kernels give eager's results for
every input, infinities and zeros included (Numba's own np.floor_divide differs, e.g.
-3.0 // inf is -0.0 there and -1.0 in numpy)."""
import numpy as np

from .intrinsics import _always_inline, _vjit

__all__ = ["floor_divide_float", "remainder_float"]


@_vjit
def floor_divide_float(a, b):
    """numpy's float floor division: a / b for b == 0, else floor((a - fmod(a, b)) / b) with
    numpy's corrections."""
    _always_inline()
    mod = np.fmod(a, b)
    if b == 0:
        return a / b
    div = (a - mod) / b
    if mod != 0:
        if (b < 0) != (mod < 0):
            div -= 1.0
    if div != 0:
        floordiv = np.floor(div)
        if div - floordiv > 0.5:
            floordiv += 1.0
        return floordiv
    return np.copysign(div - div, a / b)  # a zero of a's float type


@_vjit
def remainder_float(a, b):
    """numpy's float remainder (the sign of b): fmod(a, b), moved into b's sign."""
    _always_inline()
    mod = np.fmod(a, b)
    if b == 0:
        return mod
    if mod != 0:
        if (b < 0) != (mod < 0):
            mod += b
    else:
        mod = np.copysign(mod, b)
    return mod
