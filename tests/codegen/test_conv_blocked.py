"""The direct convolution kernels, both variants (codegen.conv_kernels: one pass per channel
pair over all taps; codegen.conv_blocked: register blocks of channels per kernel row, the
variant built where Numba compiles without AVX-512), run as kernels against an independent
reference (numpy loops over the kernel taps, float64): odd sizes, dilation, asymmetric
padding, kernels 1x1 to 7x7, channel counts that leave a partial block; each output summed
in one order whatever the pieces the split runs; non-finite values refused where the
kernels would form terms eager does not; and the rule that picks the variant."""
import numpy as np
import pytest

import eager
import eager.nn.functional as F
import tracer
from codegen import conv_blocked as cb
from codegen import conv_kernels as ck

# (N, C, H, W, O, KH, KW, dh, dw, pt, pb, pl, pr, dtype)
GEOMETRIES = [
    (3, 3, 7, 9, 5, 3, 5, 1, 1, 1, 2, 2, 0, "float32"),    # blocks of 2 and a single
    (2, 2, 9, 8, 7, 2, 3, 2, 2, 0, 0, 1, 1, "float64"),    # dilation 2, blocks of 3 + 1
    (2, 5, 6, 6, 3, 7, 7, 1, 1, 3, 3, 3, 3, "float32"),    # 7 taps a row: blocks of 1
    (1, 6, 5, 11, 6, 1, 1, 1, 1, 0, 0, 0, 0, "float32"),   # 1x1: blocks of 4 + 2
]
VARIANTS = {"per_pair": ck, "blocked": cb}
PASSES = ("forward", "input_grad", "weight_grad")


def _geometry(case):
    return ck.Geometry(*GEOMETRIES[case])


def _reference(g, x, w, dy):
    """(y, dx, dw) in float64 by loops over the kernel taps of the padded input."""
    x, w, dy = (a.astype(np.float64) for a in (x, w, dy))
    xp = np.pad(x, ((0, 0), (0, 0), (g.pt, g.pb), (g.pl, g.pr)))
    y = np.zeros((g.n, g.o, g.oh, g.ow))
    dxp = np.zeros_like(xp)
    dw = np.zeros_like(w)
    for ky in range(g.kh):
        for kx in range(g.kw):
            rows = slice(ky * g.dh, ky * g.dh + g.oh)
            cols = slice(kx * g.dw, kx * g.dw + g.ow)
            window = xp[:, :, rows, cols]                            # (N, C, OH, OW)
            y += np.einsum("nchw,oc->nohw", window, w[:, :, ky, kx])
            dxp[:, :, rows, cols] += np.einsum("nohw,oc->nchw", dy, w[:, :, ky, kx])
            dw[:, :, ky, kx] = np.einsum("nohw,nchw->oc", dy, window)
    dx = dxp[:, :, g.pt:g.pt + g.h, g.pl:g.pl + g.w]
    return y, dx, dw


