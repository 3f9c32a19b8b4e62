"""A backend compiles with full collections of Python's cyclic garbage collector held off
(tracer.backends): they cost time during a compile and find little. The collector's
thresholds afterwards are what they were, also when the compile fails or compiles nest."""
import gc

import pytest

import eager
import tracer
from tracer import backends

HELD = 1 << 30


@pytest.fixture
def recording_backend():
    seen = []

    def compile_fn(graph):
        seen.append(gc.get_threshold())
        if graph == "fail":
            raise RuntimeError("compile failed")
        if graph == "nested":
            backends.get_backend("gc-probe")("inner")
            seen.append(gc.get_threshold())
        # (an executable, as the backend contract asks: checked by get_backend)
        return backends.compile_interpret(graph)

    backends.register_backend("gc-probe", compile_fn)
    before = gc.get_threshold()
    enabled = gc.isenabled()
    yield seen
    del backends._BACKENDS["gc-probe"]
    gc.set_threshold(*before)
    (gc.enable if enabled else gc.disable)()


def test_compile_holds_full_collections_and_restores_the_thresholds(recording_backend):
    gc.set_threshold(500, 7, 9)
    backends.get_backend("gc-probe")("graph")
    assert recording_backend == [(500, 7, HELD)]  # young collections still run
    assert gc.get_threshold() == (500, 7, 9)


def test_a_disabled_collector_stays_disabled(recording_backend):
    gc.disable()
    backends.get_backend("gc-probe")("graph")
    assert not gc.isenabled()


def test_a_failing_compile_restores_the_thresholds(recording_backend):
    gc.set_threshold(700, 10, 10)
    with pytest.raises(RuntimeError, match="compile failed"):
        backends.get_backend("gc-probe")("fail")
    assert gc.get_threshold() == (700, 10, 10)


def test_nested_compiles_share_one_hold(recording_backend):
    gc.set_threshold(700, 10, 10)
    backends.get_backend("gc-probe")("nested")
    assert recording_backend == [(700, 10, HELD)] * 3  # outer, inner, outer after inner
    assert gc.get_threshold() == (700, 10, 10)


def test_a_traced_function_compiles_with_full_collections_held(recording_backend):
    gc.set_threshold(700, 10, 10)

    @tracer.function(backend="gc-probe")
    def f(x):
        return x * 2 + 1

    assert f(eager.ones(3)).tolist() == [3.0, 3.0, 3.0]
    assert recording_backend == [(700, 10, HELD)]
    assert gc.get_threshold() == (700, 10, 10)
