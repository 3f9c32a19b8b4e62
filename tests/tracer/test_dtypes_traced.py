"""Issue 16 item 7 compiled: every storage dtype through a few elementwise programs, traced
and run on both backends, bit-for-bit against eager (outputs, dtypes, gradients).

float16 kernels run as numpy steps (Numba has no CPU float16): eager's per-op rounding,
with no FallbackWarning (tests/conftest.py makes that an error).  One program per dtype
family keeps the compile count small."""
from __future__ import annotations

import numpy as np
import pytest

import eager
import tracer

BACKENDS = ("numba", "interpret")
INTS = ("uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64")
FLOATS = ("float16", "float32", "float64")


def _same(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    g, w = got.detach().numpy(), want.detach().numpy()
    assert np.array_equal(g, w, equal_nan=g.dtype.kind == "f"), (g, w)


def _arith(a, b):
    # Wraps after every op for the integer dtypes (numpy and PyTorch do; Numba computes
    # narrow integers in 64 bits, so a fused kernel must cast back after each op), rounds
    # after each op for float16.
    p = a * b + a
    return ((p - 3) * 2, (a - b).amax(axis=2, keepdims=True), a > b, p > 100, p.float() / 2,
            eager.maximum(p, b), (p - b) * 3 > 7, eager.where(p > b, p, b))


def _inputs(dt):
    rng = np.random.default_rng(7)
    if dt in FLOATS:
        a, b = rng.uniform(-30, 30, (2, 3, 40)), rng.uniform(-30, 30, (2, 3, 40))
    else:
        info = np.iinfo(dt)  # products overflow: they wrap
        a, b = (rng.integers(info.min // 4, info.max // 4, (2, 3, 40), dtype=dt)
                for _ in range(2))
    return eager.tensor(a.astype(dt)), eager.tensor(b.astype(dt))


@pytest.mark.parametrize("backend", BACKENDS)
def test_elementwise_program_matches_eager_for_every_dtype(backend):
    for dt in INTS + FLOATS:
        f = tracer.function(_arith, backend=backend)  # (one trace each: no retrace warning)
        a, b = _inputs(dt)
        for got, want in zip(f(a, b), _arith(a, b)):
            _same(got, want)


def _mixed(u8, i8, h, x):
    # uint8 with int8 -> int16; float16 with an int tensor -> float16; float16 with float32
    # -> float32; casts truncate toward zero
    return u8 + i8, h * i8, h + x, (x * 3.7).to(eager.int8), (x * 100).byte(), u8 + 300


@pytest.mark.parametrize("backend", BACKENDS)
def test_mixed_dtypes_and_casts_match_eager(backend):
    f = tracer.function(_mixed, backend=backend)
    rng = np.random.default_rng(3)
    args = (eager.tensor(rng.integers(0, 256, 8).astype(np.uint8)),
            eager.tensor(rng.integers(-128, 128, 8).astype(np.int8)),
            eager.tensor(rng.uniform(-4, 4, 8).astype(np.float16)),
            eager.tensor(rng.uniform(-2, 2, 8).astype(np.float32)).abs())
    want = _mixed(*args)
    assert [w.dtype for w in want] == [eager.int16, eager.float16, eager.float32, eager.int8,
                                       eager.uint8, eager.uint8]
    for got, w in zip(f(*args), want):
        _same(got, w)


def _loss(x, w):
    return (eager.tanh(x * w) * x + w / 2).sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_float16_gradients_compiled_match_eager(backend):
    def step(x, w):
        loss = _loss(x, w)
        loss.backward()
        return loss

    f = tracer.function(step, backend=backend)
    x0 = np.array([0.5, -1.25, 2.0, 3.5], np.float16)
    w0 = np.array([1.5, 0.25, -2.0, 1.0], np.float16)
    xe, we = (eager.tensor(v, requires_grad=True) for v in (x0, w0))
    xc, wc = (eager.tensor(v, requires_grad=True) for v in (x0, w0))
    _same(f(xc, wc), step(xe, we))
    for g, e in ((xc.grad, xe.grad), (wc.grad, we.grad)):
        assert g.dtype == eager.float16
        _same(g, e)


def test_the_trace_is_keyed_by_dtype():
    f = tracer.function(lambda a: a * 2 + 1, backend="interpret")
    for dt in ("uint8", "int16", "float16"):
        x = eager.tensor(np.array([100, 200]).astype(dt))
        _same(f(x), x * 2 + 1)
    assert f.trace_count == 3
