"""Row kernels over short and odd rows, broadcast reads, causal and explicit attention
masks, and GELU's backward recomputing its cheap forward values: compiled against eager,
NaN and infinities included, on both backends; and the LLVM of the cross-entropy and
layer_norm row loops stays vectorized (codegen.emit: hidden trip counts of row loops of
16 or more, unsigned indices for sums of loop variables; codegen.fuse._recompute_chain)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import codegen.fuse
import eager
import eager.nn.functional as F
import tracer

BACKENDS = ["numba", "interpret"]


def _close(got, want, rtol=2e-6, atol=2e-7):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def _rows(n_rows, n, seed):
    """Rows of length n with a NaN row, a row holding +inf, one of -inf and a row where
    one entry is -inf."""
    x = np.random.default_rng(seed).standard_normal((n_rows, n)).astype(np.float32) * 3
    x[1, n // 2] = np.nan
    x[2, 0] = np.inf
    x[3, :] = -np.inf
    x[4, n - 1] = -np.inf
    return x


def _row_ops(x, y):
    return (F.softmax(x, dim=-1), F.log_softmax(x, dim=-1), x.amax(-1),
            F.layer_norm(x, (x.shape[-1],)), F.cross_entropy(x, y, reduction="none"))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [1, 5, 16, 17, 33, 65, 100])
def test_short_and_odd_rows_match_eager(backend, n):
    f = tracer.function(_row_ops, backend=backend)
    x = _rows(6, n, n)
    y = np.arange(6) % n
    want = _row_ops(eager.from_numpy(x), eager.from_numpy(y))
    got = f(eager.from_numpy(x), eager.from_numpy(y))
    for g, w in zip(got, want):
        _close(g.numpy(), w.numpy())


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_size_rows_match_eager(backend):
    f = tracer.function(lambda x: (F.softmax(x, dim=-1), F.layer_norm(x, (7,))),
                        backend=backend)
    x = eager.from_numpy(np.zeros((0, 7), np.float32))
    for g in f(x):
        assert g.shape == (0, 7)


def _embed_ln(tok, pos, w, b):
    # GPT's input: token embeddings plus the positional row of each position (a
    # broadcast read pos[i1, i2] in the layer_norm row kernel), then layer_norm
    return F.layer_norm(tok + pos, (tok.shape[-1],), w, b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_layer_norm_of_a_broadcast_add_matches_eager(backend):
    rng = np.random.default_rng(1)
    tok = rng.standard_normal((3, 16, 48)).astype(np.float32)
    tok[1, 2, 5] = np.nan
    tok[2, 3, 0] = np.inf
    args = [tok, rng.standard_normal((16, 48)).astype(np.float32),
            rng.standard_normal(48).astype(np.float32),
            rng.standard_normal(48).astype(np.float32)]
    f = tracer.function(_embed_ln, backend=backend)
    _close(f(*map(eager.from_numpy, args)).numpy(),
           _embed_ln(*map(eager.from_numpy, args)).numpy(), rtol=1e-5, atol=1e-6)
    if backend == "numba":
        src = "\n".join(k.source for k in f.get_concrete_function(
            *map(eager.from_numpy, args)).kernels)
        # the broadcast read of pos is an unsigned index, the row loop's count is hidden
        assert re.search(r"in\d\[np\.uint64\(i1 \* 48 \+ i2\)\]", src), src
        assert "trip_count(48)" in src, src


def _row_kernel_llvm(fn, *args):
    """The LLVM IR of `fn`'s row kernels, compiled again from their source without the
    kernel cache (Numba cannot show the IR of code it loaded from its cache)."""
    kernels = [k for k in fn.get_concrete_function(*args).kernels if k.kind == "row"]
    assert kernels
    texts = []
    for k in kernels:
        assert "cache=True" in k.source
        ns: dict = {}
        exec(compile(k.source.replace("cache=True", "cache=False"), k.name, "exec"), ns)
        kernel = ns["kernel"]
        texts.append(kernel.inspect_llvm(kernel.signatures[0]))
    return texts


def _assert_vector_row_loops(ir_texts):
    for ir in ir_texts:
        # a vectorized running sum is a loop-carried vector (an unrolled scalar row has
        # none), read with plain vector loads (no gathers: a signed sum index stops that)
        assert re.search(r"= phi (?:fast |reassoc )*<\d+ x float>", ir), "row loop not vectorized"
        assert "masked.gather" not in ir


def test_cross_entropy_and_layer_norm_row_loops_vectorize():
    x = eager.from_numpy(np.random.default_rng(2).standard_normal((32, 65)).astype(np.float32))
    y = eager.from_numpy(np.arange(32) % 65)
    ce = tracer.function(lambda x, y: F.cross_entropy(x, y, reduction="none"))
    _assert_vector_row_loops(_row_kernel_llvm(ce, x, y))
    rng = np.random.default_rng(3)
    # (a row of 128 had its count hidden before; its signed index pos[i1 * 128 + i2] was
    # read with gathers)
    args = [eager.from_numpy(rng.standard_normal(s).astype(np.float32))
            for s in ((3, 16, 128), (16, 128), (128,), (128,))]
    _assert_vector_row_loops(_row_kernel_llvm(tracer.function(_embed_ln), *args))


def _attention(q, k, v, mask, causal):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)


def _qkv(seed, lq, lk):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((2, 3, lq, 8)).astype(np.float32)
    k = rng.standard_normal((2, 3, lk, 8)).astype(np.float32)
    v = rng.standard_normal((2, 3, lk, 8)).astype(np.float32)
    q[1, 2, 4, 0] = np.nan           # one query row of NaN scores
    return q, k, v


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", ["causal", "bool", "additive"])
def test_masked_attention_forward_and_backward_match_eager(backend, how):
    lq, lk = 17, 19
    q, k, v = _qkv(4, lq, lk)
    mask = np.ones((lq, lk), bool)  # (unused when causal)
    if how == "bool":
        mask = np.random.default_rng(5).random((lq, lk)) > 0.4
        mask[:, 0] = True
        mask[3, :] = False            # a row with nothing to attend to: NaN, as in PyTorch
    elif how == "additive":
        mask = np.where(np.random.default_rng(6).random((lq, lk)) > 0.3, 0.0,
                        -np.inf).astype(np.float32)
        mask[:, 2] = 0.0
    causal = how == "causal"

    def step(q, k, v, mask, keep):
        out = _attention(q, k, v, None if causal else mask, causal)
        # a NaN row would make every gradient NaN: the loss leaves those rows out
        (out * out).where(keep, 0.0).sum().backward()
        return out, q.grad, k.grad, v.grad

    ref = _attention(*map(eager.from_numpy, (q, k, v)),
                     None if causal else eager.from_numpy(mask), causal).numpy()
    assert np.isnan(ref).any() and not np.isnan(ref).all()

    def args():
        return [eager.tensor(a, requires_grad=True) for a in (q, k, v)] + [
            eager.from_numpy(mask), eager.from_numpy(~np.isnan(ref))]

    want = step(*args())
    got = tracer.function(step, backend=backend)(*args())
    for g, w in zip(got, want):
        _close(g.detach().numpy(), w.detach().numpy(), rtol=1e-5, atol=1e-6)




def _gelu_step(x, b, w, w2):
    # the MLP of a transformer block: GELU's gradient comes from a product (BLAS), so
    # GELU's backward is a kernel of its own, after the forward one
    h = F.gelu(x @ w + b, approximate="tanh")
    out = h @ w2
    loss = (out * out).mean()
    loss.backward()
    return loss, h, x.grad, b.grad, w.grad, w2.grad


def _gelu_leaves():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 16, 24)).astype(np.float32)
    x[0, 3, 1] = 1e30                 # tanh saturates, x * x overflows
    return [eager.tensor(a, requires_grad=True) for a in (
        x, rng.standard_normal(40).astype(np.float32),
        rng.standard_normal((24, 40)).astype(np.float32) * 0.2,
        rng.standard_normal((40, 24)).astype(np.float32) * 0.2)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_gelu_backward_recomputes_its_cheap_values(backend, monkeypatch):
    want = _gelu_step(*_gelu_leaves())
    f = tracer.function(_gelu_step, backend=backend)
    got = f(*_gelu_leaves())
    for g, w in zip(got, want):
        _close(g.detach().numpy(), w.detach().numpy(), rtol=1e-5, atol=1e-6)
    if backend != "numba":
        return
    kernels = f.get_concrete_function(*_gelu_leaves()).kernels
    tanh = [k for k in kernels if "tanh_f32(" in k.source]
    assert len(tanh) == 1, [k.name for k in kernels]
    # forward writes GELU's output and tanh (not x, x * x, 0.5 * x and 1 + tanh too)
    full = [v for v in tanh[0].group.outputs if v.type.shape == (2, 16, 40)]
    assert len(full) == 2, full
    # the same bits as with the values written out and read back
    monkeypatch.setattr(codegen.fuse, "RECOMPUTE_MAX", 0)
    g2 = tracer.function(_gelu_step, backend=backend)
    saved = g2(*_gelu_leaves())
    kernels = g2.get_concrete_function(*_gelu_leaves()).kernels
    tanh = [k for k in kernels if "tanh_f32(" in k.source]
    assert len([v for v in tanh[0].group.outputs if v.type.shape == (2, 16, 40)]) > 2
    for a, b in zip(got, saved):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())


def test_causal_softmax_rows_in_parallel_blocks_build(monkeypatch):
    """Past PARALLEL_MIN_SIZE a row kernel's rows are a function of their own (rows());
    the hidden -inf fill its masked running max reads is defined there (it was defined in
    the calling kernel only: NameError, and the kernel fell back to numpy)."""
    import codegen.emit
    import codegen.program

    monkeypatch.setattr(codegen.emit, "PARALLEL_MIN_SIZE", 1 << 12)
    monkeypatch.setattr(codegen.program, "PARALLEL_MIN_SIZE", 1 << 12)
    s = np.random.default_rng(8).standard_normal((2, 3, 64, 64)).astype(np.float32)
    s[1, 2, 5, 3] = np.nan
    f = tracer.function(lambda s: F.scaled_dot_product_attention(
        s, s, s, is_causal=True))
    got = f(eager.from_numpy(s)).numpy()
    _close(got, F.scaled_dot_product_attention(*[eager.from_numpy(s)] * 3,
                                               is_causal=True).numpy(), rtol=1e-5, atol=1e-6)
    sources = [k.source for k in f.get_concrete_function(eager.from_numpy(s)).kernels]
    assert any("def rows(" in src and "= hidden(" in src for src in sources), sources


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_value_read_through_a_view_is_not_recomputed(backend):
    """`b + u.T` reads u through a view: u is read from memory, never recomputed in the
    kernel (which could read only the element it computes), and b with it."""
    def f(x):
        u = x + 1.0
        b = u * 2.0
        return b + u.T, b.T * u

    x = np.arange(12, dtype=np.float32).reshape(3, 4) @ np.ones((4, 3), np.float32) \
        + np.arange(3, dtype=np.float32)
    got = tracer.function(f, backend=backend)(eager.from_numpy(x))
    for g, w in zip(got, f(eager.from_numpy(x))):
        np.testing.assert_array_equal(g.numpy(), w.numpy())
