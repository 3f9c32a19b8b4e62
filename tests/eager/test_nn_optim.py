"""eager.nn and eager.optim against PyTorch's documented semantics.

References are written here in plain numpy, independently of eager: the layers'
formulas, and PyTorch's update rules for SGD, Adam and AdamW (torch/optim/sgd.py
and adam.py, single-tensor path), so an optimizer is checked step by step.
"""
import math
from collections import OrderedDict

import numpy as np
import pytest

import eager
import eager.nn.functional as F
from eager import nn, optim


def _np(t):
    return t.detach().numpy()


def _mlp(seed=0):
    eager.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


class TwoLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(3, 5), nn.Tanh())
        self.scale = nn.Parameter(eager.ones(5))
        self.head = nn.Linear(5, 2)
        self.tied = self.scale  # the same Parameter twice: listed once
        self.note = "not a parameter"

    def forward(self, x):
        return self.head(self.encoder(x) * self.scale)


# ======================================================================================
# Module

def test_named_parameters_order_and_names():
    m = _mlp()
    names = [n for n, _ in m.named_parameters()]
    assert names == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert [p.shape for p in m.parameters()] == [(4, 3), (4,), (2, 4), (2,)]
    for p in m.parameters():
        assert isinstance(p, nn.Parameter) and isinstance(p, eager.Tensor)
        assert p.requires_grad and p.is_leaf and p.grad is None


def test_nested_module_names_follow_assignment_order_and_dedupe():
    m = TwoLayer()
    assert [n for n, _ in m.named_parameters()] == [
        "scale", "encoder.0.weight", "encoder.0.bias", "head.weight", "head.bias"]
    assert len(list(m.parameters())) == 5
    assert [n for n, _ in m.named_parameters(recurse=False)] == ["scale"]
    assert m.note == "not a parameter"


def test_children_and_modules():
    m = TwoLayer()
    assert [n for n, _ in m.named_children()] == ["encoder", "head"]
    assert list(m.children()) == [m.encoder, m.head]
    assert [n for n, _ in m.named_modules()] == ["", "encoder", "encoder.0", "encoder.1",
                                                 "head"]
    assert [type(x).__name__ for x in m.modules()] == ["TwoLayer", "Sequential", "Linear",
                                                      "Tanh", "Linear"]
    seq = m.encoder
    assert len(seq) == 2 and isinstance(seq[0], nn.Linear) and list(seq)[1] is seq[1]


def test_train_eval_propagate_to_every_submodule():
    m = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Dropout(0.5), nn.ReLU()))
    assert all(x.training for x in m.modules())
    assert m.eval() is m
    assert not any(x.training for x in m.modules())
    m.train()
    assert all(x.training for x in m.modules())
    m.train(False)
    assert not any(x.training for x in m.modules())


def test_dropout_respects_training_mode():
    d = nn.Dropout(0.25)
    x = eager.ones(20000)
    y = _np(d(x))
    # kept values are scaled by 1 / (1 - p); about p of them are zeroed
    assert set(np.unique(y).tolist()) <= {0.0, np.float32(1 / 0.75)}
    assert abs((y == 0).mean() - 0.25) < 0.02
    assert abs(y.mean() - 1.0) < 0.03
    d.eval()
    np.testing.assert_array_equal(_np(d(x)), np.ones(20000, np.float32))
    assert repr(d) == "Dropout(p=0.25, inplace=False)"
    np.testing.assert_array_equal(_np(F.dropout(x, 0.5, training=False)), _np(x))
    np.testing.assert_array_equal(_np(F.dropout(x, 0.0)), _np(x))
    np.testing.assert_array_equal(_np(F.dropout(x, 1.0)), np.zeros(20000, np.float32))
    with pytest.raises(ValueError):
        nn.Dropout(1.5)


def test_dropout_gradient_uses_the_same_mask():
    x = eager.ones(1000, requires_grad=True)
    y = F.dropout(x, 0.5)
    y.sum().backward()
    np.testing.assert_array_equal(_np(x.grad), _np(y))


def test_module_zero_grad_sets_to_none_by_default():
    m = _mlp()
    m(eager.ones(5, 3)).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())


