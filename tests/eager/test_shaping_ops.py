"""Indexing, shaping, scan and sampling ops (issue 16 item 4), eagerly: PyTorch's semantics
where the OpInfo table (opinfo_shaping.py) does not reach: eager-only ops (nonzero,
masked_select, repeat_interleave with tensor repeats), NaN ordering, errors, in-place
forms with autograd, creation helpers and the distributions of the random ones."""
import math

import numpy as np
import pytest

import eager

NAN = math.nan


def t(data, dtype=None):
    return eager.tensor(data, dtype=dtype)


# --------------------------------------------------------------------------------------
# eager-only ops (their output shape depends on values)

def test_nonzero_and_as_tuple():
    x = t([[0.0, 1.5, 0.0], [NAN, 0.0, -2.0]])
    out = eager.nonzero(x)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out.numpy(), [[0, 1], [1, 0], [1, 2]])
    rows, cols = x.nonzero(as_tuple=True)
    np.testing.assert_array_equal(rows.numpy(), [0, 1, 1])
    np.testing.assert_array_equal(cols.numpy(), [1, 0, 2])
    assert eager.nonzero(eager.zeros(2, 3)).shape == (0, 2)
    assert eager.nonzero(t(5.0)).shape == (1, 0)


def test_where_with_one_argument_is_nonzero_as_tuple():
    # torch.where(condition) is torch.nonzero(condition, as_tuple=True), any dtype
    x = t([[0.0, 1.5, 0.0], [NAN, 0.0, -2.0]])
    rows, cols = eager.where(x)
    np.testing.assert_array_equal(rows.numpy(), [0, 1, 1])
    np.testing.assert_array_equal(cols.numpy(), [1, 0, 2])
    (only,) = eager.where(t([3, 0, 7]) > 2)
    assert only.dtype == np.int64
    np.testing.assert_array_equal(only.numpy(), [0, 2])
    with pytest.raises(TypeError, match="where"):
        eager.where(x > 0, x)


def test_masked_select_broadcasts_and_differentiates():
    x = t([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]).requires_grad_()
    mask = t([True, False, True])
    out = eager.masked_select(x, mask)
    np.testing.assert_array_equal(out.detach().numpy(), [1, 3, 4, 6])
    (out * t([1.0, 2.0, 3.0, 4.0])).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[1, 0, 2], [3, 0, 4]])
    assert x.masked_select(x > 10).shape == (0,)
    assert eager.masked_select(t(2.0), t(True)).shape == (1,)


def test_repeat_interleave_with_tensor_repeats():
    x = t([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]).requires_grad_()
    out = x.repeat_interleave(t([2, 0, 1]), dim=0)
    np.testing.assert_array_equal(out.detach().numpy(), [[1, 2], [1, 2], [5, 6]])
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[2, 2], [0, 0], [1, 1]])
    np.testing.assert_array_equal(eager.repeat_interleave(t([1, 2]), 3).numpy(),
                                  [1, 1, 1, 2, 2, 2])
    with pytest.raises(RuntimeError, match="same size"):
        x.repeat_interleave(t([1, 2]), dim=0)


# --------------------------------------------------------------------------------------
# NaN, ties and PyTorch's conventions

def test_sort_puts_nan_last_ascending_and_first_descending():
    x = t([2.0, NAN, -1.0, NAN, 0.5])
    asc = eager.sort(x)
    np.testing.assert_array_equal(asc.values.numpy(), [-1.0, 0.5, 2.0, NAN, NAN])
    np.testing.assert_array_equal(asc.indices.numpy(), [2, 4, 0, 1, 3])
    desc = x.sort(descending=True)
    np.testing.assert_array_equal(desc.values.numpy(), [NAN, NAN, 2.0, 0.5, -1.0])
    np.testing.assert_array_equal(desc.indices.numpy(), [1, 3, 0, 4, 2])
    top = eager.topk(x, 2)
    np.testing.assert_array_equal(top.indices.numpy(), [1, 3])


