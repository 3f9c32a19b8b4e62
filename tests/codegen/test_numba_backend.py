"""The "numba" backend against eager and the "interpret" backend, generated from the registry.

Every registry op (`eager.ops.OPS`) has samples in `OP_CASES`, generated from the op-info
table (the `compiled` cases of tests/eager/opinfo*.py entries: one table, not two; only the
control rows, which have no eager op, are added here), and the composites users call
(gelu, softmax, layer_norm, cross_entropy, ...) have theirs in `COMPOSITE_CASES`.  Each case
is compiled once per dtype and then run on its inputs in several memory layouts (C order,
Fortran order, sliced with a step, negative strides, zero strides) and with NaN/inf/0
planted in them, without compiling again: the kernels take any layout.  0-d and zero-size
inputs of every case are batched into one function per dtype (one compile instead of one
per case).

Everything runs under `eager.no_grad()`: a function whose outputs need gradients runs
eagerly, and the point here is the compiled path.
"""
from __future__ import annotations

import math
import os
import sys
import warnings
import zlib

import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F
import eager.optim as optim
import tracer
from codegen import LOWERING
from tracer.function import MISS
from eager.ops import OPS

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "eager"))
from opinfo import OPINFOS, UNARY, Case, shapes  # noqa: E402

# IEEE results (0 * inf, log(-1), overflow) are values here, not warnings (as in eager).
pytestmark = pytest.mark.filterwarnings(
    "ignore:(invalid value|divide by zero|overflow|underflow) encountered:RuntimeWarning")

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
FLOATS = (F32, F64)

# (rtol, atol) by tolerance class and dtype.  "vmath": a transcendental op alone, a few ULP;
# "default": composites and BLAS; "reduce": sums whose order differs from numpy's pairwise
# summation (Numba's loops, reassociated), which can cancel to values near 0.
TOLERANCES = {
    "vmath": {F32: (2e-6, 1e-7), F64: (4e-15, 1e-300)},
    "default": {F32: (1e-5, 1e-6), F64: (1e-12, 1e-14)},
    "reduce": {F32: (1e-5, 1e-5), F64: (1e-12, 1e-13)},
}


# --------------------------------------------------------------------------------------
# the table: generated from the OpInfo table (tests/eager/opinfo.py)

def _derived_case(info) -> Case:
    """An elementwise op's case from its main OpInfo entry: the call on uniform samples in
    the entry's domain; "vmath" tolerances where its lowering row calls codegen.vmath."""
    lo, hi = info.domain
    tol = "vmath" if LOWERING[info.op].vmath else "default"
    if OPS[info.op].nin == 1:
        return Case(info.name, lambda a: info.call(a),
                    shapes([(3, 5)], [()], [(0, 3)], lo=lo, hi=hi), tol=tol)
    return Case(info.name, lambda a, b: info.call(a, b),
                shapes([(2, 3, 4), (3, 1)], [(), ()], [(0, 4), (4,)], lo=lo, hi=hi), tol=tol)


def _op_cases() -> dict:
    cases: dict[str, list[Case]] = {}
    for info in OPINFOS:
        if info.op is None:
            continue
        compiled = info.compiled
        if compiled is None and info.name == info.op and \
                OPS[info.op].category == "elementwise" and OPS[info.op].nin in (1, 2):
            compiled = [_derived_case(info)]
        for case in compiled or ():
            cases.setdefault(info.op, []).append(case)
    return cases


def _loop(x):
    def body(v, i):
        return v * 2 + 1, i + 1
    return tracer.while_loop(lambda v, i: i < 3, body, (x, eager.tensor(0)))


OP_CASES: dict[str, list[Case]] = _op_cases()
# the control-flow rows (registered by tracer.control) have no eager op to tabulate
OP_CASES.update({
    "cond": [Case("cond", lambda x: tracer.cond(x.sum() > 0, lambda v: v * 2,
                                                lambda v: -v.exp(), x), UNARY)],
    "while_loop": [Case("while_loop", _loop, UNARY)],
})


# Indexing, shaping, scans and sampling (issue 16 item 4): the registry rows of
# eager/scan_ops.py run as numpy steps (their cases are on their entries in
# tests/eager/opinfo_shaping.py); the composites around them fuse as usual.
def _shapings(x, y):
    mask = eager.tril(eager.ones(4, 4, dtype=eager.bool_))
    return (eager.tril(x), x.triu(1) * 2, x.masked_fill(~mask, float("-inf")).exp(),
            x.flip(0), eager.roll(x, (1, -2), (0, 1)), x.diagonal(1), eager.diag(x[0]),
            eager.einsum("ij,jk->ik", x, y), eager.einsum("ij,ij->i", x, x),
            x.split(3, 1)[1] + 1, x.chunk(2)[0], x.repeat(2, 1), x.repeat_interleave(2, 0),
            x.unfold(1, 2, 1), eager.gather(x, 1, x.argsort(1)), x.index_select(0,
            eager.tensor([3, 0])), x.unbind(1)[2], x.narrow(0, 1, 2), x.unflatten(1, (2, 2)))


