"""Check mode's comparisons and its report: dtype-aware tolerances, what differs between
the eager and the compiled call, and which IR equation (and kernel) diverges first."""
from __future__ import annotations

import numpy as np

from eager import dispatch
from eager.dtypes import bfloat16, finfo, is_floating
from eager.ops import OPS
from eager.tensor import Tensor

# dtype -> (rtol, atol); atol is scaled up by the largest magnitude of the eager value
TOLERANCES = {np.dtype(np.float32): (1e-4, 1e-5), np.dtype(np.float64): (1e-10, 1e-12),
              np.dtype(np.float16): (1e-2, 1e-3), bfloat16: (1.6e-2, 1e-3)}
CAPTURED = "<captured "  # path prefix of a capture found only by its identity


class _ObservedTensor:
    __slots__ = ("data", "requires_grad", "differentiable", "ident")

    def __init__(self, t: Tensor):
        self.data = np.array(t._data, copy=True)
        self.ident = id(t)  # (an optimizer's parameters get a step-aware tolerance)
        self.requires_grad = t.requires_grad
        # A backward from it would reach the graph (not a graph already freed by a backward
        # inside the function: the trace's test of a differentiable output).
        self.differentiable = _live(t)


def _live(t) -> bool:
    fn = t.grad_fn
    return fn is not None and getattr(fn, "_state", None) is None

# --------------------------------------------------------------------------------------
# comparing

class _Diff:
    def __init__(self, where, text, error=None):
        self.where = where      # "output out[0]", "state model.0.weight.grad"
        self.text = text        # what differs
        self.error = error      # (largest abs error, its rel error) or None


def computed_precision(graph, update_ids=()) -> tuple:
    """(per output, {id of an updated tensor: dtype}): the coarsest floating dtype each
    output's and update's value was computed at, where coarser than its own. A float64
    cast of a float32 tan carries float32's rounding, so it gets float32's tolerance; shape
    ops compute nothing, nor does a cast of an argument. `update_ids`: per
    entry of graph.update_targets, id of the tensor it is written into (or None)."""
    def coarser(a, b):
        if a is None or b is None:
            return a if b is None else b
        return a if finfo(a).eps >= finfo(b).eps else b

    at = {}
    for e in graph.eqns:
        op = OPS.get(e.op)
        worst = None
        for x in e.inputs:
            worst = coarser(worst, at.get(id(x)))
        # (a cast of a computed value rounds it: float32(exp(x)) may round either way)
        exact = op is not None and ((op.converts and worst is None) or op.view
                                    or op.category == "shape")
        for v in e.outs:
            dtype = getattr(v.type, "dtype", None)
            own = dtype if not exact and dtype is not None and is_floating(dtype) else None
            at[id(v)] = coarser(worst, own)

    def only_if_coarser(v):
        if v is None:  # (an update that unsets a .grad)
            return None
        dtype, own = at.get(id(v)), getattr(v.type, "dtype", None)
        if dtype is None or own is None or not is_floating(own) or \
                finfo(dtype).eps <= finfo(own).eps:
            return None
        return dtype

    outputs = [only_if_coarser(v) for v in graph.outputs]
    updates = {}
    for v, ident in zip(graph.updates, update_ids):
        dtype = only_if_coarser(v)
        if dtype is not None and ident is not None:
            updates[ident] = dtype
    return outputs, updates


