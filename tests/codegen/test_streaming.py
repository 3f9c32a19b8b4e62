"""Streaming (non-temporal) stores: `codegen.vmath.stream_copy` on its own, and row kernels
whose large outputs are written through it (see codegen.emit.STREAM_MIN_BYTES).

The copy peels scalar stores up to a 64-byte boundary of the destination, stores whole
cache lines, then a scalar tail: lengths and offsets around those boundaries are tested.
"""
from __future__ import annotations

import platform
import re

import numpy as np
import pytest
from numba import njit

import eager
import eager.nn.functional as F
import tracer
from codegen import emit
from codegen.vmath import store_fence, stream_copy

LENGTHS = [0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000]


@njit
def _copy(dst, start, src, n):
    stream_copy(dst, start, src, n)
    store_fence()


def _payload(rng, dtype, n):
    if dtype == np.bool_:
        return rng.integers(0, 2, n).astype(np.bool_)
    if np.dtype(dtype).kind == "f":
        a = rng.standard_normal(n).astype(dtype)
        a[::5] = np.nan
        a[1::7] = np.inf
        a[2::11] = -np.inf
        a[3::13] = -0.0
        return a
    return rng.integers(-1000, 1000, n).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.bool_,
                                   np.int16])
def test_stream_copy_lengths_and_offsets(dtype):
    rng = np.random.default_rng(3)
    for n in LENGTHS:
        src = _payload(rng, dtype, n + 3)  # longer than n: only n elements are copied
        for start in range(20):            # every alignment of the destination
            dst = _payload(rng, dtype, start + n + 24)
            expected = dst.copy()
            expected[start:start + n] = src[:n]
            _copy(dst, start, src, n)
            # bit for bit: NaN payloads and -0.0 too
            assert dst.tobytes() == expected.tobytes(), (dtype, n, start)


def test_stream_copy_into_unaligned_views():
    """A destination view that is not aligned to its element size gets scalar stores."""
    raw = np.zeros(4 * 300 + 1, np.uint8)
    dst = raw[1:].view(np.float32)
    assert dst.ctypes.data % 4 == 1
    src = np.arange(300, dtype=np.float32)
    _copy(dst, 3, src, 290)
    assert np.array_equal(dst[3:293], src[:290])
    assert not dst[:3].any() and not dst[293:].any()


def _x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


def _nontemporal_stores(dispatcher) -> set:
    asm = "\n".join(dispatcher.inspect_asm(sig) for sig in dispatcher.signatures)
    return set(re.findall(r"\b(v?movnt\w+)", asm))


@pytest.mark.skipif(not _x86(), reason="checks x86 instructions")
def test_stream_copy_emits_nontemporal_vector_stores():
    dst = np.zeros(100, np.float32)
    _copy(dst, 1, np.ones(90, np.float32), 90)
    found = _nontemporal_stores(_copy)
    assert found & {"movntps", "vmovntps", "movntdq", "vmovntdq"}, found


# --------------------------------------------------------------------------------------
# row kernels

def _layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def _softmax_and_max(x):
    return F.softmax(x, -1), eager.amax(x, -1), x - x.mean(-1, keepdim=True)


def _matches_eager(fn, *arrays):
    f = tracer.function(fn)
    args = [eager.from_numpy(a) for a in arrays]
    with eager.no_grad():
        got = f(*args)
        exp = fn(*args)
        concrete = f.get_concrete_function(*args)
    got = got if isinstance(got, tuple) else (got,)
    exp = exp if isinstance(exp, tuple) else (exp,)
    for g, e in zip(got, exp):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=2e-6, atol=1e-6,
                                   equal_nan=True)
    return concrete


