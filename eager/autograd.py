"""Define-by-run reverse-mode autodiff.

Every op applied to a tensor that requires grad (in grad mode) attaches a
`Node` to its output: the op, its params, the inputs' types, the tensors the
op's vjp rule reads, and an edge per input (the input's own node, or the leaf
tensor whose `.grad` it feeds).  `backward` walks the nodes from the output in
reverse topological order, calling the registry's vjp rules; since those are
registry ops, a backward pass runs (and traces) like any other code, and with
`create_graph=True` it is itself differentiable.
"""
from __future__ import annotations

import functools
import itertools
import weakref

import numpy as np

from . import dispatch
from . import functions as F
from . import slice_grads
from .dispatch import _state
from .errors import describe, op_error, user_location
from .hooks import GRAD_HOOKS, run_hooks
from .ops import TensorType

Tensor = None  # bound by eager/__init__.py

_FREED = "freed"


# Serial numbers of Nodes in creation order: a trace notes the next one when it starts, so
# a backward() inside it can tell the nodes it recorded from those made before it.
_NODE_SERIAL = itertools.count()


def next_node_serial() -> int:
    """A serial number below every Node made from now on (a trace's start)."""
    return next(_NODE_SERIAL)


class Node:
    """One recorded op: how to send the gradient of its output to its inputs."""

    __slots__ = ("op", "params", "types", "saved", "versions", "out", "out_version",
                 "edges", "retained", "_state", "serial", "hooks", "__weakref__")

    def __init__(self, op, params, types, saved, edges, out):
        self.op = op
        self.params = params
        self.types = types      # TensorType per input
        self.saved = saved      # per input: Tensor it saves, else None
        self.versions = tuple(t._version[0] if t is not None else 0 for t in saved)
        self.out = out          # saved output (a detached Tensor), or None
        self.out_version = out._version[0] if out is not None else 0
        self.edges = edges      # per input: Node, leaf Tensor, or None
        self.retained = None    # weakref to the output tensor when retain_grad() was called
        self.hooks = None       # ((key, fn), ...) of the output's register_hook (eager.hooks)
        self._state = None
        self.serial = next(_NODE_SERIAL)  # creation order (a trace's nodes come after its start)

    def name(self) -> str:
        return "".join(p.capitalize() for p in self.op.name.split("_")) + "Backward"

    def __repr__(self) -> str:
        return f"<{self.name()}>"

    @property
    def next_functions(self):
        return tuple(e for e in self.edges)

    def retain(self, tensor):
        self.retained = weakref.ref(tensor)

    def check_saved(self):
        if self._state is _FREED:
            raise RuntimeError(
                f"Trying to backward through the graph a second time (or directly access "
                f"saved tensors after they have already been freed) at {self.name()} "
                f"(inputs {', '.join(str(t) for t in self.types)}). Saved "
                f"intermediate values of the graph are freed when you call .backward() or "
                f"autograd.grad(). Specify retain_graph=True if you need to backward through "
                f"the graph a second time. (at {user_location()})")
        for i, t in enumerate(self.saved):
            if t is not None and t._version[0] != self.versions[i]:
                raise _modified_error(self, f"input {i}", t, self.versions[i])
        if self.out is not None and self.out._version[0] != self.out_version:
            raise _modified_error(self, "output", self.out, self.out_version)

    def input_grads(self, g, needed):
        """Gradients for the inputs marked in `needed` (None elsewhere)."""
        self.check_saved()
        op = self.op
        args = [s if s is not None else ty for s, ty in zip(self.saved, self.types)]
        out = self.out
        if out is not None and _state.grad_enabled:
            # The output is saved without its grad_fn (saving it whole would make a reference
            # cycle).  A differentiable backward (create_graph) must see it as the function
            # of the inputs that it is, so re-attach this node, as PyTorch's SavedVariable
            # does; otherwise d(out)/dx is silently dropped from second derivatives.
            out = Tensor._wrap(out._data)
            out._version = self.out._version
            out.grad_fn = self
            out.requires_grad = True
        vjp = op.vjp
        if callable(vjp):  # variadic op: one function returns every input's gradient
            return vjp(g, out, *args, **self.params)
        grads = []
        for i, rule in enumerate(vjp):
            if needed[i] and rule is not None:
                grads.append(rule(g, out, *args, **self.params))
            else:
                grads.append(None)
        return grads

    def release(self):
        self.saved = tuple(None for _ in self.saved)
        self.out = None
        self._state = _FREED


def _modified_error(node, what, t, version):
    return RuntimeError(
        f"one of the variables needed for gradient computation has been modified by an "
        f"inplace operation: the {what} of {node.name()}, a {describe(t)} tensor, is at "
        f"version {t._version[0]}; expected version {version} instead. Clone it before "
        f"modifying it in place, or do the in-place update after backward(). "
        f"(at {user_location()})")


