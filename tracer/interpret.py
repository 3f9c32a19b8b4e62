"""The reference interpreter: runs a graph op by op through the registry's numpy code."""
from __future__ import annotations

import numpy as np

from eager.ops import OPS

from .ir import Graph, Var


def run_graph(graph: Graph, args) -> list:
    """Evaluate `graph` on arrays for its inputs then its captures; returns its results."""
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
        if e.op == "cond":
            outs = _run_cond(e, vals)
        elif e.op == "while_loop":
            outs = _run_while(e, vals)
        else:
            out = OPS[e.op].impl(*vals, **e.params)
            if out.__class__ is not np.ndarray:
                out = np.asarray(out)
            outs = (out,)
        for v, o in zip(e.outs, outs):
            env[id(v)] = o
    return [None if x is None else read(x) for x in graph.results]


def _run_cond(e, vals):
    p = e.params
    pred = bool(vals[0])
    n_ops = p["n_operands"]
    ops_ = vals[1:1 + n_ops]
    n_true = len(p["true_graph"].captures)
    true_caps = vals[1 + n_ops:1 + n_ops + n_true]
    false_caps = vals[1 + n_ops + n_true:]
    if pred:
        return run_graph(p["true_graph"], list(ops_) + list(true_caps))
    return run_graph(p["false_graph"], list(ops_) + list(false_caps))


def _run_while(e, vals):
    p = e.params
    n = p["n_carry"]
    carry = list(vals[:n])
    n_cond = len(p["cond_graph"].captures)
    cond_caps = list(vals[n:n + n_cond])
    body_caps = list(vals[n + n_cond:])
    while bool(run_graph(p["cond_graph"], carry + cond_caps)[0]):
        carry = run_graph(p["body_graph"], carry + body_caps)
    return carry


class InterpretedProgram:
    """The 'interpret' backend's executable."""

    kernels: tuple = ()

    def __init__(self, graph: Graph):
        self.graph = graph

    def __call__(self, args):
        return run_graph(self.graph, args)

    def describe(self) -> str:
        return "backend: interpret (numpy, op by op)"


def compile_interpret(graph: Graph) -> InterpretedProgram:
    return InterpretedProgram(graph)
