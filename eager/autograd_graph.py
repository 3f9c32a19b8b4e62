"""The autograd graph, as the forward pass records it: a `Node` per op applied to a tensor
that requires grad (`attach_node`, called by dispatch), and the nodes of custom `Function`s
(`Function`, its `ctx`). eager.autograd's engine walks them backward; it re-exports these
names.
"""
from __future__ import annotations

import itertools
import weakref

import numpy as np

from . import functions as F
from .dispatch import _state
from .errors import describe, user_location
from .grad_mode import no_grad
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
