"""Optimizers: SGD, Adam, AdamW with PyTorch's update rules and state layout.

Updates are in-place tensor ops under no_grad, so they run eagerly and, inside
a traced function, record as functional updates of the parameters and state.
The step counter is a 0-d tensor (as in PyTorch), so stepping never changes a
Python constant that a trace would bake in.
"""
from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from . import functions as T
from .autograd import no_grad
from .dispatch import LIVE, TRUTH, VALUE, _state, note_item_write, read_item, state_init, tracing
from .tensor import Tensor

_params = dict.__getitem__  # a group's parameter list, read without a trace event


class ParamGroup(dict):
    """One of `optimizer.param_groups`: a dict whose reads and writes a trace sees.

    Hyperparameters may change between calls of a compiled training step (an LR schedule,
    ``group["lr"] = lr`` inside the step). The optimizer reads each through
    eager.dispatch.read_item, saying how it uses it (a number for tensor math is read at
    every call; a switch such as ``nesterov`` is guarded); user code that reads or writes a
    group inside a traced function is seen here.
    """

    __slots__ = ("name",)

    def __getitem__(self, key):
        if _state.on_item is None:
            return dict.__getitem__(self, key)
        return read_item(self, key, VALUE)

    def get(self, key, default=None):
        if key not in self:
            return default
        return self[key]

    def __setitem__(self, key, value):
        if _state.on_item is not None:  # (before the write: a trace notes the old value)
            note_item_write(self, key, value)
        dict.__setitem__(self, key, value)


class Optimizer:
    def __init__(self, params, defaults: dict):
        self.defaults = dict(defaults)
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(params[0], dict):
            params = [{"params": params}]
        self.param_groups = []
        for group in params:
            self.add_param_group(group)
        # A defaultdict as in PyTorch: opt.state[p] is {} for a parameter not stepped yet.
        self.state = defaultdict(dict)

    def add_param_group(self, group: dict):
        group = ParamGroup(group)
        group.name = f"optimizer.param_groups[{len(self.param_groups)}]"
        ps = _params(group, "params")
        dict.__setitem__(group, "params", [ps] if isinstance(ps, Tensor) else list(ps))
        for p in _params(group, "params"):
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, got {type(p).__name__}")
            # As PyTorch: frozen parameters (requires_grad=False) are accepted and skipped
            # while their grad is None; only non-leaf tensors are refused.
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor; optimize the leaf it was "
                                 "computed from, or .detach().requires_grad_() a copy")
        for k, v in self.defaults.items():
            if k not in group:
                dict.__setitem__(group, k, v)
        self.param_groups.append(group)

    def zero_grad(self, set_to_none: bool = True):
        for group in self.param_groups:
            for p in _params(group, "params"):
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    p.grad = _zeroed(p.grad)

    def state_dict(self):
        index = {}
        groups = []
        for group in self.param_groups:
            ids = []
            for p in _params(group, "params"):
                index.setdefault(id(p), len(index))
                ids.append(index[id(p)])
            g = {k: v for k, v in group.items() if k != "params"}
            g["params"] = ids
            groups.append(g)
        state = {index[id(p)]: dict(s) for p, s in self.state.items() if id(p) in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        params = [p for g in self.param_groups for p in g["params"]]
        for group, saved in zip(self.param_groups, state_dict["param_groups"]):
            for k, v in saved.items():
                if k != "params":
                    group[k] = v
        self.state = defaultdict(dict)
        for i, s in state_dict["state"].items():
            self.state[params[i]] = {k: (Tensor._wrap(v._data.copy()) if isinstance(v, Tensor)
                                         else v) for k, v in s.items()}

    def __repr__(self):
        lines = [type(self).__name__ + " ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(g):
                if k != "params":
                    lines.append(f"    {k}: {g[k]}")
        lines.append(")")
        return "\n".join(lines)


def _zeroed(grad: Tensor) -> Tensor:
    """A fresh zero gradient (zero_grad(set_to_none=False)). PyTorch zeroes .grad in place;
    a new array gives the same values and is safe when .grad is a view that must not be
    written, such as a gradient made with create_graph=True."""
    return T.zeros_like(grad)


def _number(group, key):
    """A hyperparameter fed to tensor math: a float eagerly, a per-call input when traced."""
    return read_item(group, key, LIVE)


def _switch(group, key):
    """A hyperparameter that decides what the step does: a trace is valid for its value."""
    return read_item(group, key, VALUE)


def _nonzero(group, key):
    """A hyperparameter used only if it is nonzero (`if weight_decay:`): None when it is
    zero, else its value (read at every call when traced). A trace is valid while it stays
    zero, or nonzero."""
    if read_item(group, key, TRUTH):
        return read_item(group, key, LIVE)
    return None


def _f64(x):
    """A float64 0-d tensor of a hyperparameter (a traced per-call input already is one)."""
    return x if isinstance(x, Tensor) else T.const(x, np.float64)


def _step_tensor():
    return Tensor._wrap(np.array(0.0, np.float32))


class SGD(Optimizer):
    """p -= lr * (g + wd p), with momentum buffers b = mu b + (1 - dampening) g."""

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False, maximize=False):
        if lr < 0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize))

    @no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            mu, wd = _nonzero(group, "momentum"), _nonzero(group, "weight_decay")
            lr = _number(group, "lr")
            maximize, nesterov = _switch(group, "maximize"), _switch(group, "nesterov")
            for p in _params(group, "params"):
                g = p.grad
                if g is None:
                    continue
                if maximize:
                    g = -g
                if wd is not None:
                    g = g + p * wd
                if mu is not None:
                    dampening = _nonzero(group, "dampening")
                    state = self.state.setdefault(p, {})
                    buf = state.get("momentum_buffer")
                    if buf is None and dampening is None and tracing():
                        # Traced: a zero buffer made as existing state, then the update of
                        # every later step, which on zeros gives mu * 0 + g = g (PyTorch's
                        # first buffer; only a -0.0 gradient comes out +0.0). So the trace
                        # of the first step serves every step (see state_init).
                        with state_init():
                            buf = state["momentum_buffer"] = T.zeros_like(p)
                    if buf is None:
                        # PyTorch's first step: the buffer is a copy of the gradient. Made
                        # by a creation function and filled in place, so a traced step
                        # materializes it (a one-off trace; with dampening, mu * 0 +
                        # (1 - dampening) g would not be g).
                        buf = state["momentum_buffer"] = T.zeros_like(p).copy_(g)
                    else:
                        buf.mul_(mu)
                        buf.add_(g if dampening is None else g * (1 - dampening))
                    g = g + buf * mu if nesterov else buf
                p.add_(g, alpha=-lr)
        return loss


class Adam(Optimizer):
    """Adam with bias correction; `weight_decay` adds wd * p to the gradient (L2)."""

    _decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 amsgrad=False, maximize=False):
        if lr < 0 or eps < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"Invalid Adam hyper-parameters lr={lr} betas={betas} eps={eps}")
        if amsgrad:
            raise NotImplementedError("amsgrad is not supported")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, maximize=maximize))

    @no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            eps, wd = _number(group, "eps"), _nonzero(group, "weight_decay")
            lr = _number(group, "lr")
            b1, b2 = _number(group, "betas")
            maximize = _switch(group, "maximize")
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


__all__ = ["Optimizer", "ParamGroup", "SGD", "Adam", "AdamW"]
