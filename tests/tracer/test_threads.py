"""@function called from many threads at once: one trace per signature, correct results,
and a trace in one thread never changes what eager code computes in another."""
import threading

import numpy as np

import eager
import eager.nn as nn
import tracer

N_THREADS = 8
CALLS = 150
SHAPES = [(3,), (4, 2), (2, 5)]


def _run_threads(worker):
    errors = []
    start = threading.Barrier(N_THREADS)

    def run(k):
        try:
            start.wait()
            worker(k)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append((k, exc))

    threads = [threading.Thread(target=run, args=(k,)) for k in range(N_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a worker hung"
    assert not errors, errors


def test_concurrent_calls_trace_once_per_signature():
    bodies_run = []

    @tracer.function(backend="interpret")
    def f(x, y):
        bodies_run.append(x.shape)
        return (x * 2 + y).tanh() * y

    def worker(k):
        rng = np.random.default_rng(k)
        for i in range(CALLS):
            shape = SHAPES[(k + i) % len(SHAPES)]
            a = rng.standard_normal(shape).astype(np.float32)
            b = rng.standard_normal(shape).astype(np.float32)
            out = f(eager.tensor(a), eager.tensor(b)).numpy()
            np.testing.assert_allclose(out, np.tanh(a * 2 + b) * b, rtol=1e-5, atol=1e-6)

    _run_threads(worker)
    assert f.trace_count == len(SHAPES)
    assert sorted(bodies_run) == sorted(SHAPES)


def test_concurrent_calls_with_captured_parameters_and_no_grad():
    eager.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 2))

    @tracer.function(backend="interpret")
    def predict(x):
        return model(x)

    with eager.no_grad():
        batches = [eager.randn(n, 5) for n in (1, 4, 7)]
        expected = [model(x).numpy() for x in batches]

    def worker(k):
        with eager.no_grad():  # grad mode is per thread, as in PyTorch
            for i in range(CALLS // 3):
                j = (k + i) % len(batches)
                np.testing.assert_allclose(predict(batches[j]).numpy(), expected[j],
                                           rtol=1e-5, atol=1e-6)

    _run_threads(worker)
    assert predict.trace_count == len(batches)


def test_a_trace_in_progress_does_not_affect_eager_code_in_other_threads():
    tracing = threading.Event()
    release = threading.Event()

    @tracer.function(backend="interpret")
    def slow(x):
        y = x * 3
        tracing.set()
        assert release.wait(10)  # hold the trace open while the main thread computes
        return y + 1

    result = {}
    t = threading.Thread(target=lambda: result.setdefault("out", slow(eager.ones(2))))
    t.start()
    try:
        assert tracing.wait(10)
        a = eager.tensor([1.0, 2.0])
        b = (a * 3 + 1).exp().sum()  # eager ops here compute; the other thread records
        assert isinstance(b.item(), float)
        np.testing.assert_allclose(b.item(), np.exp([4.0, 7.0]).sum(), rtol=1e-6)
    finally:
        release.set()
        t.join(10)
    np.testing.assert_array_equal(result["out"].numpy(), [4.0, 4.0])
    assert slow.trace_count == 1