def _samplings(p):
    q = p.abs() + 0.1
    return (eager.multinomial(q, 2), eager.multinomial(q, 5, replacement=True),
            eager.randperm(6) + 0, eager.randint(5, (3,)) + 0)




def _layer_norm_affine(x, w, b):
    return F.layer_norm(x, (5,), w, b), F.layer_norm(x, (3, 5), None, None, eps=1e-3)


def _cross_entropy(logits, target, probs):
    return (F.cross_entropy(logits, target), F.cross_entropy(logits, target, reduction="sum"),
            F.cross_entropy(logits, target, reduction="none"),
            F.cross_entropy(logits, target, label_smoothing=0.1),
            F.cross_entropy(logits, F.softmax(probs, -1)))


def _clamps(x, lo):
    return (x.clamp(min=-0.5), x.clamp(max=0.5), eager.clamp(x, -0.5, 0.5),
            eager.clamp(x, lo, lo + 1))


def _means(x):
    return x.mean(), x.mean(-1), x.mean(0), x.mean((0, 2), keepdim=True)


def _moments(x):
    return (x.var(), x.var(-1), x.std(0, unbiased=False), x.var((0, 2), keepdim=True),
            eager.var(x, 1, correction=2), x.square().sum(-1), (x * x + 1.0).rsqrt(),
            (x / x).isnan(), (1.0 / x).isinf(), (x / x).isfinite())


def _min_max(x):
    mx = x.max(dim=1)
    mn = x.min(dim=-1, keepdim=True)
    return (eager.amin(x, 1), eager.amin(x, (0, 1)), x.max(), x.min(), mx.values, mx.indices,
            mn.values, mn.indices)


def _dropout_eval(x):
    layer = nn.Dropout(0.5)
    layer.eval()
    return F.dropout(x, 0.5, training=False) + 1, layer(x) * 2, F.dropout(x, 0.3, False)


COMPOSITE_CASES: list[Case] = [
    Case("gelu_erf", lambda x: F.gelu(x), shapes([(3, 5)], [()], [(0, 3)], lo=-6, hi=6)),
    Case("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"),
         shapes([(3, 5)], [()], [(0, 3)], lo=-6, hi=6)),
    Case("softmax", lambda x: (F.softmax(x, -1), F.softmax(x, 0), F.softmax(x, 1)),
         shapes([(2, 3, 5)], None, None, lo=-30, hi=30)),
    Case("log_softmax", lambda x: (F.log_softmax(x, -1), F.log_softmax(x, 0)),
         shapes([(3, 5)], None, None, lo=-30, hi=30)),
    Case("softmax_rows", lambda x: (F.softmax(x, -1), F.log_softmax(x, -1)),
         shapes([(4, 6)], None, [(0, 6)], lo=-30, hi=30)),
    Case("layer_norm", _layer_norm_affine, shapes([(2, 3, 5), (5,), (5,)], None,
                                                  [(0, 3, 5), (5,), (5,)])),
    Case("layer_norm_plain", lambda x: F.layer_norm(x, 6), shapes([(4, 6)], None, [(0, 6)])),
    Case("cross_entropy", _cross_entropy, shapes([(4, 5), (4,), (4, 5)], None, None,
                                                 ints={1: (0, 5)}, lo=-5, hi=5)),
    Case("mse_loss", lambda a, b: (F.mse_loss(a, b), F.mse_loss(a, b, reduction="sum"),
                                   F.mse_loss(a, b, reduction="none")),
         shapes([(3, 5), (3, 5)], [(), ()], None), tol="reduce"),
    Case("linear", lambda x, w, b: (F.linear(x, w, b), F.linear(x, w)),
         shapes([(3, 4), (5, 4), (5,)], None, [(0, 4), (5, 4), (5,)])),
    Case("logsumexp", lambda x: (eager.logsumexp(x, -1), eager.logsumexp(x, 0, keepdim=True)),
         shapes([(3, 5)], None, None, lo=-30, hi=30)),
    Case("dropout_eval", _dropout_eval, UNARY),
    Case("clamp", _clamps, shapes([(3, 5), (5,)], [(), ()], [(0, 5), (5,)])),
    Case("mean", _means, shapes([(2, 3, 4)], None, None), tol="reduce"),
    Case("moments", _moments, shapes([(2, 3, 4)], None, None), tol="reduce"),
    Case("amin_amax", _min_max, shapes([(3, 5)], None, None)),
    Case("matmul_shapes", lambda v, a, b: (v @ v, a @ v, v @ a.T, a @ b, eager.matmul(
        a.reshape(1, 4, 4).expand(2, 4, 4), b)), shapes([(4,), (4, 4), (2, 4, 3)])),
    Case("cat_stack", lambda a, b: (eager.cat([a, b, a], -1), eager.stack([a, b], -1) + 1),
         shapes([(2, 3), (2, 3)], None, [(0, 3), (0, 3)])),
    Case("indexing", lambda x, i: (x[::-1, 1] * 2, x[i], x[i, ::-1] + x[0]),
         shapes([(5, 4), (3,)], None, None, ints={1: (-5, 5)})),
    Case("chain", lambda x, y: (F.softmax(F.gelu(x @ y), -1) * 2).sum(0),
         shapes([(3, 4), (4, 5)], None, [(0, 4), (4, 5)]), tol="reduce"),
]

