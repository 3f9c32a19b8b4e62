"""A row kernel keeps a value that later passes read again (softmax's exp) in a full-size
output row; when that value is itself an output, it is kept in its own row: stored once,
by the pass that computes it (codegen.emit._row_code). Before, it was kept in another
output's row and copied to its own in the last pass (W10's cross-entropy: one more
2.7 MiB stream per step)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import eager
import tracer


def _exp_and_log_softmax(x):
    m = eager.amax(x, -1, keepdim=True)
    z = x - m
    e = eager.exp(z)
    s = e.sum(-1, keepdim=True)
    return z - eager.log(s), e, s


def _reference(x):
    x = x.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        z = x - x.max(-1, keepdims=True)
        e = np.exp(z)
        s = e.sum(-1, keepdims=True)
        return z - np.log(s), e, s


def _inputs(rng, rows, cols, contiguous=True):
    x = rng.uniform(-30, 30, size=(rows, cols * (1 if contiguous else 2))).astype(np.float32)
    if not contiguous:
        x = x[:, ::2]
    x[0, 0] = np.nan
    x[rows // 2, : min(cols, 2)] = np.inf
    x[rows - 1, cols - 1] = -np.inf
    return x


@pytest.mark.parametrize("rows, cols, contiguous", [(37, 1, True), (37, 17, True),
                                                    (5, 1000, True), (23, 65, False)])
def test_a_kept_output_is_stored_once_in_its_own_row(rows, cols, contiguous):
    rng = np.random.default_rng(rows * cols)
    x = _inputs(rng, rows, cols, contiguous)
    f = tracer.function(_exp_and_log_softmax)
    arg = eager.from_numpy(x)
    with eager.no_grad():
        got = [t.numpy() for t in f(arg)]
        eager_out = [t.numpy() for t in _exp_and_log_softmax(arg)]
        concrete = f.get_concrete_function(arg)
    for g, e, r in zip(got, eager_out, _reference(x)):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=2e-6, atol=1e-6, equal_nan=True)
        np.testing.assert_allclose(g, r, rtol=2e-5, atol=1e-6, equal_nan=True)
        assert np.array_equal(np.isnan(g), np.isnan(e))
    (kernel,) = [k for k in concrete.kernels if k.kind == "row"]
    src = kernel.source
    # the exp output's argument name in the kernel, and every store into it
    exp_var = concrete.graph.outputs[1].name
    (name,) = [n for n, v in re.findall(r"# (out\d+): %(\S+) f32", src) if v == exp_var]
    stores = re.findall(rf"^\s*{name}\[[^\n]*\] = [^\n]*$", src, re.M)
    assert len(stores) == 1 and stores[0].endswith(f"# keeps %{exp_var}"), src
    # and no other output's row holds it
    assert src.count("# keeps") == 1, src
