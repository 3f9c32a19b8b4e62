"""PyTorch surface that gave a wrong result or an unclear error, eagerly and compiled:
`nn.Sequential`'s item assignment and deletion, `nn.Embedding(max_norm=...)` (the rows
looked up are renormalized in place), `F.one_hot` with a class out of range (raises).

Tiny shapes shared with the other tracer tests (Linear 4 -> 8 -> 3 on a 6x4 batch).
"""
import numpy as np
import pytest

import eager
import eager.nn.functional as F
import tracer
from eager import nn

BACKENDS = ["numba", "interpret"]


def _x(k=0):
    return eager.tensor(np.random.default_rng(k).standard_normal((6, 4)).astype(np.float32))


def _mlp():
    eager.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


# ------------------------------------------------------------- Sequential

def test_sequential_item_assignment_and_deletion_as_pytorch():
    m = _mlp()
    first, last = m[0], m[2]
    m[1] = nn.Tanh()
    assert isinstance(m[1], nn.Tanh) and list(m._modules) == ["0", "1", "2"]
    m[-1] = nn.Linear(8, 2)
    assert m[2] is not last and m(_x()).shape == (6, 2)
    with pytest.raises(IndexError, match="index 3 is out of range"):
        m[3] = nn.ReLU()
    with pytest.raises(TypeError):
        m[0] = 5
    del m[1]
    assert list(m._modules) == ["0", "1"] and m[0] is first and isinstance(m[1], nn.Linear)
    assert len(list(m.parameters())) == 4
    m.append(nn.ReLU())
    del m[0:2]
    assert list(m._modules) == ["0"] and isinstance(m[0], nn.ReLU)
    with pytest.raises(IndexError):
        del m[1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_layer_swapped_or_deleted_between_calls_traces_again(backend):
    m = _mlp()

    def step(x):
        return m(x).detach()

    f = tracer.function(step, backend=backend)
    for change in (None, lambda: m.__setitem__(1, nn.Tanh()),
                   lambda: m.__delitem__(1), lambda: m.__setitem__(-1, nn.Linear(8, 5))):
        if change is not None:
            change()
        np.testing.assert_allclose(f(_x()).numpy(), step(_x()).numpy(), rtol=1e-5, atol=1e-6)
    assert f.trace_count == 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_submodule_swapped_under_the_same_name_traces_again(backend):
    # Found here: `model.act = nn.Tanh()` (or `layers[1] = ...` of a ModuleList) between
    # calls kept running the old layer compiled: which module sits under a name was not
    # guarded, only the names.
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)
            self.act = nn.ReLU()
            self.extra = nn.ModuleList([nn.Identity(), nn.ReLU()])

        def forward(self, x):
            x = self.act(self.fc(x))
            for layer in self.extra:
                x = layer(x)
            return x

    eager.manual_seed(0)
    net = Net()

    def step(x):
        return net(x).detach()

    f = tracer.function(step, backend=backend)
    for change in (None, lambda: setattr(net, "act", nn.Tanh()),
                   lambda: net.extra.__setitem__(1, nn.Sigmoid())):
        if change is not None:
            change()
        np.testing.assert_allclose(f(_x()).numpy(), step(_x()).numpy(), rtol=1e-5, atol=1e-6)
    assert f.trace_count == 3


# ------------------------------------------------------------- Embedding(max_norm)

def _renormed(w, rows, max_norm):
    # PyTorch's embedding_renorm_, in numpy: each row looked up, once
    w = w.copy()
    for r in np.unique(rows):
        norm = np.linalg.norm(w[r].astype(np.float64))
        if norm > max_norm:
            w[r] *= max_norm / (norm + 1e-7)
    return w


def test_embedding_max_norm_renormalizes_the_rows_looked_up():
    eager.manual_seed(0)
    emb = nn.Embedding(5, 3, max_norm=1.0)
    w0 = emb.weight.detach().numpy().copy()
    rows = np.array([[0, 2], [2, 4]])
    out = emb(eager.tensor(rows))
    expected = _renormed(w0, rows, 1.0)
    np.testing.assert_allclose(emb.weight.detach().numpy(), expected, rtol=1e-5)
    np.testing.assert_allclose(out.detach().numpy(), expected[rows], rtol=1e-5)
    assert np.all(np.linalg.norm(out.detach().numpy(), axis=-1) <= 1.0 + 1e-5)
    np.testing.assert_array_equal(emb.weight.detach().numpy()[[1, 3]], w0[[1, 3]])
    out.sum().backward()
    assert emb.weight.grad is not None and "max_norm=1.0" in repr(emb)


