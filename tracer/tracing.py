"""Tracing one input signature of a @function into a ConcreteFunction.

`trace_function` runs the Python function on traced tensors, collects what it read from
outside (captures, guards) and what it wrote (updates), optimizes the graph and compiles it.
tracer.function calls it through its own module attribute (tests patch
`tracer.function.trace_function`).
"""

from __future__ import annotations

import time

import numpy as np

from eager import dispatch
from eager.autograd import Node
from eager.errors import describe
from eager.tensor import Tensor

from . import logs
from .backends import get_backend
from .captures import (_entry_grads, _find_sources, _link_grad_aliases,
                       _reachable_tensor_ids, _state_roots)
from .concrete import ConcreteFunction
from .discover import Recorder, collect_guards
from .errors import ProgramRaised
from .host_random import host_random_states, outside_reads, refuse_host_random
from .guards import Guard
from .ir import Graph, UpdateKind, verify
from .pystate import ItemState, restore_items
from .pytree import Static, argument_containers, dataclass_fields, flatten, unflatten
from .rebinding import Snapshot, _where_defined, refuse_rebinding
from .trace import (VALUE_GUARD_ELEMENTS, HistoryAfterCall, LiveScalar,
                    AutogradStateChanged, Trace)
from .views import view_chain


def _raised_in(exc: BaseException, code) -> bool:
    """Whether `exc` was raised inside the function whose code object is `code`."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is code:
            return True
        tb = tb.tb_next
    return False


# --------------------------------------------------------------------------------------
# tracing one signature

def trace_function(fn, name, args, kwargs, *rest, **options) -> ConcreteFunction:
    """Trace one signature. With `input_signature`, its None dims become symbolic sizes
    (tracer.symbolic): the trace then serves every size of those dimensions.

    State an optimizer's traced first step made (Adam's moments) goes again if the trace
    fails; if the trace's first run raises, the caller calls `concrete.undo_state()`."""
    roots = _state_roots(fn, args, kwargs)
    snapshot = Snapshot(roots, functions=(fn,))
    try:
        concrete = _trace_function(fn, name, args, kwargs, *rest, roots=roots,
                                   snapshot=snapshot, **options)
    except BaseException:
        snapshot.restore_optimizer_state()
        raise
    concrete.undo_state = snapshot.optimizer_undo()
    return concrete


