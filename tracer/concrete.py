"""ConcreteFunction: one traced, optimized and compiled specialization of a @function.

Checks its guards, calls the program (a generated call for the common case), and writes
updates of arguments, captures and .grad back to the caller's tensors. `tracer.function`
(the decorator, its trace cache) selects one per call; tracer.tracing makes them.
"""

from __future__ import annotations

import numpy as np

from eager.protocol import STRUCTURE_EPOCH
from eager.random import get_rng_state, set_rng_state
from eager.ops import OPS
from eager.tensor import Tensor

from .aliasing import AliasCheck
from .autodiff import freed_node
from .backends import get_backend
from .call_source import MISS, generate_call, no_references as _no_references, raised_by_check
from .guards import first_failure
from .errors import ProgramRaised, step_error
from .ir import Graph, Var, may_raise
from .layout import layout_change, layout_key
from .ownership import unshared as _unshared
from .passes import draws_random
from .pystate import ItemState
from .pytree import LEAF, flatten, unflatten
from .trace import TracingError
from .views import derive


# --------------------------------------------------------------------------------------
# concrete functions


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


class ConcreteFunction:
    """One traced, optimized and compiled specialization of a @function."""

    # Argument lists and dicts the function returns (tracer.pytree.argument_containers):
    # Function puts the caller's own back in the result, as eager returns them.
    arg_containers: tuple = ()

    def __init__(self, name, graph, raw_graph, program, arg_tree, out_tree, arg_names,
                 signature, captures, capture_grad_owner, update_targets, grad_pattern,
                 sources, one_shot, differentiable, trace_seconds, compile_seconds,
                 created_targets, guards=(), frozen=(), item_state=None, out_alias=None,
                 saved_modified=None, freed_outputs=None, input_layouts=(), out_views=None):
        self.name = name
        # (argument index, its strides, or None for C-contiguous) of each argument whose
        # layout the trace's view/copy decisions read: a call with another layout takes
        # another trace (a reshape of a transposed array copies, of a C one it views).
        self.input_layouts = tuple(input_layouts)
        # eager's error at backward when an in-place op changed a value backward needs
        self.saved_modified = saved_modified
        self.graph = graph
        self.raw_graph = raw_graph
        self.program = program
        self.arg_tree = arg_tree
        self.out_tree = out_tree
        self.arg_names = arg_names
        self.signature = signature
        self._captures = captures                # tensors (strong refs: they are the model)
        self._capture_grad_owner = capture_grad_owner  # per capture: owner index if a .grad
        self._update_targets = update_targets
        self._grad_pattern = grad_pattern
        self._sources = sources
        # What the trace assumed about the Python world (tracer.guards): globals, closures,
        # container entries, .grad presence - checked at every call; module attributes only
        # when STRUCTURE_EPOCH has moved.
        self.guards = tuple(guards)
        self._call_guards = tuple(g for g in self.guards if not g.epoch)
        self._epoch_guards = tuple(g for g in self.guards if g.epoch)
        self.frozen = tuple(frozen)  # (source, why) of values read once and not guarded
        # Param-group entries the trace read (guarded) and wrote (replayed each call).
        self._items = item_state if item_state is not None else ItemState()
        self._epoch = STRUCTURE_EPOCH[0]
        self._capture_types = tuple((v.type.shape, v.type.dtype) for v in graph.captures)
        self._capture_strides = tuple(layout_key(t._data) for t in captures)  # (and layouts)
        self._guard_seen = [None] * len(captures)  # per capture: last array that passed
        # Memory owners of the captured arrays (for .grad destinations), kept until one of
        # those arrays changes.
        self._capture_owners = [None]
        # requires_grad of each capture as traced: the backward graph of a training step
        # depends on it (freezing a layer must retrace). None for captured .grad tensors.
        self._capture_requires_grad = tuple(
            None if owner is not None else t.requires_grad
            for t, owner in zip(captures, capture_grad_owner))
        self.one_shot = one_shot
        # Until its first run completes: takes back the optimizer state the trace made
        # (set by tracing.trace_function; None when it made none)
        self.undo_state = None
        self.differentiable = differentiable
        self.trace_seconds = trace_seconds
        self.compile_seconds = compile_seconds
        self._created_targets = created_targets
        self._out_copies = _outputs_needing_copy(graph)
        self._update_copies = _updates_needing_copy(graph)
        # Outputs that are an argument, a capture or a .grad itself (see _output_aliases).
        self._out_alias = out_alias or {}
        self._out_views = out_views or {}  # (views of one: _output_aliases, tracer.views)
        # Outputs whose graph a backward inside consumed, per index: the released node
        # they get at each call (shared: any backward through it raises at once)
        self._freed = {j: freed_node(*t) for j, t in (freed_outputs or {}).items()}
        self._plain = (not captures and not guards and not graph.updates and out_tree == LEAF
                       and not self._out_copies and not self._freed and len(graph.outputs) == 1
                       and not self._out_views and not self._items and not self.input_layouts)
        # Nothing captured, nothing to guard: the signature alone selects this trace.
        self.unguarded = (not captures and not guards and not self._items
                          and not self.input_layouts)
        # One array in, one fresh array out, nothing else to do: the one-argument fast path
        # of Function.__call__ calls this with the argument's array.
        # A program that draws random numbers and may raise in a value check: the
        # generator is saved before each call and restored if it raises (eager's run of
        # the call draws them again).
        self._rng_on_raise = draws_random(graph) and any(map(may_raise, graph.eqns))
        self.run1 = getattr(program, "call1", None) if self._plain and \
            not self._rng_on_raise else None
        self.writes_input_grads = any(t[0] == "input_grad" for t in update_targets)
        # Arguments whose .grad the program writes (a backward() inside reached them)
        self._input_grad_args = tuple(t[1] for t in update_targets if t[0] == "input_grad")
        # Updates of a .grad the program writes straight into the gradient's array
        # (codegen.inplace_plan._plan_inplace): (capture index, shape, dtype) per entry.
        self._dest_targets = tuple(
            (update_targets[u][1], tuple(graph.updates[u].type.shape), graph.updates[u].type.dtype)
            for u in program.dest_updates)
        self._dest_seen = [None] * len(self._dest_targets)
        # Arguments or captures that share memory where the trace writes in place: such a
        # call runs eagerly (tracer.aliasing).
        self._alias = AliasCheck.of(
            update_targets, len(graph.inputs),
            tuple(f"argument {n}" for n in arg_names)
            + tuple(f"captured tensor {n}" for n in graph.capture_names))
        # Captured .grad tensors the trace replaces with old + g (backward accumulating):
        # the program may write the sum over the old array, which eager leaves alone, so a
        # call passes a copy when anything else holds the old gradient (tracer.ownership).
        grad_targets = {i for kind, i in update_targets if kind == "grad"}
        self._accumulated = tuple(j for j, owner in enumerate(capture_grad_owner)
                                  if owner is not None and owner in grad_targets)
        # The one way this trace runs: `run`, generated from the data above; `call_fast`
        # is `run` with the guards in front, generated where there are guards to check.
        self.run, self.run_source = self._generate(guarded=False)
        self.call_source = None  # the generated call_fast, when there is one
        self.call_fast = self._checked_call
        if not self._plain and not one_shot and (captures or guards):
            call, self.call_source = self._generate(guarded=True)
            if call is not None:
                self.call_fast = call

    def grads_go_outside(self, leaves) -> bool:
        """Whether the backward() inside would, eagerly, go on from an argument into the
        graph that made it (a non-leaf argument whose .grad this program writes): the
        trace's argument is a leaf, so such a call must run eagerly."""
        return any(leaves[i].grad_fn is not None for i in self._input_grad_args)

    # -------------------------------------------------------------- inspection
    @property
    def kernels(self) -> tuple:
        return tuple(getattr(self.program, "kernels", ()))

    def __str__(self) -> str:
        text = str(self.graph)
        describe = getattr(self.program, "describe", None)
        if describe is not None:
            text += "\n" + describe()
        return text

    def __repr__(self) -> str:
        return f"<ConcreteFunction {self.name} {self.signature}>"

    def summary(self) -> str:
        """One line: the IR's size and what the compiled program runs at each call.

            >>> print(cnn_step.get_concrete_function(x, y).summary())
            cnn_step: 81 IR equations -> 8 kernels (4 elementwise, 3 multi, 1 row), 5 BLAS ...
        """
        head = f"{self.name}: {len(self.graph.eqns)} IR equations"
        counts = getattr(self.program, "step_counts", None)
        if counts is None:   # the interpret backend: no kernels, op by op
            return f"{head}, run op by op by the reference interpreter"
        c = counts()
        kinds = ", ".join(f"{k} {kind}" for kind, k in sorted(c["kernels"].items()))
        parts = [_count(sum(c["kernels"].values()), "kernel") + (f" ({kinds})" if kinds else "")]
        parts += [_count(c[key], what) for key, what in
                  (("blas", "BLAS call"), ("numpy", "numpy step"), ("view", "view"),
                   ("fallback", "numpy fallback"), ("subgraph", "sub-graph"))
                  if c[key] or key in ("blas", "numpy", "fallback")]
        return f"{head} -> " + ", ".join(parts)

    # -------------------------------------------------------------- guards
    def guard_failure(self):
        """None if the captured state still matches this trace, else what changed."""
        caps = self._captures
        seen = self._guard_seen
        for i, t in enumerate(caps):
            owner = self._capture_grad_owner[i]
            if owner is not None:
                t = caps[owner]._grad
                if t is None:
                    return f"capture {self.graph.capture_names[i]}: grad is now None"
            data = t._data
            if data is not seen[i]:  # shape and dtype checked once per array object
                shape, dtype = self._capture_types[i]
                if data.__class__ is not np.ndarray or data.shape != shape \
                        or data.dtype != dtype:
                    return (f"capture {self.graph.capture_names[i]}: "
                            f"{_sig_text(shape, dtype)} -> "
                            f"{_sig_text(np.shape(data), np.asarray(data).dtype)}")
                if owner is None and layout_key(data) != self._capture_strides[i]:
                    return layout_change(self.graph.capture_names[i], self._capture_strides[i],
                                         data)
                seen[i] = data
                self._capture_owners[0] = None  # (the generated call's cache of them)
            rg = self._capture_requires_grad[i]
            if rg is not None and t.requires_grad != rg:
                return (f"capture {self.graph.capture_names[i]}: requires_grad "
                        f"{rg} -> {t.requires_grad}")
        why = first_failure(self._call_guards)
        if why is not None:
            return why
        if (self._sources or self._epoch_guards) and STRUCTURE_EPOCH[0] != self._epoch:
            for i, src in self._sources:
                try:
                    current = src.resolve()
                except Exception:  # noqa: BLE001
                    current = None
                if current is not caps[i]:
                    return f"capture {src.describe}: the tensor object was replaced"
            why = first_failure(self._epoch_guards)
            if why is not None:
                return why
            self._epoch = STRUCTURE_EPOCH[0]
        return self._items.failure()

    # -------------------------------------------------------------- calling
    def layout_failure(self, leaves):
        """None if each argument whose layout the trace read still has it, else what
        changed."""
        for k, strides in self.input_layouts:
            d = leaves[k]._data
            if strides is None:
                if not d.flags.c_contiguous:
                    return (f"argument {self.arg_names[k]}: C-contiguous -> strides "
                            f"{d.strides}")
            elif d.strides != strides or d.flags.c_contiguous:
                return f"argument {self.arg_names[k]}: strides {strides} -> {d.strides}"
        return None

    def _checked_call(self, leaves):
        """Run on `leaves` if the captured state still matches, else MISS."""
        if not self.unguarded and self.guard_failure() is not None:
            return MISS
        if self.input_layouts and self.layout_failure(leaves) is not None:
            return MISS
        if self._alias is not None and self.alias_hazard(leaves) is not None:
            return MISS
        return self.run(leaves)

    def alias_hazard(self, leaves):
        """None, or why this call's arrays alias where the trace writes in place."""
        if self._alias is None:
            return None
        return self._alias(self._input_values(leaves))

    def _generate(self, guarded: bool):
        """The generated call (tracer.call_source.generate_call): guarded, `call_fast`;
        unguarded, `run`. Returns (function, source)."""
        return generate_call(self, guarded)

    def call_program(self, program, values):
        """`program(values)` as the generated call runs it (for the other paths): a value
        check raising inside becomes ProgramRaised (the caller runs the call eagerly), with
        the random generator as before the call."""
        rng = get_rng_state() if self._rng_on_raise else None
        try:
            return program(values)
        except Exception as exc:
            if not raised_by_check(exc):
                raise step_error(exc)  # (an index out of range: named as eager names it)
            if rng is not None:
                set_rng_state(rng)
            raise ProgramRaised(str(exc)) from exc

    def __call__(self, *args, **kwargs):
        try:
            return self._call(args, kwargs)
        except ProgramRaised as raised:
            # Called directly there is no eager function to run: the check's own error,
            # with every tensor as before the call.
            raise raised.__cause__ from None

    def _call(self, args, kwargs):
        leaves = []
        flatten((args, kwargs), leaves, "", [])
        # Called directly, nothing has checked the arguments against the trace: the program
        # would run on whatever arrays it gets (numpy broadcasts them; kernels assume the
        # traced shapes).
        if not _signature_matches(self.graph.inputs, leaves):
            got = [_sig_text(t.shape, t.dtype) for t in leaves]
            want = [str(v.type) for v in self.graph.inputs]
            raise TypeError(f"{self.name}: this concrete function was traced for "
                            f"({', '.join(want)}) but is called with ({', '.join(got)}); call "
                            f"the @function instead, which traces new signatures")
        why = self.guard_failure() or self.layout_failure(leaves)
        if why is not None:
            raise RuntimeError(f"{self.name}: the state this concrete function captured has "
                               f"changed ({why}); call the @function instead, which traces "
                               f"again")
        why = self.alias_hazard(leaves)
        if why is not None:
            raise RuntimeError(f"{self.name}: {why}, which this trace does not model; call "
                               f"the @function instead, which runs such calls eagerly")
        return self.run(leaves)

    # -------------------------------------------------------------- gradients
    _plan = None
    _plan_key = None
    plan_error = "outputs need gradients outside the function"
    backend_name = "numba"

    def backward_plan(self, input_requires_grad):
        """Forward/backward programs for calls whose outputs need gradients (or None)."""
        key = (tuple(input_requires_grad), tuple(t.requires_grad for t in self._captures))
        if self._plan_key == key:
            return self._plan
        self._plan_key = key
        if self.saved_modified is not None:
            # (eager's backward raises here, or runs a custom Function's own backward)
            self.plan_error = self.saved_modified
            self._plan = None
            return None
        from .autodiff import build_plan
        from .passes import optimize

        try:
            # The unoptimized trace: passes drop stop_gradient (detach), which only
            # matters to differentiation.
            self._plan = build_plan(self.raw_graph, list(key[0]), list(key[1]),
                                    get_backend(self.backend_name), optimize)
        except TracingError as exc:
            self.plan_error = f"{exc}; running it eagerly so autograd sees every op"
            self._plan = None
        return self._plan

    @property
    def backward(self):
        """The backward plan built so far (forward/backward graphs and kernels), or None."""
        return self._plan

    def run_with_grad(self, leaves, plan, replay_call):
        """Run the forward program and put one compiled-backward node on the tape."""
        from .autodiff import attach

        caps = self._captures
        results = self.call_program(plan.fwd_program, self._input_values(leaves))
        n_out = len(self.graph.outputs)
        outs = self._output_tensors(results)
        wrt = [leaves[i] if kind == "input" else caps[i] for kind, i in plan.wrt]

        def replay(g, k):
            # create_graph=True: differentiate an eager re-run instead.
            from eager import autograd

            fresh = []
            flatten(replay_call(), fresh, "", [])
            grads = autograd.grad(fresh[plan.diff_outputs[k]], wrt, grad_outputs=g,
                                  create_graph=True, allow_unused=True)
            return list(grads)

        attach(plan, outs, wrt, results[n_out:], replay, list(leaves) + list(caps))
        self._substitute_aliases(outs, leaves)
        if self._freed:
            self._mark_freed(outs)
        self._items.replay()
        return unflatten(self.out_tree, iter(outs))

    def _mark_freed(self, outs):
        """Eager's loss after loss.backward(): requires grad, its graph already freed."""
        for j, node in self._freed.items():
            outs[j].grad_fn = node
            outs[j].requires_grad = True

    def _input_values(self, leaves) -> list:
        """Arrays for the program: the arguments', then each capture's (read now)."""
        caps = self._captures
        values = [t._data for t in leaves]
        for i, t in enumerate(caps):
            owner = self._capture_grad_owner[i]
            values.append((caps[owner].grad if owner is not None else t)._data)
        n_in = len(leaves)
        references = getattr(self.program, "references", _no_references)
        for i in self._accumulated:
            g = caps[self._capture_grad_owner[i]]._grad
            # Held: values[n_in + i], maybe the guard's seen[i]; the tensor maybe by caps.
            held = 1 + (self._guard_seen[i] is g._data) + references(n_in + i, g._data)
            if not _unshared(g, held, g is caps[i]):
                values[n_in + i] = g._data.copy()
        return values

    def _output_tensors(self, results) -> list:
        """Tensors for the program's outputs (copies where they would alias)."""
        outs = []
        for j in range(len(self.graph.outputs)):
            r = results[j]
            if j in self._out_copies:
                r = np.array(r)
            outs.append(Tensor._wrap(r))
        return outs

    def _substitute_aliases(self, outs, leaves):
        """Outputs that are an argument or capture itself become that tensor (eager's
        `return x`), instead of a copy that would lose its autograd link."""
        for j, (kind, i) in self._out_alias.items():
            if j in self._out_views:
                base = leaves[i] if kind == "input_view" else self._captures[i]
                outs[j] = derive(base, *self._out_views[j], leaves)
            elif kind == "input":
                outs[j] = leaves[i]
            elif kind == "capture":
                outs[j] = self._captures[i]
            elif kind == "grad":
                outs[j] = self._captures[i]._grad
            elif kind == "output":
                outs[j] = outs[i]
            else:
                outs[j] = leaves[i]._grad