def test_module_zero_grad_set_to_none_false_gives_zeros():
    m = _mlp()
    m(eager.ones(5, 3)).sum().backward()
    m.zero_grad(set_to_none=False)
    for p in m.parameters():
        assert p.grad is not None and not p.grad.requires_grad
        np.testing.assert_array_equal(_np(p.grad), np.zeros(p.shape, np.float32))
    # and the next backward accumulates onto the zeros
    m(eager.ones(5, 3)).sum().backward()
    np.testing.assert_allclose(_np(m[2].bias.grad), [5.0, 5.0])


def test_zero_grad_on_shared_broadcast_gradients():
    # d(sum(a + b)) hands both leaves the same broadcast ones: zeroing one must not fail
    # or clear the other.
    a = eager.ones(3, requires_grad=True)
    b = eager.ones(3, requires_grad=True)
    (a + b).sum().backward()
    opt = optim.SGD([a], lr=0.1)
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(_np(a.grad), np.zeros(3))
    np.testing.assert_array_equal(_np(b.grad), np.ones(3))


def test_state_dict_round_trip():
    src, dst = _mlp(seed=1), _mlp(seed=2)
    x = eager.randn(6, 3)
    assert not np.allclose(_np(src(x)), _np(dst(x)))
    sd = src.state_dict()
    assert isinstance(sd, OrderedDict)
    assert list(sd) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert all(not v.requires_grad for v in sd.values())
    result = dst.load_state_dict(sd)
    assert tuple(result) == ([], [])
    np.testing.assert_array_equal(_np(src(x)), _np(dst(x)))
    for (n1, p1), (n2, p2) in zip(src.named_parameters(), dst.named_parameters()):
        assert n1 == n2 and p1 is not p2
        assert p2.requires_grad and isinstance(p2, nn.Parameter)
    # loading copies values: later updates to the source do not leak into the copy
    with eager.no_grad():
        src[0].weight.mul_(2.0)
    assert not np.allclose(_np(src[0].weight), _np(dst[0].weight))


def test_load_state_dict_size_mismatch():
    m = _mlp()
    sd = m.state_dict()
    sd["0.weight"] = eager.zeros(4, 4)
    with pytest.raises(RuntimeError, match=r"size mismatch for 0\.weight"):
        m.load_state_dict(sd)


def test_load_state_dict_missing_and_unexpected_keys():
    m = _mlp()
    sd = m.state_dict()
    del sd["2.bias"]
    with pytest.raises(RuntimeError, match="2.bias"):
        m.load_state_dict(sd)
    missing, unexpected = m.load_state_dict(sd, strict=False)
    assert missing == ["2.bias"] and unexpected == []
    sd["extra"] = eager.zeros(1)
    missing, unexpected = m.load_state_dict(sd, strict=False)
    assert unexpected == ["extra"]


def test_sequential_repr_matches_pytorch():
    model = nn.Sequential(nn.Linear(100, 128), nn.ReLU(), nn.Linear(128, 10))
    assert repr(model) == (
        "Sequential(\n"
        "  (0): Linear(in_features=100, out_features=128, bias=True)\n"
        "  (1): ReLU()\n"
        "  (2): Linear(in_features=128, out_features=10, bias=True)\n"
        ")")


def test_nested_repr_matches_pytorch():
    assert repr(TwoLayer()) == (
        "TwoLayer(\n"
        "  (encoder): Sequential(\n"
        "    (0): Linear(in_features=3, out_features=5, bias=True)\n"
        "    (1): Tanh()\n"
        "  )\n"
        "  (head): Linear(in_features=5, out_features=2, bias=True)\n"
        ")")
    assert repr(nn.LayerNorm(4)) == \
        "LayerNorm((4,), eps=1e-05, elementwise_affine=True, bias=True)"
    assert repr(nn.Embedding(10, 3)) == "Embedding(10, 3)"
    assert repr(nn.GELU()) == "GELU(approximate='none')"
    assert repr(nn.Linear(2, 3, bias=False)) == \
        "Linear(in_features=2, out_features=3, bias=False)"


