"""A compiled call that raises at run time leaves the state eager leaves.

Eagerly, the ops before the failing one have run: BatchNorm has updated its running
statistics and counted the batch, `zero_grad()` has unset every .grad, an in-place update
has been applied; the ops after it have not. A compiled program checks values where its
ops run (a class index out of range, an integer divisor 0, a binary_cross_entropy input
outside [0, 1]); when such a check raises, the program has changed no tensor yet (codegen
writes nothing in place before the last step that may raise), and tracer.function runs
the call eagerly: the user gets eager's error and eager's state, on both backends and in
check mode.
"""
import numpy as np
import pytest

import eager
import eager.nn.functional as F
import tracer
from eager import nn

MODES = ["numba", "interpret", "check"]


def _compiled(fn, mode):
    if mode == "eager":
        return fn
    if mode == "check":
        return tracer.function(fn, check=5)
    return tracer.function(fn, backend=mode)


def _state(named):
    """name -> array (None for an unset .grad) of every tensor in `named`."""
    out = {}
    for name, t in named.items():
        out[name] = None if t is None else np.array(t.detach().numpy(), copy=True)
    return out


def _assert_same_state(eager_state, state, what):
    assert eager_state.keys() == state.keys()
    for name, e in eager_state.items():
        c = state[name]
        if e is None or c is None:
            assert e is None and c is None, f"{what}: {name}: eager {e}, compiled {c}"
            continue
        np.testing.assert_allclose(c, e, rtol=1e-5, atol=1e-6, err_msg=f"{what}: {name}")


def _run(mode, build, calls, skip_state=()):
    """Build fresh state, make each call (args, raises) and return the error types seen and
    the state after every call (but calls `skip_state`)."""
    fn, tensors = build()
    f = _compiled(fn, mode)
    seen = []
    for args, raises in calls:
        if raises:
            with pytest.raises(Exception) as info:
                f(*args())
            seen.append(type(info.value).__name__)
        else:
            out = f(*args())
            seen.append(None)
            tensors_after = dict(tensors(), output=out)
        if len(seen) // 2 in skip_state:
            seen.append({})
        else:
            seen.append(_state(tensors_after if not raises else tensors()))
    return seen


def _agree(mode, build, calls, skip_state=()):
    expected = _run("eager", build, calls, skip_state)
    got = _run(mode, build, calls, skip_state)
    for k, (e, c) in enumerate(zip(expected, got)):
        if isinstance(e, dict):
            _assert_same_state(e, c, f"after call {k // 2}")
        else:
            assert c == e, f"call {k // 2}: eager raised {e}, compiled {c}"


def _x():
    return [eager.tensor(np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32))]


def _bn_classifier(optimizer):
    def build():
        eager.manual_seed(0)
        # (no bias before BatchNorm: its gradient is rounding noise, which Adam would scale
        # up to steps of about lr in either direction)
        model = nn.Sequential(nn.Linear(4, 4, bias=False), nn.BatchNorm1d(4), nn.ReLU(),
                              nn.Linear(4, 3))
        opt = optimizer(model.parameters())

        def step(x, y):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss

        def tensors():
            named = dict(model.state_dict())
            named.update({f"{n}.grad": p.grad for n, p in model.named_parameters()})
            for k, (p, s) in enumerate(opt.state.items()):
                named.update({f"opt{k}.{key}": v for key, v in s.items()
                              if isinstance(v, eager.Tensor)})
            return named
        return step, tensors
    return build


def _labels(*values):
    return lambda: _x() + [eager.tensor(np.array(values))]


GOOD, BAD = _labels(0, 1, 2, 1, 0), _labels(0, 1, 7, 1, 0)


@pytest.mark.parametrize("mode", MODES)
def test_batchnorm_step_whose_loss_raises_keeps_the_statistics_eager_keeps(mode):
    # Before the fix: interpret left running_mean/num_batches_tracked as before the call,
    # and both backends kept every .grad that eager's zero_grad() had unset.
    build = _bn_classifier(lambda ps: eager.optim.SGD(ps, lr=0.1, momentum=0.9))
    _agree(mode, build, [(GOOD, False), (BAD, True), (GOOD, False)])


@pytest.mark.parametrize("mode", MODES)
def test_first_call_that_raises_leaves_eagers_state_with_adam(mode):
    # The failing call is the one that traces. Its trace made the optimizer's state
    # (zeros, step 0), which eager makes on the next call: the failing call takes it back
    # (and drops its trace, which holds that state), the next call traces again.
    build = _bn_classifier(lambda ps: eager.optim.Adam(ps, lr=0.01))
    _agree(mode, build, [(BAD, True), (GOOD, False), (GOOD, False)])


