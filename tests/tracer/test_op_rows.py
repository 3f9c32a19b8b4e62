"""Per-op facts live in the op's registry row (eager.ops.OpDef) and its lowering row
(codegen.lower.LOWERING); the layers look them up instead of keeping lists of op names.
These tests keep the two kinds of rows consistent with each other and with what the
layers do with them."""
import numpy as np

import eager
import tracer
from codegen.lower import LOWERING
from eager.ops import OPS
from tracer.interpret import run_graph
from tracer.ir import infer_eqn, verify


def test_fused_reductions_are_the_rows_with_a_reduce_kind():
    assert {n for n, op in OPS.items() if op.reduce} == \
        {n for n, row in LOWERING.items() if row.how == "reduce"}
    assert {op.reduce for op in OPS.values() if op.reduce} == {"sum", "max"}


def test_views_lowered_as_index_arithmetic_are_view_rows():
    for name, row in LOWERING.items():
        if row.how == "view":
            assert OPS[name].view is True, name


def test_vmath_rows_are_float_elementwise_primitives_vmath_implements():
    from codegen.lower import VMATH_NAMES

    for name, row in LOWERING.items():
        if row.vmath:
            # (one vmath argument per operand: hypot and logaddexp take two)
            assert OPS[name].category == "elementwise" and OPS[name].nin in (1, 2), name
            assert (name, "float32") in VMATH_NAMES and (name, "float64") in VMATH_NAMES
            assert row.expensive, f"{name}: a vmath call costs more than a buffer load"


def test_tensor_methods_come_from_rows_marked_method():
    x = eager.tensor([0.25, 0.5])
    for name, op in OPS.items():
        if op.method:
            assert getattr(eager.Tensor, name).__name__ == name
    np.testing.assert_allclose(x.log1p().numpy(), np.log1p(x.numpy()), rtol=1e-6)
    np.testing.assert_allclose(x.expm1().numpy(), np.expm1(x.numpy()), rtol=1e-6)


def test_recomputable_rows_are_cheap_and_differentiable():
    for name, op in OPS.items():
        if op.recompute:
            assert not op.control and op.category in ("elementwise", "shape", "indexing"), name


def test_cond_and_while_loop_are_control_rows():
    @tracer.function(backend="interpret")
    def f(x):
        y = tracer.cond(x.sum() > 0, lambda v: v * 2, lambda v: -v, x)
        return tracer.while_loop(lambda v, i: i < 3, lambda v, i: (v + 1, i + 1),
                                 (y, eager.tensor(0)))[0]

    x = eager.tensor([1.0, 2.0])
    with eager.no_grad():
        cf = f.get_concrete_function(x)
    ops = {e.op: e for e in cf.raw_graph.eqns}
    for name in ("cond", "while_loop"):
        row = OPS[name]
        assert row.control and row.run is not None and row.vjp is None, name
        e = ops[name]
        # the verifier's type rule and the interpreter's evaluation are the row's
        assert infer_eqn(name, [v.type for v in e.inputs], e.params) == \
            tuple(o.type for o in e.outs)
    verify(cf.raw_graph)
    assert not cf.raw_graph.captures
    got = run_graph(cf.raw_graph, [x.numpy()])
    np.testing.assert_allclose(got[0], [5.0, 7.0])
