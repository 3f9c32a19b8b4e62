"""Symbolic dimensions: the `None`s of an input_signature, one trace for every size.

    @tracer.function(input_signature=[TensorSpec((None, 4), eager.float32)])
    def f(x): ...

traces `x` as `f32[N0,4]`: `N0` is a `SymbolicDim`, a size that is bound to the
argument's actual size at every call.  Each `None` is its own symbol (`N0`,
`N1`, ... in argument order), even at the same position of two arguments:
nothing says they agree, so broadcasting one against the other is refused
while tracing rather than trusted.  A dimension given as a string
(`TensorSpec(("batch", 4))`) is one symbol wherever that name appears, and the
call's signature check makes those sizes agree.

While tracing, `x.shape[0]` is the `SymbolicDim` itself.  It passes through
shape-polymorphic ops (elementwise, reductions, matmul rows, permute, `:`
slices, reshapes that keep it whole); anything that needs its value - `int()`,
arithmetic, a reshape that merges it, a slice or `cat` along it, `mean` over it,
creating a tensor of that size - raises `tracer.TracingError` naming the line.

At run time a program binds each symbol from its inputs' shapes (`binder`),
and substitutes the sizes into op parameters that hold symbols (a
`broadcast_to` made by a gradient rule, say) before running them.
"""
from __future__ import annotations

import numpy as np

from eager.ops import Dim, TensorType

from .errors import TracingError, _where

_ADVICE = ("Instead, drop that None from the input_signature (a fixed size traces once per "
           "size), or keep the computation shape-polymorphic")


class SymbolicDim(Dim):
    """A Dim of a trace: needing its value raises TracingError at the user's line."""

    __slots__ = ()

    def unknown(self, what: str):
        raise SymbolicDimError(
            f"{_where()}: {what} needs the value of the symbolic dimension {self.display} "
            f"({'named in' if self.label else 'a None in'} the input_signature), which is "
            f"known only at run time. {_ADVICE}.",
            what)


class SymbolicDimError(TracingError):
    """A TracingError raised for a symbolic dimension (`detail` says what needed it)."""

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail


def symbolic_error(op: str, in_types, exc: Exception) -> TracingError:
    """The TracingError for an op whose shape rule failed on symbolic shapes."""
    detail = getattr(exc, "detail", None) or str(exc).split(" (at ")[0]
    shapes = ", ".join(str(t) for t in in_types)
    return TracingError(f"{_where()}: {op} on {shapes} cannot be traced with symbolic "
                        f"dimensions (None in the input_signature): {detail}. {_ADVICE}.")


def signature_type(spec, symbols: dict) -> TensorType:
    """The traced type of an argument with TensorSpec `spec`: a new symbol per None, one
    symbol per dimension name (`symbols` collects them over the arguments, in order)."""
    shape = []
    for d in spec.shape:
        if d is None or isinstance(d, str):
            key = object() if d is None else d
            sym = symbols.get(key)
            if sym is None:
                # Named N0, N1, ... in generated kernels, where a user's name could clash
                # with an identifier; printed as the user's name when there is one.
                sym = symbols[key] = SymbolicDim(f"N{len(symbols)}",
                                                 d if isinstance(d, str) else None)
            shape.append(sym)
        else:
            shape.append(int(d))
    return TensorType(tuple(shape), spec.dtype)


def param_has_dims(v) -> bool:
    if isinstance(v, Dim):
        return True
    if isinstance(v, (tuple, list)):
        return any(param_has_dims(x) for x in v)
    return False


def bind_param(v, sizes: dict):
    """`v` with every Dim replaced by its bound size (tuples rebuilt, the rest as is)."""
    if isinstance(v, Dim):
        return sizes[v]
    if isinstance(v, tuple):
        return tuple(bind_param(x, sizes) for x in v)
    if isinstance(v, list):
        return [bind_param(x, sizes) for x in v]
    return v


def bind_params(params: dict, sizes: dict) -> dict:
    return {k: bind_param(v, sizes) for k, v in params.items()}


def bind_shape(shape, sizes: dict) -> tuple:
    return tuple(sizes[d] if isinstance(d, Dim) else d for d in shape)


def graph_dims(graph) -> list:
    """Every Dim a graph (and its sub-graphs) uses, in order of first appearance."""
    from .ir import Graph

    seen: dict = {}

    def note_shape(shape):
        for d in shape:
            if isinstance(d, Dim):
                seen.setdefault(d, None)

    def note_param(v):
        if isinstance(v, Dim):
            seen.setdefault(v, None)
        elif isinstance(v, (tuple, list)):
            for x in v:
                note_param(x)
        elif isinstance(v, Graph):
            for d in graph_dims(v):
                seen.setdefault(d, None)

    for v in tuple(graph.inputs) + tuple(graph.captures):
        note_shape(v.type.shape)
    for e in graph.eqns:
        for o in e.outs:
            note_shape(o.type.shape)
        for p in e.params.values():
            note_param(p)
    return list(seen)


