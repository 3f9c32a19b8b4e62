"""Arguments, data and values from outside as users pass and read them: each case is run
eagerly and compiled on the same inputs, and the compiled call gives eager's numbers, runs
eagerly with a warning, or raises - never a silently different result."""
import datetime
import os
import re
import random
import time
import uuid
import warnings
from time import monotonic_ns, perf_counter

import numpy as np
import pytest

import eager
import tracer

BACKENDS = ["numba", "interpret"]


# ------------------------------------------------- values from the outside world
OUTSIDE = {
    "default_rng()": (lambda x: x + float(np.random.default_rng().standard_normal()),
                      "fresh OS entropy"),
    "Generator(PCG64())": (lambda x: x + float(np.random.Generator(np.random.PCG64())
                                                .random()), "fresh OS entropy"),
    "random.Random()": (lambda x: x + random.Random().random(), "random.Random()"),
    "os.urandom": (lambda x: x + os.urandom(1)[0], "os.urandom()"),
    "time.time": (lambda x: x + time.time() % 1000.0, "the clock (time.time())"),
}


@pytest.mark.parametrize("case", sorted(OUTSIDE))
def test_a_value_from_the_outside_world_is_not_frozen(case):
    # np.random.default_rng() made inside drew its numbers once, at trace time: every
    # compiled call returned them, with no warning
    body, what = OUTSIDE[case]
    f = tracer.function(body, backend="interpret")
    x = eager.zeros(2)
    with pytest.warns(RuntimeWarning, match=rf"test_argument_idioms.py:\d+: <lambda> reads "
                                            rf".*{re.escape(what)}.*Running this signature eagerly"):
        first = f(x).numpy().copy()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (warned once)
        values = [first] + [f(x).numpy().copy() for _ in range(3)]
    assert len({v.tobytes() for v in values}) > 1, "the same numbers at every call"
    assert f.trace_count == 0
    assert time.time.__name__ == "time" and not hasattr(time.time, "__wrapped__")
    with pytest.raises(tracer.TracingError, match=re.escape(what)):
        tracer.function(body, backend="interpret", fullgraph=True)(x)


_now = time.monotonic  # (bound before any call: a trace used to read it unseen)
_draw = random.random
BOUND = {
    "from time import perf_counter": (lambda x: x + perf_counter(), "time.perf_counter()"),
    "from time import monotonic_ns": (lambda x: x + monotonic_ns() % 1000, "monotonic_ns()"),
    "now = time.monotonic": (lambda x: x + _now(), "the clock (time.monotonic())"),
    "datetime.datetime.now()": (lambda x: x + datetime.datetime.now().microsecond,
                                "the clock (datetime.now())"),
    "datetime.date.today()": (lambda x: x + datetime.date.today().day,
                              "the clock (date.today())"),
    "uuid.uuid4()": (lambda x: x + uuid.uuid4().int % 97, "fresh OS entropy"),
    "rand = random.random": (lambda x: x + _draw(), "`random`"),
    "np.random.rand()": (lambda x: x + float(np.random.rand()), "`numpy.random`"),
}


@pytest.mark.parametrize("case", sorted(BOUND))
def test_a_clock_or_entropy_read_bound_before_the_call_is_seen(case):
    # A name bound before the call (`from time import perf_counter` at the top of the
    # module) bypassed the wrapped module attributes: its value was frozen into the trace.
    body, what = BOUND[case]
    f = tracer.function(body, backend="interpret")
    x = eager.zeros(2)
    with pytest.warns(RuntimeWarning, match=r"test_argument_idioms.py:\d+: <lambda> (reads|draws)"
                                            rf".*{re.escape(what)}"):
        f(x)
    assert f.trace_count == 0
    with pytest.raises(tracer.TracingError, match=re.escape(what)):
        tracer.function(body, backend="interpret", fullgraph=True)(x)


def test_clock_reads_are_seen_under_a_profiler_which_keeps_its_events():
    import cProfile
    import sys

    calls = []

    def python_profiler(frame, event, arg):
        calls.append(event)

    body, what = BOUND["now = time.monotonic"]
    sys.setprofile(python_profiler)  # a Python profiler: chained
    try:
        with pytest.warns(RuntimeWarning, match=re.escape(what)):
            tracer.function(body, backend="interpret")(eager.zeros(2))
    finally:
        sys.setprofile(None)
    assert "c_call" in calls
    profile = cProfile.Profile()  # written in C: the module attributes are wrapped instead
    profile.enable()
    try:
        with pytest.warns(RuntimeWarning, match=re.escape("the clock (time.time())")):
            tracer.function(OUTSIDE["time.time"][0], backend="interpret")(eager.zeros(2))
        assert sys.getprofile() is profile
    finally:
        profile.disable()
    assert not hasattr(time.time, "__wrapped__")


