"""Convolution, pooling, padding and resampling traced and compiled (both backends) against
eager: outputs, input and parameter gradients, odd sizes, strides, padding, dilation,
groups (incl. depthwise), non-contiguous inputs, and a small CNN trained for 30 steps.

Shapes are shared between tests so the Numba kernels compile once per backend."""
import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F
import eager.optim as optim
import tracer

BACKENDS = ["numba", "interpret"]


def _t(rng, *shape, grad=False):
    return eager.tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=grad)


def _close(got, want, rtol=1e-5, atol=1e-6, what=""):
    assert got.shape == want.shape and got.dtype == want.dtype, what
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=rtol, atol=atol, err_msg=what)


def _forward_and_grads(body, tensors, backend):
    """body(*tensors) -> output; loss = sum(out * w). Eager and compiled: (out, grads)."""
    def step(*ts):
        out = body(*ts)
        w = eager.tensor(np.linspace(-1, 1, int(np.prod(out.shape)), dtype=np.float32)
                         .reshape(out.shape))
        (out * w).sum().backward()
        return out.detach()

    results = []
    for run in (step, tracer.function(step, backend=backend)):
        ts = [eager.tensor(t.numpy(), requires_grad=True) for t in tensors]
        out = run(*ts)
        results.append((out, [t.grad for t in ts]))
    return results


CONV_CASES = [
    # (x shape, weight shape, kwargs)
    ((2, 3, 9, 7), (4, 3, 3, 3), dict(stride=2, padding=1)),
    ((1, 4, 8, 6), (4, 2, 2, 3), dict(padding="same", dilation=(2, 1), groups=2)),
    ((2, 3, 6, 5), (3, 1, 3, 3), dict(padding=(0, 1), groups=3)),          # depthwise
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", range(len(CONV_CASES)))
def test_conv2d_compiled_matches_eager(backend, case):
    xs, ws, kw = CONV_CASES[case]
    rng = np.random.default_rng(case)
    x, w, b = _t(rng, *xs), _t(rng, *ws), _t(rng, ws[0])
    (want, gw), (got, gg) = _forward_and_grads(lambda x, w, b: F.relu(F.conv2d(x, w, b, **kw)),
                                               [x, w, b], backend)
    _close(got, want)
    for a, e in zip(gg, gw):
        _close(a, e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_conv_on_a_non_contiguous_input(backend):
    rng = np.random.default_rng(3)
    base = _t(rng, 2, 9, 7, 3)
    w = _t(rng, 4, 3, 3, 3)

    def body(base, w):
        x = base.permute(0, 3, 1, 2)[:, :, ::2, 1:]     # (2, 3, 5, 6), strided view
        return F.conv2d(x, w, padding=1)

    (want, gw), (got, gg) = _forward_and_grads(body, [base, w], backend)
    _close(got, want)
    for a, e in zip(gg, gw):
        _close(a, e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_conv_transpose_and_conv1d_compiled(backend):
    rng = np.random.default_rng(4)
    x, w, b = _t(rng, 2, 4, 3, 5), _t(rng, 4, 3, 3, 2), _t(rng, 6)
    x1, w1 = _t(rng, 2, 3, 11), _t(rng, 5, 3, 4)

    def body(x, w, b, x1, w1):
        y = F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1, groups=2)
        z = F.conv1d(x1, w1, stride=2, padding=2, dilation=2)
        return y.sum((2, 3)) @ eager.ones(6, 1) + z.mean()

    (want, gw), (got, gg) = _forward_and_grads(body, [x, w, b, x1, w1], backend)
    _close(got, want, rtol=1e-5, atol=1e-5)
    for a, e in zip(gg, gw):
        _close(a, e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_pooling_compiled_matches_eager(backend):
    rng = np.random.default_rng(5)
    x = _t(rng, 2, 3, 9, 7)

    def body(x):
        a, idx = F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True, return_indices=True)
        b = F.avg_pool2d(x, (2, 3), stride=(2, 1), padding=(1, 0), count_include_pad=False)
        c = F.adaptive_avg_pool2d(x, (4, 3)) + F.adaptive_max_pool2d(x, (4, 3))
        u = F.max_unpool2d(a, idx, 3, stride=2, padding=1, output_size=(9, 7))
        return (a.sum((2, 3)) + b.sum((2, 3)) + c.sum((2, 3)) + (u * x).sum((2, 3))
                + idx.float().sum((2, 3)) * 1e-3)

    (want, gw), (got, gg) = _forward_and_grads(body, [x], backend)
    _close(got, want, rtol=1e-5, atol=1e-5)
    _close(gg[0], gw[0], rtol=1e-4, atol=1e-5)


def test_max_pool_gradient_goes_to_the_first_maximum():
    x = eager.tensor([[[[1.0, 3.0, 3.0, 0.0]]]], requires_grad=True)
    F.max_pool2d(x, (1, 4)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[[[0.0, 1.0, 0.0, 0.0]]]])
    compiled = tracer.function(lambda t: F.max_pool2d(t, (1, 4)), backend="numba")
    y = eager.tensor(x.detach().numpy(), requires_grad=True)
    compiled(y).sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), [[[[0.0, 1.0, 0.0, 0.0]]]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_pool_nan_windows_and_unpool_duplicates_compiled(backend):
    # PyTorch's picks (the last NaN of a window, else the first maximum; max_unpool2d
    # writing, not adding, at a repeated index), compiled as eagerly.
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "eager"))
    import opinfo  # noqa: F401 - first: opinfo_conv imports it, and it imports opinfo_conv
    from opinfo_conv import max_pool_nan_cases

    pools = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
    for x, k, values, index in max_pool_nan_cases():
        pool = pools[x.ndim - 2]
        f = tracer.function(lambda t: pool(t, k, return_indices=True), backend=backend)
        got, idx = f(eager.tensor(x))
        np.testing.assert_array_equal(got.numpy(), values)
        np.testing.assert_array_equal(idx.numpy(), index)
    unpool = tracer.function(lambda v, i: F.max_unpool2d(v, i, 2), backend=backend)
    v = eager.tensor([[[[1.0, 2.0], [3.0, 4.0]]]])
    i = eager.tensor(np.array([[[[0, 0], [5, 5]]]]))
    _close(unpool(v, i), F.max_unpool2d(v, i, 2))
    assert unpool(v, i).numpy()[0, 0, 0, 0] == 2.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_pad_interpolate_unfold_compiled(backend):
    rng = np.random.default_rng(6)
    x = _t(rng, 1, 2, 4, 5)

    def body(x):
        parts = [F.pad(x, (2, 1, 1, 3), mode=m).sum((2, 3)) for m in
                 ("reflect", "replicate", "circular")]
        parts.append(F.pad(x, (1, 1, -1, 2), value=0.5).sum((2, 3)))
        parts.append(F.interpolate(x, size=(7, 3)).sum((2, 3)))
        parts.append(F.interpolate(x, scale_factor=2, mode="bilinear").sum((2, 3)))
        parts.append(F.interpolate(x, size=(3, 8), mode="bilinear",
                                   align_corners=True).sum((2, 3)))
        cols = F.unfold(x, (2, 3), padding=1, stride=(1, 2))
        parts.append(F.fold(cols * 2.0, (4, 5), (2, 3), padding=1, stride=(1, 2)).sum((2, 3)))
        return eager.stack(parts, 0)

    (want, gw), (got, gg) = _forward_and_grads(body, [x], backend)
    _close(got, want, rtol=1e-5, atol=1e-5)
    _close(gg[0], gw[0], rtol=1e-4, atol=1e-5)


