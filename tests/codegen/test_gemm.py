"""codegen.gemm: the float32 product kernel against numpy (edges, strides, batches,
NaN/inf, empty sizes), its error against float64 no worse than BLAS's, its rule, its split
over threads, and compiled programs using it against eager (issue 17, W9/W10's products).

The kernel's tests run each variant (`isa`: AVX-512's and AVX2's, codegen.gemm_kernel.
VARIANTS): both are correct on any x86-64 CPU (LLVM splits vectors wider than the CPU's),
so these tests force the rule on (`_available`) where they test the runner. The AVX2
variant's own paths (B copied into panels, its 6-row panels of a transposed A) are in
tests/codegen/test_gemm_avx2.py."""
from __future__ import annotations

import numpy as np
import pytest

import eager
import eager.nn.functional as F
import tracer
from codegen import gemm, parallel

RNG = np.random.default_rng(17)


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _rel_err(x, ref):
    return np.abs(x - ref).max() / max(np.abs(ref).max(), 1e-30)


@pytest.fixture(params=["avx512", "avx2"])
def isa(request, monkeypatch):
    """The kernel variant `gemm.matmul` runs."""
    monkeypatch.setattr(gemm, "ISA", request.param)
    return request.param


@pytest.fixture
def forced(monkeypatch):
    """The rule on whatever this machine is (the kernel is right on any x86-64 CPU), for
    every product its variant takes (TRACEJIT_GEMM=all: the AVX2 one's too)."""
    monkeypatch.setattr(gemm, "_available", lambda: True)
    monkeypatch.setenv("TRACEJIT_GEMM", "all")


# ------------------------------------------------------------------ the kernel itself
# (m, k, n): full 8x32 blocks, edge rows (7 = 4+2+1) and columns (masked lanes), a k past
# one KC block (256) with a remainder, ones
SHAPES = [(1, 1, 1), (7, 5, 3), (8, 32, 32), (13, 300, 45), (33, 17, 65), (64, 64, 96),
          (20, 128, 512), (3, 257, 31)]


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_2d_products_match_float64_as_closely_as_blas(m, k, n, isa):
    a, b = _f32(m, k), _f32(k, n)
    got = gemm.matmul(a, b)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    blas = np.matmul(a, b)
    assert got.shape == blas.shape and got.dtype == np.float32
    # each element is one float32 dot product accumulated in k order (blocks of 256): its
    # error is within a few ulps of the sum's magnitude times k, as BLAS's
    scale = (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)).max()
    assert np.abs(got - ref).max() <= 2 * k * np.finfo(np.float32).eps * scale
    assert _rel_err(got, ref) <= 2 * _rel_err(blas, ref) + 1e-7


def test_operands_of_any_strides_and_a_strided_out(isa):
    a_t = _f32(40, 24).T                 # x.T (A read in place, column-major)
    a_s = _f32(24, 80)[:, ::2]           # every other column
    b_t = _f32(50, 40).T                 # B with a non-unit column stride: copied
    b_neg = _f32(40, 50)[::-1]           # negative row stride, read in place
    for a in (a_t, a_s):
        for b in (b_t, b_neg):
            want = a.astype(np.float64) @ b.astype(np.float64)
            np.testing.assert_allclose(gemm.matmul(a, b), want, rtol=1e-5, atol=1e-4)
            big = np.full((24, 70), 7.0, np.float32)
            out = big[:, 10:60]          # rows of stride 70: written in place
            assert gemm.matmul(a, b, out=out) is out
            np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)
            assert (big[:, :10] == 7).all() and (big[:, 60:] == 7).all()


