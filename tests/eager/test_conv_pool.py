"""Convolution and pooling eagerly: PyTorch's conventions that the OpInfo entries
(opinfo_conv.py: forwards against nested-loop references, gradients by finite
differences) do not pin, second derivatives, and the error messages."""
import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F
import test_grad as TG
from opinfo_conv import max_pool_nan_cases


@pytest.mark.parametrize("name", ["conv2d", "conv_transpose2d", "max_pool2d", "avg_pool2d",
                                  "im2col", "col2im", "interpolate", "pad"])
def test_second_derivative_matches_finite_differences(name):
    TG.test_second_derivative_matches_finite_differences(name)


def test_max_pool_indices_are_flat_plane_positions_and_unpool_inverts_them():
    x = eager.tensor(np.arange(2 * 3 * 6 * 5, dtype=np.float32).reshape(2, 3, 6, 5) % 7)
    values, idx = F.max_pool2d(x, 2, return_indices=True)
    flat = x.numpy().reshape(2, 3, -1)
    np.testing.assert_array_equal(np.take_along_axis(flat, idx.numpy().reshape(2, 3, -1), -1),
                                  values.numpy().reshape(2, 3, -1))
    back = F.max_unpool2d(values, idx, 2, output_size=(6, 5))
    assert back.shape == (2, 3, 6, 5)
    kept = back.numpy() != 0
    np.testing.assert_array_equal(back.numpy()[kept], x.numpy()[kept])
    with pytest.raises(IndexError, match="max_unpool2d"):   # a 6x4 plane has no index 27
        nn.MaxUnpool2d(2)(values, idx)
    even = x[..., :4]
    values, idx = nn.MaxPool2d(2, return_indices=True)(even)
    assert nn.MaxUnpool2d(2)(values, idx).shape == (2, 3, 6, 4)


def test_max_pool_propagates_nan_and_pads_with_minus_infinity():
    x = eager.tensor([[[[-5.0, -7.0, float("nan"), 1.0]]]])
    out = F.max_pool2d(x, (1, 2), padding=(0, 1))
    np.testing.assert_array_equal(out.numpy(), [[[[-5.0, np.nan, 1.0]]]])


def test_max_pool_takes_the_last_nan_of_a_window_and_the_first_of_a_tie():
    pools = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
    for x, k, values, index in max_pool_nan_cases():
        got, idx = pools[x.ndim - 2](eager.tensor(x), k, return_indices=True)
        np.testing.assert_array_equal(got.numpy(), values)
        np.testing.assert_array_equal(idx.numpy(), index)
    x2, _, values, index = max_pool_nan_cases()[1]
    got, idx = F.adaptive_max_pool2d(eager.tensor(x2), 2, return_indices=True)
    np.testing.assert_array_equal(idx.numpy(), index)


def test_max_unpool_writes_at_a_repeated_index_and_gathers_its_gradient():
    x = eager.tensor([[[[1.0, 2.0], [3.0, 4.0]]]], requires_grad=True)
    idx = eager.tensor(np.array([[[[0, 0], [5, 5]]]]))
    y = F.max_unpool2d(x, idx, 2)
    want = np.zeros((4, 4), np.float32)
    want[0, 0], want[1, 1] = 2.0, 4.0             # the last write wins, as PyTorch; not 3, 7
    np.testing.assert_array_equal(y.detach().numpy()[0, 0], want)
    (y * eager.arange(16.0).reshape(1, 1, 4, 4)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[[[0.0, 0.0], [5.0, 5.0]]]])


def test_conv_transpose_output_padding_must_be_below_stride_or_dilation():
    x, w = eager.randn(1, 2, 3, 3), eager.randn(2, 1, 2, 2)
    # Accepted as PyTorch accepts it: below the stride, or below the dilation.
    assert F.conv_transpose2d(x, w, stride=2, output_padding=1).shape == (1, 1, 7, 7)
    assert F.conv_transpose2d(x, w, dilation=3, output_padding=(2, 0)).shape == (1, 1, 8, 6)
    for kwargs in ({"output_padding": 1}, {"stride": 2, "output_padding": 2},
                   {"stride": 2, "dilation": 2, "output_padding": (0, 2)},
                   {"output_padding": -1}):
        with pytest.raises(RuntimeError, match="output padding must be smaller than either "
                           "stride or dilation"):
            F.conv_transpose2d(x, w, **kwargs)
    with pytest.raises(RuntimeError, match="output padding must be smaller"):
        F.conv_transpose1d(eager.randn(1, 2, 3), eager.randn(2, 1, 2), stride=2,
                           output_padding=2)
    with pytest.raises(RuntimeError, match="output padding must be smaller"):
        nn.ConvTranspose3d(2, 1, 2, output_padding=1)(eager.randn(1, 2, 2, 2, 2))


def test_same_padding_keeps_the_size_with_even_kernels_and_dilation():
    x = eager.randn(1, 2, 7, 6)
    for k, d in ((2, 1), (4, 2), (3, 3)):
        assert F.conv2d(x, eager.randn(3, 2, k, k), padding="same", dilation=d).shape == \
            (1, 3, 7, 6)
    with pytest.raises(Exception, match="same"):
        F.conv2d(x, eager.randn(3, 2, 3, 3), padding="same", stride=2)


def test_conv_transpose_is_the_gradient_of_conv():
    rng = np.random.default_rng(0)
    x = eager.tensor(rng.standard_normal((2, 3, 7, 8)), requires_grad=True)
    w = eager.tensor(rng.standard_normal((4, 3, 3, 2)))
    y = F.conv2d(x, w, stride=2, padding=1)
    g = eager.tensor(rng.standard_normal(y.shape))
    (y * g).sum().backward()
    want = F.conv_transpose2d(g, w, stride=2, padding=1, output_padding=0)
    np.testing.assert_allclose(want.numpy(), x.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_fold_of_unfold_counts_window_overlaps():
    x = eager.ones(1, 2, 4, 5)
    cols = F.unfold(x, 3, padding=1)
    assert cols.shape == (1, 18, 20)
    counts = F.fold(cols, (4, 5), 3, padding=1).numpy()
    assert counts[0, 0, 0, 0] == 4 and counts[0, 0, 1, 1] == 9


def test_errors_name_the_op_shapes_and_the_fix():
    w = eager.randn(6, 1, 5, 5)
    with pytest.raises(Exception) as err:
        F.conv2d(eager.randn(2, 3, 28, 28), w)
    text = str(err.value)
    assert "conv2d" in text and "[6, 1, 5, 5]" in text and "3 channels" in text
    with pytest.raises(Exception) as err:
        F.conv2d(eager.randn(28, 28), w)
    assert "conv2d" in str(err.value) and "(28, 28)" in str(err.value)
    assert "test_conv_pool.py" in str(err.value)   # the user's line
    with pytest.raises(Exception, match="max_pool2d"):
        F.max_pool2d(eager.randn(1, 1, 2, 2), 5)
    with pytest.raises(Exception, match="reflect"):
        F.pad(eager.randn(1, 1, 3, 3), (3, 3), mode="reflect")
    with pytest.raises(Exception, match="bilinear"):
        F.interpolate(eager.randn(1, 1, 3), size=5, mode="bilinear")
    with pytest.raises(ValueError, match="groups"):
        nn.Conv2d(3, 4, 3, groups=2)
