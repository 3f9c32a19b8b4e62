"""APIs the training programs in tests/programs/ found missing or wrong, each checked
against PyTorch's documented behaviour with an independent numpy reference."""
from __future__ import annotations

import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F
import tracer

BACKENDS = ["numba", "interpret"]


# ------------------------------------------------------------------ nn.init
def test_init_constant_fills_and_keeps_the_tensor():
    w = nn.Parameter(eager.randn(3, 4))
    out = nn.init.constant_(w, 0.25)
    assert out is w and w.requires_grad and w.grad_fn is None
    np.testing.assert_array_equal(w.detach().numpy(), np.full((3, 4), 0.25, np.float32))


@pytest.mark.parametrize("mode, fan_index", [("fan_in", 1), ("fan_out", 0)])
def test_kaiming_and_xavier_normal_draw_with_the_documented_std(mode, fan_index):
    w = eager.empty(64, 32, 3, 3)
    nn.init.kaiming_normal_(w, mode=mode, nonlinearity="relu")
    fan = w.shape[fan_index] * 9
    np.testing.assert_allclose(w.numpy().std(), np.sqrt(2.0 / fan), rtol=0.03)
    assert abs(w.numpy().mean()) < 0.01
    nn.init.xavier_normal_(w, gain=2.0)
    np.testing.assert_allclose(w.numpy().std(), 2.0 * np.sqrt(2.0 / (32 * 9 + 64 * 9)),
                               rtol=0.03)


# ------------------------------------------------ a bias-free convolution's output
def _conv_leaky(x, conv):
    return nn.LeakyReLU(0.2, inplace=True)(conv(x)).sum()


def test_inplace_activation_after_a_bias_free_conv_matches_out_of_place():
    # the DCGAN discriminator: Conv2d(bias=False) then LeakyReLU(inplace=True) (stride 2
    # takes the im2col path, whose product was returned as a permuted view and refused)
    conv = nn.Conv2d(2, 3, 4, 2, 1, bias=False).double()
    x = eager.randn(2, 2, 8, 8, dtype=eager.float64)
    _conv_leaky(x, conv).backward()
    g_inplace = conv.weight.grad.numpy().copy()
    conv.weight.grad = None
    F.leaky_relu(conv(x), 0.2).sum().backward()
    np.testing.assert_array_equal(g_inplace, conv.weight.grad.numpy())
    y = conv(x)
    assert nn.ReLU(inplace=True)(y) is y


