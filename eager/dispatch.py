"""The one dispatch function every tensor op goes through.

`apply(op, *inputs, **params)` computes an op's output value through the
current *compute hook* and, when grad mode is on and an input requires grad,
records an autograd node.  Eager execution installs a hook that runs the
op's numpy implementation; the tracer installs one that records an IR
equation instead.  That switch is the only difference between running and
tracing, so any eager program (modules, composites, `loss.backward()`,
optimizer steps) traces without a second code path.

Both the hook and grad mode are thread-local, as in PyTorch.
"""
from __future__ import annotations

import threading
from operator import attrgetter

import numpy as np

from .errors import describe, op_error


class _State(threading.local):
    grad_enabled = True
    compute = None  # set below to eager_compute; the tracer swaps it
    on_create = None  # while tracing: called with each tensor made by a creation function
    live_scalar = None  # while tracing: turns a Python-number getter into a traced input
    on_grad = None  # while tracing: told of each read or write of a tensor's .grad
    making_state = False  # inside state_init(): new tensors are state, not trace values
    on_item = None  # while tracing: reads and writes of tracked Python state (param groups)
    on_view = None  # while tracing: told of each view op's traced output (functionalization)
    on_write = None  # while tracing: performs an in-place write of a traced value


_state = _State()


def eager_compute(op, inputs, params):
    """Run `op` on the inputs' numpy arrays; turn numpy's failures into messages naming the op."""
    datas = [t._data for t in inputs]
    try:
        out = op.impl(*datas, **params) if params else op.impl(*datas)
    except Exception as exc:  # noqa: BLE001 - re-raised with context below
        raise _explain_failure(op, datas, params, exc) from exc
    if type(out) is not np.ndarray:
        out = np.asarray(out)
    return out


_State.compute = staticmethod(eager_compute)


def _explain_failure(op, datas, params, exc):
    from .ops import TensorType

    types = [TensorType(tuple(d.shape), d.dtype) for d in datas]
    try:
        op.infer(*types, **params)
    except Exception as inferred:  # noqa: BLE001
        return inferred
    if isinstance(exc, IndexError):  # a value check (check_class_index): keep the type
        return op_error(op.name, str(exc), datas, exc=IndexError)
    shown = ", ".join(f"{k}={v}" for k, v in params.items())
    return op_error(op.name, f"numpy failed: {exc}" + (f" (params {shown})" if shown else ""),
                    datas)


# Bound by eager/__init__.py once the modules exist (avoids import cycles and
# per-call imports on the hot path).
_Tensor = None
_new_tensor = object.__new__
_attach_node = None
_get_data = attrgetter("_data")
_ndarray = np.ndarray


# How many threads have a compute hook other than eager_compute installed; while it is
# zero, apply() skips the thread-local lookup.
_hooked_threads = 0
_hook_lock = threading.Lock()


def set_compute(fn):
    """Install a compute hook for this thread; returns the previous one."""
    global _hooked_threads
    prev = _state.compute
    with _hook_lock:
        _hooked_threads += (fn is not eager_compute) - (prev is not eager_compute)
    _state.compute = fn
    return prev


def set_on_create(fn):
    prev = _state.on_create
    _state.on_create = fn
    return prev


def note_created(t):
    """Creation functions report new tensors here (the tracer makes them constants)."""
    hook = _state.on_create
    if hook is not None and not _state.making_state:
        hook(t)


def tracing() -> bool:
    """Whether this thread is recording a trace rather than running ops."""
    return _state.on_create is not None


class state_init:
    """``with state_init(): ...`` makes state that later calls expect to find.

    Eagerly it changes nothing. While tracing, tensors made inside by creation functions
    (``zeros_like``, ``tensor``) are not values of the trace: they are real tensors with
    their initial values, as if they had existed before the call. What the function then
    does to them records as updates of outside state, read at every call, so the one trace
    serves the call that made the state and every later call. An optimizer's lazy
    first-step state (Adam's moments and step count) is the use: compiled, a training step
    traces once.

    It is only right where the code that runs after the initialization is the code a
    later call runs on the existing state. Where the first call differs (PyTorch's SGD
    copies the first gradient into its momentum buffer), create the state without it:
    the tracer then runs that first call once and traces the steady state at the next.
    """

    def __enter__(self):
        self._prev = _state.making_state
        _state.making_state = True
        return self

    def __exit__(self, *exc):
        _state.making_state = self._prev
        return False


def set_on_grad(fn):
    prev = _state.on_grad
    _state.on_grad = fn
    return prev


def note_grad(t, write: bool):
    hook = _state.on_grad
    if hook is not None:
        hook(t, write)


def note_mutated(t):
    """A concrete tensor is about to be updated in place by a traced value."""
    hook = _state.on_create
    if hook is not None:
        hook(t, mutated=True)


