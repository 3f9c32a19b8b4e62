"""`@function`: trace once per input signature, optimize, compile, and call.

    @tracer.function
    def gelu(x):
        return 0.5 * x * (1 + eager.tanh(0.79788456 * (x + 0.044715 * x ** 3)))

    y = gelu(x)                                  # traces, compiles, runs
    print(gelu.get_concrete_function(x))         # the IR and the kernels

Like tf.function, Python side effects (print, appending to lists) happen only
while tracing, i.e. once per new signature; tensors the function reads from
outside (module parameters, globals, closure variables) are captured and read
again at every call, so in-place updates between calls are seen without
retracing. Every other Python value the trace read (globals and closures of
every function that ran, `model.training`, entries of dicts, lists and
namespaces) is guarded (tracer.guards): a change traces again. A call that
rebinds outside state (`self.total = self.total + x`), or whose arguments and
captures share memory where the trace writes one in place, runs eagerly with a
warning naming the line (a TracingError under fullgraph=True).
"""
from __future__ import annotations

import functools
import inspect
import sys
import threading
import time
import warnings

import numpy as np

from eager import dispatch
from eager.dispatch import _state as _grad_state
from eager.errors import _is_library_file, user_location
from eager.nn.module import STRUCTURE_EPOCH, Module
from eager.ops import OPS
from eager.optim import Optimizer
from eager.tensor import Tensor

from . import check as _check
from . import logs
from .autodiff import freed_node
from .backends import get_backend
from .ir import Graph, Var, verify
from .ownership import assign_grad as _assign_grad, unshared as _unshared
from .pytree import LEAF, Static, flatten, unflatten
from .control import GradientThroughControlFlow
from .aliasing import AliasCheck
from .captures import (_entry_grads, _find_sources, _link_grad_aliases,
                       _reachable_tensor_ids, _state_roots)
from .discover import (Recorder, Snapshot, StateRebound, _where_defined, collect_guards,
                       refuse_rebinding)
from .guards import Guard, first_failure, check_lines
from .pystate import ItemState
from .trace import LiveScalar, Trace, TracingError, current_trace, restore_items

_RUN_EAGERLY = [False]
WARN_AFTER_TRACES = 8


def run_eagerly(flag: bool = True) -> None:
    """Make every @function run its Python body directly (for debugging)."""
    _RUN_EAGERLY[0] = bool(flag)


def functions_run_eagerly() -> bool:
    return _RUN_EAGERLY[0]


class TensorSpec:
    """Shape and dtype an argument must have; `None` marks a dimension that may vary.

    A varying dimension is symbolic in the trace (`f32[N0,4]`), so one trace serves every
    size (see tracer.symbolic). Each `None` is its own symbol; a dimension named by a string
    instead is one symbol wherever that name appears, and calls must agree on its size:

    >>> @function(input_signature=[TensorSpec((None, 4), eager.float32)])
    ... def f(x): ...
    >>> @function(input_signature=[TensorSpec(("batch", 4)), TensorSpec(("batch",))])
    ... def loss(x, y): ...
    """

    def __init__(self, shape, dtype=None, name=None):
        from eager import dtypes

        self.shape = tuple(shape)
        self.dtype = dtypes.canonical(dtype) if dtype is not None else dtypes.float32
        self.name = name

    def matches(self, t: Tensor) -> bool:
        shape = t.shape
        return (len(shape) == len(self.shape) and t.dtype == self.dtype
                and all(s is None or isinstance(s, str) or s == d
                        for s, d in zip(self.shape, shape)))

    def __repr__(self):
        dims = ",".join("None" if d is None else repr(d) if isinstance(d, str) else str(d)
                        for d in self.shape)
        return f"TensorSpec(({dims}), {self.dtype})"


# --------------------------------------------------------------------------------------
# concrete functions

MISS = object()  # ConcreteFunction.call_fast: a guard failed, take the general path


