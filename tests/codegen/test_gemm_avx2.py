"""codegen.gemm_kernel's AVX2 variant (6 x 16 blocks of C in ymm registers, session 21):
its own paths against numpy and against the AVX-512 variant. Both variants sum each element
in k order in blocks of KC = 256 with one FMA per term, so their products have the same
bits; the AVX2 one copies B into 16-column panels (when C has at least PANEL_MIN_ROWS
rows and the scratch has room), through 8 x 8 register transposes where B is b.T, and
packs a transposed A in 6-row panels by unmasked moves. Both variants run on any x86-64
CPU (LLVM splits vectors wider than the CPU's), so these tests run everywhere."""
from __future__ import annotations

import numpy as np
import pytest

from codegen import gemm, parallel

RNG = np.random.default_rng(21)


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _both(monkeypatch, a, b, out=None):
    """(AVX2 result, AVX-512 result) of a @ b through gemm.matmul."""
    got = {}
    for isa in ("avx2", "avx512"):
        monkeypatch.setattr(gemm, "ISA", isa)
        got[isa] = gemm.matmul(a, b, out=None if out is None else out.copy())
    return got["avx2"], got["avx512"]


def _check(got, a, b):
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert got.shape == want.shape and got.dtype == np.float32
    scale = np.matmul(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64))
    k = a.shape[-1]
    assert (np.abs(got - want) <= 2 * k * np.finfo(np.float32).eps * scale + 1e-30).all()


# (m, k, n): panels of B from 48 rows of C (fewer: B read in place), edge rows of the 6-row
# kernel (m % 6 = 1..5), edge panels (n % 16), k past one KC block, m past one MC block (192)
SHAPES = [(48, 16, 16), (49, 33, 17), (53, 300, 45), (96, 257, 64), (200, 40, 100),
          (47, 64, 33), (7, 5, 3), (1, 300, 1), (250, 513, 130)]


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_same_bits_as_the_avx512_variant_and_within_float32_rounding(monkeypatch, m, k, n):
    a, b = _f32(m, k), _f32(k, n)
    bt = np.ascontiguousarray(b.T).T                    # b.T: 8x8 transposes into panels
    at = np.ascontiguousarray(a.T).T                    # x.T: 6-row panels of A
    b_strided = _f32(2 * k, 2 * n)[::2, ::2]            # no unit stride: element by element
    b_strided[...] = b
    want = None
    for x in (a, at):
        for y in (b, bt, b_strided, b[::-1][::-1]):
            avx2, avx512 = _both(monkeypatch, x, y)
            np.testing.assert_array_equal(avx2, avx512)
            _check(avx2, a, b)
            if y.strides[-1] != 4 and m < gemm.PACK_MIN_ROWS:
                continue                                  # (numpy's BLAS computed it)
            if want is None:
                want = avx2
            np.testing.assert_array_equal(avx2, want)     # (layouts move values only)


def test_panels_give_the_bits_of_b_read_in_place(monkeypatch):
    # rows 0:40 of C (fewer than PANEL_MIN_ROWS: B in place) against the same rows of a
    # product of 130 rows (B in panels), b with edge columns and a negative row stride
    # (a b without unit column stride: copied into panels against a row-major copy of it)
    monkeypatch.setattr(gemm, "ISA", "avx2")
    a = _f32(130, 77)
    for b in (_f32(77, 70), _f32(77, 70)[::-1], _f32(77, 300)[:, 100:133]):
        np.testing.assert_array_equal(gemm.matmul(a, b)[:40], gemm.matmul(a[:40], b))
    for b in (_f32(70, 77).T, _f32(77, 35)[:, ::-1], _f32(70, 154).T[::2]):
        np.testing.assert_array_equal(gemm.matmul(a, b), gemm.matmul(a, np.ascontiguousarray(b)))


def test_without_room_for_panels_b_is_read_in_place(monkeypatch):
    # the LSTM kernels (codegen.step_kernels_rnn) call product_blocks with a one-float
    # scratch: no panels then, the same product
    monkeypatch.setattr(gemm, "ISA", "avx2")
    a, b = _f32(1, 1, 100, 64), _f32(1, 1, 64, 50)
    c = np.full((1, 1, 100, 50), np.nan, np.float32)
    gemm._kernel("avx2")(a, b, c, np.empty(1, np.float32), 0, 1, 0, 100, 0, 50)
    np.testing.assert_array_equal(c, gemm.matmul(a, b))
    _check(c[0, 0], a[0, 0], b[0, 0])


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning")
def test_nan_inf_and_edges_in_panels(monkeypatch):
    monkeypatch.setattr(gemm, "ISA", "avx2")
    a, w = _f32(61, 45), _f32(37, 45)
    a[5, 3] = np.nan
    a[60, 44] = np.inf
    w[36, 0] = -np.inf                   # the last, partial panel of w.T
    a[7, 0] = 0.0                        # 0 * -inf: NaN at (7, 36)
    w[20, :] = 1e30                      # float32 overflow in column 20
    got, want = gemm.matmul(a, w.T), np.matmul(a, w.T)
    for test in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(test(got), test(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-5, atol=1e-4)
    assert np.isnan(got[5]).all() and np.isnan(got[7, 36])


def test_stacks_split_over_threads_in_column_bands(monkeypatch):
    # pieces of columns (j0 > 0) copy their own columns into panels; stacks of attention's
    # layouts; K = 0 writes zeros
    monkeypatch.setattr(gemm, "ISA", "avx2")
    qkv = _f32(3, 70, 3, 40)
    q = qkv.transpose(2, 0, 1, 3)[0]                   # (3, 70, 40)
    kt = qkv.transpose(2, 0, 3, 1)[1]                  # (3, 40, 70): b.T per matrix
    cases = [(q, kt), (_f32(1, 100, 64), _f32(64, 200)), (_f32(100, 64), _f32(200, 64).T),
             (_f32(3, 60, 0), _f32(3, 0, 50))]
    one = [gemm.matmul(x, y) for x, y in cases]
    monkeypatch.setattr(parallel, "_split_threads", lambda: 2)
    monkeypatch.setattr(gemm, "SPLIT_FLOPS", 0)
    assert any(p[4] > 0 for p in gemm._pieces(1, 100, 200, 4, True))
    for (x, y), bits in zip(cases, one):
        got = gemm.matmul(x, y)
        np.testing.assert_array_equal(got, bits)
        if x.shape[-1]:
            _check(got, x, y)
        else:
            assert (got == 0).all()
