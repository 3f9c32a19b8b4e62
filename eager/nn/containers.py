"""Containers and shape modules with PyTorch's semantics: ModuleDict, ParameterList,
ParameterDict, Flatten, Unflatten.

>>> import eager
>>> heads = ModuleDict({"a": eager.nn.Linear(2, 2), "b": eager.nn.Linear(2, 1)})
>>> [name for name, _ in heads.named_parameters()]
['a.weight', 'a.bias', 'b.weight', 'b.bias']
"""
from __future__ import annotations

from collections.abc import Mapping

from .. import functions as T
from ..protocol import STRUCTURE_EPOCH
from .module import Module, Parameter


def _pairs(values, what):
    """(key, value) pairs from a mapping or an iterable of pairs, keeping their order."""
    if isinstance(values, (Mapping, ModuleDict, ParameterDict)):
        return list(values.items())
    pairs = []
    for i, item in enumerate(values):
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise ValueError(f"{what}.update: element #{i} should be a (key, value) pair, "
                             f"got {type(item).__name__}")
        pairs.append((item[0], item[1]))
    return pairs


class ModuleDict(Module):
    """Sub-modules by name, in insertion order; registered, so their parameters are found."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        if not isinstance(module, Module) and module is not None:
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]
        STRUCTURE_EPOCH[0] += 1

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key) -> bool:
        return key in self._modules

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()

    def clear(self) -> None:
        self._modules.clear()
        STRUCTURE_EPOCH[0] += 1

    def pop(self, key: str) -> Module:
        value = self._modules.pop(key)
        STRUCTURE_EPOCH[0] += 1
        return value

    def update(self, modules) -> None:
        for key, module in _pairs(modules, "ModuleDict"):
            self[key] = module

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleDict has no forward(); call one of its modules, "
                                  "e.g. self.layers['name'](x)")


class ParameterList(Module):
    """Parameters in a list; each is registered under its index ("0", "1", ...)."""

    def __init__(self, values=None):
        super().__init__()
        if values is not None:
            self.extend(values)

    def _key(self, idx: int) -> str:
        n = len(self._parameters)
        if not -n <= idx < n:
            raise IndexError(f"index {idx} is out of range")
        return str(idx % n)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return ParameterList(list(self._parameters.values())[idx])
        return self._parameters[self._key(idx)]

    def __setitem__(self, idx: int, param) -> None:
        self.register_parameter(self._key(idx), _as_parameter(param))

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters.values())

    def __iadd__(self, parameters):
        return self.extend(parameters)

    def append(self, value) -> ParameterList:
        self.register_parameter(str(len(self)), _as_parameter(value))
        return self

    def extend(self, values) -> ParameterList:
        for v in values:
            self.append(v)
        return self

    def extra_repr(self) -> str:
        return "\n".join(f"({k}): Parameter containing: [eager.{p.dtype} of size "
                         f"{'x'.join(map(str, p.shape))}]"
                         for k, p in self._parameters.items() if p is not None)

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ParameterList has no forward(); index it")


class ParameterDict(Module):
    """Parameters by name, in insertion order."""

    def __init__(self, parameters=None):
        super().__init__()
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, key: str):
        return self._parameters[key]

    def __setitem__(self, key: str, value) -> None:
        self.register_parameter(key, _as_parameter(value))

    def __delitem__(self, key: str) -> None:
        del self._parameters[key]
        STRUCTURE_EPOCH[0] += 1

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters)

    def __contains__(self, key) -> bool:
        return key in self._parameters

    def keys(self):
        return self._parameters.keys()

    def items(self):
        return self._parameters.items()

    def values(self):
        return self._parameters.values()

    def get(self, key, default=None):
        return self._parameters.get(key, default)

    def pop(self, key):
        value = self._parameters.pop(key)
        STRUCTURE_EPOCH[0] += 1
        return value

    def clear(self) -> None:
        self._parameters.clear()
        STRUCTURE_EPOCH[0] += 1

    def update(self, parameters) -> None:
        for key, value in _pairs(parameters, "ParameterDict"):
            self[key] = value

    def extra_repr(self) -> str:
        return "\n".join(f"({k}): Parameter containing: [eager.{p.dtype} of size "
                         f"{'x'.join(map(str, p.shape))}]"
                         for k, p in self._parameters.items() if p is not None)

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ParameterDict has no forward(); index it")


def _as_parameter(value):
    # PyTorch wraps a plain tensor given to a ParameterList/Dict in a Parameter.
    if value is None or isinstance(value, Parameter):
        return value
    if isinstance(value, T.Tensor):
        return Parameter(value)
    raise TypeError(f"cannot assign '{type(value).__name__}' as a parameter "
                    f"(eager.nn.Parameter, Tensor or None expected)")


class Flatten(Module):
    """Flattens dims start_dim..end_dim (default: all but the batch dim)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, x):
        return T.flatten(x, self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Expands dim `dim` into `unflattened_size` (one entry may be -1)."""

    def __init__(self, dim: int, unflattened_size):
        super().__init__()
        if isinstance(unflattened_size, (list, tuple)) and all(
                isinstance(s, int) for s in unflattened_size):
            self.dim = dim
            self.unflattened_size = tuple(unflattened_size)
        else:
            raise TypeError("unflattened_size must be a tuple of ints, got "
                            f"{unflattened_size!r}")

    def forward(self, x):
        dim = T._norm_dim(self.dim, x.ndim, "unflatten")
        shape = tuple(x.shape)
        return T.reshape(x, shape[:dim] + self.unflattened_size + shape[dim + 1:])

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
