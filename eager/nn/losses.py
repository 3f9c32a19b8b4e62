"""Loss functions (PyTorch's torch.nn.functional names), written with registry primitives
so they trace, differentiate and fuse."""
from __future__ import annotations

from .. import dispatch
from .. import functions as T
from ..errors import op_error, user_location
from ..ops import Dim
from .activations import _check_float, _softplus, log_softmax
from ..dtypes import is_floating


def _reduce(loss, reduction, op):
    if reduction == "mean":
        return T.mean(loss)
    if reduction == "sum":
        return T.sum(loss)
    if reduction == "none":
        return loss
    raise op_error(op, f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _legacy_reduction(size_average, reduce, reduction):
    """PyTorch's deprecated size_average/reduce pair, as the reduction it stands for."""
    if size_average is None and reduce is None:
        return reduction
    if reduce is False:
        return "none"
    return "sum" if size_average is False else "mean"


def _class_rows(x, target, op):
    """(x as rows (M, C) with the classes last, target as (M,), the target's shape) for
    inputs (C,), (N, C) or (N, C, d1, ...) with targets (), (N,) or (N, d1, ...)."""
    if target.dtype.kind not in "iu":
        raise op_error(op, f"class-index targets must be integers, got {target.dtype}",
                       (x, target), hint="pass labels as an int64 tensor (.long())",
                       exc=TypeError)
    if x.ndim == 2 and target.ndim == 1 and target.shape[0] is not x.shape[0] and (
            isinstance(x.shape[0], Dim) or isinstance(target.shape[0], Dim)):
        d = x.shape[0] if isinstance(x.shape[0], Dim) else target.shape[0]
        d.unknown(f"{op} of input {tuple(x.shape)} and target {tuple(target.shape)} "
                  f"(their batch sizes may differ at run time; name that dimension alike in "
                  f"both TensorSpecs, e.g. TensorSpec((\"batch\", C)) and "
                  f"TensorSpec((\"batch\",), eager.int64))")
    if x.ndim == 0 or target.ndim != x.ndim - 1 or (
            x.ndim >= 2 and tuple(target.shape) != (x.shape[0],) + tuple(x.shape[2:])):
        raise op_error(op, f"expected input (C,), (N, C) or (N, C, d1, ...) and target (), "
                       f"(N,) or (N, d1, ...), got input {tuple(x.shape)} and target "
                       f"{tuple(target.shape)}", (x, target),
                       hint="the target has the input's shape without the class dimension 1")
    classes = x.shape[0] if x.ndim == 1 else x.shape[1]
    if x.ndim == 1:
        return T.reshape(x, (1, classes)), T.reshape(target, (1,)), ()
    if x.ndim == 2:
        return x, target, tuple(target.shape)
    rows = T.permute(x, (0,) + tuple(range(2, x.ndim)) + (1,))
    rows = T.reshape(rows, (-1, classes))
    return rows, T.reshape(target, (-1,)), tuple(target.shape)


def _class_weight(weight, classes, like, op):
    if weight is None:
        return None
    if weight.ndim != 1 or weight.shape[0] != classes:
        raise op_error(op, f"weight should be defined for all {classes} classes, got shape "
                       f"{tuple(weight.shape)}", (like, weight), hint=f"pass a ({classes},) "
                       f"tensor")
    if weight.dtype != like.dtype:
        raise op_error(op, f"weight dtype {weight.dtype} differs from the input's "
                       f"{like.dtype}", (like, weight), hint="cast the weight", exc=TypeError)
    return weight


def _nll_rows(logp, target, shape, weight, ignore_index, reduction, op, smoothing=0.0):
    """The loss of rows logp (M, C) at class indices target (M,), as PyTorch: row n costs
    -weight[t] * logp[n, t] (mixed with the uniform-target loss when smoothing), 0 where t
    is ignore_index; 'mean' divides by the summed weights of the rows not ignored."""
    if reduction not in ("mean", "sum", "none"):
        raise op_error(op, f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    classes = logp.shape[1]
    weight = _class_weight(weight, classes, logp, op)
    kept = T.ne(target, ignore_index)
    # Ignored rows pick class 0 (their loss is masked to 0), so only real labels are
    # checked: a label outside [0, C) raises IndexError when the program runs.
    target = T.check_class_index(T.where(kept, target, 0), classes, op)
    zero = T.const(0, logp.dtype)
    if isinstance(logp.shape[0], Dim):
        # A symbolic batch has no arange(N) to gather rows with: pick each row's target
        # class through a one-hot mask over the classes instead (where, not a product, so a
        # -inf elsewhere in the row cannot turn the zeros into NaN).
        mask = T.eq(T.reshape(T.arange(classes), (1, classes)),
                    T.reshape(target, (target.shape[0], 1)))
        picked = T.sum(T.where(mask, logp, zero), 1)
        # A label outside [0, C) raised above; were it to reach here, it matches no class
        # and that row's loss is NaN rather than a plausible 0.
        hit = T.gt(T.sum(T.where(mask, T.const(1, logp.dtype), zero), 1), zero)
        picked = T.where(hit, picked, T.const(float("nan"), logp.dtype))
        w = None if weight is None else T.sum(
            T.where(mask, T.reshape(weight, (1, classes)), zero), 1)
    else:
        # logp[rows, target] as the gather op getitem would end in, without getitem's key
        # parsing and the identity permute it records first (both show in a training step).
        picked = T.gather(logp, (T.arange(logp.shape[0]), target))
        w = None if weight is None else T.gather(weight, (target,))
    loss = T.neg(picked if w is None else T.mul(picked, w))
    if smoothing:
        if weight is None:
            smooth = T.neg(T.mean(logp, -1))
        else:
            smooth = T.div(T.neg(T.sum(T.mul(logp, weight), -1)), classes)
        loss = T.add(T.mul(loss, 1.0 - smoothing), T.mul(smooth, smoothing))
    loss = T.where(kept, loss, zero)
    if reduction == "none":
        return T.reshape(loss, shape)
    total = T.sum(loss)
    if reduction == "sum":
        return total
    counted = T.cast(kept, logp.dtype) if w is None else T.where(kept, w, zero)
    return T.div(total, T.sum(counted))


def nll_loss(input, target, weight=None, size_average=None, ignore_index: int = -100,
             reduce=None, reduction: str = "mean"):
    """The negative log-likelihood of log-probabilities `input` ((C,), (N, C) or
    (N, C, d1, ...)) at class indices `target` ((), (N,) or (N, d1, ...)), as PyTorch.

    >>> F.nll_loss(eager.tensor([[-0.5, -1.0]]), eager.tensor([1]))
    tensor(1.)
    """
    reduction = _legacy_reduction(size_average, reduce, reduction)
    rows, t, shape = _class_rows(input, target, "nll_loss")
    return _nll_rows(rows, t, shape, weight, ignore_index, reduction, "nll_loss")


def cross_entropy(input, target, weight=None, size_average=None, ignore_index: int = -100,
                  reduce=None, reduction: str = "mean", label_smoothing: float = 0.0):
    """Cross-entropy of logits `input` ((C,), (N, C) or (N, C, d1, ...)) with class indices
    (`target` without the class dimension) or class probabilities (`target` of the input's
    shape), as PyTorch, with its weight, ignore_index and label_smoothing."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_float(input, "cross_entropy")
    if not 0.0 <= label_smoothing <= 1.0:
        raise op_error("cross_entropy", f"label_smoothing must be in [0, 1], got "
                       f"{label_smoothing}", (input,))
    if is_floating(target.dtype):
        if target.shape != input.shape:
            raise op_error("cross_entropy", "probability targets must have the input's shape; "
                           "class-index targets must be integers", (input, target),
                           hint="pass class indices as an int64 tensor (.long())",
                           exc=TypeError)
        class_dim = 0 if input.ndim == 1 else 1
        classes = input.shape[class_dim]
        if label_smoothing:  # PyTorch mixes the target with the uniform distribution
            target = T.add(T.mul(target, 1.0 - label_smoothing), label_smoothing / classes)
        logp = log_softmax(input, class_dim)
        weight = _class_weight(weight, classes, input, "cross_entropy")
        if weight is not None:
            trailing = (1,) * (input.ndim - class_dim - 1)
            logp = T.mul(logp, T.reshape(weight, (classes,) + trailing))
        loss = T.neg(T.sum(T.mul(logp, target), class_dim))
        return _reduce(loss, reduction, "cross_entropy")
    rows, t, shape = _class_rows(input, target, "cross_entropy")
    return _nll_rows(log_softmax(rows, -1), t, shape, weight, ignore_index, reduction,
                     "cross_entropy", label_smoothing)


def mse_loss(input, target, reduction: str = "mean"):
    # PyTorch rejects integer targets ("Found dtype Long but expected Float"); promoting them
    # silently would hide labels passed where regression targets belong.
    _check_float(input, "mse_loss")
    if not is_floating(target.dtype):
        raise op_error("mse_loss", f"target must be floating-point, got {target.dtype}",
                       (input, target), hint="cast the target with .float() (class labels "
                       "belong in cross_entropy)", exc=TypeError)
    if input.shape != target.shape:
        raise op_error("mse_loss", f"input shape {input.shape} and target shape "
                       f"{target.shape} differ (PyTorch would broadcast with a warning)",
                       (input, target), hint="reshape the target to the input's shape")
    d = T.sub(input, target)
    return _reduce(T.mul(d, d), reduction, "mse_loss")


# --------------------------------------------------------------------------------------
# elementwise losses (issue 16 item 6)

def _pointwise_operands(input, target, op):
    _check_float(input, op)
    if not is_floating(target.dtype):
        raise op_error(op, f"target must be floating-point, got {target.dtype}",
                       (input, target), hint="cast the target with .float()", exc=TypeError)
    if input.shape != target.shape:
        raise op_error(op, f"input shape {tuple(input.shape)} and target shape "
                       f"{tuple(target.shape)} differ (PyTorch would broadcast with a warning "
                       f"or refuse)", (input, target),
                       hint="reshape the target to the input's shape")


def l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):
    """|input - target|, reduced."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _pointwise_operands(input, target, "l1_loss")
    return _reduce(T.abs(T.sub(input, target)), reduction, "l1_loss")


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean",
                   beta: float = 1.0):
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (d = input - target)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _pointwise_operands(input, target, "smooth_l1_loss")
    if beta < 0:
        raise op_error("smooth_l1_loss", f"beta must not be negative, got {beta}", (input,))
    d = T.sub(input, target)
    a = T.abs(d)
    if beta == 0:  # PyTorch's l1_loss (the quadratic branch would divide by 0)
        return _reduce(a, reduction, "smooth_l1_loss")
    quad = T.div(T.mul(T.mul(d, d), 0.5), beta)
    return _reduce(T.where(T.lt(a, beta), quad, T.sub(a, 0.5 * beta)), reduction,
                   "smooth_l1_loss")


def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0):
    """0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta) (d = input - target)."""
    _pointwise_operands(input, target, "huber_loss")
    if delta <= 0:
        raise op_error("huber_loss", f"delta must be positive, got {delta}", (input,))
    d = T.sub(input, target)
    a = T.abs(d)
    quad = T.mul(T.mul(d, d), 0.5)
    return _reduce(T.where(T.lt(a, delta), quad, T.mul(T.sub(a, 0.5 * delta), delta)),
                   reduction, "huber_loss")


