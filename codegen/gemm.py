"""Float32 matrix products through tracejit's own kernel (codegen.gemm_kernel) where it
beats numpy's BLAS: the rule that picks it (`use_for`, decided when a runner is generated)
and the call a runner makes instead of np.matmul (`matmul`).

The kernel has a variant per instruction set, chosen at import from the host CPU's flags
(`host_isa`, `ISA`): "avx512" (8 x 32 blocks of C in zmm registers) with avx512f, "avx2"
(6 x 16 blocks in ymm registers, FMA3) with avx2 and fma; neither: numpy's BLAS.

Why: with OPENBLAS_CORETYPE=Haswell (the user's setting, left alone) numpy's OpenBLAS
runs AVX2 kernels, about 115-120 GFLOP/s single thread on an AVX-512 CPU where the AVX-512
variant runs W9's and W10's products at 175-220 (benchmarks/GEMM_NOTES.md). On a CPU
without AVX-512 OpenBLAS's Haswell/Zen kernels are as fast as the AVX2 variant, so there
it takes no product unless TRACEJIT_GEMM=stacks (stacks of matrices) or all (`_mode`). The rule, fixed per process: an AVX-512 CPU whose numpy OpenBLAS reports
a core without AVX-512 (not SkylakeX, Cooperlake, SapphireRapids: those kernels are as
fast as this one), or an AVX2 + FMA CPU; the product is float32 with both operands at
least 2-D, and it has at least `MIN_FLOPS` (below, the Python call's overhead is most of
it). TRACEJIT_GEMM=0 keeps numpy's BLAS everywhere.

The result is the same product summed in a different order: compiled and eager differ by
float32 rounding, as two BLAS builds would (the error against a float64 product is no
larger than BLAS's: tests/codegen/test_gemm.py). Both variants sum each element in the
same order: their products have the same bits. Eager keeps numpy's matmul.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import math
import threading
from pathlib import Path

import numpy as np

from tracer import settings

from . import parallel

MIN_FLOPS = 1 << 17     # 2*M*N*K (times the batch) at least: smaller ones stay with BLAS
# A b without contiguous rows (x @ w.T) is copied first: below this many rows of a the
# copy costs more than BLAS's whole product (W10's h @ w_hh.T, [20,128] @ [128,512].T:
# 0.5 ms copying into fresh memory, against 34 us in BLAS)
PACK_MIN_ROWS = 64
SPLIT_FLOPS = 1 << 23   # from here a product is split over the kernel threads
A_BLOCK = 192 * 256     # room for one packed block of a transposed A: gemm_kernel's MC * KC
                        # (its variants check they fit at import)
_AVX512_CORES = ("skylakex", "cooperlake", "sapphirerapids")
_F32 = np.dtype(np.float32)


def openblas_core() -> str | None:
    """The core numpy's OpenBLAS picked at load (`openblas_get_corename`), lower case, or
    None when numpy's BLAS is not an OpenBLAS this can ask."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    paths = {line.split()[-1] for line in maps.splitlines()
             if "openblas" in line.lower() and line.split()[-1].startswith("/")}
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename",
                     "openblas_get_corename64_", "openblas_get_corename"):
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                core = fn()
                return core.decode("ascii", "replace").strip().lower() if core else None
    return None


@functools.lru_cache(maxsize=None)
def _cpu_flags() -> frozenset:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[-1].split())
    return frozenset()


def _cpu_has_avx512f() -> bool:
    return "avx512f" in _cpu_flags()


def host_isa() -> str | None:
    """The kernel variant for this CPU (codegen.gemm_kernel.VARIANTS): "avx512" with
    avx512f, "avx2" with avx2 and fma, else None (no variant: numpy's BLAS)."""
    if _cpu_has_avx512f():
        return "avx512"
    flags = _cpu_flags()
    return "avx2" if "avx2" in flags and "fma" in flags else None


# the variant `matmul` runs (tests set another: any x86-64 CPU with AVX2 runs either)
ISA = host_isa() or "avx512"
# the products each variant takes unless TRACEJIT_GEMM says "all" or "stacks" (`_mode`).
# AVX2: none, numpy's OpenBLAS (Haswell/Zen kernels) being as fast. One thread, in W9's
# step, the AVX2 kernel ran attention's p @ v stacks 7-15% faster than OpenBLAS and q @ k^T
# as fast, the 2-D products 5-10% slower (a transposed A 15-27%); W9 with stacks only
# against main, two threads, on a loaded machine: 1.03x (quartiles 1.00-1.04), other runs
# 0.61-1.25x (benchmarks/GEMM_NOTES.md, session 21): no gain shown.
_DEFAULT_MODE = {"avx512": "all", "avx2": "none"}