def test_parameter():
    t = eager.tensor([1.0, 2.0])
    p = nn.Parameter(t)
    assert isinstance(p, eager.Tensor) and p.requires_grad and p.is_leaf
    assert repr(p) == "Parameter containing:\ntensor([1., 2.], requires_grad=True)"
    assert not nn.Parameter(eager.zeros(2), requires_grad=False).requires_grad
    (p * p).sum().backward()
    np.testing.assert_array_equal(_np(p.grad), [2.0, 4.0])


def test_assigning_parameters_and_none():
    m = nn.Linear(3, 2)
    with pytest.raises(TypeError, match="weight"):
        m.weight = eager.zeros(2, 3)  # a plain tensor would silently drop the parameter
    assert [n for n, _ in m.named_parameters()] == ["weight", "bias"]
    m.bias = None
    assert m.bias is None
    assert [n for n, _ in m.named_parameters()] == ["weight"]
    np.testing.assert_array_equal(_np(m(eager.zeros(1, 3))), np.zeros((1, 2)))
    m.bias = nn.Parameter(eager.ones(2))
    assert [n for n, _ in m.named_parameters()] == ["weight", "bias"]
    assert nn.Linear(3, 2, bias=False).bias is None


# ======================================================================================
# layers against numpy

def test_linear_forward_and_init_bounds():
    eager.manual_seed(3)
    lin = nn.Linear(50, 400)
    bound = 1 / math.sqrt(50)  # kaiming_uniform(a=sqrt(5)) on a fan-in of 50
    w, b = _np(lin.weight), _np(lin.bias)
    assert w.shape == (400, 50) and b.shape == (400,)
    assert w.dtype == np.float32 and b.dtype == np.float32
    for values in (w, b):
        assert np.abs(values).max() <= bound
        assert np.abs(values).max() > 0.98 * bound  # uniform over the whole interval
    assert abs(w.std() - bound / math.sqrt(3)) < 0.02 * bound  # the std of U(-b, b)
    x = np.random.default_rng(0).standard_normal((7, 50)).astype(np.float32)
    np.testing.assert_allclose(_np(lin(eager.tensor(x))), x @ w.T + b, rtol=1e-5, atol=1e-5)


def test_linear_on_batched_input():
    lin = nn.Linear(4, 3)
    x = np.random.default_rng(1).standard_normal((2, 5, 4)).astype(np.float32)
    ref = x @ _np(lin.weight).T + _np(lin.bias)
    np.testing.assert_allclose(_np(lin(eager.tensor(x))), ref, rtol=1e-5, atol=1e-6)


def _layer_norm_ref(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)  # biased, as PyTorch
    return (x - mu) / np.sqrt(var + eps) * w + b


def test_layer_norm_against_numpy():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4, 6)).astype(np.float32) * 3 + 1
    ln = nn.LayerNorm(6, eps=1e-3)
    np.testing.assert_array_equal(_np(ln.weight), np.ones(6))
    np.testing.assert_array_equal(_np(ln.bias), np.zeros(6))
    w = rng.standard_normal(6).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    ln.load_state_dict({"weight": eager.tensor(w), "bias": eager.tensor(b)})
    ref = _layer_norm_ref(x.astype(np.float64), w, b, 1e-3)
    np.testing.assert_allclose(_np(ln(eager.tensor(x))), ref, rtol=1e-5, atol=1e-5)
    # over the last two dims, without affine parameters
    ln2 = nn.LayerNorm((4, 6), elementwise_affine=False)
    assert list(ln2.parameters()) == []
    flat = x.reshape(3, 24).astype(np.float64)
    ref2 = _layer_norm_ref(flat, 1.0, 0.0, 1e-5).reshape(3, 4, 6)
    np.testing.assert_allclose(_np(ln2(eager.tensor(x))), ref2, rtol=1e-5, atol=1e-5)


