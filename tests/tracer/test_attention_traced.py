"""Attention traced and compiled: causal scaled_dot_product_attention is two BLAS products
around one fused masked-softmax row kernel with no (L, S) mask in the program; a 2-layer
TransformerEncoder training step (AdamW) and the W9 GPT model train the same compiled as
eagerly, on both backends; and the W9 model matches its float64 numpy reference.
"""
import numpy as np
import pytest

import eager
import eager.nn.functional as F
import tracer
from benchmarks import gpt
from eager import nn

BACKENDS = ("interpret", "numba")


def _qkv(L, S, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(eager.tensor(rng.normal(size=(2, 2, n, 8)).astype(np.float32))
                 for n in (L, S, S))


def _steps(cf):
    return [line.split()[0] for line in str(cf).split("program:")[1].splitlines()[1:]
            if line.strip() and not line.strip().startswith("return")]


@pytest.mark.one_backend
@pytest.mark.parametrize("L,S", [(5, 7), (7, 5)])
def test_causal_sdpa_is_one_row_kernel_between_two_blas_calls(L, S):
    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    q, k, v = _qkv(L, S)
    f = tracer.function(attend, backend="numba")
    cf = f.get_concrete_function(q, k, v)
    assert _steps(cf) == ["view", "blas", "kernel", "blas"], str(cf)
    assert len(cf.kernels) == 1 and "row" in str(cf)
    # no materialized mask: no constant in the graph, the kernel compares loop indices
    assert not [c for c in getattr(cf.graph, "consts", ()) if np.ndim(getattr(c, "value", 0))]
    assert "const %" not in str(cf.graph)
    assert "if (i3) - (i2) <= 0 else" in cf.kernels[0].source
    want = attend(q, k, v).numpy()
    np.testing.assert_allclose(f(q, k, v).numpy(), want, rtol=1e-5, atol=1e-6)
    g = tracer.function(attend, backend="interpret")
    np.testing.assert_allclose(g(q, k, v).numpy(), want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("backend", BACKENDS)
def test_masked_sdpa_and_its_gradients_compiled(backend):
    q, k, v = _qkv(3, 5, 1)
    rng = np.random.default_rng(2)
    keep = rng.random((3, 5)) < 0.6
    keep[1] = False  # a fully masked row: NaN in the output, eager and compiled alike
    keep[0, 0] = keep[2, 1] = True
    bias = eager.tensor(rng.normal(size=(2, 1, 3, 5)).astype(np.float32))

    def body(q, k, v, keep, bias):
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=0.3)
        b = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        return a, b

    f = tracer.function(body, backend=backend)
    args = (q, k, v, eager.tensor(keep), bias)
    for got, want in zip(f(*args), body(*args)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    assert np.isnan(f(*args)[0].numpy()[:, :, 1]).all()

    def grads(q, k, v, bias):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=False)
        out2 = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return eager.autograd.grad((out * out).sum() + out2.sum(), [q, k, v, bias])

    leaves = [t.detach().requires_grad_() for t in (q, k, v, bias)]
    want = grads(*leaves)
    got = tracer.function(grads, backend=backend)(*leaves)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5)


def _array(v):
    return v.numpy() if hasattr(v, "numpy") else np.asarray(v)


def _encoder():
    eager.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, dim_feedforward=24, dropout=0.0,
                                       activation="gelu", batch_first=True, norm_first=True)
    model = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(16))
    return model, eager.optim.AdamW(model.parameters(), lr=1e-2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_transformer_encoder_training_step_compiled_matches_eager(backend):
    mask = nn.Transformer.generate_square_subsequent_mask(6)

    def train_step(model, opt, x, target):
        out = model(x, mask=mask, is_causal=True)
        loss = F.mse_loss(out, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    eager_model, eager_opt = _encoder()
    model, opt = _encoder()
    step = tracer.function(lambda x, t: train_step(model, opt, x, t), backend=backend)
    rng = np.random.default_rng(3)
    for i in range(3):
        x = eager.tensor(rng.normal(size=(2, 6, 16)).astype(np.float32))
        t = eager.tensor(rng.normal(size=(2, 6, 16)).astype(np.float32))
        want = train_step(eager_model, eager_opt, x, t).item()
        got = step(x, t).item()
        np.testing.assert_allclose(got, want, rtol=1e-5)
    assert step.trace_count == 1
    for (name, p), q in zip(model.named_parameters(), eager_model.parameters()):
        a, b = p.detach().numpy(), q.detach().numpy()
        if name.endswith("in_proj_bias"):
            # The key bias adds q.b_k to a whole row of scores, which softmax ignores: its
            # gradient is 0 up to rounding, and Adam turns rounding noise into steps of
            # size lr, differently for every summation order.  Both must see ~0 there.
            k_part = slice(16, 32)
            assert np.abs(p.grad.numpy()[k_part]).max() < 1e-6
            assert np.abs(q.grad.numpy()[k_part]).max() < 1e-6
            keep = np.r_[0:16, 32:48]
            a, b = a[keep], b[keep]
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=name)
        if name.endswith("in_proj_bias"):
            continue
        s, es = opt.state[p], eager_opt.state[q]
        assert set(s) == set(es)
        for key in s:
            np.testing.assert_allclose(_array(s[key]), _array(es[key]), rtol=1e-4, atol=1e-6,
                                       err_msg=f"{name} {key}")


# The W9 model (benchmarks/gpt.py) at a size the suite can afford: batch 2, context 8,
# vocabulary 11, width 16, 2 heads, 2 layers (the benchmark runs 16x64, 65, 128, 4 heads).
SMALL = {"batch": 2, "context": 8, "vocab": 11, "width": 16, "layers": 2}


@pytest.mark.parametrize("backend", BACKENDS)
def test_w9_gpt_30_steps_compiled_matches_eager(backend):
    inputs = gpt.gpt_inputs(np.random.default_rng(4), **SMALL)
    x, y = eager.from_numpy(inputs["x"]), eager.from_numpy(inputs["y"])
    from eager.nn.utils import clip_grad_norm_

    def train_step(model, opt, x, y):
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    eager_model, eager_opt = gpt.tracejit_model(inputs)
    model, opt = gpt.tracejit_model(inputs)
    step = tracer.function(lambda x, y: train_step(model, opt, x, y), backend=backend)
    want = [train_step(eager_model, eager_opt, x, y).item() for _ in range(30)]
    got = [step(x, y).item() for _ in range(30)]
    np.testing.assert_allclose(got, want, rtol=1e-4)
    assert want[-1] < want[0] - 0.5  # it learns
    assert step.trace_count == 1


def test_w9_gpt_matches_its_float64_reference():
    inputs = gpt.gpt_inputs(np.random.default_rng(5), **SMALL)
    ref = gpt.ref_gpt_train(inputs, steps=3)
    got = gpt.tracejit_runner(inputs, compiled=True).collect()
    np.testing.assert_allclose(got["loss"], ref["loss"], rtol=1e-5)
    for k, p0 in ref["_bases"].items():  # each parameter's change in 3 AdamW steps
        step = ref[k] - p0
        np.testing.assert_allclose(got[k] - p0, step, rtol=0, atol=2e-3 * np.abs(step).max()
                                   + 1e-7, err_msg=k)
        g = k.replace("param", "grad")
        np.testing.assert_allclose(got[g], ref[g], rtol=0, atol=1e-3 * np.abs(ref[g]).max()
                                   + 1e-8, err_msg=g)
