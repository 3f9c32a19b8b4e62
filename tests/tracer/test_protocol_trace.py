"""The tracer's side of the trace protocol (eager/protocol.py): a trace is the current
protocol of its thread while it records, sub-traces of cond/while bodies nest inside it, and
eager execution is current again afterwards, whatever happened."""

import threading

import numpy as np
import pytest

import eager
import tracer
from eager import dispatch
from eager.protocol import EAGER, TraceProtocol
from tracer.trace import Trace, TracingError, current_trace

EVENTS = sorted(name for name, v in vars(TraceProtocol).items()
                if callable(v) and not name.startswith("_"))


def test_trace_implements_every_event_of_the_protocol():
    assert issubclass(Trace, TraceProtocol) and Trace.tracing
    missing = [name for name in EVENTS if name not in vars(Trace)]
    assert missing == []


def test_a_trace_is_current_while_it_records_and_sub_traces_nest():
    seen = {}

    @tracer.function(backend="interpret")
    def f(x):
        outer = current_trace()
        seen["outer"] = (outer, dispatch.current_protocol(), dispatch.tracing())

        def body(v):
            inner = current_trace()
            seen["inner"] = (inner, inner.parent)
            return v * 2

        y = tracer.cond(x.sum() > 0, body, lambda v: v - 1, x)
        seen["after"] = current_trace()
        return y + 1

    out = f(eager.tensor([1.0, 2.0]))
    np.testing.assert_array_equal(out.numpy(), [3.0, 5.0])
    outer, proto, tracing = seen["outer"]
    assert isinstance(outer, Trace) and proto is outer and tracing
    inner, parent = seen["inner"]
    assert inner is not outer and parent is outer
    assert seen["after"] is outer
    assert dispatch.current_protocol() is EAGER and dispatch._hooked_threads == 0
    assert current_trace() is None
    np.testing.assert_array_equal(f(eager.tensor([-1.0, -2.0])).numpy(), [-1.0, -2.0])


def test_a_failing_trace_puts_eager_execution_back():
    @tracer.function(backend="interpret")
    def f(x):
        if x.sum() > 0:  # needs the value: refused while tracing
            return x
        return -x

    with pytest.raises(TracingError):
        f(eager.ones(2))
    assert dispatch.current_protocol() is EAGER and dispatch._hooked_threads == 0
    a = eager.tensor([1.0, 2.0])
    b = a * 2
    assert b.numpy().tolist() == [2.0, 4.0]  # computed, not recorded


def test_the_protocol_is_per_thread():
    recording = threading.Event()
    release = threading.Event()
    seen = {}

    @tracer.function(backend="interpret")
    def slow(x):
        seen["tracing thread"] = (dispatch.tracing(), dispatch.current_protocol())
        recording.set()
        assert release.wait(10)
        return x + 1

    result = {}
    t = threading.Thread(target=lambda: result.setdefault("out", slow(eager.ones(2))))
    t.start()
    try:
        assert recording.wait(10)
        assert dispatch._hooked_threads == 1
        assert not dispatch.tracing() and dispatch.current_protocol() is EAGER
        assert current_trace() is None
        g = eager.tensor([1.0])
        g.grad = eager.tensor([2.0])  # reported to EAGER here, not to the other thread's trace
        assert dispatch.live_scalar(lambda: 4.0) == 4.0
    finally:
        release.set()
        t.join(10)
    tracing, proto = seen["tracing thread"]
    assert tracing and isinstance(proto, Trace) and id(g) not in proto.grad_first_access
    np.testing.assert_array_equal(result["out"].numpy(), [2.0, 2.0])
    assert dispatch._hooked_threads == 0
