"""State a step rebinds outside itself through Python names the snapshot of a trace did not
cover: a global or closure variable rebound (`global COUNTER; COUNTER += 1`, `nonlocal
n`), and any state a helper function, or a module's forward hook, changes (a counter in a
dict its closure holds, activations stored by a hook). Found by the session-21 idiom hunt:
each gave a silently frozen result compiled (the output of the first call, again and
again, and the counter counted once), and a hook's `acts["h"] = out.detach()` left a
traced tensor in the user's dict. Now such a call runs eagerly with a RuntimeWarning
naming the state (a TracingError under fullgraph=True), as a rebound attribute does.
"""
import warnings

import numpy as np
import pytest

import eager
import tracer
from eager import nn

BACKENDS = ["numba", "interpret"]

_COUNT = 0  # (rebound by the functions below; each test resets it)


def _bump_global():
    global _COUNT
    _COUNT += 1
    return _COUNT


def _step_global(x):
    global _COUNT
    _COUNT += 1
    return x * _COUNT


def _step_helper_global(x):
    return x * _bump_global()


def _closures():
    n = 0
    stats = {"calls": 0}

    def step_nonlocal(x):
        nonlocal n
        n += 1
        return x * n

    def inc():
        stats["calls"] += 1
        return stats["calls"]

    def step_helper_closure(x):
        return x * inc()
    return step_nonlocal, step_helper_closure, lambda: (n, stats["calls"])


def _run(fn, backend, calls=4, **options):
    f = tracer.function(fn, backend=backend, **options) if backend else fn
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        outs = [float(f(eager.ones(2)).numpy()[0]) for _ in range(calls)]
    return outs, [str(w.message) for w in seen]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("which", ["global", "helper global"])
def test_a_global_rebound_by_the_step_or_its_helper(backend, which):
    global _COUNT
    fn = {"global": _step_global, "helper global": _step_helper_global}[which]
    _COUNT = 0
    expected, _ = _run(fn, None)
    assert expected == [1.0, 2.0, 3.0, 4.0] and _COUNT == 4
    _COUNT = 0
    got, messages = _run(fn, backend)
    assert got == expected and _COUNT == 4
    assert any("_COUNT" in m and "rebinds" in m for m in messages), messages


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("which", [0, 1])
def test_a_closure_variable_rebound_by_the_step_or_its_helper(backend, which):
    fn, _, state = (lambda t: (t[which], t, t[2]))(_closures())
    expected, _ = _run(fn, None)
    eager_state = state()
    fn, _, state = (lambda t: (t[which], t, t[2]))(_closures())
    got, messages = _run(fn, backend)
    assert got == expected == [1.0, 2.0, 3.0, 4.0]
    assert state() == eager_state
    assert any("rebinds" in m for m in messages), messages


def test_a_global_rebound_under_fullgraph_is_an_error():
    global _COUNT
    _COUNT = 0
    with pytest.raises(tracer.TracingError, match="_COUNT"):
        tracer.function(_step_global, backend="interpret", fullgraph=True)(eager.ones(2))
    assert _COUNT == 0  # (the trace's change is undone)


def _hooked_model():
    eager.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    count = {"n": 0}
    acts = {}

    def hook(module, inputs, output):  # the feature-extraction idiom
        count["n"] += 1
        acts["h"] = output.detach()
    model[0].register_forward_hook(hook)
    return model, count, acts


