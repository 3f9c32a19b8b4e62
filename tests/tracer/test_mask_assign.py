"""``x[mask] = value`` inside a compiled function (and with autograd), as PyTorch runs it:
it used to raise (a TracingError asking for the mask's value, or NotImplementedError) where
eager and PyTorch work. Each case runs eagerly and compiled on the same inputs and compares
outputs, arguments and gradients."""
import warnings

import numpy as np
import pytest

import eager
import tracer

BACKENDS = ["numba", "interpret"]


def _x():
    return np.array([[-1.0, 2.0, -3.0, 4.0], [0.5, -0.5, 1.5, -2.5], [3.0, -4.0, 0.0, 1.0]],
                    np.float32)


def clamp_negative(x, v):  # on a copy, a 0-d tensor value
    y = x.clone()
    y[y < 0] = v
    return y * 2.0


def zero_positive_in_place(x, v):  # the argument itself, a Python number
    x[x > 0] = 0.0
    return x.sum()


def rows(x, v):  # a mask of the leading dimension sets whole rows
    y = x * 1.0
    y[x.sum(dim=1) > 0] = v
    return y


def int_target(x, v):  # the target's dtype wins
    k = (x * 10.0).to(eager.int64)
    k[k < 0] = 2.75
    return k


CASES = {"clamp_negative": clamp_negative, "zero_positive_in_place": zero_positive_in_place,
         "rows": rows, "int_target": int_target}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_masked_assignment_compiles_and_matches_eager(backend, case):
    body = CASES[case]
    f = tracer.function(body, backend=backend)
    results = []
    for fn in (body, f, f):
        x, v = eager.tensor(_x()), eager.tensor(np.float32(-7.0))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = fn(x, v)
        results.append((out.numpy().copy(), x.numpy().copy()))
    for got in results[1:]:
        for a, b in zip(got, results[0]):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)
    assert f.trace_count == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_masked_assignment_with_autograd_gives_pytorchs_gradients(backend):
    def loss_of(w, v):
        y = w * 2.0
        y[w > 0] = v * 3.0
        return (y * y).sum()

    grads = []
    for fn in (loss_of, tracer.function(loss_of, backend=backend)):
        w = eager.tensor(_x(), requires_grad=True)
        v = eager.tensor(np.float32(0.5), requires_grad=True)
        fn(w, v).backward()
        grads.append((w.grad.numpy().copy(), v.grad.numpy().copy()))
    w0, mask = _x(), _x() > 0
    # d/dw: zero where the mask wrote, 2 * (2w) * 2 elsewhere; d/dv: 2 * (3v) * 3 per write
    want_w = np.where(mask, 0.0, 8.0 * w0).astype(np.float32)
    want_v = np.float32(mask.sum() * 18.0 * 0.5)
    for gw, gv in grads:
        np.testing.assert_allclose(gw, want_w, rtol=1e-6)
        np.testing.assert_allclose(gv, want_v, rtol=1e-6)


def test_as_many_values_as_the_mask_sets_is_still_refused_inside_a_trace():
    def spread(x):
        y = x.clone()
        y[y > 0] = eager.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
        return y

    x = eager.tensor(_x())
    assert spread(x).numpy()[0, 1] == 1.0  # eagerly fine
    # (the values' places depend on the mask's value: a documented limit, README)
    with pytest.raises(tracer.TracingError, match=r"test_mask_assign.py:\d+: .numpy\(\) of a "
                                                  r"traced tensor \(%\d+: bool\[3,4\]\)"):
        tracer.function(spread, backend="interpret")(x)
