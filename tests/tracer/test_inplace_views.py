"""In-place ops through views, slice assignment, argument updates and aliasing inside
@tracer.function: the compiled call gives what the eager call gives (outputs, arguments and
captured tensors after each of three calls), on both backends, or raises as eager does.

Each test is written the way a user writes the idiom; `same_as_eager` runs one copy of the
state eagerly and another compiled and compares them after every call.
"""
import warnings

import numpy as np
import pytest

import eager
import tracer

BACKENDS = ["numba", "interpret"]


def _arr(t):
    return np.asarray(t._data if isinstance(t, eager.Tensor) else t)


def _same(a, b, what):
    if isinstance(a, (tuple, list)):
        assert len(a) == len(b), what
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{what}[{i}]")
        return
    x, y = _arr(a), _arr(b)
    assert x.shape == y.shape and x.dtype == y.dtype, (what, x, y)
    np.testing.assert_array_equal(x, y, err_msg=what)


def same_as_eager(make, backend, calls=3):
    """`make()` -> (function, args, state tensors to compare): a fresh copy each time."""
    f_eager, args_eager, state_eager = make()
    f_comp, args_comp, state_comp = make()
    compiled = tracer.function(f_comp, backend=backend)
    for k in range(calls):
        _same(f_eager(*args_eager), compiled(*args_comp), f"output, call {k}")
        _same(state_eager, state_comp, f"state after call {k}")
    return compiled


def one_to_six():
    return eager.arange(1, 7).float()


# ------------------------------------------------------------------ writes through views

@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_through_a_slice_of_a_view_updates_the_argument(backend):
    def make():
        x = one_to_six()

        def f(x):
            x.view(-1)[:3].zero_()
            return x.sum()
        return f, (x,), [x]

    compiled = same_as_eager(make, backend)
    x = one_to_six()
    assert compiled(x).item() == 15.0
    np.testing.assert_array_equal(x.numpy(), [0, 0, 0, 4, 5, 6])


@pytest.mark.parametrize("backend", BACKENDS)
def test_mul_of_an_element_updates_the_argument(backend):
    def make():
        x = one_to_six()

        def f(x):
            x[0].mul_(5)
            return x.sum()
        return f, (x,), [x]

    compiled = same_as_eager(make, backend)
    x = one_to_six()
    assert compiled(x).item() == 25.0
    np.testing.assert_array_equal(x.numpy(), [5, 2, 3, 4, 5, 6])


