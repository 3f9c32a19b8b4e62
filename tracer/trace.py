"""Tracing: run a Python function on traced values and record a `Graph`.

A trace installs itself as eager's current trace protocol (`eager.protocol`,
`eager.dispatch.set_protocol`), so every op of the user's eager code records an
equation instead of running. `Trace` implements each event of the protocol by
delegating to the piece that owns it: views (tracer.views), tracked Python state
(tracer.pystate), captures, constants and live scalars (here).
Tensors met during the trace are lifted into the graph:

* traced values of this trace -> their `Var`;
* read-only 0-d arrays (Python scalars wrapped by the front end) -> `Literal`s;
* tensors made by creation functions during the trace -> constants;
* any other concrete tensor (parameters, globals, closure variables) -> a
  *capture*, read again at every call.  In-place updates of a captured tensor
  during the trace (optimizer steps) are recorded as graph `updates` and the
  tensor is restored, so the trace itself leaves no trace on user state.
"""
from __future__ import annotations

import os
import threading

import numpy as np

from eager import autograd, dispatch
from eager.errors import user_frame
from eager.ops import Dim, TensorType, has_dims
from eager.protocol import TraceProtocol
from eager.tensor import Tensor

from . import pystate, views
from .errors import TracingError, _short_where, _where  # noqa: F401 - tracer.trace.TracingError too
from .ir import Eqn, Graph, Literal, Var


_INSTEAD = ("use tracer.cond(pred, true_fn, false_fn, *operands) for data-dependent branches, "
            "tracer.while_loop(cond_fn, body_fn, loop_vars) for data-dependent loops, or pass "
            "the value as a static argument (static_argnames=...) if it is a Python constant")


class TracedValue:
    """Stands in for a numpy array inside traced tensors: a `Var` of the trace."""

    __slots__ = ("var", "trace", "kept")

    def __init__(self, var: Var, trace: "Trace"):
        self.var = var
        self.trace = trace
        # (layout proxy, id of the argument Var it is, or None) for the value an in-place
        # write gave a tensor: eagerly the tensor keeps its array's layout (tracer.views)
        self.kept = None

    @property
    def shape(self) -> tuple:
        return self.var.type.shape

    @property
    def dtype(self) -> np.dtype:
        return self.var.type.dtype

    @property
    def ndim(self) -> int:
        return len(self.var.type.shape)

    @property
    def size(self) -> int:
        n = 1
        for s in self.var.type.shape:
            if isinstance(s, Dim):  # a symbolic dimension: raises TracingError
                s.unknown(f"the number of elements of %{self.var.name}: {self.var.type}")
            n *= s
        return n

    def _fail(self, what: str):
        raise TracingError(
            f"{_where()}: {what} of a traced tensor (%{self.var.name}: {self.var.type}) needs "
            f"its value, which is not known while tracing a @function. Instead, {_INSTEAD}.")

    def __bool__(self):
        self._fail("bool()")

    def __float__(self):
        self._fail("float()")

    def __int__(self):
        self._fail("int()")

    def __index__(self):
        self._fail("using as an index")

    def item(self):
        self._fail(".item()")

    def tolist(self):
        self._fail(".tolist()")

    def to_numpy(self):
        self._fail(".numpy()")

    def __array__(self, *args, **kwargs):
        self._fail("converting to a numpy array")

    def copy(self):
        return self

    def view_needs_copy(self, shape) -> bool:
        """Whether eager's array would have to be copied to take `shape` (Tensor.view)."""
        from .layout import view_needs_copy

        if self.kept is not None:
            return views.kept_needs_copy(self, shape)
        return view_needs_copy(self.trace, self.var, shape)

    @property
    def c_contiguous(self) -> bool:
        from .layout import is_c_contiguous

        if self.kept is not None:
            return views.kept_c_contiguous(self)
        return is_c_contiguous(self.trace, self.var)

    def astype(self, dtype):
        self._fail("astype")

    def __repr__(self) -> str:
        return f"<traced %{self.var.name}: {self.var.type}>"