def test_batched_products_broadcast_as_numpy(isa):
    cases = [((4, 9, 6), (4, 6, 11)),
             ((2, 1, 9, 6), (3, 6, 40)),      # batch dims broadcast both ways
             ((5, 9, 6), (6, 33)),            # a 2-D b against a stack
             ((3, 2, 64, 32), (3, 2, 32, 64)),
             ((2, 1, 3, 9, 6), (5, 1, 6, 7))]      # five dimensions
    for sa, sb in cases:
        a, b = _f32(*sa), _f32(*sb)
        got = gemm.matmul(a, b)
        want = np.matmul(a.astype(np.float64), b.astype(np.float64))
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    # permuted (non-contiguous) stacks, as attention's q @ k.transpose(-2, -1) (b copied
    # a matrix at a time) and p @ v (read in place)
    q, kk = _f32(2, 16, 3, 8).transpose(0, 2, 1, 3), _f32(2, 16, 3, 8).transpose(0, 2, 3, 1)
    np.testing.assert_allclose(gemm.matmul(q, kk), np.matmul(q.astype(np.float64), kk),
                               rtol=1e-5, atol=1e-5)
    p = _f32(2, 3, 16, 16)
    np.testing.assert_allclose(gemm.matmul(p, q), np.matmul(p.astype(np.float64), q),
                               rtol=1e-5, atol=1e-5)
    out = np.empty((3, 2, 16, 16), np.float32).transpose(1, 0, 2, 3)  # a permuted out
    assert gemm.matmul(q, kk, out=out) is out
    np.testing.assert_allclose(out, np.matmul(q.astype(np.float64), kk), rtol=1e-5,
                               atol=1e-5)


def test_empty_sizes(isa):
    for sa, sb in [((0, 5), (5, 7)), ((4, 5), (5, 0)), ((2, 0, 5), (5, 3)), ((3, 4), (4, 3))]:
        a, b = _f32(*sa), _f32(*sb)
        np.testing.assert_array_equal(gemm.matmul(a, b), np.matmul(a, b))
    out = np.full((6, 9), np.nan, np.float32)          # k = 0: a product of zeros
    assert (gemm.matmul(_f32(6, 0), _f32(0, 9), out=out) == 0).all()
    big = np.full((40, 33), np.nan, np.float32)
    assert (gemm.matmul(_f32(40, 0), _f32(0, 33), out=big) == 0).all()


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning")
def test_nan_and_inf_propagate_as_in_blas(isa):
    a, b = _f32(19, 40), _f32(40, 37)
    a[3, 7] = np.nan
    a[11, 2] = np.inf
    b[5, 30] = -np.inf
    a[0, 5] = 0.0                    # 0 * -inf: NaN in row 0, column 30
    a[16, :] = 0.0
    b[:, 36] = 1e30                  # overflow to inf in float32 sums
    got, want = gemm.matmul(a, b), np.matmul(a, b)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-5, atol=1e-4)
    assert np.isnan(got[3]).all() and np.isnan(got[0, 30])


def test_what_it_does_not_take_goes_to_numpy():
    a, b = _f32(5, 4), _f32(4, 3)
    for x, y in [(a.astype(np.float64), b), (a, b.astype(np.float64)), (a[0], b), (a, b[:, 0])]:
        got = gemm.matmul(x, y)
        assert got.dtype == np.matmul(x, y).dtype
        np.testing.assert_array_equal(got, np.matmul(x, y))
    out = np.empty((3, 5), np.float32).T       # an out of non-unit column stride
    assert gemm.matmul(a, b, out=out) is out
    np.testing.assert_array_equal(out, np.matmul(a, b))
    buf = _f32(8, 8)                            # out overlapping an operand
    x, y = buf.copy(), buf
    want = np.matmul(x, y)
    np.testing.assert_allclose(gemm.matmul(x, y, out=buf), want, rtol=1e-6)
    with pytest.raises(ValueError):
        gemm.matmul(a, _f32(5, 3))


@pytest.mark.parametrize("nb,m,n", [(64, 64, 32), (1, 1024, 512), (1, 128, 512), (3, 40, 40),
                                    (2, 700, 1000), (1, 20, 512)])
def test_pieces_cover_the_product_once(nb, m, n):
    for want in (2, 4, 8):
        for packs in (False, True):
            seen = np.zeros((nb, m, n), int)
            for b0, b1, i0, i1, j0, j1 in gemm._pieces(nb, m, n, want, packs):
                seen[b0:b1, i0:i1, j0:j1] += 1
            assert (seen == 1).all()


def test_split_over_threads_gives_the_same_bits(monkeypatch, isa):
    a, b = _f32(3, 200, 300), _f32(300, 100)
    bt = np.ascontiguousarray(b.T).T                    # copied into scratch per piece
    one = gemm.matmul(a, b)
    monkeypatch.setattr(parallel, "_split_threads", lambda: 2)
    monkeypatch.setattr(gemm, "SPLIT_FLOPS", 0)
    at = np.ascontiguousarray(a[2].T).T               # x.T: copied in panels per piece
    for x, y, want in [(a, b, one), (a[0], b, one[0]), (a[0, :40], b, one[0, :40]),
                       (a, bt, one), (a[1], bt, one[1]), (at, b, one[2]), (at, bt, one[2])]:
        np.testing.assert_array_equal(gemm.matmul(x, y), want)


