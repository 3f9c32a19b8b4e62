"""A bounded run of the differential fuzzer, and a property-based test of compiled vs eager.

The long run is `python -m tests.fuzzing --programs 1000 --seed 0` (README, Debugging).
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import eager
import tracer
from tests import fuzzing
from tests.fuzz_programs import Input, Program, Step


def test_fuzzer_finds_no_mismatch_in_a_bounded_run():
    # A fixed seed range, under a time budget: shapes come from a small fixed set, so
    # later programs reuse kernels the earlier ones compiled.
    report = fuzzing.fuzz(30, seed=0, time_budget=45.0, minimize=True)
    assert report.programs >= 5
    found = "\n\n".join(f"{f}\n{shrunk.source()}" for _, f, shrunk in report.findings)
    assert not report.findings, found


SOURCE = """
def setup():
    c0 = data((3, 4), 'float32', 1)

    def f(a0):
        return (a0 * c0 + 1,)

    return f, {'c0': c0}


def args(call):
    return [data((3, 4), 'float32', 2 + 1000 * call, grad=True)]


def between(call, state):
    return None

KIND, CALLS = 'outside', 2
"""


def test_check_source_compares_outputs_and_grads():
    assert fuzzing.check_source(SOURCE) == []
    expected = fuzzing.run(SOURCE, "eager")
    assert len(expected) == 2 and expected[1]["argument 0.grad"] is not None
    wrong = fuzzing.run(SOURCE.replace("+ 1,", "+ 1.001,"), "interpret")
    finding = fuzzing.compare_runs(expected, wrong, "interpret")
    assert finding.kind == "mismatch" and finding.detail.startswith("output 0: max error")
    wrong = fuzzing.run(SOURCE.replace("a0 * c0", "a0.detach() * c0"), "interpret")
    finding = fuzzing.compare_runs(expected, wrong, "interpret")
    assert finding.detail.startswith("output 0.requires_grad")


def test_shrink_keeps_only_the_lines_that_differ(monkeypatch):
    # A stand-in for a compiler bug: compiled runs see `maximum` as `minimum`.
    run = fuzzing.run

    def buggy_run(source, mode, ignore=frozenset()):
        if mode != "eager":
            source = source.replace("eager.maximum(", "eager.minimum(")
        return run(source, mode, ignore)

    monkeypatch.setattr(fuzzing, "run", buggy_run)
    program = Program(
        seed=0, args=[Input("a0", (3, 4), "float32", 5)],
        captures=[Input("c0", (4,), "float32", 6)],
        steps=[Step("a0.exp()", "t0", ("a0",), "unary"),
               Step("t0 + c0", "t1", ("t0", "c0"), "elementwise"),
               Step("eager.maximum(a0, c0)", "t2", ("a0", "c0"), "elementwise"),
               Step("t1.sum(dim=0)", "t3", ("t1",), "reduce")],
        returns=("t3", "t2"))
    (finding,) = fuzzing.check(program, ("interpret",))
    shrunk = fuzzing.shrink(program, finding)
    assert [s.code for s in shrunk.steps] == ["eager.maximum(a0, c0)"]
    assert shrunk.returns == ("t2",) and shrunk.calls == 1
    assert "return (t2,)" in shrunk.source()


def test_programs_are_deterministic_and_printable():
    a, b = fuzzing.generate(11), fuzzing.generate(11)
    assert a.source() == b.source()
    assert "def f(" in a.source()
    for category in fuzzing.KNOWN_BUGGY:
        assert all(s.category != category for s in a.steps)


def test_compare_values_is_dtype_aware():
    f32 = np.float32
    assert fuzzing.compare_values(np.array([1.0], f32), np.array([1.00001], f32)) is None
    assert fuzzing.compare_values(np.array([1.0], f32), np.array([1.01], f32))
    assert fuzzing.compare_values(np.array([np.nan], f32), np.array([1.0], f32))
    assert fuzzing.compare_values(np.array([np.inf], f32), np.array([-np.inf], f32))
    assert fuzzing.compare_values(np.array([1], np.int32), np.array([1], np.int64))
    assert fuzzing.compare_values(np.array([3], np.int64), np.array([4], np.int64))


# ------------------------------------------------------------------- property-based
UNARY = {
    "exp": lambda x: (x * 0.1).exp(),
    "tanh": lambda x: x.tanh(),
    "sigmoid": lambda x: x.sigmoid(),
    "relu": lambda x: x.relu(),
    "abs": lambda x: x.abs(),
    "neg": lambda x: -x,
    "square": lambda x: x * x,
    "log1p_abs": lambda x: (x.abs() + 1).log(),
}
BINARY = {
    "add": lambda x, y: x + y,
    "sub": lambda x, y: x - y,
    "mul": lambda x, y: x * y,
    "div": lambda x, y: x / (y.abs() + 1),
    "maximum": lambda x, y: eager.maximum(x, y),
    "where": lambda x, y: eager.where(x > y, x, y),
}
REDUCE = {
    "none": lambda z: z,
    "sum": lambda z: z.sum(dim=-1),
    "mean": lambda z: z.mean(),
    "amax": lambda z: z.amax(dim=0, keepdim=True) if z.ndim else z,
    "softmax": lambda z: z.softmax(-1) if z.ndim else z,
}
SHAPES = [((3, 4), (4,)), ((3, 1), (1, 4)), ((2, 3, 4), (3, 4)), ((4,), ())]
finite = st.floats(-8, 8, width=32, allow_subnormal=False)


@st.composite
def programs(draw):
    shape_x, shape_y = draw(st.sampled_from(SHAPES))
    x = draw(arrays(np.float32, shape_x, elements=finite))
    y = draw(arrays(np.float32, shape_y, elements=finite))
    ops = draw(st.lists(st.one_of(st.sampled_from(sorted(UNARY)),
                                  st.sampled_from(sorted(BINARY))), min_size=1, max_size=3))
    reduce = draw(st.sampled_from(sorted(REDUCE)))
    return x, y, ops, reduce


def _body(ops, reduce):
    def f(x, y):
        z = x
        for name in ops:
            z = UNARY[name](z) if name in UNARY else BINARY[name](z, y)
        return REDUCE[reduce](z)
    return f


def _run(fn, x, y):
    xt = eager.tensor(x, requires_grad=True)
    yt = eager.tensor(y, requires_grad=True)
    out = fn(xt, yt)
    (out * out).sum().backward()
    return out, xt.grad, yt.grad


@pytest.mark.parametrize("backend", ["numba", "interpret"])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=programs())
def test_compiled_matches_eager_property(case, backend):
    x, y, ops, reduce = case
    body = _body(ops, reduce)
    expected = _run(body, x, y)
    got = _run(tracer.function(body, backend=backend), x, y)
    for what, e, g in zip(("output", "x.grad", "y.grad"), expected, got):
        if e is None or g is None:
            assert e is None and g is None, what
            continue
        why = fuzzing.compare_values(e.detach().numpy(), g.detach().numpy())
        assert why is None, f"{ops} {reduce} {what}: {why}"