def attach_node(op, inputs, params, out):
    """Record `op` on `out` (called by dispatch.apply when an input requires grad)."""
    saves = op.saves
    saved = tuple(t if i in saves else None for i, t in enumerate(inputs))
    saved_out = None
    if op.saves_out:
        saved_out = Tensor._wrap(out._data)
        saved_out._version = out._version
    edges = tuple((t.grad_fn if t.grad_fn is not None else t) if t.requires_grad else None
                  for t in inputs)
    types = tuple(TensorType(t.shape, t.dtype) for t in inputs)
    out.grad_fn = Node(op, params, types, saved, edges, saved_out)
    out.requires_grad = True


# --------------------------------------------------------------------------------------
# grad mode

class no_grad:
    """Context manager and decorator that turns off graph recording.

    >>> with no_grad():
    ...     y = x * 2        # y.requires_grad is False
    """

    def __enter__(self):
        self._prev = dispatch.set_grad_enabled(False)
        return self

    def __exit__(self, *exc):
        dispatch.set_grad_enabled(self._prev)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)
        return wrapper


class enable_grad(no_grad):
    """Context manager and decorator that turns graph recording back on."""

    def __enter__(self):
        self._prev = dispatch.set_grad_enabled(True)
        return self


class set_grad_enabled:
    """Sets grad mode on construction (as a function call), as a context manager restoring
    the previous mode on exit, and as a decorator (`@set_grad_enabled(False)`), as in PyTorch.
    """

    def __init__(self, mode: bool):
        self._mode = bool(mode)
        self._prev = dispatch.set_grad_enabled(mode)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        dispatch.set_grad_enabled(self._prev)
        return False

    def __call__(self, fn):
        # Used as a decorator: construction switched the mode; put it back, and switch it
        # only around each call.
        dispatch.set_grad_enabled(self._prev)
        mode = self._mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            prev = dispatch.set_grad_enabled(mode)
            try:
                return fn(*args, **kwargs)
            finally:
                dispatch.set_grad_enabled(prev)
        return wrapper


class inference_mode(no_grad):
    """`no_grad` under PyTorch's newer name: `with inference_mode():`, `@inference_mode()`,
    `@inference_mode`, `inference_mode(False)`. Tensors made inside do not record history;
    unlike PyTorch they are ordinary tensors afterwards (no "inference tensor" restrictions).
    """

    def __new__(cls, mode=True):
        if callable(mode) and not isinstance(mode, bool):  # bare @inference_mode
            return no_grad.__call__(object.__new__(cls), mode)
        return object.__new__(cls)

    def __init__(self, mode: bool = True):
        self._mode = bool(mode)

    def __enter__(self):
        self._prev = dispatch.set_grad_enabled(False) if self._mode else \
            dispatch.is_grad_enabled()
        return self

    def __call__(self, fn):
        mode = self._mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with inference_mode(mode):
                return fn(*args, **kwargs)
        return wrapper


is_grad_enabled = dispatch.is_grad_enabled


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


# --------------------------------------------------------------------------------------
# custom functions

class FunctionCtx:
    """The `ctx` of a custom Function: saves tensors between forward and backward."""

    def __init__(self):
        self._saved = ()
        self._versions = ()
        self._freed = False
        self.needs_input_grad = ()
        self.materialize_grads = True
        self._non_differentiable = ()

    def save_for_backward(self, *tensors):
        self._saved = tensors
        self._versions = tuple(t._version[0] if t is not None else 0 for t in tensors)

    @property
    def saved_tensors(self):
        if self._freed:
            raise RuntimeError("Trying to backward through the graph a second time (or "
                               "directly access saved tensors after they have already been "
                               "freed). Specify retain_graph=True if you need to backward "
                               f"through the graph a second time. (at {user_location()})")
        for t, v in zip(self._saved, self._versions):
            if t is not None and t._version[0] != v:
                raise RuntimeError("one of the variables needed for gradient computation "
                                   "has been modified by an inplace operation; clone it "
                                   "before modifying it")
        return self._saved

    def mark_non_differentiable(self, *tensors):
        """Outputs that get no gradient (indices, masks): they do not require grad, and
        backward gets zeros (or None, without materialized grads) for them."""
        self._non_differentiable = tuple(tensors)

    def set_materialize_grads(self, value: bool) -> None:
        """False: backward gets None, not a tensor of zeros, for an output whose gradient
        nothing sent (an unused output of several)."""
        self.materialize_grads = bool(value)