def kl_div(input, target, size_average=None, reduce=None, reduction: str = "mean",
           log_target: bool = False):
    """Pointwise target * (log(target) - input) for log-probabilities `input` (0 where
    target is 0); with log_target, exp(target) * (target - input). 'batchmean' divides the
    sum by the batch size (PyTorch's advice; 'mean' divides by the element count)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _pointwise_operands(input, target, "kl_div")
    if log_target:
        loss = T.mul(T.exp(target), T.sub(target, input))
    else:
        # xlogy(target, target): 0 at target 0 (log taken of a safe 1 there, so the
        # gradient is finite), NaN for a negative or NaN target
        zero = T.eq(target, 0.0)
        tlogt = T.where(zero, 0.0, T.mul(target, T.log(T.where(zero, 1.0, target))))
        loss = T.sub(tlogt, T.mul(target, input))
    if reduction == "batchmean":  # the sum over the batch size: the batch mean of row sums
        if input.ndim <= 1:  # (a symbolic batch size needs no value this way)
            return T.sum(loss) if input.ndim == 0 else T.mean(loss)
        return T.mean(T.sum(loss, tuple(range(1, input.ndim))))
    return _reduce(loss, reduction, "kl_div")


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction: str = "mean"):
    """-weight (target log(input) + (1 - target) log(1 - input)) for probabilities `input`,
    each log clamped at -100 as PyTorch does (so 0 and 1 give finite losses). An input or
    target outside [0, 1] (or NaN) raises PyTorch's RuntimeError, compiled too: the check
    is a sum fused into the loss's kernel and a test of that one number."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _pointwise_operands(input, target, "binary_cross_entropy")
    flags = T.add(_out_of_unit_range(input, "input"), _out_of_unit_range(target, "target"))
    log_p = T.clamp(T.log(input), min=-100.0)
    log_q = T.clamp(T.log1p(T.neg(input)), min=-100.0)
    loss = T.sub(T.mul(T.sub(target, 1.0), log_q), T.mul(target, log_p))
    if weight is not None:
        loss = T.mul(loss, weight)
    # (+ 0: the checks stay in the data flow of a compiled program, costing no rounding)
    return T.add(_reduce(loss, reduction, "binary_cross_entropy"), flags)


