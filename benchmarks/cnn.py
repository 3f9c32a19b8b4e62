"""W8: a LeNet-5 style CNN training step (issue 17), its float64 reference and its builders.

The network: conv 1->6 5x5 pad 2, ReLU, max-pool 2, conv 6->16 5x5, ReLU, max-pool 2,
flatten, 400 -> 120 -> 84 -> 10, cross-entropy, SGD with momentum 0.9, on a batch of 64
MNIST-sized images (1x28x28).  Parameters are listed in `model.parameters()` order
(c1.weight, c1.bias, c2.weight, ..., f3.bias) in PyTorch's layouts.

The reference is plain numpy written for this file (windows by sliding_window_view and
einsum, max-pooling's gradient to the first maximum of each window, as PyTorch), in
float64; the numpy peer runs the same code in float32.  Only numpy is imported at the
top (a peer process never loads tracejit).
"""
from __future__ import annotations

import math

import numpy as np

from . import trainrefs
from .trainrefs import reference_result

BATCH = 64
LR_CNN, MOMENTUM = 0.01, 0.9
SHAPES = [(6, 1, 5, 5), (6,), (16, 6, 5, 5), (16,), (120, 400), (120,), (84, 120), (84,),
          (10, 84), (10,)]


def cnn_inputs(rng: np.random.Generator) -> dict:
    """Images, labels and parameters drawn as PyTorch initializes them: weights and biases
    ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (kaiming_uniform with a=sqrt(5) is that bound)."""
    params = []
    for shape in SHAPES:
        fan_in = math.prod(params[-1].shape[1:]) if len(shape) == 1 else math.prod(shape[1:])
        bound = 1.0 / math.sqrt(fan_in)
        params.append(rng.uniform(-bound, bound, shape).astype(np.float32))
    return {"x": rng.standard_normal((BATCH, 1, 28, 28)).astype(np.float32),
            "y": rng.integers(0, 10, (BATCH,)).astype(np.int64), "params": params}


# --------------------------------------------------------------------------------------
# the numpy reference (float64) / numpy peer (float32)

def _windows(x, k, pad):
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    return np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3)), xp.shape


def _conv_forward(x, w, b, pad):
    win, _ = _windows(x, w.shape[2], pad)              # (N, C, oh, ow, k, k)
    return np.einsum("nchwij,ocij->nohw", win, w, optimize=True) + b[None, :, None, None]


def _conv_backward(x, w, pad, dy):
    k = w.shape[2]
    win, padded = _windows(x, k, pad)
    dw = np.einsum("nchwij,nohw->ocij", win, dy, optimize=True)
    db = dy.sum(axis=(0, 2, 3))
    dxp = np.zeros(padded, dy.dtype)
    oh, ow = dy.shape[2:]
    for i in range(k):
        for j in range(k):
            dxp[:, :, i:i + oh, j:j + ow] += np.einsum("nohw,oc->nchw", dy, w[:, :, i, j])
    return dxp[:, :, pad:padded[2] - pad, pad:padded[3] - pad], dw, db


