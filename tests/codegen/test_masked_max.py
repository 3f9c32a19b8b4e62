"""A causal (tril_fill -inf) softmax's row kernel keeps its fill value hidden from LLVM
(codegen.vmath.hidden), so its masked running maximum vectorizes; the values are eager's,
NaN and infinities included."""
from __future__ import annotations

import numpy as np
import pytest

import eager
import tracer
from eager.nn.attention import tril_fill


def _causal_softmax(s):
    return tril_fill(s * 0.5, 0, -np.inf).softmax(-1), tril_fill(s, -1, -np.inf).amax(-1)


def _scores(seed):
    s = np.random.default_rng(seed).standard_normal((2, 3, 8, 8)).astype(np.float32)
    s[0, 0, 3, 1] = np.nan          # a NaN kept by the mask: its row is NaN
    s[0, 1, 2, 5] = np.nan          # a NaN the mask drops: its row is not
    s[1, 0, 4, 0] = np.inf
    s[1, 2, 6, :] = -np.inf         # a row of -inf: NaN after the softmax, as eager
    return s


@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_causal_softmax_and_masked_max_match_eager(backend):
    f = tracer.function(_causal_softmax, backend=backend)
    for seed in (0, 1):
        s = _scores(seed)
        want = [w.numpy() for w in _causal_softmax(eager.from_numpy(s))]
        got = [g.numpy() for g in f(eager.from_numpy(s))]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    if backend == "numba":
        sources = [k.source for k in f.get_concrete_function(eager.from_numpy(s)).kernels]
        assert any("= hidden(" in src for src in sources), sources
