"""`tracer.run_eagerly(flag)`: every @function runs its Python body directly (debugging).

Its own module so that check mode (tracer.check), which runs a function's Python the same
way, reads the flag without importing the decorator's module (which imports check mode).
"""
from __future__ import annotations

_RUN_EAGERLY = [False]  # (a list: read as _RUN_EAGERLY[0] on every call, cheaply)


def run_eagerly(flag: bool = True) -> None:
    """Make every @function run its Python body directly (for debugging), as
    ``tf.config.run_functions_eagerly`` does.

    >>> import tracer
    >>> tracer.run_eagerly(True); tracer.functions_run_eagerly()
    True
    >>> tracer.run_eagerly(False)
    """
    _RUN_EAGERLY[0] = bool(flag)


def functions_run_eagerly() -> bool:
    return _RUN_EAGERLY[0]


__all__ = ["run_eagerly", "functions_run_eagerly"]
