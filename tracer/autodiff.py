"""IR autodiff: a backward graph for a traced forward graph, compiled ahead of time.

The forward graph is *replayed* equation by equation as eager ops on traced
values that require grad, so the eager autograd engine - with the registry's
vjp rules, which are registry ops themselves - records the backward pass into
the same trace.  That joint graph (outputs and input gradients) is then split:

* the forward program computes the outputs plus the values backward needs
  ("saved"), and
* the backward program computes every input gradient from the saved values
  and the output gradients.

Cheap elementwise values are recomputed in backward instead of saved when
their own inputs are saved anyway (a small version of the min-cut idea of
functorch's partitioner), so fewer and smaller activations stay alive.
"""
from __future__ import annotations

import math

import numpy as np

from eager import autograd
from eager.autograd import Node
from eager.ops import OPS, Dim, TensorType
from eager.tensor import Tensor

from .ir import Eqn, Graph, Literal, Var, verify
from .trace import Trace, TracingError


class BackwardPlan:
    """Forward and backward graphs (and programs) for one differentiable ConcreteFunction."""

    def __init__(self, forward: Graph, backward: Graph, fwd_program, bwd_program,
                 wrt: list, diff_outputs: list, saved_bytes: int, save_all_bytes: int,
                 n_outputs: int, reaches=None):
        self.forward = forward
        self.backward = backward
        self.fwd_program = fwd_program
        self.bwd_program = bwd_program
        self.wrt = wrt                  # ("input", i) or ("capture", i), per gradient
        self.diff_outputs = diff_outputs  # indices of outputs that carry gradients
        self.saved_bytes = saved_bytes
        self.save_all_bytes = save_all_bytes
        self.n_outputs = n_outputs      # forward outputs before the saved values
        self.compile_fn = None          # set by build_plan: compiles backward_for's graphs
        self.optimize = None
        self._per_output: dict = {}     # output index -> (program, kept gradient indices)
        # Per differentiable output, per gradient: does the output's autograd graph reach
        # that input? Eager leaves .grad None for an input an output does not reach.
        self.reaches = reaches

    def backward_for(self, k: int):
        """(program, kept): the backward of a call where only differentiable output `k`
        has a gradient, as eager's autograd runs it: the other outputs' cotangents are
        absent, not zero arrays (0 * inf from x.sqrt() at 0 would put NaN into the
        gradients). The program takes the saved values and that one gradient; it returns
        the gradients of `self.wrt` at the indices `kept` (the others get none)."""
        done = self._per_output.get(k)
        if done is None:
            graph, kept = _one_cotangent(self.backward, len(self.backward.inputs)
                                         - len(self.diff_outputs), k)
            graph = self.optimize(graph)
            done = self._per_output[k] = (self.compile_fn(graph), kept)
        return done

    @property
    def kernels(self):
        return tuple(getattr(self.bwd_program, "kernels", ()))

    def __str__(self):
        n_saved = len(self.forward.outputs) - self.n_outputs
        text = (f"forward (saves {n_saved} values, "
                f"{self.saved_bytes} bytes; saving every forward value would keep "
                f"{self.save_all_bytes}):\n{self.forward}\n")
        describe = getattr(self.fwd_program, "describe", None)
        if describe:
            text += describe() + "\n"
        text += f"backward:\n{self.backward}"
        describe = getattr(self.bwd_program, "describe", None)
        if describe:
            text += "\n" + describe()
        return text


