"""The trace protocol: the one object through which eager code can be recorded instead of run.

Every thread has a *current protocol* (`eager.dispatch.current_protocol()`), as JAX's
autodidax has a current interpreter. Eagerly it is `EAGER`, an instance of this base class,
whose methods do what eager execution does (run the op, or nothing at all). The tracer
installs its own (`tracer.trace.Trace`, with `eager.dispatch.set_protocol`) for as long as
it records a function, and puts the previous one back afterwards, so traces nest (a
`tracer.cond` / `tracer.while_loop` body is a trace inside a trace). Eager knows this class
and nothing of the tracer.

The events, who reports them, and what the eager default does:

======================================  =========================================  ============
method                                  reported by                                eager does
======================================  =========================================  ============
``apply(op, inputs, params)``           `dispatch.apply`, for every registry op    runs the op
``tensor_created(t, state)``            creation functions (`tensor`, `zeros`...)  nothing
                                        via `note_created`; ``state`` is True
                                        inside `state_init()`
``tensor_mutated(t)``                   `note_mutated`: an in-place write is about nothing
                                        to rebind a concrete tensor to a recorded
                                        value
``write_inplace(t, value)``             `write_traced`: in-place ops writing a     ``t._data =
                                        recorded value                             value``
``view_created(op, base, params, out)`` `dispatch.apply`, for a view op's          nothing
                                        recorded (non-numpy) output
``grad_access(t, write)``               `note_grad`: `Tensor.grad` reads, writes   nothing
``live_scalar(getter, dtype, name,      `dispatch.live_scalar`: a Python number    ``getter()``
key)``                                  that may change between calls
``read_item(container, key, value,      `dispatch.read_item`: tracked Python state ``value``
how, dtype, name)``                     (an optimizer's param groups)
``write_item(container, key, value)``   `dispatch.note_item_write`                 nothing
``value_read(t, what)``                 `dispatch.note_value_read`: `.item()`,     nothing
                                        `float()`, `bool()`, `.tolist()`,
                                        `.numpy()`, `np.asarray` of a concrete
                                        tensor (its value decides Python)
``random_state(what)``                  `dispatch.note_random_state`: the global   nothing
                                        generator is about to be reseeded, or its
                                        state read or set (`manual_seed`,
                                        `get_rng_state`, `set_rng_state`)
======================================  =========================================  ============

`tracing` says whether the protocol records rather than runs: eager code that must take
another form while recorded (SGD's first momentum buffer, `clip_grad_norm_`'s finiteness
check) or that must not be recorded at all (`LRScheduler.step()`) asks
`eager.dispatch.tracing()`. A protocol that only observes an eager run (check mode's
recorder of every op's value) overrides `apply` and keeps ``tracing = False``.

Only `dispatch.apply` calls `apply`. The other events are reported only where they can
matter: while some thread has a protocol other than `EAGER` installed
(`dispatch._hooked_threads`, one module-global read for eager code), or for a value that is
not a numpy array (a recorded one).

`STRUCTURE_EPOCH` is the other thing compiled calls read from eager: a counter that
eager.nn bumps whenever a Module's attributes are (re)assigned or deleted, and by `train()` /
`eval()` when they change a module's mode (so a `model.train()` at every step moves nothing).
A compiled function re-checks where its captured parameters come from, and the plain module
attributes its trace read, only when the counter moved.
"""
from __future__ import annotations

# Bumped (``STRUCTURE_EPOCH[0] += 1``) by eager.nn on every change of module structure
# (attribute assignment and deletion, registering parameters, buffers and sub-modules,
# container edits, train()/eval() that change a mode); read by tracer guards, which recheck
# module-derived facts only when it moved.
STRUCTURE_EPOCH = [0]


class TraceProtocol:
    """The events eager code reports; this base class is eager execution itself.

    Subclass it to record or observe eager code, and install an instance for the current
    thread with `eager.dispatch.set_protocol` (restore the previous one when done).
    """

    tracing = False  # True when ops are recorded rather than run

    def apply(self, op, inputs, params):
        """The output value of registry op `op` on tensors `inputs` (a numpy array eagerly)."""
        from .dispatch import eager_compute

        return eager_compute(op, inputs, params)

    def tensor_created(self, t, state: bool) -> None:
        """Tensor `t` was made by a creation function; `state` when inside `state_init()`
        (it is then state later calls expect to find, not a value of this call)."""

    def tensor_mutated(self, t) -> None:
        """Concrete tensor `t` is about to be updated in place by a recorded value."""

    def write_inplace(self, t, value) -> None:
        """An in-place write of the recorded `value` into `t` (`t` takes it as its value)."""
        t._data = value

    def view_created(self, op, base, params, out) -> None:
        """View op `op` made `out` from `base`, and `out`'s value is a recorded one."""

    def grad_access(self, t, write: bool) -> None:
        """`t.grad` was read (`write` False) or assigned (`write` True)."""

    def live_scalar(self, getter, dtype, name: str, key):
        """A Python number that may change between calls (an optimizer's learning rate)."""
        return getter()

    def read_item(self, container, key, value, how: str, dtype, name: str):
        """``container[key]`` of tracked Python state; `how` is dispatch.LIVE, VALUE or
        TRUTH (what a recording may depend on)."""
        return value

    def write_item(self, container, key, value) -> None:
        """Tracked Python state is about to be set (``container[key] = value``)."""

    def backward_nodes(self, nodes) -> None:
        """A backward() is about to send gradients through autograd `nodes` (each an
        eager.autograd.Node; its `serial` tells the order they were made in)."""

    def value_read(self, t, what: str) -> None:
        """Python is about to read the value of concrete tensor `t` (`what`: ".item()",
        "float()", ".numpy()" ...): whatever it then does depends on that value."""

    def random_state(self, what: str) -> None:
        """`what` ("eager.manual_seed()", "eager.get_rng_state()" ...) is about to reseed the
        global generator, or read or set its state: Python work on the generator itself,
        not a draw (draws are registry ops)."""


EAGER = TraceProtocol()
