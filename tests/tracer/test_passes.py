"""The optimization passes (tracer/passes.py) on small hand-built graphs.

Graphs are built with `Builder`, typed by the registry's shape rules; every pass
output is verified and evaluated against the unoptimized graph with a tiny
local evaluator (`evaluate`), so the tests depend on nothing but the IR and the
op registry.
"""
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import eager

from eager.ops import OPS, TensorType
from tracer import logs
from tracer.ir import Eqn, Graph, Literal, Var, VerifyError, infer_eqn, verify
from tracer.passes import PassStep, cse, dce, fold_constants, optimize, simplify

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
I64 = np.dtype(np.int64)
BOOL = np.dtype(np.bool_)


# ----------------------------------------------------------------------------- helpers

class Builder:
    """Builds a Graph equation by equation: `b.mul(x, y)` appends `%n = mul x, y`."""

    def __init__(self, name="f"):
        self.name = name
        self.inputs, self.captures, self.consts, self.eqns = [], [], [], []
        self._count = 0

    def input(self, name, shape, dtype=F32):
        v = Var(name, TensorType(tuple(shape), np.dtype(dtype)))
        self.inputs.append(v)
        return v

    def capture(self, name, shape, dtype=F32):
        v = Var(name, TensorType(tuple(shape), np.dtype(dtype)))
        self.captures.append(v)
        return v

    def const(self, value, dtype=F32):
        arr = np.array(value, dtype=dtype)
        v = Var(f"c{len(self.consts)}", TensorType(arr.shape, arr.dtype))
        self.consts.append((v, arr))
        return v

    def emit(self, op, *inputs, **params):
        t = infer_eqn(op, [x.type for x in inputs], params)
        if OPS[op].control:
            out = tuple(self._new(ti) for ti in t)
        else:
            out = self._new(t)
        self.eqns.append(Eqn(op, tuple(inputs), params, out, f"t.py:{len(self.eqns) + 1}"))
        return out

    def __getattr__(self, op):
        if op not in OPS:
            raise AttributeError(op)
        return lambda *inputs, **params: self.emit(op, *inputs, **params)

    def build(self, *outputs, updates=(), update_targets=()):
        return Graph(self.name, tuple(self.inputs), tuple(self.captures), tuple(self.consts),
                     tuple(self.eqns), tuple(outputs), tuple(updates), tuple(update_targets))

    def _new(self, t):
        v = Var(str(self._count), t)
        self._count += 1
        return v


def lit(value, dtype=F32):
    return Literal.of(value, dtype)


def evaluate(graph, *args, captures=()):
    """Reference semantics: run each equation's numpy impl; returns outputs + updates."""
    env = {}
    for v, a in zip(graph.inputs, args):
        env[id(v)] = np.asarray(a)
    for v, a in zip(graph.captures, captures):
        env[id(v)] = np.asarray(a)
    for v, a in graph.consts:
        assert a.shape == v.type.shape and a.dtype == v.type.dtype, v
        env[id(v)] = a

    def value(x):
        return x.value if isinstance(x, Literal) else env[id(x)]

    for e in graph.eqns:
        xs = [value(x) for x in e.inputs]
        with np.errstate(all="ignore"):
            outs = _run(e, xs)
        for o, a in zip(e.outs, outs):
            assert a.shape == tuple(o.type.shape) and a.dtype == o.type.dtype, (e.op, o)
            env[id(o)] = a
    return tuple(value(x) for x in graph.results)


def _run(e, xs):
    # Control flow as tracer/control.py records it: cond inputs are the predicate, the
    # operands, then the true and the false branch's captures; while_loop inputs are the
    # loop variables, then the cond and the body graph's captures.
    p = e.params
    if e.op == "cond":
        n, n_true = p["n_operands"], len(p["true_graph"].captures)
        operands, caps = xs[1:1 + n], xs[1 + n:]
        if xs[0]:
            return evaluate(p["true_graph"], *operands, captures=caps[:n_true])
        return evaluate(p["false_graph"], *operands, captures=caps[n_true:])
    if e.op == "while_loop":
        n, n_cond = p["n_carry"], len(p["cond_graph"].captures)
        state, cond_caps, body_caps = xs[:n], xs[n:n + n_cond], xs[n + n_cond:]
        while evaluate(p["cond_graph"], *state, captures=cond_caps)[0]:
            state = evaluate(p["body_graph"], *state, captures=body_caps)
        return state
    return (np.asarray(OPS[e.op].impl(*xs, **e.params)),)