def _trace_function(fn, name, args, kwargs, leaves, names, tree, static_argnums,
                    static_argnames, param_names, backend, optimize=True,
                    input_signature=None, *, roots, snapshot) -> ConcreteFunction:
    from .autodiff import eager_only_backward, freed_outputs
    from .symbolic import signature_type

    t0 = time.perf_counter()
    tr = Trace(name)
    tr.entry_grads = _entry_grads(fn, args, kwargs)
    tr.entry_requires_grad = {k: (t, t.requires_grad) for k, (t, _) in tr.entry_grads.items()}
    traced_leaves = []
    symbols: dict = {}
    for k, (t, n) in enumerate(zip(leaves, names)):
        ty = _type_of(t) if input_signature is None else signature_type(input_signature[k],
                                                                         symbols)
        var = tr.add_input(ty, _var_name(n), _strides_if_not_c(t._data))
        traced_leaves.append(tr.traced_tensor(var, t.requires_grad))
    leaf_values = [t._data for t in traced_leaves]
    targs, tkwargs = _rebuild(tree, traced_leaves, args, kwargs, static_argnums,
                              static_argnames, param_names)
    # The function gets copies of container arguments (holding the traced tensors): what it
    # appends to or rebinds in them eager does to the caller's containers at every call
    arg_snapshot = Snapshot(
        [(f"argument {n}", a) for n, a in zip(param_names, targs) if _mutable(a)]
        + [(f"argument {k}", a) for k, a in tkwargs.items() if _mutable(a)],
        sizes=True)
    recorder = Recorder()
    grad_mode = dispatch.is_grad_enabled()
    try:
        with tr:
            with recorder:
                rng_before = host_random_states(roots, snapshot.generators)
                try:
                    with outside_reads(snapshot.streams) as outside:
                        out = fn(*targs, **tkwargs)
                    refuse_host_random(rng_before, fn, name, outside)
                    # (one given a history in place is HistoryAfterCall's, below)
                    rg_changed = [(t, rg) for t, rg in tr.entry_requires_grad.values()
                                  if t.requires_grad != rg and t.grad_fn is None]
                    rg_changed += [(n, t.requires_grad) for n, t, tt in
                                   zip(names, leaves, traced_leaves)
                                   if tt.requires_grad != t.requires_grad and tt.grad_fn is None]
                    mode_left = dispatch.is_grad_enabled()
                except Exception as exc:
                    # Autograd's own refusal (backward after an in-place write to a value
                    # it saved, or through a freed graph), which eager raises as well:
                    # eagerly it comes after the ops before it, whose updates stay; tracing
                    # changed nothing, so the call runs eagerly. (Other errors raise here:
                    # some are refusals made only while tracing.)
                    if not _raised_in(exc, Node.check_saved.__code__):
                        raise
                    raised = ProgramRaised(str(exc))
                    raised.while_tracing = True
                    raise raised from exc
            out_leaves, out_names = [], []
            out_tree = flatten(out, out_leaves, "out", out_names)
            _refuse_symbolic_outputs(out_tree, name)
            outputs = tuple(tr.lift(t) for t in out_leaves)
            out_alias, out_views = _output_aliases(tr, out_leaves, outputs, traced_leaves)
            differentiable = any(t.grad_fn is not None and t.grad_fn._state is None
                                 for t in out_leaves)
            modified = eager_only_backward(out_leaves) if differentiable else None
            freed = freed_outputs(out_leaves, out_alias)
            for t, grad in tr.entry_grads.values():
                if t.grad is not grad or (
                        grad is None and tr.grad_first_access.get(id(t)) == "write"):
                    # A .grad the function set or cleared without otherwise using the
                    # tensor (model.zero_grad() over unused parameters): capture it so the
                    # change becomes an update made at every call, not only while tracing.
                    # Also a .grad set to None that was None already (see _collect_updates).
                    tr.capture(t)
            _drop_temporaries(tr, _reachable_tensor_ids(fn, args, kwargs))
            updates, targets, created_targets = _collect_updates(tr, traced_leaves,
                                                                 leaf_values)
            gained = _gained_history(tr, traced_leaves)
    finally:
        _restore_captures(tr)
        dispatch.set_grad_enabled(grad_mode)
        rebound = snapshot.changes()
        snapshot.restore(rebound)
    refuse_rebinding(fn, name, rebound + arg_snapshot.changes(), recorder, roots)
    if rg_changed:
        _refuse_requires_grad_change(fn, name, args, kwargs, rg_changed)
    if mode_left != grad_mode:
        raise AutogradStateChanged(
            f"{_where_defined(fn)}: {name} leaves gradient mode {'on' if mode_left else 'off'}"
            f" (a bare eager.set_grad_enabled({mode_left}) call); a trace would switch it only "
            f"once. Switch it with `with eager.set_grad_enabled(flag):` or `with "
            f"eager.no_grad():` inside the function, or before calling it")
    caps = tr.capture_order
    _link_grad_aliases(caps)
    reads = list(tr.value_reads.values())
    capture_names, sources, root_guards = _find_sources(
        fn, args, kwargs, [s.tensor for s in caps] + [r[0] for r in reads])
    if gained:
        kind, k, loc = gained[0]
        raise HistoryAfterCall(
            f"{loc or _where_defined(fn)}: {names[k] if kind == 'input' else capture_names[k]}"
            f" gets autograd history inside {name} (an in-place write of a value that "
            f"requires grad): eager leaves it with a grad_fn into the call's graph, which a "
            f"compiled call cannot give it. Write it under eager.no_grad(), or write a "
            f"detached value (c.add_(h.detach()))")
    found_guards, frozen = collect_guards(recorder, fn,
                                          [s.tensor for s in caps] + [r[0] for r in reads],
                                          [r for r in roots if not isinstance(r[1], Tensor)],
                                          snapshot.resized())
    read_guards = _value_read_guards(reads, capture_names[len(caps):], dict(
        (i - len(caps), src) for i, src in sources if i >= len(caps)), frozen)
    capture_names = capture_names[:len(caps)]
    sources = [(i, src) for i, src in sources if i < len(caps)]
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
    graph = graph.replace(grad_captures={
        s.grad_owner: j for j, s in enumerate(caps) if getattr(s, "grad_owner", None) is not None})
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
    guards += read_guards
    concrete = ConcreteFunction(
        name, graph, raw, program, tree, out_tree, names, signature,
        captures=[s.tensor for s in caps], capture_grad_owner=grad_owner,
        update_targets=tuple(targets),
        grad_pattern=grad_pattern, sources=sources, one_shot=bool(created_targets),
        differentiable=differentiable, trace_seconds=t1 - t0, compile_seconds=t2 - t1,
        created_targets=created_targets, guards=guards, frozen=frozen, out_alias=out_alias,
        out_views=out_views,
        item_state=ItemState(tr.item_guards.values(), tr.item_writes.values()),
        saved_modified=modified, freed_outputs=freed,
        input_layouts=_read_layouts(tr, leaves))
    concrete.arg_containers = argument_containers(out, targs, tkwargs)
    return concrete