class _FunctionOp:
    """Stands in for an OpDef in a Node recording a custom Function."""

    category = "custom"
    saves = ()
    saves_out = False

    def __init__(self, cls, ctx, n_inputs, out_types=None):
        self.name = cls.__name__
        self.cls = cls
        self.ctx = ctx
        self.n_inputs = n_inputs
        self.out_types = out_types  # several outputs: each one's TensorType (else None)
        self.n_outputs = 1 if out_types is None else len(out_types)

    def vjp(self, g, out, *inputs):
        ctx = self.ctx
        if self.out_types is None:
            grads = self.cls.backward(ctx, g)
        else:
            g = list(g)
            if ctx.materialize_grads:
                for k, ty in enumerate(self.out_types):
                    if g[k] is None:
                        g[k] = F.zeros(ty.shape, dtype=ty.dtype)
            grads = self.cls.backward(ctx, *g)
        if not isinstance(grads, tuple):
            grads = (grads,)
        if len(grads) < self.n_inputs:
            grads = grads + (None,) * (self.n_inputs - len(grads))
        if len(grads) != self.n_inputs:
            raise RuntimeError(f"{self.name}.backward returned {len(grads)} gradients, but "
                               f"forward took {self.n_inputs} inputs")
        return tuple(F.as_tensor(x) if x is not None and not isinstance(x, Tensor) else x
                     for x in grads)


class _OutputGrads:
    """The gradients of a several-output custom Function's outputs, gathered for its one
    backward call (None where nothing sent one)."""

    __slots__ = ("grads",)

    def __init__(self, n):
        self.grads = [None] * n

    def add(self, k, g):
        prev = self.grads[k]
        self.grads[k] = g if prev is None else F.add(prev, g)


class _FunctionOutput(Node):
    """Output `index` of a custom Function with several outputs: its one edge is the
    Function's node (the engine gathers every output's gradient there)."""

    __slots__ = ("index",)

    def name(self):
        return f"{self.op.name}Backward[{self.index}]"


class _FunctionNode(Node):
    __slots__ = ()

    def name(self):
        return f"{self.op.name}Backward"

    def input_grads(self, g, needed):
        self.check_saved()
        return self.op.vjp(g, None)

    def release(self):
        self.op.ctx._freed = True
        self._state = _FREED


class Function:
    """Base class for custom differentiable operations.

    >>> class Square(Function):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         ctx.save_for_backward(x)
    ...         return x * x
    ...     @staticmethod
    ...     def backward(ctx, g):
    ...         (x,) = ctx.saved_tensors
    ...         return 2 * x * g
    >>> y = Square.apply(x)
    """

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("a Function subclass must define forward(ctx, ...)")

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError("a Function subclass must define backward(ctx, grad)")

    @classmethod
    def apply(cls, *args, **kwargs):
        ctx = FunctionCtx()
        tensors = [(i, a) for i, a in enumerate(args) if isinstance(a, Tensor)]
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        with no_grad():
            out = cls.forward(ctx, *args, **kwargs)
        if isinstance(out, tuple):
            return _apply_several(cls, ctx, args, out)
        if not isinstance(out, Tensor):
            raise TypeError(f"{cls.__name__}.forward must return a Tensor or a tuple, got "
                            f"{describe(out)}")
        if _state.grad_enabled and any(ctx.needs_input_grad):
            if any(out is a for a in args):
                out = out.detach()
            edges = tuple((a.grad_fn if a.grad_fn is not None else a)
                          if isinstance(a, Tensor) and a.requires_grad else None for a in args)
            types = tuple(TensorType(a.shape, a.dtype) if isinstance(a, Tensor)
                          else TensorType((), np.dtype(np.float64)) for a in args)
            op = _FunctionOp(cls, ctx, len(args))
            node = _FunctionNode(op, {}, types, (), edges, None)
            node.saved = ()
            out.grad_fn = node
            out.requires_grad = True
        del tensors
        return out


def _apply_several(cls, ctx, args, outs):
    """Function.apply of a forward returning a tuple: one node for the Function, and one
    per differentiable output pointing at it."""
    if not (_state.grad_enabled and any(ctx.needs_input_grad)):
        return outs
    outs = tuple(o.detach() if isinstance(o, Tensor) and any(o is a for a in args) else o
                 for o in outs)
    skip = {id(t) for t in ctx._non_differentiable}
    out_types = tuple(TensorType(o.shape, o.dtype) if isinstance(o, Tensor)
                      else TensorType((), np.dtype(np.float32)) for o in outs)
    edges = tuple((a.grad_fn if a.grad_fn is not None else a)
                  if isinstance(a, Tensor) and a.requires_grad else None for a in args)
    types = tuple(TensorType(a.shape, a.dtype) if isinstance(a, Tensor)
                  else TensorType((), np.dtype(np.float64)) for a in args)
    node = _FunctionNode(_FunctionOp(cls, ctx, len(args), out_types), {}, types, (), edges, None)
    for k, o in enumerate(outs):
        if not isinstance(o, Tensor) or id(o) in skip or not np.issubdtype(o.dtype, np.inexact):
            continue
        out_node = _FunctionOutput(node.op, {}, (out_types[k],), (None,), (node,), None)
        out_node.index = k
        o.grad_fn = out_node
        o.requires_grad = True
    return outs
