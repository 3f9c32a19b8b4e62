"""Recurrent layers traced and compiled (both backends) against eager: outputs, input and
parameter gradients of RNN/LSTM/GRU (2 layers, bidirectional, batch_first, initial states)
and the cells; the compiled step's structure (the input projection of all time steps is one
matmul, then the LSTM's time loop one step, its backward one more); an LSTM language
model's training steps with the hidden state carried (detached) across calls; and a small W10
trained 30 steps eagerly and compiled with the same seed.

The shapes are shared between tests so the Numba kernels compile once per backend."""
import logging

import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F
import eager.optim as optim
import tracer
from tracer import logs

BACKENDS = ["numba", "interpret"]
L, N, HIN, H = 3, 3, 4, 6
SEQ = 5   # the language model's sequence length


def _np(t):
    return t.detach().numpy()


def _close(got, want, rtol=1e-5, atol=1e-6, what=""):
    if want is None:     # (c0 of an RNN/GRU: unused, no gradient either way)
        assert got is None, what
        return
    assert got.shape == want.shape and got.dtype == want.dtype, what
    np.testing.assert_allclose(_np(got), _np(want), rtol=rtol, atol=atol, err_msg=what)


def _make(mode, **kw):
    if mode in ("tanh", "relu"):
        return nn.RNN(HIN, H, nonlinearity=mode, **kw)
    return getattr(nn, mode)(HIN, H, **kw)


def _run_layer(m, mode, x, h0, c0, backend):
    """loss = <out, w1> + <h_n, w2> (+ <c_n, w3>); eager and compiled: outputs and grads."""
    def step(x, h0, c0):
        if mode == "LSTM":
            out, (hn, cn) = m(x, (h0, c0))
        else:
            out, hn = m(x, h0)
            cn = hn
        w1 = eager.tensor(np.linspace(-1, 1, out.numel(), dtype=np.float32).reshape(out.shape))
        w2 = eager.tensor(np.cos(np.arange(hn.numel(), dtype=np.float32)).reshape(hn.shape))
        ((out * w1).sum() + (hn * w2).sum() + (cn * w2).sum()).backward()
        return out.detach(), hn.detach(), cn.detach()

    results = []
    for run in (step, tracer.function(step, backend=backend)):
        m.zero_grad()
        ts = [eager.tensor(_np(t), requires_grad=True) for t in (x, h0, c0)]
        outs = run(*ts)
        grads = [t.grad for t in ts] + [p.grad.clone() for p in m.parameters()]
        results.append((outs, grads))
    return results


# Numba runs the LSTM layer here (its fused time loop, both directions), the GRU gate math
# in the cell test, every mode on the interpreter.
@pytest.mark.parametrize("backend,mode", [("numba", "LSTM")] + [("interpret", m) for m in ["tanh", "relu", "LSTM", "GRU"]])
def test_layers_compiled_match_eager(backend, mode):
    eager.manual_seed(4)
    m = _make(mode, num_layers=2, bidirectional=True, batch_first=True)
    rng = np.random.default_rng(1)
    x = eager.tensor(rng.standard_normal((N, L, HIN)).astype(np.float32))
    h0, c0 = (eager.tensor(rng.standard_normal((4, N, H)).astype(np.float32)) for _ in "hc")
    (want, gw), (got, gg) = _run_layer(m, mode, x, h0, c0, backend)
    for a, e in zip(got, want):
        _close(a, e)
    for k, (a, e) in enumerate(zip(gg, gw)):
        _close(a, e, rtol=1e-4, atol=1e-5, what=f"grad {k}")


@pytest.mark.parametrize("backend,cls", [("numba", nn.GRUCell)] + [
    ("interpret", c) for c in [nn.RNNCell, nn.LSTMCell, nn.GRUCell]])
def test_cells_compiled_match_eager_batched_and_unbatched(backend, cls):
    eager.manual_seed(2)
    cell = cls(HIN, H)
    rng = np.random.default_rng(5)

    def step(xs, h):
        state = (h, h * 0.5) if cls is nn.LSTMCell else h
        for x in xs.unbind(0):           # a loop of cells over time, unrolled when traced
            state = cell(x, state)
        out = state[0] + state[1] if cls is nn.LSTMCell else state
        out.sum().backward()
        return out.detach()

    for shape in [(L, N, HIN), (L, HIN)][:1 if backend == "numba" else 2]:
        xs = rng.standard_normal(shape).astype(np.float32)
        h = rng.standard_normal(shape[1:-1] + (H,)).astype(np.float32)
        res = []
        for run in (step, tracer.function(step, backend=backend)):
            cell.zero_grad()
            hx = eager.tensor(h, requires_grad=True)
            out = run(eager.tensor(xs), hx)
            res.append([out, hx.grad] + [p.grad.clone() for p in cell.parameters()])
        for a, e in zip(res[1], res[0]):
            _close(a, e, rtol=1e-4, atol=1e-5)


