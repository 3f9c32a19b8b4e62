"""SGD with momentum, dampening, Nesterov and weight decay (PyTorch's update rule)."""
from __future__ import annotations

from .. import functions as T
from ..autograd import no_grad
from ..dispatch import state_init, tracing
from .optimizer import Optimizer, _nonzero, _number, _params, _switch, closure_loss


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
        loss = closure_loss(closure)
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
                    state = self.state[p]
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

__all__ = ["SGD"]
