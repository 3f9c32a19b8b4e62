"""Indexing against NumPy: basic (ints, slices with negative steps, None, Ellipsis), integer
arrays (tensor, list, numpy array; first, middle and several positions), bool masks, and the
gradients, which must scatter-add for repeated indices like `np.add.at`."""
import numpy as np
import pytest

import eager

X_SHAPE = (4, 5, 3)


def as_numpy_key(key):
    if isinstance(key, tuple):
        return tuple(as_numpy_key(k) for k in key)
    if isinstance(key, eager.Tensor):
        return key.numpy()
    return key


def reference_grad(shape, key, w):
    """d sum(x[key] * w) / dx: every selected position of x receives its w, repeats add up."""
    positions = np.arange(int(np.prod(shape))).reshape(shape)[as_numpy_key(key)]
    grad = np.zeros(int(np.prod(shape)))
    np.add.at(grad, positions.ravel(), np.broadcast_to(w, positions.shape).ravel())
    return grad.reshape(shape)


def check_index(key, shape=X_SHAPE, grad=True):
    rng = np.random.default_rng(abs(hash(repr(key))) % 2 ** 32)
    x_np = rng.standard_normal(shape)
    expected = x_np[as_numpy_key(key)]
    x = eager.tensor(x_np, requires_grad=grad)
    out = x[key]
    assert out.shape == expected.shape, f"x[{key!r}]: shape {out.shape} vs {expected.shape}"
    assert out.dtype == eager.float64
    np.testing.assert_array_equal(out.detach().numpy(), expected)
    if not grad:
        return
    w = rng.standard_normal(expected.shape)
    (out * eager.tensor(w)).sum().backward()
    assert x.grad.shape == shape
    np.testing.assert_allclose(x.grad.numpy(), reference_grad(shape, key, w), rtol=0,
                               atol=1e-14, err_msg=f"gradient of x[{key!r}]")


BASIC = [
    0, -1, 3, slice(None), slice(1, 3), slice(None, None, -1), slice(None, None, -2),
    slice(3, 0, -1), slice(-1, -5, -2), slice(10, 20), slice(2, 1), slice(-100, 100),
    (1, 2), (1, 2, 0), (-1, -1, -1), (slice(None), 2), (slice(None), slice(None, None, -1), 1),
    (slice(1, -1), slice(None, None, 2)), Ellipsis, (Ellipsis, 0), (0, Ellipsis),
    (Ellipsis, slice(None, None, -1)), (1, Ellipsis, 2), None, (None, 1), (slice(None), None),
    (None, Ellipsis, None), (1, None, slice(None), None, 0), (Ellipsis, None),
    (slice(None, None, 3), -2, slice(2, None, -1)),
]


@pytest.mark.parametrize("key", BASIC, ids=[repr(k) for k in BASIC])
def test_basic_indexing_matches_numpy(key):
    check_index(key)


def test_basic_indexing_returns_a_view_sharing_storage():
    x = eager.zeros(3, 4)
    v = x[1, ::2]
    with eager.no_grad():
        v.add_(5)
    np.testing.assert_array_equal(x.numpy()[1], [5, 0, 5, 0])


def test_indexing_a_0d_tensor():
    x = eager.tensor(np.array(2.5))
    assert x[...].shape == () and x[None].shape == (1,) and x[None, None].shape == (1, 1)
    assert x[()].item() == 2.5


ADVANCED = [
    # first position: tensor, list, numpy array
    eager.tensor([0, 3, 1]), [0, 3, 1], np.array([2, 0]), np.array([-1, 0, -4]),
    np.array([[0, 1], [3, 3]]), [[0], [2]], eager.tensor(2), np.array([], dtype=np.int64),
    eager.tensor(np.array([1, 2], np.int32)),
    # middle / last positions
    (slice(None), [4, 0, 4]), (slice(None), eager.tensor([1, 2])), (Ellipsis, [2, 0]),
    (1, [0, 4]), (slice(1, 3), np.array([[0], [2]]), slice(None, None, -1)),
    (slice(None, None, -1), [3, 1], 0), (None, slice(None), [1]),
    # two (or three) arrays: adjacent, broadcasting, separated by a slice
    ([0, 1, 3], [4, 0, 2]), (eager.tensor([0, 1]), eager.tensor([[1], [2]])),
    (np.array([[0], [3]]), np.array([1, 2, 4])), ([0, 1, 2], [1, 2, 3], [0, 1, 2]),
    ([0, 3], slice(None), [2, 0]), (slice(None), [0, 1], [2, 2]),
    ([1, 1], slice(1, 3), eager.tensor([0, 0])),
]


@pytest.mark.parametrize("key", ADVANCED, ids=[repr(k) if not isinstance(k, eager.Tensor)
                                               else f"tensor{k.tolist()}" for k in ADVANCED])