def test_layer_norm_gradient_against_finite_differences():
    rng = np.random.default_rng(3)
    x0 = rng.standard_normal((2, 5))
    w0 = rng.standard_normal(5)
    r = rng.standard_normal((2, 5))  # loss = sum(r * layer_norm(x))

    def loss(xv):
        return float((r * _layer_norm_ref(xv, w0, 0.0, 1e-5)).sum())

    x = eager.tensor(x0, requires_grad=True)
    (F.layer_norm(x, (5,), eager.tensor(w0), None) * eager.tensor(r)).sum().backward()
    h = 1e-6
    num = np.zeros_like(x0)
    for i in np.ndindex(x0.shape):
        d = np.zeros_like(x0)
        d[i] = h
        num[i] = (loss(x0 + d) - loss(x0 - d)) / (2 * h)
    np.testing.assert_allclose(_np(x.grad), num, rtol=1e-5, atol=1e-6)


def test_embedding_lookup_init_and_gradient():
    eager.manual_seed(4)
    emb = nn.Embedding(1000, 16)
    w = _np(emb.weight)
    assert abs(w.mean()) < 0.02 and abs(w.std() - 1.0) < 0.02  # N(0, 1), as PyTorch
    idx = np.array([[1, 5, 1], [999, 0, 5]])
    out = emb(eager.tensor(idx))
    np.testing.assert_array_equal(_np(out), w[idx])
    out.sum().backward()
    ref = np.zeros_like(w)
    np.add.at(ref, idx, 1.0)  # repeated rows accumulate
    np.testing.assert_array_equal(_np(emb.weight.grad), ref)
    with pytest.raises(TypeError):
        emb(eager.tensor([1.0, 2.0]))


def test_activation_modules_against_numpy():
    x = np.linspace(-6, 6, 49).astype(np.float32)
    t = eager.tensor(x)
    erf = np.vectorize(math.erf)
    gelu = x * 0.5 * (1 + erf(x.astype(np.float64) / math.sqrt(2)))
    gelu_tanh = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    cases = [
        (nn.GELU(), gelu),
        (nn.GELU(approximate="tanh"), gelu_tanh),
        (nn.Tanh(), np.tanh(x)),
        (nn.Sigmoid(), 1 / (1 + np.exp(-x.astype(np.float64)))),
        (nn.ReLU(), np.maximum(x, 0)),
    ]
    for module, ref in cases:
        out = module(t)
        assert out.dtype == eager.float32, module
        np.testing.assert_allclose(_np(out), ref, rtol=1e-5, atol=1e-6, err_msg=repr(module))