@pytest.mark.parametrize("mode", MODES)
def test_first_call_that_raises_leaves_no_optimizer_state(mode):
    build = _bn_classifier(lambda ps: eager.optim.Adam(ps, lr=0.01))
    _agree(mode, build, [(BAD, True)])


@pytest.mark.parametrize("mode", ["numba", "check"])
def test_first_call_that_raises_leaves_no_momentum_buffer_with_sgd(mode):
    # SGD's first step copies the gradient into a new momentum buffer (a trace that runs
    # once): a failing first call leaves opt.state empty, as eager does.
    build = _bn_classifier(lambda ps: eager.optim.SGD(ps, lr=0.1, momentum=0.9))
    _agree(mode, build, [(BAD, True), (GOOD, False), (GOOD, False)])


@pytest.mark.parametrize("mode", ["numba", "interpret"])
def test_first_calls_that_raise_twice_then_one_that_runs_with_adamw(mode):
    # Each failing call traces anew and takes its state back; the trace of the good call
    # makes the state the later calls step.
    build = _bn_classifier(lambda ps: eager.optim.AdamW(ps, lr=0.01, amsgrad=True))
    _agree(mode, build, [(BAD, True), (BAD, True), (GOOD, False), (GOOD, False)])


@pytest.mark.parametrize("mode", MODES)
def test_optimizer_step_then_a_raising_loss_keeps_the_step(mode):
    # The step's updates come before the failing check: eager keeps them (the numba
    # program computes them into buffers, not in place, when a check follows).
    def build():
        eager.manual_seed(0)
        model = nn.Linear(4, 3)
        opt = eager.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        def step(x, y):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
            return F.cross_entropy(model(x), y).detach()

        def tensors():
            named = dict(model.state_dict())
            named.update({f"{n}.grad": p.grad for n, p in model.named_parameters()})
            named.update({f"momentum{k}": s["momentum_buffer"]
                          for k, s in enumerate(opt.state.values())})
            return named
        return step, tensors
    _agree(mode, build, [(GOOD, False), (BAD, True), (GOOD, False)])


def _inplace_then(raising):
    def build():
        p = eager.ones(4)
        q = eager.zeros(4)

        def f(a, b):
            p.add_(a)
            out = raising(a, b)
            q.add_(1.0)          # after the failing op: eager never gets here
            return out

        return f, lambda: {"p": p, "q": q}
    return build


def _ints(*divisor):
    return lambda: [eager.tensor(np.arange(4, dtype=np.float32)),
                    eager.tensor(np.array(divisor, dtype=np.int64))]