def _out_of_unit_range(x, name):
    """A 0-d zero of x's dtype, after checking (now when eager, when the program runs when
    traced) that every element of x is in [0, 1]: PyTorch's RuntimeError otherwise."""
    message = f"binary_cross_entropy: all elements of {name} should be between 0 and 1"
    x = T.stop_gradient(x)
    inside = T.bitwise_and(T.ge(x, 0.0), T.le(x, 1.0))  # (False for NaN)
    if not dispatch.tracing():
        if not inside.numpy().all():
            raise RuntimeError(f"{message} (at {user_location()})")
        return T.const(0, x.dtype)
    # the sum is NaN exactly when some element is outside: check_finite raises then
    return T.check_finite(T.sum(T.where(inside, 0.0, float("nan"))),
                          f"{message} (at {user_location()})")


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None,
                                     reduce=None, reduction: str = "mean", pos_weight=None):
    """binary_cross_entropy(sigmoid(input), target) in the stable form
    (1 - target) input + (1 + (pos_weight - 1) target) softplus(-input): no overflow for
    large |input|. pos_weight (broadcast along the last dimension) weighs the positives."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _pointwise_operands(input, target, "binary_cross_entropy_with_logits")
    neg_log_sigmoid = _softplus(T.neg(input))
    if pos_weight is not None:
        neg_log_sigmoid = T.mul(neg_log_sigmoid,
                                T.add(T.mul(T.sub(pos_weight, 1.0), target), 1.0))
    loss = T.add(T.mul(T.sub(1.0, target), input), neg_log_sigmoid)
    if weight is not None:
        loss = T.mul(loss, weight)
    return _reduce(loss, reduction, "binary_cross_entropy_with_logits")