def _log_softmax_ref(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def test_cross_entropy_against_numpy():
    rng = np.random.default_rng(5)
    logits = rng.standard_normal((8, 5)) * 4
    y = rng.integers(0, 5, 8)
    logp = _log_softmax_ref(logits)
    per_row = -logp[np.arange(8), y]
    x = eager.tensor(logits.astype(np.float32), requires_grad=True)
    yt = eager.tensor(y)
    assert yt.dtype == eager.int64
    np.testing.assert_allclose(nn.CrossEntropyLoss()(x, yt).item(), per_row.mean(), rtol=1e-5)
    np.testing.assert_allclose(_np(F.cross_entropy(x, yt, reduction="none")), per_row,
                               rtol=1e-5)
    np.testing.assert_allclose(F.cross_entropy(x, yt, reduction="sum").item(), per_row.sum(),
                               rtol=1e-5)
    smooth = 0.9 * per_row + 0.1 * (-logp.mean(-1))
    np.testing.assert_allclose(
        nn.CrossEntropyLoss(label_smoothing=0.1)(x, yt).item(), smooth.mean(), rtol=1e-5)
    probs = rng.dirichlet(np.ones(5), 8)
    np.testing.assert_allclose(
        F.cross_entropy(x, eager.tensor(probs.astype(np.float32))).item(),
        (-(probs * logp).sum(-1)).mean(), rtol=1e-5)
    # gradient of the mean loss: (softmax - one_hot) / N
    F.cross_entropy(x, yt).backward()
    one_hot = np.eye(5)[y]
    np.testing.assert_allclose(_np(x.grad), (np.exp(logp) - one_hot) / 8, atol=1e-6)


def test_cross_entropy_is_stable_for_large_logits():
    x = eager.tensor([[1000.0, 0.0], [0.0, -1000.0]])
    loss = F.cross_entropy(x, eager.tensor([1, 0]), reduction="none")
    np.testing.assert_allclose(_np(loss), [1000.0, 0.0])
    with pytest.raises(TypeError):
        F.cross_entropy(x, eager.tensor([1.0, 0.0]))  # float targets need the input's shape


def test_mse_loss_against_numpy():
    rng = np.random.default_rng(6)
    a = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal((4, 3)).astype(np.float32)
    x = eager.tensor(a, requires_grad=True)
    loss = nn.MSELoss()(x, eager.tensor(b))
    np.testing.assert_allclose(loss.item(), ((a - b) ** 2).mean(), rtol=1e-6)
    np.testing.assert_allclose(F.mse_loss(x, eager.tensor(b), reduction="sum").item(),
                               ((a - b) ** 2).sum(), rtol=1e-6)
    np.testing.assert_allclose(_np(nn.MSELoss(reduction="none")(x, eager.tensor(b))),
                               (a - b) ** 2, rtol=1e-6)
    loss.backward()
    np.testing.assert_allclose(_np(x.grad), 2 * (a - b) / a.size, rtol=1e-6)


# ======================================================================================
# manual_seed

def _random_draws():
    lin = nn.Linear(4, 3)
    return [
        _np(eager.rand(3, 2)),
        _np(eager.randn(5)),
        _np(eager.randint(0, 10, (6,))),
        _np(F.dropout(eager.ones(50), 0.5)),
        _np(lin.weight),
        _np(lin.bias),
        _np(nn.Embedding(3, 2).weight),
    ]


def test_manual_seed_makes_every_random_op_repeat():
    eager.manual_seed(123)
    first = _random_draws()
    eager.manual_seed(123)
    second = _random_draws()
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    eager.manual_seed(124)
    third = _random_draws()
    for a, b in zip(first, third):
        assert not np.array_equal(a, b)
    assert first[2].dtype == np.int64 and first[2].min() >= 0 and first[2].max() < 10


# ======================================================================================
# optimizers against numpy re-implementations of PyTorch's update rules

def _sgd_ref(params, grads_per_step, lr, momentum=0.0, dampening=0.0, weight_decay=0.0,
             nesterov=False):
    params = [p.astype(np.float64) for p in params]
    bufs = [None] * len(params)
    for grads in grads_per_step:
        for i, g in enumerate(grads):
            g = g.astype(np.float64)
            if weight_decay:
                g = g + weight_decay * params[i]
            if momentum:
                if bufs[i] is None:
                    bufs[i] = g.copy()  # the first buffer is the gradient, undampened
                else:
                    bufs[i] = momentum * bufs[i] + (1 - dampening) * g
                g = g + momentum * bufs[i] if nesterov else bufs[i]
            params[i] = params[i] - lr * g
    return params, bufs


def _adam_ref(params, grads_per_step, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
              weight_decay=0.0, decoupled=False):
    b1, b2 = betas
    params = [p.astype(np.float64) for p in params]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    step = 0
    for grads in grads_per_step:
        step += 1
        for i, g in enumerate(grads):
            g = g.astype(np.float64)
            if weight_decay and decoupled:
                params[i] = params[i] * (1 - lr * weight_decay)
            elif weight_decay:
                g = g + weight_decay * params[i]
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            m_hat = m[i] / (1 - b1 ** step)
            v_hat = v[i] / (1 - b2 ** step)
            params[i] = params[i] - lr * m_hat / (np.sqrt(v_hat) + eps)
    return params, m, v, step


def _problem(n_steps=5, seed=7):
    rng = np.random.default_rng(seed)
    init = [rng.standard_normal((4, 3)).astype(np.float32),
            rng.standard_normal(3).astype(np.float32)]
    grads = [[rng.standard_normal(p.shape).astype(np.float32) for p in init]
             for _ in range(n_steps)]
    return init, grads


def _run(opt_cls, init, grads_per_step, **kwargs):
    params = [nn.Parameter(eager.tensor(p)) for p in init]
    opt = opt_cls(params, **kwargs)
    for grads in grads_per_step:
        opt.zero_grad()
        for p, g in zip(params, grads):
            p.grad = eager.tensor(g)
        opt.step()
    return params, opt


SGD_CASES = [
    dict(lr=0.1),
    dict(lr=0.1, momentum=0.9),
    dict(lr=0.05, momentum=0.9, dampening=0.5),
    dict(lr=0.05, momentum=0.8, nesterov=True),
    dict(lr=0.1, weight_decay=0.1),
    dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
]


@pytest.mark.parametrize("kwargs", SGD_CASES, ids=lambda k: ",".join(f"{a}={b}" for a, b in
                                                                      k.items()))
def test_sgd_matches_pytorch_rule(kwargs):
    init, grads = _problem()
    params, opt = _run(optim.SGD, init, grads, **kwargs)
    ref, bufs = _sgd_ref(init, grads, **kwargs)
    for p, r in zip(params, ref):
        np.testing.assert_allclose(_np(p), r, rtol=1e-5, atol=1e-6)
        assert p.dtype == eager.float32 and p.requires_grad and p.is_leaf
    for p, b in zip(params, bufs):
        if kwargs.get("momentum"):
            assert list(opt.state[p]) == ["momentum_buffer"]
            np.testing.assert_allclose(_np(opt.state[p]["momentum_buffer"]), b, rtol=1e-5,
                                       atol=1e-6)
        else:
            assert p not in opt.state or not opt.state[p].get("momentum_buffer")


ADAM_CASES = [
    dict(lr=0.01),
    dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6),
    dict(lr=0.01, weight_decay=0.1),
]