def test_sort_is_stable_both_ways_and_handles_int_extremes():
    big = np.iinfo(np.int64)
    x = t([3, big.min, 3, big.max, 1, 3], dtype=eager.int64)
    np.testing.assert_array_equal(eager.argsort(x, stable=True).numpy(), [1, 4, 0, 2, 5, 3])
    np.testing.assert_array_equal(eager.argsort(x, descending=True, stable=True).numpy(),
                                  [3, 0, 2, 5, 4, 1])
    b = t([True, False, True])
    np.testing.assert_array_equal(eager.sort(b).values.numpy(), [False, True, True])


def test_cummax_propagates_nan_and_ties_take_the_later_index():
    x = t([1.0, 3.0, 3.0, NAN, 5.0, NAN])
    v, i = eager.cummax(x, 0)
    np.testing.assert_array_equal(v.numpy(), [1, 3, 3, NAN, NAN, NAN])
    np.testing.assert_array_equal(i.numpy(), [0, 1, 2, 3, 3, 5])
    v, i = eager.cummin(t([2, 1, 1, 4]), 0)
    np.testing.assert_array_equal(v.numpy(), [2, 1, 1, 1])
    np.testing.assert_array_equal(i.numpy(), [0, 1, 2, 2])


def test_cumsum_dtypes_and_logcumsumexp_stability():
    assert eager.cumsum(t([1, 2], dtype=eager.int32), 0).dtype == np.int64
    assert eager.cumsum(t([True, True]), 0).numpy().tolist() == [1, 2]
    assert eager.cumsum(t([1, 2]), 0, dtype=eager.float64).dtype == np.float64
    out = eager.logcumsumexp(t([-1000.0, 0.0, 1000.0]), 0).numpy()
    np.testing.assert_allclose(out, [-1000.0, 0.0, 1000.0])


def test_cumprod_gradient_with_zeros():
    x = t([2.0, 0.0, 3.0, 0.0], dtype=eager.float64).requires_grad_()
    eager.cumprod(x, 0).sum().backward()
    # d/dx_i sum_j prod_{k<=j} x_k, by hand: only the products left of the first zero live
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 2.0 + 2.0 * 3.0, 0.0, 0.0])


def test_topk_smallest_and_errors():
    x = t([[4.0, 1.0, 3.0], [0.0, 5.0, 2.0]])
    v, i = x.topk(2, dim=1, largest=False)
    np.testing.assert_array_equal(v.numpy(), [[1, 3], [0, 2]])
    np.testing.assert_array_equal(i.numpy(), [[1, 2], [0, 2]])
    with pytest.raises(RuntimeError, match="out of range"):
        x.topk(4)


def test_split_chunk_and_roll_conventions():
    x = eager.arange(10)
    assert [p.shape[0] for p in x.split(4)] == [4, 4, 2]
    assert [p.shape[0] for p in x.split([3, 7])] == [3, 7]
    assert [p.shape[0] for p in x.chunk(4)] == [3, 3, 3, 1]
    assert [p.shape[0] for p in eager.arange(6).chunk(4)] == [2, 2, 2]  # fewer chunks
    with pytest.raises(RuntimeError, match="sum exactly"):
        x.split([3, 3])
    m = eager.arange(6).reshape(2, 3)
    np.testing.assert_array_equal(m.roll(1).numpy(), [[5, 0, 1], [2, 3, 4]])
    np.testing.assert_array_equal(m.roll((1, 1), (0, 1)).numpy(), [[5, 3, 4], [2, 0, 1]])
    # split pieces are views: writing one writes the base, as in PyTorch
    base = eager.zeros(4)
    base.split(2)[1].fill_(7.0)
    np.testing.assert_array_equal(base.numpy(), [0, 0, 7, 7])


