"""W9: a GPT-2 style training step (issue 17), its float64 reference and its builders.

The model: token and position embeddings, LAYERS pre-LayerNorm blocks (causal
multi-head self-attention through `scaled_dot_product_attention`, then a GELU (tanh) MLP of
width 4C), a final LayerNorm and a head tied to the token embedding; cross-entropy over
every position; `clip_grad_norm_(1.0)`; AdamW with two parameter groups (weight decay on
matrices only).  Parameters are listed in `model.parameters()` order (see `NAMES`).

The reference is plain numpy written for this file (forward and a hand-derived backward),
in float64; the numpy peer runs it in float32.  Only numpy is imported at the top (a peer
process never loads tracejit).
"""
from __future__ import annotations

import math

import numpy as np

from . import trainrefs
from .trainrefs import reference_result

BATCH, CONTEXT, VOCAB, WIDTH, HEADS, LAYERS = 16, 64, 65, 128, 4, 2
LR_GPT, BETAS_GPT, EPS_GPT, DECAY, MAX_NORM = 1e-3, (0.9, 0.95), 1e-8, 0.1, 1.0
GELU_C = math.sqrt(2.0 / math.pi)
_BLOCK = ["ln1.weight", "ln1.bias", "qkv.weight", "qkv.bias", "proj.weight", "proj.bias",
          "ln2.weight", "ln2.bias", "fc.weight", "fc.bias", "out.weight", "out.bias"]


def names(layers=LAYERS) -> list:
    return (["wte.weight", "wpe.weight"] + [f"h.{i}.{n}" for i in range(layers) for n in _BLOCK]
            + ["ln_f.weight", "ln_f.bias"])


def gpt_inputs(rng: np.random.Generator, batch=BATCH, context=CONTEXT, vocab=VOCAB,
               width=WIDTH, layers=LAYERS) -> dict:
    """Token ids, next-token targets and GPT-2's initialization: matrices ~ N(0, 0.02),
    biases 0, LayerNorm weights 1."""
    c = width
    shapes = {"wte.weight": (vocab, c), "wpe.weight": (context, c), "ln1.weight": (c,),
              "ln1.bias": (c,), "qkv.weight": (3 * c, c), "qkv.bias": (3 * c,),
              "proj.weight": (c, c), "proj.bias": (c,), "ln2.weight": (c,), "ln2.bias": (c,),
              "fc.weight": (4 * c, c), "fc.bias": (4 * c,), "out.weight": (c, 4 * c),
              "out.bias": (c,), "ln_f.weight": (c,), "ln_f.bias": (c,)}
    params = []
    for name in names(layers):
        short = name.split(".", 2)[-1] if name.startswith("h.") else name
        shape = shapes[short]
        if len(shape) == 2:
            p = rng.normal(0.0, 0.02, shape)
        elif short.endswith("weight"):
            p = np.ones(shape)
        else:
            p = np.zeros(shape)
        params.append(p.astype(np.float32))
    tokens = rng.integers(0, vocab, (batch, context + 1))
    return {"x": tokens[:, :-1].astype(np.int64), "y": tokens[:, 1:].astype(np.int64),
            "params": params, "heads": heads_of(width)}


