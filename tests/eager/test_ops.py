"""Every registry op and composite, forward, against an independent reference (see opinfo.py);
plus PyTorch's type promotion rules."""
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

import eager

# NaN/inf samples are deliberate; numpy's "invalid value" warnings are expected (eager's own
# filter for them is dropped when pytest restores the warning filters after collection).
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
from eager import dispatch
from eager.protocol import TraceProtocol
from opinfo import OPINFOS, TOLERANCES, forward_cases, to_call_arg, to_ref_arg


def sample_rng(*parts) -> np.random.Generator:
    """A generator seeded by the test's identity, so each case is reproducible on its own."""
    return np.random.default_rng(zlib.crc32("/".join(str(p) for p in parts).encode()))


def test_every_registry_op_has_an_opinfo():
    covered = {info.op for info in OPINFOS}
    # (cond and while_loop, registered by tracer.control, are tested in tests/tracer)
    missing = sorted(n for n, op in eager.ops.OPS.items() if not op.control and n not in covered)
    assert not missing, (f"registry ops without an OpInfo entry in tests/eager/opinfo.py: "
                         f"{missing}; add one (call, samples, numpy reference)")


def test_opinfo_entries_name_registry_ops():
    for info in OPINFOS:
        assert info.op is None or info.op in eager.ops.OPS, info
        assert info.ref is not None or info.check is not None, info


class _Recorder(TraceProtocol):
    """A trace protocol that notes which registry ops ran (the tracer's switch, used read-only)."""

    def __init__(self):
        self.seen = set()

    def apply(self, op, datas, params):
        self.seen.add(op.name)
        return dispatch.eager_compute(op, datas, params)

    def __enter__(self):
        self._prev = dispatch.set_protocol(self)
        return self

    def __exit__(self, *exc):
        dispatch.set_protocol(self._prev)


def assert_matches(out, expected, info, sample):
    where = f"{info.name} on {sample!r}"
    if isinstance(expected, tuple):
        assert isinstance(out, tuple) and len(out) == len(expected), where
        for o, e in zip(out, expected):
            assert_matches(o, e, info, sample)
        return
    assert isinstance(out, eager.Tensor), f"{where}: got {type(out).__name__}"
    assert out.dtype == expected.dtype, f"{where}: dtype {out.dtype}, expected {expected.dtype}"
    assert out.shape == expected.shape, f"{where}: shape {out.shape}, expected {expected.shape}"
    if expected.dtype.kind == "f":
        rtol, atol = info.tol.get(expected.dtype, TOLERANCES[expected.dtype])
        np.testing.assert_allclose(out.numpy(), expected, rtol=rtol, atol=atol, equal_nan=True,
                                   err_msg=where)
    else:
        np.testing.assert_array_equal(out.numpy(), expected, err_msg=where)


def run_sample(info, sample):
    args = [to_call_arg(a) for a in sample.args]
    kwargs = {k: to_call_arg(v) for k, v in sample.kwargs.items()}
    return info.call(*args, **kwargs)


@pytest.mark.parametrize("info,dtype", forward_cases(),
                         ids=[f"{i.name}-{d}" for i, d in forward_cases()])
def test_forward_matches_reference(info, dtype):
    samples = info.samples(sample_rng(info.name, dtype), dtype)
    assert samples
    with _Recorder() as rec:
        for sample in samples:
            before = [a.copy() for a in sample.args if isinstance(a, np.ndarray)]
            out = run_sample(info, sample)
            after = [a for a in sample.args if isinstance(a, np.ndarray)]
            for b, a in zip(before, after):  # inputs are copied into tensors, never written
                np.testing.assert_array_equal(a, b)
            if info.check is not None:
                info.check(out, sample)
                continue
            expected = info.ref(*[to_ref_arg(a) for a in sample.args],
                                **{k: to_ref_arg(v) for k, v in sample.kwargs.items()})
            assert_matches(out, expected, info, sample)
    if info.op is not None:
        assert info.op in rec.seen, f"{info.name} never ran registry op {info.op}: {rec.seen}"


def test_special_values_are_sampled_for_elementwise_ops():
    for info in OPINFOS:
        if info.op and eager.ops.OPS[info.op].category == "elementwise" and \
                eager.ops.OPS[info.op].nin in (1, 2) and info.op not in ("cast",) \
                and info.name not in ("add_alpha", "sigmoid_large") \
                and np.dtype(np.float64) in info.dtypes:  # (integer-only ops: no NaN/inf)
            samples = info.samples(sample_rng(info.name), np.dtype(np.float64))
            assert any(s.special for s in samples), info.name


# --------------------------------------------------------------------------------------
# random ops: reproducible under manual_seed

