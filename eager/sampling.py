"""Sampling and creation, PyTorch style: multinomial, randperm, randint(high, size), empty,
empty_like (issue 16 item 4).

Samples are made from the registry's `uniform` draws, so they trace and compile with the
global generator (`eager.manual_seed`): multinomial without replacement is the Gumbel
top-k of log p, with replacement the inverse CDF (how many of the cumulative
probabilities lie at or below a uniform draw). Invalid probabilities are checked when the
program runs, traced or not (`check_finite`), with PyTorch's messages.

>>> import eager
>>> _ = eager.manual_seed(0)
>>> eager.multinomial(eager.tensor([0.0, 1.0]), 2, replacement=True)
tensor([1, 1])
"""
from __future__ import annotations

import numpy as np

from . import dispatch as _dispatch
from . import dtypes
from .errors import user_location
from .functions import (
    add,
    as_tensor,
    bitwise_and,
    cast,
    check_finite,
    const,
    div,
    full,
    ge,
    getitem_basic,
    gt,
    le,
    log,
    lt,
    neg,
    rand,
    randn,
    stop_gradient,
    sum,
    unsqueeze,
    where,
    zeros,
)
from .functions import randint as _randint
from .scan import argsort, cumsum, topk
from .scan_ops import size_error

__all__ = ["bernoulli", "empty", "empty_like", "multinomial", "randint", "randperm"]


def _uniform(shape, dtype, generator, op):
    if generator is None:
        return rand(*shape, dtype=dtype)
    if _dispatch.tracing():
        raise size_error(op, "generator= inside a @function: the draws of a generator of "
                       "one's own are not traced (they would be frozen into the trace)",
                       hint="use the global generator (eager.manual_seed) in compiled code",
                       exc=RuntimeError)
    return rand(*shape, dtype=dtype, generator=generator)


def multinomial(probs, num_samples, replacement=False, *, generator=None):
    """Indices drawn from the categories of the last dim with probabilities proportional to
    `probs` (1-D or 2-D, not necessarily normalized); int64 of shape (..., num_samples)."""
    p = as_tensor(probs, "multinomial")
    if p.ndim not in (1, 2):
        raise size_error("multinomial", f"prob_dist must be 1 or 2 dim, got {p.ndim}", (p,),
                       exc=RuntimeError)
    if not dtypes.is_floating(p.dtype):
        raise size_error("multinomial", f"only supports floating-point dtypes for input, got "
                       f"{p.dtype}", (p,), exc=RuntimeError)
    n = int(num_samples)
    categories = p.shape[-1]
    if n <= 0:
        raise size_error("multinomial", "cannot sample n_sample <= 0 samples", (p,),
                       exc=RuntimeError)
    if not replacement and n > categories:
        raise size_error("multinomial", "cannot sample n_sample > prob_dist.size(-1) samples "
                       "without replacement", (p,), exc=RuntimeError)
    p = stop_gradient(p)
    zero = const(0, p.dtype)
    # A wrong distribution is an error, never a sample from it; compiled, the check runs
    # when the program runs.
    p = _checked(p, lt(p, zero), "probability tensor contains either `inf`, `nan` or "
                                 "element < 0")
    # (each check passes p on, so that a compiled program keeps it)
    p = _checked(p, le(sum(p, -1, keepdim=True), zero), "invalid multinomial distribution "
                 "(sum of probabilities <= 0)")
    if not replacement:
        count = sum(cast(gt(p, zero), p.dtype), -1, keepdim=True)
        p = _checked(p, lt(count, const(n, p.dtype)), "invalid multinomial distribution "
                     "(with replacement=False, not enough non-negative category to sample)")
        u = _uniform(tuple(p.shape), p.dtype, generator, "multinomial")
        # Gumbel top-k: the order of log p_i + G_i (G = -log(-log u)) is a draw without
        # replacement; zero probabilities get -inf and are never picked.
        safe = where(gt(p, zero), p, const(1, p.dtype))
        logp = where(gt(p, zero), log(safe), const(-np.inf, p.dtype))
        gumbel = neg(log(neg(log(u))))
        return topk(add(logp, gumbel), n, -1).indices
    cdf = cumsum(p, -1)
    last = getitem_basic(cdf, ((0, None, 1),) * (p.ndim - 1) + ((categories - 1, categories, 1),))
    cdf = div(cdf, last)  # the last entry is exactly 1, above every draw in [0, 1)
    u = _uniform(tuple(p.shape[:-1]) + (n,), p.dtype, generator, "multinomial")
    below = le(unsqueeze(cdf, -2), unsqueeze(u, -1))  # [..., sample, category]
    return sum(below, -1)