# ------------------------------------------------------------------ the rule
def test_the_rule(monkeypatch):
    monkeypatch.setattr(gemm, "_available", lambda: True)
    monkeypatch.setattr(gemm, "ISA", "avx512")
    monkeypatch.delenv("TRACEJIT_GEMM", raising=False)
    assert gemm.available()
    assert gemm.use_for((1024, 128), (128, 512), np.float32)
    assert gemm.use_for((16, 4, 64, 64), (16, 4, 64, 32), np.dtype("float32"))
    assert not gemm.use_for((1024, 128), (128, 512), np.float64)
    assert not gemm.use_for((4, 8), (8, 4), np.float32)         # too small to pay
    assert not gemm.use_for((128,), (128, 512), np.float32)     # 1-D operands: BLAS
    # the AVX2 variant: numpy's BLAS unless TRACEJIT_GEMM=stacks (stacks of matrices: both
    # operands batched) or all; the LSTM kernels' per-step products (codegen.
    # step_kernels_rnn asks `available`) with "all" only
    monkeypatch.setattr(gemm, "ISA", "avx2")
    for mode in ("", "1", "stacks", "all"):
        monkeypatch.setenv("TRACEJIT_GEMM", mode)
        assert gemm.available() is (mode == "all")
        assert gemm.use_for((1024, 128), (128, 512), np.float32) is (mode == "all")
        assert gemm.use_for((1, 1024, 128), (128, 512), np.float32) is (mode == "all")
        assert gemm.use_for((2, 64, 64), (64, 96), np.float32) is (mode == "all")
        for stack in [((16, 4, 64, 64), (16, 4, 64, 32)), ((2, 1, 64, 64), (1, 3, 64, 96))]:
            assert gemm.use_for(*stack, np.float32) is (mode in ("stacks", "all"))
    monkeypatch.setenv("TRACEJIT_GEMM", "0")
    for isa in ("avx2", "avx512"):
        monkeypatch.setattr(gemm, "ISA", isa)
        assert not gemm.use_for((1024, 128), (128, 512), np.float32)


def test_the_variant_follows_the_cpu(monkeypatch):
    for flags, want in [({"avx512f", "avx2", "fma"}, "avx512"), ({"avx2", "fma"}, "avx2"),
                        ({"avx2"}, None), ({"avx", "fma"}, None), (set(), None)]:
        monkeypatch.setattr(gemm, "_cpu_flags", lambda flags=flags: frozenset(flags))
        assert gemm.host_isa() == want, flags


def test_only_on_avx512_with_an_openblas_without_it_or_on_avx2(monkeypatch):
    gemm._available.cache_clear()
    try:
        monkeypatch.setattr(gemm, "host_isa", lambda: "avx512")
        monkeypatch.setattr(gemm, "openblas_core", lambda: "haswell")
        assert gemm._available()
        for core, isa in [("skylakex", "avx512"), (None, "avx512"), (None, "avx2"),
                          ("haswell", None), ("zen", None)]:
            gemm._available.cache_clear()
            monkeypatch.setattr(gemm, "openblas_core", lambda core=core: core)
            monkeypatch.setattr(gemm, "host_isa", lambda isa=isa: isa)
            assert not gemm._available(), (core, isa)
        for core in ("haswell", "zen"):          # (numpy's OpenBLAS on an AVX2 CPU)
            gemm._available.cache_clear()
            monkeypatch.setattr(gemm, "openblas_core", lambda core=core: core)
            monkeypatch.setattr(gemm, "host_isa", lambda: "avx2")
            assert gemm._available(), core
    finally:
        gemm._available.cache_clear()


def test_the_kernel_source_names_its_variant(monkeypatch):
    # (the kernel cache is keyed by the source text: one variant's object is never loaded
    # for another's)
    texts = {}
    for isa in ("avx512", "avx2"):
        monkeypatch.setattr(gemm, "ISA", isa)
        texts[isa] = gemm._source()
        assert f"import product_blocks_{isa} as product_blocks" in texts[isa]
    assert texts["avx512"] != texts["avx2"]


