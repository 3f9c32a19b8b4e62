"""Per-coordinate adaptive optimizers: RMSprop, Adagrad, Adadelta (PyTorch's update rules
and state layout)."""
from __future__ import annotations

from .. import functions as T
from ..autograd import no_grad
from ..dispatch import state_init
from .optimizer import (
    Optimizer,
    _check_range,
    _count,
    _grads,
    _nonzero,
    _number,
    _params,
    _scalar,
    _step_tensor,
    _switch,
    closure_loss,
)


class RMSprop(Optimizer):
    """v = alpha v + (1 - alpha) g^2; p -= lr g / (sqrt(v - mean(g)^2 if centered) + eps),
    through a momentum buffer b = momentum b + g / (...) when momentum is nonzero."""

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
                 centered=False, maximize=False):
        _check_range("learning rate", lr)
        _check_range("epsilon value", eps)
        _check_range("momentum value", momentum)
        _check_range("weight_decay value", weight_decay)
        _check_range("alpha value", alpha)
        super().__init__(params, {"lr": lr, "alpha": alpha, "eps": eps,
                                  "weight_decay": weight_decay, "momentum": momentum,
                                  "centered": centered, "maximize": maximize})

    @no_grad()
    def step(self, closure=None):
        loss = closure_loss(closure)
        for group in self.param_groups:
            lr, alpha, eps = _number(group, "lr"), _number(group, "alpha"), _number(group, "eps")
            wd, mu = _nonzero(group, "weight_decay"), _nonzero(group, "momentum")
            centered = _switch(group, "centered")
            for p, g in _grads(group, _switch(group, "maximize")):
                state = self.state[p]
                # The state a later step expects (a momentum or centering switched on after
                # the first step finds its buffer as PyTorch's would not: made here, zero).
                with state_init():
                    if not state:
                        state["step"] = _step_tensor()
                        state["square_avg"] = T.zeros_like(p)
                    if mu is not None and "momentum_buffer" not in state:
                        state["momentum_buffer"] = T.zeros_like(p)
                    if centered and "grad_avg" not in state:
                        state["grad_avg"] = T.zeros_like(p)
                state["step"].add_(1)
                if wd is not None:
                    g = g + p * wd
                square_avg = state["square_avg"]
                square_avg.mul_(alpha).add_(g * g, alpha=1 - alpha)
                if centered:
                    grad_avg = state["grad_avg"]
                    grad_avg.mul_(alpha).add_(g, alpha=1 - alpha)
                    avg = T.sqrt(square_avg - grad_avg * grad_avg) + eps
                else:
                    avg = T.sqrt(square_avg) + eps
                if mu is not None:
                    buf = state["momentum_buffer"]
                    buf.mul_(mu).add_(g / avg)
                    p.add_(buf, alpha=-lr)
                else:
                    p.add_(g * _scalar(-lr, p.dtype) / avg)
        return loss


class Adagrad(Optimizer):
    """s += g^2; p -= lr / (1 + (t - 1) lr_decay) g / (sqrt(s) + eps). Its state is made
    when the optimizer is (as PyTorch does), from `initial_accumulator_value`."""

    def __init__(self, params, lr=1e-2, lr_decay=0.0, weight_decay=0.0,
                 initial_accumulator_value=0.0, eps=1e-10, maximize=False):
        _check_range("learning rate", lr)
        _check_range("lr_decay value", lr_decay)
        _check_range("weight_decay value", weight_decay)
        _check_range("initial_accumulator_value", initial_accumulator_value)
        _check_range("epsilon value", eps)
        super().__init__(params, {"lr": lr, "lr_decay": lr_decay, "weight_decay": weight_decay,
                                      "initial_accumulator_value": initial_accumulator_value,
                                      "eps": eps, "maximize": maximize})
        for group in self.param_groups:
            self._init_group(group)

    def _init_group(self, group):
        init = dict.__getitem__(group, "initial_accumulator_value")
        with state_init():
            for p in _params(group, "params"):
                state = self.state[p]
                if not state:
                    state["step"] = _step_tensor()
                    state["sum"] = T.full_like(p, init)

    def add_param_group(self, group: dict):
        super().add_param_group(group)
        if hasattr(self, "state"):  # (during __init__, the state is made after the groups)
            self._init_group(self.param_groups[-1])

    @no_grad()
    def step(self, closure=None):
        loss = closure_loss(closure)
        for group in self.param_groups:
            lr, lr_decay, eps = _number(group, "lr"), _number(group, "lr_decay"), \
                _number(group, "eps")
            wd = _nonzero(group, "weight_decay")
            for p, g in _grads(group, _switch(group, "maximize")):
                state = self.state[p]
                if not state:  # (a state_dict loaded without this parameter's state)
                    self._init_group({"params": [p],
                                      "initial_accumulator_value":
                                          dict.__getitem__(group, "initial_accumulator_value")})
                step = state["step"]
                step.add_(1)
                if wd is not None:
                    g = g + p * wd
                clr = _scalar(lr / (1 + (_count(step) - 1) * lr_decay), p.dtype)
                total = state["sum"]
                total.add_(g * g)
                p.sub_(g * clr / (T.sqrt(total) + eps))
        return loss


class Adadelta(Optimizer):
    """v = rho v + (1 - rho) g^2; d = sqrt(u + eps) / sqrt(v + eps) g;
    u = rho u + (1 - rho) d^2; p -= lr d."""

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0, maximize=False):
        _check_range("learning rate", lr)
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho} (must be in [0, 1])")
        _check_range("epsilon value", eps)
        _check_range("weight_decay value", weight_decay)
        super().__init__(params, {"lr": lr, "rho": rho, "eps": eps, "weight_decay": weight_decay,
                                      "maximize": maximize})

    @no_grad()
    def step(self, closure=None):
        loss = closure_loss(closure)
        for group in self.param_groups:
            lr, rho, eps = _number(group, "lr"), _number(group, "rho"), _number(group, "eps")
            wd = _nonzero(group, "weight_decay")
            for p, g in _grads(group, _switch(group, "maximize")):
                state = self.state[p]
                if not state:
                    with state_init():
                        state["step"] = _step_tensor()
                        state["square_avg"] = T.zeros_like(p)
                        state["acc_delta"] = T.zeros_like(p)
                state["step"].add_(1)
                if wd is not None:
                    g = g + p * wd
                square_avg, acc_delta = state["square_avg"], state["acc_delta"]
                square_avg.mul_(rho).add_(g * g, alpha=1 - rho)
                delta = T.sqrt(acc_delta + eps) / T.sqrt(square_avg + eps) * g
                acc_delta.mul_(rho).add_(delta * delta, alpha=1 - rho)
                p.add_(delta, alpha=-lr)
        return loss


__all__ = ["Adadelta", "Adagrad", "RMSprop"]