def build_plan(graph: Graph, input_requires_grad, capture_requires_grad, compile_fn,
               optimize) -> BackwardPlan:
    """Derive and compile forward/backward programs for `graph`."""
    for e in graph.eqns:
        if OPS[e.op].control:
            raise TracingError("gradients through tracer.cond / tracer.while_loop are not "
                               "supported in compiled functions yet")
    if graph.updates:
        raise TracingError("a function that both mutates state and returns outputs that need "
                           "gradients is not supported compiled")
    joint, n_out, wrt, diff_outputs, reaches = _joint_graph(graph, input_requires_grad,
                                                            capture_requires_grad)
    joint = optimize(joint)
    fwd, bwd, saved_bytes, all_bytes = _split(joint, n_out, len(diff_outputs))
    fwd = optimize(fwd)
    bwd = optimize(bwd)
    if len(diff_outputs) > 1:
        _refuse_rounding_per_output(bwd, len(diff_outputs))
    plan = BackwardPlan(fwd, bwd, compile_fn(fwd), compile_fn(bwd), wrt, diff_outputs,
                        saved_bytes, all_bytes, n_out, reaches)
    plan.compile_fn, plan.optimize = compile_fn, optimize
    return plan


def _refuse_rounding_per_output(bwd: Graph, n_cotangents: int) -> None:
    """Several outputs need gradients: one CompiledNode per output (`attach`) runs the
    backward once per output and eager adds the results. Eager's autograd adds the outputs'
    gradients first and then runs each op's backward once: where the backward casts to
    float16 / bfloat16 (the vjp of `x.to(bfloat16)`... `.float()`), the rounding of the
    sum is not the sum of the roundings (fuzz program 17501: 30% off, after cancellation)."""
    from eager.dtypes import HALF

    # (a cast of a gradient, not of a forward value the backward recomputes)
    grads = {id(v) for v in bwd.inputs[len(bwd.inputs) - n_cotangents:]}
    for e in bwd.eqns:
        if not any(id(x) in grads for x in e.inputs if isinstance(x, Var)):
            continue
        grads.update(id(o) for o in e.outs)
        if OPS[e.op].converts and e.params.get("dtype") in HALF:
            raise TracingError(
                f"several outputs need gradients and the backward rounds them through a "
                f"{e.params['dtype']} cast ({e.loc or bwd.name}), which eager does once on "
                f"their sum; return one value to backpropagate through (the sum of the "
                f"losses), or keep the half-precision cast outside the function")


def _reached_leaves(t: Tensor) -> set:
    """ids of the leaf tensors whose gradient `t`'s autograd graph would accumulate."""
    if t.grad_fn is None:
        return {id(t)}
    seen, leaves = set(), set()
    stack = [t.grad_fn]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for e in node.edges:
            if isinstance(e, Node):
                stack.append(e)
            elif e is not None:
                leaves.add(id(e))
    return leaves


def _joint_graph(graph: Graph, input_rg, capture_rg):
    tr = Trace(graph.name + "_joint")
    env = {}
    params = []
    for v, rg in zip(graph.inputs, input_rg):
        var = tr.add_input(v.type, v.name)
        env[id(v)] = tr.traced_tensor(var, rg)
        params.append(env[id(v)])
    for v, rg in zip(graph.captures, capture_rg):
        var = tr.add_input(v.type, v.name)
        env[id(v)] = tr.traced_tensor(var, rg)
        params.append(env[id(v)])
    for v, value in graph.consts:
        c = Tensor._wrap(value)
        tr.tensor_created(c)
        env[id(v)] = c

    def read(x):
        if isinstance(x, Var):
            return env[id(x)]
        lit = Tensor._wrap(x.value)
        lit._data.flags.writeable = False
        return lit

    from eager.dispatch import apply

    with tr:
        for e in graph.eqns:
            env[id(e.out)] = apply(OPS[e.op], *[read(x) for x in e.inputs], **e.params)
        outs = [read(x) for x in graph.outputs]
        diff_outputs = [j for j, t in enumerate(outs) if t.requires_grad]
        gvars = []
        for j in diff_outputs:
            var = tr.add_input(outs[j]._data.var.type if isinstance(graph.outputs[j], Var)
                               else TensorType(outs[j].shape, outs[j].dtype), f"g{j}")
            gvars.append(tr.traced_tensor(var))
        wrt_tensors = [t for t in params if t.requires_grad]
        wrt = []
        n_in = len(graph.inputs)
        for k, t in enumerate(params):
            if t.requires_grad:
                wrt.append(("input", k) if k < n_in else ("capture", k - n_in))
        reaches = []
        for j in diff_outputs:
            leaves = _reached_leaves(outs[j])
            reaches.append(tuple(id(t) in leaves for t in wrt_tensors))
        grads = autograd.grad([outs[j] for j in diff_outputs], wrt_tensors,
                              grad_outputs=gvars, allow_unused=True)
        results = [tr.lift(t) for t in outs]
        grad_results = []
        for t, g in zip(wrt_tensors, grads):
            if g is None:
                from eager import functions as F

                g = F.expand(F.const(0, t.dtype), t.shape)
            grad_results.append(tr.lift(g))
    joint = Graph(name=graph.name + "_joint", inputs=tuple(tr.inputs),
                  consts=tuple(tr.consts), eqns=tuple(tr.eqns),
                  outputs=tuple(results) + tuple(grad_results),
                  input_names=tuple(tr.input_names))
    verify(joint)
    return joint, len(results), wrt, diff_outputs, reaches