@pytest.mark.parametrize("backend", BACKENDS)
def test_captured_tensor_updated_through_an_element_every_call(backend):
    def make():
        w = one_to_six()

        def f(x):
            w[0].add_(1)
            return (w * x).sum()
        return f, (eager.ones(6),), [w]

    f, args, (w,) = make()
    compiled = tracer.function(f, backend=backend)
    for k in range(3):
        compiled(*args)
        np.testing.assert_array_equal(w.numpy(), [2 + k, 2, 3, 4, 5, 6])
    same_as_eager(make, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_writes_through_transpose_reshape_and_rows_reach_the_base(backend):
    def make():
        x = one_to_six().reshape(2, 3)

        def f(x):
            x.T[0].fill_(-1.0)          # column 0, through a transpose
            x.reshape(3, 2)[2].mul_(10)  # the last two elements, through a reshape
            x[1, 1:].add_(0.5)
            return x * 1
        return f, (x,), [x]

    same_as_eager(make, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_other_views_see_writes_to_the_base_and_to_each_other(backend):
    def make():
        x = one_to_six()

        def f(x):
            head, tail = x[:4], x[2:]
            x.add_(1)             # the base: both views see it
            head.mul_(2)          # overlaps tail at x[2:4]
            return head * 1, tail.sum(), x * 1
        return f, (x,), [x]

    same_as_eager(make, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_view_made_before_the_write_is_read_after_it(backend):
    def make():
        w = one_to_six()

        def f(x):
            first = w[:2]
            w.mul_(x)
            return first + 0
        return f, (eager.full((6,), 2.0),), [w]

    same_as_eager(make, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_reshape_that_copies_eagerly_does_not_write_back(backend):
    def make():
        x = one_to_six().reshape(2, 3)

        def f(x):
            flat = x.T.reshape(-1)  # not contiguous: numpy (and PyTorch) copy here
            flat.zero_()
            return flat + x.sum()
        return f, (x,), [x]

    same_as_eager(make, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_detach_shares_the_write(backend):
    def make():
        x = one_to_six()

        def f(x):
            x.detach()[1:3].fill_(0.0)
            return x * 2
        return f, (x,), [x]

    same_as_eager(make, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_writes_through_dot_data_reach_the_tensor(backend):
    def make():
        x = one_to_six()

        def f(x):
            x.data.mul_(2)
            x.data[0] = 0.5
            return x * 1
        return f, (x,), [x]

    same_as_eager(make, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_updating_an_expanded_argument_raises_like_eager(backend):
    def g(x):
        x.add_(1)
        return x * 1

    expanded = eager.ones(3)[None].expand(2, 3)
    with pytest.raises(RuntimeError, match="read-only"):
        g(expanded)
    compiled = tracer.function(g, backend=backend)
    compiled(eager.ones(2, 3))  # traced on a writable argument
    with pytest.raises(RuntimeError, match="read-only.*test_inplace_views.py"):
        compiled(expanded)
    np.testing.assert_array_equal(expanded.numpy(), np.ones((2, 3)))


def test_writing_an_expanded_view_raises_like_eager():
    x = eager.ones(3)
    with pytest.raises(RuntimeError, match="read-only"):
        x.expand(2, 3).add_(1)

    @tracer.function(backend="interpret")
    def f(x):
        x.expand(2, 3).add_(1)
        return x * 1

    with pytest.raises(RuntimeError, match="read-only.*test_inplace_views.py"):
        f(eager.ones(3))


def test_autograd_write_through_a_view_is_refused_as_eagerly():
    def body(x, w):
        y = x * 1
        y[:2].mul_(w)
        return y.sum()

    x, w = eager.ones(4), eager.tensor(2.0, requires_grad=True)
    with pytest.raises(RuntimeError, match="shares storage"):
        body(x, w)
    with pytest.raises(RuntimeError, match="shares storage"):
        tracer.function(body, backend="interpret")(x, w)


# ------------------------------------------------------------------ slice assignment

@pytest.mark.parametrize("backend", BACKENDS)
def test_slice_assignment_of_an_argument(backend):
    def make():
        x, v = one_to_six(), eager.tensor([9.0, 8.0])

        def f(x, v):
            x[1:3] = v
            x[-1] = 7
            x[::2] = x[::2] * 10
            return x * 1
        return f, (x, v), [x, v]

    same_as_eager(make, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_slice_assignment_of_a_captured_matrix_broadcasts_and_casts(backend):
    def make():
        w = eager.zeros(3, 4)

        def f(row):
            w[1] = row           # float32 row
            w[:, 0] = 5          # a Python int, broadcast down a column
            w[2:, 1:3] = eager.tensor([[1.5, 2.5]])
            return w.sum(0)
        return f, (eager.arange(4).float(),), [w]

    same_as_eager(make, backend)


def test_slice_assignment_errors_name_the_line():
    @tracer.function(backend="interpret")
    def bad_shape(x):
        x[1:3] = eager.ones(3)
        return x * 1

    with pytest.raises(ValueError, match="test_inplace_views.py"):
        bad_shape(one_to_six())

    @tracer.function(backend="interpret")
    def index_tensor(x, i):
        x[None, i] = 0.0  # (an index tensor with a new axis: refused, naming the line)
        return x * 1

    with pytest.raises(NotImplementedError, match="None.*test_inplace_views.py"):
        index_tensor(one_to_six(), eager.tensor([0, 2]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_slice_assignment_with_autograd_matches_eager_gradients(backend):
    def step(x, v):
        y = x * x
        y[1:3] = v * 3
        loss = (y * eager.arange(6).float()).sum()
        loss.backward()
        return loss

    results = []
    for fn in (step, tracer.function(step, backend=backend)):
        grads = []
        for _ in range(2):
            x = eager.arange(6).float().requires_grad_()
            v = eager.tensor([1.0, -2.0], requires_grad=True)
            loss = fn(x, v)
            grads.append((loss, x.grad, v.grad))
        results.append(grads)
    _same(results[0], results[1], "loss and gradients")


def test_eager_slice_assignment_with_autograd():
    x = eager.arange(6).float().requires_grad_()
    v = eager.tensor([1.0, -2.0], requires_grad=True)
    y = x * 2
    y[1:3] = v
    (y * eager.arange(6).float()).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0, 0, 0, 6, 8, 10])
    np.testing.assert_array_equal(v.grad.numpy(), [1, 2])


# ------------------------------------------------------------------ updates of arguments

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("idiom", ["mul_", "mul_add_", "copy_"])
def test_argument_updated_and_returned_reaches_the_caller(backend, idiom):
    def make():
        x = one_to_six()

        def f(x):
            if idiom == "mul_":
                x.mul_(2)
            elif idiom == "mul_add_":
                x.mul_(2).add_(1)
            else:
                x.copy_(x * 3)
            return x
        return f, (x,), [x]

    same_as_eager(make, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_argument_updated_by_a_function_whose_output_needs_grad(backend):
    def step(x, w):
        x.mul_(2)
        x[0] = 5.0
        return (x * w).sum()

    results = []
    for fn in (step, tracer.function(step, backend=backend)):
        x, w = eager.arange(3).float(), eager.ones(3, requires_grad=True)
        for _ in range(3):
            loss = fn(x, w)
            loss.backward()
        results.append((loss, x, w.grad))
    _same(results[0], results[1], "loss, argument and gradient")


# ------------------------------------------------------------------ aliasing

ALIASED = pytest.mark.filterwarnings("ignore:.*shares memory:RuntimeWarning")


@ALIASED
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_same_tensor_passed_twice(backend):
    def make():
        a = one_to_six()

        def f(x, y):
            x.mul_(2)
            return y * 1
        return f, (a, a), [a]

    same_as_eager(make, backend)


@ALIASED
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_tensor_and_a_view_of_it(backend):
    def make():
        b = one_to_six()

        def f(x, y):
            x.mul_(2)
            return y * 1
        return f, (b, b[1:]), [b]

    same_as_eager(make, backend)


@ALIASED
@pytest.mark.parametrize("backend", BACKENDS)
def test_an_argument_that_is_also_a_captured_tensor_updated_in_place(backend):
    def make():
        w = one_to_six()

        def f(x):
            w.add_(1)
            return x * 1
        return f, (w,), [w]

    same_as_eager(make, backend)


@ALIASED
@pytest.mark.parametrize("backend", BACKENDS)
def test_two_captured_tensors_sharing_memory(backend):
    def make():
        w = one_to_six()
        tail = w[3:]

        def f(x):
            w.mul_(x)
            return tail * 1
        return f, (eager.full((6,), 2.0),), [w, tail]

    same_as_eager(make, backend)


@ALIASED
@pytest.mark.parametrize("backend", BACKENDS)
def test_aliasing_after_compiled_calls_without_it(backend):
    w = one_to_six()

    def f(x):
        w.add_(1)
        return x * 1

    compiled = tracer.function(f, backend=backend)
    other = eager.zeros(6)
    for _ in range(2):
        compiled(other)  # compiled, no aliasing: the fast path is set up
    np.testing.assert_array_equal(w.numpy(), [3, 4, 5, 6, 7, 8])
    out = compiled(w)  # eagerly: w += 1, then returns w * 1
    np.testing.assert_array_equal(out.numpy(), [4, 5, 6, 7, 8, 9])
    np.testing.assert_array_equal(w.numpy(), [4, 5, 6, 7, 8, 9])
    compiled(other)
    np.testing.assert_array_equal(w.numpy(), [5, 6, 7, 8, 9, 10])
    assert compiled.trace_count == 1


def test_aliased_call_runs_eagerly_and_says_so_then_separate_calls_compile():
    @tracer.function(backend="interpret")
    def f(x, y):
        x.mul_(2)
        return y * 1

    a = one_to_six()
    with pytest.warns(RuntimeWarning, match="argument x shares memory with argument y"):
        out = f(a, a)
    np.testing.assert_array_equal(out.numpy(), [2, 4, 6, 8, 10, 12])
    b, c = one_to_six(), one_to_six()
    np.testing.assert_array_equal(f(b, c).numpy(), [1, 2, 3, 4, 5, 6])
    np.testing.assert_array_equal(b.numpy(), [2, 4, 6, 8, 10, 12])
    assert f.trace_count == 1
    with pytest.raises(RuntimeError, match="shares memory"):
        f.get_concrete_function(b, c)(a, a)


def test_disjoint_slices_of_one_tensor_still_compile():
    @tracer.function(backend="interpret")
    def f(x, y):
        x.mul_(2)
        return y * 1

    base = one_to_six()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        np.testing.assert_array_equal(f(base[:3], base[3:]).numpy(), [4, 5, 6])
    np.testing.assert_array_equal(base.numpy(), [2, 4, 6, 4, 5, 6])


# ------------------------------------------------------------------ fusion and in-place plans
# These pass today; they kill mutants of codegen that would silently read a value through a
# view at the wrong element (fuse._internal_read_ok, inplace_plan._aligned_reads).

@pytest.mark.parametrize("body", ["transpose", "reverse"])
def test_fusion_never_reads_an_internal_value_through_a_view(body):
    def make():
        def f(x):
            y = x * 2
            return y.T + y if body == "transpose" else y[::-1] + y
        return f, (one_to_six()[:4].reshape(2, 2) * eager.ones(2, 2),), []

    same_as_eager(make, "numba", calls=1)


@pytest.mark.parametrize("body", ["transpose", "reverse"])
def test_inplace_plan_never_overwrites_what_a_view_still_reads(body):
    def make():
        w = one_to_six()[:4].reshape(2, 2) * 1

        def f(x):
            if body == "transpose":
                w.copy_(w.T * 2 + 1)
            else:
                w.copy_(w[::-1] + w)
            return x * 1
        return f, (eager.ones(2),), [w]

    same_as_eager(make, "numba")


# ------------------------------------------------------------------ symbolic sizes, control flow

def test_write_through_a_column_view_with_a_symbolic_batch():
    @tracer.function(input_signature=[tracer.TensorSpec((None, 3))], backend="numba")
    def f(x):
        x[:, 0].zero_()
        return x.sum(1)

    for n in (2, 5):
        x = eager.ones(n, 3)
        np.testing.assert_array_equal(f(x).numpy(), np.full(n, 2.0))
        np.testing.assert_array_equal(x.numpy()[:, 0], np.zeros(n))
    assert f.trace_count == 1


def test_writes_to_operands_inside_a_cond_body_are_tracing_errors():
    @tracer.function(backend="interpret")
    def f(x):
        return tracer.cond(x.sum() > 0, lambda a: (a[0].add_(1), a * 1)[1],
                           lambda a: a * 2, x)

    x = eager.ones(3)
    with pytest.raises(tracer.TracingError, match=r"test_inplace_views.py:\d+: an in-place"):
        f(x)
    np.testing.assert_array_equal(x.numpy(), np.ones(3))


# ------------------------------------------------------------------ copies of captured tensors

@pytest.mark.parametrize("backend", BACKENDS)
def test_clone_of_a_captured_tensor_is_taken_at_every_call(backend):
    def make():
        w = eager.tensor([-0.0, 1.0, 2.0])

        def f(x):
            before = w.clone()
            w.add_(x)
            return before * 1
        return f, (eager.ones(3),), [w]

    same_as_eager(make, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_copy_between_captured_tensors_happens_at_every_call(backend):
    def make():
        a, b = eager.arange(3).float(), eager.ones(3)

        def f(x):
            a.copy_(b)         # a takes b's value before the update below
            b.add_(x)
            a[0] = eager.zeros(())
            return a * 1
        return f, (eager.ones(3),), [a, b]

    same_as_eager(make, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_copy_of_a_transposed_captured_tensor_then_updating_it(backend):
    def make():
        a, b = eager.zeros(2, 2), eager.arange(4).float().reshape(2, 2)

        def f(x):
            a.copy_(b.T)
            b.mul_(x)
            return x * 1
        return f, (eager.full((2, 2), 3.0),), [a, b]

    same_as_eager(make, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_copy_of_a_captured_tensor_then_updating_it_elementwise(backend):
    def make():
        a, b = eager.zeros(4), eager.arange(4).float()

        def f(x):
            a.copy_(b)
            b.mul_(x)  # one elementwise kernel, which could write b's array in place
            return x * 1
        return f, (eager.full((4,), 3.0),), [a, b]

    same_as_eager(make, backend)


# ------------------------------------------------------------------ random view programs

def _random_view_program(rng):
    """(view steps from x to a target, the in-place op on it, then a write to x?, what to
    read after): a small random program of the kind above."""
    steps, ndim = [], 2
    for _ in range(int(rng.integers(1, 4))):
        kind = str(rng.choice(["slice", "step", "reverse", "int", "T", "flat"]))
        if kind in ("int", "T") and ndim < 2:
            continue
        steps.append((kind, int(rng.integers(ndim)), int(rng.integers(1, 3))))
        ndim = ndim - 1 if kind == "int" else 1 if kind == "flat" else ndim
    return (steps, str(rng.choice(["mul_", "add_", "zero_", "setitem", "copy_"])),
            bool(rng.integers(2)), str(rng.choice(["x", "rows", "transposed"])))


def _view_program(steps, op, then_base, read):
    def f(x, y):
        rows, transposed = x[1:3], x.T
        v = x
        for kind, axis, k in steps:
            key = [slice(None)] * v.ndim
            if kind == "slice":
                key[axis] = slice(k, v.shape[axis])
            elif kind == "step":
                key[axis] = slice(None, None, 2)
            elif kind == "reverse":
                key[axis] = slice(None, None, -1)
            elif kind == "int":
                key[axis] = min(k, v.shape[axis] - 1)
            v = v.T if kind == "T" else v.reshape(-1) if kind == "flat" else v[tuple(key)]
        if op == "mul_":
            v.mul_(3.0)
        elif op == "add_":
            v.add_(y.sum())
        elif op == "zero_":
            v.zero_()
        elif op == "setitem":
            v[...] = 7.0
        else:
            v.copy_(v * 2 + 1)
        if then_base:
            x.add_(1.0)
        return {"x": x, "rows": rows, "transposed": transposed}[read] * 1, v * 1
    return f


@pytest.mark.parametrize("backend,count", [("interpret", 60), ("numba", 6)])
def test_random_programs_writing_through_views(backend, count):
    rng = np.random.default_rng(13)
    for _ in range(count):
        program = _random_view_program(rng)
        f, g = _view_program(*program), _view_program(*program)
        args = (eager.arange(24).float().reshape(4, 6), eager.ones(2))
        cargs = (eager.arange(24).float().reshape(4, 6), eager.ones(2))
        state = [args[0]]
        compiled = tracer.function(g, backend=backend)
        for k in range(2):
            _same(f(*args), compiled(*cargs), f"{program}, call {k}")
            _same(state, [cargs[0]], f"{program}: x after call {k}")
