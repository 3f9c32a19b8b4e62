"""codegen.overlap: a long sequential step (an LSTM layer's time loop) on the kernel pool's
thread while the calling thread runs the products that do not depend on it.

The plan follows what steps read and write (a product reading the loop's output waits for
it); the results are the same bits as the steps run one after the other, and eager's; an
error inside either thread comes out as the steps in their order would raise it; threads of
the user's calling one compiled function each get their own results.

The shapes are test_rnn_traced's (its kernels serve here), with every product through
codegen.gemm's kernel (`forced`: its rule on whatever this machine is, for any size)."""
from __future__ import annotations

import concurrent.futures
import threading

import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F
import eager.optim as optim
import tracer
from codegen import gemm, overlap, parallel, runner

L, N, HIN, H = 3, 3, 4, 6
V, SEQ = 40, 5


@pytest.fixture
def forced(monkeypatch):
    """codegen.gemm computes every float32 product (those a region may take), with two
    kernel threads (a region needs the pool's)."""
    monkeypatch.setattr(gemm, "_available", lambda: True)
    monkeypatch.setattr(gemm, "MIN_FLOPS", 0)
    # (all: on an AVX2 CPU the kernel takes no product unless told to: codegen.gemm._mode)
    monkeypatch.setenv("TRACEJIT_GEMM", "all")
    monkeypatch.setattr(parallel, "_SPLIT_THREADS", 2)


def _sequential(program):
    """`program`'s runner with every step on the calling thread, in order."""
    plan = overlap.plan
    overlap.plan = lambda gen: (list(range(len(gen.p.steps))), {})
    try:
        return runner.generate(program)[1]
    finally:
        overlap.plan = plan


def _ancestors(graph, eqn) -> set:
    """ids of the equations whose values `eqn` reads, directly or not."""
    made = {id(o): e for e in graph.eqns for o in e.outs}
    seen, todo = set(), [eqn]
    while todo:
        for x in todo.pop().inputs:
            e = made.get(id(x))
            if e is not None and id(e) not in seen:
                seen.add(id(e))
                todo.append(e)
    return seen


class WordLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Embedding(V, H)
        self.rnn = nn.LSTM(H, H, 2)
        self.decoder = nn.Linear(H, V)
        self.decoder.weight = self.encoder.weight      # tied

    def forward(self, x, hidden):
        out, hidden = self.rnn(self.encoder(x), hidden)
        return self.decoder(out).view(-1, V), hidden


def _lm(compiled, steps=3, seed=0, plain=False):
    """An LSTM language model trained `steps` steps (W10's step, small): the losses, the
    model and the compiled function. `plain`: its runner without regions."""
    eager.manual_seed(seed)
    model = WordLM()
    opt = optim.SGD(model.parameters(), lr=0.5)
    data = np.random.default_rng(seed).integers(0, V, (steps, SEQ + 1, N))

    def step(x, y, hidden):
        opt.zero_grad()
        logits, hidden = model(x, hidden)
        loss = F.cross_entropy(logits, y.reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()
        return loss.detach(), tuple(h.detach() for h in hidden)

    run = tracer.function(step) if compiled else step
    z = eager.zeros(2, N, H)
    hidden, losses = (z, z), []
    for i in range(steps):
        args = eager.tensor(data[i, :-1]), eager.tensor(data[i, 1:]), hidden
        if plain and i == 0:
            program = run.get_concrete_function(*args).program
            program._run = _sequential(program)
        loss, hidden = run(*args)
        losses.append(loss.item())
    return losses, model, run, args


def test_lm_step_runs_each_backward_loop_beside_products_that_do_not_read_it(forced):
    want, m_e, _, _ = _lm(False)
    got, m_c, run, args = _lm(True)
    plain, m_p, _, _ = _lm(True, plain=True)
    concrete = run.get_concrete_function(*args)
    program, graph = concrete.program, concrete.graph
    assert [program.steps[k].eqn.op for k in program.regions] \
        == ["lstm_recurrence_backward"] * 2, program.describe()
    for k, mine in program.regions.items():
        long = program.steps[k].eqn
        for j in mine:
            e = program.steps[j].eqn
            assert e.op == "matmul"
            assert id(long) not in _ancestors(graph, e)    # it does not read the loop's values
            assert id(e) not in _ancestors(graph, long)    # nor the loop its value
    # W10's: layer 2's loop beside the decoder's weight gradient, layer 1's beside layer
    # 2's two weight-gradient products
    assert [len(m) for m in program.regions.values()] == [1, 2]
    assert "at once: " in program.describe()
    assert "def side" in program.runner_source
    # the same bits as one step after the other; eager's values
    assert got == plain
    for a, b in zip(m_c.parameters(), m_p.parameters()):
        assert np.array_equal(a.detach().numpy(), b.detach().numpy())
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for (name, a), b in zip(m_e.named_parameters(), m_c.parameters()):
        np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=1e-5,
                                   atol=1e-6, err_msg=name)


def _forward_args(seed):
    rng = np.random.default_rng(seed)
    return (eager.tensor(rng.standard_normal((L, N, HIN)).astype(np.float32)),
            eager.tensor(rng.standard_normal((16, 12)).astype(np.float32)),
            eager.tensor(rng.standard_normal((12, 16)).astype(np.float32)))


