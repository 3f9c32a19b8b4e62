"""The Adam family: Adam, AdamW, Adamax, NAdam, RAdam (PyTorch's update rules and state).
"""
from __future__ import annotations

import math

import numpy as np

from .. import functions as T
from ..autograd import no_grad
from ..dispatch import state_init
from ..tensor import Tensor
from .optimizer import (
    Optimizer,
    _check_betas,
    _check_range,
    _count,
    _f64,
    _grads,
    _nonzero,
    _number,
    _params,
    _pow,
    _scalar,
    _sqrt,
    _step_tensor,
    _switch,
    closure_loss,
)


class Adam(Optimizer):
    """Adam with bias correction; `weight_decay` adds wd * p to the gradient (L2); amsgrad
    divides by the running max of the second moments (state `max_exp_avg_sq`)."""

    _decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 amsgrad=False, maximize=False):
        if lr < 0 or eps < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"Invalid Adam hyper-parameters lr={lr} betas={betas} eps={eps}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, amsgrad=bool(amsgrad),
                                      maximize=maximize))

    @no_grad()
    def step(self, closure=None):
        loss = closure_loss(closure)
        for group in self.param_groups:
            eps, wd = _number(group, "eps"), _nonzero(group, "weight_decay")
            lr = _number(group, "lr")
            b1, b2 = _number(group, "betas")
            maximize = _switch(group, "maximize")
            amsgrad = _switch(group, "amsgrad")  # (a trace holds for its value)
            for p in _params(group, "params"):
                g = p.grad
                if g is None:
                    continue
                if maximize:
                    g = -g
                state = self.state[p]
                if not state:  # also when opt.state[p] was only looked at (the defaultdict)
                    # The first step then runs the code of every later step, so a traced
                    # step makes this state as existing state and traces once.
                    with state_init():
                        state["step"] = _step_tensor()
                        state["exp_avg"] = T.zeros_like(p)
                        state["exp_avg_sq"] = T.zeros_like(p)
                if amsgrad and "max_exp_avg_sq" not in state:
                    with state_init():  # (also when amsgrad is switched on later)
                        state["max_exp_avg_sq"] = T.zeros_like(p)
                step = state["step"]
                step.add_(1)
                if wd is not None:
                    if self._decoupled:
                        p.mul_(1 - lr * wd)
                    else:
                        g = g + p * wd
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).add_(g * g, alpha=1 - b2)
                if type(step._data) is np.ndarray:
                    # Eager: bias corrections in Python floats from the step count, as
                    # PyTorch's default (non-capturable) path computes them.
                    n = step.item()
                    step_size = T.const(lr / (1 - b1 ** n), p.dtype)
                    bc2_sqrt = T.const(math.sqrt(1 - b2 ** n), p.dtype)
                else:
                    # Traced: from the step tensor (PyTorch's capturable path), so the trace
                    # does not bake in a step count. In float64, as the eager floats: in
                    # float32, 0.999 is off by 1.3e-8, moving 1 - 0.999 ** 1 by 1.3e-5.
                    step64 = T.cast(step, np.float64)
                    bc1 = 1 - T.pow(_f64(b1), step64)
                    bc2 = 1 - T.pow(_f64(b2), step64)
                    step_size = T.cast(lr / bc1, p.dtype)
                    bc2_sqrt = T.cast(T.sqrt(bc2), p.dtype)
                if amsgrad:  # the running max of the second moments (PyTorch's rule)
                    vmax = state["max_exp_avg_sq"]
                    vmax.copy_(T.maximum(vmax, v))
                    v = vmax
                denom = T.sqrt(v) / bc2_sqrt + eps
                # p -= step_size * m / denom, in the order of PyTorch's addcdiv_
                p.sub_(m * step_size / denom)
        return loss


class AdamW(Adam):
    """Adam with decoupled weight decay: p *= 1 - lr * wd before the Adam update."""

    _decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, maximize=False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize)


def _adam_state(state, p, second: str):
    """The first-step state of the Adam family, made as existing state (see Adam.step), so a
    compiled training step traces once."""
    if not state:
        with state_init():
            state["step"] = _step_tensor()
            state["exp_avg"] = T.zeros_like(p)
            state[second] = T.zeros_like(p)
    return state


def _check(lr, eps, betas, weight_decay):
    _check_range("learning rate", lr)
    _check_range("epsilon value", eps)
    _check_betas(betas)
    _check_range("weight_decay value", weight_decay)


class Adamax(Optimizer):
    """Adam with an infinity norm: u = max(beta2 u, |g| + eps), p -= lr / (1 - beta1^t) m / u."""

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 maximize=False):
        _check(lr, eps, betas, weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, maximize=maximize))

    @no_grad()
    def step(self, closure=None):
        loss = closure_loss(closure)
        for group in self.param_groups:
            eps, wd = _number(group, "eps"), _nonzero(group, "weight_decay")
            lr = _number(group, "lr")
            b1, b2 = _number(group, "betas")
            for p, g in _grads(group, _switch(group, "maximize")):
                state = _adam_state(self.state[p], p, "exp_inf")
                step = state["step"]
                step.add_(1)
                if wd is not None:
                    g = g + p * wd
                m, u = state["exp_avg"], state["exp_inf"]
                m.mul_(b1).add_(g, alpha=1 - b1)
                u.copy_(T.maximum(u * b2, T.abs(g) + eps))
                clr = _scalar(lr / (1 - _pow(b1, _count(step))), p.dtype)
                p.sub_(m * clr / u)
        return loss