@pytest.mark.parametrize("mode", MODES)
def test_inplace_update_then_integer_division_by_zero(mode):
    build = _inplace_then(lambda a, b: (a.to(eager.int64) // b).to(eager.float32) + a)
    _agree(mode, build, [(_ints(1, 2, 3, 4), False), (_ints(1, 0, 3, 4), True),
                         (_ints(2, 2, 2, 2), False)])


def _probs(*values):
    return lambda: [eager.tensor(np.array(values, dtype=np.float32)),
                    eager.tensor(np.array([0, 1, 1, 0], dtype=np.float32))]


@pytest.mark.parametrize("mode", MODES)
def test_inplace_update_then_binary_cross_entropy_outside_0_1(mode):
    build = _inplace_then(lambda a, b: F.binary_cross_entropy(a * 0.5, b))
    _agree(mode, build, [(_probs(0.1, 0.5, 0.9, 1.0), False),
                         (_probs(0.1, 0.5, 3.0, 1.0), True),
                         (_probs(0.2, 0.2, 0.2, 0.2), False)])


@pytest.mark.parametrize("mode", MODES)
def test_dropout_before_a_raising_lookup_draws_as_eager_does(mode):
    # Eager draws the dropout mask, then the embedding lookup raises; the program checks
    # the index argument first (before drawing): the generator must still advance.
    def build():
        eager.manual_seed(0)
        drop, emb = nn.Dropout(0.5), nn.Embedding(3, 4)

        def step(x, idx):
            return drop(x) + emb(idx).sum(0)

        return step, lambda: {"next draw": eager.rand(3)}
    _agree(mode, build, [(_rows(0, 1, 2), False), (_rows(0, 5, 2), True),
                         (_rows(2, 1, 0), False)])


def _rows(*values):
    return lambda: _x()[:1] + [eager.tensor(np.array(values))]


@pytest.mark.parametrize("backend", ["numba", "interpret"])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_over_a_symbolic_dim_that_is_0_is_empty_as_eagerly(backend, op):
    # Before: the program's max over the empty row raised (amax's error, or numpy's
    # "zero-size array to reduction operation maximum" from the numba backend).
    def f(x):
        return getattr(F, op)(x * 2.0, dim=1)

    c = tracer.function(f, backend=backend,
                        input_signature=[tracer.TensorSpec((3, None), eager.float32)])
    c(eager.ones(3, 4))
    empty = eager.ones(3, 0)
    out = c(empty)
    assert out.shape == f(empty).shape == (3, 0)
    np.testing.assert_allclose(c(eager.ones(3, 5)).numpy(), f(eager.ones(3, 5)).numpy(),
                               rtol=1e-6)
    # a max over the empty dim itself raises, as eagerly
    m = tracer.function(lambda x: x.amax(1), backend=backend,
                        input_signature=[tracer.TensorSpec((3, None), eager.float32)])
    m(eager.ones(3, 4))
    with pytest.raises(Exception) as compiled_error:
        m(empty)
    with pytest.raises(Exception) as eager_error:
        empty.amax(1)
    assert type(compiled_error.value) is type(eager_error.value)


@pytest.mark.parametrize("mode", MODES)
def test_error_found_while_tracing_leaves_the_in_place_update_before_it(mode):
    # The fuzzer's program 50016: the input is clamped in place after the layer saved it,
    # so backward raises (eagerly: after the clamp). Tracing raised the same error before
    # anything ran, leaving the input unclamped.
    def build():
        eager.manual_seed(0)
        model = nn.Linear(4, 3)
        inputs = eager.tensor(np.linspace(-2, 2, 20, dtype=np.float32).reshape(5, 4))

        def step(x, y):
            h = model(inputs)
            inputs.clamp_(-0.5, 0.5)
            loss = (h * h).mean() + x.sum()
            loss.backward()
            return loss.detach()

        return step, lambda: {"inputs": inputs, "weight.grad": model.weight.grad}
    _agree(mode, build, [(GOOD, True)])


@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_an_unused_integer_division_by_zero_still_raises(backend):
    # The fuzzer's program 60193 (under TRACER_CHECK=1): `t0 = a0 // a0` is never used,
    # and dead-code elimination dropped its divisor check with it: eager raised, compiled
    # returned.
    def f(a, x):
        unused = a // a  # noqa: F841
        return x * 2

    c = tracer.function(f, backend=backend)
    x = eager.ones(3)
    c(eager.tensor(np.array([1, 2, 3], np.int32)), x)
    zero = eager.tensor(np.array([1, 0, 3], np.int32))
    with pytest.raises(RuntimeError) as eager_error:
        f(zero, x)
    with pytest.raises(RuntimeError) as compiled_error:
        c(zero, x)
    assert str(compiled_error.value).split(" (at ")[0] == \
        str(eager_error.value).split(" (at ")[0]


def _first_line(exc):
    return str(exc).splitlines()[0]


@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_index_out_of_range_in_a_compiled_numpy_step_names_the_op_and_line(backend):
    # numba: scatter_add's step kernel refuses the index and numpy raises; it said only
    # "index 7 is out of bounds for axis 0 with size 5" where eager names the op, the
    # operands and the user's line. Also a gather (x[idx]) forward.
    from eager import functions as EF

    w = nn.Parameter(eager.ones(5, 3))

    def scatter(g, idx):
        return EF.scatter_add(g * 2, (idx,), (5, 3))

    def lookup(idx):
        loss = w[idx].sum()
        loss.backward()
        return loss.detach()

    # (x[idx]'s gather is a value check: the call runs eagerly and gives eager's own
    # error, which names the indexing)
    cases = [(scatter, lambda i: (eager.ones(3, 3), i), "scatter_add"),
             (lookup, lambda i: (i,), "index")]
    for fn, args, op in cases:
        compiled = tracer.function(fn, backend=backend)
        compiled(*args(eager.tensor(np.array([0, 1, 2]))))
        bad = eager.tensor(np.array([0, 7, 2]))
        with pytest.raises(IndexError) as eager_info:
            fn(*args(bad))
        with pytest.raises(IndexError) as info:
            compiled(*args(bad))
        message = _first_line(info.value)
        assert message.startswith(f"{op}: index 7 is out of bounds")
        assert message.endswith(_first_line(eager_info.value).split("; operands: ")[1])