def binder(graph):
    """None if `graph` has no symbolic dims, else `bind(args) -> {Dim: size}` reading each
    symbol from the first input (or capture) that has it; the signature check has made
    the call's shapes consistent.  A symbol no input carries cannot be bound: TracingError."""
    dims = graph_dims(graph)
    if not dims:
        return None
    where = {}
    for i, v in enumerate(tuple(graph.inputs) + tuple(graph.captures)):
        for axis, d in enumerate(v.type.shape):
            if isinstance(d, Dim) and d not in where:
                where[d] = (i, axis)
    missing = [d for d in dims if d not in where]
    plan = [(d, i, axis) for d, (i, axis) in where.items()]

    def bind(args) -> dict:
        if missing:  # (a sub-graph is given its sizes by the enclosing graph instead)
            raise TracingError(
                f"{graph.name}: symbolic dimension(s) {', '.join(map(str, missing))} appear "
                f"in the graph but in none of its inputs, so their sizes cannot be bound at "
                f"run time. {_ADVICE}.")
        return {d: args[i].shape[axis] for d, i, axis in plan}
    bind.where = where  # {Dim: (argument index, axis)}, for callers that bind inline
    return bind


def nonempty_checks(graph) -> tuple:
    """(Dim, op, axis) for each max/argmax reducing a symbolic axis: eager refuses an empty
    extent there (no identity), which a shape rule can only check at run time."""
    checks = []
    for e in graph.eqns:
        if e.op not in ("amax", "argmax"):
            continue
        shape = e.inputs[0].type.shape
        axes = e.params.get("axes", None)
        if e.op == "argmax":
            axis = e.params["axis"]
            axes = range(len(shape)) if axis is None else (axis,)
        for ax in axes:
            if isinstance(shape[ax], Dim):
                checks.append((shape[ax], e.op, ax))
    return tuple(checks)


def check_nonempty(checks, sizes: dict) -> None:
    from eager.errors import op_error

    for d, op, ax in checks:
        if sizes[d] == 0:
            raise op_error(op, f"cannot reduce over dimension {ax} of size 0 (symbolic "
                           f"dimension {d} is 0 in this call)",
                           hint="max/min of an empty tensor is undefined; check the shape")


def matches(types, arrays) -> bool:
    """Do arrays fit types (symbols: any size, the same size wherever one symbol appears)?"""
    sizes: dict = {}
    for t, a in zip(types, arrays):
        if len(t.shape) != a.ndim or np.dtype(t.dtype) != a.dtype:
            return False
        for d, n in zip(t.shape, a.shape):
            if isinstance(d, Dim):
                if sizes.setdefault(d, n) != n:
                    return False
            elif d != n:
                return False
    return True


def substitute_graph(graph, sizes: dict):
    """A copy of `graph` with every symbol replaced by its size (for backends that
    specialize per size)."""
    from .ir import Eqn, Graph, Var

    env: dict = {}

    def var(v):
        if not isinstance(v, Var):
            return v
        new = env.get(id(v))
        if new is None:
            new = Var(v.name, TensorType(bind_shape(v.type.shape, sizes), v.type.dtype))
            env[id(v)] = new
        return new

    def param(p):
        if isinstance(p, Graph):
            return substitute_graph(p, sizes)
        return bind_param(p, sizes)

    eqns = []
    for e in graph.eqns:
        outs = tuple(var(o) for o in e.outs)
        eqns.append(Eqn(e.op, tuple(var(x) for x in e.inputs),
                        {k: param(p) for k, p in e.params.items()},
                        outs if isinstance(e.out, tuple) else outs[0], e.loc))
    return graph.replace(
        inputs=tuple(var(v) for v in graph.inputs),
        captures=tuple(var(v) for v in graph.captures),
        consts=tuple((var(v), a) for v, a in graph.consts),
        eqns=tuple(eqns),
        outputs=tuple(var(x) if x is not None else None for x in graph.outputs),
        updates=tuple(var(x) if x is not None else None for x in graph.updates))


__all__ = ["SymbolicDim", "SymbolicDimError", "signature_type", "binder", "bind_params",
           "bind_shape", "substitute_graph", "matches", "graph_dims"]
