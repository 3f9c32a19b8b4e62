"""The cold first call: what the compile-ahead children compile besides the steps' kernels
(codegen.gemm's product kernel), and how the work is split between them."""
import os

import numpy as np
import pytest

import eager
import tracer
from codegen import ahead, build, gemm


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty kernel cache, forking allowed, and no product kernel in this process yet."""
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(ahead, "ENABLED", True)
    monkeypatch.setattr(ahead, "_threads_alone", lambda: True)
    monkeypatch.setattr(ahead, "_cpus", lambda: 2)
    monkeypatch.setattr(ahead, "STALL_SECONDS", 90.0)  # (a loaded machine: see test_compile_ahead)
    gemm._kernel.cache_clear()
    yield tmp_path
    gemm._kernel.cache_clear()  # (its entry came from this test's cache directory)


PRODUCT_TWIN = f'''"""c[q, i0:i1, j0:j1] = a[q, i0:i1] @ b[q, :, j0:j1], as codegen.gemm's kernel."""
import numpy as np
from codegen.build import njit


@njit("{gemm._SIGNATURE}", cache=True, nogil=True)
def kernel(a, b, c, scratch, b0, b1, i0, i1, j0, j1):
    for q in range(b0, b1):
        q0, q1 = q // c.shape[1], q % c.shape[1]
        for i in range(i0, i1):
            for j in range(j0, j1):
                s = np.float32(0.0)
                for k in range(a.shape[3]):
                    s += a[q0, q1, i, k] * b[q0, q1, k, j]
                c[q0, q1, i, j] = s
'''


@pytest.mark.skipif(not gemm.available(), reason="no AVX-512 product kernel on this machine")
def test_children_compile_the_product_kernel_the_program_only_loads_it(fresh_cache,
                                                                         monkeypatch):
    """The product kernel a runner calls was compiled by the program itself, after waiting
    for the children: ~2 s of W8-W10's cold first call, alone on one core."""
    parent, loads = os.getpid(), []
    original_load, original_child = build.load_module, ahead._compile_in_child

    def load_module(source, name):
        loads.append((os.getpid(), name))
        return original_load(source, name)

    def compile_in_child(source, name):
        (fresh_cache / f"child-{name}").touch()
        original_child(source, name)
    monkeypatch.setattr(build, "load_module", load_module)
    monkeypatch.setattr(ahead, "_compile_in_child", compile_in_child)
    # (the product kernel's plain-loop twin, same signature: 0.3 s to compile, not 2 s)
    monkeypatch.setattr(gemm, "_source", lambda: PRODUCT_TWIN)

    def step(x, w):
        return (x @ w).tanh()
    rng = np.random.default_rng(0)
    x, w = (eager.from_numpy(rng.standard_normal((64, 64)).astype(np.float32))
            for _ in range(2))
    assert gemm.use_for((64, 64), (64, 64), np.float32)
    f = tracer.function(step)
    with eager.no_grad():
        got, want = f(x, w).numpy(), step(x, w).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert (fresh_cache / "child-gemm_f32").exists()
    assert [name for pid, name in loads if pid == parent] == []  # the program compiled nothing
    assert "gemm(" in f.get_concrete_function(x, w).program.runner_source
    assert gemm.ahead_source() is None  # (loaded now: nothing left to compile ahead)


def test_the_cost_counts_the_inlined_product_kernel():
    """A kernel that inlines codegen.gemm_kernel's product_blocks (the LSTM recurrences)
    costs about what the product kernel costs alone, ~2 s: estimated without it, W10's
    two LSTM kernels and the product kernel went to one child and the rest to the other
    (10.4 against 1.1 s of compiling)."""
    product = gemm._source()
    big = "@njit('void()')\ndef kernel(" + ", ".join(f"in{i}" for i in range(21)) + "):\n" \
        + "\n".join(f"    v{i} = in0[{i}]" for i in range(110)) + "\n"
    assert ahead._cost(product) > 5 * ahead._cost(big)   # (W5's 0.36 s kernel: ~2 s)
    # two such kernels and a few small ones: each child gets one of the two
    costs = [ahead._cost(s) for s in (product, big, big, product, big)]
    m = ahead._split(costs)
    assert sum(costs[:m]) < 2 * sum(costs[m:]) and sum(costs[m:]) < 2 * sum(costs[:m])