class ConcreteFunction:
    """One traced, optimized and compiled specialization of a @function."""

    def __init__(self, name, graph, raw_graph, program, arg_tree, out_tree, arg_names,
                 signature, captures, capture_grad_owner, update_targets, grad_pattern,
                 sources, one_shot, differentiable, trace_seconds, compile_seconds,
                 created_targets, guards=(), frozen=(), item_state=None, out_alias=None,
                 saved_modified=None, freed_outputs=None):
        self.name = name
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
        self.differentiable = differentiable
        self.trace_seconds = trace_seconds
        self.compile_seconds = compile_seconds
        self._created_targets = created_targets
        self._out_copies = _outputs_needing_copy(graph)
        self._update_copies = _updates_needing_copy(graph)
        # Outputs that are an argument, a capture or a .grad itself (see _output_aliases).
        self._out_alias = out_alias or {}
        # Outputs whose graph a backward inside consumed, per index: the released node
        # they get at each call (shared: any backward through it raises at once)
        self._freed = {j: freed_node(*t) for j, t in (freed_outputs or {}).items()}
        self._plain = (not captures and not guards and not graph.updates and out_tree == LEAF
                       and not self._out_copies and not self._freed and len(graph.outputs) == 1
                       and not self._items)
        # Nothing captured, nothing to guard: the signature alone selects this trace.
        self.unguarded = not captures and not guards and not self._items
        # One array in, one fresh array out, nothing else to do: the one-argument fast path
        # of Function.__call__ calls this with the argument's array.
        self.run1 = getattr(program, "call1", None) if self._plain else None
        self.writes_input_grads = any(t[0] == "input_grad" for t in update_targets)
        # Updates of a .grad the program writes straight into the gradient's array
        # (codegen.runtime._plan_inplace): (capture index, shape, dtype) per entry.
        self._dest_targets = tuple(
            (update_targets[u][1], tuple(graph.updates[u].type.shape), graph.updates[u].type.dtype)
            for u in getattr(program, "dest_updates", ()))
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
        self.call_source = None  # the generated call_fast, when there is one
        self.call_fast = self._checked_call
        if not self._plain and not one_shot and (captures or guards):
            self.call_fast = self._generate_call()

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
    def _checked_call(self, leaves):
        """Run on `leaves` if the captured state still matches, else MISS."""
        if not self.unguarded and self.guard_failure() is not None:
            return MISS
        if self._alias is not None and self.alias_hazard(leaves) is not None:
            return MISS
        return self.run(leaves)

    def alias_hazard(self, leaves):
        """None, or why this call's arrays alias where the trace writes in place."""
        if self._alias is None:
            return None
        return self._alias(self._input_values(leaves))

    def _generate_call(self):
        """`_checked_call` as one generated function: the guards, reading the captures,
        the .grad arrays the program writes into, the run and the write-back, straight-line
        over this trace's captures (a training step has 17; looping over them with their
        per-capture tuples cost more than most of its kernels). On any guard miss it
        returns MISS and the caller takes the general path, which says what changed."""
        caps = self._captures
        ns = {"MISS": MISS, "ndarray": np.ndarray, "seen": self._guard_seen,
              "dseen": self._dest_seen, "EPOCH": STRUCTURE_EPOCH, "self": self,
              "co": self._capture_owners, "_owner": _memory_owner,
              "program": self.program, "assign_data": _assign_data, "assign_grad": _assign_grad,
              "wrap": Tensor._wrap, "copy": np.array, "unflatten": unflatten,
              "out_tree": self.out_tree, "alias": self._alias, "astale": [True],
              "__name__": "tracer.generated"}
        lines = ["def call(leaves):"]
        for i, t in enumerate(caps):
            if self._capture_grad_owner[i] is None:  # (a captured .grad is read via its owner)
                ns[f"c{i}"] = t
        ns["unshared"] = _unshared
        ns["prefs"] = getattr(self.program, "references", _no_references)
        n_in = len(self.graph.inputs)
        for i in range(len(caps)):
            owner = self._capture_grad_owner[i]
            shape, dtype = self._capture_types[i]
            ns[f"S{i}"], ns[f"D{i}"] = shape, dtype
            if owner is not None:
                lines += [f"    g = c{owner}._grad",
                          "    if g is None:",
                          "        return MISS",
                          f"    d{i} = g._data"]
            else:
                lines.append(f"    d{i} = c{i}._data")
            lines += [f"    if d{i} is not seen[{i}]:",
                      "        co[0] = None",
                      "        astale[0] = True",
                      f"        if d{i}.__class__ is not ndarray or d{i}.shape != S{i} "
                      f"or d{i}.dtype != D{i}:",
                      "            return MISS",
                      f"        seen[{i}] = d{i}"]
            rg = self._capture_requires_grad[i]
            if rg is not None:
                lines += [f"    if c{i}.requires_grad != {rg}:", "        return MISS"]
            if i in self._accumulated:
                # Held: d{i}, seen[{i}] and what the program caches; the tensor, by
                # self._captures if it is the traced one.
                lines += [(f"    if not unshared(g, 2 + prefs({n_in + i}, d{i}), "
                           f"g is self._captures[{i}]):"),
                          f"        d{i} = d{i}.copy()"]
        lines += check_lines(self._call_guards, ns)
        if self._sources or self._epoch_guards:
            lines += ["    if EPOCH[0] != self._epoch:", "        return MISS"]
        for k, guard in enumerate(self._items.guards):
            lines += guard.check_source(k, ns)
        lines.append("    values = [" + ", ".join(
            [f"leaves[{j}]._data" for j in range(n_in)] + [f"d{i}" for i in range(len(caps))])
            + "]")
        if self._alias is not None:
            lines += ["    if alias(values, astale[0]) is not None:", "        return MISS",
                      "    astale[0] = False"]
        if self._dest_targets:
            # Where the program may write a .grad straight into its array: not when that
            # array (or what it views) is also read as an argument or capture.
            lines += ["    owners = co[0]",
                      "    if owners is None:",
                      f"        owners = co[0] = {{_owner(a) for a in values[{n_in}:]}}",
                      "    leaf_owners = (" + "".join(
                          f"_owner(leaves[{j}]._data), " for j in range(n_in)) + ")"]
            names = []
            for k, (i, shape, dtype) in enumerate(self._dest_targets):
                ns[f"DS{k}"], ns[f"DD{k}"] = shape, dtype
                lines += [f"    g = c{i}._grad",
                          f"    x{k} = g._data if g is not None else None",
                          f"    if x{k} is not None and x{k} is not dseen[{k}]:",
                          f"        if x{k}.__class__ is ndarray and x{k}.shape == DS{k} and "
                          f"x{k}.dtype == DD{k} and x{k}.flags.c_contiguous and "
                          f"x{k}.flags.writeable:",
                          f"            dseen[{k}] = x{k}",
                          "        else:",
                          f"            dseen[{k}] = x{k} = None",
                          f"    if x{k} is not None:",
                          f"        o = _owner(x{k})",
                          "        if o in owners or o in leaf_owners:",
                          f"            x{k} = None",
                          # Eager would give .grad a new array: reuse the old one only if
                          # no one else can see it (held: x{k}, maybe dseen[{k}]).
                          f"        elif not unshared(g, 1 + (dseen[{k}] is x{k})):",
                          f"            x{k} = None"]
                names.append(f"x{k}")
            lines.append(f"    results = program(values, [{', '.join(names)}])")
        else:
            lines.append("    results = program(values)")
        n_out = len(self.graph.outputs)
        outs = []
        for j in range(n_out):
            if j in self._out_alias:
                outs.append("None")  # (set after the write-back, below)
            else:
                outs.append(f"wrap(copy(results[{j}]))" if j in self._out_copies
                            else f"wrap(results[{j}])")
        lines.append(f"    outs = [{', '.join(outs)}]")
        for j, node in self._freed.items():
            ns[f"freed{j}"] = node
            lines += [f"    outs[{j}].grad_fn = freed{j}", f"    outs[{j}].requires_grad = True"]
        if self._update_copies:
            lines.append("    results = list(results)")
            lines += [f"    results[{k}] = copy(results[{k}])" for k in self._update_copies]
        for u, (kind, i) in enumerate(self._update_targets):
            r = f"results[{n_out + u}]"
            if kind == "data":
                owner = self._capture_grad_owner[i]
                t = f"c{owner}._grad" if owner is not None else f"c{i}"
                lines += [f"    t = {t}",
                          f"    if {r} is t._data:",
                          "        t._version[0] += 1",
                          "    else:",
                          f"        assign_data(t, {r})"]
            elif kind == "grad":
                lines.append(f"    assign_grad(c{i}, {r})")
            elif kind == "input":
                lines.append(f"    assign_data(leaves[{i}], {r})")
            else:  # created state, input grads: not on the fast path (see Function.__call__)
                return self._checked_call
        for j, (kind, i) in self._out_alias.items():
            lines.append(f"    outs[{j}] = " + {"input": f"leaves[{i}]", "capture": f"c{i}",
                                                 "grad": f"c{i}._grad",
                                                 "input_grad": f"leaves[{i}]._grad"}[kind])
        if self._items.writes:
            ns["items_replay"] = self._items.replay
            lines.append("    items_replay()")
        lines.append("    return unflatten(out_tree, iter(outs))")
        source = "\n".join(lines) + "\n"
        exec(compile(source, f"<tracejit call {self.name}>", "exec"), ns)
        self.call_source = source
        return ns["call"]

    def __call__(self, *args, **kwargs):
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
        why = self.guard_failure()
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
            # eager's backward raises here (and only when it runs): let eager's autograd do it
            self.plan_error = (f"an in-place op modified a value backward needs "
                               f"({self.saved_modified})")
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
        results = plan.fwd_program(self._input_values(leaves))
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

    def run(self, leaves):
        if self._plain:
            # No captures, no updates, one fresh tensor out: the common small function.
            if len(leaves) == 1:
                return Tensor._wrap(self.program([leaves[0]._data])[0])
            return Tensor._wrap(self.program([t._data for t in leaves])[0])
        values = self._input_values(leaves)
        if self._dest_targets:
            results = self.program(values, self._dests(values))
        else:
            results = self.program(values)
        outs = self._output_tensors(results)
        if self._update_copies:
            results = list(results)
            for k in self._update_copies:
                results[k] = np.array(results[k])
        self._write_back(results[len(outs):], leaves)
        if self._out_alias:
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

    def _dests(self, values) -> list:
        """The current .grad arrays the program may write into, or None where one cannot be
        used: missing, of another shape or dtype, not C-contiguous and writable, or one of
        the call's own input arrays (which the program still reads)."""
        caps = self._captures
        seen = self._dest_seen
        dests = []
        owners = None  # memory owners of the call's arrays (the same rule as call_source)
        for k, (i, shape, dtype) in enumerate(self._dest_targets):
            g = caps[i]._grad
            d = g._data if g is not None else None
            if d is not None and d is not seen[k]:
                # Checked once per array object: a tensor's array keeps its shape and
                # layout; the same .grad array is reused call after call.
                ok = (d.__class__ is np.ndarray and d.shape == shape and d.dtype == dtype
                      and d.flags.c_contiguous and d.flags.writeable)
                seen[k] = d if ok else None
                if not ok:
                    d = None
            if d is not None:
                if owners is None:
                    owners = {_memory_owner(a) for a in values}
                if _memory_owner(d) in owners:
                    d = None
                elif not _unshared(g, 1 + (seen[k] is d)):
                    d = None  # someone else holds the old gradient: eager leaves it alone
            dests.append(d)
        return dests

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
            if kind == "input":
                outs[j] = leaves[i]
            elif kind == "capture":
                outs[j] = self._captures[i]
            elif kind == "grad":
                outs[j] = self._captures[i]._grad
            else:
                outs[j] = leaves[i]._grad

    def _write_back(self, updates, leaves):
        caps = self._captures
        for target, value in zip(self._update_targets, updates):
            kind, i = target
            if kind == "data":
                owner = self._capture_grad_owner[i]
                t = caps[owner]._grad if owner is not None else caps[i]
                if value is t._data:  # written in place by the program
                    t._version[0] += 1
                else:
                    _assign_data(t, value)
            elif kind == "grad":
                _assign_grad(caps[i], value)
            elif kind == "created":
                _assign_data(self._created_targets[i], value)
            elif kind == "input_grad":
                _assign_grad(leaves[i], value)
            elif kind == "input":
                _assign_data(leaves[i], value)


