"""A scatter_add whose index is out of range, in a compiled step that also writes state in
place (BatchNorm's statistics, zero_grad's unset .grad, SGD's momentum, a buffer): the call
raises eager's error and leaves eager's state, on both backends and in check mode.

scatter_add is its own value check (eager.ops row `raises=True`, as gather): no state is
written in place before it, and its IndexError makes the call run eagerly. Before, it
raised from inside the compiled program (a numpy step's error, not a value check's): the
interpreter had written nothing (eager's zero_grad() had unset every .grad and BatchNorm
had counted the batch), Numba had written the statistics and the buffer.

Each of its paths in the Numba runner: the step kernel that refuses the index (float
values), the numpy implementation (integer values), and the inline form for positions
that cannot repeat (one constant index of distinct values, a traced one beside it).
"""
import numpy as np
import pytest

import eager
import tracer
from eager import functions as EF
from eager import nn

BACKENDS = ["numba", "interpret"]


def _x(k):
    return eager.tensor(np.random.default_rng(k).standard_normal((6, 4)).astype(np.float32))


def _scatter(form, table, rows):
    if form == "kernel":      # float values: the step kernel, which refuses the index
        return EF.scatter_add(table[:3] * 2, (rows,), (5, 3)).sum()
    if form == "numpy":       # integer values: numpy's np.add.at
        counts = EF.scatter_add(eager.ones(3, 3, dtype=eager.int64), (rows,), (5, 3))
        return (counts.float() * table).sum()
    # form "unique" (integer values, no step kernel): a constant column index of distinct
    # values beside the traced rows, so no position repeats (one numpy assignment)
    cols = eager.tensor(np.array([2, 0, 1]))
    hits = EF.scatter_add(eager.ones(3, dtype=eager.int64), (rows, cols), (5, 3))
    return (hits.float() * table).sum()


def _step(form):
    eager.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    table = nn.Parameter(eager.ones(5, 3))
    buf = eager.zeros(5, 3)
    opt = eager.optim.SGD(list(model.parameters()) + [table], lr=0.1, momentum=0.9)

    def step(x, rows):
        opt.zero_grad()
        buf.mul_(0.5).add_(1.0)
        loss = model(x).pow(2).mean() + _scatter(form, table, rows) + (buf * table).sum()
        loss.backward()
        opt.step()
        return loss.detach()

    def state():
        s = {k: v.numpy().copy() for k, v in model.state_dict().items()}
        s.update({f"{n}.grad": None if p.grad is None else p.grad.numpy().copy()
                  for n, p in model.named_parameters()})
        s["table"] = table.detach().numpy().copy()
        s["buf"] = buf.numpy().copy()
        s["momentum"] = [None if v.get("momentum_buffer") is None
                         else v["momentum_buffer"].numpy().copy() for v in opt.state.values()]
        return s
    return step, state


def _same_state(e_state, c_state, where):
    for name, ev in e_state.items():
        cv = c_state[name]
        if isinstance(ev, list):
            assert len(ev) == len(cv), f"{where}: {name}"
            pairs = list(zip(ev, cv))
        else:
            pairs = [(ev, cv)]
        for a, b in pairs:
            if a is None or b is None:
                assert a is None and b is None, f"{where}: {name}"
            else:
                np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=f"{where}: {name}")


# rows 1 and 3 are out of range (7, and -6 of 5 rows); -1 counts from the end (np.add.at)
_ROWS = [np.array([0, 1, 4]), np.array([0, 7, 2]), np.array([-1, 1, 2]),
         np.array([0, -6, 1]), np.array([3, 1, 2])]


@pytest.mark.parametrize("form", ["kernel", "numpy", "unique"])
@pytest.mark.parametrize("mode", BACKENDS + ["check"])
def test_scatter_add_out_of_range_leaves_eager_state(mode, form):
    seen = {}
    for run in ("eager", mode):
        step, state = _step(form)
        if run == "eager":
            f = step
        elif run == "check":
            f = tracer.function(step, backend="numba", check=10)
        else:
            f = tracer.function(step, backend=run)
        seen[run] = []
        for k, r in enumerate(_ROWS):
            try:
                out = f(_x(k), eager.tensor(r)).numpy().copy()
                error = None
            except IndexError as exc:
                out, error = None, str(exc).split(" (at ")[0]
            seen[run].append((error, out, state()))
    assert [e is None for e, _, _ in seen["eager"]] == [True, False, True, False, True]
    for k, ((e_err, e_out, e_state), (c_err, c_out, c_state)) in enumerate(
            zip(seen["eager"], seen[mode])):
        assert c_err == e_err, f"call {k}"
        if e_out is not None:
            np.testing.assert_allclose(c_out, e_out, rtol=1e-5, err_msg=f"call {k}")
        _same_state(e_state, c_state, f"call {k}")
    if mode != "check":
        assert f.trace_count == 1  # (a raising call retraces nothing)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scatter_add_out_of_range_under_fullgraph_raises_eager_error(backend):
    # fullgraph=True does not turn a value check's eager rerun into an error: the call is
    # traced whole; it raises eager's IndexError and leaves eager's state.
    step, state = _step("kernel")
    f = tracer.function(step, backend=backend, fullgraph=True)
    f(_x(0), eager.tensor(_ROWS[0]))
    before = state()
    with pytest.raises(IndexError, match="scatter_add: index 7 is out of bounds"):
        f(_x(1), eager.tensor(_ROWS[1]))
    after = state()
    # eager's state: zero_grad() unset the grads and BatchNorm counted the batch
    assert after["0.weight.grad"] is None
    assert after["1.num_batches_tracked"] == before["1.num_batches_tracked"] + 1
    np.testing.assert_allclose(after["buf"], before["buf"] * 0.5 + 1.0)
