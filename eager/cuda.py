"""`eager.cuda`: what CPU-only PyTorch reports, so `if torch.cuda.is_available()` scripts run.

>>> import eager
>>> eager.cuda.is_available()
False
"""
from __future__ import annotations


def is_available() -> bool:
    """False: eager computes on the CPU only."""
    return False


def device_count() -> int:
    return 0


def manual_seed(seed: int) -> None:
    """A no-op, as in PyTorch without CUDA (the CPU generator is `eager.manual_seed`)."""


def manual_seed_all(seed: int) -> None:
    """A no-op, as in PyTorch without CUDA."""


def synchronize(device=None) -> None:
    """A no-op: there is no asynchronous device to wait for."""


def is_bf16_supported() -> bool:
    return False


def current_device() -> int:
    """Raises, as PyTorch built without CUDA does: there is no CUDA device."""
    from .device import check_device

    check_device("cuda", "eager.cuda.current_device")
    return 0  # (not reached)
