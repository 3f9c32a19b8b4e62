"""The observing runner (codegen.runner.generate(observe=True): check mode's search for the
first diverging equation, benchmarks.step_profile) computes what the program's own runner
computes, and running it leaves the program's later calls as they were.

Both runners keep per-thread buffers, numbered in the order each one's lines were made; the
program's runner orders them its own way (codegen.overlap's plan, made first where a long
step and a second thread exist, lays out the cats of codegen.placement before any step).
When the observing runner took the program's buffers, it wrote W10's stacked states into a
buffer of another shape ("could not broadcast (20,128) into (1,128)"), or wrote into the
buffer a scatter_slice keeps zeroed outside its slice: every later call of the program then
read garbage there, silently."""
from __future__ import annotations

import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F
import eager.optim as optim
import tracer
from codegen import parallel

V, H, SEQ, N = 50, 64, 16, 8


class _LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Embedding(V, H)
        self.rnn = nn.LSTM(H, H, 2)
        self.decoder = nn.Linear(H, V)
        self.decoder.weight = self.encoder.weight      # tied, as W10

    def forward(self, x, hidden):
        out, hidden = self.rnn(self.encoder(x), hidden)
        return self.decoder(out).view(-1, V), hidden


def _train(steps, observe_each_call):
    """Losses, parameters and per-call (program results, observed results) of W10's step
    (small), compiled; `observe_each_call`: after each call, the observing runner runs on
    copies of the same arguments (as check mode runs it)."""
    eager.manual_seed(0)
    model = _LM()
    opt = optim.SGD(model.parameters(), lr=0.5)
    data = np.random.default_rng(0).integers(0, V, (steps, SEQ + 1, N))

    @tracer.function
    def step(x, y, hidden):
        opt.zero_grad()
        logits, hidden = model(x, hidden)
        loss = F.cross_entropy(logits, y.reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()
        return loss.detach(), tuple(h.detach() for h in hidden)

    z = eager.zeros(2, N, H)
    hidden, losses, pairs = (z, z), [], []
    for i in range(steps):
        args = eager.tensor(data[i, :-1]), eager.tensor(data[i, 1:]), hidden
        program = step.get_concrete_function(*args).program
        plain = program._run
        if observe_each_call and plain.__name__ == "run":
            def both(a, dests=None, plain=plain, program=program):
                copies = [np.array(x, copy=True) for x in a]
                got = plain(a, dests)
                seen = {}
                observed = program.run_observed(copies, lambda s, v: seen.setdefault(
                    s, np.array(v, copy=True)))
                pairs.append(([np.array(r, copy=True) for r in got],
                              [np.array(r, copy=True) for r in observed]))
                return got
            both.__name__ = "both"
            program._run = both
        loss, hidden = step(*args)
        losses.append(loss.item())
    return losses, [p.detach().numpy().copy() for p in model.parameters()], pairs


@pytest.mark.parametrize("threads", [1, 2])
def test_observing_runs_leave_the_program_computing_what_it_computed(monkeypatch, threads):
    # (two kernel threads: codegen.overlap plans the program's runner, placing its cats
    # before its steps; one: it does not)
    monkeypatch.setattr(parallel, "_SPLIT_THREADS", threads)
    want, params, _ = _train(4, False)
    got, params_seen, pairs = _train(4, True)
    assert len(pairs) == 4
    for results, observed in pairs:
        for a, b in zip(results, observed):
            assert np.array_equal(a, b, equal_nan=True)
    assert got == want
    for a, b in zip(params, params_seen):
        assert np.array_equal(a, b)


def test_the_observing_runner_keeps_its_buffers_apart_from_the_programs(monkeypatch):
    monkeypatch.setattr(parallel, "_SPLIT_THREADS", 2)
    eager.manual_seed(0)
    model = _LM()

    @tracer.function
    def f(x, hidden):
        with eager.no_grad():
            return model(x, hidden)[0] * 2.0
    x = eager.tensor(np.random.default_rng(1).integers(0, V, (SEQ, N)))
    z = eager.zeros(2, N, H)
    program = f.get_concrete_function(x, (z, z)).program
    plain, calls = program._run, []

    def recording(a, dests=None):
        calls.append([np.array(v, copy=True) for v in a])
        return plain(a, dests)
    program._run = recording
    want = f(x, (z, z)).numpy().copy()
    program._run = plain
    bufs = program.tls.runner_buffers   # (the program's runner made them on this thread)
    before = [(o, o.copy()) for o, _ in bufs]
    # other tokens: the same buffers (shared) would now hold other values
    x2 = eager.tensor(np.random.default_rng(2).integers(0, V, (SEQ, N)))
    args = [x2.numpy().copy(), *calls[0][1:]]
    seen = {}
    got = program.run_observed(args, lambda s, v: seen.setdefault(s, 1))
    assert seen
    assert program.tls.runner_buffers is bufs
    for (o, copy), (now, _) in zip(before, bufs):
        assert now is o and np.array_equal(o, copy, equal_nan=True)
    assert np.array_equal(f(x, (z, z)).numpy(), want)
    assert np.array_equal(got[0], f(x2, (z, z)).numpy())


def test_observing_runners_made_again_share_their_buffers():
    """benchmarks.step_profile makes an observing runner per profile: each one made its own
    per-thread buffers (a new numbered set, kept for the program's and thread's life), so a
    process profiling, or observing, a program again and again grew by its buffers each
    time. Runners of the same code now share one set; results unchanged."""
    from codegen import runner

    eager.manual_seed(0)
    lin = nn.Linear(16, 32)

    @tracer.function
    def f(x):
        with eager.no_grad():
            return F.gelu(lin(x)).softmax(dim=1) * 3.0
    x = eager.randn(8, 16)
    program = f.get_concrete_function(x).program
    plain, calls = program._run, []

    def recording(a, dests=None):
        calls.append([np.array(v, copy=True) for v in a])
        return plain(a, dests)
    program._run = recording
    want = f(x).numpy().copy()
    program._run = plain
    seen = []
    for _ in range(4):
        run = runner.generate(program, observe=True)[1]
        got = run([np.array(v, copy=True) for v in calls[0]], lambda s, v: None)
        assert np.array_equal(got[0], want)
        seen.append(sorted(program.tls.__dict__))
    assert len(seen[0]) >= 2 and all(keys == seen[0] for keys in seen), seen
    assert np.array_equal(f(x).numpy(), want)
