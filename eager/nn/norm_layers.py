"""Normalization and channel-dropout modules (PyTorch's names, defaults, parameters and
buffers, so a state dict maps one to one: weight, bias, running_mean, running_var,
num_batches_tracked)."""
from __future__ import annotations

from .. import dtypes
from .. import functions as T
from ..autograd import no_grad
from ..device import check_device
from ..errors import op_error
from . import normalization as N
from .module import Module, Parameter

__all__ = [
    "AlphaDropout",
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "Dropout1d",
    "Dropout2d",
    "Dropout3d",
    "GroupNorm",
    "InstanceNorm1d",
    "InstanceNorm2d",
    "InstanceNorm3d",
    "RMSNorm",
]


class _NormBase(Module):
    _dims = (3,)  # accepted input ndims
    _name = "BatchNorm"

    def __init__(self, num_features: int, eps: float = 1e-5, momentum=0.1,
                 affine: bool = True, track_running_stats: bool = True, device=None,
                 dtype=None):
        super().__init__()
        check_device(device, f"nn.{type(self).__name__}")
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        if affine:
            self.weight = Parameter(T.ones(num_features))
            self.bias = Parameter(T.zeros(num_features))
        else:
            self.weight = None
            self.bias = None
        if track_running_stats:
            self.register_buffer("running_mean", T.zeros(num_features))
            self.register_buffer("running_var", T.ones(num_features))
            self.register_buffer("num_batches_tracked", T.tensor(0, dtype=dtypes.int64))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        if dtype is not None:
            self.to(dtype)

    def reset_running_stats(self):
        if self.track_running_stats:
            with no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1.0)
                self.num_batches_tracked.zero_()

    def reset_parameters(self):
        self.reset_running_stats()
        if self.affine:
            with no_grad():
                self.weight.fill_(1.0)
                self.bias.zero_()

    def _check_input(self, x):
        if x.ndim not in self._dims:
            want = " or ".join(f"{d}D" for d in self._dims)
            raise op_error(f"nn.{type(self).__name__}", f"expected {want} input, got "
                           f"{x.ndim}D input of shape {x.shape}", (x,), exc=ValueError)

    def _momentum(self):
        """The running-average factor, counting the batch first as PyTorch does; with
        momentum None the cumulative average 1 / num_batches_tracked, as a tensor so a
        compiled step computes it from the live counter."""
        if not (self.training and self.track_running_stats):
            return 0.0 if self.momentum is None else self.momentum
        with no_grad():
            self.num_batches_tracked.add_(1)
        if self.momentum is None:
            return T.div(1.0, T.cast(self.num_batches_tracked, dtypes.float64))
        return self.momentum

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class _BatchNorm(_NormBase):
    def forward(self, x):
        self._check_input(x)
        momentum = self._momentum()
        use_batch = self.training or self.running_mean is None
        track = not self.training or self.track_running_stats
        return N.batch_norm(x, self.running_mean if track else None,
                            self.running_var if track else None, self.weight, self.bias,
                            use_batch, momentum, self.eps)


class BatchNorm1d(_BatchNorm):
    """Over (N, C) or (N, C, L)."""
    _dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    _dims = (4,)


class BatchNorm3d(_BatchNorm):
    _dims = (5,)


class _InstanceNorm(_NormBase):
    def __init__(self, num_features: int, eps: float = 1e-5, momentum=0.1,
                 affine: bool = False, track_running_stats: bool = False, device=None,
                 dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype)

    def forward(self, x):
        self._check_input(x)
        unbatched = x.ndim == self._dims[0]
        if unbatched:
            x = T.unsqueeze(x, 0)
        c = x.shape[1]
        if self.affine and c != self.num_features:
            raise op_error(f"nn.{type(self).__name__}", f"expected input's size at dim 1 to "
                           f"match num_features ({self.num_features}), got {c}", (x,),
                           exc=ValueError)
        use_input_stats = self.training or not self.track_running_stats
        momentum = self._momentum() if use_input_stats else 0.0
        out = N.instance_norm(x, self.running_mean, self.running_var, self.weight,
                              self.bias, use_input_stats, momentum, self.eps)
        return T.squeeze(out, 0) if unbatched else out


class InstanceNorm1d(_InstanceNorm):
    """Over (N, C, L) or unbatched (C, L)."""
    _dims = (2, 3)


class InstanceNorm2d(_InstanceNorm):
    _dims = (3, 4)


class InstanceNorm3d(_InstanceNorm):
    _dims = (4, 5)


class GroupNorm(Module):
    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True, device=None, dtype=None):
        super().__init__()
        check_device(device, "nn.GroupNorm")
        if num_groups < 1 or num_channels % num_groups:
            raise ValueError(f"nn.GroupNorm: num_channels ({num_channels}) must be divisible "
                             f"by num_groups ({num_groups})")
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps
        self.affine = affine
        if affine:
            self.weight = Parameter(T.ones(num_channels))
            self.bias = Parameter(T.zeros(num_channels))
        else:
            self.weight = None
            self.bias = None
        if dtype is not None:
            self.to(dtype)

    def forward(self, x):
        return N.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class RMSNorm(Module):
    def __init__(self, normalized_shape, eps=None, elementwise_affine: bool = True,
                 device=None, dtype=None):
        super().__init__()
        check_device(device, "nn.RMSNorm")
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.weight = Parameter(T.ones(self.normalized_shape)) if elementwise_affine else None
        if dtype is not None:
            self.to(dtype)

    def forward(self, x):
        return N.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class _DropoutNd(Module):
    _fn = None

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    def forward(self, x):
        return type(self)._fn(x, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class Dropout1d(_DropoutNd):
    _fn = staticmethod(N.dropout1d)


class Dropout2d(_DropoutNd):
    _fn = staticmethod(N.dropout2d)


class Dropout3d(_DropoutNd):
    _fn = staticmethod(N.dropout3d)


class AlphaDropout(_DropoutNd):
    _fn = staticmethod(N.alpha_dropout)

