"""Aliased arguments and captures of a trace that writes in place.

A trace sees each argument and captured tensor as a value of its own. Eagerly, two of
them may share memory (``f(a, a)``, ``f(b, b[1:])``, an argument that is also a tensor
the function captures): an in-place write to one is then seen through the other. A
compiled call would compute with the old values, and in-place planning may even write
one while a kernel still reads the other. So a trace that writes arguments or captures
in place checks, at every call, that what it writes shares no memory with any other
array of the call; where it does, the call runs eagerly (and says so once), which is
what eager gives by definition.
"""
from __future__ import annotations

import numpy as np


def _owner(a) -> int:
    return id(a) if a.base is None else id(a.base)


class AliasCheck:
    """`check(values)`: None, or why the arrays of this call (arguments, then captures, as
    the program takes them) alias where the trace writes."""

    __slots__ = ("written", "names")

    def __init__(self, written: tuple, names: tuple):
        self.written = written  # positions in `values` the trace writes in place
        self.names = names      # per position, what it is (for the message)

    @classmethod
    def of(cls, update_targets, capture_grad_owner, n_inputs, names):
        written = []
        for kind, i in update_targets:
            if kind == "input":
                written.append(i)
            elif kind == "data":
                written.append(n_inputs + i)
        if not written or len(names) < 2:
            return None
        return cls(tuple(sorted(set(written))), tuple(names))

    def __call__(self, values):
        owners = [_owner(a) if a.__class__ is np.ndarray else id(a) for a in values]
        if len(set(owners)) == len(owners):
            return None  # (the common case: every array has memory of its own)
        for p in self.written:
            for q, o in enumerate(owners):
                if q != p and o == owners[p] and np.may_share_memory(values[p], values[q]):
                    return (f"{self.names[p]} shares memory with {self.names[q]} and the "
                            f"function writes it in place")
        return None
