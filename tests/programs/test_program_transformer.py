"""A Transformer encoder text classifier written the way the common PyTorch scripts write
it: token and learned position embeddings, nn.TransformerEncoder with batch_first, a
src_key_padding_mask made from the padded token ids, mean pooling over the non-padded
positions, CrossEntropyLoss with label_smoothing, AdamW with a linear warmup LambdaLR
stepped outside the compiled step, clip_grad_norm_, and dropout on. The compiled run must
give eager's numbers after every step."""
from __future__ import annotations

import math

import numpy as np
import pytest

import eager as torch
import eager.nn as nn
import tracer
from _program_helpers import compare_runs, snapshot

BACKENDS = ["numba", "interpret"]
STEPS, BATCH, SEQ, VOCAB, D_MODEL, NHEAD, CLASSES, PAD = 4, 4, 6, 13, 16, 2, 3, 0
WARMUP = 2


class TextClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, D_MODEL, padding_idx=PAD)
        self.pos_embedding = nn.Parameter(torch.zeros(1, SEQ, D_MODEL))
        encoder_layer = nn.TransformerEncoderLayer(d_model=D_MODEL, nhead=NHEAD,
                                                   dim_feedforward=32, dropout=0.1,
                                                   batch_first=True)
        self.encoder = nn.TransformerEncoder(encoder_layer, num_layers=2,
                                             enable_nested_tensor=False)
        self.classifier = nn.Linear(D_MODEL, CLASSES)
        nn.init.normal_(self.pos_embedding, std=0.02)

    def forward(self, tokens):
        padding_mask = tokens == PAD                              # True where padded
        x = self.embedding(tokens) * math.sqrt(D_MODEL) + self.pos_embedding[:, :tokens.size(1)]
        x = self.encoder(x, src_key_padding_mask=padding_mask)
        keep = (~padding_mask).unsqueeze(-1).to(x.dtype)          # (B, S, 1)
        pooled = (x * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1.0)
        return self.classifier(pooled)


def _data():
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, VOCAB, size=(STEPS, BATCH, SEQ))
    lengths = rng.integers(2, SEQ + 1, size=(STEPS, BATCH))
    for s in range(STEPS):
        for b in range(BATCH):
            tokens[s, b, lengths[s, b]:] = PAD
    labels = rng.integers(0, CLASSES, size=(STEPS, BATCH))
    return torch.tensor(tokens), torch.tensor(labels)


def lr_lambda(step):
    return min(1.0, (step + 1) / WARMUP)


def _run(compiled, backend):
    torch.manual_seed(11)
    # float64: the key third of the attention's in_proj_bias has an exactly zero gradient
    # (softmax ignores a constant added to a row), so in float32 it holds rounding noise
    # that AdamW divides by its own size: steps of up to lr in either direction, differing
    # between any two summation orders. In float64 that noise stays far below eps.
    model = TextClassifier().double()
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    no_decay = ["bias", "norm", "pos_embedding"]
    groups = [
        {"params": [p for n, p in model.named_parameters()
                    if not any(nd in n for nd in no_decay)], "weight_decay": 0.01},
        {"params": [p for n, p in model.named_parameters()
                    if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=5e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)

    def train_step(tokens, labels):
        optimizer.zero_grad()
        logits = model(tokens)
        loss = criterion(logits, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        acc = (logits.argmax(dim=-1) == labels).float().mean()
        return loss.detach(), acc

    if compiled:
        train_step = tracer.function(train_step, backend=backend)
    model.train()
    for tokens, labels in zip(*_data()):
        loss, acc = train_step(tokens, labels)
        lr = scheduler.get_last_lr()[0]
        scheduler.step()
        yield [loss.item(), acc.item(), lr], snapshot([model], [optimizer])
    if compiled:
        assert train_step.trace_count == 1


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("backend", BACKENDS)
def test_transformer_classifier_compiled_matches_eager(backend):
    outs = compare_runs(_run, STEPS, backend, rtol=1e-9, atol=1e-11)
    assert outs[0][2] < outs[1][2] == outs[2][2]  # the warmup moved the learning rate
    assert len({o[0] for o in outs}) == STEPS and np.isfinite(outs).all()