def test_gather_and_scatter_check_index_values():
    x = t([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(IndexError):
        eager.gather(x, 1, t([[0, 2], [1, 0]]))
    with pytest.raises(IndexError):
        eager.gather(x, 1, t([[-1, 0], [1, 0]]))
    with pytest.raises(IndexError):
        x.scatter(0, t([[2, 0]]), t([[1.0, 1.0]]))
    with pytest.raises(IndexError):
        eager.take_along_dim(x, t([[-1], [0]]), 1)
    with pytest.raises(RuntimeError, match="index must be an integer"):
        eager.gather(x, 0, t([[0.0, 1.0]]))
    with pytest.raises(RuntimeError, match="boolean masks"):
        x.masked_fill(t([[1, 0], [0, 1]]), 0.0)


def test_masked_fill_keeps_dtype_and_takes_a_tensor_value():
    x = t([1, 2, 3])
    out = x.masked_fill(t([True, False, True]), 9.7)
    assert out.dtype == np.int64 and out.numpy().tolist() == [9, 2, 9]
    v = t(2.0).requires_grad_()
    y = eager.zeros(3).masked_fill(t([True, False, True]), v)
    y.sum().backward()
    assert v.grad.item() == 2.0


def test_inplace_forms_write_the_tensor_and_keep_autograd():
    w = t([1.0, 2.0, 3.0]).requires_grad_()
    y = w * 1
    y.masked_fill_(t([False, True, False]), 0.0)
    y.scatter_(0, t([0]), t([5.0]))
    y.scatter_add_(0, t([2, 2]), t([1.0, 1.0]))
    np.testing.assert_array_equal(y.detach().numpy(), [5.0, 0.0, 5.0])
    y.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [0.0, 0.0, 1.0])
    m = eager.ones(3, 3)
    m.tril_()
    np.testing.assert_array_equal(m.numpy(), np.tril(np.ones((3, 3))))


def test_scatter_reduce_include_self_false_and_mean():
    x = t([10.0, 20.0, 30.0])
    idx = t([0, 0, 2])
    src = t([1.0, 5.0, 2.0])
    cases = {("amax", True): [10, 20, 30], ("amax", False): [5, 20, 2],
             ("sum", False): [6, 20, 2], ("mean", True): [16 / 3, 20, 16],
             ("mean", False): [3, 20, 2], ("prod", True): [50, 20, 60],
             ("amin", False): [1, 20, 2]}
    for (reduce, include), want in cases.items():
        got = x.scatter_reduce(0, idx, src, reduce, include_self=include)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, err_msg=f"{reduce} {include}")


def test_scatter_reduce_mean_of_integers_floor_divides_as_pytorch():
    # PyTorch: out.div_(count, rounding_mode="floor") for integral dtypes
    x = t([10, 20, -10], dtype=eager.int64)
    idx = t([0, 0, 2, 2])
    src = t([1, 5, 2, 1], dtype=eager.int64)
    got = x.scatter_reduce(0, idx, src, "mean")
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got.numpy(), [5, 20, -3])  # 16 // 3, -7 // 3 (floor)
    got = x.int().scatter_reduce(0, idx, src.int(), "mean", include_self=False)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got.numpy(), [3, 20, 1])


def test_scatter_reduce_amax_gradient_is_shared_between_ties():
    x = t([1.0, 0.0], dtype=eager.float64).requires_grad_()
    src = t([1.0, 0.5, 1.0], dtype=eager.float64).requires_grad_()
    out = eager.scatter_reduce(x, 0, t([0, 0, 0]), src, "amax")
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1 / 3, 1.0])
    np.testing.assert_allclose(src.grad.numpy(), [1 / 3, 0.0, 1 / 3])


def test_unfold_and_diagonal_layouts():
    x = eager.arange(12).reshape(3, 4)
    u = x.unfold(1, 2, 2)
    assert u.shape == (3, 2, 2)
    np.testing.assert_array_equal(u.numpy()[1], [[4, 5], [6, 7]])
    d = eager.arange(24).reshape(2, 3, 4).diagonal(0, 1, 2)
    assert d.shape == (2, 3)
    np.testing.assert_array_equal(d.numpy(), [[0, 5, 10], [12, 17, 22]])


def test_einsum_matches_numpy_on_attention_shapes_and_lowers_to_matmul():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 4, 5, 8)).astype(np.float32)
    k = rng.standard_normal((2, 4, 6, 8)).astype(np.float32)
    got = eager.einsum("bhqd,bhkd->bhqk", t(q), t(k)).numpy()
    np.testing.assert_allclose(got, np.einsum("bhqd,bhkd->bhqk", q, k), rtol=1e-5, atol=1e-5)
    from eager import dispatch
    from eager.protocol import TraceProtocol

    seen = []

    class Record(TraceProtocol):
        def apply(self, op, datas, params):
            seen.append(op.name)
            return dispatch.eager_compute(op, datas, params)

    prev = dispatch.set_protocol(Record())
    try:
        eager.einsum("bhqd,bhkd->bhqk", t(q), t(k))
    finally:
        dispatch.set_protocol(prev)
    assert seen.count("matmul") == 1 and "gather" not in seen, seen
    with pytest.raises(RuntimeError, match="subscripts"):
        eager.einsum("ij,jk->ik", t(q))