@pytest.mark.parametrize("make", [lambda: eager.rand(3, 4), lambda: eager.randn(5),
                                  lambda: eager.randint(0, 7, (6,)),
                                  lambda: eager.nn.functional.dropout(eager.ones(8), 0.5)])
def test_random_ops_repeat_after_manual_seed(make):
    eager.manual_seed(123)
    a = make().numpy().copy()
    b = make().numpy().copy()
    eager.manual_seed(123)
    c = make().numpy()
    np.testing.assert_array_equal(a, c)
    assert not np.array_equal(a, b) or a.size < 2


def test_dropout_training_scales_the_kept_values():
    eager.manual_seed(0)
    x = eager.ones(1000)
    y = eager.nn.functional.dropout(x, 0.25, training=True).numpy()
    kept = y != 0
    np.testing.assert_allclose(y[kept], 1 / 0.75, rtol=1e-6)
    assert 0.65 < kept.mean() < 0.85


# --------------------------------------------------------------------------------------
# type promotion (PyTorch's rules)

f32, f64, i32, i64, b8 = eager.float32, eager.float64, eager.int32, eager.int64, eager.bool_


def t(values, dtype):
    return eager.tensor(np.asarray(values, dtype=dtype))


@pytest.mark.parametrize("a,b,expected", [
    (t([1.0], f32), 2.5, f32),                      # python float with float32 stays float32
    (2.5, t([1.0], f32), f32),
    (t([1.0], f64), 2.5, f64),
    (t([1], i64), 2.5, f32),                        # int tensor + python float -> float32
    (t([1], i32), 2.5, f32),
    (t([1], i32), 2, i32),                          # python int with int32 stays int32
    (t([True], b8), 2, i64),
    (t([True], b8), 1.5, f32),
    (t([1], i64), t([1.0], f32), f32),              # int64 + float32 -> float32
    (t([1.0], f32), t([1.0], f64), f64),            # float32 + float64 -> float64
    (t([1], i32), t([1], i64), i64),
    (t([True], b8), t([1], i32), i32),
    (t(1.0, f64), t([1.0], f32), f32),              # 0-d doesn't upcast within a category
    (t([1.0], f32), t(1.0, f64), f32),
    (t(1, i64), t([1], i32), i32),
    (t(1.0, f32), t([1], i64), f32),                # ... but a higher category wins
    (t(1.0, f64), t([1], i64), f64),
    (t(1.0, f64), t(1.0, f32), f64),                # two 0-d tensors: ordinary promotion
])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "maximum"])
def test_binary_promotion(a, b, expected, op):
    if op == "sub" and expected == b8:
        pytest.skip("bool subtraction is an error")
    out = getattr(eager, op)(a, b)
    assert out.dtype == expected
    da = a.numpy().astype(np.float64) if isinstance(a, eager.Tensor) else a
    db = b.numpy().astype(np.float64) if isinstance(b, eager.Tensor) else b
    ref = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum}[op]
    np.testing.assert_allclose(out.numpy().astype(np.float64), ref(da, db))


def test_promotion_for_operators_comparisons_and_true_division():
    x = t([1, 2, 3], i64)
    assert (x * 2).dtype == i64
    assert (x * 0.5).dtype == f32
    assert (x / 2).dtype == f32  # true division of ints gives the default float
    assert (x / t([2], i32)).dtype == f32
    assert (t([1.0], f64) / 2).dtype == f64
    assert (x > 1.5).dtype == b8
    np.testing.assert_array_equal((x > 1.5).numpy(), [False, True, True])
    assert (1.0 - t([1.0], f32)).dtype == f32
    assert (2 ** t([1.0, 2.0], f32)).dtype == f32
    assert eager.where(x > 1, x, 0.5).dtype == f32
    assert eager.where(x > 1, t([1.0], f64), t(0.0, f32)).dtype == f64
    assert eager.matmul(t([[1]], i64), t([[1.0]], f32)).dtype == f32
    assert eager.cat([t([1], i64), t([1.0], f32)]).dtype == f32


def test_float_functions_promote_ints_and_bools_to_float32():
    for fn in (eager.exp, eager.log, eager.sqrt, eager.tanh, eager.sigmoid, eager.log1p,
               eager.expm1):
        assert fn(t([1, 2], i64)).dtype == f32
        assert fn(t([1, 2], i32)).dtype == f32
        assert fn(t([True], b8)).dtype == f32
    np.testing.assert_allclose(eager.log(t([1, 4], i64)).numpy(), np.log([1, 4]), rtol=1e-6)