@pytest.mark.parametrize("bias", [True, False])
def test_a_strided_conv_output_is_c_ordered_as_pytorch(bias):
    # a conv encoder's `h.view(h.size(0), -1)` after a stride-2 Conv2d (im2col path): the
    # output was a permuted view of the product, which .view refused
    conv = nn.Conv2d(2, 3, 4, 2, 1, bias=bias)
    x = eager.randn(2, 2, 8, 8)
    y = conv(x)
    assert y.is_contiguous() and y.view(2, -1).shape == (2, 48)
    w = conv.weight.detach().numpy()
    xp = np.pad(x.numpy(), ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((2, 3, 4, 4), np.float64)
    for i in range(4):
        for j in range(4):
            patch = xp[:, :, 2 * i:2 * i + 4, 2 * j:2 * j + 4]
            want[:, :, i, j] = np.einsum("nckl,ockl->no", patch, w)
    if bias:
        want += conv.bias.detach().numpy()[None, :, None, None]
    np.testing.assert_allclose(y.detach().numpy(), want, rtol=1e-5, atol=1e-6)
    unbatched = conv(x[0])
    assert unbatched.is_contiguous() and unbatched.view(-1).shape == (48,)


@pytest.mark.parametrize("backend", BACKENDS)
def test_view_of_a_strided_conv_output_compiled(backend):
    conv = nn.Conv2d(2, 3, 4, 2, 1, bias=False)
    x = eager.randn(2, 2, 8, 8)

    def encode(x):
        return F.relu(conv(x)).view(x.size(0), -1).sum(dim=1)

    np.testing.assert_allclose(tracer.function(encode, backend=backend)(x).detach().numpy(),
                               encode(x).detach().numpy(), rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_inplace_activation_after_a_bias_free_conv_compiled(backend):
    conv = nn.Conv2d(2, 3, 4, 2, 1, bias=False)
    x = eager.randn(2, 2, 8, 8)

    def step(x):
        conv.weight.grad = None
        loss = _conv_leaky(x, conv)
        loss.backward()
        return loss.detach(), conv.weight.grad.clone()

    e_loss, e_grad = step(x)
    c_loss, c_grad = tracer.function(step, backend=backend)(x)
    np.testing.assert_allclose(c_loss.numpy(), e_loss.numpy(), rtol=1e-5)
    np.testing.assert_allclose(c_grad.numpy(), e_grad.numpy(), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------ Embedding padding_idx
def _embedding_reference(idx, weight, g_out, padding_idx):
    """Forward rows and the weight gradient with the padding row's gradient cut."""
    grad = np.zeros_like(weight)
    keep = idx != padding_idx
    np.add.at(grad, idx[keep], g_out[keep])
    return weight[idx], grad


@pytest.mark.parametrize("padding_idx", [0, 3, -1])
def test_embedding_padding_idx_matches_a_numpy_reference(padding_idx):
    emb = nn.Embedding(5, 4, padding_idx=padding_idx).double()
    row = padding_idx % 5
    assert emb.padding_idx == row and "padding_idx=" in repr(emb)
    np.testing.assert_array_equal(emb.weight.detach().numpy()[row], np.zeros(4))
    with eager.no_grad():
        emb.weight[row] = 1.5  # PyTorch reads the row as it is: only its gradient is cut
    idx = np.array([[0, 3, 4, 3], [4, 1, 0, 2]])
    g_out = np.random.default_rng(0).standard_normal((2, 4, 4))
    out = emb(eager.tensor(idx))
    out.backward(eager.tensor(g_out))
    want_out, want_grad = _embedding_reference(idx, emb.weight.detach().numpy(), g_out, row)
    np.testing.assert_array_equal(out.detach().numpy(), want_out)
    np.testing.assert_allclose(emb.weight.grad.numpy(), want_grad, rtol=1e-12)


def test_embedding_padding_idx_out_of_range_raises_as_pytorch():
    with pytest.raises(AssertionError, match="Padding_idx must be within num_embeddings"):
        nn.Embedding(5, 4, padding_idx=5)
    with pytest.raises(AssertionError, match="Padding_idx must be within num_embeddings"):
        F.embedding(eager.tensor([0]), eager.randn(5, 4), padding_idx=-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_embedding_padding_idx_compiled_matches_eager(backend):
    emb = nn.Embedding(5, 4, padding_idx=0)
    idx = eager.tensor([[0, 3, 4], [4, 0, 2]])

    def step(idx):
        emb.weight.grad = None
        (emb(idx) ** 2).sum().backward()
        return emb.weight.grad.clone()

    want = step(idx)
    assert not want.numpy()[0].any() and want.numpy()[3].any()
    got = tracer.function(step, backend=backend)(idx)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


# ------------------------------------------- init.trunc_normal_, from_pretrained, rnn
def test_trunc_normal_stays_in_bounds_with_the_truncated_std():
    from scipy.stats import truncnorm

    w = eager.empty(200, 100)
    assert nn.init.trunc_normal_(w, mean=0.01, std=0.02, a=-0.03, b=0.05) is w
    values = w.numpy()
    assert values.min() >= -0.03 and values.max() <= 0.05
    want = truncnorm((-0.03 - 0.01) / 0.02, (0.05 - 0.01) / 0.02, loc=0.01, scale=0.02)
    np.testing.assert_allclose(values.mean(), want.mean(), atol=5e-4)
    np.testing.assert_allclose(values.std(), want.std(), rtol=0.03)
    with pytest.raises(ValueError, match="a < b"):
        nn.init.trunc_normal_(w, a=1.0, b=-1.0)


def test_embedding_from_pretrained_shares_the_rows_and_freezes():
    rows = eager.randn(4, 3)
    emb = nn.Embedding.from_pretrained(rows, padding_idx=2)
    assert not emb.weight.requires_grad and emb.padding_idx == 2
    np.testing.assert_array_equal(emb(eager.tensor([2, 0])).numpy(), rows.numpy()[[2, 0]])
    assert nn.Embedding.from_pretrained(rows, freeze=False).weight.requires_grad
    with pytest.raises(AssertionError, match="2-dimensional"):
        nn.Embedding.from_pretrained(eager.randn(4))


@pytest.mark.parametrize("batch_first, side", [(True, "right"), (False, "left")])
def test_pad_sequence_matches_a_numpy_reference(batch_first, side):
    from eager.nn.utils.rnn import pad_sequence

    lengths = [3, 1, 4]
    arrays = [np.random.default_rng(i).standard_normal((n, 2)) for i, n in enumerate(lengths)]
    seqs = [eager.tensor(a, requires_grad=True) for a in arrays]
    out = pad_sequence(seqs, batch_first=batch_first, padding_value=-1.0, padding_side=side)
    want = np.full((3, 4, 2), -1.0)
    for b, a in enumerate(arrays):
        if side == "right":
            want[b, :len(a)] = a
        else:
            want[b, 4 - len(a):] = a
    if not batch_first:
        want = want.transpose(1, 0, 2)
    np.testing.assert_array_equal(out.detach().numpy(), want)
    weights = np.random.default_rng(9).standard_normal(want.shape)
    (out * eager.tensor(weights)).sum().backward()
    w = weights if batch_first else weights.transpose(1, 0, 2)
    for b, (s, n) in enumerate(zip(seqs, lengths)):
        rows = w[b, :n] if side == "right" else w[b, 4 - n:]
        np.testing.assert_array_equal(s.grad.numpy(), rows)
    with pytest.raises(RuntimeError, match="like the first"):
        pad_sequence([eager.ones(2, 2), eager.ones(2, 3)])