def test_mm_bmm_mv_check_shapes():
    a = eager.ones(2, 3)
    assert a.mm(eager.ones(3, 4)).shape == (2, 4)
    assert a.mv(eager.ones(3)).shape == (2,)
    assert eager.bmm(eager.ones(5, 2, 3), eager.ones(5, 3, 1)).shape == (5, 2, 1)
    with pytest.raises(RuntimeError, match="2-D"):
        eager.mm(eager.ones(2, 2, 2), eager.ones(2, 2))
    with pytest.raises(RuntimeError, match="batch sizes"):
        eager.bmm(eager.ones(2, 2, 3), eager.ones(3, 3, 2))
    with pytest.raises(RuntimeError):
        a.mv(eager.ones(3, 1))


# --------------------------------------------------------------------------------------
# creation and sampling

def test_new_creation_methods_and_empty():
    x = t([1, 2], dtype=eager.int32)
    assert x.new_zeros(2, 3).dtype == np.int32 and x.new_zeros((2, 3)).shape == (2, 3)
    assert x.new_ones(3).numpy().tolist() == [1, 1, 1]
    assert x.new_full((2,), 7).numpy().tolist() == [7, 7]
    assert x.new_empty(4).shape == (4,)
    assert x.new_tensor([3, 4]).dtype == np.int32
    assert eager.empty(2, 3).shape == (2, 3) and eager.empty(2, dtype=eager.int64).dtype == np.int64
    assert eager.empty_like(x).shape == (2,)
    assert eager.zeros(2).new_zeros(3, requires_grad=True).requires_grad
    assert x.new_ones(2, device="cpu").shape == (2,)
    with pytest.raises(RuntimeError, match="CPU only"):
        x.new_zeros(2, device="cuda")


def test_flip_and_tile_take_dims_as_varargs_or_a_tuple():
    m = eager.arange(6).reshape(2, 3)
    np.testing.assert_array_equal(m.flip(0, 1).numpy(), m.flip((0, 1)).numpy())
    np.testing.assert_array_equal(eager.flip(m, [1]).numpy(), [[2, 1, 0], [5, 4, 3]])
    assert m.tile(2, 2).shape == (4, 6) and eager.tile(m, (2,)).shape == (2, 6)


def test_randint_high_size_and_randperm():
    eager.manual_seed(0)
    r = eager.randint(5, (200,))
    assert r.dtype == np.int64 and set(r.numpy().tolist()) == set(range(5))
    p = eager.randperm(50)
    assert sorted(p.numpy().tolist()) == list(range(50))
    assert eager.randperm(3, dtype=eager.int32).dtype == np.int32
    g = eager.Generator().manual_seed(3)
    a = eager.randperm(10, generator=g).numpy()
    b = eager.randperm(10, generator=eager.Generator().manual_seed(3)).numpy()
    np.testing.assert_array_equal(a, b)


RANDOM_WITH_GENERATOR = {  # every random function PyTorch gives a generator= (dropout aside)
    "rand": lambda g: eager.rand(2, 3, generator=g),
    "randn": lambda g: eager.randn(4, generator=g, dtype=eager.float64),
    "randint": lambda g: eager.randint(0, 10, (5,), generator=g),
    "randint_high": lambda g: eager.randint(7, (3,), generator=g),
    "randperm": lambda g: eager.randperm(6, generator=g),
    "multinomial": lambda g: eager.multinomial(t([0.2, 0.3, 0.5]), 2, generator=g),
    "multinomial_repl": lambda g: eager.multinomial(t([0.2, 0.8]), 4, True, generator=g),
    "normal_": lambda g: eager.zeros(3).normal_(1.0, 2.0, generator=g),
    "uniform_": lambda g: eager.zeros(3).uniform_(-1.0, 1.0, generator=g),
    "bernoulli": lambda g: eager.bernoulli(t([0.1, 0.5, 0.9]), generator=g),
    "bernoulli_method": lambda g: t([0.1, 0.5, 0.9]).bernoulli(generator=g),
    "bernoulli_": lambda g: eager.zeros(4).bernoulli_(0.5, generator=g),
    "init_uniform_": lambda g: eager.nn.init.uniform_(eager.zeros(3), generator=g),
    "init_normal_": lambda g: eager.nn.init.normal_(eager.zeros(3), generator=g),
}