COMPOSITE_CASES += [
    Case("shaping", _shapings, shapes([(4, 4), (4, 3)], None, None)),
    Case("sampling", _samplings, shapes([(2, 4)], None, None), random=True, specials=False),
]

ALL_CASES: list[Case] = [c for cases in OP_CASES.values() for c in cases] + COMPOSITE_CASES


# --------------------------------------------------------------------------------------
# running and comparing

def _leaves(out) -> list:
    if isinstance(out, (tuple, list)):
        return [x for o in out for x in _leaves(o)]
    return [out]


def _arrays(out) -> list:
    return [t.numpy() for t in _leaves(out)]


def _compile(case: Case, backend: str):
    fn = case.fn

    def traced(*args):
        return fn(*args)
    traced.__name__ = traced.__qualname__ = case.name
    return tracer.function(traced, backend=backend)


def assert_same(got, exp, dtype, tol="default", what=""):
    """`got` equals `exp`: dtype, shape, NaN and +-inf positions exactly, values within tol."""
    got, exp = np.asarray(got), np.asarray(exp)
    assert got.dtype == exp.dtype, f"{what}: dtype {got.dtype} != {exp.dtype}"
    assert got.shape == exp.shape, f"{what}: shape {got.shape} != {exp.shape}"
    if exp.dtype.kind != "f":
        np.testing.assert_array_equal(got, exp, err_msg=what)
        return
    rtol, atol = TOLERANCES[tol][np.dtype(exp.dtype) if exp.dtype in FLOATS else dtype]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(exp), err_msg=f"{what}: NaN positions")
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(exp),
                                  err_msg=f"{what}: +inf positions")
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(exp),
                                  err_msg=f"{what}: -inf positions")
    np.testing.assert_allclose(got, exp, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)


def layouts(a: np.ndarray) -> dict:
    """The same values in other memory layouts (all non-contiguous where the shape allows)."""
    out = {"C": a}
    if a.ndim >= 2:
        out["fortran"] = np.asfortranarray(a)
    if a.ndim >= 1 and a.size:
        buf = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
        buf[..., ::2] = a
        out["step"] = buf[..., ::2]
        out["reversed"] = np.ascontiguousarray(a[::-1])[::-1]
        ro = a.copy()
        ro.flags.writeable = False
        out["readonly"] = ro
    if a.ndim >= 1 and a.shape[0] > 1:
        out["stride0"] = np.broadcast_to(a[:1], a.shape)
    return out


