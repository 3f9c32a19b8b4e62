"""Convolution, pooling, padding and resampling modules (PyTorch's names, defaults,
parameter layouts and initialization, so a state dict maps one to one)."""
from __future__ import annotations

import math

import numpy as np

from ..dtypes import default_float

from .. import functions as T
from ..device import check_device
from . import conv as C
from . import init
from . import pooling as P
from . import resample as R
from .module import Module, Parameter


def _empty(*shape):
    return Parameter(T.Tensor._wrap(np.zeros(shape, default_float())))


class _ConvNd(Module):
    _nd = 2
    _transposed = False

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, padding_mode="zeros", device=None,
                 dtype=None, output_padding=0):
        super().__init__()
        name = type(self).__name__
        check_device(device, f"nn.{name}")
        nd = self._nd
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ValueError(f"{name}: in_channels ({in_channels}) and out_channels "
                             f"({out_channels}) must be divisible by groups ({groups})")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError(f"{name}: padding_mode must be 'zeros', 'reflect', 'replicate' "
                             f"or 'circular', got {padding_mode!r}")
        if self._transposed and padding_mode != "zeros":
            raise ValueError(f"{name}: only padding_mode='zeros' is supported")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = C.ntuple(kernel_size, nd, name, "kernel_size")
        self.stride = C.ntuple(stride, nd, name, "stride")
        self.dilation = C.ntuple(dilation, nd, name, "dilation")
        self.padding = padding if isinstance(padding, str) else C.ntuple(padding, nd, name,
                                                                          "padding")
        self.output_padding = C.ntuple(output_padding, nd, name, "output_padding")
        self.padding_mode = padding_mode
        if self._transposed:
            self.weight = _empty(in_channels, out_channels // groups, *self.kernel_size)
        else:
            self.weight = _empty(out_channels, in_channels // groups, *self.kernel_size)
        if bias:
            self.bias = _empty(out_channels)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()
        if dtype is not None:
            for p in self.parameters():
                p._data = p._data.astype(dtype)

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.weight.shape[1] * math.prod(self.kernel_size)
            bound = 1 / math.sqrt(fan_in) if fan_in else 0
            init.uniform_(self.bias, -bound, bound)

    def extra_repr(self):
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0,) * self._nd:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self._nd:
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


class _Conv(_ConvNd):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, padding_mode="zeros", device=None,
                 dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, device, dtype)

    def forward(self, x):
        padding = self.padding
        if self.padding_mode != "zeros":
            if isinstance(padding, str):
                padding = C._padding(type(self).__name__, padding, self.kernel_size,
                                     self.stride, self.dilation, self._nd)
            else:
                padding = tuple((p, p) for p in padding)
            amounts = tuple(a for lo_hi in reversed(padding) for a in lo_hi)
            x = R.pad(x, amounts, mode=self.padding_mode)
            padding = 0
        return C._convnd(f"conv{self._nd}d", self._nd, x, self.weight, self.bias,
                         self.stride, padding, self.dilation, self.groups)


class Conv1d(_Conv):
    _nd = 1


class Conv2d(_Conv):
    """2-d convolution; weight (out, in/groups, kh, kw) ~ kaiming_uniform(a=sqrt(5))."""
    _nd = 2


class Conv3d(_Conv):
    _nd = 3


class _ConvTranspose(_ConvNd):
    _transposed = True

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, device, dtype, output_padding)

    def forward(self, x, output_size=None):
        output_padding = self.output_padding if output_size is None else \
            self._output_padding(x, output_size)
        return C._conv_transposend(f"conv_transpose{self._nd}d", self._nd, x, self.weight,
                                   self.bias, self.stride, self.padding, output_padding,
                                   self.groups, self.dilation)

    def _output_padding(self, x, output_size):
        """The output_padding giving `output_size` (its last nd entries), as PyTorch's:
        a stride above 1 leaves stride choices of output size for one input size."""
        nd = self._nd
        size = [int(n) for n in output_size][-nd:]
        if len(size) != nd:
            raise ValueError(f"{type(self).__name__}: output_size must have {nd} or "
                             f"{nd + 2} elements, got {tuple(output_size)}")
        pads = []
        for d in range(nd):
            smallest = ((x.shape[x.ndim - nd + d] - 1) * self.stride[d] - 2 * self.padding[d]
                        + self.dilation[d] * (self.kernel_size[d] - 1) + 1)
            if not smallest <= size[d] < smallest + self.stride[d]:
                raise ValueError(f"{type(self).__name__}: requested an output size of "
                                 f"{tuple(size)}, but valid sizes along dimension {d} range "
                                 f"from {smallest} to {smallest + self.stride[d] - 1} (for "
                                 f"an input of {tuple(x.shape)})")
            pads.append(size[d] - smallest)
        return tuple(pads)


class ConvTranspose1d(_ConvTranspose):
    _nd = 1


class ConvTranspose2d(_ConvTranspose):
    """Transposed 2-d convolution; weight (in, out/groups, kh, kw)."""
    _nd = 2


class ConvTranspose3d(_ConvTranspose):
    _nd = 3