def random_args(graph, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(v.type.shape).astype(v.type.dtype) for v in graph.inputs]


def assert_same_results(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.shape == y.shape and x.dtype == y.dtype
        # every rewrite is exact, so bit-for-bit equal (NaN == NaN here)
        np.testing.assert_array_equal(x, y, strict=True)


def check(pass_, graph, **kwargs):
    """Run a pass; check it verified, didn't touch its input, and computes the same values."""
    text = str(graph)
    out = pass_(graph, **kwargs)
    assert str(graph) == text, "a pass mutated its input"
    verify(out)
    args = random_args(graph)
    caps = random_args(Graph("c", graph.captures))
    eager.manual_seed(1)  # random ops must draw the same numbers before and after
    before = evaluate(graph, *args, captures=caps)
    eager.manual_seed(1)
    assert_same_results(before, evaluate(out, *args, captures=caps))
    return out


def body(text):
    return textwrap.dedent(text).strip("\n")


# ----------------------------------------------------------------------------- dce

def test_dce_drops_dead_equations_and_consts_but_keeps_the_signature():
    b = Builder()
    x = b.input("x", (4,))
    unused = b.input("unused", (4,))
    w = b.capture("w", (4,))
    c = b.const([1, 2, 3, 4])
    b.const([5, 6, 7, 8])  # never used
    dead = b.exp(x)
    b.mul(dead, c)
    y = b.add(x, w)
    g = b.build(y)
    out = check(dce, g)
    assert out.inputs == (x, unused) and out.captures == (w,)
    assert str(out) == body("""
        def f(%x: f32[4], %unused: f32[4]) -> f32[4]:
          capture %w: f32[4]
          %2 = add %x, %w                           f32[4]           t.py:3
          return %2
    """)
    assert c not in [v for v, _ in out.consts]


def test_dce_keeps_what_updates_use():
    b = Builder()
    x = b.input("x", (3,))
    w = b.capture("w", (3,))
    new_w = b.sub(w, b.mul(x, lit(0.5)))
    b.tanh(x)
    g = b.build(x, updates=(new_w,), update_targets=(0,))
    out = check(dce, g)
    assert [e.op for e in out.eqns] == ["mul", "sub"]
    assert "update %w <- %1" in str(out)


def test_dce_keeps_dead_random_equations():
    b = Builder()
    x = b.input("x", (3,))
    noise = b.normal(shape=(3,), dtype=F32)
    b.add(x, noise)  # dead, and removable
    b.uniform(shape=(2,), dtype=F32)
    g = b.build(b.neg(x))
    out = dce(g)
    verify(out)
    assert [e.op for e in out.eqns] == ["normal", "uniform", "neg"]


def test_dce_returns_the_same_graph_when_nothing_is_dead():
    b = Builder()
    x = b.input("x", (3,))
    g = b.build(b.exp(x))
    assert dce(g) is g


# ----------------------------------------------------------------------------- cse

def test_cse_merges_equal_equations_and_renames_uses():
    b = Builder()
    x = b.input("x", (2, 3))
    a1 = b.mul(x, lit(2.0))
    a2 = b.mul(x, lit(2.0))  # same op, operands (Literal by value), params
    s1 = b.sum(a1, axes=(1,), keepdim=False)
    s2 = b.sum(a2, axes=(1,), keepdim=False)
    s3 = b.sum(a2, axes=(0,), keepdim=False)  # other params: stays
    y = b.add(s1, s2)
    g = b.build(y, s3)
    out = check(cse, g)
    assert str(out) == body("""
        def f(%x: f32[2,3]) -> (f32[2], f32[3]):
          %0 = mul %x, 2.0:f32                      f32[2,3]         t.py:1
          %2 = sum[axes=(1,), keepdim=False] %0     f32[2]           t.py:3
          %4 = sum[axes=(0,), keepdim=False] %0     f32[3]           t.py:5
          %5 = add %2, %2                           f32[2]           t.py:6
          return %5, %4
    """)


def test_cse_distinguishes_literal_values_and_operand_order():
    b = Builder()
    x = b.input("x", (3,))
    y = b.input("y", (3,))
    g = b.build(b.mul(x, lit(2.0)), b.mul(x, lit(3.0)), b.sub(x, y), b.sub(y, x))
    assert cse(g) is g


def test_cse_never_merges_random_equations():
    b = Builder()
    r1 = b.uniform(shape=(3,), dtype=F32)
    r2 = b.uniform(shape=(3,), dtype=F32)
    g = b.build(b.sub(r1, r2))
    assert cse(g) is g


def test_cse_merges_equal_consts():
    b = Builder()
    x = b.input("x", (2,))
    c0 = b.const([1.0, 2.0])
    c1 = b.const([1.0, 2.0])
    c2 = b.const([1.0, 2.0], F64)
    y0 = b.add(x, c0)
    y1 = b.add(x, c1)
    g = b.build(b.mul(y0, y1), c2)
    out = check(cse, g)
    assert [v for v, _ in out.consts] == [c0, c2]
    assert [e.op for e in out.eqns] == ["add", "mul"]
    assert out.eqns[1].inputs == (y0, y0)


def test_cse_leaves_unhashable_params_alone():
    b = Builder()
    x = b.input("x", (4,))
    e1 = Eqn("getitem", (x,), {"index": [slice(0, 2, 1)]}, Var("a", TensorType((2,), F32)))
    e2 = Eqn("getitem", (x,), {"index": [slice(0, 2, 1)]}, Var("b", TensorType((2,), F32)))
    g = Graph("f", (x,), eqns=(e1, e2), outputs=(e1.out, e2.out))
    assert cse(g) is g


# ----------------------------------------------------------------------------- constant folding

def test_fold_scalar_arithmetic_into_literals():
    b = Builder()
    x = b.input("x", (3,))
    five = b.add(lit(2.0), lit(3.0))
    ten = b.mul(five, lit(2.0))
    g = b.build(b.mul(x, ten))
    out = check(fold_constants, g)
    assert str(out) == body("""
        def f(%x: f32[3]) -> f32[3]:
          %2 = mul %x, 10.0:f32                     f32[3]           t.py:3
          return %2
    """)
    assert out.eqns[0].inputs[1].value.dtype == F32


def test_fold_const_arrays_into_a_new_const_reusing_the_output_var():
    b = Builder()
    x = b.input("x", (2, 3))
    c0 = b.const([[1, 2, 3], [4, 5, 6]])
    c1 = b.const([10, 20, 30])
    prod = b.mul(c0, c1)
    flat = b.reshape(prod, shape=(6,))
    back = b.reshape(flat, shape=(2, 3))
    g = b.build(b.add(x, back))
    out = check(fold_constants, g)
    assert [e.op for e in out.eqns] == ["add"]
    consts = dict((v.name, a) for v, a in out.consts)
    np.testing.assert_array_equal(consts["0"], [[10, 40, 90], [40, 100, 180]])
    np.testing.assert_array_equal(consts["2"], consts["0"])
    assert consts["1"].shape == (6,) and consts["1"].dtype == F32
    # the dead intermediate consts are dce's job
    assert [v.name for v, _ in dce(out).consts] == ["2"]


def test_fold_turns_0d_consts_into_literals_and_keeps_dtypes():
    b = Builder()
    x = b.input("x", (3,), I64)
    c = b.const(7, I64)
    g = b.build(b.add(x, c), b.cast(c, dtype=F64))
    out = check(fold_constants, g)
    assert out.outputs[1].__class__ is Literal and out.outputs[1].type == TensorType((), F64)
    assert str(dce(out)) == body("""
        def f(%x: i64[3]) -> (i64[3], f64[]):
          %0 = add %x, 7:i64                        i64[3]           t.py:1
          return %0, 7.0:f64
    """)


def test_fold_leaves_large_results_random_ops_and_failures():
    b = Builder()
    big = b.const(np.ones(4096 + 1))
    b2 = b.mul(big, big)  # too large to materialize
    small = b.mul(b.const(np.ones(4096)), lit(2.0))  # exactly the limit: folded
    r = b.randint(shape=(2,), dtype=I64, low=0, high=5)
    rr = b.add(r, lit(1, I64))  # depends on a random draw
    g = b.build(b2, small, rr)
    out = check(fold_constants, g)
    assert [e.op for e in out.eqns] == ["mul", "randint", "add"]
    assert fold_constants(g, max_size=10000).eqns[0].op == "randint"


def test_fold_matches_eager_ieee_results():
    b = Builder()
    g = b.build(b.div(lit(1.0), lit(0.0)), b.log(lit(-1.0)), b.mul(lit(np.inf), lit(0.0)))
    out = fold_constants(g)
    assert out.eqns == ()
    values = [x.value for x in out.outputs]
    assert values[0] == np.inf and np.isnan(values[1]) and np.isnan(values[2])


# ----------------------------------------------------------------------------- simplify

def test_simplify_removes_neutral_elements():
    b = Builder()
    x = b.input("x", (2, 3))
    one = b.const(np.ones((2, 3)))
    y = b.mul(x, lit(1.0))
    y = b.mul(lit(1.0), y)
    y = b.add(y, lit(-0.0))
    y = b.add(lit(-0.0), y)
    y = b.sub(y, lit(0.0))
    y = b.div(y, lit(1.0))
    y = b.mul(one, y)  # a const of ones with x's shape: no broadcast hidden
    y = b.exp(y)
    g = b.build(y)
    out = check(simplify, g)
    assert str(dce(out)) == body("""
        def f(%x: f32[2,3]) -> f32[2,3]:
          %7 = exp %x                               f32[2,3]         t.py:8
          return %7
    """)


def test_simplify_keeps_neutral_ops_that_broadcast_or_are_not_neutral():
    b = Builder()
    x = b.input("x", (3,))
    ones = b.const(np.ones((2, 3)))
    outs = [
        b.mul(x, ones),            # broadcasts x to (2, 3)
        b.add(b.const(np.zeros((4, 1))), x),
        b.sub(lit(0.0), x),        # 0 - x is -x, not x
        b.div(lit(1.0), x),
        b.mul(x, b.const([1.0, 1.0, 2.0])),  # not all ones
        b.pow(x, lit(1.0)),        # not a rule
        b.add(x, lit(0.0)),        # -0.0 + 0.0 is +0.0: only -0.0 is neutral in a sum
        b.add(lit(0.0), x),
        b.sub(x, lit(-0.0)),       # x - (-0.0) is x + 0.0
    ]
    g = b.build(*outs)
    assert simplify(g) is g
    got = evaluate(optimize(g), np.array([-0.0, 1.0, -2.0], F32))
    for y in got[-3:]:
        assert not np.signbit(y[0])


def test_simplify_does_not_fold_x_times_zero():
    b = Builder()
    x = b.input("x", (4,))
    g = b.build(b.mul(x, lit(0.0)), b.mul(lit(0.0), x))
    out = optimize(g)
    assert [e.op for e in out.eqns] == ["mul", "mul"]
    got = evaluate(out, np.array([np.nan, np.inf, -np.inf, 2.0], F32))
    for y in got:
        assert np.isnan(y[:3]).all() and y[3] == 0.0


def test_simplify_neg_neg_and_cast_to_same_dtype():
    b = Builder()
    x = b.input("x", (3,))
    y = b.neg(b.neg(x))
    z = b.cast(y, dtype=F32)
    w = b.neg(b.neg(b.neg(z)))
    g = b.build(b.add(z, w))
    out = check(simplify, g)
    assert str(dce(out)) == body("""
        def f(%x: f32[3]) -> f32[3]:
          %5 = neg %x                               f32[3]           t.py:6
          %6 = add %x, %5                           f32[3]           t.py:7
          return %6
    """)


def test_simplify_composes_reshapes():
    b = Builder()
    x = b.input("x", (2, 3, 4))
    r = b.reshape(x, shape=(6, 4))
    r = b.reshape(r, shape=(24,))
    r = b.reshape(r, shape=(4, 6))
    back = b.reshape(b.reshape(x, shape=(24,)), shape=(2, 3, 4))
    same = b.reshape(x, shape=(2, 3, 4))
    g = b.build(r, back, same)
    out = check(simplify, g)
    assert str(dce(out)) == body("""
        def f(%x: f32[2,3,4]) -> (f32[4,6], f32[2,3,4], f32[2,3,4]):
          %2 = reshape[shape=(4,6)] %x              f32[4,6]         t.py:3
          return %2, %x, %x
    """)


def test_simplify_composes_permutes():
    b = Builder()
    x = b.input("x", (2, 3, 4))
    p = b.permute(x, perm=(1, 2, 0))       # (3, 4, 2)
    p = b.permute(p, perm=(2, 0, 1))       # (2, 3, 4): identity overall
    q = b.permute(b.permute(x, perm=(2, 0, 1)), perm=(0, 2, 1))  # (4, 3, 2)
    g = b.build(p, q, b.permute(x, perm=(0, 1, 2)))
    out = check(simplify, g)
    assert str(dce(out)) == body("""
        def f(%x: f32[2,3,4]) -> (f32[2,3,4], f32[4,3,2], f32[2,3,4]):
          %3 = permute[perm=(2,1,0)] %x             f32[4,3,2]       t.py:4
          return %x, %3, %x
    """)


def test_simplify_composes_broadcasts():
    b = Builder()
    x = b.input("x", (3, 1))
    y = b.broadcast_to(b.broadcast_to(x, shape=(3, 4)), shape=(2, 3, 4))
    z = b.broadcast_to(x, shape=(3, 1))
    g = b.build(y, z)
    out = check(simplify, g)
    assert str(dce(out)) == body("""
        def f(%x: f32[3,1]) -> (f32[2,3,4], f32[3,1]):
          %1 = broadcast_to[shape=(2,3,4)] %x       f32[2,3,4]       t.py:2
          return %1, %x
    """)


# ----------------------------------------------------------------------------- control flow

def _branch(name, fn, *types, captures=()):
    b = Builder(name)
    ins = [b.input(f"a{i}", t.shape, t.dtype) for i, t in enumerate(types)]
    caps = [b.capture(f"k{i}", t.shape, t.dtype) for i, t in enumerate(captures)]
    return b.build(*fn(b, *ins, *caps))


def _cond(b, pred, operands, true_graph, false_graph, true_caps=(), false_caps=()):
    inputs = (pred, *operands, *true_caps, *false_caps)
    return b.emit("cond", *inputs, true_graph=true_graph, false_graph=false_graph,
                  n_operands=len(operands))


def _while(b, carry, cond_graph, body_graph):
    return b.emit("while_loop", *carry, cond_graph=cond_graph, body_graph=body_graph,
                  n_carry=len(carry))


def test_passes_recurse_into_cond_branches_and_rename_its_inputs():
    t = TensorType((3,), F32)

    def true_fn(b, a):
        dup1 = b.exp(b.mul(a, lit(1.0)))
        dup2 = b.exp(a)
        b.tanh(a)  # dead
        return (b.add(dup1, dup2),)

    def false_fn(b, a):
        return (b.neg(b.neg(a)),)

    b = Builder()
    x = b.input("x", (3,))
    p = b.input("p", (), BOOL)
    x1 = b.add(x, lit(1.0))
    x2 = b.add(x, lit(1.0))
    (y,) = _cond(b, p, [x2], _branch("true_fn", true_fn, t), _branch("false_fn", false_fn, t))
    g = b.build(b.mul(x1, y))
    out = optimize(g)
    assert str(out) == body("""
        def f(%x: f32[3], %p: bool[]) -> f32[3]:
          %0 = add %x, 1.0:f32                      f32[3]           t.py:1
          %2 = cond[n_operands=1] %p, %0            f32[3]           t.py:3
            true_graph:
              def true_fn(%a0: f32[3]) -> f32[3]:
                %1 = exp %a0                        f32[3]           t.py:2
                %4 = add %1, %1                     f32[3]           t.py:5
                return %4
            false_graph:
              def false_fn(%a0: f32[3]) -> f32[3]:
                return %a0
          %3 = mul %0, %2                           f32[3]           t.py:4
          return %3
    """)
    for pred in (True, False):
        args = [np.arange(3, dtype=F32), np.array(pred)]
        assert_same_results(evaluate(g, *args), evaluate(out, *args))


def test_dead_control_flow_is_removed_unless_it_draws_random_numbers():
    t = TensorType((), F32)

    def cond_fn(b, i):
        return (b.lt(i, lit(3.0)),)

    def body_fn(b, i):
        return (b.add(i, lit(1.0)),)

    def noisy_body(b, i):
        return (b.add(i, b.uniform(shape=(), dtype=F32)),)

    b = Builder()
    x = b.input("x", ())
    _while(b, [x], _branch("c", cond_fn, t), _branch("b", body_fn, t))
    _while(b, [x], _branch("c", cond_fn, t), _branch("b", noisy_body, t))
    g = b.build(x)
    out = dce(g)
    verify(out)
    assert [e.op for e in out.eqns] == ["while_loop"]
    assert out.eqns[0].params["body_graph"].eqns[0].op == "uniform"


def test_sub_graph_captures_stay_even_when_unused():
    t = TensorType((3,), F32)

    def true_fn(b, a, k):
        return (b.add(a, b.mul(k, lit(0.0))),)  # x*0 stays: k is still used

    def false_fn(b, a, k):
        b.exp(k)  # dead: after dce k is unused, but it is bound by position
        return (a,)

    b = Builder()
    x = b.input("x", (3,))
    w = b.capture("w", (3,))
    p = b.gt(b.sum(x, axes=(0,), keepdim=False), lit(0.0))
    (y,) = _cond(b, p, [x], _branch("t", true_fn, t, captures=[t]),
                 _branch("f", false_fn, t, captures=[t]), [w], [w])
    g = b.build(y)
    out = check(optimize, g)
    false_graph = out.eqns[-1].params["false_graph"]
    assert false_graph.eqns == () and len(false_graph.captures) == 1
    assert out.eqns[-1].inputs == (out.eqns[-1].inputs[0], x, w, w)
    for sign in (1, -1):
        args = [sign * np.ones(3, F32)]
        caps = [np.full(3, np.inf, F32)]
        assert_same_results(evaluate(g, *args, captures=caps),
                            evaluate(out, *args, captures=caps))


def test_while_loop_is_not_merged_but_gets_renamed_inputs():
    t = TensorType((), F32)

    def cond_fn(b, i):
        return (b.lt(i, lit(3.0)),)

    def body_fn(b, i):
        return (b.add(i, lit(1.0)),)

    b = Builder()
    x = b.input("x", ())
    s1 = b.mul(x, x)
    s2 = b.mul(x, x)
    loops = [_while(b, [s], _branch("c", cond_fn, t), _branch("b", body_fn, t))[0]
             for s in (s1, s2)]
    g = b.build(*loops)
    out = check(cse, g)
    assert [e.op for e in out.eqns] == ["mul", "while_loop", "while_loop"]
    assert out.eqns[1].inputs == out.eqns[2].inputs == (s1,)


# ----------------------------------------------------------------------------- pipeline

def _mlp_like():
    b = Builder("mlp")
    x = b.input("x", (4, 3))
    w = b.capture("w", (3, 5))
    bias = b.const(np.full(5, -0.0))  # (-0.0 is the neutral element of +; 0.0 is not)
    h = b.matmul(b.mul(x, lit(1.0)), w)
    h = b.add(h, bias)                       # zeros broadcast to h's type: h + -0 -> h
    scale = b.mul(lit(2.0), lit(0.5))
    h1 = b.mul(b.relu(h), scale)
    h2 = b.mul(b.relu(h), scale)
    t = b.permute(b.permute(b.add(h1, h2), perm=(1, 0)), perm=(1, 0))
    b.exp(t)                                 # dead
    return b.build(b.reshape(b.reshape(t, shape=(20,)), shape=(2, 10)))


def test_optimize_pipeline_printout():
    g = _mlp_like()
    steps = []
    out = optimize(g, log=steps.append)
    assert str(out) == body("""
        def mlp(%x: f32[4,3]) -> f32[2,10]:
          capture %w: f32[3,5]
          %1 = matmul %x, %w                        f32[4,5]         t.py:2
          %4 = relu %1                              f32[4,5]         t.py:5
          %8 = add %4, %4                           f32[4,5]         t.py:9
          %13 = reshape[shape=(2,10)] %8            f32[2,10]        t.py:14
          return %13
    """)
    assert all(isinstance(s, PassStep) for s in steps)
    # round 2: fold_constants made `mul %4, 1.0:f32` for simplify; round 3 changes nothing
    assert [(s.name, s.round) for s in steps] == [
        ("simplify", 1), ("fold_constants", 1), ("cse", 1), ("dce", 1), ("simplify", 2)]
    assert steps[0].before is g and steps[-1].after is out
    assert optimize(out) is out  # a fixed point
    check(optimize, g)


def test_optimize_preserves_values_on_random_graphs():
    unary = ["neg", "exp", "tanh", "sigmoid", "abs", "relu"]
    binary = ["add", "sub", "mul", "div", "maximum"]
    removed = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)

        def pick(seq):
            return seq[rng.integers(len(seq))]

        b = Builder()
        vals = [b.input("x", (2, 3)), b.input("y", (2, 3)), b.const(rng.standard_normal((2, 3))),
                b.const(np.ones((2, 3))), b.const(np.zeros((2, 3)))]
        rows = [b.const(np.ones(3)), b.const(np.zeros(3))]  # broadcast against (2, 3)
        for _ in range(25):
            kind = rng.integers(7)
            a = pick(vals)
            if kind == 0:
                vals.append(b.emit(pick(unary), a))
            elif kind == 1:
                other = pick([pick(vals), pick(vals), pick(rows), lit(pick([0.0, 1.0, 2.0]))])
                args = (a, other) if rng.random() < 0.5 else (other, a)
                vals.append(b.emit(pick(binary), *args))
            elif kind == 2:
                vals.append(b.reshape(b.reshape(a, shape=(3, 2)), shape=(2, 3)))
            elif kind == 3:
                vals.append(b.permute(b.permute(a, perm=(1, 0)), perm=(1, 0)))
            elif kind == 4:
                vals.append(b.cast(b.cast(a, dtype=F64), dtype=F32))
            elif kind == 5:  # a duplicate of an earlier equation, for cse
                e = pick(b.eqns) if b.eqns else None
                if e is not None:
                    dup = b.emit(e.op, *e.inputs, **e.params)
                    if dup.type.shape == (2, 3):
                        vals.append(dup)
            else:
                s = b.sum(a, axes=(0,), keepdim=True)
                vals.append(b.broadcast_to(b.broadcast_to(s, shape=(2, 3)), shape=(2, 3)))
        g = b.build(vals[-1], vals[-2], vals[-7])
        out = check(optimize, g)
        removed += len(g.eqns) - len(out.eqns)
    assert removed > 40 * 10  # the passes had real work to do


