"""Symbolic (None) dimensions on the numba backend: kernels take the sizes at run time.

One trace and one compile serve every batch size: the kernels' loop bounds are int64
arguments named N0, N1, ... (the IR prints a dimension named in the signature by its name). A kernel that would need a symbolic size
as a stride (writing a transposed (4, N0) array) makes the program fall back to one specialization
per size (`PerSizeProgram`), still one trace.
"""
import re

import numpy as np
import pytest

import codegen
import eager
import eager.nn as nn
import eager.nn.functional as F
import tracer
from _symbolic_checks import (check_backward_through_mlp, check_every_size,
                              check_training_step)
from codegen.runtime import PerSizeProgram, Program
from tracer import TensorSpec

# 0/0 of a mean over an empty axis is a value here, not a warning (as in eager).
pytestmark = pytest.mark.filterwarnings(
    "ignore:(invalid value|divide by zero) encountered:RuntimeWarning")
SIZES = (1, 7, 64, 0)
ROWS = [TensorSpec((None, 4), eager.float32)]

_MLP = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
_LN = nn.LayerNorm(4)

# name -> (body, True if every kernel takes the sizes at run time)
WORKLOADS = {
    "elementwise": (lambda x: eager.tanh(x * 2.0 + 1.0) * x, True),
    "softmax": (lambda x: F.softmax(x, dim=-1), True),
    "layer_norm": (lambda x: _LN(x), True),
    "mlp": (lambda x: _MLP(x), True),
    "sum_over_symbolic_axis": (lambda x: (x * x).sum(0), True),
    "sum_over_all": (lambda x: x.sum(), True),
    "amax_rows": (lambda x: eager.amax(x, 1), True),
    "mean_over_symbolic_axis": (lambda x: x.mean(0) + x.mean(), True),
    "slice_columns": (lambda x: x[:, 1:3] + x[:, :2], True),
    "unsqueeze_broadcast": (lambda x: x.unsqueeze(1) * x.unsqueeze(2), True),
    "transpose_then_reduce_rows": (lambda x: (x.T * 2.0).sum(1), True),
    "transpose": (lambda x: x.T * 2.0, False),  # writes a (4, N0) array: N0 is a stride
}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_numba_one_trace_serves_every_size(name):
    body, runtime_sizes = WORKLOADS[name]
    f = check_every_size(body, "numba", SIZES)
    with eager.no_grad():  # (grad mode is part of the cache key)
        program = f.get_concrete_function(eager.ones(3, 4)).program
    assert f.trace_count == 1
    assert isinstance(program, Program if runtime_sizes else PerSizeProgram)


def test_kernels_take_the_size_as_a_loop_bound_and_compile_once():
    f = tracer.function(lambda x: F.softmax(x * 2.0, dim=-1), input_signature=ROWS,
                        backend="numba")
    with eager.no_grad():
        f(eager.randn(3, 4))
        cf = f.get_concrete_function()
        (kernel,) = cf.kernels
        assert '@njit("void(float32[::1], float32[::1], int64)"' in kernel.source
        assert "def kernel(in0, out0, N0):" in kernel.source
        assert "for i0 in range(N0):" in kernel.source
        assert "N0*4 iterations" in str(cf) and "symbolic sizes N0: bound per call" in str(cf)
        codegen.reset_stats()
        for n in (5, 64, 0, 1000):
            x = eager.randn(n, 4)
            np.testing.assert_allclose(f(x).numpy(), F.softmax(x * 2.0, dim=-1).numpy(),
                                       rtol=1e-5, atol=1e-6)
        stats = codegen.compile_stats()
    assert stats["numba_compiles"] == 0 and stats["modules_loaded"] == 0
    assert f.trace_count == 1


def test_per_size_fallback_says_so_and_is_cached():
    f = tracer.function(lambda x: x.T * 2.0, input_signature=ROWS, backend="numba")
    with eager.no_grad():
        for n in (3, 5, 3):
            x = eager.randn(n, 4)
            np.testing.assert_array_equal(f(x).numpy(), x.numpy().T * 2)
        program = f.get_concrete_function().program
    assert isinstance(program, PerSizeProgram)
    assert len(program._programs) == 2
    assert "compiled per size" in program.describe()


def test_backward_through_a_symbolic_mlp_forward_on_numba():
    f = check_backward_through_mlp("numba", SIZES)
    assert f.trace_count == 1


def test_max_over_an_empty_symbolic_axis_raises_on_numba():
    f = tracer.function(lambda x: eager.amax(x, 0), input_signature=ROWS, backend="numba")
    np.testing.assert_array_equal(f(eager.ones(2, 4)).numpy(), np.ones(4))
    with pytest.raises(ValueError, match="size 0"):
        f(eager.ones(0, 4))


@pytest.mark.parametrize("loss_name", ["mse", "cross_entropy"])
def test_training_step_with_a_named_batch_dimension_on_numba(loss_name):
    import eager.optim as optim

    f = check_training_step("numba", loss_name, lambda ps: optim.SGD(ps, lr=0.1), (3, 5, 64, 1))
    assert f.trace_count == 1
    # every kernel takes the batch at run time (the loss's sum over it too)
    assert isinstance(f.get_concrete_function().program, Program)


def test_cross_entropy_over_a_named_batch_on_numba():
    f = tracer.function(lambda x, y: F.cross_entropy(x * 2.0, y), backend="numba",
                        input_signature=[TensorSpec(("batch", 5)),
                                         TensorSpec(("batch",), eager.int64)])
    with eager.no_grad():
        for n in SIZES:
            x, y = eager.randn(n, 5), eager.randint(0, 5, (n,))
            np.testing.assert_allclose(f(x, y).numpy(), F.cross_entropy(x * 2.0, y).numpy(),
                                       rtol=1e-5)
    assert f.trace_count == 1
    # The IR prints the user's name; kernels take the size as N0, an identifier of theirs.
    concrete = f.get_concrete_function()
    assert "f32[batch,5]" in str(concrete.graph)
    assert concrete.kernels and all(k.entry is not None for k in concrete.kernels)
    code = ["\n".join(line.split("#")[0] for line in k.source.split('"""')[2].splitlines())
            for k in concrete.kernels]
    assert any(re.search(r"\bN0\b", c) for c in code)
    assert not any(re.search(r"\bbatch\b", c) for c in code)


def test_threads_calling_with_different_sizes():
    import threading

    body = lambda x: F.layer_norm(x * 2.0, (4,)).sum(0)  # noqa: E731
    f = tracer.function(body, input_signature=ROWS, backend="numba")
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            with eager.no_grad():
                for _ in range(50):
                    x = eager.randn(int(rng.integers(0, 40)), 4)
                    np.testing.assert_allclose(f(x).numpy(), body(x).numpy(), rtol=1e-4,
                                               atol=1e-5)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert f.trace_count == 1
