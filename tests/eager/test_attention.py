"""nn.MultiheadAttention and the Transformer layers (eager/nn/attention.py, transformer.py)
against numpy references written here from PyTorch's documented computation, from the same
weights (read through the state dict, whose names and layouts are PyTorch's).

scaled_dot_product_attention itself is checked by its OpInfo entries (opinfo_attention.py:
loop reference, finite-difference gradients, traced vs eager).
"""
import math

import numpy as np
import pytest

import eager
import eager.nn.functional as F
from eager import nn


def _np(t):
    return t.detach().numpy().astype(np.float64)


def _softmax(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def mha_ref(sd, q, k, v, H, key_padding_mask=None, attn_mask=None, batch_first=False):
    """PyTorch's multi_head_attention_forward: project with the in_proj rows [q; k; v], split
    E into H heads, softmax(q k^T / sqrt(D) + masks) v, concatenate, out_proj.  Bool masks
    mark positions NOT allowed to attend.  Returns (out, head-averaged weights)."""
    if batch_first:
        q, k, v = (a.transpose(1, 0, 2) for a in (q, k, v))
    L, B, E = q.shape
    S = k.shape[0]
    D = E // H
    if "in_proj_weight" in sd:
        wq, wk, wv = np.split(_np(sd["in_proj_weight"]), 3)
    else:
        wq, wk, wv = (_np(sd[f"{n}_proj_weight"]) for n in "qkv")
    bq, bk, bv = np.split(_np(sd["in_proj_bias"]), 3)
    Q, K, V = q @ wq.T + bq, k @ wk.T + bk, v @ wv.T + bv
    out = np.zeros((L, B, E))
    weights = np.zeros((B, L, S))
    for b in range(B):
        for h in range(H):
            cols = slice(h * D, (h + 1) * D)
            s = Q[:, b, cols] @ K[:, b, cols].T / math.sqrt(D)
            if attn_mask is not None:
                s = s + (np.where(attn_mask, -np.inf, 0.0) if attn_mask.dtype == bool
                         else attn_mask)
            if key_padding_mask is not None:
                s = s + np.where(key_padding_mask[b], -np.inf, 0.0)[None, :]
            p = _softmax(s)
            weights[b] += p / H
            out[:, b, cols] = p @ V[:, b, cols]
    out = out @ _np(sd["out_proj.weight"]).T + _np(sd["out_proj.bias"])
    if batch_first:
        out = out.transpose(1, 0, 2)
    return out, weights


def _randomize(module, seed):
    rng = np.random.default_rng(seed)
    for p in module.parameters():  # nonzero biases, so a misplaced bias shows
        p._data = rng.normal(0, 0.3, p.shape).astype(np.float32)


@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention_matches_reference(batch_first):
    eager.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=batch_first)
    _randomize(mha, 1)
    rng = np.random.default_rng(2)
    L, S, B = 3, 5, 2
    shape = (lambda n: (B, n, 8)) if batch_first else (lambda n: (n, B, 8))
    q = rng.normal(size=shape(L)).astype(np.float32)
    kv = rng.normal(size=shape(S)).astype(np.float32)
    pad = np.array([[False] * 4 + [True], [False] * 5])
    mask = rng.normal(size=(L, S)).astype(np.float32)
    out, w = mha(eager.tensor(q), eager.tensor(kv), eager.tensor(kv),
                 key_padding_mask=eager.tensor(pad), attn_mask=eager.tensor(mask))
    ref_out, ref_w = mha_ref(mha.state_dict(), q, kv, kv, 2, pad, mask, batch_first)
    np.testing.assert_allclose(out.detach().numpy(), ref_out, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(w.detach().numpy(), ref_w, rtol=1e-4, atol=1e-6)
    # need_weights=False goes through scaled_dot_product_attention: the same output
    out2, none = mha(eager.tensor(q), eager.tensor(kv), eager.tensor(kv),
                     key_padding_mask=eager.tensor(pad), attn_mask=eager.tensor(mask),
                     need_weights=False)
    assert none is None
    np.testing.assert_allclose(out2.detach().numpy(), ref_out, rtol=1e-4, atol=1e-5)


def test_multihead_attention_self_attention_bool_mask_and_per_head_weights():
    mha = nn.MultiheadAttention(6, 3)
    _randomize(mha, 3)
    x = np.random.default_rng(4).normal(size=(4, 2, 6)).astype(np.float32)
    causal = np.triu(np.ones((4, 4), bool), 1)  # True = not allowed, PyTorch's convention
    xt = eager.tensor(x)
    out, w = mha(xt, xt, xt, attn_mask=eager.tensor(causal), average_attn_weights=False)
    ref_out, ref_w = mha_ref(mha.state_dict(), x, x, x, 3, attn_mask=causal)
    np.testing.assert_allclose(out.detach().numpy(), ref_out, rtol=1e-4, atol=1e-5)
    assert w.shape == (2, 3, 4, 4)
    np.testing.assert_allclose(w.detach().numpy().mean(1), ref_w, rtol=1e-4, atol=1e-6)
    assert np.all(w.detach().numpy()[..., causal] == 0)
    # is_causal with need_weights=False: the causal SDPA path, same numbers
    out2, _ = mha(xt, xt, xt, attn_mask=eager.tensor(causal), need_weights=False,
                  is_causal=True)
    np.testing.assert_allclose(out2.detach().numpy(), ref_out, rtol=1e-4, atol=1e-5)
    with pytest.raises(RuntimeError, match="is_causal"):
        mha(xt, xt, xt, is_causal=True)


def test_multihead_attention_parameters_are_laid_out_as_pytorch():
    mha = nn.MultiheadAttention(8, 2)
    shapes = {k: tuple(v.shape) for k, v in mha.state_dict().items()}
    assert shapes == {"in_proj_weight": (24, 8), "in_proj_bias": (24,),
                      "out_proj.weight": (8, 8), "out_proj.bias": (8,)}
    assert np.all(mha.in_proj_bias.detach().numpy() == 0) and np.all(mha.out_proj.bias.detach().numpy() == 0)
    kv = nn.MultiheadAttention(8, 2, kdim=5, vdim=3, batch_first=True)
    shapes = {k: tuple(v.shape) for k, v in kv.state_dict().items()}
    assert shapes == {"q_proj_weight": (8, 8), "k_proj_weight": (8, 5),
                      "v_proj_weight": (8, 3), "in_proj_bias": (24,),
                      "out_proj.weight": (8, 8), "out_proj.bias": (8,)}
    _randomize(kv, 5)
    rng = np.random.default_rng(6)
    q, k, v = (rng.normal(size=s).astype(np.float32) for s in ((2, 3, 8), (2, 4, 5), (2, 4, 3)))
    out, w = kv(eager.tensor(q), eager.tensor(k), eager.tensor(v))
    ref_out, ref_w = mha_ref(kv.state_dict(), q, k, v, 2, batch_first=True)
    np.testing.assert_allclose(out.detach().numpy(), ref_out, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(w.detach().numpy(), ref_w, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="divisible"):
        nn.MultiheadAttention(10, 3)


def _ln(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * w + b


def encoder_layer_ref(layer, x, H, norm_first, mask=None):
    sd = layer.state_dict()

    def sa(h):
        return mha_ref({k[len("self_attn."):]: v for k, v in sd.items()
                        if k.startswith("self_attn.")}, h, h, h, H, attn_mask=mask)[0]

    def ff(h):
        a = np.maximum(h @ _np(sd["linear1.weight"]).T + _np(sd["linear1.bias"]), 0)
        return a @ _np(sd["linear2.weight"]).T + _np(sd["linear2.bias"])

    def n(i, h):
        return _ln(h, _np(sd[f"norm{i}.weight"]), _np(sd[f"norm{i}.bias"]))

    if norm_first:
        x = x + sa(n(1, x))
        return x + ff(n(2, x))
    x = n(1, x + sa(x))
    return n(2, x + ff(x))


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_encoder_layer_matches_reference(norm_first):
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=12, dropout=0.0,
                                       norm_first=norm_first)
    _randomize(layer, 7)
    x = np.random.default_rng(8).normal(size=(5, 2, 8)).astype(np.float32)
    mask = nn.Transformer.generate_square_subsequent_mask(5)
    got = layer(eager.tensor(x), src_mask=mask, is_causal=True)
    want = encoder_layer_ref(layer, x.astype(np.float64), 2, norm_first, mask.numpy())
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-4, atol=1e-5)
    # two layers in a TransformerEncoder are independent copies, then the final norm
    enc = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(8))
    assert enc.layers[0].linear1.weight is not enc.layers[1].linear1.weight
    _randomize(enc, 9)
    got = enc(eager.tensor(x))
    h = x.astype(np.float64)
    for lay in enc.layers:
        h = encoder_layer_ref(lay, h, 2, norm_first)
    want = _ln(h, _np(enc.norm.weight), _np(enc.norm.bias))
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-4, atol=1e-5)


