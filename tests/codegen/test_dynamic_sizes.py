"""One compiled fused kernel for every batch size (codegen.emit DYNAMIC_DOC, SPLIT_DOC): a
training step traced again at another batch size gives eager's results and compiles
nothing new, since its kernels' code names the batch-dependent counts as run-time values
(lo..hi, size arguments); a size of 1 or 0, a size-1 broadcast and a merged leading axis
are other code. Each case against eager on the same inputs and state."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F
import eager.optim as optim
import tracer
from codegen import build, emit, program as program_mod

FEATURES, CLASSES = 8, 4
# the loaders' counters: a kernel compiled, or loaded from the disk cache
LOADS = ("numba_compiles", "numba_cache_hits", "objects_loaded", "modules_loaded")


def _loads() -> int:
    stats = build.compile_stats()
    return sum(stats[k] for k in LOADS)


def _close(got, want):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-6)


def _texts(f, *args) -> set:
    """The compiled code of every kernel of `f`'s trace for `args` (one module each)."""
    return {k.compiled for k in f.get_concrete_function(*args).kernels}


def _model_and_step():
    eager.manual_seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, CLASSES), nn.ReLU())
    opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def step(x, y):
        out = model(x)
        # (a sum: a mean over a batch of 0 is NaN)
        loss = -(F.log_softmax(out, -1) * y).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    return model, step


def _batch(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, FEATURES)).astype(np.float32)
    y = rng.uniform(0, 1, (n, CLASSES)).astype(np.float32)
    return x, y


@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_a_training_step_at_every_batch_size_gives_eagers_results(backend):
    model_c, step_c = _model_and_step()
    model_e, step_e = _model_and_step()
    compiled = tracer.function(step_c, backend=backend)
    first = None
    for seed, n in enumerate((64, 32, 7, 1, 0)):
        x, y = _batch(n, seed)
        before = _loads()
        got = compiled(eager.from_numpy(x), eager.from_numpy(y)).item()
        loads = _loads() - before
        want = step_e(eager.from_numpy(x), eager.from_numpy(y)).item()
        _close(got, want)
        for pc, pe in zip(model_c.parameters(), model_e.parameters()):
            _close(pc.detach().numpy(), pe.detach().numpy())
            _close(pc.grad.numpy(), pe.grad.numpy())
        if backend != "numba":
            continue
        texts = _texts(compiled, eager.from_numpy(x), eager.from_numpy(y))
        if first is None:
            first = texts
        elif n > 1:  # (the same code: nothing compiled or loaded again)
            assert texts == first, n
            assert loads == 0, n
    assert compiled.trace_count == 5


def test_non_contiguous_inputs_share_the_kernels_too():
    def f(x, b):
        return F.relu(x * 2.0 + b), F.softmax(x, -1), x.sum(0)

    compiled = tracer.function(f)
    rng = np.random.default_rng(3)
    b = eager.from_numpy(rng.standard_normal(FEATURES).astype(np.float32))
    first = None
    for n in (64, 32, 7):
        # a transposed view: (n, FEATURES) with strides of the (FEATURES, n) array
        xt = eager.from_numpy(rng.standard_normal((FEATURES, n)).astype(np.float32)).T
        with eager.no_grad():
            before = _loads()
            got = compiled(xt, b)
            loads = _loads() - before
            for g, w in zip(got, f(xt, b)):
                _close(g.numpy(), w.numpy())
            texts = _texts(compiled, xt, b)
        if first is None:
            first = texts
        else:
            assert texts == first and loads == 0, n


def test_a_size_1_batch_broadcast_is_other_code():
    """x + y and x * y where either side may be one row: every combination is eager's, and
    a kernel built for rows of its own never runs where one side broadcasts."""
    def f(x, y):
        return x * y + x

    compiled = tracer.function(f)
    rng = np.random.default_rng(4)

    def arr(n):
        return eager.from_numpy(rng.standard_normal((n, FEATURES)).astype(np.float32))

    texts = {}
    with eager.no_grad():
        for nx, ny in ((64, 64), (32, 32), (1, 64), (1, 32), (64, 1), (32, 1), (1, 1)):
            x, y = arr(nx), arr(ny)
            _close(compiled(x, y).numpy(), f(x, y).numpy())
            texts[nx, ny] = _texts(compiled, x, y)
    # each batch size of a pattern: one kernel's code; each broadcast pattern: other code
    # ((1, 1) broadcasts nothing, as (64, 64): one loop over the elements either way)
    assert texts[64, 64] == texts[32, 32] == texts[1, 1]
    assert texts[1, 64] == texts[1, 32]
    assert texts[64, 1] == texts[32, 1]
    patterns = [texts[64, 64], texts[1, 64], texts[64, 1]]
    for i, a in enumerate(patterns):
        for b in patterns[i + 1:]:
            assert not (a & b)


def test_a_batch_in_a_middle_axis_merges_into_the_rows():
    """(seq, batch, hidden) + a bias, summed over (seq, batch): the leading axes are one
    count, so another batch size is the same code (an LSTM language model's kernels)."""
    def f(x, b):
        h = x + b
        return h * 2.0, h.sum((0, 1))

    compiled = tracer.function(f)
    rng = np.random.default_rng(5)
    b = eager.from_numpy(rng.standard_normal(FEATURES).astype(np.float32))
    first = None
    with eager.no_grad():
        for n in (6, 3):
            x = eager.from_numpy(rng.standard_normal((5, n, FEATURES)).astype(np.float32))
            before = _loads()
            got = compiled(x, b)
            loads = _loads() - before
            for g, w in zip(got, f(x, b)):
                _close(g.numpy(), w.numpy())
            texts = _texts(compiled, x, b)
            first = first or texts
            assert texts == first and (loads == 0 or n == 6)
    assert any("size0" in t for t in first)


def test_the_parallel_split_is_decided_by_the_program_from_the_size(monkeypatch):
    """Past PARALLEL_MIN_SIZE the program runs a flat kernel's loop in pieces on its
    threads; below it, at once: the same compiled code either way."""
    monkeypatch.setattr(emit, "PARALLEL_MIN_SIZE", 40 * FEATURES)

    def f(x, b):
        return F.relu(x * 2.0 + b) - x

    compiled = tracer.function(f)
    rng = np.random.default_rng(6)
    b = eager.from_numpy(np.array(0.5, np.float32))
    calls = {}
    with eager.no_grad():
        for n in (64, 7):
            x = eager.from_numpy(rng.standard_normal((n, FEATURES)).astype(np.float32))
            _close(compiled(x, b).numpy(), f(x, b).numpy())
            (call,) = [s for s in compiled.get_concrete_function(x, b).program.steps
                       if hasattr(s, "sizes")]
            calls[n] = call
    big, small = calls[64], calls[7]
    assert big.kernel.compiled == small.kernel.compiled
    assert big.entry is not big.kernel.entry and big.sizes == ()  # (split in pieces)
    assert small.entry is small.kernel.entry and small.sizes == (0, 7 * FEATURES)


def test_a_size_argument_that_is_no_loop_count_of_the_kernel_is_refused():
    group = SimpleNamespace(name="k0", shape=(4, 3), parts=[])
    assert program_mod._checked_sizes(SimpleNamespace(sizes={4: "size0"}), group) == (4,)
    with pytest.raises(AssertionError, match="size argument 5"):
        program_mod._checked_sizes(SimpleNamespace(sizes={5: "size0"}), group)
