"""Normalization layers traced and compiled (both backends) against eager. First the
soundness-critical case: BatchNorm running statistics updated inside a compiled training
step (forward + backward + optimizer step) exactly as eagerly, call after call, and
eval() between calls switching to the running statistics (a retrace via the training
guard). Then the functional forms, outputs and gradients, on shared shapes."""
import copy

import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F
import eager.optim as optim
import tracer

BACKENDS = ["numba", "interpret"]


def _close(got, want, rtol=1e-5, atol=1e-6, what=""):
    assert got.shape == want.shape and got.dtype == want.dtype, what
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=rtol, atol=atol,
                               err_msg=what)


class _SmallCNN(nn.Module):
    def __init__(self, momentum=0.1):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4, momentum=momentum)
        self.fc = nn.Linear(4 * 3 * 3, 3)
        self.bn1 = nn.BatchNorm1d(3, momentum=momentum)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.bn1(self.fc(h.flatten(1)))


def _pair(momentum):
    eager.manual_seed(11)
    a, b = _SmallCNN(momentum), _SmallCNN(momentum)
    b.load_state_dict(a.state_dict())
    return (a, optim.SGD(a.parameters(), lr=0.1, momentum=0.9)), \
        (b, optim.SGD(b.parameters(), lr=0.1, momentum=0.9))


def _train_step(model, opt, x, y):
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss.detach()


def _compare_state(got, want, what):
    gs, ws = got.state_dict(), want.state_dict()
    assert list(gs) == list(ws)
    for k in ws:
        _close(gs[k], ws[k], rtol=2e-5, atol=2e-6, what=f"{what}: {k}")
    for (k, p), (_, q) in zip(got.named_parameters(), want.named_parameters()):
        _close(p.grad, q.grad, rtol=1e-4, atol=1e-6, what=f"{what}: {k}.grad")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("momentum", [0.1, None])
def test_batchnorm_compiled_training_step_updates_running_stats_as_eager(backend, momentum):
    (a, opt_a), (b, opt_b) = _pair(momentum)
    compiled = tracer.function(_train_step, backend=backend)
    rng = np.random.default_rng(0)
    for i in range(3):
        x = eager.from_numpy(rng.standard_normal((6, 2, 6, 6)).astype(np.float32))
        y = eager.from_numpy(rng.integers(0, 3, size=6))
        _close(compiled(a, opt_a, x, y), _train_step(b, opt_b, x, y), rtol=1e-5,
               what=f"loss {i}")
        _compare_state(a, b, f"train step {i}")
        assert int(a.bn.num_batches_tracked.numpy()) == i + 1
    assert compiled.trace_count == 1
    # the buffers did move (a test that would pass with frozen statistics is no test)
    assert not np.allclose(a.bn.running_mean.numpy(), 0.0)

    infer = tracer.function(lambda m, x: m(x), backend=backend)
    x = eager.from_numpy(rng.standard_normal((6, 2, 6, 6)).astype(np.float32))
    for model in (a, b):
        model.eval()
    before = {k: v.numpy().copy() for k, v in a.state_dict().items()}
    _close(infer(a, x), b(x), what="eval output")
    _close(infer(a, x[:1]), b(x[:1]), what="eval output, batch of one")
    for k, v in a.state_dict().items():  # eval leaves the statistics alone
        np.testing.assert_array_equal(v.numpy(), before[k], err_msg=k)
    # the compiled training step, called in eval mode, retraces (the training guard) and
    # uses the running statistics: no update, as eagerly
    _close(compiled(a, opt_a, x, y), _train_step(b, opt_b, x, y), rtol=1e-5, what="eval step")
    assert compiled.trace_count == 2
    _compare_state(a, b, "eval step")
    np.testing.assert_array_equal(a.bn.running_mean.numpy(), before["bn.running_mean"])
    for model in (a, b):
        model.train()
    _close(compiled(a, opt_a, x, y), _train_step(b, opt_b, x, y), rtol=1e-5, what="train again")
    _compare_state(a, b, "train again")
    assert compiled.trace_count == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_batchnorm_running_stats_of_a_compiled_forward_match_numpy(backend):
    """Five compiled forward calls in train mode against a numpy reference written from the
    documented formulas: biased variance normalizes, the unbiased one is averaged in."""
    bn = nn.BatchNorm1d(3, momentum=0.3)
    f = tracer.function(lambda m, x: m(x), backend=backend)
    rm, rv = np.zeros(3), np.ones(3)
    rng = np.random.default_rng(2)
    for _ in range(5):
        xn = rng.standard_normal((7, 3, 4)) * 2 + 1
        with eager.no_grad():  # (with gradients on this call would run eagerly)
            out = f(bn, eager.from_numpy(xn.astype(np.float32)))
        mu, var = xn.mean((0, 2)), xn.var((0, 2))
        ref = (xn - mu[None, :, None]) / np.sqrt(var[None, :, None] + 1e-5)
        np.testing.assert_allclose(out.detach().numpy(), ref, rtol=1e-4, atol=1e-5)
        rm = 0.7 * rm + 0.3 * mu
        rv = 0.7 * rv + 0.3 * xn.var((0, 2), ddof=1)
    np.testing.assert_allclose(bn.running_mean.numpy(), rm, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), rv, rtol=1e-5, atol=1e-6)
    assert int(bn.num_batches_tracked.numpy()) == 5
    assert f.trace_count == 1