class LiveScalar:
    """A captured Python number (a learning rate): its value is `getter()` at every call.

    Quacks like a captured tensor for the capture machinery: `_data` is read per call.
    """

    __slots__ = ("getter", "dtype", "name", "_version", "grad", "grad_fn", "requires_grad",
                 "_last", "_array")

    def __init__(self, getter, dtype, name=""):
        self.getter = getter
        self.dtype = dtype
        self.name = name
        self._version = [0]
        self.grad = None
        self.grad_fn = None
        self.requires_grad = False
        self._last = self._array = None

    @property
    def _data(self):
        # The same array while the getter returns the same object: a compiled call checks
        # a capture's array by identity, and a new array per call would cost its checks.
        value = self.getter()
        if value is not self._last or self._array is None:
            array = np.array(value, self.dtype)
            array.flags.writeable = False
            self._last, self._array = value, array
        return self._array

    @_data.setter
    def _data(self, value):  # restoring after a trace: nothing to restore
        pass

    @property
    def shape(self):
        return ()


class _CaptureState:
    """What a captured tensor looked like before the trace touched it."""

    __slots__ = ("tensor", "var", "data", "grad", "grad_fn", "requires_grad", "version",
                 "index", "grad_owner")

    def __init__(self, tensor, var, index, grad_owner=None):
        self.grad_owner = grad_owner  # capture index of the tensor whose .grad this is
        self.tensor = tensor
        self.var = var
        self.index = index
        self.data = tensor._data
        self.grad = getattr(tensor, "_grad", None)  # not .grad: no access event
        self.grad_fn = tensor.grad_fn
        self.requires_grad = tensor.requires_grad
        self.version = tensor._version[0]


# Above this many elements a tensor whose value the trace's Python read is not compared at
# every call (a weight's .numpy()): its value is frozen at trace time, with a warning.
VALUE_GUARD_ELEMENTS = 4096


class GradientBeforeTrace(TracingError):
    """A backward() inside the trace reaches autograd nodes recorded before the call began
    (a non-leaf tensor made outside and used inside): eager sends the gradient on through
    that graph, which a compiled call cannot; @function runs that signature eagerly."""


class HistoryAfterCall(TracingError):
    """An argument or captured tensor gets autograd history inside the call (c.add_(h) with
    h requiring grad): eager leaves it with a grad_fn into the call's graph, which a compiled
    call cannot give it; @function runs that signature eagerly."""


class AutogradStateChanged(TracingError):
    """The traced function leaves autograd's Python state changed (a parameter's or an
    argument's requires_grad, a layer frozen inside the step; the grad mode switched by a
    bare set_grad_enabled call): a trace would change it only once; @function runs that
    signature eagerly."""


class RandomStateInTrace(TracingError):
    """The traced code reseeds the global generator or an eager.Generator, or reads or sets
    its state (`eager.manual_seed` inside the step): a trace would do that once;
    @function runs that signature eagerly."""