def with_specials(a: np.ndarray, which: str) -> np.ndarray:
    """A copy of float array `a` with NaN ("nan") or +-inf and 0 ("inf") planted in it."""
    if a.dtype.kind != "f" or a.size == 0:
        return a
    b = a.copy()
    flat = b.reshape(-1)
    n = flat.size
    if which == "nan":
        flat[0] = np.nan
        flat[n // 2] = np.nan
    else:
        flat[-1] = np.inf
        flat[n // 3] = -np.inf
        if n > 2:
            flat[(2 * n) // 3] = 0.0
    return b


def _run_all(case, dtype, fns, arrays):
    """Outputs of eager and each compiled function on `arrays`; checks inputs stay unchanged."""
    saved = [np.array(a) for a in arrays]
    results = {}
    for name, f in [("eager", case.fn)] + list(fns.items()):
        tensors = [eager.from_numpy(a) for a in arrays]
        if case.random:
            eager.manual_seed(1234)
        with eager.no_grad():
            results[name] = _arrays(f(*tensors))
    for a, s in zip(arrays, saved):
        np.testing.assert_array_equal(a, s, err_msg=f"{case.name}: an input was modified")
    return results


def _check(case, dtype, results, label):
    exp = results["eager"]
    for backend, got in results.items():
        if backend == "eager":
            continue
        assert len(got) == len(exp), f"{case.name}: {backend} returned {len(got)} outputs"
        for i, (g, e) in enumerate(zip(got, exp)):
            assert_same(g, e, dtype, case.tol, f"{case.name}[{i}] {backend} {label}")


def _kernels_built(fn, arrays):
    with eager.no_grad():
        concrete = fn.get_concrete_function(*[eager.from_numpy(a) for a in arrays])
    for k in concrete.kernels:
        assert k.fn is not None, f"kernel {k.name} fell back to numpy: {k.error}\n{k.source}"
    return concrete


@pytest.fixture
def rng(request):
    """A generator seeded by the test's id: the same inputs however tests are selected."""
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


@pytest.mark.parametrize("dtype", FLOATS, ids=["f32", "f64"])
@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.name)
def test_case_matches_eager_in_every_layout_and_with_nan_inf(case, dtype, rng):
    if dtype not in case.dtypes:
        pytest.skip(f"{case.name} has no {dtype} sample")
    arrays = case.inputs(rng, dtype, "main")
    fns = {"numba": _compile(case, "numba"), "interpret": _compile(case, "interpret")}
    variants = {name: [layouts(a).get(name, a) for a in arrays]
                for name in ("C", "fortran", "step", "reversed", "readonly", "stride0")}
    if case.specials:
        variants["nan"] = [with_specials(a, "nan") for a in arrays]
        variants["inf"] = [with_specials(a, "inf") for a in arrays]
        variants["inf_reversed"] = [layouts(a).get("reversed", a) for a in variants["inf"]]
    for label, arrs in variants.items():
        _check(case, dtype, _run_all(case, dtype, fns, arrs), label)
    _kernels_built(fns["numba"], arrays)
    # one trace served every layout and special value
    assert fns["numba"].trace_count == 1


# Zero-size inputs in float32 only: no element is read or written, so what can go wrong
# (shapes, loop bounds, an empty reduction's identity, the output's dtype) is written once
# for every dtype; float64's own code (its constants, vmath, accumulators) is checked by
# the float64 cases above and the 0-d ones here. (One compile of ~100 kernels saved.)
@pytest.mark.parametrize("kind,dtype", [("scalar", F32), ("scalar", F64), ("empty", F32)],
                         ids=["scalar-f32", "scalar-f64", "empty-f32"])
def test_0d_and_zero_size_inputs_of_every_case(kind, dtype, rng):
    """All cases with a 0-d (or zero-size) sample, traced together as one function."""
    plan = []
    for case in ALL_CASES:
        if dtype in case.dtypes and not case.random:
            arrays = case.inputs(rng, dtype, kind)
            if arrays is not None:
                plan.append((case, arrays))
    assert len(plan) >= 10

    def together(*flat):
        outs = []
        pos = 0
        for case, arrays in plan:
            outs.extend(_leaves(case.fn(*flat[pos:pos + len(arrays)])))
            pos += len(arrays)
        return tuple(outs)

    together.__name__ = f"all_{kind}"
    flat = [a for _, arrays in plan for a in arrays]
    numba_fn = tracer.function(together)
    interp_fn = tracer.function(together, backend="interpret")
    tensors = [eager.from_numpy(a) for a in flat]
    with eager.no_grad():
        got = _arrays(numba_fn(*tensors))
        interp = _arrays(interp_fn(*tensors))
        pos = 0
        for case, arrays in plan:
            exp = _arrays(case.fn(*[eager.from_numpy(a) for a in arrays]))
            for i, e in enumerate(exp):
                assert_same(got[pos + i], e, dtype, case.tol, f"{case.name}[{i}] numba {kind}")
                assert_same(interp[pos + i], e, dtype, case.tol,
                            f"{case.name}[{i}] interpret {kind}")
            pos += len(exp)
    assert pos == len(got)
    _kernels_built(numba_fn, flat)


def test_integer_elementwise_ops_match_eager():
    """Integer kernels: arithmetic, comparisons, where and casts on int32 and int64."""
    rng = np.random.default_rng(7)

    def ints(a, b):
        return (a + b, a - b, a * b, eager.maximum(a, b), eager.minimum(a, b), -a, abs(a),
                a.sign(), eager.relu(a), a == b, a < b, a >= b, eager.where(a > b, a, b),
                a.to(eager.float64) / 3, (a > 0).to(a.dtype), a.sum(-1), eager.amax(a, 0),
                a.argmax(1))

    f = tracer.function(ints)
    for dt in (np.int32, np.int64):
        a = rng.integers(-50, 50, size=(3, 4)).astype(dt)
        b = rng.integers(-50, 50, size=(4,)).astype(dt)
        for la, lb in [(a, b), (np.asfortranarray(a), b[::-1].copy()[::-1])]:
            ta, tb = eager.from_numpy(la), eager.from_numpy(lb)
            exp = _arrays(ints(ta, tb))
            got = _arrays(f(ta, tb))
            for i, (g, e) in enumerate(zip(got, exp)):
                assert_same(g, e, np.float64, "default", f"ints[{i}] {dt.__name__}")


def test_parallel_kernels_match_eager():
    """Past the parallel threshold kernels run in parallel (row blocks and flat
    elementwise loops split among threads by the runtime); rows with NaN/inf stay
    independent."""
    from codegen.emit import PARALLEL_MIN_SIZE

    rows = PARALLEL_MIN_SIZE // 256 + 8
    rng = np.random.default_rng(11)
    x = rng.uniform(-20, 20, size=(rows, 256)).astype(np.float32)
    x[3, 7] = np.nan
    x[5, :4] = np.inf
    x[rows - 1, 9] = -np.inf

    @tracer.function
    def big(x):
        return F.softmax(x, -1), F.gelu(x) * 2, eager.amax(x, -1), x.sum(0), (x * x).mean()

    t = eager.from_numpy(x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with eager.no_grad():
            concrete = big.get_concrete_function(t)
            got = _arrays(big(t))
    with eager.no_grad():
        exp = _arrays(big._fn(t))
    # no NumbaPerformanceWarning ("parallel=True ... no transformation ... possible") for
    # the reduction over all axes, which has no outer loop to run in parallel
    assert [str(w.message) for w in caught if "parallel" in str(w.message)] == []
    # Row kernels run blocks of rows in parallel (the last block here is partial), except
    # the reduction over all axes.
    row_kernels = [k for k in concrete.kernels if k.kind == "row"]
    assert [("for i0_block in range(lo, hi):" in k.source) for k in row_kernels] == \
        [k.group.split > 0 for k in row_kernels]
    assert any(k.group.split > 0 for k in row_kernels)
    # the blocks' rows index with unsigned ints (a signed index of an unknown row gets a
    # negative-index fix-up per load, which stops the row loops from vectorizing), and the
    # running max is llvm.maximum (vectorizes without nnan)
    softmax = next(k for k in row_kernels if "amax" in k.name)
    assert "def rows(" in softmax.source and "[np.uint64(i0 * 256 + i1)]" in softmax.source
    assert "maximum(acc" in softmax.source
    ew = tracer.function(lambda x: F.gelu(x) * 2)
    with eager.no_grad():
        np.testing.assert_allclose(ew(t).numpy(), (F.gelu(t) * 2).numpy(), rtol=2e-6,
                                   atol=1e-6, equal_nan=True)
    # a big flat elementwise loop is split among threads by the runtime, not prange'd
    (gelu_kernel,) = ew.get_concrete_function(t).kernels
    assert "for i0 in range(lo, hi):" in gelu_kernel.source
    assert "nogil=True" in gelu_kernel.source and "prange(" not in gelu_kernel.source
    assert all(k.fn is not None for k in concrete.kernels)
    for i, (g, e) in enumerate(zip(got, exp)):
        assert_same(g, e, F32, "reduce", f"big[{i}]")


def test_control_flow_inside_a_compiled_function():
    @tracer.function
    def branchy(x, n):
        y = tracer.cond(x.sum() > 0, lambda v: v * 2, lambda v: -v, F.gelu(x))
        i, acc = tracer.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, a * 1.5 + y),
                                   (eager.tensor(0), y))
        return acc.exp(), i

    for sign in (1.0, -1.0):
        x = eager.from_numpy(np.linspace(-1, 2, 6, dtype=np.float32) * sign)
        n = eager.tensor(3)
        with eager.no_grad():
            got = _arrays(branchy(x, n))
            exp = _arrays(branchy._fn(x, n))
        for i, (g, e) in enumerate(zip(got, exp)):
            assert_same(g, e, F32, "default", f"branchy[{i}] sign {sign}")
    assert branchy.trace_count == 1


def test_outputs_are_fresh_arrays_at_every_call():
    """Computed results never alias each other (but one returned twice, which is one
    tensor), the inputs, or the results of an earlier call; an argument returned is the
    argument itself, and a view of one (x.T, x[::2]) a view of it, as in eager (issue 13, item 9; tests/tracer/test_argument_idioms.py)."""
    @tracer.function
    def several(x):
        y = x * 2
        return F.softmax(x, -1), y, y, x.sum(0), x.T, x[::2], x

    x = eager.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4))
    with eager.no_grad():
        out = several(x)
        assert out[-1] is x and out[1] is out[2]  # (`return y, y`: one tensor, as eagerly)
        assert all(np.shares_memory(v.numpy(), x.numpy()) for v in out[4:6])
        first = _arrays(out[:2] + out[3:4])
        expected = [a.copy() for a in first]
        out = several(x)
        assert out[-1] is x
        second = _arrays(out[:2] + out[3:4])
    arrays = first + second + [x.numpy()]
    for i, a in enumerate(arrays):
        for b in arrays[i + 1:]:
            assert not np.shares_memory(a, b)
    for a in second:
        a[...] = -1  # writing to results of the second call leaves the first ones alone
    for a, e in zip(first, expected):
        np.testing.assert_array_equal(a, e)
    with eager.no_grad():
        out = several(x)
        third = _arrays(out[:2] + out[3:4])
    for a, e in zip(third, expected):
        np.testing.assert_array_equal(a, e)