def test_reductions_dtypes():
    assert t([1, 2], i32).sum().dtype == i64
    assert t([True, True], b8).sum().item() == 2
    assert t([1.0], f32).sum().dtype == f32
    assert t([1.0, 2.0], f32).mean().dtype == f32
    assert t([1, 2], i32).sum(dtype=f64).dtype == f64
    assert eager.argmax(t([1.0, 3.0], f32)).dtype == i64


def test_creation_dtypes():
    assert eager.tensor([1.0]).dtype == f32
    assert eager.tensor(1.0).dtype == f32
    assert eager.tensor([1, 2]).dtype == i64
    assert eager.tensor([True]).dtype == b8
    assert eager.tensor(np.array([1.0])).dtype == f64
    assert eager.tensor(np.array([1.0], np.float32)).dtype == f32
    assert eager.tensor(np.float64(1.5)).dtype == f64  # numpy scalars keep their dtype too
    assert eager.tensor(np.int32(3)).dtype == i32
    assert eager.tensor([1, 2], dtype=f64).dtype == f64
    for dt in (np.float32, np.float64, np.int32, np.int64, np.bool_):
        assert eager.from_numpy(np.zeros(2, dt)).dtype == np.dtype(dt)
    a = np.zeros(3, np.float64)
    x = eager.from_numpy(a)
    a[0] = 5  # from_numpy shares memory
    assert x.numpy()[0] == 5
    assert eager.zeros(2).dtype == f32 and eager.ones(2, dtype=f64).dtype == f64
    assert eager.arange(3).dtype == i64 and eager.arange(0.0, 1.0, 0.5).dtype == f32
    assert eager.full((2,), 1.5).dtype == f32 and eager.full((2,), 7).dtype == i64
    assert eager.eye(2).dtype == f32
    assert eager.zeros_like(t([1], i32)).dtype == i32
    assert eager.rand(2).dtype == f32 and eager.randn(2, dtype=f64).dtype == f64
    assert eager.randint(0, 3, (2,)).dtype == i64


def test_to_and_dtype_methods():
    x = t([1.7, -1.7], f32)
    assert x.to(f64).dtype == f64 and x.double().dtype == f64
    np.testing.assert_array_equal(x.long().numpy(), [1, -1])
    assert x.int().dtype == i32 and x.bool().dtype == b8 and x.float() is x
    assert x.to(eager.float32) is x
    assert t([1], i64).type_as(x).dtype == f32


def test_tensor_basics():
    x = eager.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert x.shape == (2, 2) and x.ndim == 2 and x.numel() == 4 and len(x) == 2
    assert x.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert x.sum().item() == 10.0 and isinstance(x.sum().item(), float)
    assert [r.tolist() for r in x] == [[1.0, 2.0], [3.0, 4.0]]
    assert "tensor(" in repr(x)
    assert x.size() == (2, 2) and x.size(-1) == 2


# --------------------------------------------------------------------------------------
# random broadcasting shapes (a few hypothesis examples on top of the fixed table)

@settings(max_examples=40, deadline=None)
@given(shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, min_side=0,
                                            max_side=3),
       op=st.sampled_from(["add", "sub", "mul", "maximum", "lt"]),
       seed=st.integers(0, 2 ** 16))
def test_broadcasting_binary_ops_against_numpy(shapes, op, seed):
    rng = np.random.default_rng(seed)
    (sa, sb), result = shapes.input_shapes, shapes.result_shape
    a_np, b_np = rng.standard_normal(sa), rng.standard_normal(sb)
    a = eager.tensor(a_np, requires_grad=op != "lt")
    b = eager.tensor(b_np, requires_grad=op != "lt")
    out = getattr(eager, op)(a, b)
    ref = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum,
           "lt": np.less}[op](a_np, b_np)
    assert out.shape == result == ref.shape
    np.testing.assert_array_equal(out.detach().numpy(), ref)
    if op != "lt":
        out.sum().backward()
        assert a.grad.shape == sa and b.grad.shape == sb


def test_softmax_log_softmax_and_where_as_tensor_methods():
    """DESIGN lists softmax, log_softmax and where among the ops that are also methods;
    PyTorch's x.where(cond, y) is where(cond, x, y)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 5))
    x = eager.tensor(a, requires_grad=True)
    e = np.exp(a - a.max(axis=0, keepdims=True))
    np.testing.assert_allclose(x.softmax(0).detach().numpy(), e / e.sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(x.log_softmax(dim=-1).detach().numpy(),
                               a - a.max(1, keepdims=True)
                               - np.log(np.exp(a - a.max(1, keepdims=True)).sum(1, keepdims=True)),
                               rtol=1e-12)
    out = x.where(x > 0, -1.0)
    np.testing.assert_array_equal(out.detach().numpy(), np.where(a > 0, a, -1.0))
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), (a > 0).astype(np.float64))