def _no_references(slot, a) -> int:
    return 0


def _signature_matches(inputs, leaves) -> bool:
    if len(inputs) != len(leaves):
        return False
    for v, t in zip(inputs, leaves):
        if v.type.shape != t.shape or v.type.dtype != t.dtype:
            from .symbolic import matches

            return matches([v.type for v in inputs], [t._data for t in leaves])
    return True


def _memory_owner(a) -> int:
    """An id for the memory `a` looks at: its base's, or its own."""
    return id(a) if a.base is None else id(a.base)


def _assign_data(t: Tensor, value):
    data = t._data
    if value is data:  # the program wrote it in place
        t._version[0] += 1
        return
    if data.__class__ is np.ndarray and data.shape == value.shape and data.flags.writeable:
        np.copyto(data, value)
    elif data.__class__ is np.ndarray and not data.flags.writeable:
        # as eager's in-place ops refuse it (the trace cannot know: its values are immutable)
        raise RuntimeError("an in-place update of a read-only (expanded) tensor; clone() it "
                           f"before writing in place (at {user_location()})")
    else:
        t._data = np.array(value)
    t._version[0] += 1


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
                if e.out is v and e.op in ("reshape", "permute", "broadcast_to", "getitem",
                                           "stop_gradient"):
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


# --------------------------------------------------------------------------------------
# the decorator