def _nbytes(v: Var) -> int:
    # A symbolic (batch) dimension counts as large: saving is then weighed as for big data.
    return math.prod(1024 if isinstance(d, Dim) else d for d in v.type.shape) \
        * v.type.dtype.itemsize


def _split(joint: Graph, n_out: int, n_grads_in: int):
    """Split the joint graph into forward (outputs + saved) and backward (grads) graphs."""
    n_inputs = len(joint.inputs) - n_grads_in
    primal_inputs = joint.inputs[:n_inputs]
    grad_inputs = joint.inputs[n_inputs:]
    producer = {id(e.out): e for e in joint.eqns}

    def closure(roots):
        need = set()
        stack = [r for r in roots if isinstance(r, Var)]
        while stack:
            v = stack.pop()
            e = producer.get(id(v))
            if e is None or id(e) in need:
                continue
            need.add(id(e))
            stack.extend(x for x in e.inputs if isinstance(x, Var))
        return need

    fwd_ids = closure(joint.outputs[:n_out])
    bwd_ids = closure(joint.outputs[n_out:])
    # What depends on an output gradient can only run in backward.
    tainted = {id(v) for v in grad_inputs}
    needs_g = set()
    for e in joint.eqns:
        if any(isinstance(x, Var) and id(x) in tainted for x in e.inputs):
            needs_g.add(id(e))
            tainted.add(id(e.out))
    # Forward-only work that backward needs (masks, transposes): the cheap part is
    # recomputed in backward; the rest runs in forward and is saved.
    bwd_set = set()
    for e in joint.eqns:
        if id(e) in bwd_ids and id(e) not in fwd_ids and (id(e) in needs_g or
                                                           _recomputable(e)):
            bwd_set.add(id(e))
    # Recompute a saved value in backward when its own inputs are saved anyway.
    primal_ids = {id(v) for v in primal_inputs}
    while True:
        saved = _saved(joint, bwd_set, n_out, grad_inputs)
        saved_ids = {id(v) for v in saved}
        compared = {id(x) for e in joint.eqns if id(e) in bwd_set and e.op in _COMPARISONS
                    for x in e.inputs if isinstance(x, Var)}
        moved = False
        for v in saved:
            chain = _recompute_chain(v, producer, saved_ids | primal_ids, bwd_set,
                                     compared=compared)
            if chain:
                bwd_set.update(chain)
                moved = True
                break
        if not moved:
            break
    saved = _saved(joint, bwd_set, n_out, grad_inputs)
    # Forward computes the outputs and everything backward reads from it.
    fwd_set = closure(tuple(joint.outputs[:n_out]) + tuple(saved))
    fwd_eqns = [e for e in joint.eqns if id(e) in fwd_set]
    bwd_eqns = [e for e in joint.eqns if id(e) in bwd_set]
    forward = Graph(name=joint.name.replace("_joint", "_forward"), inputs=primal_inputs,
                    consts=joint.consts, eqns=tuple(fwd_eqns),
                    outputs=tuple(joint.outputs[:n_out]) + tuple(saved),
                    input_names=joint.input_names[:n_inputs])
    bwd_in = [Var(v.name, v.type) for v in saved]
    rename = {id(v): nv for v, nv in zip(saved, bwd_in)}
    backward = Graph(name=joint.name.replace("_joint", "_backward"),
                     inputs=tuple(bwd_in) + tuple(grad_inputs), consts=joint.consts,
                     eqns=tuple(_rename(e, rename) for e in bwd_eqns),
                     outputs=tuple(rename.get(id(x), x) if isinstance(x, Var) else x
                                   for x in joint.outputs[n_out:]),
                     input_names=tuple(v.name for v in bwd_in) + tuple(
                         v.name for v in grad_inputs))
    forward = _dce_unused(forward)
    backward = _dce_unused(backward)
    verify(forward)
    verify(backward)
    saved_bytes = sum(_nbytes(v) for v in saved if id(v) not in primal_ids)
    all_bytes = sum(_nbytes(e.out) for e in fwd_eqns if isinstance(e.out, Var))
    return forward, backward, saved_bytes, all_bytes