def _row_inputs(rng, rows, cols):
    x = rng.uniform(-20, 20, size=(rows, cols)).astype(np.float32)
    x[0, 0] = np.nan
    x[rows // 2, : min(cols, 3)] = np.inf
    x[rows - 1, cols - 1] = -np.inf
    w = (1 + 0.1 * rng.standard_normal(cols)).astype(np.float32)
    b = (0.1 * rng.standard_normal(cols)).astype(np.float32)
    return x, w, b


# Row lengths (float32) around the 64-byte store: 1 (no line, all tail), 16 (one line
# exactly), 17 (odd: the 37 rows start at every alignment, so the peel ranges over 0..15
# and may leave no whole line, as a row shorter than a line does), 100 (several lines and a
# tail). The copy itself is checked on every length and offset above; the parallel form
# differs from the serial one in its row blocks, not in a row's copy.
STREAM_COLS = {False: (1, 16, 17, 100), True: (17, 100)}


@pytest.mark.parametrize("parallel", [False, True])
def test_row_kernels_stream_large_outputs(monkeypatch, parallel):
    """With the threshold lowered, every full-size row output is streamed: the results
    match eager for row lengths around the 64-byte store (and the peel before it)."""
    monkeypatch.setattr(emit, "STREAM_MIN_BYTES", 1)
    if parallel:  # blocks of rows in parallel, the last one partial
        monkeypatch.setattr(emit, "PARALLEL_MIN_SIZE", 32)
        monkeypatch.setattr(emit, "ROW_BLOCK_SIZE", 16)
    rng = np.random.default_rng(5)
    for cols in STREAM_COLS[parallel]:
        x, w, b = _row_inputs(rng, 37, cols)
        for fn, args in ((_layer_norm, (x, w, b)), (_softmax_and_max, (x,))):
            concrete = _matches_eager(fn, *args)
            rows = [k for k in concrete.kernels if k.kind == "row"]
            assert rows and all(k.fn is not None for k in rows), concrete
            full = [k for k in rows
                    if any(v.type.shape == k.group.shape for v in k.group.outputs)]
            assert full
            for k in full:
                assert ("for i0_block in range(lo, hi):" in k.source) == parallel
                # every full-size output streams, but one whose row keeps an intermediate
                # for the last pass (softmax's exp) is stored plainly
                names = [name for name, *shape in
                         re.findall(r"# (out\d+): %\S+ f32\[(\d+), (\d+)\]", k.source)
                         if tuple(map(int, shape)) == k.group.shape]
                assert names, k.source
                for name in names:
                    keeps = re.search(rf"\b{name}\[[^\n]*# keeps", k.source)
                    assert bool(keeps) != (f"stream_copy({name}," in k.source), k.source
                assert ("store_fence()" in k.source) == ("stream_copy(" in k.source)
            if fn is _softmax_and_max:
                assert any(re.search(r"\bout\d+\[[^\n]*# keeps", k.source) for k in full)
            else:
                assert all("stream_copy(" in k.source for k in full)


def test_row_kernels_stream_only_past_the_threshold():
    """At the default threshold W3's layer_norm (16 MiB out) streams its output rows, and
    the compiled code has non-temporal stores; a small one stores plainly."""
    rng = np.random.default_rng(7)
    x, w, b = _row_inputs(rng, 4096, 1024)
    assert x.nbytes >= emit.STREAM_MIN_BYTES
    big = _matches_eager(_layer_norm, x, w, b)
    (kernel,) = big.kernels
    assert "stream_copy(out0, np.uint64(i0 * 1024), row0, 1024)" in kernel.source
    if _x86():
        # The parallel kernel's row blocks, compiled here: an overload loaded from Numba's
        # disk cache has no assembly to inspect.
        cached = kernel.fn.py_func.__globals__["rows"]
        options = {k: v for k, v in cached.targetoptions.items() if k != "nopython"}
        rows = njit(**options)(cached.py_func)
        rows.compile(cached.signatures[0])
        assert _nontemporal_stores(rows) & {"movntps", "vmovntps"}, kernel.source
    small = _matches_eager(_layer_norm, x[:64], w, b)
    assert all("stream_copy" not in k.source for k in small.kernels)
