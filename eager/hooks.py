"""Gradient hooks on tensors (`Tensor.register_hook`) and the handles hooks return.

A hook on a leaf tensor (a parameter) is kept on the tensor (`Tensor._grad_hooks`, a tuple
replaced on every change); a hook on a non-leaf on its autograd node (`Node.hooks`), since
the engine sends gradients node to node. The engine (eager.autograd.run_backward) calls
them on the gradient before it goes on, as PyTorch does: a hook returning a tensor replaces
the gradient.

While tracing, what the leaves' hooks are is Python state the trace reads: each backward
inside a trace reads `GRAD_HOOKS["version"]` (eager.dispatch.read_item), which every
registration or removal on a leaf moves, so such a change makes compiled functions trace
again.

>>> h = w.register_hook(lambda g: g.clamp(-1, 1))
>>> loss.backward()          # w.grad is clamped
>>> h.remove()
"""
from __future__ import annotations

import itertools

from . import dispatch
from .errors import describe, user_location


class TrackedState(dict):
    """A dict of Python state compiled functions read through eager.dispatch.read_item
    (guarded by value); `name` is how messages spell it."""

    def __init__(self, name: str, **items):
        super().__init__(**items)
        self.name = name


GRAD_HOOKS = TrackedState("the leaf tensors' gradient hooks", version=0)
_KEYS = itertools.count()


class RemovableHandle:
    """What `register_hook` / `register_forward_hook` ... return: `.remove()` takes the
    hook off again (a second remove does nothing); usable as a context manager."""

    def __init__(self, remove):
        self.id = next(_KEYS)
        self._remove = remove

    def remove(self) -> None:
        remove, self._remove = self._remove, None
        if remove is not None:
            remove(self.id)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def _moved() -> None:
    dict.__setitem__(GRAD_HOOKS, "version", GRAD_HOOKS["version"] + 1)


def register_tensor_hook(t, hook) -> RemovableHandle:
    """`t.register_hook(hook)`: `hook(grad)` runs on the gradient of `t` at each backward
    (before it is accumulated into a leaf's .grad); returning a tensor replaces it."""
    if not callable(hook):
        raise TypeError(f"register_hook expects a callable, got {type(hook).__name__}")
    if not t.requires_grad:
        raise RuntimeError(f"cannot register a hook on a tensor that doesn't require gradient "
                           f"({describe(t)}) (at {user_location()})")
    node = t.grad_fn
    if node is None:
        if dispatch.tracing():
            raise RuntimeError(
                f"register_hook on a leaf tensor ({describe(t)}) inside a traced function: "
                f"the hook would be registered once, at trace time, where each eager call "
                f"adds one; register it once, outside the compiled function "
                f"(at {user_location()})")

        def remove_leaf(key):
            t._grad_hooks = tuple(h for h in t._grad_hooks if h[0] != key)
            _moved()

        handle = RemovableHandle(remove_leaf)
        t._grad_hooks = t._grad_hooks + ((handle.id, hook),)
        _moved()
        return handle

    def remove_node(key):
        node.hooks = tuple(h for h in node.hooks if h[0] != key) or None

    handle = RemovableHandle(remove_node)
    node.hooks = (getattr(node, "hooks", None) or ()) + ((handle.id, hook),)
    return handle


def run_hooks(hooks, g, what: str):
    """The gradient after each hook of `hooks` ((key, fn) pairs) had its turn."""
    for _, fn in hooks:
        new = fn(g)
        if new is None:
            continue
        if not hasattr(new, "_data"):
            raise TypeError(f"a gradient hook of {what} returned {type(new).__name__}; it "
                            f"must return a tensor or None (at {user_location()})")
        if new.shape != g.shape:
            raise RuntimeError(f"a gradient hook of {what} returned a gradient of shape "
                               f"{new.shape} for one of shape {g.shape}; hooks must keep the "
                               f"shape (at {user_location()})")
        g = new
    return g
