"""JAX (`jax.jit`) peers of the issue-17 training steps W8, W9 and W10, in plain jax.

Each is the workload's training step written once in JAX: the forward pass, `jax.grad`,
then the optimizer update by hand (no flax/optax), as one jitted function of
(state, inputs) -> (state, loss, gradients). The state (parameters and optimizer buffers)
is donated to the call, so the update may reuse its buffers, as PyTorch's in-place
updates do. The parameters start from the workload's inputs, in `model.parameters()`
order, and the gradients reported are the last step's after clipping (what `.grad` holds
in PyTorch), so `collect()` is checked against the same float64 reference as every other
implementation (benchmarks/trainrefs.py).

Imported only inside a peer process that found `jax` (benchmarks/peers.py, `build_jax`).
"""
from __future__ import annotations

import math

import numpy as np

from . import cnn, gpt, lstm_lm


def _runner(step, state, args):
    """A `Runner` calling the jitted `step(state, *args) -> (state, loss, grads)`."""
    from .workloads import TRAIN_CHECK_STEPS, Runner

    held = {"state": state, "grads": None}

    def call():
        held["state"], loss, held["grads"] = step(held["state"], *args)
        return loss.block_until_ready()

    def collect():
        out = {"loss": np.array([float(call()) for _ in range(TRAIN_CHECK_STEPS)])}
        for k, (p, g) in enumerate(zip(held["state"]["params"], held["grads"])):
            out[f"param[{k}]"] = np.asarray(p).copy()
            out[f"grad[{k}]"] = np.asarray(g).copy()
        return out
    return Runner(call, collect)


def _cross_entropy(logits, targets):
    import jax
    import jax.numpy as jnp

    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, targets[:, None], axis=1))


def _clip(grads, max_norm):
    """torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when below 1."""
    import jax.numpy as jnp

    norm = jnp.sqrt(sum(jnp.sum(g * g) for g in grads))
    coef = jnp.minimum(max_norm / (norm + 1e-6), 1.0)
    return [g * coef for g in grads]


def _arrays(params):
    import jax.numpy as jnp

    return [jnp.asarray(p) for p in params]


# --------------------------------------------------------------------------------------
# W8: LeNet-5, SGD with momentum

def cnn_runner(inputs):
    import jax
    import jax.numpy as jnp

    def conv(x, w, b, pad):
        y = jax.lax.conv_general_dilated(x, w, (1, 1), [(pad, pad), (pad, pad)],
                                         dimension_numbers=("NCHW", "OIHW", "NCHW"))
        return y + b[None, :, None, None]

    def pool(x):
        n, c, h, w = x.shape
        return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))

    def loss_fn(params, x, y):
        c1w, c1b, c2w, c2b, f1w, f1b, f2w, f2b, f3w, f3b = params
        h = pool(jax.nn.relu(conv(x, c1w, c1b, 2)))
        h = pool(jax.nn.relu(conv(h, c2w, c2b, 0))).reshape(x.shape[0], -1)
        h = jax.nn.relu(h @ f1w.T + f1b)
        h = jax.nn.relu(h @ f2w.T + f2b)
        return _cross_entropy(h @ f3w.T + f3b, y)

    def step(state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], x, y)
        # PyTorch's first momentum buffer is the gradient itself: 0.9 * 0 + g
        bufs = [cnn.MOMENTUM * b + g for b, g in zip(state["bufs"], grads)]
        params = [p - cnn.LR_CNN * b for p, b in zip(state["params"], bufs)]
        return {"params": params, "bufs": bufs}, loss, grads

    params = _arrays(inputs["params"])
    state = {"params": params, "bufs": [jnp.zeros_like(p) for p in params]}
    return _runner(jax.jit(step, donate_argnums=0), state,
                   (jnp.asarray(inputs["x"]), jnp.asarray(inputs["y"].astype(np.int32))))


# --------------------------------------------------------------------------------------
# W9: GPT-2 style, clip_grad_norm_(1.0), AdamW with decay on matrices only

