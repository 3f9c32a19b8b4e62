"""Loss functions (PyTorch's torch.nn.functional names), written with registry primitives
so they trace, differentiate and fuse."""
from __future__ import annotations

from .. import functions as T
from ..errors import op_error
from ..ops import Dim
from .activations import _check_float, log_softmax

def _reduce(loss, reduction, op):
    if reduction == "mean":
        return T.mean(loss)
    if reduction == "sum":
        return T.sum(loss)
    if reduction == "none":
        return loss
    raise op_error(op, f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def nll_loss(logp, target, reduction: str = "mean"):
    if target.dtype.kind not in "iu":
        raise op_error("nll_loss", f"class-index targets must be integers, got {target.dtype}",
                       (logp, target), hint="pass labels as an int64 tensor (.long())",
                       exc=TypeError)
    if logp.ndim == 2 and target.ndim == 1 and target.shape[0] is not logp.shape[0] and (
            isinstance(logp.shape[0], Dim) or isinstance(target.shape[0], Dim)):
        d = logp.shape[0] if isinstance(logp.shape[0], Dim) else target.shape[0]
        d.unknown(f"nll_loss of input {tuple(logp.shape)} and target {tuple(target.shape)} "
                  f"(their batch sizes may differ at run time; name that dimension alike in "
                  f"both TensorSpecs, e.g. TensorSpec((\"batch\", C)) and "
                  f"TensorSpec((\"batch\",), eager.int64))")
    if logp.ndim != 2 or target.ndim != 1 or target.shape[0] != logp.shape[0]:
        raise op_error("nll_loss", "expected input (N, C) and target (N,)", (logp, target),
                       hint="flatten extra dimensions first")
    target = T.check_class_index(target, logp.shape[1], "nll_loss")
    if isinstance(logp.shape[0], Dim):
        # A symbolic batch has no arange(N) to gather rows with: pick each row's target
        # class through a one-hot mask over the classes instead (where, not a product, so a
        # -inf elsewhere in the row cannot turn the zeros into NaN).
        classes = T.reshape(T.arange(logp.shape[1]), (1, logp.shape[1]))
        mask = T.eq(classes, T.reshape(target, (target.shape[0], 1)))
        zero, one = T.const(0, logp.dtype), T.const(1, logp.dtype)
        picked = T.sum(T.where(mask, logp, zero), 1)
        # A label outside [0, C) raised above; were it to reach here, it matches no class
        # and that row's loss is NaN rather than a plausible 0.
        hit = T.gt(T.sum(T.where(mask, one, zero), 1), zero)
        picked = T.where(hit, picked, T.const(float("nan"), logp.dtype))
        return _reduce(T.neg(picked), reduction, "nll_loss")
    rows = T.arange(logp.shape[0])
    # logp[rows, target] as the gather op getitem would end in, without getitem's key
    # parsing and the identity permute it records first (both show in a training step).
    picked = T.gather(logp, (rows, target))
    return _reduce(T.neg(picked), reduction, "nll_loss")


def cross_entropy(input, target, reduction: str = "mean", label_smoothing: float = 0.0):
    """Cross-entropy of logits `input` (N, C) with class indices `target` (N,)."""
    _check_float(input, "cross_entropy")
    if target.dtype.kind == "f":
        if target.shape != input.shape:
            raise op_error("cross_entropy", "probability targets must have the input's shape; "
                           "class-index targets must be integers", (input, target),
                           hint="pass class indices as an int64 tensor (.long())",
                           exc=TypeError)
        if label_smoothing:  # PyTorch mixes the target with the uniform distribution
            classes = input.shape[1]
            target = T.add(T.mul(target, 1.0 - label_smoothing), label_smoothing / classes)
        loss = T.neg(T.sum(T.mul(log_softmax(input, 1), target), 1))
        return _reduce(loss, reduction, "cross_entropy")
    logp = log_softmax(input, dim=-1)
    if label_smoothing:
        nll = nll_loss(logp, target, reduction="none")
        smooth = T.neg(T.mean(logp, -1))
        loss = T.add(T.mul(nll, 1.0 - label_smoothing), T.mul(smooth, label_smoothing))
        return _reduce(loss, reduction, "cross_entropy")
    return nll_loss(logp, target, reduction)


def mse_loss(input, target, reduction: str = "mean"):
    # PyTorch rejects integer targets ("Found dtype Long but expected Float"); promoting them
    # silently would hide labels passed where regression targets belong.
    _check_float(input, "mse_loss")
    if target.dtype.kind != "f":
        raise op_error("mse_loss", f"target must be floating-point, got {target.dtype}",
                       (input, target), hint="cast the target with .float() (class labels "
                       "belong in cross_entropy)", exc=TypeError)
    if input.shape != target.shape:
        raise op_error("mse_loss", f"input shape {input.shape} and target shape "
                       f"{target.shape} differ (PyTorch would broadcast with a warning)",
                       (input, target), hint="reshape the target to the input's shape")
    d = T.sub(input, target)
    return _reduce(T.mul(d, d), reduction, "mse_loss")
