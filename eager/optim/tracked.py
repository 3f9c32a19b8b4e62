"""An optimizer's containers that count their changes: the parameter lists of its groups
(and the list of groups), its `state` and each parameter's state dict.

A compiled training step loops over the groups and reads the state tensors it saw while
tracing; a change made in place between calls (`group["params"].append(p)`,
`opt.state.clear()`, `opt.state[p]["momentum_buffer"] = None`) leaves those containers the
same objects. Each such change gives the optimizer a new token (`_groups_token`,
`_state_token`), whose identity a trace guards: one check per call, whatever the size.
Copied or pickled, they are plain lists and dicts.
"""
from __future__ import annotations

from collections import defaultdict


def _counting(base, name, changed):
    method = getattr(base, name)

    def counted(self, *args, **kwargs):
        out = method(self, *args, **kwargs)
        getattr(self.owner, changed)()
        return self if name in ("__iadd__", "__imul__", "__ior__") else out
    counted.__name__ = name
    return counted


class _ParamList(list):
    """A group's parameter list, or the optimizer's list of groups."""

    __slots__ = ("owner",)

    def __init__(self, owner, items=()):
        super().__init__(items)
        self.owner = owner

    def __reduce_ex__(self, protocol):
        return list, (list(self),)


class ParamState(dict):
    """`opt.state[p]`: one parameter's state (momentum buffer, moments, step)."""

    __slots__ = ("owner",)

    def __init__(self, owner, items=()):
        super().__init__(items)
        self.owner = owner

    def __reduce_ex__(self, protocol):
        return dict, (dict(self),)


class _State(defaultdict):
    """`opt.state`: a defaultdict as in PyTorch (opt.state[p] is {} for a parameter not
    stepped yet), of ParamState dicts."""

    __slots__ = ("owner",)

    def __init__(self, owner):
        super().__init__()
        self.owner = owner

    def __missing__(self, key):
        value = self[key] = ParamState(self.owner)
        return value

    def __reduce_ex__(self, protocol):
        return defaultdict, (dict,), None, None, ((k, dict(v)) for k, v in self.items())


_LIST_CHANGES = ("append", "extend", "insert", "remove", "pop", "clear", "sort", "reverse",
                 "__setitem__", "__delitem__", "__iadd__", "__imul__")
_DICT_CHANGES = ("__setitem__", "__delitem__", "clear", "pop", "popitem", "update",
                 "setdefault", "__ior__")
for _name in _LIST_CHANGES:
    setattr(_ParamList, _name, _counting(list, _name, "_groups_changed"))
for _name in _DICT_CHANGES:
    setattr(ParamState, _name, _counting(dict, _name, "_state_changed"))
    setattr(_State, _name, _counting(dict, _name, "_state_changed"))
