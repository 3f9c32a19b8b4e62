"""A character-level LSTM trained on a batch of names of different lengths, written the way
PyTorch scripts write it: pad_sequence, pack_padded_sequence(enforce_sorted=False) into
nn.LSTM, pad_packed_sequence back, a masked cross-entropy, a gradient-clamping hook on the
embedding (`register_hook(lambda g: g.clamp(-c, c))`), a forward hook on the output layer,
Adam. The traced training step must give eager's numbers after every step, and the
packed LSTM must match a per-sequence eager loop."""
from __future__ import annotations

import numpy as np
import pytest

import eager as torch
import eager.nn as nn
import eager.nn.functional as F
import tracer
from eager.nn.utils.rnn import (pack_padded_sequence, pack_sequence, pad_packed_sequence,
                                pad_sequence)
from _program_helpers import compare_runs, snapshot

STEPS, VOCAB, EMBED, HIDDEN = 3, 7, 5, 6
NAMES = [[1, 2, 3, 4, 5], [3, 1], [6, 5, 4], [2, 2, 2, 1]]  # (token ids; 0 pads)


class CharRNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, EMBED, padding_idx=0)
        self.rnn = nn.LSTM(EMBED, HIDDEN, batch_first=True)
        self.out = nn.Linear(HIDDEN, VOCAB)

    def forward(self, tokens, lengths):
        packed = pack_padded_sequence(self.embed(tokens), lengths, batch_first=True,
                                      enforce_sorted=False)
        out, (h, _) = self.rnn(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=tokens.shape[1])
        return self.out(out), h


def _batch():
    seqs = [torch.tensor(n[:-1]) for n in NAMES]
    targets = [torch.tensor(n[1:]) for n in NAMES]
    lengths = [len(n) - 1 for n in NAMES]
    return pad_sequence(seqs, batch_first=True), pad_sequence(targets, batch_first=True), lengths


def _run(compiled, backend):
    torch.manual_seed(0)
    model = CharRNN()
    model.embed.weight.register_hook(lambda g: g.clamp(-0.02, 0.02))
    model.out.register_forward_hook(lambda m, args, out: out * 0.5)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    tokens, targets, lengths = _batch()
    mask = (targets != 0).float()

    def train_step(tokens, targets, mask):
        opt.zero_grad()
        logits, h = model(tokens, lengths)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1),
                               reduction="none")
        loss = (loss * mask.reshape(-1)).sum() / mask.sum()
        loss.backward()
        opt.step()
        return loss.detach()

    step = tracer.function(train_step, backend=backend) if compiled else train_step
    for _ in range(STEPS):
        loss = step(tokens, targets, mask)
        yield float(loss.item()), snapshot([model], [opt])
    if compiled:
        assert step.trace_count == 1


# (The interpreter only: a packed batch runs the LSTM once per sequence, and with Numba each
# distinct length compiles its own step kernels, minutes of suite time for this batch.)
@pytest.mark.parametrize("backend", ["interpret"])
def test_char_rnn_packed_training_compiled_matches_eager(backend):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        losses = compare_runs(_run, STEPS, backend)
    assert losses[-1] < losses[0]


def test_packed_lstm_matches_a_per_sequence_loop():
    torch.manual_seed(1)
    lstm = nn.LSTM(3, 4, num_layers=2, bidirectional=True)
    lengths = [2, 5, 3]
    x = torch.randn(5, 3, 3, requires_grad=True)
    h0 = torch.randn(4, 3, 4)
    c0 = torch.randn(4, 3, 4)
    packed = pack_padded_sequence(x, lengths, enforce_sorted=False)
    assert packed.batch_sizes.tolist() == [3, 3, 2, 1, 1]
    assert packed.sorted_indices.tolist() == [1, 2, 0]
    out, (h, c) = lstm(packed, (h0, c0))
    padded, got_lengths = pad_packed_sequence(out, padding_value=-1.0)
    assert got_lengths.tolist() == lengths and padded.shape == (5, 3, 8)
    (padded.sum() + h.sum()).backward()
    grad = x.grad.numpy().copy()
    x.grad = None
    total = 0
    for b, n in enumerate(lengths):  # the reference: each sequence alone, unpadded
        o, (hb, cb) = lstm(x[:n, b:b + 1], (h0[:, b:b + 1], c0[:, b:b + 1]))
        np.testing.assert_allclose(padded[:n, b].detach().numpy(), o[:, 0].detach().numpy(),
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(padded[n:, b].detach().numpy(), -1.0)
        np.testing.assert_allclose(h[:, b].detach().numpy(), hb[:, 0].detach().numpy(),
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(c[:, b].detach().numpy(), cb[:, 0].detach().numpy(),
                                   rtol=1e-5, atol=1e-6)
        total = total + o.sum() + hb.sum()
    total.backward()
    np.testing.assert_allclose(grad, x.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_packing_errors_and_traced_lengths():
    p = pack_sequence([torch.tensor([1.0, 2.0, 3.0]), torch.tensor([4.0, 5.0])])
    assert p.data.tolist() == [1.0, 4.0, 2.0, 5.0, 3.0] and p.batch_sizes.tolist() == [2, 2, 1]
    x = torch.zeros(4, 2, 3)
    with pytest.raises(RuntimeError, match="sorted in decreasing order"):
        pack_padded_sequence(x, [1, 3])
    with pytest.raises(RuntimeError, match="every length"):
        pack_padded_sequence(x, [5, 3])
    gru = nn.GRU(3, 2)

    @tracer.function
    def f(x, lengths):
        return gru(pack_padded_sequence(x, lengths, enforce_sorted=False))[1].detach()

    with pytest.raises(tracer.TracingError, match="tolist"):
        f(x, torch.tensor([2, 3]))
