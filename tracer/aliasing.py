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


class AliasCheck:
    """`check(values, captures_changed)`: None, or why the arrays of this call (arguments,
    then captures, as the program takes them) alias where the trace writes. What the
    captures share among themselves is worked out again only when one of their arrays
    changed (the generated call knows); per call only the arguments are looked at."""

    __slots__ = ("_cap_hazard", "_cap_owners", "n_in", "names", "written")

    def __init__(self, n_in: int, written: tuple, names: tuple):
        self.n_in = n_in
        self.written = frozenset(written)  # positions in `values` the trace writes in place
        self.names = names      # per position, what it is (for the message)
        self._cap_owners = None  # memory owner -> positions of the captures using it
        self._cap_hazard = None

    @classmethod
    def of(cls, update_targets, n_inputs, names):
        """The check for a trace with these graph update targets, or None if it writes no
        argument or capture (or has only one array)."""
        written = []
        for kind, i in update_targets:
            if kind == "input":
                written.append(i)
            elif kind == "data":
                written.append(n_inputs + i)
        if not written or len(names) < 2:
            return None
        return cls(n_inputs, tuple(written), tuple(names))

    def __call__(self, values, captures_changed=True):
        n = self.n_in
        if captures_changed or self._cap_owners is None:
            owners = {}
            for q in range(n, len(values)):
                owners.setdefault(_owner(values[q]), []).append(q)
            self._cap_owners = owners
            self._cap_hazard = None
            for group in owners.values():
                if len(group) > 1:
                    self._cap_hazard = self._conflict(values, group)
                    if self._cap_hazard is not None:
                        break
        if self._cap_hazard is not None:
            return self._cap_hazard
        cap_owners = self._cap_owners
        seen = {}
        for j in range(n):
            o = _owner(values[j])
            group = cap_owners.get(o)
            prev = seen.get(o)
            if group is not None or prev is not None:
                why = self._conflict(values, (group or []) + (prev or []) + [j])
                if why is not None:
                    return why
            seen.setdefault(o, []).append(j)
        return None

    def _conflict(self, values, positions):
        """Why two of `positions` (arrays with one memory owner) alias a write, or None."""
        for p in positions:
            if p not in self.written:
                continue
            for q in positions:
                if q != p and np.may_share_memory(values[p], values[q]):
                    return (f"{self.names[p]} shares memory with {self.names[q]} and the "
                            f"function writes it in place")
        return None


def memory_owner(a) -> int:
    """An id for the memory `a` looks at: that of the array owning it, found through the
    holder numpy's `as_strided` leaves as the base of a diagonal or unfold view (whose own
    `base` is not the array it views), or `a`'s own."""
    if a.__class__ is not np.ndarray:
        return id(a)
    while True:
        base = a.base
        if base is None:
            return id(a)
        if base.__class__ is not np.ndarray:
            inner = getattr(base, "base", None)  # (as_strided's DummyArray)
            if inner.__class__ is not np.ndarray:
                return id(base)
            base = inner
        a = base


_owner = memory_owner
