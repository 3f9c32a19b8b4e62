"""Data-dependent control flow: `cond` and `while_loop`.

Outside a trace (or with a concrete predicate) they run as plain Python.  Inside
a trace each branch/body is traced into a sub-graph of its own, and one `cond`
or `while_loop` equation holding the sub-graphs is recorded; tensors from the
enclosing trace that a body uses become that sub-graph's captures.
"""
from __future__ import annotations

from eager import dispatch
from eager.ops import register
from eager.tensor import Tensor

from .interpret import run_cond, run_while
from .ir import Graph, verify
from .pytree import flatten, unflatten
from .trace import Trace, TracedValue, TracingError, _where, current_trace


def _is_traced(x) -> bool:
    return isinstance(x, Tensor) and x._data.__class__ is TracedValue


def _trace_body(parent: Trace, name: str, fn, operands: list, op_names: list):
    """Trace `fn(*operands)` as a sub-graph; returns (graph, out_tree, outer operands)."""
    sub = Trace(name, parent=parent)
    inner = []
    for t, n in zip(operands, op_names):
        var = sub.add_input(_type(t), n)
        inner.append(sub.traced_tensor(var))
    with sub:
        out = fn(*inner)
        leaves = []
        tree = flatten(out, leaves, "out", [])
        for x in leaves:
            if not isinstance(x, Tensor):
                raise TracingError(f"{_where()}: {name} must return tensors")
        outputs = tuple(sub.lift(x) for x in leaves)
        _refuse_gradients(name, list(operands) + leaves)
    graph = Graph(name=name, inputs=tuple(sub.inputs),
                  captures=tuple(v for _, v in sub.outer_captures), consts=tuple(sub.consts),
                  eqns=tuple(sub.eqns), outputs=outputs, input_names=tuple(sub.input_names))
    verify(graph)
    return graph, tree, [o for o, _ in sub.outer_captures]


class GradientThroughControlFlow(TracingError):
    """A cond/while body needs gradients; @function then runs that signature eagerly."""


def _refuse_gradients(name: str, tensors: list):
    # The cond / while_loop equation has no vjp yet: its results get no grad_fn, so a
    # backward through them would silently leave out the branch's contribution.
    if dispatch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        raise GradientThroughControlFlow(
            f"{_where()}: gradients cannot flow through tracer.cond / tracer.while_loop yet, "
            f"and the {name} would need them (its operands or results require grad). Run "
            f"it under eager.no_grad() or .detach() its operands if no gradient is needed, "
            f"or use eager.where(pred, a, b) to select between both computed values")


def _type(t):
    from eager.ops import TensorType

    return TensorType(tuple(t.shape), t.dtype)


def _as_operand(parent: Trace, t: Tensor):
    return parent.lift(t)


def cond(pred, true_fn, false_fn, *operands):
    """`true_fn(*operands)` if `pred` else `false_fn(*operands)`, traceable when `pred` is.

    >>> y = tracer.cond(x.sum() > 0, lambda v: v * 2, lambda v: -v, x)
    """
    tr = current_trace()
    if tr is None or not _is_traced(pred):
        return true_fn(*operands) if bool(pred) else false_fn(*operands)
    if pred.shape not in ((), (1,)) or pred.dtype.kind != "b":
        raise TracingError(f"{_where()}: tracer.cond needs a bool scalar predicate, got "
                           f"{_type(pred)}; reduce it, e.g. x.sum() > 0, or (x > 0).amin() for "
                           f"'all' (tensors have no .all())")
    for o in operands:
        if not isinstance(o, Tensor):
            raise TracingError(f"{_where()}: tracer.cond operands must be tensors; pass "
                               f"Python values through the branch functions' closures")
    names = [f"op{i}" for i in range(len(operands))]
    tg, ttree, tcaps = _trace_body(tr, "true_branch", true_fn, list(operands), names)
    fg, ftree, fcaps = _trace_body(tr, "false_branch", false_fn, list(operands), names)
    if ttree != ftree:
        raise TracingError(f"{_where()}: tracer.cond branches return different structures "
                           f"({ttree} vs {ftree}); both must return the same tensors")
    ttypes = [v.type for v in tg.outputs]
    ftypes = [v.type for v in fg.outputs]
    if ttypes != ftypes:
        raise TracingError(
            f"{_where()}: tracer.cond branches return different types: true_fn gives "
            f"{', '.join(map(str, ttypes))} but false_fn gives {', '.join(map(str, ftypes))}; "
            f"make them agree (cast or reshape one branch)")
    pv = tr.lift(pred)
    ops_ = tuple(tr.lift(o) for o in operands)
    inputs = (pv,) + ops_ + tuple(tcaps) + tuple(fcaps)
    outs = tr.record("cond", inputs, {"true_graph": tg, "false_graph": fg,
                                      "n_operands": len(operands)}, tuple(ttypes))
    return unflatten(ttree, iter(tr.traced_tensor(v) for v in outs))