def _one_cotangent(bwd: Graph, n_saved: int, k: int):
    """`bwd` with only its k-th output gradient as an input: the others are absent.

    Backward is linear in the output gradients, so an equation whose gradient-carrying
    inputs are all absent computes nothing (absent too); `add`/`sub` of one absent operand
    are the other operand (negated); any other equation reads explicit zeros for its absent
    operands. Returns (graph, indices of the outputs that are not absent)."""
    grads = bwd.inputs[n_saved:]
    absent = {id(v) for j, v in enumerate(grads) if j != k}
    tainted = {id(v) for v in grads}
    env: dict = {}
    eqns = []

    def read(x):
        return env.get(id(x), x) if isinstance(x, Var) else x

    for e in bwd.eqns:
        ins = tuple(read(x) for x in e.inputs)
        carried = [isinstance(x, Var) and id(x) in tainted for x in ins]
        if any(carried):
            tainted.add(id(e.out))
        gone = [isinstance(x, Var) and id(x) in absent for x in ins]
        if not any(gone):
            eqns.append(Eqn(e.op, ins, e.params, e.out, e.loc))
            continue
        if all(g for g, c in zip(gone, carried) if c):
            absent.add(id(e.out))
        elif e.op == "add":
            env[id(e.out)] = ins[1] if gone[0] else ins[0]
        elif e.op == "sub" and gone[1]:
            env[id(e.out)] = ins[0]
        elif e.op == "sub":
            eqns.append(Eqn("neg", (ins[1],), {}, e.out, e.loc))
        else:
            fixed = []
            for x, g in zip(ins, gone):
                if g:
                    z = Var(f"{x.name}_zero", x.type)
                    eqns.append(Eqn("broadcast_to", (Literal.of(0, x.type.dtype),),
                                    {"shape": tuple(x.type.shape)}, z, e.loc))
                    x = z
                fixed.append(x)
            eqns.append(Eqn(e.op, tuple(fixed), e.params, e.out, e.loc))
    outputs = [read(x) for x in bwd.outputs]
    kept = [i for i, x in enumerate(outputs) if not (isinstance(x, Var) and id(x) in absent)]
    graph = Graph(name=f"{bwd.name}_{k}", inputs=tuple(bwd.inputs[:n_saved]) + (grads[k],),
                  consts=bwd.consts, eqns=tuple(eqns),
                  outputs=tuple(outputs[i] for i in kept),
                  input_names=tuple(bwd.input_names[:n_saved]) + (bwd.input_names[n_saved + k],))
    graph = _dce_unused(graph)
    verify(graph)
    return graph, kept


_COMPARISONS = {"eq", "ne", "gt", "ge", "lt", "le"}