class _MaxPool(Module):
    _fn = None

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.return_indices, self.ceil_mode = dilation, return_indices, ceil_mode

    def forward(self, x):
        return type(self)._fn(x, self.kernel_size, self.stride, self.padding, self.dilation,
                              self.ceil_mode, self.return_indices)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride or self.kernel_size}, "
                f"padding={self.padding}, dilation={self.dilation}, "
                f"ceil_mode={self.ceil_mode}")


class MaxPool1d(_MaxPool):
    _fn = P.max_pool1d


class MaxPool2d(_MaxPool):
    _fn = P.max_pool2d


class MaxPool3d(_MaxPool):
    _fn = P.max_pool3d


class _AvgPool(Module):
    _nd = 2

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad
        self.divisor_override = divisor_override

    def forward(self, x):
        return P._avg_poolnd(f"avg_pool{self._nd}d", self._nd, x, self.kernel_size,
                             self.stride, self.padding, self.ceil_mode,
                             self.count_include_pad, self.divisor_override)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride or self.kernel_size}, "
                f"padding={self.padding}")


class AvgPool1d(_AvgPool):
    _nd = 1


class AvgPool2d(_AvgPool):
    _nd = 2


class AvgPool3d(_AvgPool):
    _nd = 3


class _Adaptive(Module):
    _fn = None

    def __init__(self, output_size, return_indices=False):
        super().__init__()
        self.output_size = output_size
        self.return_indices = return_indices

    def forward(self, x):
        if self.return_indices:
            return type(self)._fn(x, self.output_size, True)
        return type(self)._fn(x, self.output_size)

    def extra_repr(self):
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_Adaptive):
    _fn = P.adaptive_avg_pool1d


class AdaptiveAvgPool2d(_Adaptive):
    _fn = P.adaptive_avg_pool2d


class AdaptiveMaxPool1d(_Adaptive):
    _fn = P.adaptive_max_pool1d


class AdaptiveMaxPool2d(_Adaptive):
    _fn = P.adaptive_max_pool2d


class MaxUnpool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x, indices, output_size=None):
        return P.max_unpool2d(x, indices, self.kernel_size, self.stride, self.padding,
                              output_size)


class _Pad(Module):
    _mode = "constant"
    _nd = 2

    def __init__(self, padding, value=0.0):
        super().__init__()
        self.padding = C.ntuple(padding, 2 * self._nd, type(self).__name__, "padding")
        self.value = value

    def forward(self, x):
        if self._mode == "constant":
            return R.pad(x, self.padding, "constant", self.value)
        return R.pad(x, self.padding, self._mode)

    def extra_repr(self):
        return f"{self.padding}"


def _pad_class(name, mode, nd, constant=False):
    if constant:
        def __init__(self, padding, value):
            _Pad.__init__(self, padding, value)
    elif mode == "constant":
        def __init__(self, padding):
            _Pad.__init__(self, padding, 0.0)
    else:
        def __init__(self, padding):
            _Pad.__init__(self, padding)
    return type(name, (_Pad,), {"_mode": mode, "_nd": nd, "__init__": __init__,
                                "__module__": __name__})


ZeroPad1d = _pad_class("ZeroPad1d", "constant", 1)
ZeroPad2d = _pad_class("ZeroPad2d", "constant", 2)
ConstantPad1d = _pad_class("ConstantPad1d", "constant", 1, constant=True)
ConstantPad2d = _pad_class("ConstantPad2d", "constant", 2, constant=True)
ReflectionPad1d = _pad_class("ReflectionPad1d", "reflect", 1)
ReflectionPad2d = _pad_class("ReflectionPad2d", "reflect", 2)
ReplicationPad1d = _pad_class("ReplicationPad1d", "replicate", 1)
ReplicationPad2d = _pad_class("ReplicationPad2d", "replicate", 2)
CircularPad1d = _pad_class("CircularPad1d", "circular", 1)
CircularPad2d = _pad_class("CircularPad2d", "circular", 2)


class Upsample(Module):
    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None,
                 recompute_scale_factor=None):
        super().__init__()
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners = align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, x):
        return R.interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners,
                             self.recompute_scale_factor)

    def extra_repr(self):
        what = f"size={self.size}" if self.size is not None else \
            f"scale_factor={self.scale_factor}"
        return f"{what}, mode={self.mode!r}"


class Unfold(Module):
    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size, self.dilation, self.padding, self.stride = (kernel_size, dilation,
                                                                       padding, stride)

    def forward(self, x):
        return C.unfold(x, self.kernel_size, self.dilation, self.padding, self.stride)


class Fold(Module):
    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, x):
        return C.fold(x, self.output_size, self.kernel_size, self.dilation, self.padding,
                      self.stride)


__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
           "ConvTranspose3d", "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d",
           "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveMaxPool1d",
           "AdaptiveMaxPool2d", "MaxUnpool2d", "ZeroPad1d", "ZeroPad2d", "ConstantPad1d",
           "ConstantPad2d", "ReflectionPad1d", "ReflectionPad2d", "ReplicationPad1d",
           "ReplicationPad2d", "CircularPad1d", "CircularPad2d", "Upsample", "Unfold", "Fold"]