def test_openblas_core_is_what_numpy_loaded():
    core = gemm.openblas_core()
    assert core is None or (core.isprintable() and core == core.lower() and core)


# ------------------------------------------------------------------ compiled programs
@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_compiled_linear_and_attention_products_match_eager(forced, backend):
    rng = np.random.default_rng(5)
    w = eager.tensor((rng.standard_normal((96, 64)) / 8).astype(np.float32), requires_grad=True)

    def step(x):
        w.grad = None
        h = F.gelu(x @ w.T)                                   # [2, 64, 96]
        q = h.reshape(2, 64, 3, 32).permute(0, 2, 1, 3)       # [2, 3, 64, 32]
        att = F.softmax(q @ q.transpose(-2, -1) * 0.125, dim=-1) @ q
        loss = (att * att).mean()
        loss.backward()
        return loss

    x = eager.from_numpy(rng.standard_normal((2, 64, 64)).astype(np.float32))
    f = tracer.function(step, backend=backend)
    got = [f(x).item() for _ in range(2)] + [w.grad.numpy().copy()]
    want = [step(x).item()] * 2 + [w.grad.numpy().copy()]
    np.testing.assert_allclose(got[:2], want[:2], rtol=1e-5)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-4, atol=1e-6)
    if backend == "numba":
        source = f.get_concrete_function(x).program.runner_source
        assert source.count("= gemm(") >= 4, source


def test_the_switch_keeps_blas(monkeypatch):
    monkeypatch.setattr(gemm, "_available", lambda: True)
    monkeypatch.setenv("TRACEJIT_GEMM", "0")
    w = eager.from_numpy(_f32(96, 64))
    f = tracer.function(lambda x: x @ w.T)
    x = eager.from_numpy(_f32(64, 64))
    with eager.no_grad():
        np.testing.assert_allclose(f(x).numpy(), x.numpy() @ w.numpy().T, rtol=1e-5,
                                   atol=1e-5)
    source = f.get_concrete_function(x).program.runner_source
    assert "gemm(" not in source and "matmul(" in source


