"""Activations and losses of issue 16 item 6, traced and compiled (Numba and interpreter)
against eager: every entry of tests/eager/opinfo_activations.py with its NaN/inf, zero-size
and 0-d samples, forward and gradients; class-index errors raised by compiled code; a small
classifier's training step (several of the new activations, CrossEntropyLoss with weight
and ignore_index, SGD) compiled against eager.

One traced function per entry evaluates all of that entry's samples, so each entry costs
one compile per backend and dtype."""
import os
import sys
import zlib

import numpy as np
import pytest

import eager
import eager.nn.functional as F
import tracer
from eager import nn, optim
from tracer import TensorSpec

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "eager"))
from opinfo import to_call_arg
from opinfo_activations import ENTRIES

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

BACKENDS = ["interpret", "numba"]
TOL = {eager.float32: (2e-5, 2e-6), eager.float64: (1e-10, 1e-12)}
CASES = [(info, dt, b) for info in ENTRIES for dt in (np.float32, np.float64)
         for b in BACKENDS if dt == np.float32 or b == "interpret"]


def _bundle(info, samples, requires_grad):
    """(one function of all the samples' tensors returning every sample's output, those
    tensors): the non-tensor arguments are baked in."""
    calls, tensors = [], []
    for s in samples:
        args = [to_call_arg(a) for a in s.args]
        kwargs = {k: to_call_arg(v) for k, v in s.kwargs.items()}
        pos = [i for i, a in enumerate(args) if isinstance(a, eager.Tensor)]
        keys = [k for k, v in kwargs.items() if isinstance(v, eager.Tensor)]
        calls.append((args, kwargs, pos, keys, len(tensors)))
        tensors += [args[i] for i in pos] + [kwargs[k] for k in keys]
    for t in tensors:
        if requires_grad and t.dtype.kind == "f":
            t.requires_grad_(True)

    def run(*ts):
        outs = []
        for args, kwargs, pos, keys, start in calls:
            a, kw, j = list(args), dict(kwargs), start
            for i in pos:
                a[i], j = ts[j], j + 1
            for k in keys:
                kw[k], j = ts[j], j + 1
            outs.append(info.call(*a, **kw))
        return tuple(outs)

    run.__name__ = info.name
    return run, tensors


def _numba_subset(samples, most=4):
    """Numba compiles cost ~0.3 s a kernel: its samples are the NaN/inf ones, a few keyword
    variants and one zero-size sample (the interpreter runs them all)."""
    chosen, variants, zero_size = [], set(), None
    for s in samples:
        first = s.args[0]
        key = repr(sorted((k, v) for k, v in s.kwargs.items() if not isinstance(v, np.ndarray)))
        if first.size == 0:
            zero_size = zero_size or s
        elif s.special or (first.ndim >= 1 and key not in variants and len(chosen) < most):
            variants.add(key)
            chosen.append(s)
    return chosen + ([zero_size] if zero_size else [])


def _assert_close(got, want, dtype, where):
    rtol, atol = TOL[dtype]
    assert (got.dtype, got.shape) == (want.dtype, want.shape), where
    scale = 1.0 if got.ndim else max(1.0, abs(float(np.nan_to_num(want.numpy(), posinf=0,
                                                                    neginf=0))))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=rtol, atol=atol * scale,
                               equal_nan=True, err_msg=where)


@pytest.mark.parametrize("info,dtype,backend", CASES,
                         ids=[f"{i.name}-{np.dtype(d)}-{b}" for i, d, b in CASES])
def test_compiled_matches_eager_forward_and_gradients(info, dtype, backend):
    dtype = np.dtype(dtype)
    samples = info.samples(np.random.default_rng(zlib.crc32(info.name.encode())), dtype)
    if backend == "numba":
        samples = _numba_subset(samples)
    run, tensors = _bundle(info, samples, requires_grad=True)
    compiled = tracer.function(run, backend=backend)
    got = compiled(*tensors)
    grads_got = _backward(got, tensors)
    want = run(*tensors)
    grads_want = _backward(want, tensors)
    edt = eager.float32 if dtype == np.float32 else eager.float64
    for s, g, w in zip(samples, got, want):
        _assert_close(g.detach(), w.detach(), edt, f"{info.name} on {s!r} ({backend})")
    for t, g, w in zip(tensors, grads_got, grads_want):
        assert (g is None) == (w is None), info.name
        if g is not None:
            _assert_close(g, w, edt, f"{info.name}: gradient of a {tuple(t.shape)} input")
    assert compiled.trace_count == 1


