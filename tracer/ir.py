"""The IR: a flat, typed, first-order list of equations (jaxpr-style).

A `Graph` has
  * `inputs`    - the function's tensor arguments, in flattened order;
  * `captures`  - tensors the function reads from outside (parameters, globals,
                  closure variables): read at call time, never frozen;
  * `consts`    - arrays created while tracing (e.g. `arange` in cross_entropy);
  * `eqns`      - `out: type = op[params] inputs` with the user's file:line;
  * `outputs`   - returned values, then `updates`: new values of captured tensors
                  that the function changed in place (functionalized mutation);
  * `update_targets` - per update, `(UpdateKind, index)`: what it is written into;
  * `grad_captures`  - {capture index of a tensor: capture index of its `.grad`}, where
                  the trace read a captured tensor's `.grad`.

What a backend may rely on is written down in tracer.backends (the backend contract).

Operands are `Var`s or `Literal`s (0-d constants, printed inline).  Ops are
registry names (`eager.ops.OPS`) or the control-flow ops `cond` and
`while_loop`, whose params hold sub-graphs.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

from eager.dtypes import SHORT_NAMES, is_floating
from eager.ops import OPS, TensorType


class UpdateKind(str, enum.Enum):
    """What an update of a graph is written into after the call: the kind half of each
    ``Graph.update_targets`` entry ``(kind, index)``. (A str: equal to its value.)"""

    DATA = "data"              # a captured tensor's data; index: its capture
    GRAD = "grad"              # a captured tensor's .grad; index: the tensor's capture
    CREATED = "created"        # state the trace created (optimizer state); index: its order
    INPUT = "input"            # an argument changed in place; index: the flattened argument
    INPUT_GRAD = "input_grad"  # an argument's .grad; index: the flattened argument

    def __str__(self) -> str:
        return self.value

    __format__ = str.__format__


@dataclass(frozen=True, eq=False)
class Var:
    """An SSA value. Identity is object identity; `name` is only for printing."""

    name: str
    type: TensorType

    def __repr__(self) -> str:
        return f"%{self.name}"


@dataclass(frozen=True, eq=False)
class Literal:
    """A 0-d constant operand."""

    value: np.ndarray
    type: TensorType

    @staticmethod
    def of(value, dtype) -> "Literal":
        arr = np.array(value, dtype=dtype)
        return Literal(arr, TensorType((), arr.dtype))

    def key(self):
        return ("lit", self.type.dtype.str, self.value.tobytes())

    def __repr__(self) -> str:
        v = self.value.item()
        if is_floating(self.type.dtype):
            text = repr(float(v)) if self.type.dtype.itemsize == 8 else str(np.float32(v))
        elif self.type.dtype.kind == "b":
            text = "True" if v else "False"
        else:
            text = str(int(v))
        return f"{text}:{SHORT_NAMES[self.type.dtype]}"


Operand = "Var | Literal"


@dataclass(frozen=True, eq=False)
class Eqn:
    op: str
    inputs: tuple
    params: dict
    out: "Var | tuple"  # a tuple of Vars only for the control-flow ops
    loc: str = ""

    @property
    def outs(self) -> tuple:
        return self.out if isinstance(self.out, tuple) else (self.out,)

    def param_key(self):
        return tuple(sorted((k, _hashable(v)) for k, v in self.params.items()))


def _hashable(v):
    if isinstance(v, Graph):
        return ("graph", id(v))
    if isinstance(v, np.dtype):
        return ("dtype", v.str)
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(x) for x in v)
    return v


@dataclass(frozen=True, eq=False)
class Graph:
    name: str
    inputs: tuple            # Var per flattened tensor argument
    captures: tuple = ()     # Var per captured tensor
    consts: tuple = ()       # (Var, ndarray) pairs
    eqns: tuple = ()
    outputs: tuple = ()      # Var | Literal per flattened output
    updates: tuple = ()      # Var | Literal per mutated capture (see `update_targets`)
    update_targets: tuple = ()  # (UpdateKind, index) per update
    input_names: tuple = ()
    capture_names: tuple = ()
    meta: dict = field(default_factory=dict)
    # capture index of a tensor -> capture index of its .grad (where the trace read it)
    grad_captures: dict = field(default_factory=dict)

    # -------------------------------------------------------------- helpers
    def replace(self, **changes) -> "Graph":
        fields = dict(name=self.name, inputs=self.inputs, captures=self.captures,
                      consts=self.consts, eqns=self.eqns, outputs=self.outputs,
                      updates=self.updates, update_targets=self.update_targets,
                      input_names=self.input_names, capture_names=self.capture_names,
                      meta=self.meta, grad_captures=self.grad_captures)
        fields.update(changes)
        return Graph(**fields)

    @property
    def results(self) -> tuple:
        """Everything the graph hands back: outputs then updates."""
        return tuple(self.outputs) + tuple(self.updates)

    def __str__(self) -> str:
        from .printing import format_graph

        return format_graph(self)

    def to_dot(self) -> str:
        from .printing import graph_to_dot

        return graph_to_dot(self)

    def use_counts(self) -> dict:
        """{id(var): how many times an equation or the results read it}."""
        uses: dict = {}
        for x in [x for e in self.eqns for x in e.inputs] + list(self.results):
            if isinstance(x, Var):
                uses[id(x)] = uses.get(id(x), 0) + 1
        return uses

    def op_counts(self) -> dict:
        counts: dict = {}
        for e in self.eqns:
            counts[e.op] = counts.get(e.op, 0) + 1
        return counts


def may_raise(eqn: Eqn) -> bool:
    """True when `eqn` checks values as the program runs and may raise there (its op's row
    says `raises`, or a sub-graph of a control op holds such an equation)."""
    op = OPS.get(eqn.op)
    if op is None:
        return False
    if op.raises:
        return True
    return op.control and any(isinstance(v, Graph) and any(map(may_raise, v.eqns))
                              for v in eqn.params.values())


def infer_eqn(op: str, in_types, params):
    """The output type of an equation, from the registry (a tuple for a control op's rows)."""
    return OPS[op].infer(*in_types, **params)


class VerifyError(AssertionError):
    pass


def verify(graph: Graph) -> Graph:
    """Re-infer every equation's type from the registry; fail loudly on any mismatch.

    Also checks SSA form: every operand is defined before use, exactly once.
    """
    defined = set()
    for v in tuple(graph.inputs) + tuple(graph.captures) + tuple(c for c, _ in graph.consts):
        if id(v) in defined:
            raise VerifyError(f"{graph.name}: {v!r} is defined twice")
        defined.add(id(v))
    for i, e in enumerate(graph.eqns):
        for x in e.inputs:
            if isinstance(x, Var) and id(x) not in defined:
                raise VerifyError(f"{graph.name}: eqn {i} ({e.op}) uses {x!r} before it is "
                                  f"defined")
        if e.op not in OPS:
            raise VerifyError(f"{graph.name}: eqn {i} uses unknown op {e.op!r}")
        try:
            expect = infer_eqn(e.op, [x.type for x in e.inputs], e.params)
        except Exception as exc:  # noqa: BLE001
            raise VerifyError(f"{graph.name}: eqn {i} ({e.op} at {e.loc}) fails type "
                              f"inference: {exc}") from exc
        outs = e.out if isinstance(e.out, tuple) else (e.out,)
        expects = expect if isinstance(expect, tuple) else (expect,)
        if len(outs) != len(expects):
            raise VerifyError(f"{graph.name}: eqn {i} ({e.op}) has {len(outs)} outputs, "
                              f"expected {len(expects)}")
        for got, want in zip(outs, expects):
            if tuple(want.shape) != tuple(got.type.shape) or want.dtype != got.type.dtype:
                raise VerifyError(f"{graph.name}: eqn {i} ({e.op} at {e.loc}) is typed "
                                  f"{got.type} but the registry infers {want}")
            if id(got) in defined:
                raise VerifyError(f"{graph.name}: {got!r} is defined twice")
            defined.add(id(got))
        for sub in e.params.values():
            if isinstance(sub, Graph):
                verify(sub)
    for x in graph.results:
        if isinstance(x, Var) and id(x) not in defined:
            raise VerifyError(f"{graph.name}: result {x!r} is never defined")
    return graph
