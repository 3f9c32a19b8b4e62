"""W10: an LSTM language-model training step (issue 17), its float64 reference and builders.

PyTorch's word_language_model: embedding 1000 -> 128, a 2-layer LSTM (hidden 128), a decoder
tied to the embedding (logits = out @ E^T + b), cross-entropy over a 35 x 20 batch of token
ids, then `clip_grad_norm_(0.25)` and plain SGD (lr 20), as the example trains.  The hidden
state is carried from one step to the next, detached (`repackage_hidden`).  No dropout (the
reference must be deterministic).  Parameters are in `model.parameters()` order:
encoder.weight, rnn.weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, the same for l1,
decoder.bias (decoder.weight is encoder.weight).

The reference is plain numpy written here from PyTorch's documented LSTM equations
(gates i, f, g, o), with a hand-written backward through time, in float64; the numpy peer
runs the same code in float32.  Only numpy is imported at the top.
"""
from __future__ import annotations

import math

import numpy as np

from . import trainrefs
from .trainrefs import reference_result

SEQ, BATCH, VOCAB, HIDDEN, LAYERS = 35, 20, 1000, 128, 2
LR_LM, CLIP = 20.0, 0.25


def lm_inputs(rng: np.random.Generator) -> dict:
    """Token ids, next-token targets and parameters initialized as the example does
    (embedding U(-0.1, 0.1), decoder bias 0, LSTM U(-1/sqrt(hidden), 1/sqrt(hidden)))."""
    ids = rng.integers(0, VOCAB, (SEQ + 1, BATCH)).astype(np.int64)
    params = [rng.uniform(-0.1, 0.1, (VOCAB, HIDDEN)).astype(np.float32)]
    bound = 1.0 / math.sqrt(HIDDEN)
    for _ in range(LAYERS):
        for shape in [(4 * HIDDEN, HIDDEN), (4 * HIDDEN, HIDDEN), (4 * HIDDEN,), (4 * HIDDEN,)]:
            params.append(rng.uniform(-bound, bound, shape).astype(np.float32))
    params.append(np.zeros(VOCAB, np.float32))
    return {"x": ids[:-1], "y": ids[1:], "params": params}


# --------------------------------------------------------------------------------------
# the numpy reference (float64) / numpy peer (float32)

def _sig(v):
    return 1.0 / (1.0 + np.exp(-v))


class NumpyLM:
    """Forward, backward through time, clipping and SGD in numpy of one dtype."""

    def __init__(self, params, x, y, dtype=np.float64):
        self.params = [np.array(p, dtype) for p in params]
        self.grads = None
        self.x, self.y, self.dtype = np.asarray(x), np.asarray(y), dtype
        self.hidden = [np.zeros((LAYERS, BATCH, HIDDEN), dtype) for _ in range(2)]

    def _layer(self, inp, h, c, w_ih, w_hh, b_ih, b_hh):
        H = HIDDEN
        gx = inp @ w_ih.T + b_ih + b_hh
        cache, outs = [], []
        for t in range(inp.shape[0]):
            a = gx[t] + h @ w_hh.T
            i, f, g, o = _sig(a[:, :H]), _sig(a[:, H:2 * H]), np.tanh(a[:, 2 * H:3 * H]), \
                _sig(a[:, 3 * H:])
            c_prev, h_prev = c, h
            c = f * c + i * g
            tc = np.tanh(c)
            h = o * tc
            cache.append((i, f, g, o, c_prev, h_prev, tc))
            outs.append(h)
        return np.stack(outs), h, c, cache

    def _layer_back(self, inp, dout, cache, w_ih, w_hh):
        dw_ih, dw_hh = np.zeros_like(w_ih), np.zeros_like(w_hh)
        db = np.zeros(w_ih.shape[0], self.dtype)
        dinp = np.zeros_like(inp)
        dh_next = np.zeros_like(dout[0])
        dc_next = np.zeros_like(dout[0])
        for t in reversed(range(inp.shape[0])):
            i, f, g, o, c_prev, h_prev, tc = cache[t]
            dh = dout[t] + dh_next
            dc = dh * o * (1 - tc * tc) + dc_next
            da = np.concatenate([dc * g * i * (1 - i), dc * c_prev * f * (1 - f),
                                 dc * i * (1 - g * g), dh * tc * o * (1 - o)], axis=1)
            dw_ih += da.T @ inp[t]
            dw_hh += da.T @ h_prev
            db += da.sum(axis=0)
            dinp[t] = da @ w_ih
            dh_next = da @ w_hh
            dc_next = dc * f
        return dinp, dw_ih, dw_hh, db

    def step(self) -> float:
        emb, dec_b = self.params[0], self.params[-1]
        layers = [self.params[1 + 4 * k:5 + 4 * k] for k in range(LAYERS)]
        inp = emb[self.x]
        inputs, caches, hn, cn = [], [], [], []
        for k, (w_ih, w_hh, b_ih, b_hh) in enumerate(layers):
            inputs.append(inp)
            inp, h, c, cache = self._layer(inp, self.hidden[0][k], self.hidden[1][k],
                                           w_ih, w_hh, b_ih, b_hh)
            caches.append(cache)
            hn.append(h)
            cn.append(c)
        self.hidden = [np.stack(hn), np.stack(cn)]          # carried, detached
        flat = inp.reshape(-1, HIDDEN)
        logits = flat @ emb.T + dec_b
        m = logits.max(axis=1, keepdims=True)
        lse = m[:, 0] + np.log(np.exp(logits - m).sum(axis=1))
        n = logits.shape[0]
        rows, y = np.arange(n), self.y.reshape(-1)
        loss = np.mean(lse - logits[rows, y])
        d = np.exp(logits - lse[:, None])
        d[rows, y] -= 1
        d /= n
        g = [None] * len(self.params)
        g_emb = d.T @ flat
        g[-1] = d.sum(axis=0)
        dout = (d @ emb).reshape(inp.shape)
        for k in reversed(range(LAYERS)):
            w_ih, w_hh = layers[k][0], layers[k][1]
            dout, dw_ih, dw_hh, db = self._layer_back(inputs[k], dout, caches[k], w_ih, w_hh)
            g[1 + 4 * k:5 + 4 * k] = [dw_ih, dw_hh, db, db.copy()]
        np.add.at(g_emb, self.x.reshape(-1), dout.reshape(-1, HIDDEN))
        g[0] = g_emb
        total = math.sqrt(sum(float((v.astype(np.float64) ** 2).sum()) for v in g))
        coef = min(1.0, CLIP / (total + 1e-6))
        self.grads = [np.asarray(v * self.dtype(coef), self.dtype) for v in g]
        self.params = [(p - self.dtype(LR_LM) * gk).astype(self.dtype)
                       for p, gk in zip(self.params, self.grads)]
        return float(loss)