def heads_of(width):
    return HEADS if width == WIDTH else max(1, width // 8)


# --------------------------------------------------------------------------------------
# the numpy reference (float64) / numpy peer (float32)

def _ln(x, g, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    xc = x - mu
    rstd = 1.0 / np.sqrt((xc * xc).mean(-1, keepdims=True) + eps)
    xhat = xc * rstd
    return xhat * g + b, (xhat, rstd, g)


def _ln_back(dy, cache):
    xhat, rstd, g = cache
    red = tuple(range(dy.ndim - 1))
    dg, db = (dy * xhat).sum(red), dy.sum(red)
    dxh = dy * g
    dx = rstd * (dxh - dxh.mean(-1, keepdims=True) - xhat * (dxh * xhat).mean(-1, keepdims=True))
    return dx, dg, db


def _lin(x, w, b):
    return x @ w.T + b


def _lin_back(dy, x, w):
    dy2, x2 = dy.reshape(-1, dy.shape[-1]), x.reshape(-1, x.shape[-1])
    return dy @ w, dy2.T @ x2, dy2.sum(0)


class NumpyGPT:
    """Forward, backward, clipping and AdamW in numpy of one dtype."""

    def __init__(self, params, x, y, heads, dtype=np.float64):
        self.params = [np.array(p, dtype) for p in params]
        self.layers = (len(params) - 4) // len(_BLOCK)
        self.m = [np.zeros_like(p) for p in self.params]
        self.v = [np.zeros_like(p) for p in self.params]
        self.t = 0
        self.grads = None
        self.x, self.y, self.heads, self.dtype = np.asarray(x), np.asarray(y), heads, dtype

    def _attention(self, h, wq, bq):
        B, T, C = h.shape
        H = self.heads
        D = C // H
        qkv = _lin(h, wq, bq).reshape(B, T, 3, H, D).transpose(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        s = (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(D)
        s = np.where(np.tri(T, T, 0, dtype=bool), s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        y = (p @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
        return y, (q, k, v, p)

    def _attention_back(self, dy, cache):
        q, k, v, p = cache
        B, H, T, D = q.shape
        dy = dy.reshape(B, T, H, D).transpose(0, 2, 1, 3)
        dp = dy @ v.transpose(0, 1, 3, 2)
        dv = p.transpose(0, 1, 3, 2) @ dy
        ds = p * (dp - (dp * p).sum(-1, keepdims=True)) / math.sqrt(D)
        dq, dk = ds @ k, ds.transpose(0, 1, 3, 2) @ q
        return np.stack([dq, dk, dv]).transpose(1, 3, 0, 2, 4).reshape(B, T, 3 * H * D)

    def step(self) -> float:
        P = self.params
        wte, wpe = P[0], P[1]
        x_ids, y = self.x, self.y
        B, T = x_ids.shape
        x = wte[x_ids] + wpe[:T]
        caches = []
        for i in range(self.layers):
            (g1, b1, wq, bq, wp, bp, g2, b2, wf, bf, wo, bo) = P[2 + 12 * i: 14 + 12 * i]
            h1, c1 = _ln(x, g1, b1)
            a, ca = self._attention(h1, wq, bq)
            x2 = x + _lin(a, wp, bp)
            h2, c2 = _ln(x2, g2, b2)
            f = _lin(h2, wf, bf)
            t = np.tanh(GELU_C * (f + 0.044715 * f ** 3))
            gf = 0.5 * f * (1 + t)
            x3 = x2 + _lin(gf, wo, bo)
            caches.append((h1, c1, a, ca, h2, c2, f, t, gf))
            x = x3
        xf, cf = _ln(x, P[-2], P[-1])
        logits = (xf @ wte.T).reshape(B * T, -1)
        m = logits.max(1, keepdims=True)
        lse = m[:, 0] + np.log(np.exp(logits - m).sum(1))
        rows, tgt = np.arange(B * T), y.reshape(-1)
        loss = np.mean(lse - logits[rows, tgt])
        d = np.exp(logits - lse[:, None])
        d[rows, tgt] -= 1
        d = (d / (B * T)).reshape(B, T, -1)
        g = [None] * len(P)
        dwte = d.reshape(B * T, -1).T @ xf.reshape(B * T, -1)
        dx, g[-2], g[-1] = _ln_back(d @ wte, cf)
        for i in reversed(range(self.layers)):
            (g1, b1, wq, bq, wp, bp, g2, b2, wf, bf, wo, bo) = P[2 + 12 * i: 14 + 12 * i]
            h1, c1, a, ca, h2, c2, f, t, gf = caches[i]
            o = 2 + 12 * i
            dgf, g[o + 10], g[o + 11] = _lin_back(dx, gf, wo)
            dgelu = 0.5 * (1 + t) + 0.5 * f * (1 - t * t) * GELU_C * (1 + 3 * 0.044715 * f * f)
            dh2, g[o + 8], g[o + 9] = _lin_back(dgf * dgelu, h2, wf)
            dx2, g[o + 6], g[o + 7] = _ln_back(dh2, c2)
            dx = dx + dx2
            da, g[o + 4], g[o + 5] = _lin_back(dx, a, wp)
            dh1, g[o + 2], g[o + 3] = _lin_back(self._attention_back(da, ca), h1, wq)
            dx1, g[o], g[o + 1] = _ln_back(dh1, c1)
            dx = dx + dx1
        np.add.at(dwte, x_ids.reshape(-1), dx.reshape(B * T, -1))
        g[0] = dwte
        g[1] = np.zeros_like(wpe)
        g[1][:T] = dx.sum(0)
        self.grads = [np.asarray(v, self.dtype) for v in g]
        norm = math.sqrt(sum(float((v.astype(np.float64) ** 2).sum()) for v in self.grads))
        coef = min(MAX_NORM / (norm + 1e-6), 1.0)
        self.grads = [(v * self.dtype(coef)).astype(self.dtype) for v in self.grads]
        self._adamw()
        return float(loss)

    def _adamw(self):
        self.t += 1
        b1, b2 = BETAS_GPT
        bc1, bc2 = 1 - b1 ** self.t, 1 - b2 ** self.t
        for k, (p, gk) in enumerate(zip(self.params, self.grads)):
            decay = DECAY if p.ndim >= 2 else 0.0
            p = p * self.dtype(1 - LR_GPT * decay)
            self.m[k] = b1 * self.m[k] + (1 - b1) * gk
            self.v[k] = b2 * self.v[k] + (1 - b2) * gk * gk
            denom = np.sqrt(self.v[k]) / math.sqrt(bc2) + EPS_GPT
            self.params[k] = (p - (LR_GPT / bc1) * self.m[k] / denom).astype(self.dtype)


def ref_gpt_train(inputs, steps=None) -> dict:
    from .workloads import TRAIN_CHECK_STEPS

    net = NumpyGPT(inputs["params"], inputs["x"], inputs["y"], inputs["heads"])
    out = reference_result(net, inputs["params"], steps)
    out["_free"] = key_bias_free(inputs["params"], steps or TRAIN_CHECK_STEPS)
    return out


def key_bias_free(params, steps) -> dict:
    """{"param[k]": (mask, bound)} for each block's qkv.bias: its key part (the middle third)
    has an exact gradient of zero, as a key bias b adds q_i . b to every score of query
    row i, which the softmax over that row takes away. A float32 program's gradient there
    is rounding noise (~1e-11) that AdamW (eps 1e-8, no decay on biases) makes an update
    of up to `trainrefs.adam_move_bound` set by that rounding (PyTorch's with one thread
    was 1.03e-3 of qkv.bias's whole update, normwise), so those elements are held to that
    bound (times 1 + 1e-6 for float32's own rounding of it) and the normwise comparison
    covers the query and value parts."""
    from .trainrefs import adam_move_bound

    bound = adam_move_bound(LR_GPT, BETAS_GPT, steps) * (1 + 1e-6)
    free = {}
    for k, name in enumerate(names((len(params) - 4) // len(_BLOCK))):
        if name.endswith("qkv.bias"):
            c = params[k].shape[0] // 3
            mask = np.zeros(params[k].shape, bool)
            mask[c:2 * c] = True
            free[f"param[{k}]"] = (mask, bound)
    return free


def numpy_runner(inputs):
    net = NumpyGPT(inputs["params"], inputs["x"], inputs["y"], inputs["heads"], np.float32)
    return trainrefs.numpy_runner(net)


# --------------------------------------------------------------------------------------
# tracejit (eager and compiled) and PyTorch: the same model code on either library

def make_gpt(nn, F, vocab, context, width, heads, layers):
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(width)
            self.qkv = nn.Linear(width, 3 * width)
            self.proj = nn.Linear(width, width)
            self.ln2 = nn.LayerNorm(width)
            self.fc = nn.Linear(width, 4 * width)
            self.out = nn.Linear(4 * width, width)

        def forward(self, x):
            B, T, C = x.shape
            qkv = self.qkv(self.ln1(x)).reshape(B, T, 3, heads, C // heads)
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab, width)
            self.wpe = nn.Embedding(context, width)
            self.h = nn.ModuleList([Block() for _ in range(layers)])
            self.ln_f = nn.LayerNorm(width)

        def forward(self, idx):
            x = self.wte(idx) + self.wpe.weight[:idx.shape[1]]
            for block in self.h:
                x = block(x)
            return F.linear(self.ln_f(x), self.wte.weight)  # the head tied to wte
    return GPT()


def _optimizer(optim, model):
    decay = [p for p in model.parameters() if p.ndim >= 2]
    other = [p for p in model.parameters() if p.ndim < 2]
    return optim.AdamW([{"params": decay, "weight_decay": DECAY},
                        {"params": other, "weight_decay": 0.0}],
                       lr=LR_GPT, betas=BETAS_GPT, eps=EPS_GPT)


def _runner(model, opt, x, y, F, clip, compile_fn, info_of):
    from .workloads import Runner

    def train_step(x, y):
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        clip(model.parameters(), MAX_NORM)
        opt.step()
        return loss
    step = compile_fn(train_step)

    def call():
        return step(x, y)

    collect = trainrefs.model_collect(call, model)
    return Runner(call, collect, lambda: info_of(step, x, y), step)


def _dims(inputs):
    p = inputs["params"]
    return {"vocab": p[0].shape[0], "context": p[1].shape[0], "width": p[0].shape[1],
                "heads": inputs["heads"], "layers": (len(p) - 4) // len(_BLOCK)}


def tracejit_model(inputs):
    """(model, optimizer) holding copies of the inputs' parameters."""
    import eager
    import eager.nn.functional as F
    from eager import nn, optim

    dims = _dims(inputs)
    model = make_gpt(nn, F, **dims)
    model.load_state_dict({n: eager.tensor(p) for n, p in
                           zip(names(dims["layers"]), inputs["params"])})
    return model, _optimizer(optim, model)


def tracejit_runner(inputs, compiled: bool):
    import eager
    import eager.nn.functional as F
    import tracer
    from eager.nn.utils import clip_grad_norm_

    model, opt = tracejit_model(inputs)

    def info(step, x, y):
        if not compiled:
            return {}
        c = step.get_concrete_function(x, y)
        return {"trace_count": step.trace_count, "eqns": len(c.graph.eqns),
                "kernels": len(c.kernels)}
    return _runner(model, opt, eager.from_numpy(inputs["x"]), eager.from_numpy(inputs["y"]),
                   F, clip_grad_norm_, tracer.function if compiled else (lambda f: f), info)


def torch_runner(inputs, compiled: bool = False):
    import torch
    import torch.nn.functional as TF

    dims = _dims(inputs)
    model = make_gpt(torch.nn, TF, **dims)
    model.load_state_dict({n: torch.from_numpy(p) for n, p in
                           zip(names(dims["layers"]), inputs["params"])})
    opt = _optimizer(torch.optim, model)
    return _runner(model, opt, torch.from_numpy(inputs["x"]), torch.from_numpy(inputs["y"]),
                   TF, torch.nn.utils.clip_grad_norm_,
                   torch.compile if compiled else (lambda f: f), lambda *a: {})