def _backward(outs, tensors):
    """Gradients of sum_i <out_i, c_i> (fixed cotangents), fresh for each call."""
    for t in tensors:
        t.grad = None
    rng = np.random.default_rng(7)
    total = None
    for o in outs:
        if o.requires_grad and o.numel():
            c = eager.tensor(rng.standard_normal(o.shape).astype(o.detach().numpy().dtype))
            term = (o * c).sum()
            total = term if total is None else total + term
    if total is not None:
        total.backward()
    return [None if t.grad is None else t.grad.detach() for t in tensors]


# --------------------------------------------------------------------------------------
# class indices: checked when the compiled program runs

@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_class_losses_raise_index_error_for_labels_out_of_range(backend):
    w = eager.tensor([1.0, 2.0, 0.5, 1.0])

    def losses(x, y, x3, y3):
        return (F.cross_entropy(x, y, weight=w), F.nll_loss(F.log_softmax(x, 1), y),
                F.cross_entropy(x3, y3, ignore_index=2, reduction="none"))

    f = tracer.function(losses, backend=backend)
    x, x3 = eager.randn(3, 4), eager.randn(2, 4, 3)
    good, good3 = eager.tensor([0, -100, 3]), eager.tensor([[0, 2, 1], [3, 3, 0]])
    for g, e in zip(f(x, good, x3, good3), losses(x, good, x3, good3)):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=2e-6, atol=1e-7)
    for bad, bad3 in (([0, 4, 1], good3), ([0, -1, 1], good3), (good, [[0, 2, 1], [3, -100, 0]]),
                      (good, [[0, 2, 1], [4, 3, 0]])):
        bad, bad3 = eager.tensor(bad), eager.tensor(bad3)
        with pytest.raises(IndexError):
            losses(x, bad, x3, bad3)
        with pytest.raises(IndexError, match="out of bounds"):
            f(x, bad, x3, bad3)
    assert f.trace_count == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_binary_cross_entropy_outside_0_1_raises_eager_and_compiled(backend):
    # PyTorch: RuntimeError "all elements of input should be between 0 and 1" (NaN too),
    # and the same for the target; never a NaN or garbage loss
    def loss(p, y):
        return F.binary_cross_entropy(p, y), F.binary_cross_entropy(p, y, reduction="none")

    f = tracer.function(loss, backend=backend)
    p, y = eager.tensor([0.0, 0.3, 1.0]), eager.tensor([0.0, 1.0, 0.5])
    for g, e in zip(f(p, y), loss(p, y)):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-6)
    line = f"test_activations_traced.py:{loss.__code__.co_firstlineno + 1}"
    for bad_p, bad_y, name in (([0.0, 1.5, 1.0], y, "input"), ([0.0, -1e-7, 1.0], y, "input"),
                               ([0.0, float("nan"), 1.0], y, "input"), (p, [0.0, 1.0, 1.1], "target"),
                               (p, [0.0, float("nan"), 0.5], "target")):
        bad_p, bad_y = eager.tensor(bad_p), eager.tensor(bad_y)
        for call in (loss, f):
            with pytest.raises(RuntimeError, match=f"all elements of {name} should be between "
                                                   f"0 and 1") as info:
                call(bad_p, bad_y)
            assert line in str(info.value)
    assert f.trace_count == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_weighted_cross_entropy_over_a_symbolic_batch(backend):
    # the symbolic batch picks through a one-hot mask: weight, ignore_index and the
    # weighted mean go through it too
    w = eager.tensor([1.0, 2.0, 0.5, 1.5])
    f = tracer.function(lambda x, y: F.cross_entropy(x, y, weight=w, label_smoothing=0.1),
                        backend=backend, input_signature=[TensorSpec(("b", 4), eager.float32),
                                                          TensorSpec(("b",), eager.int64)])
    for n, labels in ((3, [0, -100, 3]), (5, [1, 2, 3, -100, 0])):
        x = eager.randn(n, 4)
        y = eager.tensor(labels)
        np.testing.assert_allclose(f(x, y).numpy(),
                                   F.cross_entropy(x, y, weight=w, label_smoothing=0.1).numpy(),
                                   rtol=2e-6)
    with pytest.raises(IndexError):
        f(eager.randn(2, 4), eager.tensor([0, 4]))
    assert f.trace_count == 1


# --------------------------------------------------------------------------------------
# a training step