def test_integer_array_indexing_matches_numpy(key):
    check_index(key)


REPEATED = [[0, 0, 1], [3, 3, 3, 3], np.array([[1, 1], [1, 0]]), (slice(None), [2, 2, 0]),
            ([0, 0, 0], [1, 1, 2]), (Ellipsis, [1, 1]), ([2, 2], slice(None), [0, 0])]


@pytest.mark.parametrize("key", REPEATED, ids=[repr(k) for k in REPEATED])
def test_repeated_indices_scatter_add_the_gradient(key):
    check_index(key)


def test_repeated_index_gradient_values():
    x = eager.tensor(np.array([10.0, 20.0, 30.0]), requires_grad=True)
    x[[0, 0, 1, 0]].sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 1.0, 0.0])


MASKS = [
    lambda x: x > 0,                                          # full-shape mask (tensor)
    lambda x: np.array([True, False, True, True]),            # leading dim, numpy
    lambda x: eager.tensor([False, True, False, True]),       # leading dim, tensor
    lambda x: (slice(None), np.array([True, False, False, True, True])),
    lambda x: (Ellipsis, eager.tensor([True, False, True])),
    lambda x: x[:, :, 0] > 0,                                 # 2-d mask over the first dims
    lambda x: np.zeros(4, bool),                              # selects nothing
    lambda x: ([True, True, False, False],),                  # a bool list
    lambda x: (x[:, 0, 0] > 0, slice(None), 1),               # mask, slice, int
]


@pytest.mark.parametrize("make_key", MASKS)
def test_bool_mask_indexing_matches_numpy(make_key):
    rng = np.random.default_rng(1)
    x_np = rng.standard_normal(X_SHAPE)
    x = eager.tensor(x_np, requires_grad=True)
    key = make_key(x.detach())  # masks may be computed from the tensor's own values
    out = x[key]
    expected = x_np[as_numpy_key(key)]
    assert out.shape == expected.shape
    np.testing.assert_array_equal(out.detach().numpy(), expected)
    w = rng.standard_normal(out.shape)
    (out * eager.tensor(w)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), reference_grad(X_SHAPE, key, w), atol=1e-14)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.bool_])
def test_indexing_keeps_the_dtype(dtype):
    x = eager.tensor(np.arange(12).reshape(3, 4).astype(dtype))
    for key in (1, (slice(None), 2), [0, 2], ([0, 1], [3, 3])):
        out = x[key]
        assert out.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(out.numpy(), x.numpy()[key])


def test_index_errors():
    x = eager.zeros(3, 4)
    with pytest.raises(IndexError, match=r"index 3 is out of bounds for dimension 0 with size 3"):
        x[3]
    with pytest.raises(IndexError, match=r"out of bounds"):
        x[0, -5]
    with pytest.raises(IndexError, match=r"too many indices"):
        x[0, 0, 0]
    with pytest.raises(IndexError, match=r"single ellipsis"):
        x[..., ...]
    with pytest.raises(IndexError, match=r"integer or bool"):
        x[eager.tensor([0.0, 1.0])]
    with pytest.raises(IndexError, match=r"integer or bool"):
        x[np.array([0.5])]
    with pytest.raises(IndexError):
        x["a"]
    with pytest.raises(IndexError):
        x[[0, 5]]


def test_setitem_without_grad_matches_numpy():
    for key, value in [((1, slice(None)), 7.0), ((slice(None), [0, 3]), -1.0),
                       (([0, 2], [1, 1]), 3.0), ((Ellipsis, 0), eager.tensor([1.0, 2.0, 3.0]))]:
        x = eager.zeros(3, 4)
        ref = np.zeros((3, 4), np.float32)
        x[key] = value
        ref[as_numpy_key(key)] = as_numpy_key(value)
        np.testing.assert_array_equal(x.numpy(), ref)
    x = eager.zeros(4)
    x[x.numpy() == 0] = 2.0
    np.testing.assert_array_equal(x.numpy(), [2, 2, 2, 2])


def test_setitem_on_a_leaf_requiring_grad_raises_as_pytorch_does():
    x = eager.tensor(np.zeros(3), requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad.*test_indexing"):
        x[0] = 1.0


def test_embedding_lookup_gradient_accumulates_repeated_tokens():
    emb = eager.nn.Embedding(5, 3)
    tokens = eager.tensor([[1, 1], [4, 1]])
    out = emb(tokens)
    assert out.shape == (2, 2, 3)
    out.sum().backward()
    expected = np.zeros((5, 3))
    np.add.at(expected, tokens.numpy().ravel(), 1.0)
    np.testing.assert_allclose(emb.weight.grad.numpy(), expected)
