"""Flattening nested arguments and results (tuples, lists, dicts) into tensor leaves."""
from __future__ import annotations

import dataclasses

import numpy as np

from eager.tensor import Tensor

LEAF = "T"


def value_key(value):
    """`value` made comparable as a cache key: floats by their bits (float.hex), so that
    0.0 and -0.0 key apart (x / 0.0 vs x / -0.0) and a NaN equals itself (no retrace at
    every call); tuples, lists and frozensets key element by element."""
    if isinstance(value, (float, np.floating)):
        return (type(value), float(value).hex())
    if isinstance(value, (complex, np.complexfloating)):
        return (type(value), value.real.hex(), value.imag.hex())
    if isinstance(value, (tuple, list)):
        return (type(value), tuple(value_key(v) for v in value))
    if isinstance(value, frozenset):
        return (type(value), frozenset(value_key(v) for v in value))
    return value


class Static:
    """A non-tensor value carried in a tree definition; compared by value (or identity)."""

    __slots__ = ("value", "key")

    def __init__(self, value, by_identity=False):
        self.value = value
        self.key = ("id", id(value)) if by_identity else ("v", type(value), value_key(value))

    def __eq__(self, other):
        return isinstance(other, Static) and self.key == other.key

    def __hash__(self):
        return hash(self.key)

    def __repr__(self):
        return f"Static({self.value!r})"


def bind_arguments(signature, args: tuple, kwargs: dict):
    """(args, kwargs) of one call bound to `signature` (an inspect.Signature, or None): an
    argument given by name that could be given by position goes by position, and a
    parameter left out takes its default when that is a plain value (a number, str, None,
    a tuple of them), so that `f(x, True)`, `f(x, flag=True)` and `f(flag=True, x=x)` key
    one trace, and `f(x)` the one of `f(x, False)`. A call the signature refuses comes
    back as it is (calling the function raises eager's TypeError)."""
    if signature is None:
        return args, kwargs
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return args, kwargs
    arguments = bound.arguments
    for name, param in signature.parameters.items():
        if name not in arguments and param.default is not param.empty \
                and param.kind not in (param.VAR_POSITIONAL, param.VAR_KEYWORD) \
                and _plain_default(param.default):
            arguments[name] = param.default
    return bound.args, bound.kwargs


def _plain_default(value) -> bool:
    # (a list or tensor default is read by the trace as a capture, and guarded: not keyed)
    if value.__class__ is tuple:
        return all(_plain_default(v) for v in value)
    return value is None or value.__class__ in (bool, int, float, str, complex)


def flatten(obj, leaves: list, path: str, names: list, static_ok=None):
    """Append tensor leaves of `obj` to `leaves`; return the hashable tree definition."""
    if isinstance(obj, Tensor):
        leaves.append(obj)
        names.append(path)
        return LEAF
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return ("tuple", tuple(flatten(x, leaves, f"{path}[{i}]", names, static_ok)
                               for i, x in enumerate(obj)))
    if isinstance(obj, tuple):  # namedtuple
        return ("namedtuple", type(obj), tuple(
            flatten(x, leaves, f"{path}.{f}", names, static_ok)
            for f, x in zip(obj._fields, obj)))
    if isinstance(obj, list):
        return ("list", tuple(flatten(x, leaves, f"{path}[{i}]", names, static_ok)
                              for i, x in enumerate(obj)))
    if isinstance(obj, dict):
        keys = tuple(obj.keys())
        return ("dict", keys, tuple(flatten(obj[k], leaves, f"{path}[{k!r}]", names, static_ok)
                                    for k in keys))
    try:
        hash(obj)
    except TypeError:
        fields = dataclass_fields(obj)
        if fields is not None:  # (an unhashable dataclass: a container of its fields)
            return ("dataclass", type(obj), fields, tuple(
                flatten(getattr(obj, f), leaves, f"{path}.{f}", names, static_ok)
                for f in fields))
        raise TypeError(
            f"argument {path} is an unhashable {type(obj).__name__}; @function keys its cache "
            f"on non-tensor arguments, so they must be hashable. Pass it as a tensor, make it "
            f"hashable (e.g. a tuple), or list it in static_argnames/static_argnums to key it "
            f"by identity") from None
    return Static(obj)


