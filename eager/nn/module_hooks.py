"""Module hooks, as PyTorch's: `register_forward_pre_hook`, `register_forward_hook`,
`register_full_backward_hook`, each returning a handle (eager.hooks.RemovableHandle).

A module keeps each kind as a tuple attribute (`_forward_hooks`, ...; empty tuples on the
class), replaced on every change and bumping eager.protocol.STRUCTURE_EPOCH like any
attribute write: a compiled function that called the module guards its attributes, so
adding or removing a hook between calls traces again. A hook runs as Python while a trace
records it (its tensor math is traced in; Python side effects happen once, at trace time,
and the tracer's rebinding checks refuse those it can see).

>>> h = model.fc.register_forward_hook(lambda m, args, out: out * 2)
>>> h.remove()
"""
from __future__ import annotations

from .. import dispatch
from ..autograd import Function
from ..hooks import RemovableHandle
from ..protocol import STRUCTURE_EPOCH
from ..tensor import Tensor


def _register(module, store: str, hook, prepend: bool, flag: bool) -> RemovableHandle:
    if not callable(hook):
        raise TypeError(f"{store[1:-1].replace('_', ' ')} must be callable, got "
                        f"{type(hook).__name__}")

    def remove(key):
        left = tuple(h for h in getattr(module, store) if h[0] != key)
        if left:
            object.__setattr__(module, store, left)
        else:  # (back to the class's empty tuple: a trace made before the hook serves again)
            module.__dict__.pop(store, None)
        STRUCTURE_EPOCH[0] += 1

    handle = RemovableHandle(remove)
    entry = ((handle.id, hook, flag),)
    old = getattr(module, store)
    object.__setattr__(module, store, entry + old if prepend else old + entry)
    STRUCTURE_EPOCH[0] += 1
    return handle


def register_forward_pre_hook(module, hook, *, prepend=False, with_kwargs=False):
    """``hook(module, args)`` (``(module, args, kwargs)`` with `with_kwargs`) runs before
    forward; returning a value replaces args (``(args, kwargs)``)."""
    return _register(module, "_forward_pre_hooks", hook, prepend, with_kwargs)


def register_forward_hook(module, hook, *, prepend=False, with_kwargs=False,
                          always_call=False):
    """``hook(module, args, output)`` (``(module, args, kwargs, output)`` with
    `with_kwargs`) runs after forward; returning a value replaces the output."""
    if always_call:
        from ..errors import user_location
        raise NotImplementedError(
            "register_forward_hook(always_call=True) (a hook that runs also when forward "
            "raises) is not supported; catch the exception around the module call instead "
            f"(at {user_location()})")
    return _register(module, "_forward_hooks", hook, prepend, with_kwargs)


def register_full_backward_hook(module, hook, prepend=False):
    """``hook(module, grad_input, grad_output)`` runs when the gradients with respect to
    the module's inputs are computed; returning a tuple replaces grad_input."""
    return _register(module, "_backward_hooks", hook, prepend, False)


def call_with_hooks(module, args, kwargs):
    """Module.__call__ of a module with hooks: pre-hooks, forward, forward hooks, and the
    identity Functions through which backward hooks see the gradients."""
    for _, hook, with_kwargs in module._forward_pre_hooks:
        if with_kwargs:
            result = hook(module, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise RuntimeError("a forward pre-hook with with_kwargs=True must return "
                                       f"None or an (args, kwargs) pair, got {result!r}")
                args, kwargs = result
        else:
            result = hook(module, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
    state = None
    if module._backward_hooks and dispatch.is_grad_enabled():
        state = _BackwardState(module)
        args = state.wrap_inputs(args)
    out = module.forward(*args, **kwargs)
    for _, hook, with_kwargs in module._forward_hooks:
        result = hook(module, args, kwargs, out) if with_kwargs else hook(module, args, out)
        if result is not None:
            out = result
    if state is not None:
        out = state.wrap_outputs(out)
    return out


class _BackwardState:
    """One call's backward hooks: the outputs' gradients arrive first (grad_output), then
    the inputs' (grad_input), when the hooks run."""

    def __init__(self, module):
        self.module = module
        self.grad_output = None
        self.n_inputs = 0

    def wrap_inputs(self, args):
        wanted = [k for k, a in enumerate(args) if isinstance(a, Tensor) and a.requires_grad]
        self.n_inputs = sum(isinstance(a, Tensor) for a in args)
        self.positions = [k for k, a in enumerate(args) if isinstance(a, Tensor)]
        self.wanted = wanted
        if not wanted:
            return args
        wrapped = _InputsIdentity.apply(self, *[args[k] for k in wanted])
        if isinstance(wrapped, Tensor):
            wrapped = (wrapped,)
        args = list(args)
        for k, t in zip(wanted, wrapped):
            args[k] = t
        return tuple(args)

    def wrap_outputs(self, out):
        single = isinstance(out, Tensor)
        outs = (out,) if single else out
        if not isinstance(outs, tuple):
            return out
        keep = [k for k, o in enumerate(outs) if isinstance(o, Tensor) and o.requires_grad]
        if not keep:
            return out
        wrapped = _OutputsIdentity.apply(self, *[outs[k] for k in keep])
        if isinstance(wrapped, Tensor):
            wrapped = (wrapped,)
        outs = list(outs)
        for k, t in zip(keep, wrapped):
            outs[k] = t
        return outs[0] if single else tuple(outs)

    def run(self, grad_input):
        """Call the hooks; the grad_input they leave (a tuple over the tensor inputs)."""
        grad_output = self.grad_output or ()
        for _, hook, _ in self.module._backward_hooks:
            result = hook(self.module, grad_input, grad_output)
            if result is None:
                continue
            result = tuple(result) if isinstance(result, (tuple, list)) else (result,)
            if len(result) != len(grad_input):
                raise RuntimeError(f"a backward hook of {type(self.module).__name__} returned "
                                   f"{len(result)} gradients for {len(grad_input)} inputs")
            grad_input = result
        return grad_input


class _Identity(Function):
    """Its tensors, unchanged, with the hook state on ctx: the subclasses' backward sees
    their gradients (None where none flows: grads are not materialized)."""

    @staticmethod
    def forward(ctx, state, *tensors):
        ctx.state = state
        ctx.set_materialize_grads(False)
        return tuple(t.detach() for t in tensors) if len(tensors) > 1 else tensors[0].detach()


class _OutputsIdentity(_Identity):
    """The module's outputs, unchanged: backward notes their gradients (grad_output)."""

    @staticmethod
    def backward(ctx, *grads):
        state = ctx.state
        state.grad_output = grads
        if not state.wanted:  # (no input needs a gradient: the hooks run now, as PyTorch's)
            state.run((None,) * state.n_inputs)
        return (None,) + grads


class _InputsIdentity(_Identity):
    """The module's inputs that require grad, unchanged: backward runs the hooks on their
    gradients and passes on what the hooks return."""

    @staticmethod
    def backward(ctx, *grads):
        state = ctx.state
        full = [None] * state.n_inputs
        for k, g in zip(state.wanted, grads):
            full[state.positions.index(k)] = g
        full = state.run(tuple(full))
        return (None,) + tuple(full[state.positions.index(k)] for k in state.wanted)
