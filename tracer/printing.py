"""Text and Graphviz renderings of graphs.

The text form is deterministic (pinned in tests):

    def f(%x: f32[4,8]) -> f32[4,8]:
      captures: %w: f32[8,8] = self.weight
      %0 = matmul %x, %w                      f32[4,8]    model.py:12
      return %0
"""
from __future__ import annotations

import numpy as np

from eager.ops import Dim, TensorType

from .ir import Graph  # (ir imports this module lazily, for str(graph): see test_imports)

_COLUMN = 44


def _fmt_param(v) -> str:
    if isinstance(v, Dim):
        return v.display

    if isinstance(v, np.dtype):
        return {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64",
                "bool": "bool"}.get(v.name, v.name)
    if isinstance(v, Graph):
        return v.name
    if isinstance(v, tuple):
        return "(" + ",".join(_fmt_param(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, slice):
        return f"{v.start}:{v.stop}:{v.step}"
    return repr(v)


def format_eqn(e, indent: str = "  ") -> list[str]:
    params = {k: v for k, v in e.params.items() if not isinstance(v, Graph)}
    head = e.op
    if params:
        head += "[" + ", ".join(f"{k}={_fmt_param(v)}" for k, v in params.items()) + "]"
    outs = e.outs
    lhs = ", ".join(repr(o) for o in outs)
    text = f"{indent}{lhs} = {head} " + ", ".join(repr(x) for x in e.inputs)
    types = ", ".join(str(o.type) for o in outs)
    pad = max(1, _COLUMN - len(text))
    lines = [f"{text.rstrip()}{' ' * pad}{types:<16} {e.loc}".rstrip()]
    for k, v in e.params.items():
        if isinstance(v, Graph):
            lines.append(f"{indent}  {k}:")
            lines.extend(format_graph(v, indent + "    ").splitlines())
    return lines


def format_graph(g, indent: str = "") -> str:
    args = ", ".join(f"%{v.name}: {v.type}" for v in g.inputs)
    rets = ", ".join(str(v.type) for v in g.outputs)
    if len(g.outputs) != 1:
        rets = f"({rets})"
    lines = [f"{indent}def {g.name}({args}) -> {rets}:"]
    inner = indent + "  "
    for v, name in zip(g.captures, g.capture_names or [""] * len(g.captures)):
        src = f" = {name}" if name else ""
        lines.append(f"{inner}capture %{v.name}: {v.type}{src}")
    for v, value in g.consts:
        lines.append(f"{inner}const %{v.name}: {v.type}")
    for e in g.eqns:
        lines.extend(format_eqn(e, inner))
    if g.updates:
        for target, v in zip(g.update_targets, g.updates):
            lines.append(f"{inner}update {_target_name(g, target)} <- {v!r}")
    lines.append(f"{inner}return " + ", ".join(repr(v) for v in g.outputs))
    return "\n".join(lines)


def _target_name(g, target) -> str:
    if isinstance(target, tuple):
        # The index means a capture, an input or a piece of new state depending on the kind
        # (see tracer.tracing._collect_updates); indexing captures for all of them crashed.
        kind, i = target
        if kind in ("data", "grad"):
            return f"%{g.captures[i].name}.{kind}"
        if kind == "input":
            return f"%{g.inputs[i].name}"
        if kind == "input_grad":
            return f"%{g.inputs[i].name}.grad"
        if kind == "created":
            return f"new_state[{i}]"
        return f"{kind}[{i}]"
    return f"%{g.captures[target].name}"


def graph_to_dot(g) -> str:
    """Graphviz DOT text: one node per value, one box per equation."""
    lines = [f'digraph "{g.name}" {{', "  rankdir=TB;", '  node [fontname="monospace"];']
    # Node ids numbered in order of appearance (not id()), so the text is deterministic.
    ids: dict = {}

    def vid(v):
        return f'"v{ids.setdefault(id(v), len(ids))}"'

    for v in g.inputs:
        lines.append(f'  {vid(v)} [label="%{v.name}\\n{v.type}", shape=ellipse, '
                     f'style=filled, fillcolor="#dde8ff"];')
    for v, name in zip(g.captures, g.capture_names or [""] * len(g.captures)):
        lines.append(f'  {vid(v)} [label="%{v.name}\\n{v.type}\\n{name}", shape=ellipse, '
                     f'style=filled, fillcolor="#e8ffdd"];')
    for v, _ in g.consts:
        lines.append(f'  {vid(v)} [label="const %{v.name}\\n{v.type}", shape=ellipse];')
    for i, e in enumerate(g.eqns):
        node = f'"e{i}"'
        lines.append(f'  {node} [label="{e.op}\\n{e.loc}", shape=box];')
        for k, x in enumerate(e.inputs):
            if hasattr(x, "name"):
                lines.append(f"  {vid(x)} -> {node};")
            else:
                lit = f'"l{i}_{k}"'
                lines.append(f'  {lit} [label="{x!r}", shape=plaintext];')
                lines.append(f"  {lit} -> {node};")
        for o in e.outs:
            lines.append(f'  {vid(o)} [label="%{o.name}\\n{o.type}", shape=ellipse];')
            lines.append(f"  {node} -> {vid(o)};")
    for i, v in enumerate(g.outputs):
        lines.append(f'  "out{i}" [label="return {i}", shape=doublecircle];')
        if hasattr(v, "name"):
            lines.append(f'  {vid(v)} -> "out{i}";')
    lines.append("}")
    return "\n".join(lines)


__all__ = ["format_graph", "format_eqn", "graph_to_dot", "TensorType"]
