"""The activations and losses of issue 16 item 6 as OpInfo entries (see opinfo.py): how to
call each through eager.nn.functional, sample inputs, and an independent float64 numpy
reference written from PyTorch's documented formulas (not from our code).

Used by tests/eager/test_activations_losses.py (forward, gradients) and
tests/tracer/test_activations_traced.py (traced and compiled against eager). Kept out of
OPINFOS so the registry-generated suites stay as they are; every entry here is a composite.
"""
from __future__ import annotations

import numpy as np
from opinfo import F32, F64, FLOATS, SPECIALS, OpInfo, Sample

import eager.nn.functional as F

SHAPES = [(), (5,), (3, 4), (0, 4)]
GRAD_SHAPES = [(5,), (3, 4)]
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _f64(*arrays):
    return [np.asarray(a, np.float64) for a in arrays]


def _out(ref):
    """ref(*float64 arrays, **kw) -> a reference returning the first float input's dtype."""
    def wrapped(*args, **kw):
        dt = next(a.dtype for a in args if isinstance(a, np.ndarray) and a.dtype.kind == "f")
        conv = [np.asarray(a, np.float64) if isinstance(a, np.ndarray) and a.dtype.kind == "f"
                else a for a in args]
        with np.errstate(all="ignore"):
            return np.asarray(ref(*conv, **kw)).astype(dt)
    return wrapped


def _uniform(rng, shape, dtype, lo=-4.0, hi=4.0):
    return np.asarray(rng.uniform(lo, hi, shape), dtype)


def unary(kwargs_list=({},), lo=-4.0, hi=4.0, special=True, shapes=SHAPES):
    """Samples of f(x, **kw): random values (spanning the kinks), and NaN/inf/±0 values."""
    def samples(rng, dtype):
        out = [Sample((_uniform(rng, s, dtype, lo, hi),), dict(kw))
               for kw in kwargs_list for s in shapes]
        if special:
            out += [Sample((np.asarray(SPECIALS + [-3.0, 6.0, 25.0, -25.0], dtype),), dict(kw),
                           special=True) for kw in kwargs_list]
        return out
    return samples


def unary_grad(kwargs_list=({},), lo=-4.0, hi=4.0):
    def samples(rng):
        return [Sample((_uniform(rng, s, F64, lo, hi),), dict(kw))
                for kw in kwargs_list for s in GRAD_SHAPES]
    return samples


# --------------------------------------------------------------------------------------
# references (PyTorch's documented formulas, in float64)

def _softplus(x):
    return np.logaddexp(0.0, x)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def leaky_relu_ref(x, negative_slope=0.01):
    return np.maximum(0, x) + negative_slope * np.minimum(0, x)


def elu_ref(x, alpha=1.0):
    return np.where(x > 0, x, alpha * np.expm1(x))


def selu_ref(x):
    return SELU_SCALE * (np.maximum(0, x) + np.minimum(0, SELU_ALPHA * np.expm1(x)))


def celu_ref(x, alpha=1.0):
    return np.maximum(0, x) + np.minimum(0, alpha * np.expm1(x / alpha))


def hardtanh_ref(x, min_val=-1.0, max_val=1.0):
    return np.where(x > max_val, max_val, np.where(x < min_val, min_val, x))


def relu6_ref(x):
    return np.minimum(np.maximum(0, x), 6)


def hardswish_ref(x):
    return np.where(x <= -3, 0.0, np.where(x >= 3, x, x * (x + 3) / 6))


def hardsigmoid_ref(x):
    return np.where(x <= -3, 0.0, np.where(x >= 3, 1.0, x / 6 + 0.5))


def softplus_ref(x, beta=1.0, threshold=20.0):
    return np.where(beta * x > threshold, x, np.log1p(np.exp(beta * x)) / beta)


def softsign_ref(x):
    return x / (1 + np.abs(x))


def mish_ref(x):
    return x * np.tanh(_softplus(x))


def logsigmoid_ref(x):
    return -_softplus(-x)


def glu_ref(x, dim=-1):
    a, b = np.split(x, 2, axis=dim)
    return a * _sigmoid(b)