# --------------------------------------------------------------------------------------
# the table itself

ALLOWED_LOWERINGS = {"kernel", "view", "reduce", "blas", "numpy", "control"}


def test_every_registry_op_has_a_lowering_row():
    missing = sorted(set(OPS) - set(LOWERING))
    assert not missing, f"ops without a row in codegen.lower.LOWERING: {missing}"
    unknown = {op: row.how for op, row in LOWERING.items() if row.how not in ALLOWED_LOWERINGS}
    assert not unknown, f"unknown lowerings: {unknown}"
    stale = sorted(set(LOWERING) - set(OPS))
    assert not stale, f"LOWERING rows for ops the registry does not have: {stale}"


def test_every_registry_op_has_a_sample_that_really_uses_it(rng):
    added_here = set(OP_CASES) - set(_op_cases())
    assert added_here <= {op for op in OPS if OPS[op].control}, (
        f"put the compiled cases of {sorted(added_here)} on their op-info entries")
    missing = sorted(set(OPS) - set(OP_CASES))
    assert not missing, f"registry ops without a sample in OP_CASES: {missing}"
    removed_by_passes = []
    for op, cases in OP_CASES.items():
        assert op in OPS, f"OP_CASES names {op!r}, which is not a registry op"
        traced, optimized = set(), set()
        for case in cases:
            arrays = case.inputs(rng, F64, "main")
            f = _compile(case, "interpret")  # tracing only, nothing to compile
            with eager.no_grad():
                concrete = f.get_concrete_function(*[eager.from_numpy(a) for a in arrays])
            traced |= {e.op for e in concrete.raw_graph.eqns}
            optimized |= {e.op for e in concrete.graph.eqns}
        assert op in traced, f"the samples of {op!r} never reach the op"
        if op not in optimized:
            removed_by_passes.append(op)
    # An op the passes always remove (stop_gradient: only autodiff needs it) never reaches a
    # backend through @function; compiled unoptimized, its lowering row still runs here.
    for op in removed_by_passes:
        for case in OP_CASES[op]:
            arrays = case.inputs(rng, F32, "main")
            f = tracer.Function(case.fn, name=case.name, optimize=False)
            tensors = [eager.from_numpy(a) for a in arrays]
            with eager.no_grad():
                concrete = f.get_concrete_function(*tensors)
                got, exp = _arrays(f(*tensors)), _arrays(case.fn(*tensors))
            assert op in {e.op for m in concrete.kernels for e in m.group.members}
            assert all(k.fn is not None for k in concrete.kernels)
            for i, (g, e) in enumerate(zip(got, exp, strict=True)):
                assert_same(g, e, F32, case.tol, f"{case.name}[{i}] unoptimized")