class Trace(TraceProtocol):
    """One trace in progress (possibly nested inside a parent for cond/while bodies).

    ``with trace:`` makes it this thread's current trace protocol (eager.protocol), so
    eager code reports to it; the previous protocol (eager, or the enclosing trace of a
    cond/while body) is current again on exit.
    """

    tracing = True

    def __init__(self, name: str, parent: "Trace | None" = None):
        self.name = name
        self.parent = parent
        self.eqns: list = []
        self.inputs: list = []
        self.input_names: list = []
        self.captures: dict = {}       # id(tensor) -> _CaptureState
        self.capture_order: list = []  # _CaptureState in order of first use
        self.outer_captures: list = []  # for sub-traces: (outer operand, inner Var)
        self._outer_map: dict = {}
        self.consts: list = []         # (Var, ndarray)
        self._const_map: dict = {}     # id(tensor) -> Var
        self.created: dict = {}        # id(tensor) -> tensor made during the trace
        self._live: dict = {}           # (name, key) -> LiveScalar
        self.grad_first_access: dict = {}  # id(tensor) -> "read" | "write"
        self.created_mutated: dict = {}  # id(tensor) -> (tensor, its array before the update)
        self.grad_sources: dict = {}   # id(grad tensor) -> capture index of its owner
        self.entry_grads: dict = {}    # id(tensor) -> (tensor, its .grad when the call began)
        self.entry_requires_grad: dict = {}  # id(tensor) -> (tensor, requires_grad then)
        # Tracked Python state (eager.dispatch.read_item): what the trace depends on, and
        # what it wrote, keyed by (id(container), key). See tracer/pystate.py.
        self.item_guards: dict = {}
        self.input_strides: dict = {}  # id(input Var) -> (Var, element strides): non-C inputs
        self.layout_reads: set = set()  # ids of input Vars whose layout a decision read
        self.layout_if_written: set = set()  # ... read by a reshape: matters if anything is
        self.wrote_in_place = False          # written in place in the trace
        self.item_writes: dict = {}
        self.item_entry: dict = {}
        # Concrete tensors made before the call whose value Python read (`if t.item() > 0`,
        # `float(scale)`): id -> (tensor, its array as read, how, where); guarded by contents
        self.value_reads: dict = {}
        self._counter = 0
        self.lock = threading.Lock()
        # Autograd nodes made from here on are this call's (backward_nodes)
        self.node_start = autograd.next_node_serial() if parent is None \
            else parent._root().node_start

    # -------------------------------------------------------------- values
    def new_var(self, type_: TensorType, name: str | None = None) -> Var:
        if name is None:
            root = self._root()
            name = str(root._counter)
            root._counter += 1
        return Var(name, type_)

    def _root(self) -> "Trace":
        t = self
        while t.parent is not None:
            t = t.parent
        return t

    def add_input(self, tensor_type: TensorType, name: str, strides=None) -> Var:
        """A new input; `strides` (in elements) when its array is not C-contiguous: the
        trace's view/copy decisions follow that layout (the cache key includes it)."""
        var = self.new_var(tensor_type, name)
        self.inputs.append(var)
        self.input_names.append(name)
        if strides is not None:
            self.input_strides[id(var)] = (var, tuple(strides))
        return var

    def traced_tensor(self, var: Var, requires_grad: bool = False) -> Tensor:
        t = Tensor._wrap(TracedValue(var, self))
        if requires_grad:
            t.requires_grad = True
        return t

    def lift(self, t: Tensor):
        """The operand standing for tensor `t` in this trace."""
        if t._view_of is not None:
            views.refresh(self, t)  # its base may have been written since it was derived
        data = t._data
        if data.__class__ is TracedValue:
            if data.trace is self:
                return data.var
            return self._lift_outer(data)
        if data.__class__ is not np.ndarray:
            data = np.asarray(data)
        if data.ndim == 0 and not data.flags.writeable:
            return Literal(data, TensorType((), data.dtype))
        key = id(t)
        if key in self.created or key in self._const_map:
            # Even 0-d: a created tensor may turn out to be state (see _state_to_captures);
            # the passes fold 0-d constants into literals afterwards.
            var = self._const_map.get(key)
            if var is None:
                var = self.new_var(TensorType(tuple(data.shape), data.dtype), f"c{len(self.consts)}")
                self._const_map[key] = var
                self.consts.append((var, data.copy()))
            return var
        return self.capture(t)

    def capture(self, t: Tensor):
        if self.parent is not None:
            outer = self.parent.capture(t) if t._data.__class__ is np.ndarray else None
            return self._bind_outer(outer, t)
        state = self.captures.get(id(t))
        if state is None:
            data = t._data
            index = len(self.capture_order)
            var = self.new_var(TensorType(tuple(data.shape), data.dtype), f"k{index}")
            state = _CaptureState(t, var, index, self.grad_sources.get(id(t)))
            entry = self.entry_grads.get(id(t))
            if entry is not None:
                # The function may have changed .grad before first using the tensor
                # (opt.zero_grad() at the top of a training step). Guards, updates and the
                # restore must compare with the .grad the call started with; otherwise every
                # call looks different from the trace and traces again.
                state.grad = entry[1]
            entry = self.entry_requires_grad.get(id(t))
            if entry is not None:
                # (a layer frozen for part of the step: the guard and the restore want the
                # flag the call started with, not the one at first use)
                state.requires_grad = entry[1]
            self.captures[id(t)] = state
            self.capture_order.append(state)
            g = getattr(t, "_grad", None)
            if g is not None and g is state.grad:
                self.grad_sources[id(g)] = index
        return state.var

    def _lift_outer(self, data: TracedValue):
        """A value of an enclosing trace used inside a cond/while body."""
        if self.parent is None:
            raise TracingError(
                f"{_where()}: a traced tensor from another @function trace "
                f"(%{data.var.name}: {data.var.type}) leaked into this one: it was stored in "
                f"Python state during that trace. Return it from that function instead, or "
                f"create state with a creation function (e.g. eager.zeros_like) and update it "
                f"in place (copy_, add_), which @function turns into real updates")
        outer = self.parent.lift(Tensor._wrap(data))
        return self._bind_outer(outer, None)

    def _bind_outer(self, outer, tensor):
        key = id(outer)
        var = self._outer_map.get(key)
        if var is None:
            var = self.new_var(outer.type)
            self._outer_map[key] = var
            self.outer_captures.append((outer, var))
        return var

    def record(self, op: str, operands: tuple, params: dict, out_types: tuple) -> tuple:
        """Record a multi-output (control-flow) equation; returns its output Vars."""
        outs = tuple(self.new_var(ty) for ty in out_types)
        self.eqns.append(Eqn(op, operands, params, outs, _short_where()))
        return outs

    # -------------------------------------------------------------- activation
    def __enter__(self):
        self._prev_protocol = dispatch.set_protocol(self)
        return self

    def __exit__(self, *exc):
        dispatch.set_protocol(self._prev_protocol)
        return False

    # -------------------------------------------------------------- the trace protocol
    # (eager/protocol.py: each event eager code reports while this trace is current)
    def backward_nodes(self, nodes) -> None:
        """A backward() in the trace may only run through nodes recorded in it: eager sends
        the gradient on into the graph of a non-leaf tensor made before the call (its
        .grad_fn), and the program cannot (it would write traced values into outside
        tensors' .grad, or stop short of them)."""
        start = self.node_start
        for node in nodes:
            if node.serial < start:
                raise GradientBeforeTrace(
                    f"{_where()}: backward() reaches {node.name()}, recorded before the "
                    f"call began: a tensor that requires grad, made outside the function "
                    f"from other tensors (a non-leaf, with a grad_fn), is used inside and "
                    f"eager autograd would send its gradient on through the graph that "
                    f"made it. Compute that tensor inside the function, or pass/capture "
                    f"it detached (t.detach(), or t.detach().requires_grad_() to get its "
                    f"own .grad)")

    def value_read(self, t: Tensor, what: str) -> None:
        """Python read the value of a concrete tensor. One made during the call (a
        constant: the same every call) needs nothing; one made before it is outside state,
        whose value the trace has now baked into its Python decisions: tracer.tracing
        guards its contents, so a call that finds another value traces again."""
        key = id(t)
        tr = self
        while tr is not None:
            if key in tr.created:
                return
            tr = tr.parent
        root = self._root()
        if key not in root.value_reads:
            data = t._data  # (a copy only of what a guard will compare: see tracing.py)
            seen = data.copy() if data.size <= VALUE_GUARD_ELEMENTS else data
            root.value_reads[key] = (t, seen, what, _short_where())

    def random_state(self, what: str) -> None:
        """Reseeding the global generator, or reading or setting its state, is Python work a
        trace would do once: refused before it happens (@function runs the signature
        eagerly, so eager's numbers come out)."""
        raise RandomStateInTrace(
            f"{_where()}: {what} inside {self._root().name}, while it is traced: a trace "
            f"would reseed (or read or set) the global generator only once, and the "
            f"compiled calls would draw other numbers than eager. Seed before calling the "
            f"function, or draw the numbers outside and pass them in")

    def apply(self, op, inputs, params):
        """An op of eager code: an equation of the trace; returns its traced value."""
        return self.compute(op, inputs, params)

    def compute(self, op, inputs, params):
        """Record `op` on `inputs` as an equation (tracer.views records its writes here too)."""
        operands = tuple(self.lift(t) for t in inputs)
        in_types = [x.type for x in operands]
        try:
            out_type = op.infer(*in_types, **params)
        except Exception as exc:
            if isinstance(exc, TypeError) or not _symbolic(in_types, params):
                raise  # (a dtype error is one whatever the sizes)
            from .symbolic import symbolic_error

            raise symbolic_error(op.name, in_types, exc) from exc
        out = self.new_var(out_type)
        self.eqns.append(Eqn(op.name, operands, dict(params), out, _short_where()))
        return TracedValue(out, self)

    def tensor_created(self, t: Tensor, state: bool = False):
        """A tensor made by a creation function: a constant of the trace when used; inside
        state_init() it is state, captured like any outside tensor."""
        if not state:
            self.created[id(t)] = t

    def tensor_mutated(self, t: Tensor):
        """A concrete tensor about to take a traced value in place: an update of the trace."""
        if self.parent is not None:
            raise TracingError(f"{_where()}: in-place updates of outside tensors inside "
                               f"tracer.cond / tracer.while_loop bodies are not supported; "
                               f"return the new value from the body instead")
        if id(t) in self.created:
            # State made during the trace and updated in place (e.g. an optimizer's first
            # step): the runtime writes the computed value into this very tensor.
            self.created_mutated.setdefault(id(t), (t, t._data))
        else:
            self.capture(t)

    def live_scalar(self, getter, dtype, name="", key=None):
        """A Python number read at every call (eager.dispatch.live_scalar): a capture."""
        if self.parent is not None:
            return Tensor._wrap(TracedValue(self._bind_outer(
                self.parent.live_scalar(getter, dtype, name, key)._data.var, None), self))
        key = (name, key if key is not None else id(getter))
        source = self._live.get(key)
        if source is None:
            source = LiveScalar(getter, dtype, name)
            self._live[key] = source
        return Tensor._wrap(TracedValue(self.capture(source), self))

    def read_item(self, container, key, value, how, dtype, name):
        """A read of tracked Python state (eager.dispatch.read_item): see tracer.pystate."""
        return pystate.read_item(self, container, key, value, how, dtype, name)

    def write_item(self, container, key, value):
        """A write of tracked Python state (eager.dispatch.note_item_write)."""
        pystate.write_item(self, container, key, value)

    def view_created(self, op, base, params, out):
        """A view op's traced output: linked to its base (tracer.views)."""
        views.link_view(op, base, params, out)

    def write_inplace(self, t: Tensor, value):
        """An in-place op gave `t` the traced `value` (see tracer.views)."""
        self._root().wrote_in_place = True
        views.write(self, t, value)

    def grad_access(self, t, write: bool):
        # The first access decides: a read means the trace depends on the incoming .grad.
        self.grad_first_access.setdefault(id(t), "write" if write else "read")


def _symbolic(in_types, params) -> bool:
    """Does an equation involve symbolic dimensions (in operand shapes or parameters)?"""
    from .symbolic import param_has_dims

    return any(has_dims(t.shape) for t in in_types) or any(
        param_has_dims(v) for v in params.values())


def current_trace() -> "Trace | None":
    protocol = dispatch.current_protocol()
    return protocol if isinstance(protocol, Trace) else None


def is_traced(t) -> bool:
    return isinstance(t, Tensor) and t._data.__class__ is TracedValue


__all__ = ["Trace", "TracedValue", "TracingError", "current_trace", "is_traced", "Graph",
           "Eqn", "Var", "Literal"]