def while_loop(cond_fn, body_fn, loop_vars):
    """Run `loop_vars = body_fn(*loop_vars)` while `cond_fn(*loop_vars)`, like tf.while_loop.

    `loop_vars` is a tuple of tensors; `body_fn` returns a tuple of the same types.
    """
    if not isinstance(loop_vars, (tuple, list)):
        raise TypeError("tracer.while_loop: loop_vars must be a tuple of tensors")
    loop_vars = tuple(loop_vars)
    tr = current_trace()
    if tr is None or not any(_is_traced(v) for v in loop_vars):
        if tr is not None:
            probe = cond_fn(*loop_vars)
            if _is_traced(probe):
                return _traced_while(tr, cond_fn, body_fn, loop_vars)
        while bool(cond_fn(*loop_vars)):
            loop_vars = tuple(body_fn(*loop_vars))
        return loop_vars
    return _traced_while(tr, cond_fn, body_fn, loop_vars)


def _traced_while(tr, cond_fn, body_fn, loop_vars):
    for v in loop_vars:
        if not isinstance(v, Tensor):
            raise TracingError(f"{_where()}: tracer.while_loop loop_vars must be tensors")
    names = [f"v{i}" for i in range(len(loop_vars))]
    cg, ctree, ccaps = _trace_body(tr, "loop_cond", lambda *a: cond_fn(*a), list(loop_vars),
                                   names)
    if len(cg.outputs) != 1 or cg.outputs[0].type.dtype.kind != "b" or \
            cg.outputs[0].type.shape not in ((), (1,)):
        raise TracingError(f"{_where()}: tracer.while_loop cond_fn must return one bool "
                           f"scalar tensor")
    bg, btree, bcaps = _trace_body(tr, "loop_body", lambda *a: tuple(body_fn(*a)),
                                   list(loop_vars), names)
    in_types = [_type(v) for v in loop_vars]
    out_types = [v.type for v in bg.outputs]
    if in_types != out_types:
        raise TracingError(
            f"{_where()}: tracer.while_loop body_fn must return the loop_vars' types "
            f"({', '.join(map(str, in_types))}) but returns {', '.join(map(str, out_types))}")
    inputs = tuple(tr.lift(v) for v in loop_vars) + tuple(ccaps) + tuple(bcaps)
    outs = tr.record("while_loop", inputs, {"cond_graph": cg, "body_graph": bg,
                                            "n_carry": len(loop_vars)}, tuple(out_types))
    return tuple(tr.traced_tensor(v) for v in outs)


# --------------------------------------------------------------------------------------
# the registry rows: what the verifier, the passes, autodiff, the interpreter and codegen's
# runner look up (OpDef.control, OpDef.run) instead of special-casing the two names

def _cond_infer(*types, true_graph, false_graph, n_operands):
    return tuple(v.type for v in true_graph.outputs)


def _while_infer(*types, cond_graph, body_graph, n_carry):
    return tuple(v.type for v in body_graph.outputs)


register("cond", "control", -1, None, _cond_infer,
         params=("true_graph", "false_graph", "n_operands"), control=True, run=run_cond,
         doc="tracer.cond: inputs (pred, *operands, *true captures, *false captures); runs "
             "true_graph or false_graph on the operands and that branch's captures.")
register("while_loop", "control", -1, None, _while_infer,
         params=("cond_graph", "body_graph", "n_carry"), control=True, run=run_while,
         doc="tracer.while_loop: inputs (*carry, *cond captures, *body captures); runs "
             "body_graph on the carry while cond_graph gives True.")
