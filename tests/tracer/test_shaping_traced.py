"""Indexing, shaping, scan and sampling ops (issue 16 item 4) traced and compiled: the ops
whose output shape depends on values refuse to trace with a TracingError naming the line
and the alternative; value checks run when the compiled program runs; and a small
GPT-style program (causal mask with tril/masked_fill, generate() with topk, multinomial
and cat) gives the same numbers eagerly and compiled, on both backends.

The per-op checks (each op traced and compiled against eager on every layout, NaN/inf,
0-d and zero-size inputs) are generated from the tables: tests/eager/opinfo_shaping.py
(test_registry_traced.py) and OP_CASES in tests/codegen/test_numba_backend.py.
"""
import math

import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F
import tracer

BACKENDS = ("interpret", "numba")


# --------------------------------------------------------------------------------------
# refused while tracing, with the line and the alternative

def _line_of(fn, text):
    import inspect

    lines, start = inspect.getsourcelines(fn)
    for i, line in enumerate(lines):
        if text in line:
            return start + i
    raise AssertionError(text)


def _nonzero_body(x):
    return eager.nonzero(x > 0)


def _where_one_arg_body(x):
    return eager.where(x > 0)


def _masked_select_body(x):
    return x.masked_select(x > 0) * 2


def _repeat_interleave_body(x, r):
    return x.repeat_interleave(r, dim=0)


@pytest.mark.parametrize("body,text,args,hint", [
    (_nonzero_body, "eager.nonzero", (eager.ones(3),), "where"),
    (_where_one_arg_body, "eager.where", (eager.ones(3),), "where(x != 0, ..., ...)"),
    (_masked_select_body, "x.masked_select", (eager.ones(3),), "masked_fill"),
    (_repeat_interleave_body, "x.repeat_interleave", (eager.ones(3), eager.tensor([1, 2, 0])),
     "pass an int"),
])
def test_value_dependent_shapes_raise_tracing_error_naming_the_line(body, text, args, hint):
    f = tracer.function(body, backend="interpret")
    with pytest.raises(tracer.TracingError) as info:
        f(*args)
    message = str(info.value)
    assert f"test_shaping_traced.py:{_line_of(body, text)}" in message, message
    assert hint in message, message


def test_value_dependent_op_on_a_captured_tensor_is_refused_too():
    captured = eager.tensor([0.0, 1.0, 2.0])
    f = tracer.function(lambda x: eager.nonzero(captured) + x, backend="interpret")
    with pytest.raises(tracer.TracingError, match="nonzero"):
        f(eager.ones(1, 1, dtype=eager.int64))


@pytest.mark.parametrize("backend", BACKENDS)
def test_index_and_distribution_checks_run_when_the_compiled_program_runs(backend):
    @tracer.function(backend=backend)
    def pick(x, idx, p):
        return eager.gather(x, 1, idx), eager.multinomial(p, 1)

    x = eager.ones(2, 3)
    p = eager.tensor([[0.2, 0.8], [1.0, 0.0]])
    good = eager.tensor([[0, 2], [1, 1]])
    pick(x, good, p)
    with pytest.raises(IndexError):
        pick(x, eager.tensor([[0, 3], [1, 1]]), p)
    with pytest.raises(RuntimeError, match="element < 0"):
        pick(x, good, eager.tensor([[0.2, -0.8], [1.0, 0.0]]))
    with pytest.raises(RuntimeError, match="sum of probabilities"):
        pick(x, good, eager.tensor([[0.0, 0.0], [1.0, 0.0]]))
    assert pick.trace_count == 1


@pytest.mark.parametrize("make", [
    lambda g: eager.rand(3, generator=g), lambda g: eager.randn(3, generator=g),
    lambda g: eager.randint(0, 5, (3,), generator=g),
    lambda g: eager.multinomial(eager.tensor([0.5, 0.5]), 3, True, generator=g).float(),
    lambda g: eager.zeros(3).uniform_(generator=g),
    lambda g: eager.bernoulli(eager.full((3,), 0.5), generator=g)])
