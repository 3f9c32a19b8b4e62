"""The tracer's error for what a trace cannot express, and where the user's line is.

Its own module so that every tracer module can raise it without importing the tracing
machinery (tracer.symbolic did, and tracer.trace imports tracer.symbolic back).
"""
from __future__ import annotations

import os

from eager.errors import user_frame


class TracingError(RuntimeError):
    """Something a trace cannot express; the message names the user's line and a fix."""


class ProgramRaised(Exception):
    """A compiled program raised at run time, in a value check (its cause: a class index
    out of range, an integer divisor 0, ...) before it changed any tensor (see
    `eager.ops.OpDef.raises`). `tracer.function` catches it and runs the call eagerly, so
    the error and the state the call leaves (BatchNorm's statistics, in-place updates
    before the failing op) are eager's. Also raised when the traced Python body raises an
    error of its own (not a TracingError), `while_tracing` then True. Users see it only from
    a ConcreteFunction called directly (or get_concrete_function), as its cause."""

    while_tracing = False


def _where() -> str:
    frame = user_frame()
    if frame is None:
        return "<unknown>"
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def _short_where() -> str:
    """`file.py:line` of the user's line, as equations record it ("" outside user code)."""
    frame = user_frame()
    if frame is None:
        return ""
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


__all__ = ["TracingError", "ProgramRaised"]