# --------------------------------------------------------------------------------------
# inspection: kernels and printouts

def test_concrete_function_shows_ir_and_fused_kernels():
    @tracer.function
    def norm_then_gelu(x, w, b):
        return F.gelu(F.layer_norm(x, (8,), w, b)) + 1

    args = [eager.randn(4, 8), eager.randn(8), eager.randn(8)]
    with eager.no_grad():
        concrete = norm_then_gelu.get_concrete_function(*args)
    text = str(concrete)
    assert text.startswith("def norm_then_gelu(")
    ir, _, kernels = text.partition("fused kernels:")
    assert kernels, text
    assert str(concrete.graph) in ir
    assert concrete.kernels
    for k in concrete.kernels:
        assert k.name in kernels
        assert isinstance(k.source, str) and "@njit(" in k.source and "def kernel(" in k.source
        assert k.source.startswith(f'"""Kernel {k.name}:')
        assert k.fn is not None
        compile(k.source, k.name, "exec")  # the source is valid Python
    # every equation of the graph is cited in some kernel or step
    cited = "\n".join(k.source for k in concrete.kernels) + kernels
    for e in concrete.graph.eqns:
        assert f"%{e.out.name}" in cited, e


@pytest.mark.parametrize("dtype", FLOATS)
def test_log1p_and_expm1_lower_to_vmath_and_keep_tiny_arguments(dtype):
    # the reason they are primitives: log(1 + a) and exp(a) - 1 lose every digit here
    x = eager.from_numpy(np.array([1e-10, -3e-8, 2e-7, 0.0, -0.0, 0.5, -0.99, 30.0], dtype))
    suffix = "f32" if dtype == F32 else "f64"
    for backend in ("numba", "interpret"):
        f = tracer.function(lambda a: (a.log1p(), eager.expm1(a)), backend=backend)
        with eager.no_grad():
            got = _arrays(f(x))
            concrete = f.get_concrete_function(x)
        want = _arrays((eager.log1p(x), eager.expm1(x)))
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=TOLERANCES["vmath"][dtype][0], atol=0)
        source = "\n".join(k.source for k in concrete.kernels)
        if backend == "numba":
            assert f"log1p_{suffix}(" in source and f"expm1_{suffix}(" in source, source