def _forward_and_grads(body, tensors, backend):
    def step(*ts):
        out = body(*ts)
        w = eager.tensor(np.linspace(-1, 1, int(np.prod(out.shape)), dtype=np.float32)
                         .reshape(out.shape))
        (out * w).sum().backward()
        return out.detach()

    results = []
    for run in (step, tracer.function(step, backend=backend)):
        ts = [eager.tensor(t.numpy(), requires_grad=True) for t in tensors]
        results.append((run(*ts), [t.grad for t in ts]))
    return results


def _t(rng, *shape):
    return eager.tensor(rng.standard_normal(shape).astype(np.float32))


X, C, LN = (3, 4, 5, 6), (4,), (5, 6)
CASES = {  # name: (body, argument shapes)
    "batch_norm": (lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), (X, C, C)),
    "group_norm": (lambda x, w, b: F.group_norm(x, 2, w, b), (X, C, C)),
    "instance_norm": (lambda x, w, b: F.instance_norm(x, weight=w, bias=b), (X, C, C)),
    "layer_norm_2d": (lambda x, w, b: F.layer_norm(x, (5, 6), w, b), (X, LN, LN)),
    "rms_norm_2d": (lambda x, w: F.rms_norm(x, (5, 6), w), (X, LN)),
    "non_contiguous": (lambda x, w, b: F.batch_norm(x.transpose(0, 1), None, None, w, b,
                                                    training=True), ((4, 3, 5, 6), C, C)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_norm_functional_compiled_matches_eager(backend, name):
    rng = np.random.default_rng(7)
    body, shapes = CASES[name]
    (want, gw), (got, gg) = _forward_and_grads(body, [_t(rng, *s) for s in shapes], backend)
    _close(got, want, what=name)
    for i, (p, q) in enumerate(zip(gg, gw)):
        _close(p, q, rtol=1e-4, atol=1e-5, what=f"{name} grad {i}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_norm_modules_compiled_match_eager(backend):
    eager.manual_seed(4)
    layers = [nn.GroupNorm(2, 4), nn.InstanceNorm2d(4, affine=True, track_running_stats=True),
              nn.RMSNorm((5, 6)), nn.LayerNorm((5, 6)), nn.BatchNorm2d(4, momentum=None)]
    twins = [copy.deepcopy(m) for m in layers]
    fs = [tracer.function(m.__call__, backend=backend) for m in layers]
    rng = np.random.default_rng(8)
    for step in range(3):
        x = _t(rng, 3, 4, 5, 6)
        if step == 2:  # eval: running statistics where tracked
            for m in layers + twins:
                m.eval()
        for f, m, t in zip(fs, layers, twins):
            with eager.no_grad():  # (with gradients on the call would run eagerly)
                got = f(x)
            _close(got, t(x), what=type(m).__name__)
            for (k, v), (_, u) in zip(m.state_dict().items(), t.state_dict().items()):
                _close(v, u, what=f"{type(m).__name__}.{k}")
    assert all(f.trace_count <= 2 for f in fs)  # one trace per mode at most


@pytest.mark.parametrize("backend", BACKENDS)
def test_dropout2d_compiled_matches_eager_with_the_same_seed(backend):
    f = tracer.function(lambda x: F.dropout2d(x, 0.5, True), backend=backend)
    x = eager.tensor(np.ones((3, 4, 5, 6), np.float32))
    for _ in range(2):
        eager.manual_seed(1)
        got = f(x)
        eager.manual_seed(1)
        want = F.dropout2d(x, 0.5, True)
        _close(got, want)
        per_channel = got.numpy().reshape(12, 30)
        assert np.all(per_channel.min(1) == per_channel.max(1))  # whole channels


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_trace_serves_every_batch_size_with_running_stats(backend):
    """A symbolic batch: the unbiased variance's count is a run-time value, not the size
    seen while tracing. An empty batch (0) gives an empty output and leaves the running
    statistics alone (PyTorch; BatchNorm still counts it in num_batches_tracked). Under
    no_grad, so that the compiled program runs (with gradients on, a call that updates
    buffers and returns an output needing gradients runs eagerly)."""
    from tracer import TensorSpec
    layers = [nn.BatchNorm2d(4), nn.BatchNorm2d(4, momentum=None), nn.GroupNorm(2, 4),
              nn.InstanceNorm2d(4, track_running_stats=True)]
    twins = [copy.deepcopy(m) for m in layers]
    rng = np.random.default_rng(9)
    for m, t in zip(layers, twins):
        f = tracer.function(m.__call__, input_signature=[TensorSpec((None, 4, 5, 6))],
                            backend=backend)
        # (InstanceNorm's running stats average over the batch: NaN after an empty one,
        # as PyTorch's mean over 0 instances.)
        for n in (3, 5, 2) if isinstance(m, nn.InstanceNorm2d) else (3, 5, 0, 2):
            x = _t(rng, n, 4, 5, 6)
            with eager.no_grad():
                got, want = f(x), t(x)
            _close(got, want, rtol=1e-5, atol=1e-6, what=f"{type(m).__name__} batch {n}")
            for (k, v), (_, u) in zip(m.state_dict().items(), t.state_dict().items()):
                _close(v, u, what=f"{type(m).__name__}.{k} batch {n}")
        assert f.trace_count == 1
        if isinstance(m, nn.BatchNorm2d):
            assert int(m.num_batches_tracked.item()) == 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_changed_momentum_eps_and_tracking_retrace(backend):
    """The Python settings a forward reads (momentum, eps, track_running_stats) are
    guarded: changing one between calls gives the eager result, never the old trace's."""
    m = nn.BatchNorm1d(3)
    t = copy.deepcopy(m)
    f = tracer.function(lambda x: m(x), backend=backend)
    x = _t(np.random.default_rng(1), 4, 3)
    changes = [{}, {"momentum": 0.5, "eps": 1.0}, {"momentum": None},
               {"track_running_stats": False}]
    for change in changes:
        for k, v in change.items():
            setattr(m, k, v)
            setattr(t, k, v)
        with eager.no_grad():  # (with gradients on the call would run eagerly)
            got = f(x)
        _close(got, t(x), what=str(change))
        for (k, v), (_, u) in zip(m.state_dict().items(), t.state_dict().items()):
            _close(v, u, what=f"{change}: {k}")
    assert f.trace_count == len(changes)


@pytest.mark.parametrize("backend", BACKENDS)
def test_buffers_reset_replaced_or_loaded_between_calls_are_read_live(backend):
    m = nn.BatchNorm1d(3)
    t = copy.deepcopy(m)
    f = tracer.function(lambda x: m(x), backend=backend)
    x = _t(np.random.default_rng(1), 4, 3)
    edits = [lambda bn: None, lambda bn: bn.reset_running_stats(),
             lambda bn: setattr(bn, "running_mean", eager.ones(3)),
             lambda bn: bn.load_state_dict(nn.BatchNorm1d(3).state_dict())]
    for i, edit in enumerate(edits):
        edit(m)
        edit(t)
        with eager.no_grad():  # (with gradients on the call would run eagerly)
            got = f(x)
        _close(got, t(x), what=f"edit {i}")
        for (k, v), (_, u) in zip(m.state_dict().items(), t.state_dict().items()):
            _close(v, u, what=f"edit {i}: {k}")
    assert int(m.num_batches_tracked.numpy()) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_symbolic_batch_of_one_raises_as_eager_does(backend):
    """Eagerly a training batch of one raises ValueError; a trace made for every batch size
    checks the run-time count and raises too (the eager error, when the failed call is rerun
    eagerly to name it), leaving the statistics as eager leaves them."""
    from tracer import TensorSpec
    for make in (lambda: nn.BatchNorm1d(3), lambda: nn.BatchNorm1d(3, affine=False,
                                                                   track_running_stats=False)):
        m = make()
        t = copy.deepcopy(m)
        f = tracer.function(m.__call__, input_signature=[TensorSpec((None, 3))],
                            backend=backend)
        rng = np.random.default_rng(2)
        x = _t(rng, 4, 3)
        with eager.no_grad():  # (with gradients on the calls would run eagerly)
            _close(f(x), t(x))
            one = _t(rng, 1, 3)
            with pytest.raises(ValueError, match="more than 1 value per channel"):
                t(one)
            with pytest.raises((ValueError, RuntimeError),
                               match="more than 1 value per channel"):
                f(one)
            # The running statistics are left alone. (num_batches_tracked, counted before
            # the check, is not compared: eagerly and with Numba's in-place update it is
            # counted, the interpreter writes nothing back from a call that raises.)
            for k in ("running_mean", "running_var"):
                if k in t.state_dict():
                    _close(m.state_dict()[k], t.state_dict()[k], what=k)
            _close(f(x), t(x))
        assert f.trace_count == 1