def dataclass_fields(obj):
    """The field names of a dataclass instance that holds nothing else (so a new one made
    from its fields is the same value), else None."""
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        return None
    fields = tuple(f.name for f in dataclasses.fields(obj))
    if hasattr(obj, "__dict__") and set(vars(obj)) != set(fields):
        return None  # (attributes __post_init__ set: not rebuilt from the fields)
    return fields


def _make_dataclass(cls, fields, values):
    # (not through __init__: __post_init__ ran when the caller made it, and a frozen one
    # takes its fields this way too)
    obj = object.__new__(cls)
    for f, v in zip(fields, values):
        object.__setattr__(obj, f, v)
    return obj


def unflatten(tree, leaves_iter):
    if tree == LEAF:
        return next(leaves_iter)
    if isinstance(tree, Static):
        return tree.value
    kind = tree[0]
    if kind == "tuple":
        return tuple(unflatten(t, leaves_iter) for t in tree[1])
    if kind == "namedtuple":
        return tree[1](*(unflatten(t, leaves_iter) for t in tree[2]))
    if kind == "list":
        return [unflatten(t, leaves_iter) for t in tree[1]]
    if kind == "dict":
        return {k: unflatten(t, leaves_iter) for k, t in zip(tree[1], tree[2])}
    if kind == "dataclass":
        return _make_dataclass(tree[1], tree[2], [unflatten(t, leaves_iter) for t in tree[3]])
    raise AssertionError(tree)


def argument_containers(out, args, kwargs) -> tuple:
    """Where result `out` holds a list or dict that is (by identity) one of the call's
    arguments or inside one, as ((path in out), (path in the arguments)) pairs: eagerly
    `return xs` gives the caller's own list back, so the compiled call must too
    (`put_argument_containers`). Paths step through tuples, lists, dicts (keys) and
    dataclass fields (names)."""
    where: dict = {}

    def index(obj, path, depth=0):
        if depth > 8:
            return
        if isinstance(obj, (list, dict)):
            where.setdefault(id(obj), path)
        for step, child in _children(obj):
            index(child, path + (step,), depth + 1)

    for i, a in enumerate(args):
        index(a, (i,))
    for k, a in kwargs.items():
        index(a, (k,))
    found = []

    def walk(obj, path, depth=0):
        if isinstance(obj, (list, dict)) and id(obj) in where:
            found.append((path, where[id(obj)]))
            return
        if depth <= 8:
            for step, child in _children(obj):
                walk(child, path + (step,), depth + 1)

    if where:
        walk(out, ())
    return tuple(found)


def _children(obj):
    if isinstance(obj, (tuple, list)):
        return enumerate(obj)
    if isinstance(obj, dict):
        return obj.items()
    fields = dataclass_fields(obj) if not isinstance(obj, Tensor) else None
    return [(f, getattr(obj, f)) for f in fields] if fields else ()


def put_argument_containers(out, found, args, kwargs):
    """`out` with the caller's own containers where `argument_containers` found them."""
    for out_path, arg_path in found:
        head = arg_path[0]
        value = args[head] if isinstance(head, int) else kwargs[head]
        for step in arg_path[1:]:
            value = _child(value, step)
        out = _replace(out, out_path, value)
    return out


def _child(obj, step):
    return obj[step] if isinstance(obj, (tuple, list, dict)) else getattr(obj, step)


def _replace(obj, path, value):
    if not path:
        return value
    step, rest = path[0], path[1:]
    new = _replace(_child(obj, step), rest, value)
    if isinstance(obj, (list, dict)):  # (made fresh by unflatten: set in place)
        obj[step] = new
        return obj
    if isinstance(obj, tuple):
        items = list(obj)
        items[step] = new
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    object.__setattr__(obj, step, new)  # (a dataclass unflatten made)
    return obj