def _value_read_guards(reads, names, sources, frozen) -> list:
    """Guards on the contents of the tensors made before the call whose value the trace's
    Python read (Trace.value_read): `if flag.item():`, `float(scale)`, `n = int(count)`
    decided what was recorded, so a call that finds another value must trace again. Each is
    fetched where it was found (`model.flag`, a closure variable), so a rebound one is seen
    too; a large one is reported frozen instead (fullgraph=True refuses it)."""
    guards = []
    for k, (t, seen, what, where) in enumerate(reads):
        name = names[k] or f"a tensor made before the call ({describe(t)})"
        if seen.size > VALUE_GUARD_ELEMENTS:
            frozen.append((name, f"whose value Python reads ({what} at {where}): a tensor of "
                                 f"{seen.size} elements, too large to compare at every call, "
                                 f"so its value at trace time is used from now on; compute "
                                 f"with it as a tensor, or pass it as an argument"))
            continue
        src = sources.get(k)
        template, objects = ("{0}()._data", (src.resolve,)) if src else ("{0}._data", (t,))
        guards.append(Guard("contents", f"{name} ({what} at {where})", template, objects,
                            seen))
    return guards


def _output_aliases(tr: Trace, out_leaves, outputs, traced_leaves) -> dict:
    """{output index: ("input", k) | ("capture", i) | ("grad", i) | ("input_grad", k)} for
    outputs that are an argument or a captured tensor itself (`return x`, `x.mul_(2);
    return x`, and the no-op `x.reshape(x.shape)`, `x.float()` of float32, `x[0:n]` of
    length n, for which eager returns `x`), or the .grad of one (`loss.backward(); return
    w.grad`): the call returns that very tensor, as eager does, with its identity, memory
    and autograd link (read after the write-back). ("output", j) for an output that is
    the same tensor as the earlier output j (`return y, y`).

    Also ("input_view", k) | ("capture_view", i) for outputs that are a view of one
    (`return x[1:]`, `x.T`, `x.view(-1)`, `x.detach()`), with {output index: (view ops,
    whether it had autograd history)}: the call returns that view of the real tensor, made
    after the write-back, sharing its memory as eager's does."""
    aliases, views = {}, {}
    first = {}
    for j, (t, v) in enumerate(zip(out_leaves, outputs)):
        earlier = first.setdefault(id(t), j)
        if earlier != j:
            # The same tensor returned twice (`return y, y`, `v = x[0]; return v, v`): eager
            # gives one object, so a change made through one is seen through the other.
            aliases[j] = ("output", earlier)
            continue
        found = view_chain(t)
        if found is not None:
            root, chain = found
            for k, leaf in enumerate(traced_leaves):
                if leaf is root:
                    aliases[j] = ("input_view", k)
                    break
            else:
                state = tr.captures.get(id(root))
                if state is not None and state.tensor is root and \
                        getattr(state, "grad_owner", None) is None and \
                        not isinstance(root, LiveScalar):
                    aliases[j] = ("capture_view", state.index)
            where = _symbol_places(tr, chain)
            if j in aliases and where is not None:
                views[j] = (chain, t.requires_grad, where)
                continue
            aliases.pop(j, None)
        for k, leaf in enumerate(traced_leaves):
            # (an argument written in place is still the argument: eager's `x.mul_(2);
            # return x` returns x, which the write-back has updated when the call returns;
            # not one that got a history inside, whose autograd link is the call's)
            if leaf is t and (v is tr.inputs[k] or t.grad_fn is None):
                aliases[j] = ("input", k)
                break
            if getattr(leaf, "_grad", None) is t:
                aliases[j] = ("input_grad", k)
                break
        else:
            state = tr.captures.get(id(t))
            if state is not None and state.tensor is t and \
                    (v is state.var or t.grad_fn is None) and \
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
    return aliases, views


def _symbol_places(tr: Trace, chain):
    """{Dim: (argument index, axis)} for the symbolic sizes in view ops `chain`'s params
    (bound from the call's arguments), or None when an argument has none of them."""
    dims = set()
    for _op, params in chain:
        dims.update(_dims_in(params))
    where = {}
    for k, v in enumerate(tr.inputs):
        for axis, d in enumerate(v.type.shape):
            if d in dims and d not in where:
                where[d] = (k, axis)
    return where if len(where) == len(dims) else None


