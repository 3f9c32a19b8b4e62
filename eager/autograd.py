"""Define-by-run reverse-mode autodiff.

Every op applied to a tensor that requires grad (in grad mode) attaches a
`Node` to its output: the op, its params, the inputs' types, the tensors the
op's vjp rule reads, and an edge per input (the input's own node, or the leaf
tensor whose `.grad` it feeds).  `backward` walks the nodes from the output in
reverse topological order, calling the registry's vjp rules; since those are
registry ops, a backward pass runs (and traces) like any other code, and with
`create_graph=True` it is itself differentiable.

The nodes and custom `Function`s are in autograd_graph.py, grad mode (`no_grad` ...) in
grad_mode.py; their public names are importable from here as ever.
"""
from __future__ import annotations

import numpy as np

from . import dispatch
from . import functions as F
from . import slice_grads
from .autograd_graph import (_FREED, Function, FunctionCtx, Node,  # noqa: F401
                             _FunctionOutput, _OutputGrads, attach_node, next_node_serial)
from .dispatch import _state
from .errors import describe, op_error, user_location
from .grad_mode import (enable_grad, inference_mode, is_grad_enabled, no_grad,  # noqa: F401
                        set_grad_enabled)
from .hooks import GRAD_HOOKS, run_hooks

Tensor = None  # bound by eager/__init__.py


# --------------------------------------------------------------------------------------
# the engine

def _topological_nodes(roots):
    """Nodes reachable from `roots`, each after every node that feeds it a gradient."""
    order = []
    seen = set()
    for root in roots:
        if root is None or id(root) in seen:
            continue
        stack = [(root, iter(root.edges))]
        seen.add(id(root))
        while stack:
            node, it = stack[-1]
            for e in it:
                if isinstance(e, Node) and id(e) not in seen:
                    seen.add(id(e))
                    stack.append((e, iter(e.edges)))
                    break
            else:
                stack.pop()
                order.append(node)
    order.reverse()
    return order


def _accumulate(store, key, g):
    """Add contribution `g` (a Tensor, or a slice_grads.Piece) to gradient `key`; read the
    sum with `slice_grads.total`."""
    prev = store.get(key)
    store[key] = g if prev is None else slice_grads.add(prev, g)


def run_backward(outputs, grad_outputs, retain_graph, create_graph, inputs=None):
    """Backpropagate; with `inputs`, return their gradients instead of filling `.grad`."""
    roots = []
    node_grads = {}
    leaf_grads = {}
    leaves = {}
    for out, g in zip(outputs, grad_outputs):
        if out.grad_fn is None:
            if not out.requires_grad:
                raise RuntimeError(
                    f"element 0 of tensors does not require grad and does not have a grad_fn "
                    f"({describe(out)}); call .requires_grad_() on the inputs before "
                    f"computing it, and don't compute it under no_grad() "
                    f"(at {user_location()})")
            leaves[id(out)] = out
            _accumulate(leaf_grads, id(out), g)
            continue
        roots.append(out.grad_fn)
        _accumulate(node_grads, id(out.grad_fn), g)

    wanted = None
    if inputs is not None:
        wanted = {}
        for t in inputs:
            wanted[id(t.grad_fn) if t.grad_fn is not None else id(t)] = t

    prev_mode = dispatch.set_grad_enabled(create_graph)
    try:
        order = _topological_nodes(roots)
        # (a trace refuses a backward that reaches a node recorded before it started)
        _state.protocol.backward_nodes(order)
        captured = {}
        for node in order:
            g = node_grads.pop(id(node), None)
            if g.__class__ is _OutputGrads:  # (a custom Function with several outputs)
                g = g.grads
            else:
                g = slice_grads.total(g)
            if g is None:
                continue
            if node.hooks is not None:
                g = run_hooks(node.hooks, g, node.name())
            if wanted is not None and id(node) in wanted:
                captured[id(node)] = g
            if node.retained is not None and inputs is None:
                # (as PyTorch: autograd.grad and backward(inputs=...) fill no other .grad)
                t = node.retained()
                if t is not None:
                    t.grad = g if t.grad is None else F.add(t.grad, g)
            edges = node.edges
            if node.__class__ is _FunctionOutput:
                # Hand this output's gradient to its Function, which runs backward once
                # with all of them (topological order: after every output's node).
                pending = node_grads.get(id(edges[0]))
                if pending is None:
                    pending = node_grads[id(edges[0])] = _OutputGrads(edges[0].op.n_outputs)
                pending.add(node.index, g)
                if not retain_graph:
                    node.release()
                continue
            needed = [e is not None for e in edges]
            if getattr(node.op, "slice_grad", False) and needed[0] \
                    and g.dtype == node.types[0].dtype:
                # zeros with g at the index: a Piece, joined with the others (slice_grads)
                node.check_saved()
                piece = slice_grads.Piece(g, node.types[0].shape, node.params["index"])
                if isinstance(edges[0], Node):
                    _accumulate(node_grads, id(edges[0]), piece)
                else:
                    leaves[id(edges[0])] = edges[0]
                    _accumulate(leaf_grads, id(edges[0]), piece)
                if not retain_graph:
                    node.release()
                continue
            grads = node.input_grads(g, needed)
            for e, gi, ty in zip(edges, grads, node.types):
                if e is None or gi is None:
                    continue
                if gi.shape != ty.shape:
                    gi = F.sum_to(gi, ty.shape)
                if gi.dtype != ty.dtype:
                    gi = F.cast(gi, ty.dtype)
                if isinstance(e, Node):
                    _accumulate(node_grads, id(e), gi)
                else:
                    leaves[id(e)] = e
                    _accumulate(leaf_grads, id(e), gi)
            if not retain_graph:
                node.release()
    finally:
        dispatch.set_grad_enabled(prev_mode)

    if leaves and dispatch._hooked_threads:  # (a trace depends on which hooks leaves have)
        dispatch.read_item(GRAD_HOOKS, "version")
    if wanted is not None:
        result = []
        for key, t in wanted.items():
            if t.grad_fn is not None:
                result.append(captured.get(key))
            else:
                g = slice_grads.total(leaf_grads.get(key))
                if g is not None and t._grad_hooks:
                    g = run_hooks(t._grad_hooks, g, f"a leaf {describe(t)}")
                result.append(g)
        return result
    for key, t in leaves.items():
        g = slice_grads.total(leaf_grads[key])
        if t._grad_hooks:
            g = run_hooks(t._grad_hooks, g, f"a leaf {describe(t)}")
        if not create_graph:
            g = g.detach()
            data = g._data
            if type(data) is np.ndarray and (not data.flags.writeable or data.base is not None):
                # .grad owns its memory, as in PyTorch: vjps may hand back broadcast views
                # or read-only constants, and optimizers update .grad in place.
                g = Tensor._wrap(np.array(data, order="C"))
        if t.grad is None:
            t.grad = g
        elif create_graph:
            t.grad = F.add(t.grad, g)
        else:
            # Without a graph, as .detach() would, but on .grad itself: inside a trace a
            # detached alias is a tensor of its own, read as the old .grad at every call.
            with no_grad():
                t.grad = F.add(t.grad, g)
    return None


