"""Issue 16 item 7: float16 and bfloat16 as storage types.

Every op computes half operands in float32 and rounds its result once to the half type (as
PyTorch's CPU kernels do): sums, means and matmul accumulate in float32. Compiled calls
give eager's results (both backends), outputs and gradients. bfloat16 is ml_dtypes'
numpy dtype; eager.save stores it as its uint16 bits."""
from __future__ import annotations

import io
import os
import sys

import ml_dtypes
import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F
import tracer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "eager"))
from opinfo import OPINFOS  # noqa: E402

HALVES = (eager.float16, eager.bfloat16)
BACKENDS = ("numba", "interpret")
IDS = ("f16", "bf16")


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.int16)


def _same_bits(got, want):
    got = got.detach() if hasattr(got, "detach") else got
    want = want.detach() if hasattr(want, "detach") else want
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype)
    g, w = got.numpy(), want.numpy()
    if g.dtype in (eager.float16, eager.bfloat16):
        g, w = _bits(g), _bits(w)
    np.testing.assert_array_equal(g, w)


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in units of the last place of two arrays of positive half values."""
    return np.abs(_bits(a).astype(np.int64) - _bits(b).astype(np.int64))


@pytest.mark.parametrize("dtype", HALVES, ids=IDS)
def test_sum_of_many_half_values_accumulates_in_float32(dtype):
    rng = np.random.default_rng(0)
    values = rng.uniform(0, 1, 100_000).astype(dtype)
    x = eager.tensor(values)
    exact = values.astype(np.float64)
    want_sum = np.array([exact.sum()]).astype(dtype)
    want_mean = np.array([exact.mean()]).astype(dtype)
    cols = exact.reshape(1000, 100).sum(0).astype(dtype)
    # numpy's column sums in the half type round after each of the 1000 additions (what
    # eager computed before): many ULPs off
    assert _ulps(values.reshape(1000, 100).sum(0), cols).max() > 8
    fns = [lambda t: (t.sum(), t.mean(), t.reshape(1000, 100).sum(0))]
    fns += [tracer.function(fns[0], backend=b) for b in BACKENDS]
    for f in fns:
        total, mean, col_sums = f(x)
        assert total.dtype == mean.dtype == col_sums.dtype == dtype
        assert _ulps(total.numpy().reshape(1), want_sum)[0] <= 1
        assert _ulps(mean.numpy().reshape(1), want_mean)[0] <= 1
        assert _ulps(col_sums.numpy(), cols).max() <= 1
    # matmul: a float32 product, rounded once
    a = rng.uniform(0, 1, (3, 4096)).astype(dtype)
    b = rng.uniform(0, 1, (4096, 2)).astype(dtype)
    want = (a.astype(np.float64) @ b.astype(np.float64)).astype(dtype)
    got = eager.tensor(a) @ eager.tensor(b)
    assert got.dtype == dtype and _ulps(got.numpy(), want).max() <= 1


def _composites(x, w):
    # (each a single op or a composite that computes in float32 and rounds once)
    return (F.softmax(x, -1), F.log_softmax(x, 0), F.layer_norm(x, (8,)), x.var(1),
            x.std(), x.mean(0), x @ w, x.sigmoid(), F.gelu(x), x.sum(0))


def _more(x, w):
    return _composites(x, w) + (x.exp().sum(1), F.cross_entropy(x, eager.tensor([1, 0, 7, 3])))


@pytest.mark.parametrize("dtype", HALVES, ids=IDS)
def test_each_op_and_composite_computes_in_float32_and_rounds_once(dtype):
    rng = np.random.default_rng(1)
    x32 = eager.tensor(rng.uniform(-3, 3, (4, 8)).astype(np.float32)).to(dtype).float()
    w32 = eager.tensor(rng.uniform(-1, 1, (8, 3)).astype(np.float32)).to(dtype).float()
    x, w = x32.to(dtype), w32.to(dtype)
    for got, want32 in zip(_composites(x, w), _composites(x32, w32)):
        if want32.dtype == eager.float32:
            want32 = want32.to(dtype)
        _same_bits(got, want32)
    for op in (eager.exp, eager.tanh, eager.erf, eager.log1p, eager.sqrt, eager.sin):
        _same_bits(op(x), op(x32).to(dtype))
    _same_bits(x * x - x / 3, (x32 * x32).to(dtype).float().sub(
        (x32 / 3).to(dtype).float()).to(dtype))  # each op rounds (no fusion in eager)


def _training(x, w, target):
    loss = F.cross_entropy(F.gelu(x @ w) * 2 - 1, target) + (x.exp() * w.sum()).mean()
    loss.backward()
    return loss


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", HALVES, ids=IDS)
def test_compiled_half_programs_match_eager_bit_for_bit(dtype, backend):
    rng = np.random.default_rng(2)

    def leaves():
        x = eager.tensor(rng.uniform(-2, 2, (4, 8)).astype(dtype), requires_grad=True)
        w = eager.tensor(rng.uniform(-1, 1, (8, 3)).astype(dtype), requires_grad=True)
        return x, w
    state = rng.bit_generator.state
    xe, we = leaves()
    rng.bit_generator.state = state
    xc, wc = leaves()
    target = eager.tensor([0, 2, 1, 1])
    f = tracer.function(_training, backend=backend)
    _same_bits(f(xc, wc, target), _training(xe, we, target))
    assert xc.grad.dtype == wc.grad.dtype == dtype
    _same_bits(xc.grad, xe.grad)
    _same_bits(wc.grad, we.grad)
    g = tracer.function(_more, backend=backend)
    with eager.no_grad():
        for got, want in zip(g(xc, wc), _more(xc, wc)):
            _same_bits(got, want)


_REPRESENTATIVE = ("add", "mul", "exp", "tanh", "sum", "matmul")


@pytest.mark.parametrize("dtype", HALVES, ids=IDS)
def test_op_info_compiled_cases_in_half_types(dtype):
    """The op-info table's compiled cases of a few representative ops, run in float16 and
    bfloat16 on both backends: bit-identical to eager (see the README's half-type rule)."""
    rng = np.random.default_rng(3)
    cases = [case for info in OPINFOS if info.name in _REPRESENTATIVE and info.compiled
             for case in info.compiled]
    cases += [c for info in OPINFOS if info.name in ("add", "mul", "exp", "tanh")
              and info.compiled is None for c in _derived(info)]
    assert {c.name for c in cases} >= {"sum", "matmul", "add", "exp"}
    for case in cases:
        arrays = case.inputs(rng, dtype, "main")
        args = [eager.tensor(a.astype(dtype)) if a.dtype.kind == "f" else eager.tensor(a)
                for a in arrays]
        with eager.no_grad():
            want = case.fn(*args)
            for backend in BACKENDS:
                got = tracer.function(case.fn, backend=backend)(*args)
                for g, w in zip(_flat(got), _flat(want)):
                    assert w.dtype in (dtype, eager.bool_, eager.int64), (case.name, w.dtype)
                    _same_bits(g, w)


def _derived(info):
    from opinfo import Case, shapes

    from eager.ops import OPS
    if OPS[info.op].nin == 1:
        return [Case(info.name, lambda a: info.call(a), shapes([(3, 5)]))]
    return [Case(info.name, lambda a, b: info.call(a, b), shapes([(2, 3, 4), (3, 1)]))]


def _flat(out):
    if isinstance(out, (tuple, list)):
        return [x for o in out for x in _flat(o)]
    return [out]


def test_bfloat16_storage_type_promotion_and_conversions():
    x = eager.tensor([1.5, 2.25, -3.0]).bfloat16()
    assert x.dtype == eager.bfloat16 == np.dtype(ml_dtypes.bfloat16)
    assert x.type() == "eager.BFloat16Tensor" and x.is_floating_point()
    assert x.type(eager.float32).dtype == eager.float32
    assert eager.tensor([1.0]).type("eager.BFloat16Tensor").dtype == eager.bfloat16
    assert eager.zeros(2, dtype="bfloat16").dtype == eager.bfloat16
    assert eager.randn(3, dtype=eager.bfloat16).dtype == eager.bfloat16
    assert (x + x.half()).dtype == eager.float32  # bfloat16 with float16 -> float32
    assert (x + eager.tensor([1])).dtype == eager.bfloat16
    assert (x + 1.5).dtype == eager.bfloat16
    assert (x + eager.tensor([1.0])).dtype == eager.float32
    assert (x.double() + x).dtype == eager.float64
    assert repr(x) == "tensor([ 1.5 ,  2.25, -3.  ], dtype=eager.bfloat16)"
    assert x.tolist() == [1.5, 2.25, -3.0] and x[1].item() == 2.25
    assert eager.tensor([1.0 + 2 ** -9]).bfloat16().item() == 1.0  # round to nearest even
    assert eager.tensor([np.nan]).bfloat16().isnan().item()


def test_bfloat16_save_load_round_trips_bits_without_pickle(tmp_path):
    lin = nn.Linear(3, 2).to(eager.bfloat16)
    extra = np.array([1.0, -0.0, np.inf, 3.14159], ml_dtypes.bfloat16)
    t = eager.tensor([0.1, np.nan, -2.5], dtype=eager.bfloat16, requires_grad=True)
    path = tmp_path / "ckpt.pt"
    eager.save({"model": lin.state_dict(), "extra": extra, "t": t}, path)
    back = eager.load(path)
    for k, v in lin.state_dict().items():
        _same_bits(back["model"][k], v)
    assert back["extra"].dtype == eager.bfloat16
    np.testing.assert_array_equal(_bits(back["extra"]), _bits(extra))
    _same_bits(back["t"], t)
    assert back["t"].requires_grad
    import zipfile

    with zipfile.ZipFile(path) as zf:
        assert not any(n.endswith(".pkl") for n in zf.namelist())
    buf = io.BytesIO()
    eager.save(t.detach(), buf)
    buf.seek(0)
    _same_bits(eager.load(buf), t)


@pytest.mark.parametrize("backend", [None, "numba"])
def test_bfloat16_mlp_trains_after_model_to_bfloat16(backend):
    eager.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 3))
    ref = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 3))
    model.to(eager.bfloat16)
    ref.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
    assert all(p.dtype == eager.bfloat16 for p in model.parameters())
    x = eager.randn(5, 6)
    target = eager.tensor([0, 2, 1, 1, 0])
    opt = eager.optim.SGD(model.parameters(), lr=0.1)

    def step(x, target):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), target)
        loss.backward()
        opt.step()
        return loss
    run = step if backend is None else tracer.function(step, backend=backend)
    loss = run(x.bfloat16(), target)
    want = F.cross_entropy(ref(x), target)
    assert loss.dtype == eager.bfloat16
    assert abs(loss.item() - want.item()) < 2e-2 * abs(want.item()) + 1e-2
    want.backward()
    for p, r in zip(model.parameters(), ref.parameters()):
        assert p.dtype == p.grad.dtype == eager.bfloat16
        np.testing.assert_allclose(p.grad.float().numpy(), r.grad.numpy(), rtol=5e-2,
                                   atol=2e-2)
    losses = [run(x.bfloat16(), target).item() for _ in range(5)]
    assert losses[-1] < loss.item()
