"""Convolution and pooling eagerly: PyTorch's conventions that the OpInfo entries
(opinfo_conv.py: forwards against nested-loop references, gradients by finite
differences) do not pin, second derivatives, and the error messages."""
import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F
import test_grad as TG


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