def normalize_ref(x, p=2.0, dim=1, eps=1e-12):
    if p == np.inf:
        n = np.max(np.abs(x), axis=dim, keepdims=True, initial=0.0)
    else:
        n = np.sum(np.abs(x) ** p, axis=dim, keepdims=True) ** (1.0 / p)
    return x / np.maximum(n, eps)


def softmin_ref(x, dim):
    e = np.exp(-x - np.max(-x, axis=dim, keepdims=True))
    return e / np.sum(e, axis=dim, keepdims=True)


def _reduce(loss, reduction):
    return {"mean": np.mean, "sum": np.sum, "none": lambda v: v}[reduction](loss)


def l1_ref(x, y, reduction="mean"):
    return _reduce(np.abs(x - y), reduction)


def smooth_l1_ref(x, y, reduction="mean", beta=1.0):
    d = np.abs(x - y)
    loss = d if beta == 0 else np.where(d < beta, 0.5 * d * d / max(beta, 1e-300),
                                        d - 0.5 * beta)
    return _reduce(loss, reduction)


def huber_ref(x, y, reduction="mean", delta=1.0):
    d = np.abs(x - y)
    return _reduce(np.where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta)), reduction)


def kl_div_ref(x, y, reduction="mean", log_target=False):
    if log_target:
        loss = np.exp(y) * (y - x)
    else:
        loss = np.where(y == 0, 0.0, y * np.log(np.where(y == 0, 1.0, y))) - y * x
        loss = np.where(np.isnan(y), np.nan, loss)
    if reduction == "batchmean":
        return np.sum(loss) / (x.shape[0] if x.ndim else 1)
    return _reduce(loss, reduction)


def bce_ref(p, y, weight=None, reduction="mean"):
    loss = -(y * np.maximum(np.log(p), -100) + (1 - y) * np.maximum(np.log(1 - p), -100))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def bce_logits_ref(x, y, weight=None, reduction="mean", pos_weight=None):
    # the definition: -[pw y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))]
    pw = 1.0 if pos_weight is None else pos_weight
    loss = -(pw * y * -_softplus(-x) + (1 - y) * -_softplus(x))
    # PyTorch's stable formula (1 - y) x + softplus(-x) is -inf + inf = NaN at x = -inf
    loss = np.where(np.isneginf(x), np.nan, loss)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def _log_softmax(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))


def nll_ref(logp, target, weight=None, ignore_index=-100, reduction="mean", smoothing=0.0):
    """PyTorch's nll_loss (and cross_entropy's label-smoothing mix), one element at a time."""
    class_axis = 0 if logp.ndim == 1 else 1
    lp = np.moveaxis(logp, class_axis, -1)
    c = lp.shape[-1]
    w = np.ones(c) if weight is None else weight
    losses = np.zeros(target.shape)
    den = 0.0
    for idx in np.ndindex(*target.shape):
        t = int(target[idx])
        if t == ignore_index:
            continue
        row = lp[idx]
        nll = -w[t] * row[t]
        smooth = -np.sum(w * row) / c
        losses[idx] = (1 - smoothing) * nll + smoothing * smooth
        den += w[t]
    if reduction == "none":
        return losses
    total = np.sum(losses)
    return total if reduction == "sum" else total / den


def cross_entropy_ref(x, target, weight=None, ignore_index=-100, reduction="mean",
                      label_smoothing=0.0):
    class_axis = 0 if x.ndim == 1 else 1
    logp = _log_softmax(x, class_axis)
    if target.dtype.kind == "f":
        c = x.shape[class_axis]
        t = target * (1 - label_smoothing) + label_smoothing / c
        w = np.ones(c) if weight is None else weight
        w = w.reshape((c,) + (1,) * (x.ndim - class_axis - 1))
        loss = -np.sum(logp * t * w, axis=class_axis)
        return _reduce(loss, reduction)
    return nll_ref(logp, target, weight, ignore_index, reduction, label_smoothing)


# --------------------------------------------------------------------------------------
# loss samples

