"""The generated call of a ConcreteFunction: one straight-line Python function per trace,
made from the trace's data (its captures, guards, .grad destinations, updates and output
aliases), that checks the guards, runs the program and writes the results back.
`ConcreteFunction` (tracer.concrete) holds the data; this module writes the text."""

from __future__ import annotations

import numpy as np

from eager.errors import user_location
from eager.ops import OPS
from eager.protocol import STRUCTURE_EPOCH
from eager.random import get_rng_state, set_rng_state
from eager.tensor import Tensor

from .aliasing import memory_owner
from .errors import ProgramRaised, step_error
from .guards import check_lines
from .layout import ANY_LAYOUT, layout_key
from .ownership import assign_grad as _assign_grad, unshared as _unshared
from .pytree import LEAF, unflatten
from .symbolic import check_nonempty
from .views import derive

MISS = object()  # ConcreteFunction.call_fast: a guard failed, take the general path


def generate_call(self, guarded: bool):
    """The call as one generated function, made from this trace's data: reading the
    captures, the .grad arrays the program writes into, the run and the write-back,
    straight-line over this trace's captures (a training step has 17; looping over
    them with their per-capture tuples cost more than most of its kernels).

    `guarded` (`call_fast`): the guards first; on any miss it returns MISS and the
    caller takes the general path, which says what changed (None where this trace
    writes state the fast path does not). Unguarded (`run`): what every call of this
    trace runs once its guards have passed. Returns (function, source)."""
    caps = self._captures
    ns = {"MISS": MISS, "ndarray": np.ndarray, "seen": self._guard_seen,
          "dseen": self._dest_seen, "EPOCH": STRUCTURE_EPOCH, "self": self,
          "co": self._capture_owners, "_owner": memory_owner,
          "layout_key": layout_key,
          "program": self.program, "assign_data": assign_data, "assign_grad": _assign_grad,
          "wrap": Tensor._wrap, "copy": np.array, "unflatten": unflatten,
          "out_tree": self.out_tree, "alias": self._alias, "astale": [True],
          "__name__": "tracer.generated"}
    lines = ["def call(leaves):"]
    for i, t in enumerate(caps):
        if self._capture_grad_owner[i] is None:  # (a captured .grad is read via its owner)
            ns[f"c{i}"] = t
    ns["unshared"] = _unshared
    ns["prefs"] = getattr(self.program, "references", no_references)
    n_in = len(self.graph.inputs)
    for i in range(len(caps)):
        owner = self._capture_grad_owner[i]
        shape, dtype = self._capture_types[i]
        ns[f"S{i}"], ns[f"D{i}"] = shape, dtype
        ns[f"L{i}"] = self._capture_strides[i] if owner is None else ANY_LAYOUT
        if owner is not None:
            lines.append(f"    g = c{owner}._grad")
            if guarded:
                lines += ["    if g is None:", "        return MISS"]
            lines.append(f"    d{i} = g._data")
        else:
            lines.append(f"    d{i} = c{i}._data")
        if guarded:
            lines += [f"    if d{i} is not seen[{i}]:",
                      "        co[0] = None",
                      "        astale[0] = True",
                      f"        if d{i}.__class__ is not ndarray or d{i}.shape != S{i} "
                      f"or d{i}.dtype != D{i} or layout_key(d{i}) != L{i}:",
                      "            return MISS",
                      f"        seen[{i}] = d{i}"]
            rg = self._capture_requires_grad[i]
            if rg is not None:
                lines += [f"    if c{i}.requires_grad != {rg}:", "        return MISS"]
        if i in self._accumulated:
            # Held: d{i}, seen[{i}] (set above when guarded) and what the program
            # caches; the tensor, by self._captures if it is the traced one.
            seen = "1" if guarded else f"(seen[{i}] is d{i})"
            lines += [(f"    if not unshared(g, 1 + {seen} + prefs({n_in + i}, d{i}), "
                       f"g is self._captures[{i}]):"),
                      f"        d{i} = d{i}.copy()"]
    if guarded:
        lines += check_lines(self._call_guards, ns)
        if self._sources or self._epoch_guards:
            lines += ["    if EPOCH[0] != self._epoch:", "        return MISS"]
        if self.input_layouts:
            ns["layout_failure"] = self.layout_failure
            lines += ["    if layout_failure(leaves) is not None:", "        return MISS"]
        for k, guard in enumerate(self._items.guards):
            lines += guard.check_source(k, ns)
    lines.append("    values = [" + ", ".join(
        [f"leaves[{j}]._data" for j in range(n_in)] + [f"d{i}" for i in range(len(caps))])
        + "]")
    if guarded and self._alias is not None:
        lines += ["    if alias(values, astale[0]) is not None:", "        return MISS",
                  "    astale[0] = False"]
    if self._dest_targets:
        # Where the program may write a .grad straight into its array: not when that
        # array (or what it views) is also read as an argument or capture.
        if guarded:  # (the captures' owners are kept until one of their arrays changes)
            lines += ["    owners = co[0]",
                      "    if owners is None:",
                      f"        owners = co[0] = {{_owner(a) for a in values[{n_in}:]}}"]
        else:
            lines.append(f"    owners = {{_owner(a) for a in values[{n_in}:]}}")
        lines.append("    leaf_owners = (" + "".join(
            f"_owner(leaves[{j}]._data), " for j in range(n_in)) + ")")
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
        lines += program_call_lines(self, f"values, [{', '.join(names)}]", ns)
    else:
        lines += program_call_lines(self, "values", ns)
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
        elif guarded:  # created state, input grads: not on the fast path
            return None, None  # (see Function.__call__)
        elif kind == "created":
            ns[f"created{i}"] = self._created_targets[i]
            lines.append(f"    assign_data(created{i}, {r})")
        else:  # input_grad
            lines.append(f"    assign_grad(leaves[{i}], {r})")
    for j, (kind, i) in self._out_alias.items():
        if j in self._out_views:  # (a view of an argument or capture: made again)
            ns["derive"], ns[f"chain{j}"] = derive, self._out_views[j]
            base = f"leaves[{i}]" if kind == "input_view" else f"c{i}"
            lines.append(f"    outs[{j}] = derive({base}, *chain{j}, leaves)")
        else:
            lines.append(f"    outs[{j}] = " + {"input": f"leaves[{i}]", "capture": f"c{i}",
                         "grad": f"c{i}._grad", "input_grad": f"leaves[{i}]._grad",
                         "output": f"outs[{i}]"}[kind])
    if self._items.writes:
        ns["items_replay"] = self._items.replay
        lines.append("    items_replay()")
    if self.out_tree == LEAF:
        lines.append("    return outs[0]")
    else:
        lines.append("    return unflatten(out_tree, iter(outs))")
    source = "\n".join(lines) + "\n"
    kind = "call" if guarded else "run"
    exec(compile(source, f"<tracejit {kind} {self.name}>", "exec"), ns)
    return ns["call"], source