def test_a_generator_of_ones_own_is_refused_inside_a_trace(make):
    # its draws would be frozen into the trace and its state would not advance per call
    g = eager.Generator().manual_seed(0)
    state = g.get_state()
    f = tracer.function(lambda x: x + make(g), backend="interpret")
    with pytest.raises(RuntimeError, match="generator= inside a @") as info:
        f(eager.zeros(3))
    assert "test_shaping_traced.py:" in str(info.value)
    assert g.get_state() == state


@pytest.mark.parametrize("backend", BACKENDS)
def test_bernoulli_checks_probabilities_when_the_compiled_program_runs(backend):
    f = tracer.function(lambda p: eager.bernoulli(p) * 2, backend=backend)
    eager.manual_seed(4)
    want = (eager.bernoulli(eager.tensor([0.0, 1.0, 0.5])) * 2).numpy()
    eager.manual_seed(4)
    np.testing.assert_array_equal(f(eager.tensor([0.0, 1.0, 0.5])).numpy(), want)
    with pytest.raises(RuntimeError, match="p_in >= 0"):
        f(eager.tensor([0.0, 1.0, 1.5]))
    assert f.trace_count == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_scatter_reduce_mean_floor_divides_compiled(backend):
    def body(x, idx, src):
        return (x.scatter_reduce(0, idx, src, "mean"),
                x.scatter_reduce(0, idx, src, "mean", include_self=False))

    f = tracer.function(body, backend=backend)
    rng = np.random.default_rng(3)
    for dtype in (np.int32, np.int64):
        x = eager.from_numpy(rng.integers(-20, 20, (4, 3)).astype(dtype))
        idx = eager.from_numpy(rng.integers(0, 4, (5, 3)))
        src = eager.from_numpy(rng.integers(-20, 20, (5, 3)).astype(dtype))
        for got, want in zip(f(x, idx, src), body(x, idx, src)):
            assert got.dtype == want.dtype == dtype
            np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("backend", BACKENDS)
def test_transposed_and_sliced_inputs(backend):
    """Non-contiguous views traced as inputs: the same as eager."""
    def body(x):
        return (eager.cumsum(x, 0), eager.sort(x, 1, descending=True).values,
                x.tril(-1), eager.roll(x, 1, 1), eager.cummax(x, 1).indices,
                eager.einsum("ij->ji", x), x.flip(0).unfold(0, 2, 1))

    f = tracer.function(body, backend=backend)
    base = eager.from_numpy(np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32))
    for x in (base.T, base[::2, 1::3], base[::-1]):
        got = f(x)
        want = body(x)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------------------
# a GPT-style program written as PyTorch users write it

