"""Python's and numpy's random generators, which a trace does not record.

`random.random()`, `np.random.rand()` or `rng.normal()` inside a traced function run once,
while tracing: the trace would use those numbers at every call, where eager draws new ones.
tracing.trace_function notes the generators' states before the traced code runs (the two
global ones and any generator object among the call's roots: an `rng` global or closure
variable) and, if one moved, puts them all back and raises `HostRandomInTrace`: the
signature then runs eagerly (tracer.function), drawing exactly eager's numbers. A generator
made inside the function from fresh OS entropy (`np.random.default_rng()`) is not seen.
"""
from __future__ import annotations

import random

import numpy as np

from .discover import _where_defined
from .errors import TracingError


class HostRandomInTrace(TracingError):
    """The traced code drew numbers from Python's `random` or numpy's global random state:
    a trace would freeze them (the same numbers at every call). @function runs that
    signature eagerly, with the generators put back so that run draws eager's numbers."""


_GENERATORS = (random.Random, np.random.Generator, np.random.RandomState)


def _generator_state(g):
    if isinstance(g, np.random.Generator):
        return g.bit_generator.state
    return g.getstate() if isinstance(g, random.Random) else g.get_state(legacy=False)


def _set_generator_state(g, state) -> None:
    if isinstance(g, np.random.Generator):
        g.bit_generator.state = state
    elif isinstance(g, random.Random):
        g.setstate(state)
    else:
        g.set_state(state)


def _same_state(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_state(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same_state(x, y) for x, y in zip(a, b))
    return a == b


def host_random_states(roots) -> list:
    """(description, generator, state) of Python's and numpy's global generators and of
    the generator objects among the call's roots (an `rng` global or closure variable)."""
    found = [("`random`", random._inst, None), ("`numpy.random`", np.random.mtrand._rand, None)]
    found += [(f"the generator {desc}", obj, None) for desc, obj in roots
              if isinstance(obj, _GENERATORS)]
    return [(desc, g, _generator_state(g)) for desc, g, _ in found]


def refuse_host_random(before: list, fn, name: str) -> None:
    moved = [desc for desc, g, state in before if not _same_state(_generator_state(g), state)]
    if not moved:
        return
    for _desc, g, state in before:
        _set_generator_state(g, state)
    raise HostRandomInTrace(
        f"{_where_defined(fn)}: {name} draws numbers from {' and '.join(moved)} while it "
        f"is traced; a trace would use those numbers at every call. Draw them with "
        f"eager.rand / eager.randn / eager.randint (recorded: new numbers at every call), "
        f"or pass them in as arguments")
