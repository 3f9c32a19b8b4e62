"""Parameter initializers (PyTorch's schemes), drawing from the global generator."""
from __future__ import annotations

import math

import numpy as np

from ..autograd import no_grad
from ..functions import from_numpy, rand, randn, reshape


def _fans(t):
    if t.ndim < 2:
        raise ValueError("fan in/out needs a tensor with at least 2 dims")
    receptive = math.prod(t.shape[2:])
    return t.shape[1] * receptive, t.shape[0] * receptive


def uniform_(t, a=0.0, b=1.0, generator=None):
    with no_grad():
        return t.copy_(rand(t.shape, dtype=t.dtype, generator=generator) * (b - a) + a)


def normal_(t, mean=0.0, std=1.0, generator=None):
    with no_grad():
        return t.copy_(randn(t.shape, dtype=t.dtype, generator=generator) * std + mean)


def trunc_normal_(t, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """Normal(mean, std) values redrawn until they lie in [a, b] (bounds in values, not in
    standard deviations, as PyTorch)."""
    if not a < b:
        raise ValueError(f"trunc_normal_: expected a < b, got a={a}, b={b}")
    with no_grad():
        values = (randn(t.shape, dtype=t.dtype, generator=generator) * std + mean).numpy()
        outside = (values < a) | (values > b)
        for _ in range(1000):  # each round keeps most draws unless [a, b] is far in a tail
            if not outside.any():
                break
            redrawn = randn(int(outside.sum()), dtype=t.dtype, generator=generator) * std + mean
            values[outside] = redrawn.numpy()
            outside = (values < a) | (values > b)
        else:
            raise ValueError(f"trunc_normal_: [a, b] = [{a}, {b}] is too far in the tail of "
                             f"Normal({mean}, {std}) to sample by redrawing")
        return t.copy_(from_numpy(values))


def zeros_(t):
    with no_grad():
        return t.zero_()


def ones_(t):
    with no_grad():
        return t.fill_(1)


def constant_(t, val):
    with no_grad():
        return t.fill_(val)


def calculate_gain(nonlinearity, param=None):
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope ** 2))
    return 1.0


def kaiming_uniform_(t, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
    fan_in, fan_out = _fans(t)
    fan = fan_in if mode == "fan_in" else fan_out
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / fan) if fan else 0.0
    return uniform_(t, -bound, bound)


def kaiming_normal_(t, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
    fan_in, fan_out = _fans(t)
    fan = fan_in if mode == "fan_in" else fan_out
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan) if fan else 0.0
    return normal_(t, 0.0, std)


def xavier_normal_(t, gain=1.0):
    fan_in, fan_out = _fans(t)
    return normal_(t, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


def xavier_uniform_(t, gain=1.0):
    fan_in, fan_out = _fans(t)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(t, -bound, bound)


def orthogonal_(t, gain=1.0, generator=None):
    """Fill `t` (at least 2-d; trailing dims flattened) with a (semi-)orthogonal matrix
    times `gain`: the Q of a normal draw's QR, its signs fixed by R's diagonal, as
    PyTorch's."""
    if t.ndim < 2:
        raise ValueError(f"orthogonal_: only tensors with 2 or more dimensions are supported, "
                         f"got shape {t.shape}")
    if t.numel() == 0:
        return t
    rows = t.shape[0]
    cols = t.numel() // rows
    with no_grad():
        flat = randn((rows, cols), dtype=t.dtype, generator=generator).numpy().astype(
            np.float64)
        if rows < cols:
            flat = flat.T
        q, r = np.linalg.qr(flat)
        q = q * np.sign(np.diag(r))
        if rows < cols:
            q = q.T
        return t.copy_(reshape(from_numpy((q * gain).astype(t.dtype)), t.shape))
