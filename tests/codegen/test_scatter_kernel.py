"""scatter_add's Numba step kernel (codegen.step_kernels.scatter_add: an embedding's
gradient, cross-entropy's one-hot): compiled gives exactly what eager's np.add.at gives,
duplicate and negative indices included, and raises where eager raises."""
import numpy as np
import pytest

import eager
import eager.functions as EF
import eager.nn.functional as F
import tracer

BACKENDS = ["numba", "interpret"]


def _embedding_step(w, ids, x, z):
    """An embedding lookup whose rows are multiplied by a permuted (non-contiguous) tensor
    and summed: the gradient reaching the embedding's scatter_add is exactly that tensor,
    so the weight's gradient must equal eager's bit for bit. And cross-entropy (its
    gradient's one-hot is a scatter_add too) on another leaf."""
    h = F.embedding(ids, w) * x.permute(1, 0, 2)
    loss = h.sum() + F.cross_entropy(z, ids.reshape(-1) % 5)
    loss.backward()
    return loss


def _inputs(dtype, id_dtype):
    rng = np.random.default_rng(7)
    w = rng.standard_normal((7, 5)).astype(dtype)
    x = rng.standard_normal((6, 4, 5)).astype(dtype)
    z = rng.standard_normal((24, 5)).astype(dtype)
    ids = rng.integers(0, 7, (4, 6)).astype(id_dtype)
    ids[0, :3] = ids[2, 5] = ids[3, 0] = 3   # one row picked five times
    return w, ids, x, z


def _run(fn, w, ids, x, z):
    ws, zs = eager.tensor(w, requires_grad=True), eager.tensor(z, requires_grad=True)
    loss = fn(ws, eager.tensor(ids), eager.tensor(x), zs)
    return [loss.detach().numpy(), ws.grad.numpy(), zs.grad.numpy()]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype,id_dtype", [(np.float32, np.int64), (np.float32, np.int32),
                                            (np.float64, np.int64)])
def test_embedding_gradient_matches_eager_bit_for_bit(backend, dtype, id_dtype):
    args = _inputs(dtype, id_dtype)
    want = _run(_embedding_step, *args)
    compiled = tracer.function(_embedding_step, backend=backend)
    for _ in range(2):  # (the second call through the cached program and buffers)
        got = _run(compiled, *args)
        for a, b in zip(want, got):
            assert a.dtype == b.dtype
        np.testing.assert_array_equal(got[1], want[1])
        # (the loss and softmax are fused kernels: summed in another order than numpy's)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
        np.testing.assert_allclose(got[2], want[2], rtol=1e-6, atol=1e-7)


def test_the_program_runs_both_scatter_adds_by_numba_kernels():
    w, ids, x, z = _inputs(np.float32, np.int64)
    f = tracer.function(_embedding_step)
    _run(f, w, ids, x, z)
    args = (eager.tensor(w, requires_grad=True), eager.tensor(ids), eager.tensor(x),
            eager.tensor(z, requires_grad=True))
    steps = f.get_concrete_function(*args).program.describe_steps()
    scatters = [line for line in steps.splitlines() if "= scatter_add(" in line]
    # the embedding's gradient and cross-entropy's one-hot
    assert len(scatters) == 2 and all(" by " in line for line in scatters), steps


def _scatter(g, ids):
    return EF.scatter_add(g * 2, (ids,), (4, 3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_negative_and_out_of_range_indices_as_eager(backend):
    g = np.arange(15, dtype=np.float32).reshape(5, 3)
    compiled = tracer.function(_scatter, backend=backend)
    ok = np.array([0, -1, 2, -4, -1])   # negatives count from the end, as np.add.at
    np.testing.assert_array_equal(compiled(eager.tensor(g), eager.tensor(ok)).numpy(),
                                  _scatter(eager.tensor(g), eager.tensor(ok)).numpy())
    for bad in ([0, 1, 4, 0, 0], [0, 1, -5, 0, 0]):
        for fn in (_scatter, compiled):
            with pytest.raises(IndexError, match=str(bad[2])):
                fn(eager.tensor(g), eager.tensor(np.array(bad)))
    # and the program still serves good indices after the error
    np.testing.assert_array_equal(compiled(eager.tensor(g), eager.tensor(ok)).numpy(),
                                  _scatter(eager.tensor(g), eager.tensor(ok)).numpy())


def test_kernel_is_np_add_at_on_two_index_arrays_and_refuses_what_numpy_serves():
    from codegen import build, step_kernels
    from eager.ops import OPS, TensorType
    from tracer.ir import Eqn, Var

    def eqn(g_shape, idx_shapes, shape, dtype=np.float64):
        g = Var("g", TensorType(g_shape, np.dtype(dtype)))
        idx = tuple(Var(f"i{j}", TensorType(s, np.dtype(np.int64)))
                    for j, s in enumerate(idx_shapes))
        return Eqn("scatter_add", (g,) + idx, {"shape": shape},
                   Var("o", TensorType(shape, np.dtype(dtype))))

    rng = np.random.default_rng(2)
    g = rng.standard_normal(40)
    rows, cols = rng.integers(0, 3, 40), rng.integers(-4, 4, 40)   # many repeats
    source, sizes = step_kernels.scatter_add(eqn((40,), [(40,), (40,)], (3, 4)))
    entry = build.load_kernel(source, "test_scatter_add")[0]
    got = np.full((3, 4), np.nan)
    assert entry(g, rows, cols, got.reshape(-1), sizes) == 0
    np.testing.assert_array_equal(got, OPS["scatter_add"].impl(g, rows, cols, shape=(3, 4)))
    # one kernel for every size: the source does not depend on them
    assert step_kernels.scatter_add(eqn((7,), [(7,), (7,)], (9, 2)))[0] == source
    # broadcast indices, broadcast values, an empty array, ints: numpy's implementation
    assert step_kernels.scatter_add(eqn((2, 3), [(2, 1), (3,)], (2, 3))) is None
    assert step_kernels.scatter_add(eqn((1, 3), [(5,)], (4, 3))) is None
    assert step_kernels.scatter_add(eqn((0, 3), [(0,)], (4, 3))) is None
    assert step_kernels.scatter_add(eqn((5, 3), [(5,)], (4, 3), np.int64)) is None