def compare_arrays(expected: np.ndarray, got: np.ndarray, names=("eager", "compiled"),
                   extra=None, computed_at=None):
    """None if `got` matches `expected` (the eager value) within check mode's tolerances
    (plus `extra`, a per-element allowance, where given; those of dtype `computed_at`,
    where the value was computed at that coarser dtype), else (what differs, (largest
    absolute error, relative error) or None)."""
    ref, new = names
    if expected.shape != got.shape or expected.dtype != got.dtype:
        return (f"{ref} gives {_type_text(expected)}, {new} {_type_text(got)}", None)
    if expected.dtype.kind != "c" and not is_floating(expected.dtype):
        bad = expected != got
        if not bad.any():
            return None
        idx = _first(bad)
        return (f"{int(bad.sum())} of {bad.size} elements differ (compared exactly); at "
                f"{idx}: {ref} {_item(expected[idx])}, {new} {_item(got[idx])}", None)
    e_nan, g_nan = np.isnan(expected), np.isnan(got)
    if (e_nan != g_nan).any():
        idx = _first(e_nan != g_nan)
        return (f"NaN in one but not the other at {idx}: {ref} {_item(expected[idx])}, "
                f"{new} {_item(got[idx])}", None)
    finite = np.isfinite(expected) & np.isfinite(got)
    inf_bad = ~finite & ~e_nan & (expected != got)
    if inf_bad.any():
        idx = _first(inf_bad)
        return (f"infinities differ at {idx}: {ref} {_item(expected[idx])}, {new} "
                f"{_item(got[idx])}", None)
    if not finite.any():
        return None
    e = np.where(finite, expected, 0).astype(np.float64)
    g = np.where(finite, got, 0).astype(np.float64)
    err = np.abs(g - e)
    rtol, atol = TOLERANCES.get(computed_at or expected.dtype, (1e-4, 1e-5))
    # atol as torch.testing.assert_close uses it, scaled up for arrays of large values: a
    # sum that cancels to about 0 differs by rounding at the scale of its terms.
    scale = max(float(np.max(np.abs(e))), 1.0)
    allowed = atol * scale + rtol * np.abs(e)
    if extra is not None:
        allowed = allowed + extra
    bad = finite & (err > allowed)
    if not bad.any():
        return None
    idx = _first(err == err[bad].max())
    rel = float(err[idx] / max(abs(e[idx]), finfo(expected.dtype).tiny))
    return (f"{int(bad.sum())} of {bad.size} elements beyond tolerance (rtol {rtol:g}, atol "
            f"{atol * scale:.3g}); largest error {err[idx]:.3g} (relative {rel:.3g}) at "
            f"{idx}: {ref} {_item(expected[idx])}, {new} {_item(got[idx])}",
            (float(err[idx]), rel))


def _item(v) -> str:
    return repr(v.item()) if hasattr(v, "item") else repr(v)


def _first(mask):
    return tuple(int(i) for i in np.argwhere(mask)[0]) if mask.ndim else ()


def _type_text(a) -> str:
    return f"{a.dtype}{list(a.shape)}"


def differences(eager_tree, eager_leaves, tree, leaves, eager_seen, seen,
                allowance=None, precision=((), {})) -> list:
    """What differs between the eager and the compiled call's outputs and state.
    `allowance(path, eager, compiled)`: an extra per-element tolerance for a state tensor,
    or None (check mode's optimizer-step allowance, tracer.check._StepAllowance).
    `precision`: computed_precision's (per output, per updated tensor) dtypes."""
    diffs = []
    if eager_tree != tree or len(eager_leaves) != len(leaves):
        diffs.append(_Diff("output", f"eager returns {eager_tree!r} with {len(eager_leaves)} "
                           f"tensors, compiled {tree!r} with {len(leaves)}"))
        return diffs
    out_precision, state_precision = precision
    for k, ((name, e), (_n, c)) in enumerate(zip(eager_leaves, leaves)):
        d = compare_arrays(e.data, c.data, computed_at=out_precision[k]
                           if k < len(out_precision) else None)
        if d is not None:
            diffs.append(_Diff(f"output {name}", *d))
        elif e.differentiable and not c.requires_grad:
            diffs.append(_Diff(f"output {name}", "eagerly it has a grad_fn (gradients flow "
                               "back through it), compiled it does not require grad"))
    for path in list(eager_seen) + [p for p in seen if p not in eager_seen]:
        e = eager_seen.get(path, _MISSING)
        c = seen.get(path, _MISSING)
        if (e is _MISSING or c is _MISSING) and path.startswith(CAPTURED):
            continue  # found by identity; where the other run reaches it, it is compared
        if e is _MISSING or c is _MISSING:
            which = "eager" if c is _MISSING else "compiled"
            diffs.append(_Diff(f"state {path}", f"only the {which} call leaves a value here"))
        elif isinstance(e, _ObservedTensor) and isinstance(c, _ObservedTensor):
            extra = allowance(path, e, c) if allowance is not None else None
            d = compare_arrays(e.data, c.data, extra=extra,
                               computed_at=state_precision.get(e.ident))
            if d is not None:
                diffs.append(_Diff(f"state {path}", *d))
        elif e is None or c is None or isinstance(e, _ObservedTensor) \
                or isinstance(c, _ObservedTensor):
            if (e is None) != (c is None) or type(e) is not type(c):
                diffs.append(_Diff(f"state {path}", f"eager leaves {_short(e)}, compiled "
                                   f"{_short(c)}"))
        elif e != c and not (e != e and c != c):  # numbers; NaN equals NaN here
            diffs.append(_Diff(f"state {path}", f"eager leaves {e!r}, compiled {c!r}"))
    return diffs