def _signature_matches(inputs, leaves) -> bool:
    if len(inputs) != len(leaves):
        return False
    for v, t in zip(inputs, leaves):
        if v.type.shape != t.shape or v.type.dtype != t.dtype:
            from .symbolic import matches

            return matches([v.type for v in inputs], [t._data for t in leaves])
    return True


def _outputs_needing_copy(graph: Graph) -> set:
    """Outputs that alias an input, capture, const or another output get their own copy."""
    external = {id(v) for v in graph.inputs} | {id(v) for v in graph.captures} | {
        id(v) for v, _ in graph.consts}
    seen = set()
    copies = set()
    for j, v in enumerate(graph.outputs):
        if not isinstance(v, Var) or id(v) in external or id(v) in seen:
            copies.add(j)
        seen.add(id(v))
        if isinstance(v, Var):
            for e in graph.eqns:
                if e.out is v and OPS[e.op].view:
                    copies.add(j)
    return copies


def _updates_needing_copy(graph: Graph) -> tuple:
    """Positions in the program's results of updates whose value is (a view of) an argument
    or captured array: written back after another update has overwritten that array, they
    would give its new value (a.copy_(b); b.add_(x)), so they are copied first."""
    external = {id(v) for v in graph.inputs} | {id(v) for v in graph.captures}
    made_by = {id(e.out): e for e in graph.eqns if e.op in OPS and OPS[e.op].view}
    copies = []
    for u, v in enumerate(graph.updates):
        while isinstance(v, Var) and id(v) in made_by:
            v = made_by[id(v)].inputs[0]
        if isinstance(v, Var) and id(v) in external:
            copies.append(len(graph.outputs) + u)
    return tuple(copies)


def _sig_text(shape, dtype) -> str:
    from eager.dtypes import SHORT_NAMES

    # Spelled as TensorType prints (f32[8,4]), so messages and printouts agree.
    dims = ",".join(str(d) for d in shape)
    return f"{SHORT_NAMES.get(np.dtype(dtype), str(dtype))}[{dims}]"
