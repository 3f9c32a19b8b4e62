"""`tracer.run_eagerly(flag)`: every @function runs its Python body directly (debugging);
and the eager run of one call whose compiled program or trace raised (`eager_after_raise`).

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


def eager_after_raise(func, args, kwargs, raised):
    """The call of @function `func` whose compiled program raised in a value check before
    it changed any tensor (a class index out of range, an integer divisor 0), or whose
    trace raised the function's own error (`raised`, a tracer.errors.ProgramRaised): run
    it eagerly, so that the error and the state the call leaves (running statistics,
    in-place updates made before the failing op) are eager's; if eager returns, so does
    this."""
    from . import logs

    cause = raised.__cause__
    where = "tracing" if raised.while_tracing else "the compiled program"
    logs.log("recompiles", f"{func._name}: {where} raised {type(cause).__name__} "
             f"({raised}); running the call eagerly for eager's error and state")
    if not raised.while_tracing:
        return func._fn(*args, **kwargs)
    try:
        out = func._fn(*args, **kwargs)
    except Exception as exc:
        if isinstance(cause, type(exc)):
            # the trace's error (its message may name the line where eager's does not),
            # with eager's state
            raise cause from None
        raise
    # eager did not raise: a limit of tracing, made visible
    func._warn_once(f"tracing {func._name} raised {type(cause).__name__}: {raised}, where "
                    f"the eager call does not; such calls run eagerly")
    return out


__all__ = ["run_eagerly", "functions_run_eagerly"]