class Function:
    """A Python function traced into graphs, one per input signature (see `function`)."""

    def __init__(self, fn, input_signature=None, static_argnums=(), static_argnames=(),
                 backend="numba", fullgraph=False, dynamic=None, max_traces=64,
                 optimize=True, name=None, check=None):
        functools.update_wrapper(self, fn)
        # Check mode (tracer.check): how many calls of each trace also run eagerly, 0 = off.
        self._check = _check.calls_to_check(check)
        self._fn = fn
        self._name = name or getattr(fn, "__name__", "fn")
        self.input_signature = list(input_signature) if input_signature is not None else None
        self._symbolic = self.input_signature is not None and any(
            d is None or isinstance(d, str) for s in self.input_signature for d in s.shape)
        self._spec_checks = None
        if self.input_signature is not None:
            self._spec_checks = tuple(
                (len(sp.shape), sp.dtype,
                 tuple((ax, d) for ax, d in enumerate(sp.shape) if isinstance(d, int)),
                 tuple((ax, d) for ax, d in enumerate(sp.shape) if isinstance(d, str)))
                for sp in self.input_signature)
        self.static_argnums = tuple(static_argnums) if not isinstance(static_argnums, int) \
            else (static_argnums,)
        self.static_argnames = (static_argnames,) if isinstance(static_argnames, str) \
            else tuple(static_argnames)
        self.backend = backend
        self.fullgraph = fullgraph
        self.dynamic = dynamic
        self.max_traces = max_traces
        self.optimize = optimize
        self._cache: dict = {}
        self._fast: dict = {}  # (tensor signature, grad mode) -> ConcreteFunction
        self._last1 = None     # (shape, dtype, requires_grad, grad mode, concrete): last hit
        # With an input_signature, one trace per (requires_grad flags, grad mode) serves
        # every call whose tensors match it: (rank, dtype, fixed dims, named dims) per spec.
        self._fast_spec: dict = {}
        self._fast_ok = (not self.static_argnums and not self.static_argnames
                         and self.input_signature is None)
        self._lock = threading.RLock()
        self.trace_count = 0
        # Cache bookkeeping for stats() and max_traces' least-recently-used eviction. Calls
        # are counted once, at the top of __call__; a trace's last use is stamped where the
        # general path finds it and, for the one-argument fast path, at eviction (the fast
        # paths stay free of bookkeeping).
        self._calls = 0
        self._misses = 0
        self._eager_calls = 0
        self._evictions = 0
        self._compile_seconds = 0.0
        self._warned = set()
        self._eager_keys = set()
        self._refused: dict = {}  # key -> traces refused for rebinding outside state
        try:
            self._param_names = list(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            self._param_names = []

    # -------------------------------------------------------------- methods
    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        return _BoundFunction(self, instance)

    def __repr__(self):
        return f"<tracer.function {self._name} traces={self.trace_count}>"

    # -------------------------------------------------------------- keys
    def _flatten_args(self, args, kwargs):
        static_pos = set(self.static_argnums)
        static_names = set(self.static_argnames)
        leaves, names = [], []
        trees = []
        for i, a in enumerate(args):
            pname = self._param_names[i] if i < len(self._param_names) else f"arg{i}"
            if i in static_pos or pname in static_names:
                trees.append(_static(a))
            else:
                trees.append(flatten(a, leaves, pname, names))
        kw_trees = []
        for k in sorted(kwargs):
            if k in static_names:
                kw_trees.append((k, _static(kwargs[k])))
            else:
                kw_trees.append((k, flatten(kwargs[k], leaves, k, names)))
        return leaves, names, (tuple(trees), tuple(kw_trees))

    def _key(self, leaves, tree):
        spec = self.input_signature
        if spec is not None and self._symbolic:
            # A None dimension is symbolic in the trace: every size shares one key.
            sig = tuple((tuple(d if isinstance(w, int) else None
                               for d, w in zip(t._data.shape, s.shape)),
                         t._data.dtype, t.requires_grad) for t, s in zip(leaves, spec))
        else:
            sig = tuple((t._data.shape, t._data.dtype, t.requires_grad) for t in leaves)
        return (tree, sig, dispatch.is_grad_enabled())

    # -------------------------------------------------------------- calling
    def __call__(self, *args, **kwargs):
        self._calls += 1
        # Fast path: positional plain-tensor arguments whose signature already has a cached,
        # directly runnable trace. Skips flattening and the general key; guards still run.
        if self._fast and not kwargs and not dispatch._hooked_threads and not _RUN_EAGERLY[0]:
            if len(args) == 1:  # the commonest case, unrolled
                a = args[0]
                d = a._data if a.__class__ is Tensor else None
                if d.__class__ is np.ndarray:
                    # The last hit first: comparing four fields is cheaper than hashing
                    # the nested key.
                    last = self._last1
                    enabled = _grad_state.grad_enabled
                    if last is not None and last[0] == d.shape and last[1] is d.dtype and \
                            last[2] is a.requires_grad and last[3] is enabled:
                        concrete = last[4]
                    else:
                        concrete = self._fast.get((((d.shape, d.dtype, a.requires_grad),),
                                                   enabled))
                        if concrete is not None:
                            self._last1 = (d.shape, d.dtype, a.requires_grad, enabled,
                                           concrete)
                    if concrete is not None:
                        run1 = concrete.run1
                        if run1 is not None:  # (unguarded: nothing captured)
                            return Tensor._wrap(run1(d))
                        out = concrete.call_fast(args)
                        if out is not MISS:
                            return out
            sig = []
            for a in args:
                if a.__class__ is not Tensor or a._data.__class__ is not np.ndarray:
                    break
                d = a._data
                sig.append((d.shape, d.dtype, a.requires_grad))
            else:
                concrete = self._fast.get((tuple(sig), dispatch._state.grad_enabled))
                if concrete is not None:
                    out = concrete.call_fast(args)
                    if out is not MISS:
                        return out
        elif self._fast_spec and not kwargs and not dispatch._hooked_threads \
                and not _RUN_EAGERLY[0]:
            concrete = self._spec_hit(args)
            if concrete is not None:
                out = concrete.call_fast(args)
                if out is not MISS:
                    return out
        if _RUN_EAGERLY[0] or current_trace() is not None:
            # Eager mode, or called from inside another trace: run (and so inline) the body.
            return self._fn(*args, **kwargs)
        if self._check and not _check.inside(self):
            return _check.checked_call(self, args, kwargs)
        leaves, names, tree = self._flatten_args(args, kwargs)
        if self.input_signature is not None:
            self._check_signature(leaves, names)
        key = self._key(leaves, tree)
        if key in self._eager_keys:
            self._eager_calls += 1
            return self._fn(*args, **kwargs)
        concrete = self._lookup(key)
        if concrete is None:
            concrete = self._trace_new(args, kwargs, leaves, names, tree, key)
            if concrete is None:
                self._eager_calls += 1
                return self._fn(*args, **kwargs)
        if concrete._alias is not None:
            why = concrete.alias_hazard(leaves)
            if why is not None:
                return self._eager_for_alias(args, kwargs, why)
        if concrete.differentiable and dispatch.is_grad_enabled():
            plan = concrete.backward_plan([t.requires_grad for t in leaves])
            if plan is None:
                return self._eager_for_grad(args, kwargs, concrete.plan_error)
            fn = self._fn
            return concrete.run_with_grad(leaves, plan, lambda: fn(*args, **kwargs))
        if concrete.writes_input_grads and any(t.grad is not None for t in leaves):
            # The trace began with every argument's .grad unset, so its backward assigns
            # .grad where eager would accumulate into the existing one.
            return self._eager_for_grad(args, kwargs, "an argument's .grad is set and the "
                                        "function's backward would accumulate into it")
        for t in leaves:
            if t._data.__class__ is not np.ndarray:
                return self._fn(*args, **kwargs)
        if self._fast_ok and not kwargs and len(leaves) == len(args) and \
                all(a.__class__ is Tensor for a in args) and not concrete.writes_input_grads \
                and not (concrete.differentiable and key[2]) and not concrete.one_shot:
            # (A one-shot trace materializes state made on the first call; running it again
            # would start that state over, which is why _cache never keeps it either.)
            self._fast[(key[1], key[2])] = concrete
        elif self._spec_checks is not None and not self.static_argnums and \
                not self.static_argnames and not kwargs and len(leaves) == len(args) and \
                all(a.__class__ is Tensor for a in args) and not concrete.writes_input_grads \
                and not (concrete.differentiable and key[2]) and not concrete.one_shot:
            self._fast_spec[(tuple(t.requires_grad for t in leaves), key[2])] = concrete
        return concrete.run(leaves)

    def _warn_once(self, message):
        if message not in self._warned:
            self._warned.add(message)
            warnings.warn(f"tracer.function: {message}", RuntimeWarning,
                          stacklevel=_user_stacklevel())

    def _lookup(self, key):
        bucket = self._cache.get(key)
        if bucket is None:
            return None
        for concrete in bucket:
            if concrete.guard_failure() is None:
                concrete._last_use = self._calls
                return concrete
        return None

    def stats(self) -> dict:
        """What this function's trace cache did: traces held, hits (calls run by a trace it
        held), misses (calls that traced), evictions (traces dropped at `max_traces`, least
        recently used first), compile seconds (tracing excluded).

        >>> f = tracer.function(lambda x: x * 2, max_traces=8)
        >>> f.stats()["traces"]
        0
        """
        held = sum(len(b) for b in self._cache.values())
        return {"traces": held, "hits": self._calls - self._misses - self._eager_calls,
                "misses": self._misses, "evictions": self._evictions,
                "compile_seconds": self._compile_seconds}

    def _evict_least_recently_used(self) -> None:
        """Drop the trace used longest ago (with its program, kernels' entries and buffers:
        nothing else holds them) to make room for a new one."""
        if self._last1 is not None:  # (the one-argument fast path's last hit: the newest)
            self._last1[4]._last_use = self._calls
        victim_key, victim = None, None
        for key, bucket in self._cache.items():
            for concrete in bucket:
                if victim is None or getattr(concrete, "_last_use", 0) < \
                        getattr(victim, "_last_use", 0):
                    victim_key, victim = key, concrete
        if victim is None:
            return
        bucket = self._cache[victim_key]
        bucket.remove(victim)
        if not bucket:
            del self._cache[victim_key]
        for table in (self._fast, self._fast_spec):
            for k in [k for k, c in table.items() if c is victim]:
                del table[k]
        if self._last1 is not None and self._last1[4] is victim:
            self._last1 = None
        self._evictions += 1
        logs.log("recompiles", f"{self._name}: max_traces={self.max_traces} reached; "
                 f"evicted the least recently used trace")

    def _eager_for_grad(self, args, kwargs,
                        why="outputs need gradients outside the function"):
        if why not in self._warned:
            self._warned.add(why)
            logs.log("recompiles", f"{self._name}: {why}; running it eagerly so autograd "
                     f"sees every op")
        return self._fn(*args, **kwargs)

    def _eager_for_alias(self, args, kwargs, why):
        message = (f"{user_location()}: tracer.function {self._name}: {why}; running such "
                   f"calls eagerly (the compiled function treats its arguments and captures "
                   f"as separate memory: pass distinct tensors, or .clone() one, to run it "
                   f"compiled)")
        if self.fullgraph:
            raise TracingError(message)
        if "alias" not in self._warned:
            self._warned.add("alias")
            warnings.warn(message, RuntimeWarning, stacklevel=_user_stacklevel())
        logs.log("recompiles", f"{self._name}: {why}; running this call eagerly")
        return self._fn(*args, **kwargs)

    def get_concrete_function(self, *args, **kwargs) -> ConcreteFunction:
        """Trace (or fetch) the specialization for these arguments without running it."""
        if not args and not kwargs and self.input_signature is not None:
            from eager import functions as F

            args = tuple(F.zeros(tuple(d if isinstance(d, int) else 1 for d in s.shape),
                                 dtype=s.dtype)
                         for s in self.input_signature)
        leaves, names, tree = self._flatten_args(args, kwargs)
        if self.input_signature is not None:
            self._check_signature(leaves, names)
        key = self._key(leaves, tree)
        concrete = self._lookup(key)
        if concrete is None:
            concrete = self._trace_new(args, kwargs, leaves, names, tree, key, force=True)
        return concrete

    def _spec_hit(self, args):
        """The trace for positional tensor `args` that match the input_signature, or None
        (then the general path checks them and says what does not match)."""
        checks = self._spec_checks
        if len(args) != len(checks):
            return None
        named = None
        for a, (rank, dtype, fixed, names) in zip(args, checks):
            if a.__class__ is not Tensor:
                return None
            d = a._data
            if d.__class__ is not np.ndarray or d.ndim != rank or d.dtype != dtype:
                return None
            shape = d.shape
            for ax, size in fixed:
                if shape[ax] != size:
                    return None
            for ax, name in names:
                if named is None:
                    named = {}
                if named.setdefault(name, shape[ax]) != shape[ax]:
                    return None
        return self._fast_spec.get((tuple(a.requires_grad for a in args),
                                    _grad_state.grad_enabled))

    def _check_signature(self, leaves, names):
        spec = self.input_signature
        if len(spec) != len(leaves):
            raise TypeError(f"{self._name}: input_signature has {len(spec)} tensor specs but "
                            f"the call passes {len(leaves)} tensors ({', '.join(names)})")
        named: dict = {}
        for s, t, n in zip(spec, leaves, names):
            if not s.matches(t):
                raise TypeError(f"{self._name}: argument {n} is {_sig_text(t.shape, t.dtype)} "
                                f"but input_signature expects {s}; pass a matching tensor or "
                                f"change the signature")
            for axis, (d, size) in enumerate(zip(s.shape, t.shape)):
                if isinstance(d, str):
                    first = named.setdefault(d, (size, n, axis))
                    if first[0] != size:
                        raise TypeError(
                            f"{self._name}: dimension {d!r} is {first[0]} in argument "
                            f"{first[1]} (dim {first[2]}) but {size} in argument {n} (dim "
                            f"{axis}); input_signature names them as one size")

    # -------------------------------------------------------------- tracing
    def _trace_new(self, args, kwargs, leaves, names, tree, key, force=False):
        with self._lock:
            concrete = self._lookup(key)
            if concrete is not None:
                return concrete
            while sum(len(b) for b in self._cache.values()) >= max(self.max_traces, 1) \
                    and self._cache:
                self._evict_least_recently_used()
            self._explain_retrace(key, names)
            try:
                concrete = self._trace(args, kwargs, leaves, names, tree)
            except StateRebound as exc:
                if self.fullgraph:
                    raise TracingError(exc.message) from None
                self._warn_once(exc.message)
                # Once more and these arguments run eagerly for good (a lazily made
                # buffer is rebound on the first call only).
                self._refused[key] = self._refused.get(key, 0) + 1
                if self._refused[key] >= 2:
                    self._eager_keys.add(key)
                return None
            except GradientThroughControlFlow as exc:
                # Correct gradients need eager autograd here: run this signature eagerly.
                if "control-grad" not in self._warned:
                    self._warned.add("control-grad")
                    warnings.warn(f"tracer.function {self._name}: {exc}. Running this "
                                  f"signature eagerly instead.", RuntimeWarning,
                                  stacklevel=4)
                self._eager_keys.add(key)
                return None
            concrete.backend_name = self.backend
            for source, why in concrete.frozen:
                message = (f"{_where_defined(self._fn)}: {self._name} reads {source}, "
                           f"{why}")
                if self.fullgraph:
                    raise TracingError(message)
                self._warn_once(message)
            self.trace_count += 1
            if not force:
                self._misses += 1
            concrete._last_use = self._calls
            self._compile_seconds += concrete.compile_seconds
            if not concrete.one_shot:
                self._cache.setdefault(key, []).append(concrete)
            if self.trace_count == WARN_AFTER_TRACES and "many" not in self._warned:
                self._warned.add("many")
                changing = self._changing_args()
                warnings.warn(
                    f"tracer.function {self._name} has been traced {self.trace_count} times"
                    f"{'; the changing argument: ' + changing if changing else ''}. Each new "
                    f"shape, dtype or static value traces again: pass varying Python values "
                    f"as tensors, or use input_signature with None dimensions",
                    RuntimeWarning, stacklevel=_user_stacklevel())
            return concrete

    def _trace(self, args, kwargs, leaves, names, tree):
        return trace_function(self._fn, self._name, args, kwargs, leaves, names, tree,
                              self.static_argnums, self.static_argnames, self._param_names,
                              self.backend, self.optimize,
                              self.input_signature if self._symbolic else None)

    def _changing_args(self) -> str:
        sigs = [k for k in self._cache]
        if len(sigs) < 2:
            return ""
        first = sigs[0]
        changed = []
        names = self._last_names or []
        for other in sigs[1:]:
            for i, (a, b) in enumerate(zip(first[1], other[1])):
                if a != b and i < len(names):
                    changed.append(names[i])
            if first[0] != other[0]:
                changed.append("a static (non-tensor) argument")
        return ", ".join(dict.fromkeys(changed))

    _last_names = None

    def _explain_retrace(self, key, names):
        self._last_names = names
        if not self._cache or not logs.enabled("recompiles"):
            return
        best_diff = None
        for other in self._cache:
            diff = _describe_diff(other, key, names)
            if best_diff is None or len(diff) < len(best_diff):
                best_diff = diff
        if not best_diff:
            best_diff = ["captured state changed (a guard failed)"]
            for c in self._cache.get(key, []):
                why = c.guard_failure()
                if why:
                    best_diff = [why]
        logs.log("recompiles", f"{self._name}: tracing again (trace #{self.trace_count + 1}): "
                 + "; ".join(best_diff))


def _describe_diff(old, new, names) -> list:
    out = []
    if old[2] != new[2]:
        out.append(f"grad mode: {old[2]} -> {new[2]}")
    if old[0] != new[0]:
        out.append("static arguments or argument structure changed: "
                   f"{_static_text(old[0])} -> {_static_text(new[0])}")
    if len(old[1]) != len(new[1]):
        out.append(f"number of tensor arguments: {len(old[1])} -> {len(new[1])}")
        return out
    for i, (a, b) in enumerate(zip(old[1], new[1])):
        name = names[i] if i < len(names) else f"#{i}"
        if a[0] != b[0]:
            out.append(f"arg {name}: shape {tuple(a[0])} -> {tuple(b[0])}")
        if a[1] != b[1]:
            out.append(f"arg {name}: dtype {a[1]} -> {b[1]}")
        if a[2] != b[2]:
            out.append(f"arg {name}: requires_grad {a[2]} -> {b[2]}")
    return out


def _static_text(tree) -> str:
    vals = []

    def walk(t):
        if isinstance(t, Static):
            v = t.value
            vals.append(type(v).__name__ if isinstance(v, Module) or callable(v) else repr(v))
        elif isinstance(t, tuple):
            for x in t:
                walk(x)

    walk(tree)
    return "(" + ", ".join(vals) + ")"


def _user_stacklevel() -> int:
    """warnings.warn's stacklevel that points at the user's call, not into tracejit (the
    depth differs between f(x), a bound method and get_concrete_function)."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and _is_library_file(frame.f_code.co_filename):
        frame = frame.f_back
        level += 1
    return level


def _static(value):
    try:
        hash(value)
        return Static(value)
    except TypeError:
        return Static(value, by_identity=True)


class _BoundFunction:
    """`@function` on a method: the instance becomes a static (by identity) first argument."""

    def __init__(self, func: Function, instance):
        self._func = func
        self._instance = instance

    def __call__(self, *args, **kwargs):
        return self._func(self._instance, *args, **kwargs)

    def get_concrete_function(self, *args, **kwargs):
        return self._func.get_concrete_function(self._instance, *args, **kwargs)

    @property
    def trace_count(self):
        return self._func.trace_count

    def __repr__(self):
        return f"<bound {self._func!r} of {type(self._instance).__name__}>"


def function(fn=None, *, input_signature=None, static_argnums=(), static_argnames=(),
             backend="numba", fullgraph=False, dynamic=None, max_traces=64, check=None):
    """Trace `fn` into a graph per input signature and run it compiled.

    Usable as ``@function`` and ``@function(...)``, on free functions and methods.
    ``check=True`` (or a number of calls N; ``TRACER_CHECK=1`` for every function) runs
    the first N calls of each trace eagerly as well and raises `tracer.CheckError` where
    the compiled result differs (see tracer.check).

    >>> @function
    ... def f(x):
    ...     return x * 2 + 1
    >>> f(eager.ones(3))
    tensor([3., 3., 3.])
    """
    def wrap(f):
        return Function(f, input_signature=input_signature, static_argnums=static_argnums,
                        static_argnames=static_argnames, backend=backend, fullgraph=fullgraph,
                        dynamic=dynamic, max_traces=max_traces, check=check)
    if fn is None:
        return wrap
    return wrap(fn)


# --------------------------------------------------------------------------------------
# tracing one signature

def trace_function(fn, name, args, kwargs, leaves, names, tree, static_argnums,
                   static_argnames, param_names, backend, optimize=True,
                   input_signature=None) -> ConcreteFunction:
    """Trace one signature. With `input_signature`, its None dims become symbolic sizes
    (tracer.symbolic): the trace then serves every size of those dimensions."""
    from .autodiff import freed_outputs, saved_modified
    from .symbolic import signature_type

    t0 = time.perf_counter()
    tr = Trace(name)
    tr.entry_grads = _entry_grads(fn, args, kwargs)
    traced_leaves = []
    symbols: dict = {}
    for k, (t, n) in enumerate(zip(leaves, names)):
        ty = _type_of(t) if input_signature is None else signature_type(input_signature[k],
                                                                         symbols)
        var = tr.add_input(ty, _var_name(n))
        traced_leaves.append(tr.traced_tensor(var, t.requires_grad))
    leaf_values = [t._data for t in traced_leaves]
    targs, tkwargs = _rebuild(tree, traced_leaves, args, kwargs, static_argnums,
                              static_argnames, param_names)
    roots = _state_roots(fn, args, kwargs)
    snapshot = Snapshot(roots)
    recorder = Recorder()
    try:
        with tr:
            with recorder:
                out = fn(*targs, **tkwargs)
            out_leaves, out_names = [], []
            out_tree = flatten(out, out_leaves, "out", out_names)
            _refuse_symbolic_outputs(out_tree, name)
            outputs = tuple(tr.lift(t) for t in out_leaves)
            out_alias = _output_aliases(tr, out_leaves, outputs, traced_leaves)
            differentiable = any(t.grad_fn is not None and t.grad_fn._state is None
                                 for t in out_leaves)
            modified = saved_modified(out_leaves) if differentiable else None
            freed = freed_outputs(out_leaves, out_alias)
            for t, grad in tr.entry_grads.values():
                if t.grad is not grad:
                    # A .grad the function set or cleared without otherwise using the
                    # tensor (model.zero_grad() over unused parameters): capture it so the
                    # change becomes an update made at every call, not only while tracing.
                    tr.capture(t)
            _drop_temporaries(tr, _reachable_tensor_ids(fn, args, kwargs))
            updates, targets, created_targets = _collect_updates(tr, traced_leaves,
                                                                 leaf_values)
    finally:
        _restore_captures(tr)
        rebound = snapshot.changes()
        snapshot.restore(rebound)
    refuse_rebinding(fn, name, rebound, recorder, roots)
    caps = tr.capture_order
    _link_grad_aliases(caps)
    capture_names, sources, root_guards = _find_sources(fn, args, kwargs,
                                                        [s.tensor for s in caps])
    found_guards, frozen = collect_guards(recorder, fn, [s.tensor for s in caps],
                                          [r for r in roots if not isinstance(r[1], Tensor)])
    grad_owner = []
    for s in caps:
        grad_owner.append(getattr(s, "grad_owner", None))
    graph = Graph(
        name=_var_name(name), inputs=tuple(tr.inputs), captures=tuple(s.var for s in caps),
        consts=tuple(tr.consts), eqns=tuple(tr.eqns), outputs=outputs, updates=updates,
        update_targets=targets, input_names=tuple(tr.input_names),
        capture_names=tuple(capture_names))
    verify(graph)
    raw = graph
    if optimize:
        from .passes import optimize as run_passes

        graph = run_passes(graph)
    if logs.enabled("ir"):
        logs.log("ir", f"traced {name}:\n{graph}")
    t1 = time.perf_counter()
    # A trace that creates state runs once (see _drop_temporaries): interpret it rather
    # than compile kernels that would never run again.
    # For the backend: which capture holds each captured tensor's .grad (if read).
    graph = graph.replace(meta={**graph.meta, "grad_capture": {
        s.grad_owner: j for j, s in enumerate(caps) if getattr(s, "grad_owner", None) is not None}})
    program = get_backend("interpret" if created_targets else backend)(graph)
    t2 = time.perf_counter()
    # Whether a captured tensor's .grad is None matters only where the trace read it (a
    # capture of it) or wrote it (an update): a forward-only function must not retrace
    # just because a backward outside it filled in .grad.
    # ...and only where the trace's first access to that .grad was a read: after an
    # opt.zero_grad() inside the function, the incoming value does not matter.
    first = tr.grad_first_access
    grad_touched = {i for kind, i in targets
                    if kind == "grad" and first.get(id(caps[i].tensor)) != "write"}
    grad_touched |= {s.grad_owner for s in caps if getattr(s, "grad_owner", None) is not None}
    grad_pattern = tuple((i, s.grad is None) for i, s in enumerate(caps)
                         if getattr(s, "grad_owner", None) is None and i in grad_touched)
    signature = ", ".join(f"{n}: {v.type}" for n, v in zip(names, graph.inputs))
    # (a root also found by collect_guards - a closure variable - is checked once)
    found = {(g.source, id(g.expected)) for g in found_guards if g.kind == "identity"}
    guards = [Guard("identity", desc, "{0}()", (get,), obj) for desc, get, obj in root_guards
              if (desc, id(obj)) not in found]
    guards += [Guard("is_none", f"{capture_names[i]}.grad", "{0}._grad", (caps[i].tensor,),
                     was_none) for i, was_none in grad_pattern]
    guards += found_guards
    return ConcreteFunction(
        name, graph, raw, program, tree, out_tree, names, signature,
        captures=[s.tensor for s in caps], capture_grad_owner=grad_owner,
        update_targets=tuple(targets),
        grad_pattern=grad_pattern, sources=sources, one_shot=bool(created_targets),
        differentiable=differentiable, trace_seconds=t1 - t0, compile_seconds=t2 - t1,
        created_targets=created_targets, guards=guards, frozen=frozen, out_alias=out_alias,
        item_state=ItemState(tr.item_guards.values(), tr.item_writes.values()),
        saved_modified=modified, freed_outputs=freed)


def _output_aliases(tr: Trace, out_leaves, outputs, traced_leaves) -> dict:
    """{output index: ("input", k) | ("capture", i) | ("grad", i) | ("input_grad", k)} for
    outputs that are an argument or a captured tensor itself, unchanged (`return x`, and
    the no-op `x.reshape(x.shape)`, `x.float()` of float32, `x[0:n]` of length n, for which
    eager returns `x`), or the .grad of one (`loss.backward(); return w.grad`): the call
    returns that very tensor, as eager does, with its identity, memory and autograd link
    (read after the write-back, for a .grad)."""
    aliases = {}
    for j, (t, v) in enumerate(zip(out_leaves, outputs)):
        for k, leaf in enumerate(traced_leaves):
            if leaf is t and v is tr.inputs[k]:
                aliases[j] = ("input", k)
                break
            if getattr(leaf, "_grad", None) is t:
                aliases[j] = ("input_grad", k)
                break
        else:
            state = tr.captures.get(id(t))
            if state is not None and state.tensor is t and v is state.var and \
                    getattr(state, "grad_owner", None) is None and \
                    not isinstance(t, LiveScalar):
                aliases[j] = ("capture", state.index)
                continue
            for state in tr.capture_order:
                if not isinstance(state.tensor, LiveScalar) and \
                        getattr(state, "grad_owner", None) is None and \
                        getattr(state.tensor, "_grad", None) is t:
                    aliases[j] = ("grad", state.index)
                    break
    return aliases


def _refuse_symbolic_outputs(tree, name):
    """A symbolic size returned as a Python value would reach the caller as the symbol (N0),
    not as this call's size."""
    from eager.ops import Dim

    from .pytree import Static

    if isinstance(tree, Static):
        if isinstance(tree.value, Dim):
            tree.value.unknown(f"returning the symbolic size {tree.value} from {name} (the "
                               f"caller gets Python values as traced; return a tensor, or read "
                               f"the size from the result's shape)")
    elif isinstance(tree, tuple):
        for t in tree:
            _refuse_symbolic_outputs(t, name)


def _type_of(t: Tensor):
    from eager.ops import TensorType

    return TensorType(tuple(t._data.shape), t._data.dtype)


def _var_name(path: str) -> str:
    out = []
    for ch in path:
        out.append(ch if ch.isalnum() or ch == "_" else "_")
    name = "".join(out).strip("_")
    while "__" in name:
        name = name.replace("__", "_")
    return name or "arg"


def _rebuild(tree, traced_leaves, args, kwargs, static_argnums, static_argnames, param_names):
    it = iter(traced_leaves)
    pos_trees, kw_trees = tree
    new_args = []
    for i, (a, t) in enumerate(zip(args, pos_trees)):
        if isinstance(t, Static) and (i in static_argnums or (
                i < len(param_names) and param_names[i] in static_argnames)):
            new_args.append(a)
        else:
            new_args.append(unflatten(t, it))
    new_kwargs = {}
    for k, t in kw_trees:
        if isinstance(t, Static) and k in static_argnames:
            new_kwargs[k] = kwargs[k]
        else:
            new_kwargs[k] = unflatten(t, it)
    return new_args, new_kwargs


def _collect_updates(tr: Trace, traced_leaves, leaf_values):
    """Functionalized mutation: new values of captured tensors, their .grad, new state,
    arguments updated in place."""
    updates, targets = [], []
    for s in tr.capture_order:
        t = s.tensor
        if isinstance(t, LiveScalar):  # read each call, never written
            continue
        if t._data is not s.data:
            updates.append(tr.lift(t))
            targets.append(("data", s.index))
        if t.grad is not s.grad and getattr(s, "grad_owner", None) is None:
            g = t.grad
            updates.append(None if g is None else tr.lift(g))
            targets.append(("grad", s.index))
    created = []
    for t, _orig in tr.created_mutated.values():
        updates.append(tr.lift(t))
        targets.append(("created", len(created)))
        created.append(t)
    for i, t in enumerate(traced_leaves):
        if t.grad is not None:
            updates.append(tr.lift(t.grad))
            targets.append(("input_grad", i))
        if t._data is not leaf_values[i]:
            # x.add_(1) on an argument: eager changes the caller's tensor, so must we.
            updates.append(tr.lift(t))
            targets.append(("input", i))
    return tuple(updates), tuple(targets), created


def _drop_temporaries(tr: Trace, reachable: set):
    """Tensors made during the trace and then updated in place, that nothing outside the
    call can reach, are temporaries: their constant initial value is right at every call
    and their final value is unobservable, so they need no update and no retrace.

    Reachable ones are new state (an optimizer's first step): the Python code that made
    them ran a first-call-only path (PyTorch's SGD copies the first gradient into its
    momentum buffer), so that trace runs once and the next call traces the steady state."""
    for key in list(tr.created_mutated):
        if key not in reachable:
            del tr.created_mutated[key]


def _restore_captures(tr: Trace):
    restore_items(tr)
    # Also the .grad of reachable tensors the trace never captured (it failed half-way).
    for t, grad in tr.entry_grads.values():
        t.grad = grad
    for s in tr.capture_order:
        t = s.tensor
        t._data = s.data
        t.grad = s.grad
        t.grad_fn = s.grad_fn
        t.requires_grad = s.requires_grad
        t._version[0] = s.version
    for t, orig in tr.created_mutated.values():
        t._data = orig


__all__ = ["function", "Function", "ConcreteFunction", "TensorSpec", "run_eagerly",
           "TracingError", "LEAF"]
