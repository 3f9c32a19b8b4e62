"""Kernels that could not be built: their equations run through the registry's numpy
implementations (eager's results, slower), and the user is told once per kernel.

A fallback is one step of a program (codegen.program.FallbackStep); the generated runner
calls the function `interpreted` makes with the slot values the group reads."""

from __future__ import annotations

import warnings

import numpy as np

from eager.dispatch import quiet
from eager.ops import OPS
from tracer.ir import Literal
from tracer.symbolic import bind_params

_warned: set = set()  # sources of the kernels whose numpy fallback was announced


class FallbackWarning(RuntimeWarning):
    """A kernel could not be built: its equations run through numpy (the registry's
    reference implementations) instead, with eager's results, slower. Issued once per
    distinct kernel; the test suite turns it into an error (tests/conftest.py)."""


def warn_fallback(group, error: str, stage: str = "build", source: str = "") -> None:
    """Say once per distinct kernel (its source, else its name and error: another
    function or shape that happens to share the name is a different kernel) that `group`'s
    kernel runs through numpy, at the user's line that made the program compile (its first
    call), naming the kernel, the lines it computes and why. Marked as told only once the
    warning returns: where it is an error, every failure raises."""
    from eager.errors import user_location_full

    key = source or f"{group.name}\0{error}"
    if key in _warned:
        return
    lines = []
    for e in group.members:
        if e.loc and e.loc not in lines:
            lines.append(e.loc)
    where = f" (from {', '.join(lines[:3])}{', ...' if len(lines) > 3 else ''})" if lines \
        else ""
    filename, lineno = user_location_full()
    warnings.warn_explicit(
        f"codegen: could not {stage} kernel {group.name}{where}: {error}; running its "
        f"{len(group.members)} equations through numpy instead (same results, slower)",
        FallbackWarning, filename, lineno, module="codegen.runtime")
    _warned.add(key)


def reads_of(group, slots: dict, defined: set, views: dict) -> list:
    """The slots whose values `group`'s equations read, in order: each input that the
    group does not compute itself, followed through views to a value some slot holds
    (assigned by the time the group runs, per `defined`)."""
    inside = {id(e.out) for e in group.members}
    out: list = []

    def resolve(x):
        while x is not None and not isinstance(x, Literal) and id(x) not in inside:
            s = slots.get(id(x))
            if s is not None and s in defined:
                if s not in out:
                    out.append(s)
                return
            e = views.get(id(x))
            if e is None:
                return  # (interpreted raises KeyError at run time: a partition bug)
            x = e.inputs[0]

    for e in group.members:
        for x in e.inputs:
            resolve(x)
    return out


def interpreted(group, outputs, slots: dict, views: dict, reads: list):
    """`run(sizes, *values)` -> the values of `outputs`: `group`'s equations one by one,
    reading `values` (of the slots `reads`), this run's own results and views of either
    (a multi kernel's later loop nest reads an earlier one's values through views that no
    slot holds)."""
    members = list(group.members)
    keys = [id(v) for v in outputs]
    read_slots = tuple(reads)

    def run(sizes, *values):
        env = dict(zip(read_slots, values))
        local: dict = {}
        for e in members:
            vals = [_value_of(x, env, slots, views, local, sizes) for x in e.inputs]
            params = e.params if sizes is None else bind_params(e.params, sizes)
            local[id(e.out)] = np.asarray(quiet(OPS[e.op].impl)(*vals, **params))
        return [local[k] for k in keys]
    return run


def _value_of(x, env: dict, slots, views, local, sizes=None):
    """A value for the interpreted fallback: a literal, a value this run computed
    (`local`), one in a slot it was given, or a view of any of these (evaluated, then kept
    in `local`)."""
    if x is None:
        return None
    if isinstance(x, Literal):
        return x.value
    v = local.get(id(x))
    if v is not None:
        return v
    s = slots.get(id(x))
    if s is not None and env.get(s) is not None:
        return env[s]
    e = views.get(id(x))
    if e is None:
        raise KeyError(f"the numpy fallback cannot find {x!r}")  # a partition bug
    src = _value_of(e.inputs[0], env, slots, views, local, sizes)
    params = e.params if sizes is None else bind_params(e.params, sizes)
    v = local[id(x)] = np.asarray(quiet(OPS[e.op].impl)(src, **params))
    return v