def _recompute_chain(v, producer, available, bwd_set, limit=12, compared=frozenset()):
    """Equations (ids) that recompute `v` from `available` values, all cheap; or None.

    Recomputing trades a few fused elementwise operations in the backward kernel for
    not keeping `v` alive between forward and backward (or writing it out at all).
    A value that a comparison reads is never recomputed: another kernel may round it
    differently in the last bit (x * (1 / d) for x / d), and amax's gradient mask
    `x == amax(x)` then loses the maximum."""
    if id(v) in compared:
        return None
    first = producer.get(id(v))
    if first is None or not _recomputable(first) or id(first) in bwd_set:
        return None
    if first.op in _COMPARISONS and any(isinstance(y, Var) and id(y) not in available
                                        for y in first.inputs):
        return None
    chain = {id(first)}
    stack = [y for y in first.inputs if isinstance(y, Var)]
    while stack:
        x = stack.pop()
        if id(x) in available:
            continue
        e = producer.get(id(x))
        if e is None or not _recomputable(e) or id(x) in compared:
            return None
        if id(e) in chain or id(e) in bwd_set:
            continue
        if e.op in _COMPARISONS:
            return None
        chain.add(id(e))
        if len(chain) > limit:
            return None
        stack.extend(y for y in e.inputs if isinstance(y, Var))
    return chain or None


def _recomputable(e) -> bool:
    return OPS[e.op].recompute


def _saved(joint, bwd_set, n_out, grad_inputs) -> list:
    """Values backward reads that it does not compute itself, in a stable order."""
    bwd_defined = {id(e.out) for e in joint.eqns if id(e) in bwd_set}
    excluded = {id(v) for v in grad_inputs} | {id(v) for v, _ in joint.consts}
    saved = []
    seen = set()

    def want(x):
        if not isinstance(x, Var) or id(x) in bwd_defined or id(x) in excluded \
                or id(x) in seen:
            return
        seen.add(id(x))
        saved.append(x)

    for e in joint.eqns:
        if id(e) in bwd_set:
            for x in e.inputs:
                want(x)
    for x in joint.outputs[n_out:]:
        want(x)
    return saved


def _rename(e, rename):
    ins = tuple(rename.get(id(x), x) if isinstance(x, Var) else x for x in e.inputs)
    return Eqn(e.op, ins, e.params, e.out, e.loc)


def _dce_unused(graph: Graph) -> Graph:
    from .passes import dce

    return dce(graph)


def saved_modified(outputs) -> str | None:
    """Eager's saved-version check over the autograd graph a trace built for `outputs`,
    without running backward: the message of the error eager's backward would raise (an
    in-place op inside the function on a value some backward rule saved), else None.

    The IR autodiff differentiates the functional (in-place-free) graph, so it would give
    a gradient where eager raises; such a function's outputs get eager's autograd instead.
    """
    for node in _unreleased_nodes(outputs):
        try:
            node.check_saved()
        except RuntimeError as exc:
            return str(exc)
    return None


def _unreleased_nodes(outputs):
    """The autograd nodes behind `outputs` whose saved values backward has not released yet."""
    seen, stack = set(), [t.grad_fn for t in outputs if isinstance(t, Tensor)]
    while stack:
        node = stack.pop()
        if not isinstance(node, Node) or id(node) in seen:
            continue
        seen.add(id(node))
        if node._state is None:
            yield node
        stack.extend(node.edges)


def eager_only_backward(outputs) -> str | None:
    """Why the gradient of `outputs` (after a trace) needs eager's autograd, else None: an
    in-place op on a value a backward rule saved (`saved_modified`), or a custom
    eager.autograd.Function on the way, whose own backward the IR autodiff would bypass (it
    differentiates the ops its forward recorded)."""
    modified = saved_modified(outputs)
    if modified is not None:
        return f"an in-place op modified a value backward needs ({modified})"
    for node in _unreleased_nodes(outputs):
        if getattr(node.op, "category", None) == "custom":
            return (f"the gradient goes through the custom autograd.Function "
                    f"{node.op.name}, whose backward a compiled backward would not run")
        if node.hooks is not None:
            return ("a tensor the function made has a gradient hook (register_hook), which a "
                    "compiled backward would not run")
        if getattr(node, "retained", None) is not None and node.retained() is not None:
            return ("a tensor the function made keeps its gradient (retain_grad()), which a "
                    "compiled backward would not fill in")
    return None


