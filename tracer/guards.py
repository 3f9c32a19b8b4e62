"""Guards as data: what a trace assumed about the Python world, one record per assumption.

A trace bakes in the Python values it read: a global `SCALE = 2.0`, `model.training`, which
tensor `params["w"]` was. Each such read becomes a `Guard`; a trace's guards are one list,
from which both the fast check (generated straight-line source, see `check_lines`) and the
"why did it trace again" explanation (`first_failure`) are made, never written twice.

>>> g = Guard("value", "G['SCALE']", "{0}['SCALE']", (globals(),), 2.0)
>>> g.failure()        # None while G['SCALE'] == 2.0
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Python values guarded by value (equal and of the same type); anything else by identity.
SCALAR_TYPES = (int, float, bool, str, complex, type(None), np.generic)


def is_scalar(value, depth: int = 0) -> bool:
    """A value a trace can bake in and a guard can compare: scalars, str, None, tuples."""
    if isinstance(value, SCALAR_TYPES):
        return True
    if value.__class__ is tuple and depth < 3:
        return all(is_scalar(v, depth + 1) for v in value)
    return False


def same_value(a, b) -> bool:
    """Equal and of the same types (2 and 2.0 trace to different constants)."""
    if a is b:
        return True
    if a.__class__ is not b.__class__:
        return False
    if a.__class__ is tuple:
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - an exotic __eq__
        return False


def same_contents(current, expected) -> bool:
    """`current` is an array bit for bit equal to `expected` (NaN payloads and -0.0 too:
    any difference could change what Python does with the value)."""
    return (current.__class__ is np.ndarray and current.shape == expected.shape
            and current.dtype == expected.dtype and current.tobytes() == expected.tobytes())


@dataclass(frozen=True, eq=False)
class Guard:
    """One assumption of a trace.

    kind: "value" (equal, same type), "identity" (the same object), "is_none" (whether the
    value is None: a `.grad`'s presence), "contents" (a tensor's array, bit for bit: a
    captured tensor whose value Python read, `if flag.item():`).
    source: where the value lives, as the user would write it (`G['SCALE']`,
    `model.0.training`, `params['w']`).
    template: a Python expression fetching the current value, `{0}`, `{1}` standing for
    `objects` (held strongly: they are what the trace read through).
    expected: the value (or object) the trace saw.
    epoch: checked only when eager.protocol.STRUCTURE_EPOCH has moved (module attributes:
    Module.__setattr__ and train()/eval() bump it).
    """

    kind: str
    source: str
    template: str
    objects: tuple
    expected: object
    epoch: bool = False

    def fetch(self):
        names = {f"o{i}": o for i, o in enumerate(self.objects)}
        return eval(self.template.format(*names), names)  # (our own template)

    def failure(self) -> str | None:
        """None if the guard holds, else what changed, in words."""
        try:
            current = self.fetch()
        except Exception as exc:  # noqa: BLE001 - a deleted global, a missing key
            return f"{self.source} is gone ({type(exc).__name__}: {exc})"
        if self.kind == "value":
            if not same_value(current, self.expected):
                if self.expected.__class__ is dict and current.__class__ is dict:
                    return f"{self.source} changed at {_changed_keys(self.expected, current)}"
                return f"{self.source} == {self.expected!r} -> {current!r}"
        elif self.kind == "identity":
            if current is not self.expected:
                return f"{self.source} now names another object ({_short(current)})"
        elif self.kind == "is_none" and (current is None) != self.expected:
            return f"{self.source} is {'now set' if self.expected else 'now None'}"
        elif self.kind == "contents" and not same_contents(current, self.expected):
            return f"{self.source} changed"
        return None

    def __str__(self) -> str:
        if self.kind == "value" and self.expected.__class__ is dict:
            # (os.environ's contents: named by its size, its values may be secrets)
            what = f"holds the {len(self.expected)} entries it held"
        elif self.kind == "value":
            what = f"== {self.expected!r}"
        elif self.kind == "contents":
            e = self.expected
            what = (f"holds {e.reshape(-1)[:4].tolist()}{' ...' if e.size > 4 else ''} "
                    f"({e.dtype}{list(e.shape)})")
        elif self.kind == "identity":
            what = f"is {_short(self.expected)}"
        else:
            what = "is None" if self.expected else "is not None"
        when = "  (on structure change)" if self.epoch else ""
        return f"{self.kind:8s} {self.source} {what}{when}"


def _short(obj) -> str:
    from eager.tensor import Tensor

    if isinstance(obj, Tensor):
        from eager.errors import describe

        return f"<tensor {describe(obj)} at {id(obj):#x}>"
    return f"<{type(obj).__name__} at {id(obj):#x}>"


def _changed_keys(old: dict, new: dict) -> str:
    keys = [k for k in dict.fromkeys(list(old) + list(new)) if old.get(k) != new.get(k)]
    names = [k.decode(errors="replace") if isinstance(k, bytes) else str(k) for k in keys]
    return ", ".join(names[:3]) + (" ..." if len(names) > 3 else "")


def first_failure(guards) -> str | None:
    """The first failing guard of `guards`, explained; None if all hold."""
    for g in guards:
        why = g.failure()
        if why is not None:
            return why
    return None


def check_lines(guards, ns: dict, prefix: str = "g", indent: str = "    ",
                miss: str = "return MISS") -> list:
    """Straight-line source checking `guards`: `miss` runs on the first failure. The
    objects and expected values are bound in `ns` under names starting with `prefix`."""
    if not guards:
        return []
    lines = [f"{indent}try:"]
    inner = indent + "    "
    for k, g in enumerate(guards):
        names = []
        for j, o in enumerate(g.objects):
            name = f"{prefix}{k}_{j}"
            ns[name] = o
            names.append(name)
        expr = g.template.format(*names)
        exp = f"{prefix}{k}_e"
        ns[exp] = g.expected
        if g.kind == "identity":
            lines += [f"{inner}if {expr} is not {exp}:", f"{inner}    {miss}"]
        elif g.kind == "is_none":
            lines += [f"{inner}if ({expr} is None) is not {bool(g.expected)}:",
                      f"{inner}    {miss}"]
        elif g.kind == "contents":
            ns["same_contents"] = same_contents
            lines += [f"{inner}if not same_contents({expr}, {exp}):", f"{inner}    {miss}"]
        elif g.expected is None or g.expected is True or g.expected is False:
            lines += [f"{inner}if {expr} is not {exp}:", f"{inner}    {miss}"]
        elif g.expected.__class__ in (int, float, str):
            # (same class first: 2 == 2.0 but they trace to different constants)
            lines += [f"{inner}v = {expr}",
                      f"{inner}if v.__class__ is not {exp}.__class__ or v != {exp}:",
                      f"{inner}    {miss}"]
        else:
            ns["same_value"] = same_value
            lines += [f"{inner}if not same_value({expr}, {exp}):", f"{inner}    {miss}"]
    lines += [f"{indent}except Exception:", f"{indent}    {miss}"]
    return lines


def make_check(guards, name: str = "guards"):
    """A function of no arguments: True if every guard holds (the slow-path check of the
    per-call guards, generated as the fast path is)."""
    ns: dict = {}
    lines = ["def check():"] + check_lines(guards, ns, miss="return False") + ["    return True"]
    exec(compile("\n".join(lines) + "\n", f"<tracejit guards {name}>", "exec"), ns)
    return ns["check"]
