"""A cat whose only reader is a permute is laid out in the permuted order (codegen.runner_forms
cat, _cat_plan): the reshapes after it are views, pieces made by BLAS products are written
in place. Compiled gives what eager gives, bit for bit where eager's arithmetic is the same
(products and copies), on both backends."""
import numpy as np
import pytest

import eager
import eager.nn.functional as F
import tracer

BACKENDS = ["numba", "interpret"]


def _stacked(a, b, w):
    """Three [2,3,4,5] pieces (two products, one elementwise value) stacked, permuted to
    [2,4,3,3,5] and flattened to the rows of a product: the qkv gradient's shape."""
    p0 = a @ b
    p1 = (a * 2.0) @ b
    p2 = a[..., :5] * 0.5 + 1.0
    z = eager.stack([p0, p1, p2]).permute(1, 3, 0, 2, 4).reshape(8, 45)
    return z @ w, z[:, 3:10] * 3.0 - 1.0


def _stacked_escaping(a, b, w):
    p0 = a @ b
    z = eager.stack([p0, (a * 2.0) @ b]).permute(1, 3, 0, 2, 4)
    return z.reshape(8, 30) @ w, z   # the permuted cat leaves the program: not laid out


def _inputs(dtype=np.float32):
    rng = np.random.default_rng(5)
    return (rng.standard_normal((2, 3, 4, 6)).astype(dtype),
            rng.standard_normal((2, 3, 6, 5)).astype(dtype),
            rng.standard_normal((45, 7)).astype(dtype))


def _same(want, got):
    for x, y in zip(want, got):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cat_laid_out_for_its_permute_matches_eager(backend, dtype):
    args = _inputs(dtype)
    want = [t.numpy() for t in _stacked(*map(eager.tensor, args))]
    compiled = tracer.function(_stacked, backend=backend)
    for _ in range(3):  # (later calls reuse the cat's buffer)
        _same(want, [t.numpy() for t in compiled(*map(eager.tensor, args))])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_permuted_cat_that_leaves_the_program_is_not_laid_out(backend):
    a, b, w = _inputs()
    w = w[:30]
    want = [t.numpy() for t in _stacked_escaping(*map(eager.tensor, (a, b, w)))]
    compiled = tracer.function(_stacked_escaping, backend=backend)
    for _ in range(2):
        got = [t.numpy() for t in compiled(*map(eager.tensor, (a, b, w)))]
        _same(want, got)
    got[1][...] = 0  # the caller's array is its own: the next call does not see this
    _same(want, [t.numpy() for t in compiled(*map(eager.tensor, (a, b, w)))])
    if backend == "numba":
        source = compiled.get_concrete_function(*map(eager.tensor, (a, b, w))).program \
            .runner_source
        assert "laid out for the permute" not in source, source


def test_products_write_their_pieces_in_place_and_reshapes_are_views():
    args = _inputs()
    compiled = tracer.function(_stacked)
    compiled(*map(eager.tensor, args))
    program = compiled.get_concrete_function(*map(eager.tensor, args)).program
    source = program.runner_source
    assert "laid out for the permute that reads it (2 of 3 pieces written in place)" in source
    assert source.count("copyto(") == 1, source  # the elementwise piece, copied
    assert "reshape_into" not in source, source  # no reshape had to copy


def _heads(q, k, v, w):
    """Attention's output as GPT reads it: [B,H,T,D] transposed to [B,T,H,D] and flattened."""
    y = (q @ k.transpose(-2, -1)) @ v
    return y.transpose(1, 2).reshape(8, 15) @ w


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_product_read_by_a_permute_is_written_permuted(backend):
    rng = np.random.default_rng(6)
    args = [rng.standard_normal(s).astype(np.float32)
            for s in ((2, 3, 4, 5), (2, 3, 4, 5), (2, 3, 4, 5), (15, 7))]
    want = _heads(*map(eager.tensor, args)).numpy()
    compiled = tracer.function(_heads, backend=backend)
    for _ in range(2):
        np.testing.assert_array_equal(compiled(*map(eager.tensor, args)).numpy(), want)
    if backend == "numba":
        source = compiled.get_concrete_function(*map(eager.tensor, args)).program \
            .runner_source
        assert "][0].transpose((0, 2, 1, 3)))" in source, source  # the product's out=
        assert "reshape_into" not in source, source