def test_square_subsequent_mask_and_transformer_shapes():
    m = nn.Transformer.generate_square_subsequent_mask(4)
    want = np.triu(np.full((4, 4), -np.inf, np.float32), 1)
    assert m.dtype == np.float32
    np.testing.assert_array_equal(m.detach().numpy(), want)
    model = nn.Transformer(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=1,
                           dim_feedforward=16, dropout=0.0, activation="gelu",
                           batch_first=True, norm_first=True)
    names = set(model.state_dict())
    for name in ["encoder.layers.1.self_attn.in_proj_weight", "encoder.norm.weight",
                 "decoder.layers.0.multihead_attn.out_proj.bias", "decoder.layers.0.norm3.bias",
                 "decoder.norm.bias"]:
        assert name in names
    src, tgt = eager.randn(2, 5, 8), eager.randn(2, 3, 8)
    out = model(src, tgt, tgt_mask=nn.Transformer.generate_square_subsequent_mask(3),
                tgt_is_causal=True)
    assert out.shape == (2, 3, 8) and np.isfinite(out.detach().numpy()).all()
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_decoder_layer_attends_to_memory_with_padding():
    layer = nn.TransformerDecoderLayer(8, 2, dim_feedforward=8, dropout=0.0)
    _randomize(layer, 10)
    tgt, mem = eager.randn(3, 2, 8), eager.randn(4, 2, 8)
    pad = eager.tensor([[False, False, True, True], [False, False, False, False]])
    a = layer(tgt, mem, memory_key_padding_mask=pad)
    # changing a padded memory position changes nothing; an unpadded one does
    mem2 = mem.numpy().copy()
    mem2[3, 0] += 5.0
    b = layer(tgt, eager.tensor(mem2), memory_key_padding_mask=pad)
    np.testing.assert_allclose(a.detach().numpy()[:, 0], b.detach().numpy()[:, 0], rtol=1e-5, atol=1e-6)
    mem2[1, 0] += 5.0
    c = layer(tgt, eager.tensor(mem2), memory_key_padding_mask=pad)
    assert np.abs(a.detach().numpy()[:, 0] - c.detach().numpy()[:, 0]).max() > 1e-3


def test_sdpa_arguments_as_pytorch():
    q = eager.randn(2, 3, 4)
    with pytest.raises(RuntimeError, match="is_causal"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=eager.ones(3, 3) > 0,
                                       is_causal=True)
    with pytest.raises(TypeError, match="floating"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=eager.ones(3, 3).long())
    # dropout_p applies whenever > 0 (the functional form has no training flag)
    out = F.scaled_dot_product_attention(q, q, q, dropout_p=1.0)
    assert np.all(out.detach().numpy() == 0)
    eager.manual_seed(3)
    a = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    eager.manual_seed(3)
    b = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    assert not np.allclose(a.detach().numpy(), F.scaled_dot_product_attention(q, q, q).numpy())
