"""nn.RNN / nn.LSTM / nn.GRU and their cells eagerly, against a float64 numpy reference
written here from PyTorch's documented equations (each gate computed from its own rows of
the stacked weights), gradients by finite differences, PyTorch's parameter names, shapes
and initialization, dropout between layers, unbatched inputs and the error messages."""
import math

import numpy as np
import pytest

import eager
import eager.nn as nn


def _sig(v):
    return 1.0 / (1.0 + np.exp(-v))


def ref_cell(mode, x, h, c, w_ih, w_hh, b_ih, b_hh):
    """One step from the documented equations (float64); returns (h', c')."""
    H = w_hh.shape[1]
    b_ih = np.zeros(w_ih.shape[0]) if b_ih is None else b_ih
    b_hh = np.zeros(w_hh.shape[0]) if b_hh is None else b_hh

    def lin(k, inp, w, b):    # gate k's rows of the stacked weights
        return inp @ w[k * H:(k + 1) * H].T + b[k * H:(k + 1) * H]

    if mode in ("tanh", "relu"):
        pre = lin(0, x, w_ih, b_ih) + lin(0, h, w_hh, b_hh)
        return (np.tanh(pre) if mode == "tanh" else np.maximum(pre, 0)), None
    if mode == "LSTM":
        i = _sig(lin(0, x, w_ih, b_ih) + lin(0, h, w_hh, b_hh))
        f = _sig(lin(1, x, w_ih, b_ih) + lin(1, h, w_hh, b_hh))
        g = np.tanh(lin(2, x, w_ih, b_ih) + lin(2, h, w_hh, b_hh))
        o = _sig(lin(3, x, w_ih, b_ih) + lin(3, h, w_hh, b_hh))
        c2 = f * c + i * g
        return o * np.tanh(c2), c2
    r = _sig(lin(0, x, w_ih, b_ih) + lin(0, h, w_hh, b_hh))
    z = _sig(lin(1, x, w_ih, b_ih) + lin(1, h, w_hh, b_hh))
    n = np.tanh(lin(2, x, w_ih, b_ih) + r * lin(2, h, w_hh, b_hh))
    return (1 - z) * n + z * h, None


def ref_layer(mode, p, x, h0, c0, num_layers, bidirectional, batch_first):
    """The full layer, time-major loops; p maps PyTorch's parameter names to float64."""
    unbatched = x.ndim == 2
    if unbatched:
        x, h0 = x[:, None], h0[:, None]
        c0 = None if c0 is None else c0[:, None]
    elif batch_first:
        x = x.transpose(1, 0, 2)
    dirs = 2 if bidirectional else 1
    hn, cn = [], []
    for layer in range(num_layers):
        outs = []
        for d in range(dirs):
            sfx = f"_l{layer}" + ("_reverse" if d else "")
            k = layer * dirs + d
            h, c = h0[k], None if c0 is None else c0[k]
            out = [None] * x.shape[0]
            for t in (reversed(range(x.shape[0])) if d else range(x.shape[0])):
                h, c = ref_cell(mode, x[t], h, c, p["weight_ih" + sfx], p["weight_hh" + sfx],
                                p.get("bias_ih" + sfx), p.get("bias_hh" + sfx))
                out[t] = h
            outs.append(np.stack(out))
            hn.append(h)
            cn.append(c)
        x = np.concatenate(outs, -1)
    hn = np.stack(hn)
    cn = np.stack(cn) if mode == "LSTM" else None
    if unbatched:
        x, hn = x[:, 0], hn[:, 0]
        cn = None if cn is None else cn[:, 0]
    elif batch_first:
        x = x.transpose(1, 0, 2)
    return x, hn, cn


def _np(t):
    return t.detach().numpy()


def _make(mode, *args, **kw):
    if mode in ("tanh", "relu"):
        return nn.RNN(*args, nonlinearity=mode, **kw)
    return getattr(nn, mode)(*args, **kw)


def _params(m):
    return {n: p.detach().numpy().astype(np.float64) for n, p in m.named_parameters()}