def test_every_pass_returns_the_same_graph_when_idle():
    b = Builder()
    x = b.input("x", (2, 3))
    c = b.const(np.arange(6.0).reshape(2, 3))
    g = b.build(b.reshape(b.add(x, c), shape=(3, 2)))
    graphs = [g, optimize(_mlp_like())]
    for g in graphs:
        for pass_ in (simplify, fold_constants, cse, dce):
            assert pass_(g) is g, pass_.__name__
        assert optimize(g) is g


def test_updates_are_renamed_like_outputs():
    b = Builder()
    x = b.input("x", (3,))
    w = b.capture("w", (3,))
    m = b.capture("m", (3,))
    step1 = b.mul(x, lit(0.1))
    step2 = b.mul(x, lit(0.1))
    new_w = b.sub(w, step1)
    new_m = b.mul(b.add(m, step2), lit(1.0))
    g = b.build(new_w, updates=(new_w, new_m), update_targets=(0, 1))
    out = check(optimize, g)
    assert str(out) == body("""
        def f(%x: f32[3]) -> f32[3]:
          capture %w: f32[3]
          capture %m: f32[3]
          %0 = mul %x, 0.1:f32                      f32[3]           t.py:1
          %2 = sub %w, %0                           f32[3]           t.py:3
          %3 = add %m, %0                           f32[3]           t.py:4
          update %w <- %2
          update %m <- %3
          return %2
    """)