class Head(nn.Module):
    def __init__(self, n_embd, block_size):
        super().__init__()
        self.qkv = nn.Linear(n_embd, 3 * n_embd, bias=False)
        self.proj = nn.Linear(n_embd, n_embd)
        self.register_buffer("tril", eager.tril(eager.ones(block_size, block_size)))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C))
        att = att.masked_fill(self.tril[:T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        return self.proj(att @ v)


class TinyGPT(nn.Module):
    def __init__(self, vocab=11, n_embd=8, block_size=4):
        super().__init__()
        self.block_size = block_size
        self.tok = nn.Embedding(vocab, n_embd)
        self.pos = nn.Embedding(block_size, n_embd)
        self.head = Head(n_embd, block_size)
        self.ln = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        x = self.tok(idx) + self.pos(eager.arange(T))
        x = x + self.head(x)
        logits = self.lm_head(self.ln(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(B * T, -1), targets.view(B * T))
        return logits, loss


def _sample_next(model, idx, temperature=0.8, top_k=3):
    logits, _ = model(idx[:, -model.block_size:])
    logits = logits[:, -1, :] / temperature
    v, _ = eager.topk(logits, min(top_k, logits.size(-1)))
    logits = logits.masked_fill(logits < v[:, [-1]], -float("Inf"))
    probs = F.softmax(logits, dim=-1)
    return eager.multinomial(probs, num_samples=1)


def generate(model, idx, max_new_tokens, step):
    for _ in range(max_new_tokens):
        idx_next = step(model, idx[:, -model.block_size:])
        idx = eager.cat((idx, idx_next), dim=1)
    return idx


def _batch(seed):
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 11, (3, 5))
    return eager.tensor(data[:, :4]), eager.tensor(data[:, 1:])


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpt_training_step_and_generate_match_eager(backend):
    def make():
        eager.manual_seed(0)
        model = TinyGPT()
        return model, eager.optim.AdamW(model.parameters(), lr=1e-2)

    def train_step(model, opt, x, y):
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    eager_model, eager_opt = make()
    model, opt = make()
    step = tracer.function(lambda x, y: train_step(model, opt, x, y), backend=backend)
    for i in range(3):
        x, y = _batch(i)
        want = train_step(eager_model, eager_opt, x, y)
        got = step(x, y)
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
    assert step.trace_count == 1
    for (name, p), q in zip(model.named_parameters(), eager_model.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-4,
                                   atol=1e-5, err_msg=name)
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=name)

    model.eval()
    eager_model.eval()
    sample = tracer.function(lambda idx: _sample_next(model, idx), backend=backend)
    start = eager.tensor([[1, 2, 3, 4]])
    with eager.no_grad():
        eager.manual_seed(5)
        want = generate(eager_model, start, 6, _sample_next)
        eager.manual_seed(5)
        got = generate(model, start, 6, lambda m, idx: sample(idx))
    assert got.shape == (1, 10) and got.dtype == np.int64
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert sample.trace_count == 1
    # topk cropped the distribution: every sampled token is among the 3 most likely
    with eager.no_grad():
        for t in range(4, 10):
            logits, _ = eager_model(got[:, t - 4:t])
            top = set(eager.topk(logits[0, -1], 3).indices.tolist())
            assert got[0, t].item() in top


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_through_the_new_primitives_compiled(backend):
    """loss.backward() inside a compiled function: the IR autodiff of cumsum, cumprod,
    logcumsumexp, cummax, sort, topk, scatter and scatter_reduce gives eager's .grad."""
    idx = eager.tensor([[0, 2, 0], [1, 1, 3]])

    def body(x, w):
        loss = (eager.cumsum(x, 1) * w).sum()
        loss = loss + (eager.cumprod(x, 0) * w).sum() + eager.logcumsumexp(x, 1).sum()
        loss = loss + (eager.cummax(x, 1).values * w).sum()
        loss = loss + (eager.sort(x, 0, descending=True).values * w).sum()
        loss = loss + eager.topk(x, 2).values.sum() * 0.5
        loss = loss + (eager.scatter(x, 1, idx, w[:, :3]) * w).sum()
        loss = loss + (eager.scatter_reduce(x, 1, idx, w[:, :3] * 2, "amax") * w).sum()
        loss = loss + (eager.scatter_reduce(x, 1, idx, w[:, 1:], "prod", include_self=False)
                       * w).sum()
        loss.backward()
        return loss

    rng = np.random.default_rng(3)
    x0 = rng.standard_normal((2, 4))
    x0[1, 2] = 0.0  # a zero for cumprod's and prod's exact gradients
    w0 = rng.standard_normal((2, 4))
    compiled = tracer.function(body, backend=backend)
    for _ in range(2):
        xs = [eager.tensor(x0, requires_grad=True) for _ in range(2)]
        ws = [eager.tensor(w0, requires_grad=True) for _ in range(2)]
        want = body(xs[0], ws[0])
        got = compiled(xs[1], ws[1])
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-12)
        np.testing.assert_allclose(xs[1].grad.numpy(), xs[0].grad.numpy(), rtol=1e-10,
                                   atol=1e-12)
        np.testing.assert_allclose(ws[1].grad.numpy(), ws[0].grad.numpy(), rtol=1e-10,
                                   atol=1e-12)
    assert compiled.trace_count == 1