@pytest.mark.parametrize("own", [True, False])
def test_lstm_recurrence_kernels_take_the_kernel_for_their_step_products(own, monkeypatch):
    # The fused LSTM layer's per-step products (h @ w_hh.T forward, dA @ w_hh backward)
    # go through the kernel where the rule picks it: no OpenBLAS call inside the loop leaves
    # its worker spinning against the kernel's threads (W10: 12.5 -> 9.0-9.5 ms, 2 threads).
    from codegen import step_kernels_rnn

    monkeypatch.setattr(gemm, "_available", lambda: own)
    monkeypatch.setenv("TRACEJIT_GEMM", "all")     # (whichever variant this CPU has)
    eager.manual_seed(0)
    # (tests/tracer/test_rnn_traced.py's LSTM sizes: its kernels are the ones compiled there)
    lstm = eager.nn.LSTM(4, 6)
    x = eager.randn(3, 3, 4)

    def step(x):
        for p in lstm.parameters():
            p.grad = None
        out, _ = lstm(x)
        (out * out).sum().backward()
        return [p.grad for p in lstm.parameters()]

    want = [g.numpy().copy() for g in step(x)]
    f = tracer.function(step)
    got = [g.numpy() for g in f(x)]
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    eqns = [e for e in f.get_concrete_function(x).graph.eqns
            if e.op in ("lstm_recurrence", "lstm_recurrence_backward")]
    assert len(eqns) == 2
    for e in eqns:
        source, _sizes = getattr(step_kernels_rnn, e.op)(e)
        assert ("product_blocks(" in source) is own and ("gemm_f32(" in source) is not own


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
@pytest.mark.parametrize("m,k,n", [(13, 300, 65), (150, 40, 70), (8, 5, 33)])
def test_a_transposed_a_is_copied_in_panels_with_the_same_bits(m, k, n, isa):
    # a weight gradient's x.T @ dy: the kernel copies blocks of the transposed A into
    # panels (edge rows 13 = 8+4+1, two K blocks, two row blocks of MC = 128); each element
    # is still the same dot product in the same order as with a row-major A
    a_t = _f32(k, m).T
    a_t.base[0, m // 2] = np.nan
    a_t.base[k - 1, 0] = np.inf
    b = _f32(k, n)
    got = gemm.matmul(a_t, b)
    np.testing.assert_array_equal(got, gemm.matmul(np.ascontiguousarray(a_t), b))
    want = a_t.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    stack = _f32(2, 3, k, m).transpose(0, 1, 3, 2)        # batched, as P.T @ dO
    np.testing.assert_array_equal(gemm.matmul(stack, b),
                                  gemm.matmul(np.ascontiguousarray(stack), b))


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_a_transposed_b_is_copied_exactly(isa):
    # x @ w.T and q @ k.transpose(-2, -1): b's columns are contiguous, copied into rows by
    # 16 x 16 blocks transposed in registers, with edges (k 37 = 32 + 5, n 70 = 64 + 6)
    # element by element; the product has the bits of the same product with b row-major
    a = _f32(66, 37)
    w = _f32(70, 37)
    w[3, 20] = np.nan
    w[50, 36] = -np.inf
    got = gemm.matmul(a, w.T)
    np.testing.assert_array_equal(got, gemm.matmul(a, np.ascontiguousarray(w.T)))
    np.testing.assert_allclose(got, a.astype(np.float64) @ w.T.astype(np.float64),
                               rtol=1e-5, atol=1e-4)
    q, kk = _f32(2, 64, 3, 32).transpose(0, 2, 1, 3), _f32(2, 64, 3, 32).transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(gemm.matmul(q, kk), gemm.matmul(q, np.ascontiguousarray(kk)))
    w_rev = _f32(70, 37)[::-1]                # negative column stride of b
    np.testing.assert_array_equal(gemm.matmul(a, w_rev.T),
                                  gemm.matmul(a, np.ascontiguousarray(w_rev.T)))


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning")
def test_batched_products_split_over_threads_propagate_nan_and_inf(monkeypatch, isa):
    # an odd stack (7 matrices in 4 pieces of whole matrices) in attention's layouts: q and
    # k permuted out of one buffer (k.T copied per matrix), a transposed p (P.T @ dO); NaN,
    # inf and 0 * inf in some matrices only: each matrix's result is its own, split or not
    qkv = _f32(7, 37, 3, 24)
    q = qkv.transpose(2, 0, 1, 3)[0]                  # (7, 37, 24), rows 72 floats apart
    kt = qkv.transpose(2, 0, 3, 1)[1]                 # (7, 24, 37): b copied
    qkv[2, 5, 0, 3] = np.nan                          # matrix 2: NaN in row 5
    qkv[4, 0, 1, 7] = np.inf                          # matrix 4: inf in k's column 0
    qkv[4, 9, 0, 7] = 0.0                             # ... and 0 * inf: NaN at (9, 0)
    p = _f32(7, 37, 37).transpose(0, 2, 1)
    p[6, 1, 2] = -np.inf
    v = _f32(7, 37, 24)
    monkeypatch.setattr(parallel, "_split_threads", lambda: 1)
    one = [gemm.matmul(q, kt), gemm.matmul(p, v)]
    monkeypatch.setattr(parallel, "_split_threads", lambda: 2)
    monkeypatch.setattr(gemm, "SPLIT_FLOPS", 0)
    assert len(gemm._pieces(7, 37, 37, 4)) == 4
    for (x, y), bits in zip([(q, kt), (p, v)], one):
        got = gemm.matmul(x, y)
        np.testing.assert_array_equal(got, bits)
        want = np.matmul(x.astype(np.float64), y.astype(np.float64))
        for test in (np.isnan, np.isposinf, np.isneginf):
            np.testing.assert_array_equal(test(got), test(want))
        fin = np.isfinite(want)
        np.testing.assert_allclose(got[fin], want[fin], rtol=1e-5, atol=1e-4)
    s = one[0]
    assert np.isnan(s[2, 5]).all() and np.isnan(s[4, 9, 0])
    assert np.isfinite(s[[0, 1, 3, 5, 6]]).all()
    assert np.isinf(one[1][6, 1]).all() and np.isfinite(one[1][:6]).all()


def test_batched_empty_sizes(isa):
    for sa, sb in [((0, 4, 5), (0, 5, 3)), ((3, 2, 0, 5), (3, 2, 5, 4)),
                   ((2, 3, 4, 5), (2, 3, 5, 0)), ((4, 1, 6, 0), (3, 0, 7))]:
        a, b = _f32(*sa), _f32(*sb)
        got = gemm.matmul(a, b)
        want = np.matmul(a, b)
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)        # (k = 0: zeros, as numpy's)