def set_on_view(fn, on_write):
    """Install the trace's view hooks (see Trace.on_view, Trace.on_write); returns the previous
    pair."""
    prev = (_state.on_view, _state.on_write)
    _state.on_view = fn
    _state.on_write = on_write
    return prev


def write_traced(t, value):
    """An in-place write of traced `value` into `t`: `t` takes it as its new value and, while
    tracing, the write reaches the tensor `t` is a view of (and so every other view of it)."""
    hook = _state.on_write
    if hook is None:
        t._data = value
    else:
        hook(t, value)


def set_live_scalar(fn):
    prev = _state.live_scalar
    _state.live_scalar = fn
    return prev


def live_scalar(getter, dtype=np.float64, name: str = "", key=None):
    """A Python number that may change between calls of a compiled function.

    Eagerly this is just ``getter()``.  While tracing it becomes a 0-d tensor input that
    the compiled function reads from ``getter()`` at every call, so e.g. an optimizer's
    learning rate can change (LR schedules) without retracing or going stale.
    """
    hook = _state.live_scalar
    if hook is None:
        return getter()
    return hook(getter, np.dtype(dtype), name, key)


def set_on_item(fn):
    prev = _state.on_item
    _state.on_item = fn
    return prev


# How a traced read of a tracked item (`read_item`) may depend on its value at each call.
LIVE = "live"        # a number fed to tensor math: a per-call input (no retrace when it changes)
VALUE = "value"      # decides what the code does: the trace is valid while it is equal
TRUTH = "truth"      # decides a branch by its truth only (`if weight_decay:`)


def read_item(container, key, how=VALUE, dtype=np.float64, name: str = ""):
    """``container[key]``, for Python state that may change between calls of a compiled
    function (an optimizer's hyperparameters in its param groups).

    Eagerly this is ``container[key]``. While tracing, a value that the traced function itself
    wrote earlier in the trace is that constant; otherwise, `how` says what the trace depends
    on: LIVE makes it a 0-d tensor input read at every call (an lr schedule changes it without
    retracing); VALUE and TRUTH guard it, so a call that sees another value (or truth) traces
    again.
    """
    value = dict.__getitem__(container, key)
    hook = _state.on_item
    if hook is None:
        return value
    return hook(container, key, value, how, np.dtype(dtype), name)


def note_item_write(container, key, value):
    """Tracked Python state written by the code being traced (``group["lr"] = lr`` inside a
    compiled step): the trace writes it at every call, as the Python code would."""
    hook = _state.on_item
    if hook is not None:
        hook(container, key, value, "write", None, "")


def get_compute():
    return _state.compute


def is_grad_enabled() -> bool:
    return _state.grad_enabled


def set_grad_enabled(flag: bool) -> bool:
    prev = _state.grad_enabled
    _state.grad_enabled = bool(flag)
    return prev


def apply(op, *inputs, **params):
    """Compute `op` on tensors `inputs`; record an autograd node when needed."""
    if not _hooked_threads or _state.compute is eager_compute:
        # The eager fast path (eager_compute inlined, common arities unrolled).
        try:
            n = len(inputs)
            if params:
                data = op.impl(*[t._data for t in inputs], **params)
            elif n == 2:
                data = op.impl(inputs[0]._data, inputs[1]._data)
            elif n == 1:
                data = op.impl(inputs[0]._data)
            else:
                data = op.impl(*[t._data for t in inputs])
        except Exception as exc:  # noqa: BLE001
            raise _explain_failure(op, [t._data for t in inputs], params, exc) from exc
        if data.__class__ is not _ndarray:
            data = np.asarray(data)
    else:
        data = _state.compute(op, inputs, params)
    out = _new_tensor(_Tensor)
    out._data = data
    out.grad_fn = None
    if op.view and data.__class__ is _ndarray and data.base is not None:
        out._version = inputs[0]._version  # a view: in-place writes to either are seen by both
        # Autograd cannot yet rebase a view's or its base's history after an in-place write
        # to the other (PyTorch's CopySlices); Tensor._inplace refuses such writes instead of
        # letting the other tensor's gradient silently miss the update.
        out._is_view = True
        inputs[0]._has_views = True
    else:
        out._version = [0]
        if op.view and data.__class__ is not _ndarray:
            hook = _state.on_view
            if hook is not None:  # traced: the trace links the view to its base
                hook(op, inputs[0], params, out)
    if op.vjp is not None:
        for t in inputs:
            if t.requires_grad:
                # Only floating-point results carry gradients (PyTorch: x.long(), x.bool(),
                # x > 0 do not require grad).
                if _state.grad_enabled and data.dtype.kind == "f":
                    _attach_node(op, inputs, params, out)
                break
    return out


def check_tensor(value, op: str, position: str = "argument"):
    from .tensor import Tensor

    if not isinstance(value, Tensor):
        raise op_error(op, f"expected a Tensor as {position}, got {describe(value)}",
                       hint="wrap data with eager.tensor(...)", exc=TypeError)
    return value
