"""Issue 16 item 7: storage dtypes, PyTorch's promotion, conversions, view(dtype),
axis=/keepdims= aliases and __format__, in eager mode (compiled: tests/tracer/test_dtypes_traced.py).

The expected promotions are written from PyTorch's documentation (torch.promote_types,
torch.result_type and the "Type promotion" notes), as rules of this file, not read from
eager/dtypes.py."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import eager

INTS = ("uint8", "int8", "int16", "int32", "int64")
BARE_UNSIGNED = ("uint16", "uint32", "uint64")  # PyTorch's "barebones" unsigned types
FLOATS = ("float16", "bfloat16", "float32", "float64")
ALL = ("bool",) + INTS + BARE_UNSIGNED + FLOATS
BITS = {"bool": 1, "uint8": 8, "int8": 8, "int16": 16, "int32": 32, "int64": 64,
        "uint16": 16, "uint32": 32, "uint64": 64, "float16": 16, "bfloat16": 16, "float32": 32,
        "float64": 64}


def expected_promotion(a: str, b: str):
    """torch.promote_types(a, b) by the documented rules; None where PyTorch raises."""
    if a == b:
        return a
    if a == "bool" or b == "bool":
        other = b if a == "bool" else a
        return None if other in BARE_UNSIGNED else other
    if a in FLOATS or b in FLOATS:
        fa, fb = [x for x in (a, b) if x in FLOATS], [x for x in (a, b) if x not in FLOATS]
        if not fb:  # two floats: the wider; float16 with bfloat16: float32 (holds both)
            return "float32" if set(fa) == {"float16", "bfloat16"} else max(fa, key=BITS.get)
        return fa[0]  # an integer with a float: the float
    if a in BARE_UNSIGNED or b in BARE_UNSIGNED:
        return None  # "Promotion for uint16, uint32, uint64 types is not supported"
    if "uint8" in (a, b):  # uint8 with a signed type: a signed type holding both
        other = b if a == "uint8" else a
        return "int16" if other == "int8" else other
    return max((a, b), key=BITS.get)


def _t(dtype, values=(1, 2, 3)):
    return eager.tensor(np.array(values).astype(dtype))


@pytest.mark.parametrize("a", ALL)
def test_binary_arithmetic_promotes_as_torch_promote_types(a):
    for b in ALL:
        want = expected_promotion(a, b)
        x, y = _t(a), _t(b, (3, 1, 2))
        if want is None:
            with pytest.raises(TypeError, match="not supported"):
                x + y
            continue
        for op in (np.add, np.multiply):
            got = (x + y) if op is np.add else (x * y)
            assert got.dtype == np.dtype(want), (a, b)
            ref = op(x.numpy().astype(want), y.numpy().astype(want))
            assert np.array_equal(got.numpy(), ref), (a, b)


def test_pytorch_documentation_examples():
    f, d = eager.ones(1, dtype=eager.float), eager.ones(1, dtype=eager.double)
    i, lg = eager.ones(1, dtype=eager.int), eager.ones(1, dtype=eager.long)
    u, b = eager.ones(1, dtype=eager.uint8), eager.ones(1, dtype=eager.bool)
    long_zerodim = eager.tensor(1, dtype=eager.long)
    assert (i + 5).dtype == eager.int32
    assert (i + long_zerodim).dtype == eager.int32
    assert (lg + i).dtype == eager.int64
    assert (b + lg).dtype == eager.int64
    assert (b + u).dtype == eager.uint8
    assert (f + d).dtype == eager.float64
    assert (b + i).dtype == eager.int32
    assert eager.add(lg, f).dtype == eager.float32
    # torch.result_type examples
    assert (eager.tensor([1, 2], dtype=eager.int) + 1.0).dtype == eager.float32
    assert (eager.tensor([1, 2], dtype=eager.uint8) + eager.tensor(1)).dtype == eager.uint8


@pytest.mark.parametrize("dt", INTS + BARE_UNSIGNED + FLOATS)
def test_python_scalars_stay_in_the_tensor_category(dt):
    x = _t(dt)
    assert (x + 1).dtype == np.dtype(dt)
    assert (x * 2).dtype == np.dtype(dt)
    want = dt if dt in FLOATS else "float32"
    assert (x + 2.5).dtype == np.dtype(want)
    assert (x / 2).dtype == np.dtype(want)  # true division of integers: the default float
    assert np.allclose((x / 2).numpy().astype(np.float64), np.array([0.5, 1.0, 1.5]))


def test_bool_tensor_with_python_int_is_int64_and_scalars_wrap_into_small_ints():
    assert (eager.tensor([True, False]) + 1).dtype == eager.int64
    u = eager.tensor([1, 2, 250], dtype=eager.uint8)
    assert (u + 300).tolist() == [45, 46, 38]  # 300 wraps to 44 in uint8, then 250+44 wraps
    assert (u - 1).tolist() == [0, 1, 249]


def test_integer_overflow_wraps():
    assert (eager.tensor([127], dtype=eager.int8) + 1).tolist() == [-128]
    assert (eager.tensor([0], dtype=eager.uint8) - 1).tolist() == [255]
    assert (eager.tensor([2 ** 31 - 1], dtype=eager.int32) + 1).tolist() == [-2 ** 31]
    assert (eager.tensor([200], dtype=eager.uint8) * 2).tolist() == [144]


def test_aliases_are_the_dtypes():
    assert eager.half == eager.float16 and eager.double == eager.float64
    assert eager.float == eager.float32 and eager.int == eager.int32
    assert eager.long == eager.int64 and eager.short == eager.int16 and eager.bool == np.bool_
    for name in ALL:
        assert getattr(eager, name if name != "bool" else "bool_") == np.dtype(name)


@pytest.mark.parametrize("dt", ALL)
def test_creation_keeps_every_dtype(dt):
    d = np.dtype(dt)
    for t in (eager.zeros(2, 3, dtype=d), eager.ones(4, dtype=d), eager.tensor([1, 0], dtype=d),
              eager.tensor(np.ones(3, d)), eager.from_numpy(np.ones(2, d)),
              eager.full((2,), 1, dtype=d), eager.arange(3, dtype=d) if dt != "bool" else
              eager.tensor([True])):
        assert t.dtype == d
        assert t.numpy().dtype == d
    assert eager.tensor([1], dtype=d).item() == 1


@pytest.mark.parametrize("src,dst", list(itertools.product(ALL, ALL)))
def test_casts_both_ways_match_numpy(src, dst):
    vals = [0, 1, 3, 100] if src not in FLOATS else [-2.75, -0.5, 0.0, 1.9, 100.25]
    if src == "bool":
        vals = [True, False, True]
    if src in FLOATS and dst in INTS + BARE_UNSIGNED + ("bool",):
        vals = [v for v in vals if v >= 0 or dst not in ("uint8",) + BARE_UNSIGNED]
    x = eager.tensor(np.array(vals).astype(src))
    got = x.to(np.dtype(dst))
    assert got.dtype == np.dtype(dst)
    assert np.array_equal(got.numpy(), x.numpy().astype(dst))


def test_float_to_int_truncates_toward_zero_and_nan_gives_numpy_result():
    x = eager.tensor([-2.9, -0.5, 0.5, 2.9])
    for conv in ("long", "int", "short", "char"):
        assert getattr(x, conv)().tolist() == [-2, 0, 0, 2]
    assert eager.tensor([0.5, 1.7, 255.9]).byte().tolist() == [0, 1, 255]
    nan = eager.tensor([math.nan])
    with np.errstate(invalid="ignore"):
        assert nan.long().tolist() == np.array([math.nan]).astype(np.int64).tolist()


def test_conversion_methods_and_type():
    x = eager.tensor([1.5, -2.5])
    for meth, dt in (("half", "float16"), ("bfloat16", "bfloat16"), ("float", "float32"),
                     ("double", "float64"), ("long", "int64"), ("int", "int32"),
                     ("short", "int16"), ("byte", "uint8"), ("char", "int8"),
                     ("bool", "bool")):
        assert getattr(x, meth)().dtype == np.dtype(dt), meth
    names = {"float32": "FloatTensor", "float64": "DoubleTensor", "float16": "HalfTensor",
             "bfloat16": "BFloat16Tensor",
             "int64": "LongTensor", "int32": "IntTensor", "int16": "ShortTensor",
             "int8": "CharTensor", "uint8": "ByteTensor", "bool": "BoolTensor"}
    for dt, name in names.items():
        t = x.to(np.dtype(dt))
        assert t.type() == "eager." + name
        assert x.type("eager." + name).dtype == np.dtype(dt)
        assert x.type(np.dtype(dt)).dtype == np.dtype(dt)


def test_view_dtype_reinterprets_bits():
    x = eager.tensor([1.0, -2.0])
    assert x.view(eager.int32).tolist() == [0x3F800000, -0x40000000]
    assert x.view(eager.int16).shape == (4,)
    assert x.view(eager.uint8).shape == (8,)
    assert x.view(eager.float64).shape == (1,)
    assert eager.tensor([[1, 2], [3, 4]], dtype=eager.int32).view(eager.int64).shape == (2, 1)
    with pytest.raises(RuntimeError, match="divisible by 2"):
        eager.tensor([1.0, 2.0, 3.0]).view(eager.float64)
    with pytest.raises(RuntimeError, match="0-d"):
        eager.tensor(1.0).view(eager.float64)
    assert eager.tensor(1.0).view(eager.int32).item() == 0x3F800000
    assert x.view(2, 1).shape == (2, 1)  # the shape overload still works


def test_format():
    assert f"{eager.tensor(3.14159):.3f}" == "3.142"
    assert f"{eager.tensor(7):>4}" == "   7"
    t = eager.tensor([1.5])
    assert f"{t}" == str(t)
    with pytest.raises(TypeError):
        f"{t:.3f}"  # PyTorch formats only 0-d tensors with a spec


@pytest.mark.parametrize("dt", ("bool",) + INTS + BARE_UNSIGNED)
def test_integer_tensors_refuse_requires_grad(dt):
    with pytest.raises(RuntimeError, match="only floating point tensors can require gradients"):
        eager.tensor([1, 0], dtype=np.dtype(dt), requires_grad=True)
    with pytest.raises(RuntimeError, match="only floating point tensors can require gradients"):
        eager.zeros(2, dtype=np.dtype(dt)).requires_grad_()


def test_float16_autograd_gives_float16_gradients():
    x64 = np.array([0.5, -1.25, 2.0, 3.5])
    x = eager.tensor(x64.astype(np.float16), requires_grad=True)
    w = eager.tensor(np.array([1.5, 0.25, -2.0, 1.0], np.float16), requires_grad=True)
    y = (eager.tanh(x * w) * x + w / 2).sum()
    y.backward()
    assert x.grad.dtype == eager.float16 and w.grad.dtype == eager.float16
    wn = np.array([1.5, 0.25, -2.0, 1.0])
    th = np.tanh(x64 * wn)
    assert np.allclose(x.grad.numpy(), th + x64 * wn * (1 - th ** 2), rtol=1e-2, atol=1e-2)
    assert np.allclose(w.grad.numpy(), x64 * x64 * (1 - th ** 2) + 0.5, rtol=1e-2, atol=1e-2)


def test_float16_rounds_after_every_op_like_pytorch():
    # 2048 + 1 is not representable in float16 (rounds to even: 2048), so (x + 1) + 1 stays
    # 2048 while x + 2 is 2050: each op rounds to float16, as PyTorch's CPU kernels do.
    x = eager.tensor([2048.0], dtype=eager.half)
    assert ((x + 1) + 1).tolist() == [2048.0]
    assert (x + 2).tolist() == [2050.0]


REDUCTIONS = ("sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "std", "var",
              "logsumexp")


@pytest.mark.parametrize("name", REDUCTIONS)
def test_axis_and_keepdims_aliases(name):
    x = eager.tensor(np.arange(12.0).reshape(3, 4) ** 1.5)
    fn, meth = getattr(eager, name), getattr(x, name, None)
    want = fn(x, 1, keepdim=True)
    calls = [fn(x, axis=1, keepdims=True), fn(x, dim=1, keepdims=True)]
    if meth is not None:
        calls.append(meth(axis=1, keepdims=True))
    for got in calls:
        for g, w in zip(got if isinstance(got, tuple) else (got,),
                        want if isinstance(want, tuple) else (want,)):
            assert g.shape == w.shape and np.array_equal(g.numpy(), w.numpy())
    with pytest.raises(TypeError, match="alias"):
        fn(x, dim=1, axis=1)


def test_softmax_takes_axis():
    x = eager.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 1.0]])
    assert np.array_equal(eager.softmax(x, axis=0).numpy(), eager.softmax(x, 0).numpy())
    assert np.array_equal(eager.nn.functional.log_softmax(x, axis=1).numpy(),
                          eager.nn.functional.log_softmax(x, 1).numpy())


def test_an_unknown_dtype_is_refused_with_a_hint():
    assert eager.zeros(2, dtype="bfloat16").dtype == eager.bfloat16
    with pytest.raises(TypeError, match="not supported.*bfloat16.*test_dtypes.py"):
        eager.zeros(2, dtype="complex64")


def test_promote_types_result_type_and_dtype_queries():
    for a, b in itertools.product(ALL, ALL):
        want = expected_promotion(a, b)
        if want is None:
            with pytest.raises(TypeError):
                eager.promote_types(np.dtype(a), np.dtype(b))
        else:
            assert eager.promote_types(np.dtype(a), np.dtype(b)) == np.dtype(want), (a, b)
    assert eager.result_type(eager.tensor([1, 2], dtype=eager.int), 1.0) == eager.float32
    assert eager.result_type(eager.tensor([1, 2], dtype=eager.uint8), eager.tensor(1)) == \
        eager.uint8
    for dt in ALL:
        t = eager.zeros(2, dtype=np.dtype(dt))
        assert t.is_floating_point() == (dt in FLOATS)
        assert t.element_size() == t.itemsize == np.dtype(dt).itemsize