def program_call_lines(self, call_args: str, ns: dict) -> list:
    """The generated call's lines running the program: a value check that raises there
    (before the program changed any tensor) becomes ProgramRaised, with the random
    generator as it was before the call (see `call_program`)."""
    ns["ProgramRaised"], ns["raised_by_check"] = ProgramRaised, raised_by_check
    ns["step_error"] = step_error
    lines = []
    if self._rng_on_raise:
        ns["get_rng_state"], ns["set_rng_state"] = get_rng_state, set_rng_state
        lines.append("    rng = get_rng_state()")
    lines += ["    try:",
              f"        results = program({call_args})",
              "    except Exception as exc:",
              "        if not raised_by_check(exc):",
              "            raise step_error(exc)"]
    if self._rng_on_raise:
        lines.append("        set_rng_state(rng)")
    lines.append("        raise ProgramRaised(str(exc)) from exc")
    return lines


def raised_by_check(exc: BaseException) -> bool:
    """True when `exc` was raised by a registry op that checks values (`OpDef.raises`) or
    by a symbolic size check (tracer.symbolic.check_nonempty), seen from its traceback."""
    codes = _check_codes()
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code in codes:
            return True
        tb = tb.tb_next
    return False


_CODES: list = []


def _check_codes() -> frozenset:
    if not _CODES:
        codes = {check_nonempty.__code__}
        for op in OPS.values():
            # (an opmath row's impl is a wrapper shared by every such row: its own
            # implementation is the one that checks)
            impl = getattr(op.impl, "__wrapped__", op.impl)
            if op.raises and hasattr(impl, "__code__"):
                codes.add(impl.__code__)
        _CODES.append(frozenset(codes))
    return _CODES[0]


def no_references(slot, a) -> int:
    return 0


def assign_data(t: Tensor, value):
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