class NAdam(Optimizer):
    """Adam with Nesterov momentum (Dozat 2016) and PyTorch's momentum decay schedule
    mu_t = beta1 (1 - 0.96^(t psi) / 2); `decoupled_weight_decay` as in AdamW."""

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 momentum_decay=4e-3, decoupled_weight_decay=False, maximize=False):
        _check(lr, eps, betas, weight_decay)
        _check_range("momentum_decay", momentum_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, momentum_decay=momentum_decay,
                                      decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize))

    @no_grad()
    def step(self, closure=None):
        loss = closure_loss(closure)
        for group in self.param_groups:
            eps, wd = _number(group, "eps"), _nonzero(group, "weight_decay")
            lr, psi = _number(group, "lr"), _number(group, "momentum_decay")
            b1, b2 = _number(group, "betas")
            decoupled = _switch(group, "decoupled_weight_decay")
            for p, g in _grads(group, _switch(group, "maximize")):
                state = self.state[p]
                if not state:
                    with state_init():  # (in PyTorch's order: step, mu_product, moments)
                        state["step"] = _step_tensor()
                        state["mu_product"] = Tensor._wrap(np.array(1.0, np.float32))
                        state["exp_avg"] = T.zeros_like(p)
                        state["exp_avg_sq"] = T.zeros_like(p)
                step, mu_product = state["step"], state["mu_product"]
                step.add_(1)
                if wd is not None:
                    if decoupled:
                        p.mul_(1 - lr * wd)
                    else:
                        g = g + p * wd
                n = _count(step)
                bc2 = 1 - _pow(b2, n)
                mu = b1 * (1 - 0.5 * _pow(0.96, n * psi))
                mu_next = b1 * (1 - 0.5 * _pow(0.96, (n + 1) * psi))
                mu_product.mul_(_scalar(mu, mu_product.dtype))
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).add_(g * g, alpha=1 - b2)
                denom = T.sqrt(v / _scalar(bc2, p.dtype)) + eps
                # As PyTorch: the product so far read back from its (float32) state tensor.
                prod = _count(mu_product)
                p.add_(g * _scalar(-lr * (1 - mu) / (1 - prod), p.dtype) / denom)
                p.add_(m * _scalar(-lr * mu_next / (1 - prod * mu_next), p.dtype) / denom)
        return loss


class RAdam(Optimizer):
    """Rectified Adam (Liu et al. 2019): the adaptive step only once the variance of the
    adaptive learning rate is tractable (rho_t > 5), plain momentum SGD before."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 decoupled_weight_decay=False, maximize=False):
        _check(lr, eps, betas, weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay,
                                      decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize))

    @no_grad()
    def step(self, closure=None):
        loss = closure_loss(closure)
        for group in self.param_groups:
            eps, wd = _number(group, "eps"), _nonzero(group, "weight_decay")
            lr = _number(group, "lr")
            b1, b2 = _number(group, "betas")
            decoupled = _switch(group, "decoupled_weight_decay")
            for p, g in _grads(group, _switch(group, "maximize")):
                state = _adam_state(self.state[p], p, "exp_avg_sq")
                step = state["step"]
                step.add_(1)
                if wd is not None:
                    if decoupled:
                        p.mul_(1 - lr * wd)
                    else:
                        g = g + p * wd
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).add_(g * g, alpha=1 - b2)
                n = _count(step)
                bc1 = 1 - _pow(b1, n)
                bc2 = 1 - _pow(b2, n)
                corrected = m / _scalar(bc1, p.dtype)
                rho_inf = 2 / (1 - b2) - 1
                rho_t = rho_inf - 2 * n * _pow(b2, n) / bc2
                plain = corrected * _scalar(lr, p.dtype)
                if not isinstance(rho_t, Tensor):
                    if rho_t > 5.0:
                        rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf
                                         / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
                        adaptive = math.sqrt(bc2) / (T.sqrt(v) + eps)
                        p.sub_(plain * adaptive * rect)
                    else:
                        p.sub_(plain)
                    continue
                # Traced: which update applies depends on the step count, a value of the
                # trace, so both are computed and one selected (the rectifier of the other
                # branch is made finite, never used).
                rectified = rho_t > 5.0
                rho_safe = T.where(rectified, rho_t, T.const(6.0, np.float64))
                rect = _sqrt((rho_safe - 4) * (rho_safe - 2) * rho_inf
                             / ((rho_inf - 4) * (rho_inf - 2) * rho_safe))
                adaptive = _scalar(_sqrt(bc2), p.dtype) / (T.sqrt(v) + eps)
                update = plain * adaptive * _scalar(rect, p.dtype)
                p.sub_(T.where(rectified, update, plain))
        return loss


__all__ = ["Adam", "AdamW", "Adamax", "NAdam", "RAdam"]