def _recurrence(x, w):
    """A recurrence's per-step values stacked for one product, as an LSTM's backward stacks
    its gate gradients: inner cats (of kernel outputs, along the last dim) and kernel
    outputs read by the next step, each a C-ordered block of the stacked buffer."""
    h = x
    gates, states = [], []
    for _ in range(3):
        g = eager.cat([h * 2.0, h + 1.0], dim=1)   # [4, 12]
        h = F.relu(g @ w)                          # [4, 6]
        gates.append(g.reshape(1, 4, 12))
        states.append(h.reshape(1, 4, 6))
    stacked = eager.cat(gates, 0).reshape(12, 12) @ w
    return stacked, eager.cat(states, 0).reshape(12, 6) @ w[:6]


@pytest.mark.parametrize("backend", BACKENDS)
def test_stacked_steps_are_made_in_place_and_match_eager(backend, monkeypatch):
    from codegen import lower

    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((4, 6)).astype(np.float32), \
        rng.standard_normal((12, 6)).astype(np.float32)
    want = [t.numpy() for t in _recurrence(eager.tensor(x), eager.tensor(w))]
    compiled = tracer.function(_recurrence, backend=backend)
    for _ in range(3):
        _same(want, [t.numpy() for t in compiled(eager.tensor(x), eager.tensor(w))])
    if backend == "numba":
        source = compiled.get_concrete_function(eager.tensor(x), eager.tensor(w)) \
            .program.runner_source
        # each inner cat made in its place in the stack, its two pieces copied in; each
        # state written in its place by its kernel
        assert source.count("# cat, in its place in a cat (0 of 2 pieces") == 3, source
        assert source.count("# cat (3 of 3 pieces written in place)") == 2, source
        assert source.count("copyto(") == 6, source
    monkeypatch.setitem(lower.LOWERING, "cat", lower._NUMPY)
    plain = tracer.function(_recurrence, backend=backend)
    _same(want, [t.numpy() for t in plain(eager.tensor(x), eager.tensor(w))])


def _attention_step(x, w, bias):
    """A causal self-attention block's qkv projection as GPT writes it, trained one step."""
    B, T, C = x.shape
    qkv = F.linear(x, w, bias).reshape(B, T, 3, 2, C // 2)
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    loss = (y * y).sum()
    loss.backward()
    return loss


def test_attention_qkv_gradient_matches_eager_and_the_program_without_the_layout(
        monkeypatch):
    from codegen import lower

    rng = np.random.default_rng(9)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((2, 5, 8), (24, 8), (24,))]

    def run(fn):
        ts = [eager.tensor(a, requires_grad=True) for a in arrays]
        loss = fn(*ts)
        return [loss.detach().numpy()] + [t.grad.numpy() for t in ts]
    want = run(_attention_step)
    compiled = tracer.function(_attention_step)
    got = run(compiled)
    ts = [eager.tensor(a, requires_grad=True) for a in arrays]
    source = compiled.get_concrete_function(*ts).program.runner_source
    assert "3 of 3 pieces written in place" in source, source
    # (the fused softmax rows differ from eager's numpy by float32 roundings, as before)
    for x, y in zip(want, got):
        np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-5 * np.abs(x).max())
    # ... and the layout changes no bit of what the program computed before it
    monkeypatch.setitem(lower.LOWERING, "cat", lower._NUMPY)
    plain = tracer.function(_attention_step)
    for x, y in zip(run(plain), got):
        np.testing.assert_array_equal(y, x)
    assert "laid out" not in plain.get_concrete_function(*ts).program.runner_source