@pytest.mark.one_backend
def test_compiled_lstm_is_one_projection_then_one_recurrence_step():
    eager.manual_seed(0)
    m = nn.LSTM(HIN, H)

    def forward(x):
        with eager.no_grad():
            return m(x)[0]
    f = tracer.function(forward)
    x = eager.randn(L, N, HIN)
    _close(f(x), m(x)[0])
    steps = f.get_concrete_function(x).program.describe_steps()
    kinds = [line.split()[0] for line in steps.splitlines()[1:-1]]
    # the projection of all L steps is one matmul and its bias add one kernel; the time
    # loop is ONE step (its Numba kernel runs the per-step products and gate math), saving
    # nothing for a backward (no grad here: 2L rows, hs and cs)
    assert kinds.count("blas") == 1, steps
    assert kinds.count("kernel") == 1, steps
    loops = [line for line in steps.splitlines() if "lstm_recurrence" in line]
    assert len(loops) == 1 and loops[0].endswith("_lstm_recurrence"), steps
    eqn = next(e for e in f.get_concrete_function(x).graph.eqns if e.op == "lstm_recurrence")
    assert eqn.params["save"] is False and eqn.out.type.shape == (2 * L, N, H)


@pytest.mark.one_backend
def test_compiled_lstm_training_step_is_one_forward_and_one_backward_step_per_layer():
    eager.manual_seed(0)
    m = nn.LSTM(HIN, H, num_layers=2)

    def step(x):
        m(x)[0].sum().backward()
    f = tracer.function(step)
    x = eager.randn(L, N, HIN)
    f(x)
    steps = f.get_concrete_function(x).program.describe_steps()
    ops = [e.op for e in f.get_concrete_function(x).graph.eqns]
    assert ops.count("lstm_recurrence") == 2 and ops.count("lstm_recurrence_backward") == 2
    # per layer: projection, dx, dW_ih and ONE dW_hh product over all steps
    assert [line.split()[0] for line in steps.splitlines()].count("blas") == 2 + 3 * 2 - 1, \
        steps
    assert steps.count("_lstm_recurrence\n") == 2, steps
    assert steps.count("_lstm_recurrence_backward\n") == 2, steps