def ref_lm_train(inputs, steps=None) -> dict:
    net = NumpyLM(inputs["params"], inputs["x"], inputs["y"])
    return reference_result(net, inputs["params"], steps)


def numpy_runner(inputs):
    net = NumpyLM(inputs["params"], inputs["x"], inputs["y"], np.float32)
    return trainrefs.numpy_runner(net)


# --------------------------------------------------------------------------------------
# tracejit (eager and compiled) and PyTorch

def _word_lm(nn):
    class WordLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Embedding(VOCAB, HIDDEN)
            self.rnn = nn.LSTM(HIDDEN, HIDDEN, LAYERS)
            self.decoder = nn.Linear(HIDDEN, VOCAB)
            self.decoder.weight = self.encoder.weight       # tied

        def forward(self, x, hidden):
            out, hidden = self.rnn(self.encoder(x), hidden)
            return self.decoder(out).view(-1, VOCAB), hidden
    return WordLM()


def _runner(model, opt, x, y, hidden, F, clip, compile_fn, info_of):
    from .workloads import Runner

    def train_step(x, y, hidden):
        logits, hidden = model(x, hidden)
        loss = F.cross_entropy(logits, y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        clip(model.parameters(), CLIP)
        opt.step()
        # detached inside: a compiled step whose outputs need gradients runs eagerly
        return loss, tuple(h.detach() for h in hidden)
    step = compile_fn(train_step)
    state = [hidden]

    def call():
        hidden = tuple(h.detach() for h in state[0])        # repackage_hidden
        loss, state[0] = step(x, y, hidden)
        return loss

    collect = trainrefs.model_collect(call, model)
    return Runner(call, collect, lambda: info_of(step, x, y, state[0]), step)


def _load(model, params, no_grad, to_tensor):
    ps = list(model.parameters())
    assert len(ps) == len(params), (len(ps), len(params))
    with no_grad():
        for p, v in zip(ps, params):
            p.copy_(to_tensor(v))


def tracejit_runner(inputs, compiled: bool):
    import eager
    import eager.nn.functional as F
    import tracer
    from eager import nn, optim

    model = _word_lm(nn)
    _load(model, inputs["params"], eager.no_grad, eager.tensor)
    opt = optim.SGD(model.parameters(), lr=LR_LM)
    zeros = eager.zeros(LAYERS, BATCH, HIDDEN)

    def info(step, x, y, hidden):
        if not compiled:
            return {}
        c = step.get_concrete_function(x, y, tuple(h.detach() for h in hidden))
        steps = c.program.describe_steps().splitlines()
        return {"trace_count": step.trace_count, "eqns": len(c.graph.eqns),
                "kernels": len(c.kernels),
                "blas": sum(1 for s in steps if s.split()[:1] == ["blas"])}
    return _runner(model, opt, eager.from_numpy(inputs["x"]), eager.from_numpy(inputs["y"]),
                   (zeros, zeros), F, nn.utils.clip_grad_norm_,
                   tracer.function if compiled else (lambda f: f), info)


def torch_runner(inputs, compiled: bool = False):
    import torch
    import torch.nn.functional as TF

    model = _word_lm(torch.nn)
    _load(model, inputs["params"], torch.no_grad, torch.from_numpy)
    opt = torch.optim.SGD(model.parameters(), lr=LR_LM)
    zeros = torch.zeros(LAYERS, BATCH, HIDDEN)
    return _runner(model, opt, torch.from_numpy(inputs["x"]), torch.from_numpy(inputs["y"]),
                   (zeros, zeros), TF, torch.nn.utils.clip_grad_norm_,
                   torch.compile if compiled else (lambda f: f), lambda *a: {})
