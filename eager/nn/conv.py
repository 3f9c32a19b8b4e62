"""Convolutions (1-d, 2-d, 3-d, transposed) and F.unfold / F.fold, PyTorch's signatures.

Lowering, picked per shape (`direct_conv`, a rule on the static geometry: eager and every
trace pick alike, nothing is timed at run time):

* 2-d, stride 1, groups 1, at most DIRECT_MAX_IN_CHANNELS input channels and
  DIRECT_MAX_TAPS kernel positions: the direct rows (eager/ops_conv_direct.py), whose
  compiled kernels (codegen/conv_kernels.py) read the input where it lies, all K*K taps
  of a channel pair per vectorized pass over a row, with no im2col columns;
* everything else: `im2col` (eager/ops_conv.py) lays the input's windows out as columns
  (C, *k, N, *out); a convolution is then ONE matrix product (BLAS) of the weight
  (O, C*K) with the columns (C*K, N*L) (per group: a batched product over groups), and a
  view back to (N, O, *out).  A transposed convolution is the transpose of that: the
  product W^T @ x, then `col2im`.
The bias add fuses into the consumer's elementwise kernel either way.

Measured (compiled forward + backward of relu(conv2d) with a sum-of-squares loss, one
thread, thread CPU medians of 200 interleaved calls, a busy shared machine):
W8's conv 1 (64x1x28x28, 6 5x5, pad 2; no input gradient) direct 0.67 ms, im2col + BLAS
1.27; W8's conv 2 (64x6x14x14, 16 5x5) 1.97 against 2.49; 32x8x16x16 by 16 3x3 pad 1
1.27 against 1.85; 32x16x14x14 by 32 3x3 pad 1 2.34 against 3.02.  Per pass on W8's
conv 1 (kernel alone): forward 0.23 ms, weight gradient 0.21 (im2col + BLAS about 0.56
and 0.65).  Wider inputs than 16 channels were not measured: they keep im2col + BLAS,
whose products get faster per FLOP as C*K grows.  (An earlier direct loop nest that did
not vectorize lost at both W8 convs: 1.0 and 4.8 ms against 0.55 and 0.91 forward.)
On an AVX2 machine (Zen 3, codegen/conv_blocked.py's kernels, benchmarks/CONV_NOTES.md)
conv 2's products alone take 0.56 (forward), 0.72 (input gradient) and 1.11 ms (weight
gradient) of one thread before any column copy, against 0.8-1.05, 1.15-1.42 and
0.69-0.94 ms for the direct kernels: the weight gradient's kernel wins outright, the others
only once the columns (3.8 MB written, or scattered back) are counted, which was not
timed in the compiled step; conv 1's products (0.63 and 1.17 ms) lose to 0.46-0.58.

>>> import eager, eager.nn.functional as F
>>> F.conv2d(eager.ones(1, 1, 3, 3), eager.ones(1, 1, 2, 2)).shape
(1, 1, 2, 2)
"""
from __future__ import annotations

import math

from .. import functions as T
from ..errors import op_error
from ..ops_conv import col2im, im2col, window_count
from ..ops_conv_direct import conv_direct
from ..dtypes import is_floating


def ntuple(value, n: int, op: str, what: str) -> tuple:
    """An int or a sequence of n ints, as a tuple of n ints."""
    if isinstance(value, (tuple, list)):
        if len(value) != n:
            raise op_error(op, f"{what} must be an int or {n} ints, got {tuple(value)}")
        return tuple(int(v) for v in value)
    return (int(value),) * n


def _check_input(op, x, nd, what="input"):
    if x.ndim not in (nd + 1, nd + 2):
        dims = ("(C, L)", "(N, C, L)") if nd == 1 else (
            "(C, H, W)", "(N, C, H, W)") if nd == 2 else ("(C, D, H, W)", "(N, C, D, H, W)")
        raise op_error(op, f"expected a {nd + 1}-d (unbatched {dims[0]}) or {nd + 2}-d "
                       f"(batched {dims[1]}) {what}, got shape {tuple(x.shape)}", (x,),
                       hint=f"reshape the input to {dims[1]}")
    if not is_floating(x.dtype):
        raise op_error(op, f"needs a floating-point input, got {x.dtype}", (x,),
                       hint="cast with .float() first", exc=TypeError)
    return x.ndim == nd + 1