def _loader_programs():
    from eager.utils.data import DataLoader, RandomSampler, TensorDataset, random_split

    ds = TensorDataset(eager.tensor(np.arange(8, dtype=np.float32).reshape(8, 1)))
    loader = DataLoader(ds, batch_size=4, shuffle=True)
    own = DataLoader(ds, batch_size=4, shuffle=True, generator=eager.Generator().manual_seed(3))

    def first_batch(w):
        return next(iter(loader))[0] * w

    def epoch(w):
        return eager.cat([xb * w for (xb,) in DataLoader(ds, batch_size=4, shuffle=True)])

    def own_generator(w):
        return next(iter(own))[0] * w

    def sampler(w):
        return eager.tensor(list(RandomSampler(ds)), dtype=eager.float32) * w

    def split(w):
        return random_split(ds, [4, 4])[0][0][0] * w

    return {"next(iter(loader))": first_batch, "for xb in DataLoader": epoch,
            "DataLoader(generator=g)": own_generator, "RandomSampler": sampler,
            "random_split": split}


@pytest.mark.parametrize("case", sorted(_loader_programs()))
def test_a_dataloader_shuffle_inside_a_trace_is_not_frozen(case):
    # The shuffle drew its permutation in Python at trace time: every compiled call
    # returned the first call's batch, with no warning.
    results = {}
    for mode in ("eager", "interpret"):
        body = _loader_programs()[case]
        f = body if mode == "eager" else tracer.function(body, backend=mode)
        eager.manual_seed(0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results[mode] = [f(eager.ones(1)).numpy().copy() for _ in range(3)]
        if mode != "eager":
            assert f.trace_count == 0
            assert any("test_argument_idioms.py:" in str(w.message) and "shuffle or split"
                       in str(w.message) for w in caught), [str(w.message) for w in caught]
    for e, c in zip(results["eager"], results["interpret"]):
        np.testing.assert_array_equal(c, e)
    with pytest.raises(tracer.TracingError, match="shuffle or split"):
        tracer.function(_loader_programs()[case], backend="interpret", fullgraph=True)(
            eager.ones(1))


def test_a_generator_seeded_inside_and_library_clock_reads_still_trace():
    def f(x):
        t0 = time.monotonic  # (a name: not a read)
        rng = np.random.default_rng(5)  # the same numbers at every call, as eagerly
        return x + float(rng.standard_normal()) + 0 * t0()

    g = tracer.function(f, backend="interpret")
    x = eager.zeros(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeWarning, match="the clock"):
            g(x)
    h = tracer.function(lambda x: x + float(np.random.default_rng(5).standard_normal()),
                        backend="interpret")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.array_equal(h(x).numpy(), h(x).numpy())
    assert h.trace_count == 1


# ------------------------------------------------- outputs that are views of arguments
def _arange(requires_grad=False):
    return eager.tensor(np.arange(12, dtype=np.float32).reshape(3, 4),
                        requires_grad=requires_grad)


def _snap(ts):
    return [t.detach().numpy().copy() for t in ts]


def _same(eager_values, compiled_values):
    assert len(eager_values) == len(compiled_values)
    for k, (e, c) in enumerate(zip(eager_values, compiled_values)):
        np.testing.assert_array_equal(c, e, err_msg=f"value {k}")


OUTPUT_VIEWS = {
    "x[1:]": lambda x: x[1:],
    "x.T": lambda x: x.T,
    "x.view(-1)": lambda x: x.view(-1),
    "x.mul_(2)[:, ::2]": lambda x: x.mul_(2)[:, ::2],
    "x.diagonal()": lambda x: x.diagonal(),
    "(x.unbind(0)[1], x + 1)": lambda x: (x.unbind(0)[1], x + 1),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(OUTPUT_VIEWS))
def test_an_output_that_views_an_argument_shares_its_memory(case, backend):
    # The compiled call returned a copy: the caller's in-place write through the output
    # did not reach the argument, nor a write to the argument the output.
    def run(f):
        x, seen = _arange(), []
        for _ in range(3):
            out = f(x)
            view = out[0] if isinstance(out, tuple) else out
            view.add_(10)
            seen += _snap([x, view])
            x.mul_(-1)
            seen += _snap([view])
        return seen

    body = OUTPUT_VIEWS[case]
    _same(run(body), run(tracer.function(body, backend=backend)))


W = _arange()


@pytest.mark.parametrize("backend", BACKENDS)
def test_views_of_captures_and_of_arguments_that_need_grad(backend):
    def f(x):
        return W.T, (x * 2)[1:], x[1:]

    def run(f):
        W.data = _arange().data
        x, seen = _arange(requires_grad=True), []
        for _ in range(2):
            wt, a, b = f(x)
            ((a * b).sum()).backward()
            wt.mul_(2)  # reaches W
            seen += _snap([W, a, b, x.grad]) + [np.array([b.requires_grad, b.is_leaf])]
        return seen

    _same(run(f), run(tracer.function(f, backend=backend)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_output_view_with_a_symbolic_size_shares_memory(backend):
    f = tracer.function(lambda x: x.unsqueeze(0), backend=backend,
                        input_signature=[tracer.TensorSpec((None, 4), eager.float32)])
    for n in (3, 5):
        x = eager.zeros(n, 4)
        out = f(x)
        out[0, 1].fill_(7.0)
        assert out.shape == (1, n, 4)
        np.testing.assert_array_equal(x.numpy()[1], [7.0] * 4)
    assert f.trace_count == 1


# ------------------------------------------------- layouts after an in-place write
def _layouts():
    """A C-contiguous, a transposed and a column-strided argument, and a clone of the
    transposed one (eager's clone keeps the strides, as PyTorch's)."""
    base = eager.tensor(np.arange(24, dtype=np.float32).reshape(4, 6))
    return [base[:, :4].clone().contiguous(), base.T[:4], base[:, :4], base.T[:4].clone()]


def _reshape_after_write(x):
    # eagerly x keeps its own array: the reshape copies when x is not contiguous, and the
    # write through its slice then does not reach x
    x.add_(1)
    x.reshape(-1)[:5].mul_(2)
    return x * 1 if x.is_contiguous() else x * -1


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_written_argument_keeps_its_layout(backend):
    # The trace took an argument's new value after x.add_(1) as C-contiguous: the reshape
    # of a transposed argument was traced as a view and the write went through to x.
    def run(f):
        seen = []
        for x in _layouts():
            seen += _snap([f(x), x])
        return seen

    _same(run(_reshape_after_write), run(tracer.function(_reshape_after_write,
                                                         backend=backend)))


G = eager.tensor(np.arange(24, dtype=np.float32).reshape(4, 6)).T


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_written_outside_tensor_keeps_its_layout(backend):
    def f(x):
        G.add_(x)
        G.reshape(-1)[:3].mul_(2)
        return G.sum()

    def run(f):
        G.data = eager.tensor(np.arange(24, dtype=np.float32).reshape(4, 6)).T.data
        return _snap([f(eager.ones(1)), f(eager.ones(1)), G])

    _same(run(f), run(tracer.function(f, backend=backend)))


def test_view_of_a_written_transposed_argument_raises_as_eagerly():
    def f(x):
        x.add_(1)
        return x.view(-1)

    with pytest.raises(Exception, match="not contiguous"):
        f(_layouts()[1])
    with pytest.raises(Exception, match="not contiguous"):
        tracer.function(f, backend="interpret")(_layouts()[1])


# ------------------------------------------------- container arguments the function changes
def _append_to_argument(x, acc):
    acc.append(x * 2)
    return x + len(acc)


def _add_a_key(x, d):
    d["y"] = x * 2
    return x + 1


@pytest.mark.parametrize("case", ["list argument", "dict argument"])
def test_a_container_argument_the_function_changes_is_changed_at_every_call(case):
    # The function gets copies of container arguments (holding the traced tensors):
    # acc.append(...) / d["y"] = ... never reached the caller's container; eagerly they
    # change it at every call
    def run(f):
        state, seen = ([] if case == "list argument" else {}), []
        for v in (1.0, 3.0, 3.0):
            seen += _snap([f(eager.full((2,), v), state)])
        if isinstance(state, list):
            return seen + [np.array(len(state))] + _snap(state)
        return seen + _snap([state["y"]])

    body = {"list argument": _append_to_argument, "dict argument": _add_a_key}[case]
    expected = run(body)
    f = tracer.function(body, backend="interpret")
    with pytest.warns(RuntimeWarning, match=r"argument (acc|d) .*rebinds this outside state"):
        got = run(f)
    _same(expected, got)
    with pytest.raises(tracer.TracingError, match="rebinds this outside state"):
        tracer.function(body, backend="interpret", fullgraph=True)(
            eager.ones(2), [] if case == "list argument" else {})


H = eager.zeros(4, 4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_outside_tensor_whose_layout_changes_between_calls_is_traced_again(backend):
    # The captured array's layout was not checked: a trace made with H C-contiguous (its
    # reshape a view, the write reaching H) served a transposed H, whose reshape copies
    def f(x):
        H.reshape(-1)[:3].mul_(2)
        return H * x

    def run(f):
        seen = []
        for layout in _layouts():
            H.data = layout.data
            seen += _snap([f(eager.ones(1)), H])
        return seen

    g = tracer.function(f, backend=backend)
    _same(run(f), run(g))
    assert g.trace_count == 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_gradient_of_another_dtype_passed_to_backward(backend):
    # PyTorch casts backward's gradient to the output's dtype; eager computed on in float64
    # and the compiled backward's float32 kernel failed to unbox the float64 array
    def f(a):
        return (a * 3.0).tanh()

    def run(f):
        a = eager.tensor(np.linspace(-1, 1, 6, dtype=np.float32), requires_grad=True)
        f(a).backward(eager.tensor(np.linspace(0.5, 2, 6)))  # float64
        assert a.grad.dtype == eager.float32
        return a.grad.numpy()

    # (the numba backend's tanh is a vectorized approximation: a few ulps)
    np.testing.assert_allclose(run(tracer.function(f, backend=backend)), run(f), rtol=1e-4)