REDUCTIONS = ("mean", "sum", "none")


def pair_samples(kwargs_list, target="any", special=True):
    def samples(rng, dtype):
        out = []
        for kw in kwargs_list:
            for s in SHAPES:
                x = _uniform(rng, s, dtype, -3, 3)
                y = _uniform(rng, s, dtype, -3, 3) if target == "any" else \
                    _uniform(rng, s, dtype, 0.0, 1.0)
                out.append(Sample((x, y), dict(kw)))
            if special:
                x = np.asarray(SPECIALS, dtype)
                out.append(Sample((x, np.asarray(np.roll(SPECIALS, 3), dtype)
                                   if target == "any" else np.full(len(SPECIALS), 0.25, dtype)),
                                  dict(kw), special=True))
        return out
    return samples


def pair_grad(kwargs_list, target="any"):
    def samples(rng):
        out = []
        for kw in kwargs_list:
            for s in GRAD_SHAPES:
                x = _uniform(rng, s, F64, -3, 3)
                y = _uniform(rng, s, F64, -3, 3) if target == "any" else \
                    _uniform(rng, s, F64, 0.0, 1.0)
                out.append(Sample((x, y), dict(kw)))
        return out
    return samples


def kl_samples(rng, dtype):
    out = []
    for kw in ({"reduction": r, "log_target": lt}
               for r in ("mean", "sum", "none", "batchmean") for lt in (False, True)):
        for s in [(), (3, 4), (0, 4)]:
            x = _log_softmax(rng.standard_normal(s), -1) if s else np.asarray(-0.7)
            y = np.exp(_log_softmax(rng.standard_normal(s), -1)) if s else np.asarray(0.4)
            if s == (3, 4) and not kw["log_target"]:
                y[0, 1] = 0.0  # xlogy(0, 0) = 0
            if kw["log_target"]:
                y = np.asarray(np.log(np.maximum(y, 1e-3)))
            out.append(Sample((x.astype(dtype), y.astype(dtype)), kw))
    return out


def kl_grad(rng):
    return [s for s in kl_samples(rng, F64) if s.args[0].size and
            not (s.args[1] == 0).any()]


def bce_samples(rng, dtype):
    out = []
    for kw in ({"reduction": r} for r in REDUCTIONS):
        for s in SHAPES:
            p = _uniform(rng, s, dtype, 0.02, 0.98)
            y = _uniform(rng, s, dtype, 0.0, 1.0)
            out.append(Sample((p, y), kw))
    p = np.asarray(rng.uniform(0.05, 0.95, (3, 4)), dtype)
    w = np.asarray(rng.uniform(0.5, 2.0, (4,)), dtype)
    out.append(Sample((p, np.asarray(rng.integers(0, 2, (3, 4)), dtype)), {"weight": w}))
    # log(0) and log(1 - 1) are clamped at -100, as in PyTorch
    edge = np.asarray([0.0, 1.0, 0.0, 1.0, 0.5], dtype)
    out.append(Sample((edge, np.asarray([0.0, 1.0, 1.0, 0.0, 0.5], dtype)),
                      {"reduction": "none"}, special=True))
    # (NaN or outside [0, 1] raises, as in PyTorch: test_activations_traced.py checks it)
    return out


def bce_grad(rng):
    # (a target at 0 or 1 would be pushed outside [0, 1] by the finite differences: raises)
    return [s for s in bce_samples(rng, F64) if not s.special and s.args[0].size
            and ((s.args[1] > 0) & (s.args[1] < 1)).all()]


