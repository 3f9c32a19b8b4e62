"""Idioms found by this stop's hunt (in-place ops through views, state kept outside the
step) that gave a wrong result or an unclear error compiled. Each test is written the
way the user wrote the program and compares with eager, on both backends.

Tiny shapes shared with the other tracer tests (a 6x4 batch).
"""
import numpy as np
import pytest

import eager
import tracer

BACKENDS = ["numba", "interpret"]


def _x(k=0):
    return eager.tensor(np.random.default_rng(k).standard_normal((6, 4)).astype(np.float32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_in_place_op_through_view_of_a_captured_tensor(backend):
    # Found here: buf.view(2, 12)[0].mul_(0.5) of a tensor the step captured raised a
    # TracingError ("converting to a numpy array of a traced tensor"): view()'s check for
    # a copy asked numpy about the traced result.
    def make():
        buf = eager.arange(24.0).reshape(6, 4).clone()

        def step(x):
            buf.view(2, 12)[0].mul_(0.5)
            return buf + x
        return step, buf

    step, buf_e = make()
    f, buf_c = make()
    f = tracer.function(f, backend=backend)
    for k in range(3):
        np.testing.assert_allclose(f(_x(k)).numpy(), step(_x(k)).numpy(), rtol=1e-6)
        np.testing.assert_allclose(buf_c.numpy(), buf_e.numpy(), rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_view_of_a_captured_transpose_raises_as_eagerly(backend):
    w = eager.arange(24.0).reshape(6, 4)

    def step(x):
        return w.T.view(24) * 2

    with pytest.raises(RuntimeError, match="cannot be viewed"):
        step(_x())
    with pytest.raises(RuntimeError, match="cannot be viewed"):
        tracer.function(step, backend=backend)(_x())
