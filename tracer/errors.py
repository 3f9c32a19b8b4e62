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


# The name under which a backend's generated code keeps, in its module globals, which
# equation each of its lines runs ({line number: Eqn}): `step_error` reads it from the
# traceback of a numpy failure to name the op and the user's line, as eager does.
STEP_LINES = "__tracejit_steps__"


def step_error(exc: BaseException, eqn=None) -> BaseException:
    """`exc` (an IndexError a compiled numpy step raised: a scatter_add or gather index out
    of range) with eager's message: the op, the operand types and the user's line of
    equation `eqn`, or of the equation its traceback's generated line runs. Other
    exceptions, and failures no equation is known for, come back as they are."""
    if not isinstance(exc, IndexError):
        return exc
    if eqn is None:
        tb = exc.__traceback__
        while tb is not None and eqn is None:
            lines = tb.tb_frame.f_globals.get(STEP_LINES)
            if lines is not None:
                eqn = lines.get(tb.tb_lineno)
            tb = tb.tb_next
        if eqn is None:
            return exc
    operands = ", ".join(str(x.type) for x in eqn.inputs)
    named = IndexError(f"{eqn.op}: {exc}; operands: {operands}"
                       + (f" (at {eqn.loc})" if eqn.loc else ""))
    named.__cause__ = exc
    return named


__all__ = ["TracingError", "ProgramRaised", "step_error"]