def test_optimize_blames_the_pass_that_breaks_the_graph():
    def bad_pass(graph):  # retypes an equation's output: verify must catch it
        e = graph.eqns[0]
        wrong = Var("bad", TensorType((7,), F32))
        return graph.replace(eqns=(Eqn(e.op, e.inputs, e.params, wrong, e.loc),),
                             outputs=(wrong,))

    b = Builder()
    g = b.build(b.exp(b.input("x", (3,))))
    with pytest.raises(VerifyError, match="pass bad_pass .round 1. produced an invalid graph"):
        optimize(g, passes=[("bad_pass", bad_pass)])


# ----------------------------------------------------------------------------- logging

@pytest.fixture
def tracer_logs(monkeypatch):
    def set_topics(value):
        monkeypatch.setenv("TRACER_LOGS", value)
        logs.refresh()
    yield set_topics
    monkeypatch.undo()
    logs.refresh()


def test_logs_enabled_reads_the_comma_list(tracer_logs):
    tracer_logs(" ir , passes")
    assert logs.enabled("passes") and logs.enabled("ir") and not logs.enabled("fusion")
    tracer_logs("all")
    assert logs.enabled("kernels")
    tracer_logs("")
    assert not logs.enabled("passes")


def test_optimize_logs_ir_before_and_after_each_changing_pass(tracer_logs, caplog):
    tracer_logs("passes")
    caplog.set_level(logging.INFO, logger="tracer")
    optimize(_mlp_like())
    records = [r for r in caplog.records if r.name == "tracer.passes"]
    assert [r.getMessage().split(" ", 1)[0] for r in records] == [
        "simplify", "fold_constants", "cse", "dce", "simplify"]
    first = records[0].getMessage()
    assert first.startswith("simplify (round 1) on mlp: 14 -> 11 equations\n--- before simplify\n"
                            "def mlp(")
    assert "--- after simplify\ndef mlp(" in first
    assert all(r.levelno == logging.INFO for r in records)


def test_optimize_is_silent_without_tracer_logs(tracer_logs, caplog):
    tracer_logs("fusion")
    caplog.set_level(logging.INFO, logger="tracer")
    optimize(_mlp_like())
    assert not [r for r in caplog.records if r.name.startswith("tracer")]

    def expensive():
        raise AssertionError("built a message nobody reads")

    logs.log("passes", expensive)  # lazy: never called while the topic is off


def test_tracer_logs_env_prints_to_stderr_without_logging_config(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent("""
        from tracer import logs
        logs.log("passes", "hello from passes")
        logs.log("fusion", "not shown")
    """))
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, TRACER_LOGS="passes", PYTHONPATH=str(root))
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "[tracer.passes] hello from passes\n"
