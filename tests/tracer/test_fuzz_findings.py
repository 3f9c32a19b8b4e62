"""Regression tests for what the differential fuzzer (tests/fuzzing.py) found.

Each is the fuzzer's shrunk program, written as a user would. Findings that belong to
another item of issue 13 and are not fixed on this branch are strict xfails naming the
item, so they flip when the fix lands (then drop the matching KNOWN_BUGGY category).
"""
import numpy as np
import pytest

import eager
import tracer
from tests.fuzzing import compare_values

BACKENDS = ["numba", "interpret"]


def _values(ts):
    return [None if t is None else t.detach().numpy().copy() for t in ts]


def assert_same(body, make_inputs, backend, backward=None, requires_grad=True):
    """`body` compiled gives eager's outputs, input values and input .grad (and outputs'
    requires_grad unless `requires_grad` is False: finding F2 below)."""
    results = []
    for fn in (body, tracer.function(body, backend=backend)):
        inputs = make_inputs()
        outs = fn(*inputs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        if backward is not None:
            backward(outs).backward()
        results.append((_values(outs), [o.requires_grad for o in outs], _values(inputs),
                        _values([t.grad for t in inputs])))
    (eo, erg, ei, eg), (co, crg, ci, cg) = results
    assert crg == erg or not requires_grad, f"requires_grad: eager {erg}, compiled {crg}"
    for what, es, cs in (("output", eo, co), ("input", ei, ci), (".grad", eg, cg)):
        for k, (e, c) in enumerate(zip(es, cs)):
            if e is None or c is None:
                assert e is None and c is None, f"{what} {k}: eager {e}, compiled {c}"
                continue
            why = compare_values(e, c)
            assert why is None, f"{what} {k}: {why}"


def _seeded(*shapes, grad=False):
    def make():
        rng = np.random.default_rng(0)
        return [eager.tensor(rng.standard_normal(s).astype(np.float32), requires_grad=grad)
                for s in shapes]
    return make


# ---------------------------------------------------------------- fixed on this branch
@pytest.mark.parametrize("backend", BACKENDS)
def test_an_input_the_output_does_not_reach_keeps_grad_none(backend):
    # F1: compiled backward gave b a zero .grad; eager leaves it None.
    assert_same(lambda a, b: (a * 2).sum(), _seeded((3,), (3,), grad=True), backend,
                backward=lambda outs: outs[0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_differentiating_one_of_two_outputs_leaves_the_others_inputs_alone(backend):
    # F1 again: each output's backward reaches only the inputs it depends on (the
    # comparison feeds no gradient to b, so eager leaves b.grad None).
    assert_same(lambda a, b: ((a * 2).sum(), (b > 0).float() * a + b.exp()),
                _seeded((3,), (3,), grad=True), backend, backward=lambda outs: outs[0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_same_value_returned_twice(backend):
    # F4: IndexError on numba (the one-kernel direct call returned one array for two).
    def twice(x):
        y = x * 2
        return y, y

    def recomputed(x):
        return (x.abs() + 0.5).sqrt(), (x.abs() + 0.5).sqrt()

    assert_same(twice, _seeded((3, 4)), backend)
    assert_same(recomputed, _seeded((0, 4)), backend)


@pytest.mark.parametrize("body", [lambda x: x / x.sum(dim=-1),
                                  lambda x: x - x.amax(dim=-1),
                                  lambda x: x.relu() / eager.logsumexp(x.relu(), dim=-1)],
                         ids=["sum", "amax", "logsumexp"])
@pytest.mark.parametrize("shape", [(3, 3), (4, 4, 4)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_row_reduction_without_keepdim_broadcasts_along_the_last_axis(body, shape, backend):
    # F5 (the fuzzer's program 665, a LayerNorm output over a square batch): numpy aligns
    # the (3,) row sums with the columns of (3, 3); the row kernel read them per row.
    assert_same(body, _seeded(shape), backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_amax_gradient_of_a_value_backward_would_recompute(backend):
    # F6 (the property test): backward recomputed x * y / (|y| + 1) with the divisor's
    # reciprocal, one bit off the forward's value, so amax's mask x == max was all False
    # and the gradient vanished on numba.
    def make():
        x = np.full((2, 3, 4), -3.3621807, np.float32)
        x[0, 0, 0] = 2.3449953
        y = np.linspace(-5, 8, 12, dtype=np.float32).reshape(3, 4)
        return [eager.tensor(x, requires_grad=True), eager.tensor(y, requires_grad=True)]

    assert_same(lambda x, y: ((x * y) / (y.abs() + 1)).amax(dim=0, keepdim=True), make,
                backend, backward=lambda outs: (outs[0] * outs[0]).sum())


# ---------------------------------------------------------------- F2, F3
def _raised(fn):
    try:
        fn()
    except RuntimeError as exc:
        return type(exc), str(exc).split(" (at ")[0]
    return None


@pytest.mark.parametrize("backend", BACKENDS)
def test_loss_after_backward_inside_keeps_requires_grad(backend):
    # F2: compiled gave requires_grad False; eager's loss keeps its (freed) graph.
    def step(w):
        loss = (w.tanh() * w).mean()
        loss.backward()
        return loss
    assert_same(step, _seeded((3, 4), grad=True), backend)
    compiled = tracer.function(step, backend=backend)
    for _ in range(2):  # (the trace, then a cached call)
        results = []
        for fn in (step, compiled):
            (w,) = _seeded((3, 4), grad=True)()
            loss = fn(w)
            assert loss.grad_fn is not None and type(loss.item()) is float
            assert not loss.detach().requires_grad
            results.append((_raised(loss.backward), w.grad.numpy().copy()))
        (e_err, e_grad), (c_err, c_grad) = results
        assert e_err is not None and "a second time" in e_err[1]
        assert c_err == e_err
        np.testing.assert_allclose(c_grad, e_grad, rtol=1e-6)
    with eager.no_grad():  # no graph to run backward through: both raise alike
        errors = [_raised(lambda fn=fn: fn(*_seeded((3, 4), grad=True)()))
                  for fn in (step, compiled)]
        assert errors[0] is not None and errors[1] == errors[0]


def _clamp_saved_temp(a, c):
    t = (a.abs() + 0.5).sqrt()   # sqrt saves its output
    t.clamp_(-1.0, 1.0)
    return t * c


def _mul_arg(a, c):
    out = a.exp() * c            # mul saves both operands
    c.add_(1.0)
    return out


_captured = []


def _mul_capture(a, c):
    out = a * _captured[0]
    _captured[0].mul_(2.0)
    return out


@pytest.mark.parametrize("body", [_clamp_saved_temp, _mul_arg, _mul_capture])
@pytest.mark.parametrize("backend", BACKENDS)
def test_inplace_on_a_value_saved_for_backward_raises(body, backend):
    # F3: eager's backward raises; compiled differentiated the functional graph instead.
    def make():
        _captured[:] = [eager.ones(3)]
        return eager.ones(3, requires_grad=True), eager.full((3,), 2.0)

    compiled = tracer.function(body, backend=backend)
    for _ in range(2):  # (the trace, then a cached call)
        errors = [_raised(lambda fn=fn: fn(*make()).sum().backward()) for fn in (body, compiled)]
        assert errors[0] is not None and "modified by an inplace operation" in errors[0][1]
        assert errors[1] == errors[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_inplace_on_a_saved_value_then_backward_inside_raises(backend):
    def step(a):
        t = (a.abs() + 0.5).sqrt()
        t.clamp_(-1.0, 1.0)
        t.sum().backward()
        return t.detach()

    compiled = tracer.function(step, backend=backend)
    errors = [_raised(lambda fn=fn: fn(eager.ones(3, requires_grad=True)))
              for fn in (step, compiled)]
    assert errors[0] is not None and "modified by an inplace operation" in errors[0][1]
    assert errors[1] == errors[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_copy_of_a_capture_into_a_saved_value_then_backward_inside_raises(backend):
    c = eager.tensor(np.linspace(-1, 1, 4, dtype=np.float32), requires_grad=True)

    def step(a):
        t = ((c * 0.5 + 1).abs() + 0.5).sqrt()
        t.copy_(c)
        loss = ((t ** 2).sum(dim=0, keepdim=True) ** 2).sum()
        loss.backward()
        return loss.detach()

    compiled = tracer.function(step, backend=backend)
    errors = [_raised(lambda fn=fn: fn(eager.ones(3, 4, requires_grad=True)))
              for fn in (step, compiled)]
    assert errors[0] is not None and "modified by an inplace operation" in errors[0][1]
    assert errors[1] is not None and errors[1][0] == errors[0][0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_inplace_after_the_saved_use_ends_still_compiles(backend):
    # An in-place op on a value no backward rule saved keeps the compiled backward.
    def f(a):
        t = a * 2.0                  # mul by a constant saves nothing of t
        t.add_(1.0)
        return (t * a).sum()

    assert_same(f, _seeded((3,), grad=True), backend, backward=lambda outs: outs[0])
    compiled = tracer.function(f, backend=backend)
    compiled(*_seeded((3,), grad=True)())
    assert compiled.get_concrete_function(*_seeded((3,), grad=True)()).backward is not None


# ---------------------------------------------------------------- other items of issue 13
@pytest.mark.parametrize("body", [lambda x: x.sum(dim=-2, keepdim=True),
                                  lambda x: eager.logsumexp(x, dim=0),
                                  lambda x: x.softmax(0)],
                         ids=["sum_keepdim", "logsumexp", "softmax"])
def test_reduction_over_a_leading_size_one_dim(body):
    assert_same(body, _seeded((1, 4)), "numba")


@pytest.mark.parametrize("backend", BACKENDS)
def test_stack_of_mixed_dtypes(backend):
    assert_same(lambda a: eager.stack([a > 0, a], dim=0), _seeded((4,)), backend)


@pytest.mark.parametrize("case", ["row_of_base", "reshape_of_base", "permute_of_temp"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_view_sees_an_update_of_its_base(case, backend):
    def row_of_base(c):
        t = c[0]
        c.add_(t)
        return t

    def reshape_of_base(c):
        t = c.reshape(-1)
        c.mul_(0.0)
        return t

    def permute_of_temp(c):
        t = c.abs()
        v = t.permute(1, 0)
        t.zero_()
        return v

    body = {"row_of_base": row_of_base, "reshape_of_base": reshape_of_base,
            "permute_of_temp": permute_of_temp}[case]
    assert_same(body, _seeded((3, 4)), backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_slice_assignment_of_an_argument(backend):
    def f(a, b):
        b[1:] = a.tanh()
        return b * 1

    assert_same(f, _seeded((4,), (3, 4)), backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_returning_the_argument_keeps_requires_grad(backend):
    assert_same(lambda a, b: a, _seeded((3, 1), (4,), grad=True), backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_adam_betas_changed_between_calls(backend):
    def train(compiled):
        eager.manual_seed(0)
        model = eager.nn.Linear(4, 3)
        opt = eager.optim.Adam(model.parameters(), lr=0.01, eps=1e-3)

        def step(x):
            opt.zero_grad()
            loss = (model(x) ** 2).mean()
            loss.backward()
            opt.step()
            return loss

        fn = tracer.function(step, backend=backend) if compiled else step
        x = eager.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
        fn(x)
        opt.param_groups[0]["betas"] = (0.8, 0.99)
        fn(x)
        fn(x)
        return model.weight.detach().numpy().copy()

    assert compare_values(train(False), train(True)) is None


def test_var_backward_of_a_0d_tensor():
    # The fuzzer's programs 444 and 553: numba gave 1.0 and -2.0, not only -0.0.
    def make():
        return [eager.tensor(np.float32(1.5), requires_grad=True)]

    assert_same(lambda a: a.var(dim=-1), make, "numba", backward=lambda outs: outs[0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_0d_capture_read_before_its_in_place_update(backend):
    # The fuzzer's program 117.
    def run(compiled):
        count = eager.tensor(3)
        total = eager.tensor(75)

        def f(x):
            ratio = count / total
            count.zero_()
            return ratio + x

        fn = tracer.function(f, backend=backend) if compiled else f
        return fn(eager.zeros(2)).numpy(), count.numpy()

    (e_out, e_count), (c_out, c_count) = run(False), run(True)
    assert compare_values(e_count, c_count) is None
    assert compare_values(e_out, c_out) is None


def test_gradient_of_inf_minus_inf_through_relu():
    # The fuzzer's program 714 (NaN/inf inputs): the gradient at x = inf is NaN eagerly.
    def step(x):
        d = x - x.relu()
        loss = (d * d).sum()
        loss.backward()
        return loss

    def make():
        return [eager.tensor(np.array([np.inf, 1.0, -2.0], np.float32), requires_grad=True)]

    assert_same(step, make, "numba", requires_grad=False)


# ---------------------------------------------------------------- fresh seeds (issue 17)
@pytest.mark.parametrize("view", [lambda t: t.diagonal(), lambda t: t.unfold(-1, 2, 1),
                                  lambda t: t.diagonal(offset=1, dim1=-2, dim2=-1)],
                         ids=["diagonal", "unfold", "diagonal_offset"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_strided_view_differentiated_outside_the_function(view, backend):
    # The fuzzer's program 40048: `(-a0).diagonal()` of an argument that requires grad,
    # backward outside: both backends raised VerifyError (the vjp's scatter positions were
    # a captured array, which the joint forward-backward graph has no input for).
    assert_same(lambda a: view(-a), _seeded((3, 4), grad=True), backend,
                backward=lambda outs: (outs[0] * outs[0]).sum())


@pytest.mark.parametrize("backend", BACKENDS)
def test_where_with_one_argument_is_refused_naming_the_line(backend):
    # The fuzzer's programs 30049, 30068 (category where_cond, left out by default): the
    # output's size depends on the values, so a trace refuses it rather than guess.
    def f(a):
        return eager.where(a > 0)[0]

    with pytest.raises(tracer.TracingError, match=r"test_fuzz_findings.py:\d+: where\(cond\)"):
        tracer.function(f, backend=backend)(eager.ones(3))


# ---------------------------------------------------------------- open (issue 17, `sound`)
@pytest.mark.parametrize("backend", BACKENDS)
def test_backward_inside_through_a_captured_tensor_with_history(backend):
    # Eagerly the backward goes on into the graph that made `c` (w.grad = 2). Traced, it
    # ran that outside graph on traced values: w.grad was left holding a traced value.
    # Now the trace refuses a backward through nodes made before it and the call runs
    # eagerly, with a warning (tests/tracer/test_grad_before_call.py).
    def run(compiled):
        w = eager.tensor(np.ones(3, np.float32), requires_grad=True)
        c = w * 2

        def f(x):
            loss = (c * x).sum()
            loss.backward()
            return loss.detach()

        fn = tracer.function(f, backend=backend) if compiled else f
        out = fn(eager.ones(3))
        return out.numpy(), w.grad.numpy()

    (e_out, e_grad), (c_out, c_grad) = run(False), run(True)
    assert compare_values(e_out, c_out) is None and compare_values(e_grad, c_grad) is None


@pytest.mark.parametrize("backend", BACKENDS + ["check"])
def test_capture_made_to_require_grad_in_place_then_called_again(backend):
    # c0.add_(h) gives the captured c0 a history; the next call's backward reaches it again
    # after the first call's backward freed it: eager raises, compiled returned a value.
    def run(compiled):
        eager.manual_seed(0)
        c0 = eager.tensor(np.linspace(-1, 1, 16).reshape(4, 4))
        model = eager.nn.Linear(4, 4)

        def f(a0):
            h = model(a0)
            c0.add_(h)
            t1 = (c0.abs() + 1).log()
            loss = (t1 * t1).mean() + (h * h).mean()
            loss.backward()
            return loss.detach()

        fn = f if not compiled else tracer.function(f, check=True) if backend == "check" \
            else tracer.function(f, backend=backend)
        errors = []
        for _ in range(2):
            try:
                fn(eager.ones(4))
            except RuntimeError as exc:
                errors.append(str(exc).split(" (at ")[0])
        return errors

    assert run(True) == run(False)


@pytest.mark.parametrize("backend", BACKENDS)
def test_argument_given_a_history_in_place_keeps_it_after_the_call(backend):
    # x.add_(h) with h requiring grad: eager leaves the caller's x with h's history (a
    # backward through x after the call reaches w); compiled wrote only x's values.
    def run(compiled):
        w = eager.nn.Parameter(eager.ones(3))

        def f(x):
            h = w * 3
            x.mul_(2)
            x.add_(h)
            return h.sum().detach()

        fn = tracer.function(f, backend=backend) if compiled else f
        seen = []
        for _ in range(2):
            x = eager.ones(3)
            out = fn(x)
            (x * x).sum().backward()
            seen.append((out.item(), x.detach().numpy().tolist(), x.requires_grad,
                         w.grad.numpy().tolist()))
        return seen

    with pytest.warns(RuntimeWarning, match=r"test_fuzz_findings.py:\d+: x gets autograd "
                      r"history inside f"):
        compiled = run(True)
    assert compiled == run(False)


def test_capture_given_a_history_in_place_is_refused_with_fullgraph():
    c0 = eager.zeros(2)
    w = eager.nn.Parameter(eager.ones(2))

    def f(x):
        c0.add_(x * w)
        return x.sum()

    with pytest.raises(tracer.TracingError, match="c0 gets autograd history inside f"):
        tracer.function(f, fullgraph=True)(eager.ones(2))
    assert not c0.requires_grad and c0.numpy().tolist() == [0.0, 0.0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_of_a_value_with_history_cuts_its_gradient(backend):
    def f(a0):
        t1 = eager.where(a0 <= 0.5, a0, 3)
        t1.zero_()
        return t1

    grads = []
    for fn in (f, tracer.function(f, backend=backend)):
        a = eager.tensor(np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4),
                         requires_grad=True)
        out = fn(a)
        assert out.requires_grad
        out.sum().backward()
        grads.append(a.grad.numpy())
    np.testing.assert_array_equal(grads[0], np.zeros((4, 4), np.float32))  # as PyTorch
    np.testing.assert_array_equal(grads[1], grads[0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_fill_with_a_tensor_value_sends_the_gradient_to_the_value(backend):
    # As PyTorch: t.fill_(v) with a 0-d v that requires grad; v's gradient is the sum of the
    # filled tensor's gradient, the old value's is 0 (and an inf in it stays out of both).
    def f(a0, v):
        t1 = a0 * 2
        t1.fill_(v)
        return (t1 * a0).sum()

    results = []
    for fn in (f, tracer.function(f, backend=backend)):
        a = eager.tensor(np.array([[1.0, np.inf], [-2.0, 0.5]], np.float32),
                         requires_grad=True)
        v = eager.tensor(np.float32(3.0), requires_grad=True)
        out = fn(a, v)
        out.backward()
        results.append((out.item(), a.grad.numpy(), v.grad.numpy()))
    (eo, ea, ev), (co, ca, cv) = results
    np.testing.assert_array_equal(ea, np.full((2, 2), 3.0, np.float32))  # only t1 * a0's
    assert float(ev) == float(np.float32(np.inf))  # 1 + inf - 2 + 0.5 summed
    assert eo == co or (np.isnan(eo) and np.isnan(co))
    np.testing.assert_array_equal(ca, ea)
    np.testing.assert_array_equal(cv, ev)


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_of_a_value_with_history_then_used_again(backend):
    # A buffer zeroed in place and then accumulated into: only the accumulation's gradient.
    def f(a0):
        acc = a0 * 3
        acc.zero_()
        acc += a0 * a0
        return acc

    assert_same(f, lambda: [eager.tensor(np.linspace(-1, 1, 6, dtype=np.float32)
                                         .reshape(2, 3), requires_grad=True)],
                backend, backward=lambda outs: outs[0].sum())


def test_fill_with_a_tensor_of_values_raises_as_pytorch():
    with pytest.raises(RuntimeError, match="fill_: takes a number or a 0-dimensional"):
        eager.zeros(3).fill_(eager.ones(3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_bool_add_in_a_fused_kernel_is_an_or(backend):
    # The fuzzer's program 90284: numpy's True + True is True (PyTorch's too); the fused
    # kernel computed 2, and the cat's float32 cast of it gave 2.0.
    def f(a0, a1):
        t0 = a1 + a1
        return eager.cat([a0, t0], dim=-1), (a1 + a1).float() * 3

    assert_same(f, lambda: [eager.ones(3, 1), eager.tensor(np.array([[True], [False],
                                                                        [True]]))],
                backend, requires_grad=False)


@pytest.mark.parametrize("backend", BACKENDS)
def test_inplace_write_through_an_element_of_a_diagonal_view(backend):
    # The fuzzer's program 91141: the write of one element (a 0-d view) of a diagonal
    # view failed to trace ('scatter: src shape () != index shape (1,)').
    def f(a0):
        t1 = a0.diagonal(offset=1, dim1=-2, dim2=-1)
        t1[0].mul_(0.0)
        return t1

    assert_same(f, lambda: [eager.tensor(np.arange(1, 5, dtype=np.float32).reshape(1, 4))],
                backend, requires_grad=False)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_of_two_outputs_through_a_bfloat16_cast_are_summed_before_rounding(backend):
    # The fuzzer's program 17501 (under TRACER_CHECK=1): the compiled backward ran once per
    # output and rounded each output's gradient through the bfloat16 cast, where eager
    # rounds their sum once: with cotangents that cancel, a1.grad was 30% off
    def f(a1):
        t2 = a1.to(eager.bfloat16).float()
        t3 = (t2 * t2).sum(1, keepdim=True)
        return t3.clone(), t3

    with pytest.warns(RuntimeWarning, match="rounds them through a bfloat16 cast"):
        assert_same(f, lambda: [eager.tensor(np.array([[0.3, -0.7, 1.1, 0.05]], np.float32),
                                             requires_grad=True)],
                    backend, backward=lambda outs: (outs[0] * 1.0 + outs[1] * -0.99).sum())