_MISSING = object()


def _short(v) -> str:
    if v is None:
        return "None"
    if isinstance(v, _ObservedTensor):
        return f"a tensor {_type_text(v.data)}"
    return repr(v)


# --------------------------------------------------------------------------------------
# naming the first diverging equation

def report(func, concrete, diffs, inputs, records) -> str:
    n = getattr(concrete, "checks_done", 1)
    lines = [f"tracer check: {func._name} (call {n} of the trace for "
             f"({concrete.signature})): the compiled result differs from the eager one"]
    for d in diffs[:8]:
        lines.append(f"  {d.where}: {d.text}")
    if len(diffs) > 8:
        lines.append(f"  ... and {len(diffs) - 8} more differences")
    try:
        if all(d.where.startswith("gradient") for d in diffs):
            lines.append("  the outputs and state agree: the difference is in the compiled "
                         "backward (its graphs and kernels: concrete.backward)")
        else:
            lines.extend(_locate(concrete, inputs, records))
    except Exception as exc:  # noqa: BLE001 - the differences above still stand
        lines.append(f"  (could not localize further: {type(exc).__name__}: {exc})")
    lines.append("  The eager result is the reference: meanwhile run the function eagerly "
                 "(tracer.run_eagerly(True)); a difference that no Python value of yours "
                 "explains is a tracejit bug, please report it with this message.")
    return "\n".join(lines)


def _locate(concrete, inputs, records) -> list:
    from .printing import format_eqn

    if inputs is None:
        return ["  (could not localize: the captured state did not match the trace)"]
    program, graph = _program_that_ran(concrete)
    values = _interpret(graph, inputs, records)
    found = _first_compiled_divergence(program, graph, inputs, values, records)
    if found is not None:
        eqn, where, text, owner = found
        return [f"  first diverging equation ({where} disagrees with the reference "
                f"interpreter on it), in {owner}:",
                *format_eqn(eqn, "    "),
                f"    {text}",
                *_fused_note(program, eqn)]
    raw = concrete.raw_graph
    found = _first_eager_divergence(raw, _interpret(raw, inputs, records, keep_order=True),
                                    records)
    if found is not None:
        eqn, text = found
        owner = _owner_of(program, graph, eqn)
        return ["  the trace itself differs from the eager run: the first traced equation "
                f"whose value differs from the eager op's{owner}:",
                *format_eqn(eqn, "    "),
                f"    {text}",
                "  (a value the trace baked in, or state it read, was not what the eager run "
                "used)"]
    if graph is not raw:
        found = _first_eager_divergence(
            graph, _interpret(graph, inputs, records, keep_order=True), records)
        if found is not None:
            eqn, text = found
            return ["  the trace agrees with the eager run but the optimized graph does not "
                    f"(a pass changed a value); its first equation that differs from the "
                    f"eager op's{_owner_of(program, graph, eqn)}:",
                    *format_eqn(eqn, "    "),
                    f"    {text}"]
    return ["  every traced equation agrees with the eager run and the compiled program with "
            "the interpreter: the difference is in what the call returns or writes back "
            "(the outputs and state named above), not in an equation"]


def _program_that_ran(concrete):
    plan = concrete._plan
    if concrete.differentiable and dispatch.is_grad_enabled() and plan is not None:
        program = plan.fwd_program
    else:
        program = concrete.program
    graph = getattr(program, "graph", None) or concrete.graph
    return program, graph


