"""codegen.vmath's float floor division and remainder are numpy's, bit for bit (zero signs,
infinities, NaN and denormals included): kernels must give what eager gives."""
import numpy as np
import pytest

numba = pytest.importorskip("numba")

from codegen.vmath import floor_divide_float, remainder_float  # noqa: E402


@numba.njit(cache=False)
def _run(a, b, o1, o2):
    for i in range(a.size):
        o1[i] = floor_divide_float(a[i], b[i])
        o2[i] = remainder_float(a[i], b[i])


@pytest.mark.parametrize("dt, it", [(np.float32, np.uint32), (np.float64, np.uint64)])
def test_floor_divide_and_remainder_match_numpy_bitwise(dt, it):
    rng = np.random.default_rng(5)
    n = 20000
    a = rng.integers(0, np.iinfo(it).max, n, dtype=it, endpoint=True).view(dt)
    b = rng.integers(0, np.iinfo(it).max, n, dtype=it, endpoint=True).view(dt)
    a[:n // 2] = rng.uniform(-100, 100, n // 2).astype(dt)
    b[:n // 4] = rng.uniform(-5, 5, n // 4).astype(dt)
    tiny = np.finfo(dt).smallest_subnormal
    sp = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 3.0, -3.0, tiny], dt)
    A, B = np.meshgrid(sp, sp)
    a, b = np.concatenate([a, A.ravel()]), np.concatenate([b, B.ravel()])
    got_div, got_rem = np.empty_like(a), np.empty_like(a)
    _run(a, b, got_div, got_rem)
    with np.errstate(all="ignore"):
        want_div, want_rem = np.floor_divide(a, b), np.remainder(a, b)
    for got, want in ((got_div, want_div), (got_rem, want_rem)):
        same = (got.view(it) == want.view(it)) | (np.isnan(got) & np.isnan(want))
        assert same.all(), (a[~same][:3], b[~same][:3], got[~same][:3], want[~same][:3])
