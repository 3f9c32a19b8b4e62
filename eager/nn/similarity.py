"""F.cosine_similarity, F.pairwise_distance and F.pixel_shuffle / pixel_unshuffle (with
their layers): composites of registry ops, so they trace, differentiate and fuse.

>>> F.cosine_similarity(eager.tensor([[1.0, 0.0]]), eager.tensor([[1.0, 1.0]])).tolist()
[0.7071067690849304]
"""
from __future__ import annotations

from .. import functions as T
from ..dtypes import is_floating
from ..shape_rules import broadcast_shapes
from ..errors import op_error
from .module import Module


def _float_pair(op, x1, x2):
    x1, x2 = T.as_tensor(x1, op), T.as_tensor(x2, op)
    if not (is_floating(x1.dtype) and is_floating(x2.dtype)):
        raise op_error(op, f"expects floating tensors, got {x1.dtype} and {x2.dtype}",
                       (x1, x2), hint="cast with .float()", exc=TypeError)
    try:
        shape = broadcast_shapes(op, x1.shape, x2.shape)
    except Exception:  # noqa: BLE001
        raise op_error(op, f"shapes {x1.shape} and {x2.shape} do not broadcast", (x1, x2),
                       exc=RuntimeError) from None
    return T.broadcast_to(x1, shape), T.broadcast_to(x2, shape)


def cosine_similarity(x1, x2, dim: int = 1, eps: float = 1e-8):
    """Cosine of the angle between x1 and x2 along `dim` (broadcast first), as PyTorch's:
    each is divided by its norm, clamped below at `eps`."""
    x1, x2 = _float_pair("cosine_similarity", x1, x2)
    if not -max(x1.ndim, 1) <= dim < max(x1.ndim, 1):
        raise op_error("cosine_similarity", f"dim {dim} is out of range for {x1.ndim}-d "
                       f"inputs", (x1, x2), exc=IndexError)
    n1 = T.sqrt(T.clamp_min(T.sum(x1 * x1, dim=dim, keepdim=True), eps * eps))
    n2 = T.sqrt(T.clamp_min(T.sum(x2 * x2, dim=dim, keepdim=True), eps * eps))
    return T.sum((x1 / n1) * (x2 / n2), dim=dim)


def pairwise_distance(x1, x2, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
    """The p-norm of x1 - x2 + eps over the last dimension, as PyTorch's."""
    x1, x2 = _float_pair("pairwise_distance", x1, x2)
    if x1.ndim == 0:
        raise op_error("pairwise_distance", "needs inputs with at least 1 dimension",
                       (x1, x2), exc=RuntimeError)
    return T.norm(x1 - x2 + eps, p, dim=-1, keepdim=keepdim)


def _check_4d(op, x, factor):
    x = T.as_tensor(x, op)
    if x.ndim < 3:
        raise op_error(op, f"expects an input with at least 3 dimensions (..., C, H, W), "
                       f"got {x.shape}", (x,), exc=RuntimeError)
    if not isinstance(factor, int) or factor <= 0:
        raise op_error(op, f"the factor must be a positive int, got {factor!r}", (x,),
                       exc=ValueError)
    return x


def pixel_shuffle(x, upscale_factor: int):
    """(*, C * r * r, H, W) -> (*, C, H * r, W * r): channels become space (sub-pixel
    convolution's upsampling)."""
    r = upscale_factor
    x = _check_4d("pixel_shuffle", x, r)
    *batch, c, h, w = x.shape
    if c % (r * r):
        raise op_error("pixel_shuffle", f"the channel count {c} is not divisible by "
                       f"upscale_factor ** 2 = {r * r}", (x,), exc=RuntimeError)
    nb = len(batch)
    y = T.reshape(x, (*batch, c // (r * r), r, r, h, w))
    perm = list(range(nb + 1)) + [nb + 3, nb + 1, nb + 4, nb + 2]
    return T.reshape(T.permute(y, perm), (*batch, c // (r * r), h * r, w * r))


def pixel_unshuffle(x, downscale_factor: int):
    """(*, C, H * r, W * r) -> (*, C * r * r, H, W): the inverse of pixel_shuffle."""
    r = downscale_factor
    x = _check_4d("pixel_unshuffle", x, r)
    *batch, c, h, w = x.shape
    if h % r or w % r:
        raise op_error("pixel_unshuffle", f"the spatial size {h}x{w} is not divisible by "
                       f"downscale_factor {r}", (x,), exc=RuntimeError)
    nb = len(batch)
    y = T.reshape(x, (*batch, c, h // r, r, w // r, r))
    perm = list(range(nb + 1)) + [nb + 2, nb + 4, nb + 1, nb + 3]
    return T.reshape(T.permute(y, perm), (*batch, c * r * r, h // r, w // r))


class PixelShuffle(Module):
    def __init__(self, upscale_factor: int):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, x):
        return pixel_shuffle(x, self.upscale_factor)


class PixelUnshuffle(Module):
    def __init__(self, downscale_factor: int):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, x):
        return pixel_unshuffle(x, self.downscale_factor)


class CosineSimilarity(Module):
    def __init__(self, dim: int = 1, eps: float = 1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        return cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1, x2):
        return pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)