def _interpret(graph, inputs, records, keep_order=False):
    """Each equation's value, from the reference interpreter on copies of `inputs` (random
    ops drawing what the eager run drew)."""
    from eager import random as _random

    from .interpret import run_graph

    seen = [] if keep_order else {}

    def note(e, outs):
        if keep_order:
            seen.append((e, [np.array(o, copy=True) for o in outs]))
        else:
            for v, o in zip(e.outs, outs):
                seen[id(v)] = np.array(o, copy=True)

    after = _random.get_rng_state()
    _random.set_rng_state(records.rng)
    try:
        run_graph(graph, [np.array(a, copy=True) for a in inputs], on_eqn=note)
    finally:
        _random.set_rng_state(after)
    return seen


def _first_compiled_divergence(program, graph, inputs, reference, records):
    """Run the numba program step by step (kernel, BLAS call, numpy step) on copies of
    the inputs, and find the first equation whose materialized value differs from the
    reference interpreter's."""
    run_observed = getattr(program, "run_observed", None)
    slots = getattr(program, "slots", None)
    if run_observed is None or slots is None:
        return None
    got = {}

    def note(s, value):
        if value is not None and s not in got:
            got[s] = np.array(value, copy=True)
    from eager import random as _random

    after = _random.get_rng_state()
    _random.set_rng_state(records.rng)
    try:
        run_observed([np.array(a, copy=True) for a in inputs], note)
    finally:
        _random.set_rng_state(after)
    for e in graph.eqns:
        for v in e.outs:
            s = slots.get(id(v))
            if s is None or s not in got or id(v) not in reference:
                continue
            d = compare_arrays(reference[id(v)], got[s], ("interpreted", "compiled"))
            if d is not None:
                return e, f"%{v.name}", d[0], _owner_text(program, e)
    return None


def _kernel_members(program, eqn):
    """(kernel, its equations) of the kernel computing `eqn`, or (None, [])."""
    for k in getattr(program, "kernels", ()):
        group = k.group
        members = list(group.members)
        for part in getattr(group, "parts", None) or ():
            members.extend(m for m in part.members if not any(m is x for x in members))
        if any(m is eqn for m in members):
            return k, members
    return None, []


def _fused_note(program, eqn) -> list:
    """Inside a fused kernel only its outputs are stored: say which equations the wrong
    value may come from, rather than guess one."""
    k, members = _kernel_members(program, eqn)
    if k is None or len(members) < 2:
        return []
    upto = members[:next(i for i, m in enumerate(members) if m is eqn) + 1]
    first, last = upto[0].outs[0].name, upto[-1].outs[0].name
    return [f"    ({k.name} fuses {len(members)} equations; their values are not stored, "
            f"so the first wrong one is among %{first}..%{last}, whose inputs from outside "
            f"the kernel agree)"]


def _owner_text(program, eqn) -> str:
    k, _members = _kernel_members(program, eqn)
    if k is not None:
        state = "" if k.entry is not None else " (its numpy fallback)"
        return f"kernel {k.name}{state}"
    for step in getattr(getattr(program, "part", None), "steps", ()):
        if getattr(step, "eqn", None) is eqn:
            return f"a {getattr(step, 'how', 'view')} step (not a kernel)"
    return "the program"


def _owner_of(program, graph, eqn) -> str:
    """Where the compiled program computes the raw-graph equation `eqn`, if the optimized
    graph kept it."""
    same = next((e for e in graph.eqns if e is eqn), None)
    if same is None:  # the passes rebuild equations: the same op, line and type
        same = next((e for e in graph.eqns if e.op == eqn.op and e.loc == eqn.loc
                     and [o.type for o in e.outs] == [o.type for o in eqn.outs]), None)
    if same is None:
        return ""
    return f" (computed in {_owner_text(program, same)})"


def _first_eager_divergence(raw, traced, records):
    """Align the raw trace's equations with the eager run's ops (both in dispatch order,
    matched by op name and shape) and find the first whose values differ."""
    values = records.values
    j = 0
    for e, outs in traced:
        if OPS[e.op].control or len(outs) != 1:
            continue
        out = outs[0]
        for k in range(j, min(j + 64, len(values))):
            name, value = values[k]
            if name == e.op and value.shape == out.shape and value.dtype == out.dtype:
                j = k + 1
                d = compare_arrays(value, out, ("eager", "traced"))
                if d is not None:
                    return e, d[0]
                break
    return None



__all__ = ["TOLERANCES", "compare_arrays", "differences", "report"]
