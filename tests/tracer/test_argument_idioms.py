"""Arguments, data and values from outside as users pass and read them: each case is run
eagerly and compiled on the same inputs, and the compiled call gives eager's numbers, runs
eagerly with a warning, or raises - never a silently different result."""
import os
import re
import random
import time
import warnings

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
