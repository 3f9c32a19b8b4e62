"""Why a tracer.function traced again: which argument keeps changing between its traces,
and what differs between a new call's key and the cached ones (the `recompiles` log)."""
from __future__ import annotations

from eager.nn.module import Module

from .pytree import Static


def changing_args(keys, names, params=()) -> str:
    """The names of the arguments whose part of the cache keys `keys` differs from the
    first key's: a tensor's by its leaf name (`names`), a non-tensor argument's by its
    parameter name (`params`: the function's, in order), else "a static (non-tensor)
    argument"."""
    if len(keys) < 2:
        return ""
    first = keys[0]
    changed = []
    for other in keys[1:]:
        for i, (a, b) in enumerate(zip(first[1], other[1])):
            if a != b and i < len(names):
                changed.append(names[i])
        if first[0] != other[0]:
            changed += _static_changes(first[0], other[0], params)
    return ", ".join(dict.fromkeys(changed))


def _static_changes(old, new, params) -> list:
    """Which arguments differ between two argument trees ((positional trees), ((name,
    tree), ...)): the tensor-free ones (a Python int changing every call)."""
    (pos_a, kw_a), (pos_b, kw_b) = old, new
    out = []
    if len(pos_a) == len(pos_b):
        out += [params[i] if i < len(params) else f"argument {i}"
                for i, (a, b) in enumerate(zip(pos_a, pos_b)) if a != b]
    if len(kw_a) == len(kw_b):
        out += [ka for (ka, a), (kb, b) in zip(kw_a, kw_b) if ka == kb and a != b]
    return out or ["a static (non-tensor) argument"]


def why_traced_again(cache, key, names) -> str:
    """What differs between `key` and the nearest cached key (or the guard that failed)."""
    best_diff = None
    for other in cache:
        diff = _describe_diff(other, key, names)
        if best_diff is None or len(diff) < len(best_diff):
            best_diff = diff
    if not best_diff:
        best_diff = ["captured state changed (a guard failed)"]
        for c in cache.get(key, []):
            why = c.guard_failure()
            if why:
                best_diff = [why]
    return "; ".join(best_diff)


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
