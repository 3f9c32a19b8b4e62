"""Activation modules (PyTorch's names, constructor arguments and defaults); each calls its
function in eager.nn.functional."""
from __future__ import annotations

from . import functional as F
from .module import Module


class _Inplace(Module):
    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class LeakyReLU(_Inplace):
    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__(inplace)
        self.negative_slope = negative_slope

    def forward(self, x):
        return F.leaky_relu(x, self.negative_slope, self.inplace)

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace
                                                           else "")


class ELU(_Inplace):
    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__(inplace)
        self.alpha = alpha

    def forward(self, x):
        return F.elu(x, self.alpha, self.inplace)

    def extra_repr(self):
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class CELU(ELU):
    def forward(self, x):
        return F.celu(x, self.alpha, self.inplace)


class SELU(_Inplace):
    def forward(self, x):
        return F.selu(x, self.inplace)


class Hardtanh(_Inplace):
    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
        super().__init__(inplace)
        self.min_val = min_val
        self.max_val = max_val

    def forward(self, x):
        return F.hardtanh(x, self.min_val, self.max_val, self.inplace)

    def extra_repr(self):
        return f"min_val={self.min_val}, max_val={self.max_val}" + (
            ", inplace=True" if self.inplace else "")


class ReLU6(Hardtanh):
    def __init__(self, inplace: bool = False):
        super().__init__(0.0, 6.0, inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class Hardswish(_Inplace):
    def forward(self, x):
        return F.hardswish(x, self.inplace)


class Hardsigmoid(_Inplace):
    def forward(self, x):
        return F.hardsigmoid(x, self.inplace)


class Mish(_Inplace):
    def forward(self, x):
        return F.mish(x, self.inplace)


class Softplus(Module):
    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, x):
        return F.softplus(x, self.beta, self.threshold)

    def extra_repr(self):
        return f"beta={self.beta}, threshold={self.threshold}"


class Softsign(Module):
    def forward(self, x):
        return F.softsign(x)


class LogSigmoid(Module):
    def forward(self, x):
        return F.logsigmoid(x)


class GLU(Module):
    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return F.glu(x, self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class Softmin(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return F.softmin(x, self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class LogSoftmax(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        dim = self.dim
        if dim is None:
            dim = F._implicit_softmax_dim("log_softmax", x.ndim)
        return F.log_softmax(x, dim)

    def extra_repr(self):
        return f"dim={self.dim}"
