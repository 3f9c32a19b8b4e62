"""What a trace keeps to undo the optimizer state its tracing made (Adam's first-step
moments), for a first run that raises: only the changed optimizers' entries from before the
trace, and only while that first run can still come."""
import gc
import weakref

import numpy as np

import eager
import eager.nn.functional as F
import tracer
from eager import nn


class _Note:
    """An object in the step's reach that its trace never reads."""


def _adam_step(backend="interpret", max_traces=8):
    eager.manual_seed(0)
    model = nn.Linear(4, 3)
    opt = eager.optim.Adam(model.parameters(), lr=0.01)
    notes = {"note": _Note()}

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if x.shape[0] > 100:  # (not taken: only the shape is read, and guarded)
            notes["seen"] = True
        return loss

    return notes, opt, tracer.function(step, backend=backend, max_traces=max_traces)


def _batch(n):
    rng = np.random.default_rng(n)
    return (eager.tensor(rng.standard_normal((n, 4)).astype(np.float32)),
            eager.tensor(rng.integers(0, 3, n)))


def test_a_trace_waiting_for_its_first_run_holds_only_the_optimizer_state():
    notes, opt, f = _adam_step()
    note = weakref.ref(notes["note"])
    concrete = f.get_concrete_function(*_batch(5))
    assert concrete.undo_state is not None and len(opt.state) == 2  # (the trace made it)
    notes["note"] = None  # (its keys stay: the step names the dict, whose keys are guarded)
    gc.collect()
    assert note() is None, "the trace keeps its pre-trace snapshot of the state alive"
    # what it keeps still serves: a first run that raises takes the state back
    x, _ = _batch(5)
    try:
        f(x, eager.tensor(np.array([0, 1, 7, 1, 0])))
    except IndexError:
        pass
    else:
        raise AssertionError("class index 7 of 3 classes did not raise")
    assert len(opt.state) == 0 and concrete.undo_state is None


def test_a_trace_dropped_before_its_first_run_lets_its_undo_go():
    _notes, _opt, f = _adam_step(max_traces=1)
    first = f.get_concrete_function(*_batch(5))
    assert first.undo_state is not None
    f.get_concrete_function(*_batch(6))  # evicts the first trace (max_traces=1)
    assert f.stats()["evictions"] == 1
    assert first.undo_state is None