def _padding(op, padding, kernel, stride, dilation, nd) -> tuple:
    """(before, after) per spatial dim for an int, a tuple, "valid" or "same"."""
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * nd
        if padding == "same":
            if any(s != 1 for s in stride):
                raise op_error(op, f"padding='same' is not supported for strided "
                               f"convolutions (stride {stride})",
                               hint="give the padding as ints, or use stride=1")
            pads = []
            for k, d in zip(kernel, dilation):
                total = d * (k - 1)
                pads.append((total // 2, total - total // 2))  # the extra one after, as PyTorch
            return tuple(pads)
        raise op_error(op, f"padding must be an int, a tuple, 'valid' or 'same', got "
                       f"{padding!r}")
    pads = ntuple(padding, nd, op, "padding")
    if min(pads) < 0:
        raise op_error(op, f"padding {pads} must be non-negative", hint="crop with slicing")
    return tuple((p, p) for p in pads)


def _same_dtype(op, x, w):
    if w.dtype != x.dtype:
        raise op_error(op, f"input ({x.dtype}) and weight ({w.dtype}) must have the same dtype",
                       (x, w), hint="cast one of them with .to(dtype)", exc=TypeError)


def _prologue(op, nd, x, weight, groups, layout):
    """The checks both directions share: the input (batched or not: unbatched gets a batch
    axis), the weight's rank (`layout` names its two channel axes) and dtype, and the
    groups; returns (x, unbatched, groups, kernel size)."""
    unbatched = _check_input(op, x, nd)
    if unbatched:
        x = T.unsqueeze(x, 0)
    if weight.ndim != nd + 2:
        raise op_error(op, f"expected a {nd + 2}-d weight ({layout}, *kernel), got shape "
                       f"{tuple(weight.shape)}", (x, weight))
    _same_dtype(op, x, weight)
    return x, unbatched, int(groups), tuple(weight.shape[2:])


# The direct rows (eager/ops_conv_direct.py) take 2-d, stride-1, ungrouped convolutions
# with at most this many input channels and at most DIRECT_MAX_TAPS kernel positions.
DIRECT_MAX_IN_CHANNELS = 16
DIRECT_MAX_TAPS = 49


def direct_conv(nd: int, in_channels, kernel: tuple, stride: tuple, groups: int) -> bool:
    """Whether a convolution takes the direct rows rather than im2col + BLAS: a rule on
    its static geometry (never timed at run time), so eager and every trace choose alike."""
    return nd == 2 and groups == 1 and tuple(stride) == (1, 1) \
        and isinstance(in_channels, int) and in_channels <= DIRECT_MAX_IN_CHANNELS \
        and math.prod(kernel) <= DIRECT_MAX_TAPS


def _convnd(op, nd, x, weight, bias, stride, padding, dilation, groups):
    x, unbatched, groups, kernel = _prologue(op, nd, x, weight, groups,
                                             "out_channels, in_channels/groups")
    out_ch, in_per_group = weight.shape[0], weight.shape[1]
    if groups < 1 or out_ch % groups:
        raise op_error(op, f"groups={groups} must be positive and divide out_channels "
                       f"({out_ch})", (x, weight))
    if x.shape[1] != in_per_group * groups:
        raise op_error(op, f"Given groups={groups}, weight of size {list(weight.shape)}, "
                       f"expected input{list(x.shape)} to have {in_per_group * groups} "
                       f"channels, but got {x.shape[1]} channels instead", (x, weight),
                       hint="the weight's second dimension is in_channels / groups")
    stride = ntuple(stride, nd, op, "stride")
    dilation = ntuple(dilation, nd, op, "dilation")
    pad = _padding(op, padding, kernel, stride, dilation, nd)
    if direct_conv(nd, in_per_group, kernel, stride, groups):
        y = conv_direct(x, weight, stride, dilation, pad)
        if bias is not None:
            y = T.add(y, T.reshape(bias, (out_ch,) + (1,) * nd))
        return T.squeeze(y, 0) if unbatched else y
    cols = im2col(x, kernel, stride, dilation, pad)            # (C, *k, N, *out)
    n, out = x.shape[0], tuple(cols.shape[2 + nd:])
    ck = in_per_group * math.prod(kernel)
    lanes = n * math.prod(out)
    if groups == 1:
        y = T.matmul(T.reshape(weight, (out_ch, ck)), T.reshape(cols, (ck, lanes)))
    else:
        w = T.reshape(weight, (groups, out_ch // groups, ck))
        y = T.matmul(w, T.reshape(cols, (groups, ck, lanes)))
    y = T.reshape(y, (out_ch, n) + out)
    y = T.permute(y, (1, 0) + tuple(range(2, nd + 2)))
    # PyTorch's convolution returns a C-ordered tensor of its own, so `.view(n, -1)` of it
    # works and so does an in-place op after it (nn.ReLU(inplace=True)); the permuted
    # product is neither: copy it to C order, and end on an elementwise op (a fresh array
    # in that order, where the copy's reshape back is a view)
    y = T.contiguous(T.squeeze(y, 0) if unbatched else y)
    if bias is not None:
        return T.add(y, T.reshape(bias, (out_ch,) + (1,) * nd))
    return T.mul(y, T.const(1, y.dtype))


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-d cross-correlation of (N, C, L) with a weight (O, C/groups, k)."""
    return _convnd("conv1d", 1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-d cross-correlation of (N, C, H, W) with a weight (O, C/groups, kh, kw)."""
    return _convnd("conv2d", 2, input, weight, bias, stride, padding, dilation, groups)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """3-d cross-correlation of (N, C, D, H, W) with a weight (O, C/groups, kd, kh, kw)."""
    return _convnd("conv3d", 3, input, weight, bias, stride, padding, dilation, groups)


def _conv_transposend(op, nd, x, weight, bias, stride, padding, output_padding, groups,
                      dilation):
    x, unbatched, groups, kernel = _prologue(op, nd, x, weight, groups,
                                             "in_channels, out_channels/groups")
    in_ch, out_per_group = weight.shape[0], weight.shape[1]
    if groups < 1 or in_ch % groups:
        raise op_error(op, f"groups={groups} must be positive and divide in_channels "
                       f"({in_ch})", (x, weight))
    if x.shape[1] != in_ch:
        raise op_error(op, f"Given transposed=1, weight of size {list(weight.shape)}, "
                       f"expected input{list(x.shape)} to have {in_ch} channels, but got "
                       f"{x.shape[1]} channels instead", (x, weight),
                       hint="the weight's first dimension is in_channels")
    stride = ntuple(stride, nd, op, "stride")
    dilation = ntuple(dilation, nd, op, "dilation")
    pads = ntuple(padding, nd, op, "padding")
    extra = ntuple(output_padding, nd, op, "output_padding")
    for e, s, d in zip(extra, stride, dilation):
        if not 0 <= e < max(s, d):  # (PyTorch's rule, per dim: e < stride or e < dilation)
            raise op_error(op, f"output padding must be smaller than either stride or "
                           f"dilation, got output_padding {extra}, stride {stride}, dilation "
                           f"{dilation}", (x,), hint="output_padding only picks among the "
                           "output sizes a stride > 1 (or dilation > 1) makes ambiguous",
                           exc=RuntimeError)
    n, spatial = x.shape[0], tuple(x.shape[2:])
    out = tuple((i - 1) * s - 2 * p + d * (k - 1) + e + 1
                for i, s, p, d, k, e in zip(spatial, stride, pads, dilation, kernel, extra))
    if min(out) < 1:
        raise op_error(op, f"the output size {out} is not positive", (x, weight),
                       hint="use less padding")
    lanes = n * math.prod(spatial)
    kk = math.prod(kernel)
    xs = T.reshape(T.permute(x, (1, 0) + tuple(range(2, nd + 2))), (groups, in_ch // groups,
                                                                      lanes))
    w = T.reshape(weight, (groups, in_ch // groups, out_per_group * kk))
    cols = T.matmul(T.transpose(w, 1, 2), xs)       # (G, O/G * K, N * L)
    cols = T.reshape(cols, (out_per_group * groups,) + kernel + (n,) + spatial)
    # The windows reach `out` less output_padding; below the stride the floor in col2im's
    # window count drops the rest, at or past it (output_padding < dilation) it would count
    # windows that are not there: place them on the reached size, then zeros beyond.
    reached = tuple(o - e for o, e in zip(out, extra))
    full = tuple(window_count(o, k, s, d, p, p) == i for o, k, s, d, p, i in
                 zip(out, kernel, stride, dilation, pads, spatial))
    y = col2im(cols, tuple(o if ok else r for o, r, ok in zip(out, reached, full)), kernel,
               stride, dilation, tuple((p, p) for p in pads))
    for axis, ok in enumerate(full):
        if not ok:
            zeros_shape = tuple(y.shape[:2 + axis]) + (extra[axis],) + tuple(y.shape[3 + axis:])
            y = T.cat([y, T.expand(T.const(0, y.dtype), zeros_shape)], 2 + axis)
    if bias is not None:
        y = T.add(y, T.reshape(bias, (out_per_group * groups,) + (1,) * nd))
    return T.squeeze(y, 0) if unbatched else y


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    """The transpose (gradient) of conv1d; weight (C_in, C_out/groups, k)."""
    return _conv_transposend("conv_transpose1d", 1, input, weight, bias, stride, padding,
                             output_padding, groups, dilation)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    """The transpose (gradient) of conv2d; weight (C_in, C_out/groups, kh, kw)."""
    return _conv_transposend("conv_transpose2d", 2, input, weight, bias, stride, padding,
                             output_padding, groups, dilation)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    """The transpose (gradient) of conv3d; weight (C_in, C_out/groups, kd, kh, kw)."""
    return _conv_transposend("conv_transpose3d", 3, input, weight, bias, stride, padding,
                             output_padding, groups, dilation)


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """Sliding 2-d blocks of (N, C, H, W) as (N, C*kh*kw, L), PyTorch's F.unfold."""
    if input.ndim != 4:
        raise op_error("unfold", f"expected a 4-d input (N, C, H, W), got shape "
                       f"{tuple(input.shape)}", (input,), hint="add a batch dimension")
    kernel = ntuple(kernel_size, 2, "unfold", "kernel_size")
    pads = ntuple(padding, 2, "unfold", "padding")
    cols = im2col(input, kernel, ntuple(stride, 2, "unfold", "stride"),
                  ntuple(dilation, 2, "unfold", "dilation"), tuple((p, p) for p in pads))
    c, n = input.shape[1], input.shape[0]
    out = tuple(cols.shape[4:])
    cols = T.permute(cols, (3, 0, 1, 2, 4, 5))       # (N, C, kh, kw, oh, ow)
    return T.reshape(cols, (n, c * math.prod(kernel), math.prod(out)))


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """Sums sliding blocks (N, C*kh*kw, L) back into (N, C, *output_size): F.fold."""
    if input.ndim != 3:
        raise op_error("fold", f"expected a 3-d input (N, C*kh*kw, L), got shape "
                       f"{tuple(input.shape)}", (input,))
    kernel = ntuple(kernel_size, 2, "fold", "kernel_size")
    size = ntuple(output_size, 2, "fold", "output_size")
    stride = ntuple(stride, 2, "fold", "stride")
    dilation = ntuple(dilation, 2, "fold", "dilation")
    pads = tuple((p, p) for p in ntuple(padding, 2, "fold", "padding"))
    kk = math.prod(kernel)
    n, ck, lanes = input.shape
    out = tuple((s + 2 * p[0] - d * (k - 1) - 1) // st + 1
                for s, p, d, k, st in zip(size, pads, dilation, kernel, stride))
    if ck % kk or lanes != math.prod(out):
        raise op_error("fold", f"expected input.size(1) divisible by {kk} (kernel "
                       f"{kernel}) and input.size(2) == {math.prod(out)} blocks for output "
                       f"{size}, got shape {tuple(input.shape)}", (input,))
    cols = T.reshape(input, (n, ck // kk) + kernel + out)
    cols = T.permute(cols, (1, 2, 3, 0, 4, 5))       # (C, kh, kw, N, oh, ow)
    return col2im(cols, size, kernel, stride, dilation, pads)