def _dims_in(value) -> list:
    from eager.ops import is_dim

    if is_dim(value):
        return [value]
    if isinstance(value, (tuple, list)):
        return [d for v in value for d in _dims_in(v)]
    if isinstance(value, dict):
        return [d for v in value.values() for d in _dims_in(v)]
    return []


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


def _read_layouts(tr: Trace, leaves) -> tuple:
    """(index, strides or None for C-contiguous) of the arguments whose layout the trace read
    (tracer.views, tracer.layout): the trace is right only for calls with those layouts."""
    index = {id(v): k for k, v in enumerate(tr.inputs)}
    reads = tr.layout_reads | (tr.layout_if_written if tr.wrote_in_place else set())
    out = []
    for vid in sorted(reads, key=lambda i: index.get(i, -1)):
        k = index.get(vid)
        if k is not None:
            d = leaves[k]._data
            out.append((k, None if d.flags.c_contiguous else d.strides))
    return tuple(out)


def _strides_if_not_c(data):
    """A non-C-contiguous array's strides in elements (None for C-contiguous ones)."""
    if data.__class__ is not np.ndarray or data.flags.c_contiguous:
        return None
    return tuple(s // data.itemsize for s in data.strides)


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


_MUTABLE = (list, dict, tuple)


def _mutable(a) -> bool:
    """A container argument the function gets a copy of while tracing (a dataclass: made
    again from its fields, see pytree.flatten)."""
    return isinstance(a, _MUTABLE) or dataclass_fields(a) is not None


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
            targets.append((UpdateKind.DATA, s.index))
        # (a .grad set to None that was None already while tracing is an update too: a
        # frozen layer's, which may hold a gradient at a later call, unfrozen in between)
        set_none = t.grad is None and tr.grad_first_access.get(id(t)) == "write"
        if (t.grad is not s.grad or set_none) and getattr(s, "grad_owner", None) is None:
            g = t.grad
            updates.append(None if g is None else tr.lift(g))
            targets.append((UpdateKind.GRAD, s.index))
    created = []
    for t, _orig in tr.created_mutated.values():
        updates.append(tr.lift(t))
        targets.append((UpdateKind.CREATED, len(created)))
        created.append(t)
    for i, t in enumerate(traced_leaves):
        if t.grad is not None:
            updates.append(tr.lift(t.grad))
            targets.append((UpdateKind.INPUT_GRAD, i))
        if t._data is not leaf_values[i]:
            # x.add_(1) on an argument: eager changes the caller's tensor, so must we.
            updates.append(tr.lift(t))
            targets.append((UpdateKind.INPUT, i))
    return tuple(updates), tuple(targets), created


def _gained_history(tr: Trace, traced_leaves) -> list:
    """[(kind, index, user line)] of the arguments ("input") and captured tensors
    ("capture") whose autograd history the call changed (an in-place write of a value
    that requires grad): the program writes their values back, not their grad_fn."""
    gained = [("input", k, t) for k, t in enumerate(traced_leaves) if t.grad_fn is not None]
    gained += [("capture", s.index, s.tensor) for s in tr.capture_order
               if s.tensor.grad_fn is not s.grad_fn]
    out = []
    for kind, k, t in gained:
        var = tr.lift(t)
        loc = next((e.loc for e in reversed(tr.eqns) if var in e.outs), "")
        out.append((kind, k, loc))
    return out


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


def _refuse_requires_grad_change(fn, name, args, kwargs, changed):
    """(changed: (tensor or argument name, requires_grad when the call began))"""
    state = [t for t, _ in changed if isinstance(t, Tensor)]
    found = iter(_find_sources(fn, args, kwargs, state)[0])
    names = [f"argument {t}" if isinstance(t, str) else next(found) for t, _ in changed]
    what = ", ".join(f"{n} ({rg} -> {not rg})" for n, (_, rg) in zip(names, changed))
    raise AutogradStateChanged(
        f"{_where_defined(fn)}: {name} changes requires_grad of {what} and leaves it so; a "
        f"trace would make that change only once. Freeze or unfreeze outside the function "
        f"(a compiled call then traces again for the new setting), or set it back before "
        f"the function returns")


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
    for t, rg in tr.entry_requires_grad.values():
        if t.requires_grad != rg:  # (a parameter the trace froze and never used)
            t.requires_grad = rg