@functools.lru_cache(maxsize=None)
def _available() -> bool:
    # (numpy's BLAS is loaded by numpy's import; Numba compiles for the host CPU unless
    # NUMBA_CPU_NAME, NUMBA_CPU_FEATURES or NUMBA_ENABLE_AVX say otherwise: then no zmm
    # registers may be there, and LLVM would make the kernel of narrower vectors)
    if any(settings.read(name) for name in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES",
                                            "NUMBA_ENABLE_AVX")) \
            or settings.read("NUMBA_DISABLE_JIT") == "1":
        return False
    core = openblas_core()
    if core is None:
        return False
    isa = host_isa()
    if isa == "avx512":
        return core not in _AVX512_CORES
    return isa == "avx2"


def available() -> bool:
    """Whether every product `use_for` sizes up may go through the kernel in this process
    (the AVX-512 variant: see the module doc; any variant with TRACEJIT_GEMM=all).
    codegen.step_kernels_rnn asks it for the LSTM kernels' per-step 2-D products."""
    return settings.GEMM.on() and _available() and _mode() == "all"


def _mode() -> str:
    """Which products the kernel takes: "all", "stacks" (both operands batched) or "none"
    (TRACEJIT_GEMM=all / stacks, else the variant's default: `_DEFAULT_MODE`)."""
    raw = settings.GEMM.raw().strip().lower()
    if raw in ("all", "stacks"):
        return raw
    return _DEFAULT_MODE.get(ISA, "all")


def use_for(a_shape, b_shape, dtype) -> bool:
    """Whether a runner computes the product of these static shapes through `matmul`."""
    if np.dtype(dtype) != _F32 or len(a_shape) < 2 or len(b_shape) < 2:
        return False
    if not all(isinstance(d, int) for d in (*a_shape, *b_shape)):
        return False
    batch = math.prod(np.broadcast_shapes(tuple(a_shape[:-2]), tuple(b_shape[:-2])))
    flops = 2 * batch * a_shape[-2] * a_shape[-1] * b_shape[-1]
    if flops < MIN_FLOPS or not (settings.GEMM.on() and _available()):
        return False
    mode = _mode()
    # (a stack: both operands batched, as attention's; x @ w with w 2-D is one product
    # to numpy's BLAS, and the kernel would copy a w.T for each matrix of x)
    stack = math.prod(a_shape[:-2]) > 1 and math.prod(b_shape[:-2]) > 1
    return mode == "all" or (mode == "stacks" and stack)


# ------------------------------------------------------------------ the kernel
_ISA_NAMES = {"avx512": "AVX-512", "avx2": "AVX2 + FMA"}
_SIGNATURE = ("void(float32[:, :, :, :], float32[:, :, :, :], float32[:, :, :, :], "
              "float32[::1], int64, int64, int64, int64, int64, int64)")


def _source() -> str:
    # The kernel module's digest and the variant (`ISA`) in the text: a changed kernel or
    # another variant makes another cache file (one's object is never loaded for another)
    isa = ISA
    kernel = Path(__file__).with_name("gemm_kernel.py").read_bytes()
    digest = hashlib.sha256(kernel).hexdigest()[:16]
    return "\n".join([
        '"""float32 products c[q, i0:i1, j0:j1] = a[q, i0:i1] @ b[q, :, j0:j1], q in [b0, b1)',
        "of stacks of matrices (4-D: q runs over the first two axes).",
        "",
        f"Generated by tracejit codegen (codegen.gemm); the loops and the {_ISA_NAMES[isa]}",
        f'micro-kernel are codegen.gemm_kernel (sha256 {digest}...)."""',
        "from codegen.build import njit  # numba.njit with a leaner cache load",
        f"from codegen.gemm_kernel import product_blocks_{isa} as product_blocks",
        "",
        "",
        f'@njit("{_SIGNATURE}", cache=True, nogil=True, fastmath=set(), error_model="numpy")',
        "def kernel(a, b, c, scratch, b0, b1, i0, i1, j0, j1):",
        "    product_blocks(a, b, c, scratch, b0, b1, i0, i1, j0, j1)",
        ""])


@functools.lru_cache(maxsize=None)
def _kernel(isa: str):
    """The compiled kernel of variant `isa`, which is `ISA` (the argument keys the cache)."""
    from . import build

    return build.load_kernel(_source(), "gemm_f32")[0]


def ahead_source() -> tuple | None:
    """(source, name hint) of the kernel, for compile-ahead children to compile while the
    program builds its other steps (codegen.ahead); None once this process has it."""
    if _kernel.cache_info().currsize:
        return None
    return _source(), "gemm_f32"


def prepare() -> None:
    """Compile (or load) the kernel now: a runner that uses `matmul` calls this when it is
    generated, so that the first call does not."""
    _kernel(ISA)