def _arrays(g, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((g.n, g.c, g.h, g.w)).astype(g.dtype)
    w = rng.standard_normal((g.o, g.c, g.kh, g.kw)).astype(g.dtype)
    dy = rng.standard_normal((g.n, g.o, g.oh, g.ow)).astype(g.dtype)
    return x, w, dy


def _kernel(variant, which, g):
    from codegen import build

    split = getattr(VARIANTS[variant], which)(g)
    return build.load_kernel(split.source, f"test_conv_{variant}")[0], split


def _operands(which, x, w, dy):
    """(in0, in1, output size) of a pass, flat as the kernels take them."""
    a, b, size = {"forward": (x, w, dy.size), "input_grad": (dy, w, x.size),
                  "weight_grad": (dy, x, w.size)}[which]
    return a.ravel(), b.ravel(), size


# (the per-pair kernels of 7x7 taps take long to compile: that variant at two geometries)
@pytest.mark.parametrize("variant, case", [("blocked", case) for case in range(len(GEOMETRIES))]
                         + [("per_pair", 0), ("per_pair", 3)])
def test_kernels_match_the_tap_loop_reference(variant, case):
    g = _geometry(case)
    x, w, dy = _arrays(g, 30 + case)
    want = dict(zip(PASSES, _reference(g, x, w, dy)))
    tol = 1e-5 if g.dtype == "float32" else 1e-12
    for which in PASSES:
        kernel, split = _kernel(variant, which, g)
        a, b, size = _operands(which, x, w, dy)
        got = np.full(size, np.nan, g.dtype)
        assert kernel(a, b, got, 0, split.n) == 0
        np.testing.assert_allclose(got.reshape(want[which].shape), want[which], rtol=tol,
                                   atol=tol * np.abs(want[which]).max(), err_msg=which)


@pytest.mark.parametrize("case", range(len(GEOMETRIES)))
def test_blocked_kernels_sum_in_one_order_whatever_the_pieces(case):
    """Pieces as the split makes them (starting at multiples of the Split's align) give the
    whole call's values bit for bit: the weight gradient's blocks of channels start at
    multiples of the block in every piece, so no channel's sum changes loops."""
    g = _geometry(case)
    x, w, dy = _arrays(g, 40 + case)
    for which in PASSES:
        kernel, split = _kernel("blocked", which, g)
        a, b, size = _operands(which, x, w, dy)
        whole = np.full(size, np.nan, g.dtype)
        assert kernel(a, b, whole, 0, split.n) == 0
        block = cb.block_size(g.o, g.kw)
        steps = {1} if which != "weight_grad" else {block, split.align, 2 * block}
        for step in steps:
            assert step % (block if which == "weight_grad" else 1) == 0
            pieces = np.full(size, np.nan, g.dtype)
            for lo in range(0, split.n, step):
                assert kernel(a, b, pieces, lo, min(lo + step, split.n)) == 0
            np.testing.assert_array_equal(pieces, whole, err_msg=f"{which} step {step}")


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_kernels_refuse_non_finite_terms_eager_does_not_form(variant):
    """An inf weight (input gradient: multiplied by the zeros around the rows too) and a NaN
    input (weight gradient: read between rows) make the kernels return 1 (numpy runs); a
    NaN input in the forward pass reaches exactly the outputs whose windows hold it."""
    g = _geometry(0)
    x, w, dy = _arrays(g, 50)
    w[1, 2, 0, 3] = np.inf
    kernel, split = _kernel(variant, "input_grad", g)
    assert kernel(dy.ravel(), w.ravel(), np.empty(x.size, g.dtype), 0, split.n) == 1
    w[1, 2, 0, 3] = 0.5
    x[2, 1, 4, 0] = np.nan
    kernel, split = _kernel(variant, "weight_grad", g)
    assert kernel(dy.ravel(), x.ravel(), np.empty(w.size, g.dtype), 0, split.n) == 1
    kernel, split = _kernel(variant, "forward", g)
    y = np.empty(dy.size, g.dtype)
    assert kernel(x.ravel(), w.ravel(), y, 0, split.n) == 0
    want = _reference(g, x, w, dy)[0]
    np.testing.assert_array_equal(np.isnan(y.reshape(want.shape)), np.isnan(want))


def test_blocked_kernels_vectorize():
    """Every blocked pass's inner loop is vector FMAs (the machine code of the source
    compiled again without the cache); the input gradient's refused to vectorize ("cannot
    identify array bounds": no vector FMA at all) while its loop counted the kernel rows up
    and its index held ``- ky * Wp``."""
    import re

    g = _geometry(0)
    for which in PASSES:
        ns: dict = {}
        source = getattr(cb, which)(g).source.replace("cache=True", "cache=False")
        exec(compile(source, "k", "exec"), ns)
        kernel = ns["kernel"]
        asm = kernel.inspect_asm(kernel.signatures[0])
        # (a block's pass: block * KW FMAs on 8- or 16-lane vectors of its row)
        vector_fmas = len(re.findall(r"vfmadd\d+ps\s+[^\n]*%[yz]mm", asm))
        assert vector_fmas >= cb.block_size(g.o, g.kw) * g.kw, (which, vector_fmas)


def test_the_variant_follows_the_cpu_numba_compiles_for():
    import llvmlite.binding as ll
    from numba.core.codegen import get_host_cpu_features

    avx512 = "+avx512f" in str(get_host_cpu_features()).split(",")
    x86 = ll.get_process_triple().startswith("x86_64")
    assert cb.use_blocked() == (x86 and not avx512)
    g = _geometry(0)
    made = ck._make("forward", g).source
    assert made == (cb.forward(g) if cb.use_blocked() else ck.forward(g)).source
    assert ck._make("forward", None) is None
    assert [cb.block_size(16, k) for k in (1, 3, 5, 7, 11)] == [4, 3, 2, 1, 1]
    assert cb.block_size(1, 3) == 1


def test_compiled_matches_eager_on_a_non_contiguous_float64_input():
    """Through the tracer: a strided float64 view into conv2d with dilation and
    asymmetric-looking 'same' padding, its output and both gradients as eager's."""
    rng = np.random.default_rng(60)
    base = rng.standard_normal((3, 11, 9, 4))
    weight = rng.standard_normal((5, 3, 3, 5))

    def step(base, w):
        x = base.permute(0, 3, 1, 2)[:, 1:, ::1, 1:]              # (3, 3, 11, 8)
        y = F.conv2d(x, w, padding="same", dilation=(2, 1))
        (y * y).sum().backward()
        return y.detach()

    results = []
    for run in (step, tracer.function(step)):
        ts = [eager.tensor(a, requires_grad=True) for a in (base, weight)]
        results.append([run(*ts).numpy()] + [t.grad.numpy() for t in ts])
    for got, want in zip(*results[::-1]):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_muladd_reassoc_is_one_fused_multiply_add():
    """s + a*b with the product unrounded where the CPU has FMA (the weight gradient's
    running sums): (1 + 2**-12)**2 - (1 + 2**-11) is 2**-24 fused, 0 rounded twice; NaN
    and infinities go through as in s + a*b."""
    from numba import njit
    from numba.core.codegen import get_host_cpu_features

    from codegen.vmath import muladd_reassoc

    @njit(fastmath={"contract"})
    def f(s, a, b):
        return muladd_reassoc(s, a, b)

    one = np.float32(1 + 2.0 ** -12)
    got = f(np.float32(-(1 + 2.0 ** -11)), one, one)
    fma = "+fma" in str(get_host_cpu_features()).split(",")
    assert got == (np.float32(2.0 ** -24) if fma else np.float32(0.0))
    assert np.isnan(f(np.float32(np.nan), one, one))
    assert np.isnan(f(np.float32(np.inf), np.float32(-np.inf), one))
    assert f(np.float32(1.0), np.float32(np.inf), one) == np.inf