def _classifier(seed):
    eager.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.LeakyReLU(0.1, inplace=True), nn.Linear(16, 16),
                         nn.ReLU6(inplace=True), nn.Hardswish(),
                         nn.Linear(16, 16), nn.ELU(), nn.Mish(), nn.Linear(16, 16),
                         nn.Softplus(beta=2.0), nn.Hardtanh(-2.0, 2.0), nn.Linear(16, 8),
                         nn.GLU(), nn.Linear(4, 4), nn.LogSoftmax(1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_training_step_with_the_new_activations_compiles_to_eagers_numbers(backend):
    def setup():
        model = _classifier(11)
        loss_fn = nn.CrossEntropyLoss(weight=eager.tensor([1.0, 2.0, 0.5, 1.5]),
                                      ignore_index=-100, label_smoothing=0.05)
        opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        def step(x, y):
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            return loss
        return model, opt, step

    rng = np.random.default_rng(3)
    batches = [(eager.tensor(rng.standard_normal((8, 6)).astype(np.float32)),
                eager.tensor(np.where(rng.random(8) < 0.25, -100, rng.integers(0, 4, 8))))
               for _ in range(3)]
    eager_model, eager_opt, eager_step = setup()
    model, opt, step = setup()
    compiled = tracer.function(step, backend=backend)
    for x, y in batches:
        want = eager_step(x, y).item()
        got = compiled(x, y).item()
        assert got == pytest.approx(want, rel=2e-5, abs=1e-6)
    for (name, p), q in zip(model.named_parameters(), eager_model.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=2e-5,
                                   atol=2e-6, err_msg=name)
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=2e-4, atol=2e-6,
                                   err_msg=name)
        momentum = opt.state[p]["momentum_buffer"]
        np.testing.assert_allclose(momentum.numpy(),
                                   eager_opt.state[q]["momentum_buffer"].numpy(), rtol=2e-4,
                                   atol=2e-6, err_msg=name)
    assert compiled.trace_count == 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_tiny_results_keep_their_relative_accuracy(backend, dtype):
    # log1p/expm1 inside the kernels (codegen.vmath), not log(1 + x) / exp(x) - 1
    from test_activations_losses import TINY, TINY_REFS

    def run(*xs):
        return tuple(fn(x) for (fn, _), x in zip(TINY, xs))

    xs = [eager.tensor(np.asarray(v, dtype)) for _, v in TINY]
    outs = tracer.function(run, backend=backend)(*xs)
    for (fn, v), ref, out in zip(TINY, TINY_REFS, outs):
        np.testing.assert_allclose(out.numpy(), ref(np.asarray(v, dtype).astype(np.float64)),
                                   rtol=2e-5 if dtype == np.float32 else 1e-12, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_activations_and_batchmean_over_a_symbolic_batch(backend):
    # one trace for every batch size: kl_div's 'batchmean' divides by the batch size
    # without asking for its value
    def fn(x):
        return (F.glu(x), F.normalize(x), F.softmin(x, 1), F.hardswish(x), F.logsigmoid(x),
                F.kl_div(x, x.sigmoid(), reduction="batchmean"),
                F.kl_div(x[:, 0], x[:, 1], reduction="batchmean"))

    f = tracer.function(fn, backend=backend, input_signature=[TensorSpec(("b", 6))])
    for n in (2, 5, 0):
        x = eager.randn(n, 6)
        for got, want in zip(f(x), fn(x)):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-6, atol=1e-7,
                                       equal_nan=True)
    assert f.trace_count == 1


def test_a_tensor_assigned_to_an_empty_weight_or_bias_slot_traces_again():
    # CrossEntropyLoss() registers weight=None as a buffer, Linear(bias=False) a None
    # parameter: the trace read None there, so a tensor assigned later must not be ignored
    loss = nn.CrossEntropyLoss()
    lin = nn.Linear(3, 4, bias=False)
    f = tracer.function(lambda x, y: loss(lin(x), y), backend="interpret")
    x, y = eager.randn(5, 3), eager.tensor([0, 1, 2, 3, 1])
    with eager.no_grad():
        assert f(x, y).item() == pytest.approx(loss(lin(x), y).item(), rel=1e-6)
        loss.weight = eager.tensor([1.0, 2.0, 3.0, 0.5])
        assert f(x, y).item() == pytest.approx(loss(lin(x), y).item(), rel=1e-6)
        lin.bias = nn.Parameter(eager.ones(4))
        assert f(x, y).item() == pytest.approx(loss(lin(x), y).item(), rel=1e-6)
        assert list(loss.state_dict()) == ["weight"]
    assert f.trace_count == 3