def _pool_forward(x):
    n, c, h, w = x.shape
    win = x.reshape(n, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(
        n, c, h // 2, w // 2, 4)
    first = win.argmax(axis=-1)
    return np.take_along_axis(win, first[..., None], -1)[..., 0], first


def _pool_backward(first, dy, shape):
    n, c, h, w = shape
    dwin = np.zeros((n, c, h // 2, w // 2, 4), dy.dtype)
    np.put_along_axis(dwin, first[..., None], dy[..., None], -1)
    return dwin.reshape(n, c, h // 2, w // 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(shape)


class NumpyCNN:
    """LeNet forward, backward and SGD-momentum step in numpy of one dtype."""

    def __init__(self, params, x, y, dtype=np.float64):
        self.params = [np.array(p, dtype) for p in params]
        self.bufs = [None] * len(self.params)
        self.grads = None
        self.x, self.y, self.dtype = np.asarray(x, dtype), np.asarray(y), dtype

    def step(self) -> float:
        c1w, c1b, c2w, c2b, f1w, f1b, f2w, f2b, f3w, f3b = self.params
        x, y = self.x, self.y
        n = x.shape[0]
        z1 = _conv_forward(x, c1w, c1b, 2)
        a1 = np.maximum(z1, 0)
        p1, i1 = _pool_forward(a1)
        z2 = _conv_forward(p1, c2w, c2b, 0)
        a2 = np.maximum(z2, 0)
        p2, i2 = _pool_forward(a2)
        h0 = p2.reshape(n, -1)
        z3 = h0 @ f1w.T + f1b
        h1 = np.maximum(z3, 0)
        z4 = h1 @ f2w.T + f2b
        h2 = np.maximum(z4, 0)
        logits = h2 @ f3w.T + f3b
        m = logits.max(axis=1, keepdims=True)
        lse = m[:, 0] + np.log(np.exp(logits - m).sum(axis=1))
        rows = np.arange(n)
        loss = np.mean(lse - logits[rows, y])
        d = np.exp(logits - lse[:, None])
        d[rows, y] -= 1
        d /= n
        g = [None] * 10
        g[8], g[9] = d.T @ h2, d.sum(axis=0)
        d = (d @ f3w) * (z4 > 0)
        g[6], g[7] = d.T @ h1, d.sum(axis=0)
        d = (d @ f2w) * (z3 > 0)
        g[4], g[5] = d.T @ h0, d.sum(axis=0)
        d = (d @ f1w).reshape(p2.shape)
        d = _pool_backward(i2, d, a2.shape) * (z2 > 0)
        d, g[2], g[3] = _conv_backward(p1, c2w, 0, d)
        d = _pool_backward(i1, d, a1.shape) * (z1 > 0)
        _, g[0], g[1] = _conv_backward(x, c1w, 2, d)
        self.grads = [np.asarray(v, self.dtype) for v in g]
        for k, (p, gk) in enumerate(zip(self.params, self.grads)):
            # PyTorch's SGD momentum: the first buffer is the gradient itself
            self.bufs[k] = gk.copy() if self.bufs[k] is None else MOMENTUM * self.bufs[k] + gk
            self.params[k] = (p - self.dtype(LR_CNN) * self.bufs[k]).astype(self.dtype)
        return float(loss)


def ref_cnn_train(inputs, steps=None) -> dict:
    net = NumpyCNN(inputs["params"], inputs["x"], inputs["y"])
    return reference_result(net, inputs["params"], steps)


def numpy_runner(inputs):
    net = NumpyCNN(inputs["params"], inputs["x"], inputs["y"], np.float32)
    return trainrefs.numpy_runner(net)


# --------------------------------------------------------------------------------------
# tracejit (eager and compiled) and PyTorch

def _lenet(nn, F):
    class LeNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(1, 6, 5, padding=2)
            self.c2 = nn.Conv2d(6, 16, 5)
            self.f1 = nn.Linear(400, 120)
            self.f2 = nn.Linear(120, 84)
            self.f3 = nn.Linear(84, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.c1(x)), 2)
            x = F.max_pool2d(F.relu(self.c2(x)), 2)
            x = x.flatten(1)
            return self.f3(F.relu(self.f2(F.relu(self.f1(x)))))
    return LeNet()


def _runner(model, opt, x, y, F, compile_fn, info_of):
    from .workloads import Runner

    def train_step(x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    step = compile_fn(train_step)

    def call():
        return step(x, y)

    collect = trainrefs.model_collect(call, model)
    return Runner(call, collect, lambda: info_of(step, x, y), step)


def tracejit_runner(inputs, compiled: bool):
    import eager
    import eager.nn.functional as F
    import tracer
    from eager import nn, optim

    model = _lenet(nn, F)
    names = [n for n, _ in model.named_parameters()]
    model.load_state_dict({n: eager.tensor(p) for n, p in zip(names, inputs["params"])})
    opt = optim.SGD(model.parameters(), lr=LR_CNN, momentum=MOMENTUM)

    def info(step, x, y):
        if not compiled:
            return {}
        c = step.get_concrete_function(x, y)
        return {"trace_count": step.trace_count, "eqns": len(c.graph.eqns),
                "kernels": len(c.kernels)}
    return _runner(model, opt, eager.from_numpy(inputs["x"]), eager.from_numpy(inputs["y"]),
                   F, tracer.function if compiled else (lambda f: f), info)


def torch_runner(inputs, compiled: bool = False):
    import torch
    import torch.nn.functional as TF

    model = _lenet(torch.nn, TF)
    with torch.no_grad():
        for p, v in zip(model.parameters(), inputs["params"]):
            p.copy_(torch.from_numpy(v))
    opt = torch.optim.SGD(model.parameters(), lr=LR_CNN, momentum=MOMENTUM)
    return _runner(model, opt, torch.from_numpy(inputs["x"]), torch.from_numpy(inputs["y"]),
                   TF, torch.compile if compiled else (lambda f: f), lambda *a: {})