@pytest.mark.parametrize("name", list(RANDOM_WITH_GENERATOR))
def test_random_functions_draw_from_their_generator_only(name):
    draw = RANDOM_WITH_GENERATOR[name]
    eager.manual_seed(7)
    g = eager.Generator().manual_seed(11)
    first, second = draw(g).numpy(), draw(g).numpy()
    after_global = eager.rand(3).numpy()
    # the same seed repeats both draws, in order; the global generator was not touched
    h = eager.Generator().manual_seed(11)
    np.testing.assert_array_equal(draw(h).numpy(), first)
    np.testing.assert_array_equal(draw(h).numpy(), second)
    eager.manual_seed(7)
    np.testing.assert_array_equal(eager.rand(3).numpy(), after_global)
    assert g.get_state() == h.get_state()


def test_bernoulli_values_and_range_check():
    eager.manual_seed(2)
    p = t([0.0, 1.0, 0.25], dtype=eager.float64).expand(4000, 3)
    out = eager.bernoulli(p)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out.numpy().mean(0), [0.0, 1.0, 0.25], atol=0.03)
    for bad in ([0.5, 1.5], [NAN, 0.5], [-0.1, 0.2]):
        with pytest.raises(RuntimeError, match="p_in >= 0"):
            eager.bernoulli(t(bad))
    with pytest.raises(RuntimeError, match="p_in >= 0"):
        eager.zeros(2).bernoulli_(2.0)


def test_multinomial_frequencies_follow_the_probabilities():
    eager.manual_seed(1)
    p = t([0.1, 0.0, 0.6, 0.3], dtype=eager.float64)
    draws = eager.multinomial(p.expand(4000, 4), 1).numpy().ravel()
    freq = np.bincount(draws, minlength=4) / draws.size
    np.testing.assert_allclose(freq, [0.1, 0.0, 0.6, 0.3], atol=0.03)
    with_repl = eager.multinomial(p * 10, 4000, replacement=True).numpy()
    freq = np.bincount(with_repl, minlength=4) / with_repl.size
    np.testing.assert_allclose(freq, [0.1, 0.0, 0.6, 0.3], atol=0.03)
    # without replacement the first draws follow p; all of a row are distinct
    rows = eager.multinomial(p.expand(50, 4), 3).numpy()
    assert all(len(set(r)) == 3 and 1 not in r for r in rows.tolist())


def test_multinomial_rejects_bad_distributions():
    with pytest.raises(RuntimeError, match="element < 0"):
        eager.multinomial(t([0.5, -0.1]), 1)
    with pytest.raises(RuntimeError, match="sum of probabilities"):
        eager.multinomial(t([0.0, 0.0]), 1, replacement=True)
    with pytest.raises(RuntimeError, match="without replacement"):
        eager.multinomial(t([0.5, 0.5]), 3)
    with pytest.raises(RuntimeError, match="not enough"):
        eager.multinomial(t([0.5, 0.0, 0.0]), 2)
    with pytest.raises(RuntimeError, match="inf"):
        eager.multinomial(t([NAN, 1.0]), 1)


# --------------------------------------------------------------------------------------
# second derivatives (the vjp rules are written with registry ops, so they differentiate)

from test_grad import test_second_derivative_matches_finite_differences as _second_order  # noqa: E402


@pytest.mark.parametrize("name", ["cumsum", "cumprod", "logcumsumexp", "cummax", "sort",
                                  "topk", "gather_dim", "scatter", "scatter_reduce_amax",
                                  "scatter_reduce_prod", "scatter_reduce_mean", "tril",
                                  "einsum", "unfold", "diag", "roll"])
def test_second_derivatives_match_finite_differences(name):
    _second_order(name)