class LeNet(nn.Module):
    """The W8 benchmark's network at a smaller batch."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 6, 5, padding=2)
        self.c2 = nn.Conv2d(6, 16, 5)
        self.f1, self.f2, self.f3 = nn.Linear(400, 120), nn.Linear(120, 84), nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        x = x.flatten(1)
        return self.f3(F.relu(self.f2(F.relu(self.f1(x)))))


def _lenet_losses(compiled: bool, steps=30, batch=8):
    eager.manual_seed(0)
    model = LeNet()
    opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((steps, batch, 1, 28, 28)).astype(np.float32)
    ys = rng.integers(0, 10, (steps, batch))

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    run = tracer.function(step) if compiled else step
    losses = [float(run(eager.tensor(xs[i]), eager.tensor(ys[i])).item()) for i in range(steps)]
    return losses, model


def test_lenet_trains_the_same_compiled_as_eagerly():
    want, m_e = _lenet_losses(False)
    got, m_c = _lenet_losses(True)
    np.testing.assert_allclose(got, want, rtol=1e-4)
    assert want[-1] < want[0]
    for (name, a), b in zip(m_e.named_parameters(), m_c.parameters()):
        np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=1e-3,
                                   atol=1e-5, err_msg=name)


def test_conv_modules_initialize_and_map_state_dicts_like_pytorch():
    eager.manual_seed(1)
    conv = nn.Conv2d(4, 6, (3, 2), groups=2)
    assert conv.weight.shape == (6, 2, 3, 2) and conv.bias.shape == (6,)
    bound = 1 / np.sqrt(2 * 3 * 2)   # kaiming_uniform(a=sqrt(5)) is U(-1/sqrt(fan_in), ...)
    assert np.abs(conv.weight.detach().numpy()).max() <= bound
    assert np.abs(conv.bias.detach().numpy()).max() <= bound
    convt = nn.ConvTranspose2d(4, 6, 3, groups=2)
    assert convt.weight.shape == (4, 3, 3, 3)
    assert sorted(conv.state_dict()) == ["bias", "weight"]
    x = eager.randn(1, 4, 5, 5)
    assert conv(x).shape == (1, 6, 3, 4) and convt(x).shape == (1, 6, 7, 7)
    assert nn.Conv1d(2, 3, 3)(eager.randn(2, 7)).shape == (3, 5)      # unbatched
    assert nn.Conv3d(1, 2, 2)(eager.randn(1, 1, 3, 3, 3)).shape == (1, 2, 2, 2, 2)
    assert nn.Upsample(scale_factor=2)(x).shape == (1, 4, 10, 10)
    assert nn.MaxPool2d(2)(x).shape == (1, 4, 2, 2)
    assert nn.ReflectionPad2d(1)(x).shape == (1, 4, 7, 7)
    assert nn.Conv2d(4, 4, 3, padding=1, padding_mode="circular")(x).shape == (1, 4, 5, 5)



# The direct rows (eager/ops_conv_direct.py, codegen/conv_kernels.py): 2-d, stride-1,
# ungrouped convolutions of at most DIRECT_MAX_IN_CHANNELS input channels. The first
# geometry is the op-info cases' (tests/eager/opinfo_conv.py): its kernels are shared.
DIRECT_CASES = [
    ((2, 2, 6, 7), (3, 2, 5, 5), dict(padding=2)),
    ((3, 1, 9, 11), (2, 1, 2, 3), dict(padding="same", dilation=(2, 1))),  # asymmetric pad
    ((2, 3, 6, 5), (4, 3, 3, 3), dict()),
]
DIRECT_OPS = {"conv_direct", "conv_direct_input_grad", "conv_direct_weight_grad"}


def _direct_step(kw):
    def step(x, w, b):
        y = F.relu(F.conv2d(x, w, b, **kw))
        (y * y).sum().backward()
        return y.detach()
    return step


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", range(len(DIRECT_CASES)))
def test_direct_conv_compiled_matches_eager(backend, case):
    xs, ws, kw = DIRECT_CASES[case]
    rng = np.random.default_rng(10 + case)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in (xs, ws, ws[:1])]
    step = _direct_step(kw)
    fn = tracer.function(step, backend=backend)
    results = []
    for run in (step, fn):
        ts = [eager.tensor(a, requires_grad=True) for a in arrays]
        results.append([run(*ts)] + [t.grad for t in ts])
    for got, want in zip(results[1], results[0]):
        _close(got, want, rtol=1e-5, atol=1e-5)
    cf = fn.get_concrete_function(*[eager.tensor(a, requires_grad=True) for a in arrays])
    assert DIRECT_OPS <= {e.op for e in cf.graph.eqns}
    assert "im2col" not in {e.op for e in cf.graph.eqns}
    if backend == "numba":  # each ran as its Numba step kernel
        for op in DIRECT_OPS:
            assert f"= {op}(" in str(cf) and f"by step_{op}" in str(cf), str(cf)


@pytest.mark.parametrize("backend", BACKENDS)
def test_direct_conv_with_nan_and_inf_matches_eager(backend):
    """NaN and inf in the input and the weight: the kernels refuse what they would multiply
    by the zeros between rows (the numpy rows run), so NaN lands where eager puts it."""
    xs, ws, kw = DIRECT_CASES[0]
    rng = np.random.default_rng(20)
    step = _direct_step(kw)
    fn = tracer.function(step, backend=backend)
    for where in ("x", "w"):
        arrays = [rng.standard_normal(s).astype(np.float32) for s in (xs, ws, ws[:1])]
        if where == "x":
            arrays[0][0, 1, 3, 6], arrays[0][1, 0, 0, 0] = np.inf, np.nan
        else:
            arrays[1][1, 0, 4, 2] = -np.inf
        results = []
        for run in (step, fn):
            ts = [eager.tensor(a, requires_grad=True) for a in arrays]
            results.append([run(*ts).numpy()] + [t.grad.numpy() for t in ts])
        for got, want in zip(results[1], results[0]):
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=where)
            np.testing.assert_array_equal(np.isinf(got), np.isinf(want), err_msg=where)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=where)
        assert not all(np.isfinite(r).all() for r in results[0][1:]), where


def test_direct_conv_rule_and_fallbacks():
    """Which convolutions take the direct rows: the rule of eager/nn/conv.py, the same
    eagerly and traced; stride 2, groups and more channels keep im2col + BLAS."""
    from eager.nn.conv import DIRECT_MAX_IN_CHANNELS, direct_conv

    assert direct_conv(2, 1, (5, 5), (1, 1), 1) and direct_conv(2, 3, (7, 7), (1, 1), 1)
    assert not direct_conv(2, DIRECT_MAX_IN_CHANNELS + 1, (5, 5), (1, 1), 1)
    assert not direct_conv(2, 1, (5, 5), (2, 2), 1) and not direct_conv(1, 1, (5,), (1,), 1)
    assert not direct_conv(2, 2, (3, 3), (1, 1), 2) and not direct_conv(2, 1, (8, 8), (1, 1), 1)
    rng = np.random.default_rng(21)
    x, w = _t(rng, 2, 1, 9, 7), _t(rng, 4, 1, 3, 3)
    for kw, op in ((dict(stride=2, padding=1), "im2col"), (dict(padding=1), "conv_direct")):
        fn = tracer.function(lambda x, w: F.conv2d(x, w, **kw), backend="interpret")
        assert op in {e.op for e in fn.get_concrete_function(x, w).graph.eqns}
        _close(fn(x, w), F.conv2d(x, w, **kw))


def _direct_kernel(make, geometry):
    from codegen import build
    return build.load_kernel(make(geometry).source, "test_conv_direct")[0]


def test_direct_conv_kernels_sum_in_an_order_independent_of_the_pieces():
    """The split runs [0, n) in pieces on however many threads there are: each output is
    summed in one order whatever the pieces, so results are bit for bit the same."""
    from codegen import conv_kernels as ck

    g = ck.Geometry(2, 2, 6, 7, 3, 5, 5, 1, 1, 2, 2, 2, 2, "float32")
    rng = np.random.default_rng(22)
    x = rng.standard_normal((2, 2, 6, 7)).astype(np.float32).ravel()
    w = rng.standard_normal((3, 2, 5, 5)).astype(np.float32).ravel()
    dy = rng.standard_normal((2, 3, 6, 7)).astype(np.float32).ravel()
    for make, a, b, size, n in ((ck.forward, x, w, dy.size, g.n),
                                (ck.input_grad, dy, w, x.size, g.n),
                                (ck.weight_grad, dy, x, w.size, g.o)):
        kernel = _direct_kernel(make, g)
        whole, pieces = np.full(size, np.nan, np.float32), np.full(size, np.nan, np.float32)
        assert kernel(a, b, whole, 0, n) == 0
        for lo in range(n):
            assert kernel(a, b, pieces, lo, lo + 1) == 0
        np.testing.assert_array_equal(pieces, whole, err_msg=make.__name__)
        assert not np.isnan(whole).any()
        _same_kernel_at_other_batches(ck, make, g, kernel, a, b, whole)


def _same_kernel_at_other_batches(ck, make, g, kernel, a, b, whole):
    """The kernels read the batch size at run time: the source at batch 1 and 3 is the one
    at batch 2 (one compiled kernel), and with sample 0 again as sample 2 the forward and
    the input gradient give each sample's values as before, the weight gradient (summed
    over samples in order) the batch-2 sums plus sample 0's, bit for bit."""
    import dataclasses

    for n in (1, 3):
        assert make(dataclasses.replace(g, n=n)).source == make(g).source, (make.__name__, n)
    per_a, per_b = a.size // g.n, b.size // g.n
    if make is ck.weight_grad:  # (a: dy, b: x, both per sample; the output: dw)
        a3, b3 = np.concatenate([a, a[:per_a]]), np.concatenate([b, b[:per_b]])
        single = np.full(whole.size, np.nan, np.float32)
        assert kernel(a[:per_a], b[:per_b], single, 0, g.o) == 0
        got = np.full(whole.size, np.nan, np.float32)
        assert kernel(a3, b3, got, 0, g.o) == 0
        np.testing.assert_array_equal(got, whole + single)
        return
    a3 = np.concatenate([a, a[:per_a]])  # (a: x or dy, per sample; b: the weight)
    got = np.full(whole.size // g.n * 3, np.nan, np.float32)
    assert kernel(a3, b, got, 0, 3) == 0
    per = whole.size // g.n
    np.testing.assert_array_equal(got, np.concatenate([whole, whole[:per]]),
                                  err_msg=make.__name__)


def test_direct_conv_kernels_vectorize():
    """The inner loops over a row compute vectors of taps with FMAs (the LLVM IR of the
    generated source compiled again without the cache, which shows no IR)."""
    import re

    from codegen import conv_kernels as ck

    g = ck.Geometry(2, 2, 6, 7, 3, 5, 5, 1, 1, 2, 2, 2, 2, "float32")
    for make in (ck.forward, ck.input_grad, ck.weight_grad):
        ns: dict = {}
        exec(compile(make(g).source.replace("cache=True", "cache=False"), "k", "exec"), ns)
        kernel = ns["kernel"]
        ir = kernel.inspect_llvm(kernel.signatures[0])
        vector_fma = re.search(r"@llvm\.fma\.v\d+f32|fmul contract <\d+ x float>", ir)
        assert vector_fma, f"{make.__name__}: no vector FMA"