def _default_grad(out, op="backward"):
    if out.numel() != 1:
        raise RuntimeError(
            f"grad can be implicitly created only for scalar outputs; this output is "
            f"{describe(out)}. Pass gradient=... (a tensor of the output's shape), or reduce "
            f"it first, e.g. out.sum().backward() (at {user_location()})")
    return F.const(1, out.dtype) if out.ndim == 0 else F.reshape(F.const(1, out.dtype),
                                                                  out.shape)


def _as_grad(g, out):
    if g is None:
        return _default_grad(out)
    if not isinstance(g, Tensor):
        g = F.tensor(g, dtype=out.dtype)
    if g.shape != out.shape:
        raise op_error("backward", f"gradient shape {g.shape} does not match the output "
                       f"shape {out.shape}", (g, out), hint="pass a gradient of the "
                       "output's shape")
    if g.dtype != out.dtype:  # (PyTorch casts it to the output's dtype, as here)
        g = g.to(out.dtype)
    return g


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate gradients of `tensors` into the `.grad` of the leaves they depend on."""
    if isinstance(tensors, Tensor):
        tensors = [tensors]
        grad_tensors = [grad_tensors]
    elif grad_tensors is None:
        grad_tensors = [None] * len(tensors)
    if retain_graph is None:
        retain_graph = create_graph
    grads = [_as_grad(g, t) for t, g in zip(tensors, grad_tensors)]
    if inputs is not None:
        inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
        got = run_backward(tensors, grads, retain_graph, create_graph, inputs=inputs)
        for t, g in zip(inputs, got):
            if g is not None:
                g = g if create_graph else g.detach()
                t.grad = g if t.grad is None else F.add(t.grad, g)
        return
    run_backward(tensors, grads, retain_graph, create_graph)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=False):
    """Gradients of `outputs` with respect to `inputs`, returned as a tuple (no `.grad` writes).

    >>> (gx,) = grad((x ** 3).sum(), [x], create_graph=True)   # gx can be differentiated
    """
    single_out = isinstance(outputs, Tensor)
    outputs = [outputs] if single_out else list(outputs)
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    if grad_outputs is None:
        grad_outputs = [None] * len(outputs)
    elif isinstance(grad_outputs, Tensor):
        grad_outputs = [grad_outputs]
    if retain_graph is None:
        retain_graph = create_graph
    for t in inputs:
        if not t.requires_grad:
            raise RuntimeError(f"One of the differentiated Tensors ({describe(t)}) does not "
                               f"require grad; call .requires_grad_() on it first")
    grads = [_as_grad(g, t) for t, g in zip(outputs, grad_outputs)]
    got = run_backward(outputs, grads, retain_graph, create_graph, inputs=inputs)
    result = []
    for t, g in zip(inputs, got):
        if g is None:
            if not allow_unused:
                raise RuntimeError(
                    f"One of the differentiated Tensors ({describe(t)}) appears to not have "
                    f"been used in the graph. Set allow_unused=True if this is the desired "
                    f"behavior.")
        elif not create_graph:
            g = g.detach()
        result.append(g)
    return tuple(result)
