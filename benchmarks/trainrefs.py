"""What every training workload (W5, W7, W8, W9, W10) reports, written once.

A training check runs `TRAIN_CHECK_STEPS` steps and compares the losses, and each
parameter and gradient after the last step, with the float64 numpy reference. The
reference model classes (cnn.NumpyCNN, gpt.NumpyGPT, lstm_lm.NumpyLM) share one interface:
`step() -> loss`, and `params` / `grads` lists.
"""
from __future__ import annotations

import numpy as np


def reference_result(net, initial_params, steps=None) -> dict:
    """The float64 reference: `steps` (default TRAIN_CHECK_STEPS) steps of numpy model `net`,
    with the initial parameters as `_bases` (the tolerance scales with how far each moved)."""
    from .workloads import TRAIN_CHECK_STEPS

    out = {"loss": np.array([net.step() for _ in range(steps or TRAIN_CHECK_STEPS)])}
    for k in range(len(net.params)):
        out[f"param[{k}]"] = net.params[k]
        out[f"grad[{k}]"] = net.grads[k]
    out["_bases"] = {f"param[{k}]": np.asarray(p, np.float64)
                     for k, p in enumerate(initial_params)}
    return out


def adam_move_bound(lr: float, betas: tuple, steps: int) -> float:
    """The most one element can move in `steps` Adam (or AdamW, without its weight decay)
    steps, whatever its gradients: step t moves it by lr * |m_t| / (sqrt(v_t) + eps) with
    the bias-corrected moments m_t = sum_s w_s g_s, v_t = sum_s u_s g_s^2 (w_s = (1 - b1)
    b1^(t-s) / (1 - b1^t), u_s likewise with b2), and by Cauchy-Schwarz |m_t| <= sqrt(sum_s
    w_s^2 / u_s) * sqrt(v_t). (1.0 per step at t = 1; at most 1.0004 for W9's betas.)

    Where an element's exact gradient is zero, a float32 program's gradient is rounding
    noise (1e-11 for W9's key biases) that Adam divides by sqrt(v) + eps (eps = 1e-8): its
    update is up to this size and set by the rounding, where the float64 reference's
    gradient (1e-20) moves it by 1e-14. Such an element can only be checked against this
    bound."""
    b1, b2 = betas
    total = 0.0
    for t in range(1, steps + 1):
        ratio = sum(((1 - b1) * b1 ** (t - s) / (1 - b1 ** t)) ** 2
                    / ((1 - b2) * b2 ** (t - s) / (1 - b2 ** t)) for s in range(1, t + 1))
        total += lr * ratio ** 0.5
    return total


def numpy_runner(net):
    """The numpy peer: the reference model run in float32."""
    from .workloads import TRAIN_CHECK_STEPS, Runner

    def collect():
        out = {"loss": np.array([net.step() for _ in range(TRAIN_CHECK_STEPS)])}
        for k, (p, g) in enumerate(zip(net.params, net.grads)):
            out[f"param[{k}]"], out[f"grad[{k}]"] = p.copy(), g.copy()
        return out
    return Runner(net.step, collect)


def model_collect(call, model):
    """`collect` for a tracejit or PyTorch model: the losses of TRAIN_CHECK_STEPS calls, then
    its parameters and gradients (as numpy copies)."""
    from .workloads import TRAIN_CHECK_STEPS

    def collect():
        out = {"loss": np.array([call().item() for _ in range(TRAIN_CHECK_STEPS)])}
        for k, p in enumerate(model.parameters()):
            out[f"param[{k}]"] = p.detach().numpy().copy()
            out[f"grad[{k}]"] = p.grad.numpy().copy()
        return out
    return collect