def freed_outputs(outputs, skip=()) -> dict:
    """Output index -> (op, params, input types) of each output whose graph a backward
    inside the function consumed: eagerly it still requires grad, and a second backward
    through it raises (see `freed_node`)."""
    freed = {}
    for j, t in enumerate(outputs):
        node = getattr(t, "grad_fn", None)
        if j not in skip and isinstance(node, Node) and node._state is not None:
            freed[j] = (node.op, node.params, node.types)
    return freed


def freed_node(op, params, types) -> Node:
    """A node like one a backward has already run through: backward raises eager's
    "backward through the graph a second time" error."""
    node = Node(op, params, types, (None,) * len(types), (None,) * len(types), None)
    node.release()
    return node


# --------------------------------------------------------------------------------------
# runtime: the autograd node of a compiled call

class CompiledNode(Node):
    """The backward of one call of a compiled function, as one node on the eager tape."""

    __slots__ = ("plan", "saved_arrays", "output_index", "n_diff", "replay")

    def name(self):
        return f"CompiledFunctionBackward[{self.plan.backward.name}]"

    def input_grads(self, g, needed):
        self.check_saved()
        from eager import dispatch

        if dispatch.is_grad_enabled():
            # create_graph=True: the compiled backward is not differentiable; replay the
            # function eagerly so the gradient carries its own history.
            return self.replay(g, self.output_index)
        g = np.asarray(g._data, order="C")  # (np.ascontiguousarray would make a 0-d g 1-d)
        if self.n_diff == 1:
            grads = self.plan.bwd_program(list(self.saved_arrays) + [g])
        else:
            program, kept = self.plan.backward_for(self.output_index)
            grads = [None] * len(self.plan.wrt)
            for i, a in zip(kept, program(list(self.saved_arrays) + [g])):
                grads[i] = a
        return [Tensor._wrap(a) if a is not None else None for a in grads]

    def release(self):
        self.saved_arrays = ()
        from eager.autograd import _FREED

        self._state = _FREED


def attach(plan: BackwardPlan, outputs: list, wrt_tensors: list, saved: list, replay,
           read_tensors=()):
    """Give each differentiable output tensor a CompiledNode over `wrt_tensors`.

    `read_tensors` (the call's inputs and captures) get eager's version check: updating
    one in place before backward raises instead of giving wrong gradients.
    """
    types = tuple(TensorType(t.shape, t.dtype) for t in wrt_tensors)
    all_edges = edges = tuple((t.grad_fn if t.grad_fn is not None else t)
                              if t.requires_grad else None for t in wrt_tensors)
    for k, j in enumerate(plan.diff_outputs):
        if plan.reaches is not None:
            edges = tuple(e if reached else None for e, reached in zip(all_edges,
                                                                       plan.reaches[k]))
        node = CompiledNode.__new__(CompiledNode)
        Node.__init__(node, _PlanOp(plan), {}, types, tuple(read_tensors), edges, None)
        node.plan = plan
        node.saved_arrays = tuple(saved)
        node.output_index = k
        node.n_diff = len(plan.diff_outputs)
        node.replay = replay
        out = outputs[j]
        out.grad_fn = node
        out.requires_grad = True


class _PlanOp:
    category = "compiled"
    saves = ()
    saves_out = False

    def __init__(self, plan):
        self.name = plan.backward.name
        self.vjp = None


__all__ = ["build_plan", "BackwardPlan", "CompiledNode", "attach", "saved_modified",
           "eager_only_backward",
           "freed_outputs", "freed_node"]
