"""The one dispatch function every tensor op goes through.

`apply(op, *inputs, **params)` computes an op's output value through the
current *trace protocol* (eager/protocol.py) and, when grad mode is on and an
input requires grad, records an autograd node.  Eagerly the protocol is
`eager.protocol.EAGER`, which runs the op's numpy implementation; the tracer
installs one that records an IR equation instead (`set_protocol`).  That
switch is the only difference between running and tracing, so any eager
program (modules, composites, `loss.backward()`, optimizer steps) traces
without a second code path.  The other events of the protocol (tensor
created, mutated, viewed, `.grad` accessed, live scalars, tracked Python
state) are reported through the functions below.

Both the protocol and grad mode are thread-local, as in PyTorch.
"""
from __future__ import annotations

import threading
from operator import attrgetter

import numpy as np

from . import dtypes as _dtypes
from .dtypes import FLOATING
from .errors import describe, op_error
from .protocol import EAGER, TraceProtocol


class _State(threading.local):
    grad_enabled = True
    protocol = EAGER  # the current trace protocol (eager.protocol); the tracer swaps it
    making_state = False  # inside state_init(): new tensors are state, not trace values


_state = _State()


def eager_compute(op, inputs, params):
    """Run `op` on the inputs' numpy arrays; turn numpy's failures into messages naming the op."""
    datas = [t._data for t in inputs]
    try:
        out = op.impl(*datas, **params) if params else op.impl(*datas)
    except Exception as exc:  # noqa: BLE001 - re-raised with context below
        if not isinstance(exc, RuntimeWarning):
            raise _explain_failure(op, datas, params, exc) from exc
        out = quiet_compute(op, datas, params)
    if type(out) is not np.ndarray:
        out = np.asarray(out)
    return out


def quiet_compute(op, datas, params):
    """`op.impl` again with numpy's floating-point reports off: IEEE results (inf - inf, 0/0,
    log(0), overflow) are not warnings, as in PyTorch.  Eager normally never reaches here:
    eager/__init__.py ignores RuntimeWarnings raised from eager's modules.  A user filter
    turning warnings into errors (warnings.simplefilter("error")) makes the impl raise the
    warning instead; that exception lands here, and the op runs again without it (impls are
    pure).  Costs nothing on the hot path (np.errstate costs ~1 us per call)."""
    with np.errstate(all="ignore"):
        return op.impl(*datas, **params) if params else op.impl(*datas)


def quiet(impl):
    """`impl` for callers outside eager's eager path (compiled programs' numpy steps, the
    interpreter, the numpy fallback): what `quiet_compute` does, for one impl; numpy's calls
    are attributed to this module, so eager's warning filter applies as in eager."""
    def run(*args, **params):
        try:
            return impl(*args, **params)
        except RuntimeWarning:
            with np.errstate(all="ignore"):
                return impl(*args, **params)
    run.__name__ = getattr(impl, "__name__", "impl")
    return run


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


# How many threads have a protocol other than EAGER installed; while it is zero, apply()
# skips the thread-local lookup and the other events are not reported at all.
_hooked_threads = 0
_hook_lock = threading.Lock()


def set_protocol(protocol: TraceProtocol) -> TraceProtocol:
    """Install `protocol` as this thread's current trace protocol; returns the previous one
    (put it back when done: protocols nest)."""
    global _hooked_threads
    prev = _state.protocol
    with _hook_lock:
        _hooked_threads += (protocol is not EAGER) - (prev is not EAGER)
    _state.protocol = protocol
    return prev


def current_protocol() -> TraceProtocol:
    """This thread's current trace protocol (`eager.protocol.EAGER` unless something records)."""
    return _state.protocol


def tracing() -> bool:
    """Whether this thread is recording a trace rather than running ops."""
    return _hooked_threads != 0 and _state.protocol.tracing


def note_created(t):
    """Creation functions report new tensors here (the tracer makes them constants)."""
    _state.protocol.tensor_created(t, _state.making_state)


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


def note_grad(t, write: bool):
    _state.protocol.grad_access(t, write)


def note_value_read(t, what: str):
    """Python reads concrete tensor `t`'s value (`.item()`, `.numpy()`, `bool()` ...)."""
    _state.protocol.value_read(t, what)


def note_random_state(what: str):
    """The global generator is about to be reseeded, or its state read or set (`what`
    names the call): a trace cannot repeat that Python work at every call."""
    if _hooked_threads:
        _state.protocol.random_state(what)


def note_mutated(t):
    """A concrete tensor is about to be updated in place by a traced value."""
    _state.protocol.tensor_mutated(t)


def write_traced(t, value):
    """An in-place write of traced `value` into `t`: `t` takes it as its new value and, while
    tracing, the write reaches the tensor `t` is a view of (and so every other view of it)."""
    _state.protocol.write_inplace(t, value)


def live_scalar(getter, dtype=np.float64, name: str = "", key=None):
    """A Python number that may change between calls of a compiled function.

    Eagerly this is just ``getter()``.  While tracing it becomes a 0-d tensor input that
    the compiled function reads from ``getter()`` at every call, so e.g. an optimizer's
    learning rate can change (LR schedules) without retracing or going stale.
    """
    if not _hooked_threads:
        return getter()
    return _state.protocol.live_scalar(getter, np.dtype(dtype), name, key)


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
    if not _hooked_threads:
        return value
    return _state.protocol.read_item(container, key, value, how, np.dtype(dtype), name)


_dtypes.READ_DEFAULT[0] = read_item  # (the default dtype: guarded where a trace used it)


def note_item_write(container, key, value):
    """Tracked Python state written by the code being traced (``group["lr"] = lr`` inside a
    compiled step): the trace writes it at every call, as the Python code would."""
    if _hooked_threads:
        _state.protocol.write_item(container, key, value)


def is_grad_enabled() -> bool:
    return _state.grad_enabled


def set_grad_enabled(flag: bool) -> bool:
    prev = _state.grad_enabled
    _state.grad_enabled = bool(flag)
    return prev


def apply(op, *inputs, **params):
    """Compute `op` on tensors `inputs`; record an autograd node when needed."""
    if not _hooked_threads or _state.protocol is EAGER:
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
            if not isinstance(exc, RuntimeWarning):
                raise _explain_failure(op, [t._data for t in inputs], params, exc) from exc
            data = quiet_compute(op, [t._data for t in inputs], params)
        if data.__class__ is not _ndarray:
            data = np.asarray(data)
    else:
        data = _state.protocol.apply(op, inputs, params)
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
        if op.view and data.__class__ is not _ndarray:  # traced: links the view to its base
            _state.protocol.view_created(op, inputs[0], params, out)
    if op.vjp is not None:
        for t in inputs:
            if t.requires_grad:
                # Only floating-point results carry gradients (PyTorch: x.long(), x.bool(),
                # x > 0 do not require grad).
                if _state.grad_enabled and data.dtype in FLOATING:
                    _attach_node(op, inputs, params, out)
                break
    return out


def check_tensor(value, op: str, position: str = "argument"):
    from .tensor import Tensor

    if not isinstance(value, Tensor):
        raise op_error(op, f"expected a Tensor as {position}, got {describe(value)}",
                       hint="wrap data with eager.tensor(...)", exc=TypeError)
    return value