def _checked(value, bad, message):
    """`value`, after checking that `bad` (broadcast to it) holds nowhere and `value` is
    finite: RuntimeError(message) otherwise, now (eager) or when the compiled program runs
    (traced)."""
    message = f"multinomial: {message}"
    if _dispatch.tracing():
        return check_finite(where(bad, const(np.nan, value.dtype), value), message)
    if bad.numpy().any() or not np.isfinite(value.numpy()).all():
        raise RuntimeError(f"{message} (at {user_location()})")
    return value


def randperm(n, *, generator=None, dtype=None, requires_grad=False):
    """A random permutation of 0..n-1 (the order of n uniform draws)."""
    n = int(n)
    out = argsort(_uniform((n,), dtypes.float64, generator, "randperm"), 0)
    return out if dtype is None else cast(out, dtype)


def randint(*args, size=None, dtype=None, generator=None, **kwargs):
    """randint(high, size), randint(low, high, size): integers in [low, high)."""
    if len(args) == 2 and isinstance(args[1], (tuple, list)) and size is None:
        args, size = (0, args[0]), tuple(args[1])  # PyTorch's randint(high, size)
    if size is not None:
        kwargs["size"] = size
    return _randint(*args, dtype=dtype, generator=generator, **kwargs)


# --------------------------------------------------------------------------------------
# in-place fills and bernoulli (Tensor.uniform_, normal_, bernoulli_; eager.bernoulli)

def uniform_(x, a=0.0, b=1.0, *, generator=None):
    """x filled in place with uniform draws from [a, b) (Tensor.uniform_(from, to))."""
    from .autograd import no_grad

    with no_grad():
        u = rand(*x.shape, dtype=x.dtype, generator=generator)
        return x.copy_(u * (b - a) + a)


def normal_(x, mean=0.0, std=1.0, *, generator=None):
    """x filled in place with normal draws of `mean` and `std` (Tensor.normal_)."""
    from .autograd import no_grad

    with no_grad():
        return x.copy_(randn(*x.shape, dtype=x.dtype, generator=generator) * std + mean)


def bernoulli(x, p=None, *, generator=None):
    """1 with probability x (or the number p) and 0 otherwise, in x's dtype: one uniform draw
    per element, u < p. A probability outside [0, 1] (or NaN) raises as in PyTorch, compiled
    too."""
    x = as_tensor(x, "bernoulli")
    message = "bernoulli: Expected p_in >= 0 && p_in <= 1 to be true"
    if p is not None:
        if not 0 <= p <= 1:
            raise size_error("bernoulli", f"Expected p_in >= 0 && p_in <= 1 to be true, got "
                           f"p={p}", (x,), exc=RuntimeError)
        probs = full(tuple(x.shape), float(p), dtype=dtypes.float64)
    else:
        probs = stop_gradient(x)
        inside = bitwise_and(ge(probs, const(0, probs.dtype)), le(probs, const(1, probs.dtype)))
        if _dispatch.tracing():  # (checked when the program runs)
            probs = check_finite(where(inside, probs, const(np.nan, probs.dtype)),
                                 f"{message} (at {user_location()})")
        elif not inside.numpy().all():
            raise RuntimeError(f"{message} (at {user_location()})")
    draw_dtype = dtypes.float64 if probs.dtype == dtypes.float64 else dtypes.float32
    u = _uniform(tuple(x.shape), draw_dtype, generator, "bernoulli")
    return cast(lt(u, cast(probs, draw_dtype)), x.dtype)


def bernoulli_(x, p=0.5, *, generator=None):
    """x filled in place with bernoulli(p) draws (p a number or a tensor of x's shape)."""
    from .autograd import no_grad

    with no_grad():
        if hasattr(p, "_data"):
            return x.copy_(cast(bernoulli(p, generator=generator), x.dtype))
        return x.copy_(bernoulli(x, p, generator=generator))


def empty(*size, dtype=None, requires_grad=False, memory_format=None):
    """An uninitialized tensor; here it holds zeros."""
    return zeros(*size, dtype=dtype, requires_grad=requires_grad)


def empty_like(x, dtype=None, requires_grad=False, memory_format=None):
    return zeros(x.shape, dtype=dtype or x.dtype, requires_grad=requires_grad)