@pytest.mark.parametrize("dtype", FLOATS)
def test_hyperbolic_log2_exp2_hypot_logaddexp_lower_to_vmath(dtype):
    """Issue 16 item 5: each is a vmath call in the kernel (no scalar libm call), and the
    compiled results are eager's, special values included (overflow, poles, NaN, ±0)."""
    base = np.array([0.0, -0.0, 0.3, -0.7, 1.0, -1.0, 1.5, 3.0, -20.0, 95.0, 800.0,
                     np.inf, -np.inf, np.nan, 1e-30, 0.999], dtype)
    x = eager.from_numpy(base)
    y = eager.from_numpy(base[::-1].copy())

    def f(a, b):
        return (a.sinh(), a.cosh(), a.asinh(), eager.acosh(a.abs() + 1), a.atanh(),
                a.abs().log2(), a.abs().log10(), a.exp2(), eager.hypot(a, b),
                eager.logaddexp(a, b))

    names = ["sinh", "cosh", "asinh", "acosh", "atanh", "log2", "log10", "exp2", "hypot",
             "logaddexp"]
    with eager.no_grad():
        want = _arrays(f(x, y))
    for backend in ("numba", "interpret"):
        g = tracer.function(f, backend=backend)
        with eager.no_grad():
            got = _arrays(g(x, y))
            concrete = g.get_concrete_function(x, y)
        for name, a, w in zip(names, got, want, strict=True):
            np.testing.assert_allclose(a, w, rtol=TOLERANCES["vmath"][dtype][0], atol=0,
                                       err_msg=f"{name} {backend}")
            zero = w == 0
            assert np.array_equal(np.signbit(a[zero]), np.signbit(w[zero])), name
        if backend == "numba":
            source = "\n".join(k.source for k in concrete.kernels)
            suffix = "f32" if dtype == F32 else "f64"
            for name in names:
                assert f"{name}_{suffix}(" in source, (name, source)
            assert "np.sinh" not in source and "math." not in source, source


def test_interpret_backend_has_no_kernels():
    f = tracer.function(lambda x: x * 2, backend="interpret")
    concrete = f.get_concrete_function(eager.ones(3))
    assert concrete.kernels == ()
    assert "interpret" in str(concrete)


# --------------------------------------------------------------------------------------
# a training step, compiled

def _mlp(seed):
    eager.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4))


