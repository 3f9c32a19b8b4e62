"""Locating the user's code for error messages and source locations."""
from __future__ import annotations

import os
import sys

# Frames from these directories are library frames; the first frame outside
# them is "the user's line".
_LIBRARY_DIRS: list[str] = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
_PACKAGES = ("eager", "tracer", "codegen")


def _is_library_file(filename: str) -> bool:
    for root in _LIBRARY_DIRS:
        for pkg in _PACKAGES:
            if filename.startswith(os.path.join(root, pkg) + os.sep):
                return True
    # (code tracejit generates - runners, call paths - is named "<tracejit ...>")
    return filename.startswith(("<frozen", "<tracejit")) or "contextlib.py" in filename


def user_frame():
    """Return the innermost stack frame that is not inside tracejit, or None."""
    frame = sys._getframe(1)
    while frame is not None and _is_library_file(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def user_location() -> str:
    """'file.py:LINE' of the user's code currently calling into tracejit."""
    frame = user_frame()
    if frame is None:
        return "<unknown>"
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def user_location_full() -> tuple[str, int]:
    frame = user_frame()
    if frame is None:
        return "<unknown>", 0
    return frame.f_code.co_filename, frame.f_lineno


def describe(value) -> str:
    """Short description of an argument for error messages: 'f32[3,4]' or a type name."""
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        from .dtypes import SHORT_NAMES

        name = SHORT_NAMES.get(dtype, str(dtype))
        return f"{name}[{','.join(str(d) for d in shape)}]"
    return type(value).__name__


class OpError(ValueError):
    """A bad argument to a tensor op; the message names the op, operands and the user's line."""


def _symbolic_dim(operands):
    """The first symbolic size (eager.ops.Dim, from a traced input_signature) among the
    operands' shapes, or None."""
    from .ops import Dim

    for o in operands:
        for d in getattr(o, "shape", None) or ():
            if isinstance(d, Dim):
                return d
    return None


def op_error(op: str, problem: str, operands=(), hint: str = "", exc=ValueError) -> Exception:
    if exc is ValueError:
        dim = _symbolic_dim(operands)
        if dim is not None:
            # A size check that fails on a symbolic size while tracing may hold at run time:
            # the symbol's own error (the tracer's TracingError) says so.
            try:
                dim.unknown(f"{op}: {problem}" + (f" ({hint})" if hint else ""))
            except Exception as symbolic:  # noqa: BLE001 - handed back to be raised
                return symbolic
    where = user_location()
    parts = [f"{op}: {problem}"]
    if operands:
        parts.append("operands: " + ", ".join(describe(o) for o in operands))
    if hint:
        parts.append(hint)
    parts.append(f"(at {where})")
    cls = exc if exc is not ValueError else OpError
    return cls("; ".join(parts[:-1]) + " " + parts[-1])
