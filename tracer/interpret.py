"""The reference interpreter: runs a graph op by op through the registry's numpy code."""
from __future__ import annotations

import weakref

import numpy as np

from eager.dispatch import quiet
from eager.ops import OPS

from .errors import step_error
from .ir import Graph, Var
from .symbolic import bind_params, binder, check_nonempty, nonempty_checks, param_has_dims

# graph -> (bind(args) -> sizes, ids of equations whose params hold symbolic dims,
#           run-time checks of max reductions over symbolic axes), or None
_SYMBOLIC: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def symbolic_plan(graph: Graph):
    """How to run `graph` with symbolic dimensions (None when it has none)."""
    try:
        return _SYMBOLIC[graph]
    except KeyError:
        pass
    bind = binder(graph)
    plan = None
    if bind is not None:
        plan = (bind, {id(e) for e in graph.eqns
                       if any(param_has_dims(v) for v in e.params.values())},
                nonempty_checks(graph))
    _SYMBOLIC[graph] = plan
    return plan


def run_graph(graph: Graph, args, sizes: dict | None = None, on_eqn=None) -> list:
    """Evaluate `graph` on arrays for its inputs then its captures; returns its results.

    Symbolic dimensions are bound from the arguments (or given as `sizes` by an enclosing
    graph) and substituted into the parameters that hold them. `on_eqn(eqn, outs)`, when
    given, sees each equation's values as they are computed (check mode records them)."""
    plan = symbolic_plan(graph)
    bound_eqns = ()
    if plan is not None:
        if sizes is None:
            sizes = plan[0](args)
        bound_eqns = plan[1]
        check_nonempty(plan[2], sizes)
    env = {}
    for v, a in zip(tuple(graph.inputs) + tuple(graph.captures), args):
        env[id(v)] = a
    for v, value in graph.consts:
        env[id(v)] = value

    def read(x):
        if isinstance(x, Var):
            return env[id(x)]
        return x.value

    for e in graph.eqns:
        vals = [read(x) for x in e.inputs]
        op = OPS[e.op]
        if op.control:
            outs = op.run(e, vals, sizes)
        else:
            params = bind_params(e.params, sizes) if id(e) in bound_eqns else e.params
            try:
                out = quiet(op.impl)(*vals, **params)
            except IndexError as exc:  # (an index out of range: named as eager names it;
                if op.raises:            # a value check's own error stays as it is)
                    raise
                raise step_error(exc, e) from exc
            if out.__class__ is not np.ndarray:
                out = np.asarray(out)
            outs = (out,)
        for v, o in zip(e.outs, outs):
            env[id(v)] = o
        if on_eqn is not None:
            on_eqn(e, outs)
    return [None if x is None else read(x) for x in graph.results]


def run_cond(e, vals, sizes=None) -> list:
    """Run `cond` equation `e` on the arrays `vals` of its inputs: the branch its predicate
    picks, through the interpreter (a backend's way to run a cond it does not compile).
    `sizes`: the enclosing graph's bound symbolic sizes."""
    p = e.params
    pred = bool(vals[0])
    n_ops = p["n_operands"]
    ops_ = vals[1:1 + n_ops]
    n_true = len(p["true_graph"].captures)
    true_caps = vals[1 + n_ops:1 + n_ops + n_true]
    false_caps = vals[1 + n_ops + n_true:]
    if pred:
        return run_graph(p["true_graph"], list(ops_) + list(true_caps), sizes)
    return run_graph(p["false_graph"], list(ops_) + list(false_caps), sizes)


def run_while(e, vals, sizes=None) -> list:
    """Run `while_loop` equation `e` on the arrays `vals` of its inputs (as `run_cond`)."""
    p = e.params
    n = p["n_carry"]
    carry = list(vals[:n])
    n_cond = len(p["cond_graph"].captures)
    cond_caps = list(vals[n:n + n_cond])
    body_caps = list(vals[n + n_cond:])
    while bool(run_graph(p["cond_graph"], carry + cond_caps, sizes)[0]):
        carry = run_graph(p["body_graph"], carry + body_caps, sizes)
    return carry


class InterpretedProgram:
    """The 'interpret' backend's executable."""

    kernels: tuple = ()
    dest_updates: tuple = ()  # (no update is written into a target's array)

    def __init__(self, graph: Graph):
        self.graph = graph

    def __call__(self, args):
        return run_graph(self.graph, args)

    def describe(self) -> str:
        return "backend: interpret (numpy, op by op)"


def compile_interpret(graph: Graph) -> InterpretedProgram:
    return InterpretedProgram(graph)