@pytest.mark.parametrize("backend", BACKENDS)
def test_embedding_max_norm_in_a_training_step_as_eagerly(backend):
    rows = [np.array([0, 2, 2]), np.array([4, 1, 0])]
    seen = {}
    for mode in ("eager", backend):
        eager.manual_seed(0)
        emb = nn.Embedding(5, 3, max_norm=1.5)
        opt = eager.optim.SGD(emb.parameters(), lr=0.5)

        def step(idx):
            opt.zero_grad()
            loss = (emb(idx) * 3.0).sum()
            loss.backward()
            opt.step()
            return loss.detach()

        f = step if mode == "eager" else tracer.function(step, backend=mode)
        seen[mode] = [(f(eager.tensor(r)).numpy(), emb.weight.detach().numpy().copy())
                      for r in rows]
    for (e_loss, e_w), (c_loss, c_w) in zip(seen["eager"], seen[backend]):
        np.testing.assert_allclose(c_loss, e_loss, rtol=1e-5)
        np.testing.assert_allclose(c_w, e_w, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------- one_hot

def test_one_hot_out_of_range_raises_as_pytorch():
    np.testing.assert_array_equal(F.one_hot(eager.tensor(np.array([0, 2])), 3).numpy(),
                                  np.eye(3, dtype=np.int64)[[0, 2]])
    np.testing.assert_array_equal(F.one_hot(eager.tensor(np.array([1, 3]))).numpy(),
                                  np.eye(4, dtype=np.int64)[[1, 3]])
    with pytest.raises(RuntimeError, match="smaller than num_classes"):
        F.one_hot(eager.tensor(np.array([0, 3])), 3)
    with pytest.raises(RuntimeError, match="non-negative"):
        F.one_hot(eager.tensor(np.array([0, -1])), 3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_hot_of_a_traced_class_out_of_range_raises_with_eagers_state(backend):
    # Found here: a class out of range gave a row of zeros, eagerly and compiled.
    eager.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 3))

    def step(x, y):
        return (model(x) * F.one_hot(y, 3)).sum().detach()

    f = tracer.function(step, backend=backend)
    good = eager.tensor(np.array([0, 1, 2, 0, 1, 2]))
    f(_x(), good)
    stats = model[1].running_mean.numpy().copy()
    for bad in (np.array([0, 1, 3, 0, 1, 2]), np.array([0, -1, 2, 0, 1, 2])):
        with pytest.raises(RuntimeError, match="Class values"):
            f(_x(), eager.tensor(bad))
    # (eager's order: BatchNorm counted the two failing batches before one_hot raised)
    with pytest.raises(RuntimeError):
        step(_x(), eager.tensor(bad))
    assert model[1].num_batches_tracked.item() == 4
    assert not np.array_equal(stats, model[1].running_mean.numpy())


# ------------------------------------------------------------- opt.step(closure)

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("make", [lambda p: eager.optim.SGD(p, lr=0.1, momentum=0.5),
                                  lambda p: eager.optim.Adam(p, lr=0.01)], ids=["SGD", "Adam"])
def test_a_step_with_a_closure_as_eagerly(make, backend):
    # Found here: opt.step(closure) ran the closure under step()'s no_grad, so its
    # backward() raised; PyTorch runs it with gradients on and returns its loss.
    seen = {}
    for mode in ("eager", backend):
        model = _mlp()
        opt = make(model.parameters())

        def step(x, y):
            def closure():
                opt.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                return loss
            return opt.step(closure).detach()

        f = step if mode == "eager" else tracer.function(step, backend=mode)
        y = eager.tensor(np.array([0, 1, 2, 0, 1, 2]))
        seen[mode] = [(f(_x(k), y).numpy(), model[0].weight.detach().numpy().copy())
                      for k in range(2)]
    for (e_loss, e_w), (c_loss, c_w) in zip(seen["eager"], seen[backend]):
        np.testing.assert_allclose(c_loss, e_loss, rtol=1e-5)
        np.testing.assert_allclose(c_w, e_w, rtol=1e-5, atol=1e-6)