MODES = ["tanh", "relu", "LSTM", "GRU"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("batch_first,with_state,bias",
                         [(False, False, True), (True, True, True), (False, True, False)])
def test_layer_matches_reference_two_layers_bidirectional(mode, batch_first, with_state, bias):
    rng = np.random.default_rng(hash((mode, batch_first, with_state, bias)) % 2**32)
    eager.manual_seed(3)
    m = _make(mode, 3, 5, num_layers=2, bidirectional=True, batch_first=batch_first,
              bias=bias)
    L, N = 4, 2
    x = rng.standard_normal((N, L, 3) if batch_first else (L, N, 3)).astype(np.float32)
    h0 = rng.standard_normal((4, N, 5)).astype(np.float32) if with_state else np.zeros((4, N, 5))
    c0 = rng.standard_normal((4, N, 5)).astype(np.float32) if with_state else np.zeros((4, N, 5))
    if not with_state:
        res = m(eager.tensor(x))
    elif mode == "LSTM":
        res = m(eager.tensor(x), (eager.tensor(h0), eager.tensor(c0)))
    else:
        res = m(eager.tensor(x), eager.tensor(h0))
    want = ref_layer(mode, _params(m), x.astype(np.float64), h0, c0 if mode == "LSTM" else None,
                     2, True, batch_first)
    out, hn = res[0], (res[1][0] if mode == "LSTM" else res[1])
    assert out.shape == want[0].shape == ((N, L, 10) if batch_first else (L, N, 10))
    assert hn.shape == (4, N, 5)
    np.testing.assert_allclose(_np(out), want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_np(hn), want[1], rtol=1e-5, atol=1e-6)
    if mode == "LSTM":
        np.testing.assert_allclose(_np(res[1][1]), want[2], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_unbatched_layer_matches_reference(mode):
    rng = np.random.default_rng(7)
    m = _make(mode, 3, 4, num_layers=2)
    x = rng.standard_normal((5, 3))
    m = m.double()
    res = m(eager.tensor(x))
    want = ref_layer(mode, _params(m), x, np.zeros((2, 4)),
                     np.zeros((2, 4)) if mode == "LSTM" else None, 2, False, False)
    assert res[0].shape == (5, 4)
    np.testing.assert_allclose(_np(res[0]), want[0], rtol=1e-10)
    hn = res[1][0] if mode == "LSTM" else res[1]
    assert hn.shape == (2, 4)
    np.testing.assert_allclose(_np(hn), want[1], rtol=1e-10)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("batched", [True, False])
def test_cells_match_reference(mode, batched):
    rng = np.random.default_rng(11)
    cls = {"tanh": nn.RNNCell, "relu": nn.RNNCell, "LSTM": nn.LSTMCell, "GRU": nn.GRUCell}[mode]
    cell = cls(3, 4, nonlinearity=mode) if mode in ("tanh", "relu") else cls(3, 4)
    cell = cell.double()
    p = _params(cell)
    shape = (2,) if batched else ()
    x, h, c = (rng.standard_normal(shape + (k,)) for k in (3, 4, 4))
    want = ref_cell(mode, x, h, c, p["weight_ih"], p["weight_hh"], p["bias_ih"], p["bias_hh"])
    if mode == "LSTM":
        got = cell(eager.tensor(x), (eager.tensor(h), eager.tensor(c)))
        np.testing.assert_allclose(_np(got[0]), want[0], rtol=1e-10)
        np.testing.assert_allclose(_np(got[1]), want[1], rtol=1e-10)
        zero = _np(cell(eager.tensor(x))[0])
        ref0 = ref_cell(mode, x, 0 * h, 0 * c, p["weight_ih"], p["weight_hh"], p["bias_ih"],
                        p["bias_hh"])[0]
    else:
        got = cell(eager.tensor(x), eager.tensor(h))
        np.testing.assert_allclose(_np(got), want[0], rtol=1e-10)
        zero = _np(cell(eager.tensor(x)))
        ref0 = ref_cell(mode, x, 0 * h, None, p["weight_ih"], p["weight_hh"], p["bias_ih"],
                        p["bias_hh"])[0]
    np.testing.assert_allclose(zero, ref0, rtol=1e-10)


def test_parameter_names_shapes_and_init_follow_pytorch():
    eager.manual_seed(0)
    m = nn.LSTM(3, 8, num_layers=2, bidirectional=True)
    names = [n for n, _ in m.named_parameters()]
    assert names[:8] == ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
                         "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse",
                         "bias_hh_l0_reverse"]
    shapes = dict((n, tuple(p.shape)) for n, p in m.named_parameters())
    assert shapes["weight_ih_l0"] == (32, 3) and shapes["weight_ih_l1"] == (32, 16)
    assert shapes["weight_hh_l1_reverse"] == (32, 8) and shapes["bias_hh_l1"] == (32,)
    assert list(m.state_dict()) == names and len(names) == 16
    bound = 1 / math.sqrt(8)
    for p in m.parameters():
        v = p.detach().numpy()
        assert v.dtype == np.float32 and np.abs(v).max() <= bound and v.std() > bound / 4
    g = nn.GRU(3, 8, bias=False)
    assert [n for n, _ in g.named_parameters()] == ["weight_ih_l0", "weight_hh_l0"]
    assert g.weight_ih_l0.shape == (24, 3)
    assert tuple(nn.RNN(3, 8).weight_hh_l0.shape) == (8, 8)
    c = nn.GRUCell(3, 8)
    assert [(n, tuple(p.shape)) for n, p in c.named_parameters()] == [
        ("weight_ih", (24, 3)), ("weight_hh", (24, 8)), ("bias_ih", (24,)), ("bias_hh", (24,))]
    # a state dict maps one to one onto a fresh module
    m2 = nn.LSTM(3, 8, num_layers=2, bidirectional=True)
    m2.load_state_dict(m.state_dict())
    x = eager.randn(2, 1, 3)
    np.testing.assert_array_equal(_np(m2(x)[0]), _np(m(x)[0]))


def _fd_check(m, inputs, seed):
    """d/dt loss(theta + t v) by central differences vs <grad, v> (float64)."""
    rng = np.random.default_rng(seed)
    params = list(m.parameters()) + inputs
    for p in inputs:
        p.requires_grad_(True)

    def loss():
        res = m(inputs[0], *(inputs[1:] if len(inputs) == 2 else
                             ([tuple(inputs[1:])] if len(inputs) == 3 else [])))
        out = res[0]
        hn = res[1][1] if isinstance(res[1], tuple) else res[1]   # c_n for the LSTM
        w1 = np.linspace(-1, 1, out.numel()).reshape(out.shape)
        w2 = np.cos(np.arange(hn.numel())).reshape(hn.shape)
        return (out * eager.tensor(w1)).sum() + (hn * eager.tensor(w2)).sum()

    m.zero_grad()
    loss().backward()
    dirs = [rng.standard_normal(p.shape) for p in params]
    analytic = sum(float((p.grad.numpy() * v).sum()) for p, v in zip(params, dirs))
    eps = 1e-6
    base = [p.detach().numpy().copy() for p in params]
    vals = []
    for sign in (1, -1):
        with eager.no_grad():
            for p, b, v in zip(params, base, dirs):
                p.copy_(eager.tensor(b + sign * eps * v))
            vals.append(loss().item())
    with eager.no_grad():
        for p, b in zip(params, base):
            p.copy_(eager.tensor(b))
    numeric = (vals[0] - vals[1]) / (2 * eps)
    assert abs(analytic - numeric) <= 1e-6 * max(1.0, abs(numeric)), (analytic, numeric)


@pytest.mark.parametrize("mode", MODES)
def test_layer_gradients_match_finite_differences(mode):
    eager.manual_seed(5)
    m = _make(mode, 3, 4, num_layers=2, bidirectional=True).double()
    rng = np.random.default_rng(2)
    x = eager.tensor(rng.standard_normal((3, 2, 3)))
    h0 = eager.tensor(rng.standard_normal((4, 2, 4)))
    states = [h0, eager.tensor(rng.standard_normal((4, 2, 4)))] if mode == "LSTM" else [h0]
    _fd_check(m, [x] + states, seed=len(mode))


@pytest.mark.parametrize("cls", [nn.RNNCell, nn.LSTMCell, nn.GRUCell])
def test_cell_gradients_match_finite_differences(cls):
    eager.manual_seed(6)
    cell = cls(3, 4).double()
    rng = np.random.default_rng(3)
    x = eager.tensor(rng.standard_normal((2, 3)))
    x.requires_grad_(True)
    h = eager.tensor(rng.standard_normal((2, 4)))
    h.requires_grad_(True)
    c = eager.tensor(rng.standard_normal((2, 4)))
    c.requires_grad_(True)
    v = [rng.standard_normal(t.shape) for t in [x, h, c]]
    args = (x, (h, c)) if cls is nn.LSTMCell else (x, h)

    def loss():
        out = cell(*args)
        out = out[0] * 2 + out[1] if isinstance(out, tuple) else out
        return (out * eager.tensor(np.arange(8.0).reshape(2, 4) - 3)).sum()
    loss().backward()
    used = [x, h, c] if cls is nn.LSTMCell else [x, h]
    analytic = sum(float((t.grad.numpy() * w).sum()) for t, w in zip(used, v))
    vals = []
    for sign in (1, -1):
        with eager.no_grad():
            for t, w in zip(used, v):
                t.add_(eager.tensor(sign * 1e-6 * w))
            vals.append(loss().item())
            for t, w in zip(used, v):
                t.sub_(eager.tensor(sign * 1e-6 * w))
    numeric = (vals[0] - vals[1]) / 2e-6
    assert abs(analytic - numeric) <= 1e-6 * max(1.0, abs(numeric))


def test_dropout_only_between_layers_and_only_in_training():
    eager.manual_seed(1)
    m = nn.GRU(3, 4, num_layers=2, dropout=1.0)
    x = eager.randn(5, 2, 3)
    out, hn = m(x)
    # p=1 zeroes layer 1's output, so layer 2 runs on zeros: the reference with x=0 there
    p = _params(m)
    zeros = {k.replace("_l1", "_l0"): v for k, v in p.items() if "_l1" in k}
    want, _, _ = ref_layer("GRU", zeros, np.zeros((5, 2, 4)), np.zeros((1, 2, 4)), None, 1,
                           False, False)
    np.testing.assert_allclose(_np(out), want, rtol=1e-5, atol=1e-6)
    assert np.abs(_np(out)).max() > 0   # no dropout after the last layer
    m.eval()
    want_eval = ref_layer("GRU", p, x.numpy().astype(np.float64), np.zeros((2, 2, 4)), None,
                          2, False, False)[0]
    np.testing.assert_allclose(_np(m(x)[0]), want_eval, rtol=1e-5, atol=1e-6)


def test_errors_name_the_layer_and_what_to_do():
    with pytest.raises(NotImplementedError, match="proj_size"):
        nn.LSTM(3, 4, proj_size=2)
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.RNN(3, 4, nonlinearity="sigmoid")
    m = nn.LSTM(3, 4)
    with pytest.raises(RuntimeError, match="input_size. Expected 3, got 5"):
        m(eager.randn(2, 1, 5))
    with pytest.raises(RuntimeError, match=r"hidden\[0\] size \(1, 2, 4\)"):
        m(eager.randn(3, 2, 3), (eager.zeros(1, 3, 4), eager.zeros(1, 3, 4)))
    with pytest.raises(RuntimeError, match="hidden size"):
        nn.GRU(3, 4)(eager.randn(3, 2, 3), eager.zeros(2, 2, 4))
    with pytest.raises(ValueError, match="2-d .unbatched. or 3-d"):
        m(eager.randn(3))
    with pytest.raises(RuntimeError, match="GRUCell.*hidden state"):
        nn.GRUCell(3, 4)(eager.randn(2, 3), eager.zeros(3, 4))
    assert "test_rnn.py" in _message(lambda: m(eager.randn(2, 1, 5)))


def _message(fn):
    try:
        fn()
    except Exception as e:   # noqa: BLE001 - the message is what is checked
        return str(e)
    return ""


def test_lstm_double_backward_raises_naming_the_fused_op():
    """PyTorch's LSTM has second derivatives; ours runs its time loop as one op whose
    backward has none: a gradient of a gradient raises, never a silently missing term."""
    eager.manual_seed(0)
    m = nn.LSTM(3, 2)
    x = eager.randn(4, 1, 3, requires_grad=True)
    out, _ = m(x)
    (gx,) = eager.autograd.grad(out.sum(), [x], create_graph=True)
    with pytest.raises(NotImplementedError, match="lstm_recurrence_backward"):
        (gx * gx).sum().backward()
    # a first derivative by itself is fine
    out, _ = m(x)
    (g1,) = eager.autograd.grad(out.sum(), [x])
    assert g1.shape == x.shape


def test_lstm_saves_gate_activations_only_when_a_backward_can_run(monkeypatch):
    import eager.nn.rnn as rnn_module
    from eager import ops_rnn

    eager.manual_seed(0)
    m = nn.LSTM(3, 2)
    x = eager.randn(4, 1, 3)
    seen = []

    def spy(*args):
        seen.append(args[-1])
        return ops_rnn.lstm_recurrence(*args)
    monkeypatch.setattr(rnn_module, "lstm_recurrence", spy)
    with eager.no_grad():
        assert m(x)[0].shape == (4, 1, 2)
    m(x)
    for p in m.parameters():
        p.requires_grad_(False)
    m(x)
    assert seen == [False, True, False]