def gpt_runner(inputs):
    import jax
    import jax.numpy as jnp

    heads = inputs["heads"]
    n_block = len(gpt._BLOCK)
    layers = (len(inputs["params"]) - 4) // n_block

    def ln(x, g, b):
        mu = x.mean(-1, keepdims=True)
        var = jnp.square(x - mu).mean(-1, keepdims=True)
        return (x - mu) * jax.lax.rsqrt(var + 1e-5) * g + b

    def block(x, p):
        g1, b1, wq, bq, wp, bp, g2, b2, wf, bf, wo, bo = p
        B, T, C = x.shape
        D = C // heads
        qkv = (ln(x, g1, b1) @ wq.T + bq).reshape(B, T, 3, heads, D).transpose(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        s = (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(D)
        s = jnp.where(jnp.tril(jnp.ones((T, T), bool)), s, -jnp.inf)
        y = (jax.nn.softmax(s, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
        x = x + y @ wp.T + bp
        f = ln(x, g2, b2) @ wf.T + bf
        return x + jax.nn.gelu(f, approximate=True) @ wo.T + bo

    def loss_fn(params, idx, y):
        wte, wpe = params[0], params[1]
        x = wte[idx] + wpe[:idx.shape[1]]
        for i in range(layers):
            x = block(x, params[2 + n_block * i: 2 + n_block * (i + 1)])
        logits = ln(x, params[-2], params[-1]) @ wte.T       # the head tied to wte
        return _cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    b1, b2 = gpt.BETAS_GPT
    lr = gpt.LR_GPT

    def step(state, idx, y):
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], idx, y)
        grads = _clip(grads, gpt.MAX_NORM)
        t = state["t"] + 1
        bc1, bc2_sqrt = 1 - b1 ** t, jnp.sqrt(1 - b2 ** t)
        m = [b1 * mi + (1 - b1) * g for mi, g in zip(state["m"], grads)]
        v = [b2 * vi + (1 - b2) * g * g for vi, g in zip(state["v"], grads)]
        params = []
        for p, mi, vi in zip(state["params"], m, v):
            if p.ndim >= 2:                                  # the decayed group
                p = p * (1 - lr * gpt.DECAY)
            params.append(p - (lr / bc1) * mi / (jnp.sqrt(vi) / bc2_sqrt + gpt.EPS_GPT))
        return {"params": params, "m": m, "v": v, "t": t}, loss, grads

    params = _arrays(inputs["params"])
    state = {"params": params, "m": [jnp.zeros_like(p) for p in params],
             "v": [jnp.zeros_like(p) for p in params], "t": jnp.float32(0)}
    return _runner(jax.jit(step, donate_argnums=0), state,
                   (jnp.asarray(inputs["x"].astype(np.int32)),
                    jnp.asarray(inputs["y"].astype(np.int32))))


# --------------------------------------------------------------------------------------
# W10: 2-layer LSTM language model, tied decoder, clip_grad_norm_(0.25), SGD

def lstm_runner(inputs):
    import jax
    import jax.numpy as jnp

    H, n_layers = lstm_lm.HIDDEN, lstm_lm.LAYERS

    def lstm_layer(inp, h, c, w_ih, w_hh, b_ih, b_hh):
        gx = inp @ w_ih.T + b_ih + b_hh                   # all time steps' input projection

        def cell(carry, gx_t):
            h, c = carry
            a = gx_t + h @ w_hh.T
            i, f = jax.nn.sigmoid(a[:, :H]), jax.nn.sigmoid(a[:, H:2 * H])
            g, o = jnp.tanh(a[:, 2 * H:3 * H]), jax.nn.sigmoid(a[:, 3 * H:])
            c = f * c + i * g
            h = o * jnp.tanh(c)
            return (h, c), h
        (h, c), out = jax.lax.scan(cell, (h, c), gx)
        return out, h, c

    def loss_fn(params, x, y, hidden):
        emb, dec_b = params[0], params[-1]
        inp = emb[x]
        hn, cn = [], []
        for k in range(n_layers):
            inp, h, c = lstm_layer(inp, hidden[0][k], hidden[1][k], *params[1 + 4 * k:5 + 4 * k])
            hn.append(h)
            cn.append(c)
        logits = inp.reshape(-1, H) @ emb.T + dec_b          # the decoder tied to emb
        return _cross_entropy(logits, y.reshape(-1)), (jnp.stack(hn), jnp.stack(cn))

    def step(state, x, y):
        (loss, hidden), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            state["params"], x, y, state["hidden"])
        grads = _clip(grads, lstm_lm.CLIP)
        params = [p - lstm_lm.LR_LM * g for p, g in zip(state["params"], grads)]
        # the hidden state is carried to the next step, detached (repackage_hidden)
        return {"params": params, "hidden": hidden}, loss, grads

    hidden = tuple(jnp.zeros((n_layers, lstm_lm.BATCH, H), jnp.float32) for _ in range(2))
    state = {"params": _arrays(inputs["params"]), "hidden": hidden}
    return _runner(jax.jit(step, donate_argnums=0), state,
                   (jnp.asarray(inputs["x"].astype(np.int32)),
                    jnp.asarray(inputs["y"].astype(np.int32))))


RUNNERS = {"W8": cnn_runner, "W9": gpt_runner, "W10": lstm_runner}