def bce_logits_samples(rng, dtype):
    out = []
    for kw in ({"reduction": r} for r in REDUCTIONS):
        for s in SHAPES:
            out.append(Sample((_uniform(rng, s, dtype, -5, 5),
                               _uniform(rng, s, dtype, 0.0, 1.0)), kw))
    x = _uniform(rng, (3, 4), dtype, -5, 5)
    y = np.asarray(rng.integers(0, 2, (3, 4)), dtype)
    w = _uniform(rng, (3, 1), dtype, 0.5, 2.0)
    pw = _uniform(rng, (4,), dtype, 0.5, 3.0)
    out.append(Sample((x, y), {"weight": w, "pos_weight": pw}))
    out.append(Sample((x, y), {"pos_weight": pw, "reduction": "none"}))
    # large logits stay finite (the stable form): log(1 + exp(200)) would overflow
    big = np.asarray([200.0, -200.0, 80.0, -80.0, 0.0], dtype)
    out.append(Sample((big, np.asarray([0.0, 1.0, 0.5, 0.5, 1.0], dtype)),
                      {"reduction": "none"}))
    out.append(Sample((np.asarray(SPECIALS, dtype), np.full(len(SPECIALS), 0.3, dtype)),
                      {"reduction": "none"}, special=True))
    return out


def bce_logits_grad(rng):
    return [s for s in bce_logits_samples(rng, F64) if not s.special and s.args[0].size and
            np.abs(s.args[0]).max() < 50]


def _targets(rng, shape, classes, ignore=None):
    t = rng.integers(0, classes, shape)
    if ignore is not None and t.size > 1:
        t.flat[1] = ignore
    return t.astype(np.int64)


def class_samples(log_probs):
    """nll_loss / cross_entropy samples: (N, C), K-dimensional (N, C, d1, d2), unbatched (C,),
    zero-size batches; with weight, ignore_index (default -100 and a class), reductions."""
    def samples(rng, dtype):
        out = []

        def inp(shape):
            x = rng.standard_normal(shape)
            return np.asarray(_log_softmax(x, 0 if len(shape) == 1 else 1) if log_probs
                              else x, dtype)
        w = np.asarray(rng.uniform(0.2, 2.0, 5), dtype)
        for red in REDUCTIONS:
            out.append(Sample((inp((4, 5)), _targets(rng, (4,), 5, -100)), {"reduction": red}))
            out.append(Sample((inp((4, 5)), _targets(rng, (4,), 5, -100)),
                              {"reduction": red, "weight": w}))
            out.append(Sample((inp((2, 5, 3, 2)), _targets(rng, (2, 3, 2), 5, -100)),
                              {"reduction": red, "weight": w}))
            out.append(Sample((inp((5,)), np.asarray(3, np.int64)), {"reduction": red}))
            out.append(Sample((inp((5,)), np.asarray(2, np.int64)),
                              {"reduction": red, "weight": w}))
            out.append(Sample((inp((0, 5)), _targets(rng, (0,), 5)), {"reduction": red}))
        out.append(Sample((inp((4, 5)), _targets(rng, (4,), 5, 2)), {"ignore_index": 2}))
        out.append(Sample((inp((4, 5)), np.asarray([1, -100, 3, -100], np.int64)),
                          {"weight": w, "reduction": "sum"}))
        if not log_probs:
            for ls in (0.1,):
                out.append(Sample((inp((4, 5)), _targets(rng, (4,), 5, -100)),
                                  {"label_smoothing": ls, "weight": w}))
                out.append(Sample((inp((2, 5, 3)), _targets(rng, (2, 3), 5, -100)),
                                  {"label_smoothing": ls}))
                probs = np.exp(_log_softmax(rng.standard_normal((2, 5, 3)), 1)).astype(dtype)
                out.append(Sample((inp((2, 5, 3)), probs),
                                  {"label_smoothing": ls, "weight": w}))
                out.append(Sample((inp((5,)), probs[0, :, 0].copy()), {"reduction": "sum"}))
        return out
    return samples


def class_grad(log_probs):
    def samples(rng):
        return [s for s in class_samples(log_probs)(rng, F64) if s.args[0].size]
    return samples


def _e(name, call, ref, samples, grad_samples=None, **kw):
    return OpInfo(name, None, call, _out(ref), samples, FLOATS, grad_samples, **kw)


def _activation(name, call, ref, kwargs_list=({},), lo=-4.0, hi=4.0, **kw):
    return _e(name, call, ref, unary(kwargs_list, lo, hi), unary_grad(kwargs_list, lo, hi),
              **kw)


