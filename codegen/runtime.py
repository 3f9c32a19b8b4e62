"""The 'numba' backend's entry: a graph becomes a `Program` (codegen.program: its steps as
data, run by one generated runner, codegen.runner), or, when some kernel cannot take a
symbolic size at run time, a `PerSizeProgram`.

Emission refuses (SymbolicDimError) where a symbolic size would have to be a stride - an
array it indexes has the size after its leading dimension, such as a (4, N0) result - or
a compile-time constant (a row buffer of that length); such a graph runs as
`PerSizeProgram`: the whole program specialized and compiled once per distinct size,
cached. Symbolic loops are never prange'd.
"""
from __future__ import annotations

import threading

from tracer import logs
from tracer.ir import Graph
from tracer.symbolic import (SymbolicDimError, binder, check_nonempty, graph_dims,
                             nonempty_checks, substitute_graph)

from . import heap
from .fallback import FallbackWarning
from .program import Kernel, Program


class PerSizeProgram:
    """A graph with symbolic dims that some kernel cannot take as run-time sizes: one
    `Program` per distinct binding of the sizes, specialized and compiled on first use
    (kernels then have literal shapes; their modules land in the on-disk cache as usual)."""

    def __init__(self, graph: Graph, why: str):
        self.graph = graph
        self.why = why
        self._bind = binder(graph)
        self._dims = graph_dims(graph)
        # max reductions over symbolic axes: an empty extent raises as the interpreter's
        # does (then tracer.function runs the call eagerly: softmax over an empty dim is
        # empty), not numpy's error from the program specialized to it
        self._nonempty = nonempty_checks(graph)
        self._programs: dict = {}
        self._lock = threading.Lock()
        self._last = None

    @property
    def kernels(self) -> list:
        """The kernels of the specialization used last (none before the first call)."""
        return self._last.kernels if self._last is not None else []

    dest_updates = ()  # (each size's Program plans its own in-place updates)

    def references(self, slot: int, a) -> int:
        """`Program.references`, over every size's program."""
        return sum(p.references(slot, a) for p in list(self._programs.values()))

    def __call__(self, args, dests=None):
        sizes = self._bind(args)
        if self._nonempty:
            check_nonempty(self._nonempty, sizes)
        key = tuple(sizes[d] for d in self._dims)
        program = self._programs.get(key)
        if program is None:
            with self._lock:
                program = self._programs.get(key)
                if program is None:
                    program = Program(substitute_graph(self.graph, sizes))
                    self._programs[key] = program
        self._last = program
        return program(args)

    def describe(self) -> str:
        dims = ", ".join(map(str, self._dims))
        text = (f"symbolic sizes {dims}: compiled per size ({self.why}); "
                f"{len(self._programs)} size(s) so far")
        if self._last is not None:
            text += "\n" + self._last.describe()
        return text


def compile_numba(graph: Graph):
    """The 'numba' backend: `graph`'s executable, `program(args, dests=None)` -> results."""
    heap.keep_freed_memory()  # (once per process: see codegen/heap.py)
    try:
        program = Program(graph)
    except SymbolicDimError as exc:
        if binder(graph) is None:
            raise
        where = getattr(exc, "kernel", None)
        program = PerSizeProgram(graph, f"{f'kernel {where}' if where else 'fusion'}: "
                                        f"{exc.detail}")
        logs.log("fusion", lambda: f"{graph.name}: {program.describe()}")
        return program
    logs.log("fusion", lambda: f"{graph.name}:\n{program.describe()}")
    return program


__all__ = ["FallbackWarning", "Kernel", "PerSizeProgram", "Program", "compile_numba"]