@pytest.mark.parametrize("kwargs", ADAM_CASES, ids=lambda k: ",".join(f"{a}={b}" for a, b in
                                                                       k.items()))
def test_adam_matches_pytorch_rule(kwargs):
    init, grads = _problem()
    params, opt = _run(optim.Adam, init, grads, **kwargs)
    ref, m, v, step = _adam_ref(init, grads, **kwargs)
    for i, p in enumerate(params):
        np.testing.assert_allclose(_np(p), ref[i], rtol=1e-5, atol=1e-6)
        state = opt.state[p]
        assert set(state) == {"step", "exp_avg", "exp_avg_sq"}
        assert state["step"].shape == () and state["step"].item() == step
        assert state["exp_avg"].shape == p.shape and state["exp_avg_sq"].shape == p.shape
        np.testing.assert_allclose(_np(state["exp_avg"]), m[i], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(_np(state["exp_avg_sq"]), v[i], rtol=1e-5, atol=1e-7)


def test_adam_weight_decay_is_l2_and_adamw_is_decoupled():
    init, grads = _problem()
    adam, _ = _run(optim.Adam, init, grads, lr=0.01, weight_decay=0.5)
    adamw, _ = _run(optim.AdamW, init, grads, lr=0.01, weight_decay=0.5)
    l2, *_ = _adam_ref(init, grads, lr=0.01, weight_decay=0.5)
    decoupled, *_ = _adam_ref(init, grads, lr=0.01, weight_decay=0.5, decoupled=True)
    for a, w, r_l2, r_dec in zip(adam, adamw, l2, decoupled):
        np.testing.assert_allclose(_np(a), r_l2, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(_np(w), r_dec, rtol=1e-5, atol=1e-6)
        assert not np.allclose(r_l2, r_dec, atol=1e-4)  # the two rules really differ


def test_adamw_default_weight_decay_is_0_01():
    init, grads = _problem()
    params, opt = _run(optim.AdamW, init, grads, lr=0.01)
    assert opt.param_groups[0]["weight_decay"] == 0.01
    ref, *_ = _adam_ref(init, grads, lr=0.01, weight_decay=0.01, decoupled=True)
    for p, r in zip(params, ref):
        np.testing.assert_allclose(_np(p), r, rtol=1e-5, atol=1e-6)


def test_optimizer_defaults_match_pytorch():
    p = [nn.Parameter(eager.zeros(1))]
    g = optim.Adam(p).param_groups[0]
    assert (g["lr"], tuple(g["betas"]), g["eps"], g["weight_decay"]) == \
        (1e-3, (0.9, 0.999), 1e-8, 0)
    g = optim.SGD(p, lr=0.1).param_groups[0]
    assert (g["momentum"], g["dampening"], g["weight_decay"], g["nesterov"]) == \
        (0, 0, 0, False)


@pytest.mark.parametrize("opt_cls,kwargs", [
    (optim.SGD, dict(lr=0.1)),
    (optim.SGD, dict(lr=0.1, momentum=0.9)),
    (optim.Adam, dict(lr=0.1)),
    (optim.AdamW, dict(lr=0.1)),
])
def test_params_without_grad_are_skipped(opt_cls, kwargs):
    used = nn.Parameter(eager.ones(2))
    unused = nn.Parameter(eager.ones(2))
    frozen = nn.Parameter(eager.ones(2), requires_grad=False)  # accepted, as in PyTorch
    opt = opt_cls([used, unused, frozen], **kwargs)
    for _ in range(3):
        opt.zero_grad()
        (used * 3.0).sum().backward()
        assert unused.grad is None and frozen.grad is None
        opt.step()
    assert not np.allclose(_np(used), 1.0)
    np.testing.assert_array_equal(_np(unused), [1.0, 1.0])
    np.testing.assert_array_equal(_np(frozen), [1.0, 1.0])
    assert unused not in opt.state and frozen not in opt.state


def test_optimizer_zero_grad():
    p = nn.Parameter(eager.ones(3))
    opt = optim.SGD([p], lr=0.1)
    (p * 2.0).sum().backward()
    opt.zero_grad()
    assert p.grad is None  # set_to_none=True is the default
    (p * 2.0).sum().backward()
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(_np(p.grad), np.zeros(3))
    opt.step()  # a zero gradient moves nothing
    np.testing.assert_array_equal(_np(p), np.ones(3))


def test_gradients_accumulate_without_zero_grad():
    p = nn.Parameter(eager.tensor([1.0, 2.0]))
    opt = optim.SGD([p], lr=0.5)
    for _ in range(2):
        (p * p).sum().backward()
    np.testing.assert_allclose(_np(p.grad), [4.0, 8.0])  # 2 * (2p)
    opt.step()
    np.testing.assert_allclose(_np(p), [-1.0, -2.0])


def test_param_groups_have_their_own_hyperparameters():
    a = nn.Parameter(eager.ones(2))
    b = nn.Parameter(eager.ones(2))
    opt = optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5]
    a.grad = eager.ones(2)
    b.grad = eager.ones(2)
    opt.step()
    np.testing.assert_allclose(_np(a), [0.9, 0.9])
    np.testing.assert_allclose(_np(b), [0.5, 0.5])


def test_optimizer_steps_a_model_through_autograd():
    # SGD with momentum on a least-squares fit, against the numpy rule fed numpy gradients.
    rng = np.random.default_rng(8)
    x = rng.standard_normal((16, 3)).astype(np.float32)
    y = rng.standard_normal((16, 1)).astype(np.float32)
    model = nn.Linear(3, 1)
    w, b = _np(model.weight).astype(np.float64), _np(model.bias).astype(np.float64)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    bufs = [None, None]
    for _ in range(5):
        opt.zero_grad()
        F.mse_loss(model(eager.tensor(x)), eager.tensor(y)).backward()
        opt.step()
        r = 2 * (x @ w.T + b - y) / y.size
        grads = [r.T @ x, r.sum(0)]
        for i, g in enumerate(grads):
            bufs[i] = g if bufs[i] is None else 0.9 * bufs[i] + g
        w, b = w - 0.1 * bufs[0], b - 0.1 * bufs[1]
    np.testing.assert_allclose(_np(model.weight), w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_np(model.bias), b, rtol=1e-5, atol=1e-6)


def test_optimizer_argument_errors():
    p = nn.Parameter(eager.ones(2))
    with pytest.raises(ValueError, match="empty"):
        optim.SGD([], lr=0.1)
    with pytest.raises(ValueError, match="Nesterov"):
        optim.SGD([p], lr=0.1, nesterov=True)
    with pytest.raises(ValueError):
        optim.SGD([p], lr=-1.0)
    with pytest.raises(ValueError):
        optim.Adam([p], betas=(1.0, 0.999))
    with pytest.raises(ValueError, match="non-leaf"):
        optim.SGD([p * 2.0], lr=0.1)
    with pytest.raises(TypeError):
        optim.SGD([np.ones(2)], lr=0.1)
