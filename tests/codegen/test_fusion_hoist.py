"""A small kernel that reads nothing the kernel before it computes runs before it when a
later equation needs both (codegen.fuse._hoist_next): batch norm in eval after a
convolution is one full-size kernel, (x - mean) never written to memory."""
from __future__ import annotations

import numpy as np
import pytest

import eager
import eager.nn as nn
import tracer


def _block():
    eager.manual_seed(0)
    block = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.BatchNorm2d(3), nn.ReLU())
    block.eval()
    with eager.no_grad():
        block[1].running_mean.copy_(eager.tensor([0.5, -1.0, 2.0]))
        block[1].running_var.copy_(eager.tensor([2.0, 0.25, 1.0]))
    return block


@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_eval_batch_norm_after_a_convolution_is_one_full_size_kernel(backend):
    block = _block()

    def infer(x):
        with eager.no_grad():
            return block(x)
    f = tracer.function(infer, backend=backend)
    for seed in (1, 2):
        x = eager.from_numpy(np.random.default_rng(seed).standard_normal(
            (4, 2, 8, 8)).astype(np.float32))
        np.testing.assert_allclose(f(x).numpy(), infer(x).numpy(), rtol=1e-5, atol=1e-6)
    if backend == "numba":
        c = f.get_concrete_function(x)
        full = [k for k in c.kernels
                if any(tuple(v.type.shape) == (4, 3, 8, 8) for v in k.group.outputs)]
        assert len(full) == 1, str(c)
        outs = [v for v in full[0].group.outputs if tuple(v.type.shape) == (4, 3, 8, 8)]
        assert len(outs) == 1, str(c)   # the result only