# ------------------------------------------------------------------ the call
def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """np.matmul(a, b, out=out) for float32 operands of at least 2 dimensions, through the
    kernel; anything else (other dtypes, an `out` it cannot write in place or that overlaps
    an operand) through np.matmul."""
    if a.__class__ is not np.ndarray or b.__class__ is not np.ndarray \
            or a.dtype != _F32 or b.dtype != _F32 or a.ndim < 2 or b.ndim < 2 \
            or a.shape[-1] != b.shape[-2] or not (a.flags.aligned and b.flags.aligned):
        return np.matmul(a, b, out=out)
    m, n = a.shape[-2], b.shape[-1]
    if a.ndim == 2 and b.ndim == 2:
        shape = (m, n)
    else:  # (equal batch axes, as attention's, without broadcast_shapes: 4 us a call)
        batch_a, batch_b = a.shape[:-2], b.shape[:-2]
        shape = (batch_a if batch_a == batch_b else np.broadcast_shapes(batch_a, batch_b)) \
            + (m, n)
    if out is None:
        out = np.empty(shape, _F32)
    elif out.__class__ is not np.ndarray or out.dtype != _F32 or out.shape != shape \
            or not (out.flags.writeable and out.flags.aligned) \
            or (out.size and out.strides[-1] != 4) \
            or (out.ndim > 4 and not out.flags.c_contiguous) \
            or np.may_share_memory(out, a) or np.may_share_memory(out, b):
        return np.matmul(a, b, out=out)
    if out.size == 0:
        return out
    if b.strides[-1] != 4 and m < PACK_MIN_ROWS:
        return np.matmul(a, b, out=out)
    if out.ndim <= 4:  # (views: broadcast batch axes keep stride 0)
        _run(_stack4(a), _stack4(b), _stack4(out))
    else:  # more batch axes: merged into one, by a copy where they must be
        batch = shape[:-2]
        _run(np.broadcast_to(a, batch + a.shape[-2:]).reshape(-1, 1, m, a.shape[-1]),
             np.broadcast_to(b, batch + b.shape[-2:]).reshape(-1, 1, b.shape[-2], n),
             out.reshape(-1, 1, m, n))
    return out


def _stack4(x: np.ndarray) -> np.ndarray:
    return x if x.ndim == 4 else x[(None,) * (4 - x.ndim)]


def _run(a4, b4, c4) -> None:
    """c4 = a4 @ b4 (broadcast over the stacks' axes), split over the kernel threads when
    large enough."""
    batch = c4.shape[:2]
    if a4.shape[:2] != batch:
        a4 = np.broadcast_to(a4, batch + a4.shape[2:])
    if b4.shape[:2] != batch:
        b4 = np.broadcast_to(b4, batch + b4.shape[2:])
    nb = batch[0] * batch[1]
    m, k = a4.shape[2:]
    n = c4.shape[3]
    kernel = _kernel(ISA)
    packs = b4.strides[3] != 4
    # (room for a block of a transposed A: gemm_kernel.product_blocks copies it)
    extra = A_BLOCK if a4.strides[2] == 4 and a4.strides[3] != 4 else 0
    threads = parallel._split_threads()
    pieces = [(0, nb, 0, m, 0, n)]
    if threads > 1 and 2 * nb * m * n * k >= SPLIT_FLOPS:
        pieces = _pieces(nb, m, n, threads * 2, packs)
    if len(pieces) == 1:
        kernel(a4, b4, c4, _scratch(_b_room(k, n, packs) + extra), 0, nb, 0, m, 0, n)
        return

    def piece(p):
        kernel(a4, b4, c4, _scratch(_b_room(k, p[5] - p[4], packs) + extra), *p)
    parallel.run_pieces(piece, pieces, threads)


def _b_room(k: int, n: int, packs: bool) -> int:
    """Floats of scratch for B's copy: a b without unit column stride copied as it is (k x n);
    the AVX2 variant copies any B into panels of 16 columns (a short last one padded)."""
    if ISA == "avx2":
        return k * -(-n // 16) * 16
    return k * n if packs else 0


_SCRATCH = threading.local()


def _scratch(size: int) -> np.ndarray:
    """This thread's scratch buffer of at least `size` floats, kept between calls (fresh
    memory each call page-faulted: W10's copies cost 10x more)."""
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or buf.size < size:
        buf = _SCRATCH.buf = np.empty(max(size, 1 << 12), _F32)
    return buf


def _pieces(nb: int, m: int, n: int, want: int, packs: bool = False) -> list:
    """About `want` blocks (b0, b1, i0, i1, j0, j1) of the product for the threads: whole
    matrices of the batch when there are enough of them, else each matrix in bands of rows
    (multiples of 32, at least 64 rows: each band reads all of B), else of columns (when B
    is copied (`packs`), columns first: each band copies only its own columns)."""
    if nb >= want:
        step = -(-nb // want)
        return [(q, min(q + step, nb), 0, m, 0, n) for q in range(0, nb, step)]
    per = -(-want // nb)
    rows = max(64, -(-m // per // 32) * 32)
    if (m >= 2 * rows and not (packs and n >= 64)) or n < 64:
        return [(q, q + 1, i, min(i + rows, m), 0, n) for q in range(nb)
                for i in range(0, m, rows)]
    cols = max(32, -(-n // per // 32) * 32)
    return [(q, q + 1, 0, m, j, min(j + cols, n)) for q in range(nb) for j in range(0, n, cols)]
