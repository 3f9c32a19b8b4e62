"""A trace that reads the value of a tensor made before the call (`if flag.item():`,
`float(scale)`, `range(int(n))`, `.tolist()`, `.numpy()`) baked that value into what it
recorded. Before the contents guard (tracer.tracing._value_read_guards) a later call with
another value silently ran the old trace: these tests change the value between calls and
compare with eager, on both backends."""
import warnings

import numpy as np
import pytest

import eager
import tracer
from eager import nn

BACKENDS = ["interpret", "numba"]
X = np.linspace(-1.0, 1.0, 6, dtype=np.float32)


def _both(make, change, calls=3, backend="numba"):
    """make() -> (fn, state); change(state, i) before call i. The outputs (and what
    `state` holds after each call) eagerly and compiled."""
    histories = []
    for compiled in (False, True):
        fn, state = make()
        run = tracer.function(fn, backend=backend) if compiled else fn
        history = []
        for i in range(calls):
            change(state, i)
            out = run(eager.tensor(X))
            history.append(np.array(out.detach().numpy(), copy=True))
        histories.append(history)
    return histories


def _same(histories):
    want, got = histories
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("read", ["item", "float", "bool", "tolist", "numpy", "asarray"])
def test_branch_on_a_captured_flag_follows_in_place_changes(read, backend):
    def make():
        flag = eager.tensor([0.0])
        decide = {"item": lambda: flag.item() > 0.5, "float": lambda: float(flag) > 0.5,
                  "bool": lambda: bool(flag), "tolist": lambda: flag.tolist()[0] > 0.5,
                  "numpy": lambda: flag.numpy()[0] > 0.5,
                  "asarray": lambda: np.asarray(flag)[0] > 0.5}[read]

        def f(x):
            if decide():
                return x * 2
            return x * 3
        return f, flag

    # the flag is 0, 1, 0 at the three calls: eager's branch flips twice
    _same(_both(make, lambda flag, i: flag.fill_(float(i % 2)), backend=backend))


def test_loop_count_from_a_module_buffer():
    class Repeat(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("times", eager.tensor(1))
            self.lin = nn.Linear(6, 6)

        def forward(self, x):
            for _ in range(int(self.times)):
                x = self.lin(x)
            return x

    def make():
        eager.manual_seed(0)
        m = Repeat()
        return m, m

    def change(m, i):
        if i == 1:
            m.times.fill_(3)          # in place
        if i == 2:
            m.times = eager.tensor(2)  # rebound (a buffer assignment)
    _same(_both(make, change))


def test_scale_read_from_a_dict_entry():
    def make():
        cfg = {"scale": eager.tensor(2.0)}

        def f(x):
            return x * cfg["scale"].item()
        return f, cfg

    def change(cfg, i):
        if i == 1:
            cfg["scale"].copy_(eager.tensor(5.0))
        if i == 2:
            cfg["scale"] = eager.tensor(-1.0)
    _same(_both(make, change))


def test_counter_read_then_incremented_inside_the_function():
    # Every call reads a new value: every call traces again (and says so), never reusing
    # the first trace's count.
    def make():
        count = eager.tensor(0)

        def f(x):
            n = int(count)
            count.add_(1)
            return x * float(n)
        return f, count

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _same(_both(make, lambda c, i: None, calls=4))


def test_tolist_of_captured_indices_picks_rows():
    def make():
        idx = eager.tensor([0, 2])

        def f(x):
            rows = x.reshape(3, 2)
            return eager.stack([rows[i] for i in idx.tolist()])
        return f, idx

    def change(idx, i):
        if i == 1:
            idx.copy_(eager.tensor([1, 1]))
    _same(_both(make, change))


def test_constant_made_inside_the_function_needs_no_guard():
    @tracer.function
    def f(x):
        return x * eager.tensor([2.0]).item()

    for _ in range(3):
        f(eager.tensor(X))
    assert f.trace_count == 1
    concrete = f.get_concrete_function(eager.tensor(X))
    assert not [g for g in concrete.guards if g.kind == "contents"]


def test_guard_names_the_tensor_and_the_line():
    flag = eager.tensor([0.0])

    def f(x):
        return x * 2 if flag.item() else x

    fn = tracer.function(f)
    fn(eager.tensor(X))
    concrete = fn.get_concrete_function(eager.tensor(X))
    texts = [str(g) for g in concrete.guards if g.kind == "contents"]
    assert len(texts) == 1 and "flag" in texts[0] and ".item()" in texts[0] \
        and "test_value_reads.py" in texts[0], texts


def test_large_tensor_read_is_frozen_with_a_warning_and_refused_under_fullgraph():
    table = eager.tensor(np.arange(5000, dtype=np.float32))

    def f(x):
        return x * float(table.numpy().sum() > 0)

    with pytest.warns(RuntimeWarning, match="too large to compare"):
        tracer.function(f)(eager.tensor(X))
    with pytest.raises(tracer.TracingError, match="too large to compare"):
        tracer.function(f, fullgraph=True)(eager.tensor(X))


@pytest.mark.parametrize("draw", ["random", "numpy", "generator"])
def test_host_random_numbers_are_not_frozen(draw):
    # Python's and numpy's global generators are not recorded: a trace would multiply by
    # the same number at every call. The signature runs eagerly instead (with a warning),
    # drawing exactly eager's numbers.
    import random

    rng = np.random.default_rng(0)

    def f(x):
        r = {"random": random.random, "numpy": np.random.rand, "generator": rng.random}[draw]()
        return x * r

    results = []
    for run in (f, tracer.function(f)):
        random.seed(0)
        np.random.seed(0)
        rng.bit_generator.state = np.random.default_rng(0).bit_generator.state
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results.append([run(eager.tensor(X)).numpy().copy() for _ in range(3)])
        if run is not f:
            assert any("draws numbers from" in str(w.message) and "test_value_reads.py"
                       in str(w.message) for w in caught)
    _same(results)
    assert not np.array_equal(results[1][0], results[1][1])
    with pytest.raises(tracer.TracingError, match="draws numbers from"):
        tracer.function(f, fullgraph=True)(eager.tensor(X))