def test_a_product_reading_the_loop_waits_for_it_and_one_that_does_not_runs_beside(
        forced, monkeypatch):
    eager.manual_seed(3)
    m = nn.LSTM(HIN, H)
    w = eager.randn(H, 8)

    def f(x, a, b):
        with eager.no_grad():
            out = m(x)[0]
            return out.reshape(L * N, H) @ w, a @ b
    compiled = tracer.function(f)
    args = _forward_args(0)
    got = compiled(*args)
    program = compiled.get_concrete_function(*args).program
    ((k, mine),) = program.regions.items()
    assert program.steps[k].eqn.op == "lstm_recurrence"
    assert [program.steps[j].eqn.inputs[0].type.shape for j in mine] == [(16, 12)]
    for a, b in zip(got, f(*args)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    # one kernel thread: no second thread to run a loop on, no regions
    monkeypatch.setattr(parallel, "_SPLIT_THREADS", 1)
    runner.generate(program)
    assert program.regions == {}


class Boom(RuntimeError):
    pass


def _raising(message):
    def kernel(*args, **kwargs):
        raise Boom(message)
    return kernel


def test_an_error_in_either_thread_comes_out_as_the_steps_in_order_raise_it(forced,
                                                                          monkeypatch):
    _, _, run, args = _lm(True, steps=1)
    program = run.get_concrete_function(*args).program
    k = list(program.regions)[1]  # layer 1's loop; both its products come before it
    good, step = program._run, program.steps[k]
    loop = step.kernel
    monkeypatch.setattr(step, "kernel", _raising("in the loop"))
    program._run = runner.generate(program)[1]
    with pytest.raises(Boom, match="in the loop"):
        run(*args)
    # a product moved from before the loop fails too: its error, as the order raises
    real = gemm.matmul
    monkeypatch.setattr(gemm, "matmul", lambda a, b, out=None: (
        _raising("in a product")() if a.shape == (4 * H, SEQ * N) else real(a, b, out=out)))
    program._run = runner.generate(program)[1]
    with pytest.raises(Boom, match="in a product"):
        run(*args)
    # the pool is free again, and the program computes (the next step: the failed calls
    # stopped before the update)
    monkeypatch.setattr(gemm, "matmul", real)
    monkeypatch.setattr(step, "kernel", loop)
    program._run = good
    assert np.isfinite(run(*args)[0].item())


def test_settle_and_join_raise_the_error_of_the_earlier_step():
    pool = parallel._SPLIT_POOL or parallel._split_pool()
    failed, ok = pool.submit(_raising("long step")), pool.submit(lambda: 1)
    concurrent.futures.wait([failed, ok])  # (both run: none is cancelled below)
    for at, pos, which in ((39, 42, "main"), (51, 42, "long step"), (51, 57, "main")):
        with pytest.raises(Boom, match=which) if which != "main" else \
                pytest.raises(ValueError, match="main"):
            overlap.settle(failed, None, ValueError("main"), at, pos)
    with pytest.raises(ValueError, match="main"):
        overlap.settle(ok, None, ValueError("main"), 51, 42)
    with pytest.raises(Boom):
        overlap.join(failed, None)
    assert overlap.join(ok, None) == 1
    # a long step the pool's thread has not started (busy here): the caller runs it,
    # and only where it comes first
    gate = threading.Event()
    busy = pool.submit(gate.wait)
    try:
        ran = []
        for at, pos, which in ((39, 42, "main"), (51, 42, "long step")):
            waiting = pool.submit(_raising("never"))
            with pytest.raises(Boom, match=which) if which != "main" else \
                    pytest.raises(ValueError, match="main"):
                overlap.settle(waiting, lambda p=pos: (ran.append(p), _raising("long step")()),
                               ValueError("main"), at, pos)
            assert waiting.cancelled()
        assert ran == [42]
        waiting = pool.submit(_raising("never"))
        assert overlap.join(waiting, lambda: 2) == 2 and waiting.cancelled()
    finally:
        gate.set()
    busy.result()


def test_threads_of_the_user_calling_one_compiled_function_get_their_own_results(forced):
    eager.manual_seed(3)
    m = nn.LSTM(HIN, H)
    w = eager.randn(H, 8)

    def f(x, a, b):
        with eager.no_grad():
            out = m(x)[0]
            return out.reshape(L * N, H) @ w, a @ b
    compiled = tracer.function(f)
    inputs = [_forward_args(seed) for seed in range(8)]
    want = [[t.numpy().copy() for t in compiled(*args)] for args in inputs]
    assert compiled.get_concrete_function(*inputs[0]).program.regions
    got, errors = {}, []

    def work(t):
        try:
            for r in range(6):
                for i in range(t, len(inputs), 2):
                    got[t, r, i] = [x.numpy().copy() for x in compiled(*inputs[i])]
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
    threads = [threading.Thread(target=work, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(got) == 6 * len(inputs)
    for (t, r, i), values in got.items():
        for a, b in zip(values, want[i]):
            assert np.array_equal(a, b), (t, r, i)