def _x(k):
    return eager.tensor(np.random.default_rng(k).standard_normal((6, 4)).astype(np.float32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_forward_hook_that_counts_and_stores_activations(backend):
    model, count_e, acts_e = _hooked_model()
    expected = []
    for k in range(3):
        expected.append((model(_x(k)).sum().detach().numpy().copy(), acts_e["h"].numpy().copy()))
    model, count, acts = _hooked_model()
    f = tracer.function(lambda x: model(x).sum(), backend=backend)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for k in range(3):
            out = f(_x(k))
            assert type(acts["h"]._data) is np.ndarray  # never a traced value
            np.testing.assert_allclose(out.detach().numpy(), expected[k][0], rtol=1e-5)
            np.testing.assert_allclose(acts["h"].numpy(), expected[k][1], rtol=1e-5)
    assert count == count_e == {"n": 3}
    assert any("rebinds" in str(w.message) for w in seen)


def test_a_helper_that_only_reads_outside_state_still_compiles():
    scale = {"s": 2.0}

    def scaled(x):
        return x * scale["s"]

    def step(x):
        return scaled(x) + 1

    f = tracer.function(step, backend="interpret")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for k in range(3):
            np.testing.assert_allclose(f(_x(k)).numpy(), _x(k).numpy() * 2 + 1, rtol=1e-6)
    assert f.trace_count == 1
    scale["s"] = 3.0  # (read, so guarded: traces again)
    np.testing.assert_allclose(f(_x(0)).numpy(), _x(0).numpy() * 3 + 1, rtol=1e-6)


class _Trainer:
    steps = 0  # (a class attribute the step counts in)


def _count_cases():
    """(step, state) makers: each step counts in state outside it, eager's outputs 2, 4, 6."""
    def default_dict():
        def step(x, cache={}):
            cache["n"] = cache.get("n", 0) + 1
            return x * cache["n"]
        return step, lambda: step.__defaults__[0].get("n")

    def class_attribute():
        _Trainer.steps = 0

        def step(x):
            _Trainer.steps += 1
            return x * _Trainer.steps
        return step, lambda: _Trainer.steps

    def list_pop():
        queue = [eager.tensor(float(k)) for k in (3, 2, 1)]

        def step(x):
            return x * queue.pop()
        return step, lambda: len(queue)

    def deque_popleft():
        import collections
        queue = collections.deque(eager.tensor(float(k)) for k in (1, 2, 3))

        def step(x):
            return x * queue.popleft()
        return step, lambda: len(queue)
    return {"a mutable default dict": default_dict, "a class attribute": class_attribute,
            "list.pop()": list_pop, "deque.popleft()": deque_popleft}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(_count_cases()))
def test_state_counted_or_consumed_outside_runs_eagerly(backend, case):
    make = _count_cases()[case]
    step, state = make()
    expected, _ = _run(step, None, calls=3)
    eager_state = state()
    step, state = make()
    got, messages = _run(step, backend, calls=3)
    assert got == expected == [1.0, 2.0, 3.0]
    assert state() == eager_state
    assert any("rebinds" in m for m in messages), messages


def _iterator_cases():
    def batches():
        return iter([eager.full((2,), float(k)) for k in range(5)])

    def generator():
        def gen():
            k = 0
            while True:
                yield eager.full((2,), float(k))
                k += 1
        return gen()

    def counter():
        import itertools
        return itertools.count()

    def loader():
        data = eager.utils.data.TensorDataset(eager.arange(10.0).reshape(5, 2))
        return iter(eager.utils.data.DataLoader(data, batch_size=1))
    return {"iter(list)": batches, "a generator": generator, "itertools.count()": counter,
            "iter(DataLoader)": loader}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(_iterator_cases()))
def test_next_of_an_outside_iterator_is_refused(backend, case):
    # Found by the hunt: `x = next(it)` inside the step took one element while tracing and
    # every compiled call reused it (the same batch, the same count) without a word. The
    # element cannot be put back, so the call raises, naming the iterator.
    it = _iterator_cases()[case]()

    def step(x):
        item = next(it)
        return x * (item if isinstance(item, eager.Tensor) else
                    item[0] if isinstance(item, (list, tuple)) else float(item))

    f = tracer.function(step, backend=backend)
    with pytest.raises(tracer.TracingError, match="takes the next element of it"):
        f(eager.ones(2))


class _Batches:
    """An iterator of a Python class: its position is an attribute (restored, then run
    eagerly), unlike a generator's."""

    def __init__(self):
        self.k = 0

    def __iter__(self):
        return self

    def __next__(self):
        self.k += 1
        return eager.full((2,), float(self.k))


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_iterator_object_advanced_inside_runs_eagerly_and_one_held_is_fine(backend):
    it = _Batches()
    f = tracer.function(lambda x: x * next(it), backend=backend)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        got = [float(f(eager.ones(2)).numpy()[0]) for _ in range(3)]
    assert got == [1.0, 2.0, 3.0] and it.k == 3

    class Trainer:  # holds an iterator it does not advance inside the step
        def __init__(self):
            self.batches = iter([eager.ones(2)] * 3)
            self.objects = _Batches()
            self.scale = 2.0

    trainer = Trainer()
    g = tracer.function(lambda x: x * trainer.scale, backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [float(g(eager.ones(2)).numpy()[0]) for _ in range(2)] == [2.0, 2.0]
    assert g.trace_count == 1
