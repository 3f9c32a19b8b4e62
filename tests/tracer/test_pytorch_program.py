"""A small GPT training script written as PyTorch users write it, with only `torch` renamed.

Device handling, a TensorDataset and a shuffling DataLoader, a ModuleDict model with a
causal mask buffer built with tril and applied with masked_fill, tied embeddings, AdamW
with two parameter groups, a cosine schedule stepped outside the compiled step,
clip_grad_norm_ inside it, a checkpoint through eager.save/eager.load, and generate()
with topk and multinomial.  The compiled run must give eager's numbers: losses, learning
rates, parameters, .grad, optimizer state, the checkpoint and the sampled tokens.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F
import tracer
from eager.utils.data import DataLoader, TensorDataset

BACKENDS = ["numba", "interpret"]

VOCAB, BLOCK, EMBD, HEADS, LAYERS = 17, 4, 16, 2, 2


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        # no bias here (nanoGPT's bias=False): the key third of a bias has an exactly zero
        # gradient (softmax ignores a constant added to a row), so it gets rounding noise,
        # which Adam scales up to steps of size lr: no two implementations agree there
        self.c_attn = nn.Linear(EMBD, 3 * EMBD, bias=False)
        self.c_proj = nn.Linear(EMBD, EMBD)
        self.attn_dropout = nn.Dropout(0.0)
        self.register_buffer("bias", eager.tril(eager.ones(BLOCK, BLOCK))
                             .view(1, 1, BLOCK, BLOCK), persistent=False)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(EMBD, dim=2)
        k = k.view(B, T, HEADS, C // HEADS).transpose(1, 2)
        q = q.view(B, T, HEADS, C // HEADS).transpose(1, 2)
        v = v.view(B, T, HEADS, C // HEADS).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(EMBD)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(EMBD)
        self.mlp = nn.ModuleDict(dict(c_fc=nn.Linear(EMBD, 4 * EMBD),
                                      c_proj=nn.Linear(4 * EMBD, EMBD), act=nn.GELU()))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        m = self.mlp
        return x + m.c_proj(m.act(m.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(VOCAB, EMBD),
            wpe=nn.Embedding(BLOCK, EMBD),
            h=nn.ModuleList([Block() for _ in range(LAYERS)]),
            ln_f=nn.LayerNorm(EMBD),
        ))
        self.lm_head = nn.Linear(EMBD, VOCAB, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying

    def forward(self, idx, targets=None):
        device = idx.device
        b, t = idx.size()
        pos = eager.arange(0, t, dtype=eager.long, device=device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate):
        params = {n: p for n, p in self.named_parameters() if p.requires_grad}
        decay = [p for p in params.values() if p.dim() >= 2]
        no_decay = [p for p in params.values() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
        return eager.optim.AdamW(groups, lr=learning_rate, betas=(0.9, 0.95))

    @eager.no_grad()
    def generate(self, idx, max_new_tokens, top_k=None, sample=None):
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= BLOCK else idx[:, -BLOCK:]
            probs = (sample or self.next_probs)(idx_cond, top_k)
            idx_next = eager.multinomial(probs, num_samples=1)
            idx = eager.cat((idx, idx_next), dim=1)
        return idx

    def next_probs(self, idx, top_k):
        logits, _ = self(idx)
        logits = logits[:, -1, :]
        v, _ = eager.topk(logits, min(top_k, logits.size(-1)))
        logits = logits.masked_fill(logits < v[:, [-1]], -float("Inf"))
        return F.softmax(logits, dim=-1)


def _data(device):
    rng = np.random.default_rng(0)
    tokens = eager.tensor(rng.integers(0, VOCAB, size=(24, BLOCK + 1)), device=device)
    return TensorDataset(tokens[:, :-1], tokens[:, 1:])


def _setup(device):
    eager.manual_seed(1337)
    model = GPT().to(device)
    opt = model.configure_optimizers(weight_decay=0.1, learning_rate=3e-3)
    sched = eager.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=6, eta_min=1e-4)
    loader = DataLoader(_data(device), batch_size=4, shuffle=True, drop_last=True,
                        generator=eager.Generator().manual_seed(42))
    return model, opt, sched, loader


def _train_step(model, opt, x, y):
    _, loss = model(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss


def _run(steps, compiled, backend="numba"):
    device = "cuda" if eager.cuda.is_available() else "cpu"
    model, opt, sched, loader = _setup(device)
    model.train()
    step = (tracer.function(lambda x, y: _train_step(model, opt, x, y), backend=backend)
            if compiled else (lambda x, y: _train_step(model, opt, x, y)))
    losses, lrs = [], []
    batches = iter(loader)
    for _ in range(steps):
        xb, yb = next(batches)
        xb, yb = xb.to(device), yb.to(device)
        losses.append(step(xb, yb).item())
        lrs.append(opt.param_groups[0]["lr"])
        sched.step()
    return model, opt, sched, step, losses, lrs


def _assert_state_equal(a, b, what, rtol=2e-5, atol=1e-6):
    assert list(a) == list(b), what
    for k in a:
        va, vb = a[k], b[k]
        if isinstance(va, dict):
            _assert_state_equal(va, vb, f"{what}[{k!r}]", rtol, atol)
        elif isinstance(va, list):
            assert len(va) == len(vb), (what, k)
            for i, (x, y) in enumerate(zip(va, vb)):
                if isinstance(x, dict):
                    _assert_state_equal(x, y, f"{what}[{k!r}][{i}]", rtol, atol)
                else:
                    assert x == y, (what, k, i)
        elif isinstance(va, eager.Tensor):
            np.testing.assert_allclose(va.numpy(), vb.numpy(), rtol=rtol, atol=atol,
                                       err_msg=f"{what}[{k!r}]")
        else:
            assert va == vb, (what, k, va, vb)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpt_script_compiled_matches_eager(backend, tmp_path):
    steps = 5
    e_model, e_opt, e_sched, _, e_losses, e_lrs = _run(steps, compiled=False)
    c_model, c_opt, c_sched, step, c_losses, c_lrs = _run(steps, compiled=True, backend=backend)

    assert c_lrs == e_lrs and len(set(e_lrs)) == steps  # the schedule moved the lr every step
    np.testing.assert_allclose(c_losses, e_losses, rtol=2e-5)
    assert all(np.isfinite(e_losses)) and len(set(e_losses)) == steps
    assert step.trace_count == 1  # a new lr each step is a per-call input, not a retrace
    # tied weights: one tensor under both names, in registration order, as PyTorch
    keys = list(c_model.state_dict())
    assert keys[0] == "transformer.wte.weight" and keys[-1] == "lm_head.weight"
    assert not any(k.endswith(".attn.bias") for k in keys)  # persistent=False
    assert c_model.transformer.wte.weight is c_model.lm_head.weight
    # Adam divides by sqrt(v): where a gradient is near zero, float32 rounding differences
    # (fused kernels sum in another order) can move a weight by up to lr, rarely: the
    # tolerance is a small fraction of one step (lr 3e-3), far below a wrong update
    _assert_state_equal(c_model.state_dict(), e_model.state_dict(), "model", 1e-4, 1e-4)
    for (name, p), q in zip(c_model.named_parameters(), e_model.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-6,
                                   err_msg=name)
    _assert_state_equal(c_opt.state_dict(), e_opt.state_dict(), "optimizer", rtol=1e-4)

    # a checkpoint as nanoGPT writes it, loaded into a fresh model and optimizer
    path = tmp_path / "ckpt.pt"
    eager.save({"model": c_model.state_dict(), "optimizer": c_opt.state_dict(),
                "scheduler": c_sched.state_dict(), "iter_num": steps}, path)
    ckpt = eager.load(path)
    assert ckpt["iter_num"] == steps
    model, opt, sched, _ = _setup("cpu")
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optimizer"])
    sched.load_state_dict(ckpt["scheduler"])
    _assert_state_equal(model.state_dict(), c_model.state_dict(), "loaded model", 0, 0)
    assert opt.param_groups[0]["lr"] == c_opt.param_groups[0]["lr"]
    # the resumed run's next step equals the compiled run's next step
    x, y = next(iter(DataLoader(_data("cpu"), batch_size=4)))
    want = step(x, y).item()
    got = _train_step(model, opt, x, y).item()
    np.testing.assert_allclose(got, want, rtol=2e-5)
    _assert_state_equal(model.state_dict(), c_model.state_dict(), "resumed model", 1e-4, 1e-4)

    # sampling: eager generate() vs the next-token distribution compiled
    c_model.eval()
    model.eval()
    sample = tracer.function(lambda idx, top_k: c_model.next_probs(idx, top_k),
                             static_argnames=("top_k",), backend=backend)
    start = eager.zeros((1, 1), dtype=eager.long)
    eager.manual_seed(7)
    want = model.generate(start, BLOCK + 2, top_k=5)
    eager.manual_seed(7)
    got = c_model.generate(start, BLOCK + 2, top_k=5, sample=sample)
    assert got.shape == (1, BLOCK + 3)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    # windows of 1..BLOCK tokens (one trace each: BLOCK is small, so that they are few),
    # then cropped windows of BLOCK
    assert sample.trace_count == BLOCK
