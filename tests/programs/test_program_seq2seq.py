"""A seq2seq GRU encoder-decoder with attention, written the way the common PyTorch
translation tutorial writes it: nn.Embedding and nn.GRU (batch_first), a Luong-style
attention by bmm + softmax, NLLLoss over log_softmax, teacher forcing over a fixed target
length decided by a Python flag argument, clip_grad_norm_, and one optimizer per module.
The compiled training step must give eager's numbers after every step, with teacher
forcing on and off (one trace per flag value)."""
from __future__ import annotations

import numpy as np
import pytest

import eager as torch
import eager.nn as nn
import eager.nn.functional as F
import tracer
from _program_helpers import compare_runs, snapshot

BACKENDS = ["numba", "interpret"]
STEPS, BATCH, SRC_LEN, TGT_LEN, VOCAB, HIDDEN = 4, 4, 5, 4, 11, 16
SOS_token = 0


class EncoderRNN(nn.Module):
    def __init__(self, input_size, hidden_size, dropout_p=0.1):
        super().__init__()
        self.hidden_size = hidden_size
        self.embedding = nn.Embedding(input_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, batch_first=True)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, input):
        embedded = self.dropout(self.embedding(input))
        output, hidden = self.gru(embedded)
        return output, hidden


class LuongAttention(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.Wa = nn.Linear(hidden_size, hidden_size, bias=False)

    def forward(self, query, keys):
        # query (B, 1, H), keys (B, S, H)
        scores = torch.bmm(self.Wa(query), keys.transpose(1, 2))     # (B, 1, S)
        weights = F.softmax(scores, dim=-1)
        context = torch.bmm(weights, keys)                              # (B, 1, H)
        return context, weights


class AttnDecoderRNN(nn.Module):
    def __init__(self, hidden_size, output_size, dropout_p=0.1):
        super().__init__()
        self.embedding = nn.Embedding(output_size, hidden_size)
        self.attention = LuongAttention(hidden_size)
        self.gru = nn.GRU(2 * hidden_size, hidden_size, batch_first=True)
        self.out = nn.Linear(hidden_size, output_size)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, encoder_outputs, encoder_hidden, target_tensor=None,
                teacher_forcing=True):
        batch_size = encoder_outputs.size(0)
        decoder_input = torch.empty(batch_size, 1, dtype=torch.long).fill_(SOS_token)
        decoder_hidden = encoder_hidden
        decoder_outputs, attentions = [], []
        for i in range(TGT_LEN):
            decoder_output, decoder_hidden, attn_weights = self.forward_step(
                decoder_input, decoder_hidden, encoder_outputs)
            decoder_outputs.append(decoder_output)
            attentions.append(attn_weights)
            if teacher_forcing and target_tensor is not None:
                decoder_input = target_tensor[:, i].unsqueeze(1)  # teacher forcing
            else:
                _, topi = decoder_output.topk(1)
                decoder_input = topi.squeeze(-1).detach()  # its own prediction as input
        decoder_outputs = torch.cat(decoder_outputs, dim=1)
        decoder_outputs = F.log_softmax(decoder_outputs, dim=-1)
        return decoder_outputs, decoder_hidden, torch.cat(attentions, dim=1)

    def forward_step(self, input, hidden, encoder_outputs):
        embedded = self.dropout(self.embedding(input))
        query = hidden.permute(1, 0, 2)
        context, attn_weights = self.attention(query, encoder_outputs)
        input_gru = torch.cat((embedded, context), dim=2)
        output, hidden = self.gru(input_gru, hidden)
        return self.out(output), hidden, attn_weights


def _data():
    rng = np.random.default_rng(0)
    src = torch.tensor(rng.integers(1, VOCAB, size=(STEPS, BATCH, SRC_LEN)))
    tgt = torch.tensor(rng.integers(1, VOCAB, size=(STEPS, BATCH, TGT_LEN)))
    return src, tgt


def _run(compiled, backend):
    torch.manual_seed(3)
    encoder = EncoderRNN(VOCAB, HIDDEN)
    decoder = AttnDecoderRNN(HIDDEN, VOCAB)
    encoder_optimizer = torch.optim.Adam(encoder.parameters(), lr=1e-2)
    decoder_optimizer = torch.optim.Adam(decoder.parameters(), lr=1e-2)
    criterion = nn.NLLLoss()

    def train_step(input_tensor, target_tensor, teacher_forcing):
        encoder_optimizer.zero_grad()
        decoder_optimizer.zero_grad()
        encoder_outputs, encoder_hidden = encoder(input_tensor)
        decoder_outputs, _, _ = decoder(encoder_outputs, encoder_hidden, target_tensor,
                                        teacher_forcing)
        loss = criterion(decoder_outputs.view(-1, decoder_outputs.size(-1)),
                         target_tensor.view(-1))
        loss.backward()
        norm = nn.utils.clip_grad_norm_(list(encoder.parameters())
                                        + list(decoder.parameters()), 0.25)
        encoder_optimizer.step()
        decoder_optimizer.step()
        return loss.detach(), norm

    if compiled:
        train_step = tracer.function(train_step, backend=backend,
                                     static_argnames=("teacher_forcing",))
    encoder.train()
    decoder.train()
    for i, (src, tgt) in enumerate(zip(*_data())):
        loss, norm = train_step(src, tgt, teacher_forcing=i % 2 == 0)
        yield ([loss.item(), norm.item()],
               snapshot([encoder, decoder], [encoder_optimizer, decoder_optimizer]))
    if compiled:
        assert train_step.trace_count == 2  # one per teacher-forcing flag value


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("backend", BACKENDS)
def test_seq2seq_compiled_matches_eager(backend):
    outs = compare_runs(_run, STEPS, backend, rtol=1e-4, atol=1e-5)
    assert len({o[0] for o in outs}) == STEPS and np.isfinite(outs).all()
    assert outs[0][1] > 0.25  # the norm before clipping: clipping did something