@pytest.mark.parametrize("make_opt", [
    lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9),
    lambda ps: optim.Adam(ps, lr=1e-2),
], ids=["sgd_momentum", "adam"])
def test_compiled_training_step_matches_eager(make_opt, monkeypatch):
    eager_model, model = _mlp(3), _mlp(3)
    eager_opt, opt = make_opt(eager_model.parameters()), make_opt(model.parameters())

    def step(model, opt, x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    @tracer.function
    def train_step(x, y):
        return step(model, opt, x, y)

    calls = []
    generate = tracer.ConcreteFunction._generate

    def counting_generate(self, guarded):  # run and the guarded call_fast, both generated
        fn, source = generate(self, guarded)
        if fn is None:
            return fn, source

        def counted(leaves):
            out = fn(leaves)
            if out is not MISS:
                calls.append(self)
            return out
        return counted, source
    monkeypatch.setattr(tracer.ConcreteFunction, "_generate", counting_generate)

    rng = np.random.default_rng(0)
    x = eager.from_numpy(rng.standard_normal((8, 6)).astype(np.float32))
    y = eager.from_numpy(rng.integers(0, 4, size=8))
    for i in range(5):
        loss_e = step(eager_model, eager_opt, x, y)
        loss_c = train_step(x, y)
        np.testing.assert_allclose(loss_c.item(), loss_e.item(), rtol=1e-5,
                                   err_msg=f"loss, step {i}")
        for (name, p_e), p_c in zip(eager_model.named_parameters(), model.parameters()):
            np.testing.assert_allclose(p_c.detach().numpy(), p_e.detach().numpy(), rtol=1e-5,
                                       atol=1e-7, err_msg=f"{name}, step {i}")
            np.testing.assert_allclose(p_c.grad.numpy(), p_e.grad.numpy(), rtol=1e-5,
                                       atol=1e-7, err_msg=f"{name}.grad, step {i}")
    # Every step ran a compiled program (the first one or two trace again: the optimizer
    # creates its state, then the .grad tensors exist), and the last ones share one trace.
    assert len(calls) == 5, (f"only {len(calls)} of 5 steps ran a compiled program "
                             f"({train_step.trace_count} traces)")
    assert calls[-1] is calls[-2] is calls[-3]
    assert train_step.trace_count <= 3
    concrete = calls[-1]
    assert concrete.kernels and all(k.fn is not None for k in concrete.kernels)
    assert math.isfinite(loss_c.item())


@pytest.mark.parametrize("n", [1, 63, 64, 65, 129, 1000, 4099])
def test_split_elementwise_kernels_cover_every_element_once(monkeypatch, n):
    """Any size past a (lowered) threshold: the pieces the threads take tile [0, n) with no
    gap or overlap; nested (broadcasting) loops keep prange."""
    from codegen import emit

    monkeypatch.setattr(emit, "PARALLEL_MIN_SIZE", 1)
    rng = np.random.default_rng(n)
    x = eager.from_numpy(rng.standard_normal(n).astype(np.float32))
    f = tracer.function(lambda x: (x * 3.0 + 1.0).exp())
    with eager.no_grad():
        np.testing.assert_allclose(f(x).numpy(), (x * 3.0 + 1.0).exp().numpy(), rtol=2e-6)
        # (a single element never runs in parallel)
        assert ("range(lo, hi)" in f.get_concrete_function(x).kernels[0].source) == (n > 1)
        if n > 1:
            b = eager.from_numpy(rng.standard_normal((2, n)).astype(np.float32))
            g = tracer.function(lambda b, x: b * x + 1.0)
            np.testing.assert_allclose(g(b, x).numpy(), (b * x + 1.0).numpy(), rtol=1e-6,
                                       atol=1e-6)  # (an FMA: contract)
            kernel = g.get_concrete_function(b, x).kernels[0]
            assert "prange(" in kernel.source or "range(lo, hi)" in kernel.source


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_division_by_a_sqrt_is_exact_at_zero_and_inf(dtype):
    """Under 'arcp' LLVM would compute x / sqrt(y) with an rsqrt estimate and a Newton step:
    NaN at y = 0, -0 and inf, where eager gives inf, -inf and 0. Kernels have no 'arcp' now
    (codegen.emit.FASTMATH); a loop-invariant divisor goes through vmath.div_invariant_*."""
    y = np.array([0.0, -0.0, np.inf, 4.0, 1e-30, 2.0, np.nan, -1.0] * 5, dtype)
    x = eager.from_numpy(y)
    fns = [lambda x: 1.0 / x.sqrt(), lambda x: x.rsqrt() * 3.0,
           lambda x: (x + 1.0) / (x.sqrt() * 2.0), lambda x: 2.0 / x ** 0.5]
    for fn in fns:
        with np.errstate(all="ignore"):
            assert_same(tracer.function(fn)(x).numpy(), fn(x).numpy(), dtype)
    # by a divisor the loop does not change (a 0-d value, a row's value): its reciprocal
    rows = eager.from_numpy(np.array([[0.0, 0.0], [np.inf, 1.0], [1.0, 3.0]], dtype))
    invariant = [(lambda x, s: x / s.sqrt(), (x, eager.from_numpy(np.array(v, dtype))))
                 for v in (0.0, -0.0, np.inf, 2.0)]
    invariant.append((lambda r: (r + 1.0) / r.sum(-1, keepdim=True).sqrt(), (rows,)))
    for fn, args in invariant:
        with np.errstate(all="ignore"):
            f = tracer.function(fn)
            assert_same(f(*args).numpy(), fn(*args).numpy(), dtype)
        assert "div_invariant_f" in f.get_concrete_function(*args).kernels[0].source


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("n, align", [(1, 64), (64, 64), (1000, 64), (4099, 64), (7, 1),
                                      (64, 1)])
def test_split_call_pieces_tile_the_range_and_errors_reach_the_caller(monkeypatch, threads,
                                                                      n, align):
    """The runtime's split: pieces taken by whichever thread is free tile [0, n) exactly,
    start at multiples of `align`, and a piece that raises raises in the caller."""
    from codegen import parallel

    monkeypatch.setattr(parallel, "_SPLIT_THREADS", threads)
    monkeypatch.setattr(parallel, "_SPLIT_POOL", None)
    taken = []

    def entry(a, lo, hi):
        taken.append((lo, hi))
        a[lo:hi] += 1

    a = np.zeros(n)
    parallel._split_call(entry, n, align)(a)
    np.testing.assert_array_equal(a, 1.0)
    assert all(lo % align == 0 and lo < hi for lo, hi in taken)
    assert len(taken) <= max(1, threads * parallel.PIECES_PER_THREAD)

    def failing(a, lo, hi):
        if hi == n:
            raise ValueError("last piece")
    with pytest.raises(ValueError, match="last piece"):
        parallel._split_call(failing, n, align)(a)
    if parallel._SPLIT_POOL is not None:  # (this test's pool; monkeypatch restores the other)
        parallel._SPLIT_POOL.shutdown()


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_split_kernels_work_in_a_forked_child(monkeypatch):
    """A child forked after a split kernel ran inherits the thread pool object but not its
    threads: it must make its own, not wait forever on the parent's."""
    import multiprocessing

    from codegen import emit

    monkeypatch.setattr(emit, "PARALLEL_MIN_SIZE", 1)
    x = eager.from_numpy(np.linspace(-3, 3, 4096, dtype=np.float32))
    f = tracer.function(lambda x: F.gelu(x * 2.0))
    with eager.no_grad():
        want = f(x).numpy().copy()
    assert "range(lo, hi)" in f.get_concrete_function(x).kernels[0].source

    def child(conn):
        with eager.no_grad():
            conn.send(f(x).numpy())

    ctx = multiprocessing.get_context("fork")
    parent_end, child_end = ctx.Pipe()
    proc = ctx.Process(target=child, args=(child_end,))
    proc.start()
    try:
        assert parent_end.poll(60), "the forked child hung in a split kernel"
        np.testing.assert_array_equal(parent_end.recv(), want)
    finally:
        proc.kill()
        proc.join(10)