ENTRIES = [
    _activation("leaky_relu", F.leaky_relu, leaky_relu_ref,
                ({}, {"negative_slope": 0.2}, {"negative_slope": -1.5})),
    _activation("elu", F.elu, elu_ref, ({}, {"alpha": 0.5})),
    _activation("selu", F.selu, selu_ref),
    _activation("celu", F.celu, celu_ref, ({}, {"alpha": 2.0})),
    _activation("relu6", F.relu6, relu6_ref, lo=-3.0, hi=9.0),
    _activation("hardtanh", F.hardtanh, hardtanh_ref,
                ({}, {"min_val": -2.0, "max_val": 0.5})),
    _activation("hardswish", F.hardswish, hardswish_ref, lo=-5.0, hi=5.0),
    _activation("hardsigmoid", F.hardsigmoid, hardsigmoid_ref, lo=-5.0, hi=5.0),
    _activation("softplus", F.softplus, softplus_ref,
                ({}, {"beta": 2.0, "threshold": 5.0}, {"beta": 0.5})),
    _activation("softsign", F.softsign, softsign_ref),
    _activation("mish", F.mish, mish_ref),
    _activation("logsigmoid", F.logsigmoid, logsigmoid_ref, lo=-30.0, hi=30.0),
    _e("glu", F.glu, glu_ref,
       unary(({}, {"dim": 0}), shapes=[(4, 6), (2, 0)], special=False),
       lambda rng: [Sample((_uniform(rng, (4, 6), F64),), kw) for kw in ({}, {"dim": 0})]),
    _e("normalize", F.normalize, normalize_ref,
       unary(({}, {"p": 1.0, "dim": 0}, {"p": 3.0, "dim": -1}, {"p": float("inf")}),
             shapes=[(3, 4), (0, 4)], special=False),
       lambda rng: [Sample((_uniform(rng, (3, 4), F64),), kw)
                    for kw in ({}, {"p": 1.0, "dim": 0}, {"p": 3.0, "dim": -1})]),
    _e("softmin", F.softmin, softmin_ref,
       lambda rng, dt: unary(({"dim": 1}, {"dim": 0}), shapes=[(3, 4), (0, 4)][:1],
                             special=False)(rng, dt) +
       unary(({"dim": 1},), shapes=[(0, 4)], special=False)(rng, dt) +
       [Sample((np.asarray([SPECIALS, SPECIALS[::-1]], dt),), {"dim": 1}, special=True)],
       lambda rng: [Sample((_uniform(rng, (3, 4), F64),), {"dim": 1})]),
    _e("l1_loss", F.l1_loss, l1_ref, pair_samples([{"reduction": r} for r in REDUCTIONS]),
       pair_grad([{"reduction": r} for r in REDUCTIONS])),
    _e("smooth_l1_loss", F.smooth_l1_loss, smooth_l1_ref,
       pair_samples([{"reduction": "none"}, {"beta": 0.5}, {"beta": 0.0, "reduction": "sum"}]),
       pair_grad([{"reduction": "none"}, {"beta": 0.5}, {"beta": 0.0, "reduction": "sum"}])),
    _e("huber_loss", F.huber_loss, huber_ref,
       pair_samples([{"reduction": "none"}, {"delta": 2.0}, {"reduction": "sum"}]),
       pair_grad([{"reduction": "none"}, {"delta": 2.0}, {"reduction": "sum"}])),
    _e("kl_div", F.kl_div, kl_div_ref, kl_samples, kl_grad),
    _e("binary_cross_entropy", F.binary_cross_entropy, bce_ref, bce_samples, bce_grad),
    _e("binary_cross_entropy_with_logits", F.binary_cross_entropy_with_logits,
       bce_logits_ref, bce_logits_samples, bce_logits_grad),
    _e("nll_loss", F.nll_loss, nll_ref, class_samples(True), class_grad(True)),
    _e("cross_entropy", F.cross_entropy, cross_entropy_ref, class_samples(False),
       class_grad(False)),
]

assert {F32, F64} == set(FLOATS)
