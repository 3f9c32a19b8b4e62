"""Layers and losses (PyTorch's names, defaults and initialization)."""
from __future__ import annotations

import math
import operator
from collections import OrderedDict

import numpy as np

from ..dtypes import default_float

from .. import functions as T
from . import functional as F
from . import init
from ..device import check_device
from .module import Module, Parameter


def _empty(*shape):
    return Parameter(T.Tensor._wrap(np.zeros(shape, default_float())))


class Linear(Module):
    """y = x @ W.T + b; W and b ~ U(-1/sqrt(in), 1/sqrt(in)) as in PyTorch."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None,
                 dtype=None):
        super().__init__()
        check_device(device, "nn.Linear")
        self.in_features = in_features
        self.out_features = out_features
        self.weight = _empty(out_features, in_features)
        if bias:
            self.bias = _empty(out_features)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()
        if dtype is not None:
            for p in self.parameters():
                p._data = p._data.astype(dtype)

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Sequential(Module):
    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for name, m in modules[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, i):
        mods = list(self._modules.values())
        if isinstance(i, slice):
            return Sequential(*mods[i])
        return mods[i]

    def _key_at(self, i):
        # (PyTorch's _get_item_by_idx: an int index, from the end when negative)
        size = len(self._modules)
        i = operator.index(i)
        if not -size <= i < size:
            raise IndexError(f"index {i} is out of range")
        return list(self._modules)[i % size]

    def __setitem__(self, i, module):
        """`seq[i] = module`: replaces the i-th module under its name, as in PyTorch."""
        setattr(self, self._key_at(i), module)

    def __delitem__(self, i):
        """`del seq[i]` or `del seq[a:b]`; the rest are numbered again from 0 as in
        PyTorch (string keys of an OrderedDict-made Sequential become numbers too)."""
        keys = list(self._modules)[i] if isinstance(i, slice) else [self._key_at(i)]
        for key in keys:
            delattr(self, key)
        rest = list(self._modules.values())
        self._modules.clear()
        for k, m in enumerate(rest):
            self.add_module(str(k), m)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, m):
        self.add_module(str(len(self._modules)), m)
        return self


class ModuleList(Module):
    def __init__(self, modules=None):
        super().__init__()
        for m in modules or ():
            self.append(m)

    def append(self, m):
        self.add_module(str(len(self._modules)), m)
        return self

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self

    def __iadd__(self, modules):
        return self.extend(modules)

    def insert(self, index: int, m) -> None:
        mods = list(self._modules.values())
        mods.insert(index, m)
        self._renumber(mods)

    def _renumber(self, mods):
        # As PyTorch: names stay "0".."n-1", so state_dict keys follow positions.
        self._modules.clear()
        for i, m in enumerate(mods):
            self.add_module(str(i), m)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return ModuleList(list(self._modules.values())[i])
        return list(self._modules.values())[i]

    def __setitem__(self, i: int, m) -> None:
        key = list(self._modules)[i]  # (IndexError as a list gives it)
        self.add_module(key, m)

    def __delitem__(self, i) -> None:
        mods = list(self._modules.values())
        del mods[i]
        self._renumber(mods)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())


class Identity(Module):
    def forward(self, x):
        return x


class ReLU(Module):
    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x):
        return F.relu(x, self.inplace)


class GELU(Module):
    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(x, approximate=self.approximate)

    def extra_repr(self):
        return f"approximate='{self.approximate}'"


class Tanh(Module):
    def forward(self, x):
        return F.tanh(x)


class Sigmoid(Module):
    def forward(self, x):
        return F.sigmoid(x)


class SiLU(Module):
    def forward(self, x):
        return F.silu(x)


class Softmax(Module):
    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return F.softmax(x, self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, device=None, dtype=None):
        super().__init__()
        check_device(device, "nn.LayerNorm")
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(T.ones(self.normalized_shape))
            self.bias = Parameter(T.zeros(self.normalized_shape)) if bias else None
        else:
            self.weight = None
            self.bias = None
        if dtype is not None:
            self.to(dtype)

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}")


class Embedding(Module):
    """A lookup table; the row at `padding_idx` starts at zero and gets no gradient."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx=None,
                 max_norm=None, norm_type: float = 2.0, device=None, dtype=None):
        super().__init__()
        check_device(device, "nn.Embedding")
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.max_norm = max_norm
        self.norm_type = norm_type
        self.padding_idx = F.embedding_padding_idx(padding_idx, num_embeddings)
        self.weight = Parameter(T.randn(num_embeddings, embedding_dim))
        if self.padding_idx is not None:
            self.weight._data[self.padding_idx] = 0
        if dtype is not None:
            self.to(dtype)

    @classmethod
    def from_pretrained(cls, embeddings, freeze: bool = True, padding_idx=None,
                        max_norm=None, norm_type: float = 2.0):
        """An Embedding on `embeddings` (shared, rows kept as given, the padding row too);
        `freeze` makes the weight not require grad."""
        if embeddings.ndim != 2:
            raise AssertionError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = embeddings.shape
        embedding = cls(rows, cols, padding_idx=padding_idx, max_norm=max_norm,
                        norm_type=norm_type)
        embedding.weight = Parameter(embeddings.detach(), requires_grad=not freeze)
        return embedding

    def forward(self, idx):
        if self.max_norm is None:
            return F.embedding(idx, self.weight, self.padding_idx)
        return F.embedding(idx, self.weight, self.padding_idx, self.max_norm, self.norm_type)

    def extra_repr(self):
        pad = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        norm = "" if self.max_norm is None else f", max_norm={self.max_norm}"
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}{norm}"


class Dropout(Module):
    def __init__(self, p: float = 0.5):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}, inplace=False"