@pytest.mark.parametrize("backend", BACKENDS)
def test_lstm_on_a_non_contiguous_input_then_sgd_compiled_matches_eager(backend):
    """The input a transposed view (time-major from batch-major memory), 2 layers, given
    states: outputs, every .grad, and the parameters after an SGD step."""
    eager.manual_seed(3)
    models = [nn.LSTM(HIN, H, num_layers=2) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    rng = np.random.default_rng(7)
    base = rng.standard_normal((N, L, HIN)).astype(np.float32)
    h = rng.standard_normal((2, N, H)).astype(np.float32)
    results = []
    for m, compiled in zip(models, (False, True)):
        opt = optim.SGD(m.parameters(), lr=0.1)

        def step(xb, h0, c0):
            opt.zero_grad()
            out, (hn, cn) = m(xb.transpose(0, 1), (h0, c0 * 0.5))
            loss = (out * out).sum() + hn.sum() + (cn * cn).sum()
            loss.backward()
            opt.step()
            return out.detach(), loss.detach()
        run = tracer.function(step, backend=backend) if compiled else step
        h0, c0 = (eager.tensor(h, requires_grad=True) for _ in "hc")
        outs = run(eager.tensor(base), h0, c0)
        results.append(list(outs) + [h0.grad, c0.grad]
                       + [t for p in m.parameters() for t in (p.grad, p)])
    for k, (a, e) in enumerate(zip(results[1], results[0])):
        _close(a, e, rtol=1e-4, atol=1e-5, what=f"value {k}")


# --------------------------------------------------------------------------------------
# an LSTM language model (PyTorch's word_language_model, tied weights)

V = 40


class WordLM(nn.Module):
    def __init__(self, vocab=V, hidden=H, layers=2, dropout=0.0):
        super().__init__()
        self.encoder = nn.Embedding(vocab, hidden)
        self.rnn = nn.LSTM(hidden, hidden, layers, dropout=dropout)
        self.decoder = nn.Linear(hidden, vocab)
        self.decoder.weight = self.encoder.weight      # tied
        self.vocab = vocab

    def forward(self, x, hidden):
        out, hidden = self.rnn(self.encoder(x), hidden)
        return self.decoder(out).view(-1, self.vocab), hidden

    def init_hidden(self, batch):
        z = eager.zeros(self.rnn.num_layers, batch, self.rnn.hidden_size)
        return (z, z)


def _lm_run(compiled, steps, backend="numba", lr=0.5, dropout=0.0, seed=0):
    eager.manual_seed(seed)
    model = WordLM(dropout=dropout)
    opt = optim.SGD(model.parameters(), lr=lr)
    rng = np.random.default_rng(seed)
    data = rng.integers(0, V, (steps, SEQ + 1, N))

    def step(x, y, hidden):
        opt.zero_grad()
        logits, hidden = model(x, hidden)
        loss = F.cross_entropy(logits, y.reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()
        # detached: a compiled step whose outputs still need gradients runs eagerly
        return loss.detach(), tuple(h.detach() for h in hidden)

    run = tracer.function(step, backend=backend) if compiled else step
    hidden = model.init_hidden(N)
    losses, hiddens = [], []
    for i in range(steps):
        hidden = tuple(h.detach() for h in hidden)     # as the word-language-model example
        loss, hidden = run(eager.tensor(data[i, :-1]), eager.tensor(data[i, 1:]), hidden)
        losses.append(loss.item())
        hiddens.append([_np(h).copy() for h in hidden])
    return losses, hiddens, model, run


@pytest.fixture
def eager_fallbacks(monkeypatch, caplog):
    """The tracer's messages when a call runs eagerly instead of compiled (a compiled step
    whose outputs need gradients, an aliased argument, ...)."""
    monkeypatch.setenv("TRACER_LOGS", "recompiles")
    logs.refresh()
    caplog.set_level(logging.INFO, logger="tracer")
    yield lambda: [r.getMessage() for r in caplog.records
                   if r.name == "tracer.recompiles" and "eagerly" in r.getMessage()]
    monkeypatch.delenv("TRACER_LOGS")
    logs.refresh()


@pytest.mark.parametrize("backend", BACKENDS)
def test_lstm_language_model_steps_compiled_match_eager_with_carried_hidden(backend,
                                                                         eager_fallbacks):
    want, h_e, m_e, _ = _lm_run(False, 3)
    got, h_c, m_c, run = _lm_run(True, 3, backend)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for a, e in zip(h_c, h_e):       # the hidden state carried across calls
        for ha, he in zip(a, e):
            np.testing.assert_allclose(ha, he, rtol=1e-5, atol=1e-6)
    for (name, a), b in zip(m_e.named_parameters(), m_c.parameters()):
        np.testing.assert_allclose(_np(b), _np(a), rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), rtol=1e-4, atol=1e-6,
                                   err_msg=name)
    assert len([n for n, _ in m_c.named_parameters()]) == 1 + 8 + 1   # tied: no decoder.weight
    assert run.trace_count == 1      # zero and carried hidden states share one trace
    assert eager_fallbacks() == []   # every step ran compiled


def test_lstm_language_model_with_dropout_compiled_matches_eager():
    # (the interpreter: dropout's random draws in compiled kernels are F.dropout's tests)
    want, _, _, _ = _lm_run(False, 3, dropout=0.3, seed=1)
    got, _, _, _ = _lm_run(True, 3, "interpret", dropout=0.3, seed=1)
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("backend", ["numba"])   # (its kernels are the test above's)
def test_small_w10_trains_30_steps_the_same_compiled_as_eagerly(backend, eager_fallbacks):
    want, _, m_e, _ = _lm_run(False, 30)
    got, _, m_c, _ = _lm_run(True, 30, backend)
    assert eager_fallbacks() == []
    np.testing.assert_allclose(got, want, rtol=1e-4)
    assert np.mean(want[-5:]) < np.mean(want[:5])
    for (name, a), b in zip(m_e.named_parameters(), m_c.parameters()):
        np.testing.assert_allclose(_np(b), _np(a), rtol=1e-3, atol=1e-5, err_msg=name)


def test_dropout_between_layers_follows_train_and_eval_after_compiling():
    eager.manual_seed(8)
    m = nn.GRU(HIN, H, num_layers=2, dropout=1.0)
    f = tracer.function(lambda x: m(x)[0], backend="interpret")
    x = eager.randn(L, N, HIN)
    eager.manual_seed(9)
    trained = f(x)
    eager.manual_seed(9)
    _close(trained, m(x)[0])
    m.eval()                          # the trace reads `training`: a new trace, no dropout
    _close(f(x), m(x)[0])
    assert not np.allclose(_np(f(x)), _np(trained))
    m.dropout = 0.0
    m.train()
    _close(f(x), m(x)[0])
