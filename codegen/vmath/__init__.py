"""Vectorizable elementary functions for use inside Numba-compiled loops.

PyPI's llvmlite ships without Intel SVML, so ``math.exp`` / ``math.tanh`` /
... inside an ``@njit`` loop become scalar libm calls and block LLVM's loop
vectorizer.  The functions here are written in plain arithmetic (range
reduction + minimax polynomials, branch-free selects for special values, a
tiny llvmlite intrinsic for the float <-> int bit manipulation needed for
``2**n`` scaling and exponent extraction), so that LLVM inlines them into the
caller's loop and vectorizes it (``<8 x float>`` / ``<16 x float>`` on
AVX2 / AVX-512 hosts).

Usage (this is what the code generator emits)::

    from numba import njit
    from codegen.vmath import exp_f32

    @njit(fastmath=set(), error_model="numpy")   # (codegen.emit.FASTMATH: no flags)
    def kernel(x, out):
        for i in range(x.shape[0]):
            out[i] = exp_f32(x[i])          # x is a float32 array

Design notes
------------
* Every function is a plain ``numba.njit(fastmath={'contract'},
  error_model='numpy')`` function whose first statement is the intrinsic
  ``_always_inline()``, which puts LLVM's ``alwaysinline`` attribute on the
  compiled function.  LLVM then inlines it into the caller's loop (whatever
  its size; without this, tanh/erf/expm1_f64 exceeded the inline threshold
  and stayed calls, which blocks vectorization), and the loop vectorizes.
  Numba's ``inline='always'`` is deliberately NOT used: it re-lowers the body
  with the *caller's* fast-math flags, and ``reassoc`` would e.g. fold the
  round-to-integer trick ``(x*log2e + C) - C`` away.  With LLVM inlining the
  instructions keep their own flags, so callers may use ``reassoc``/``arcp``/
  ``afn``/``nsz``/``contract`` (``FASTMATH_FLAGS``); results are
  bit-identical to a caller without fast-math (tested). (The generated kernels use
  none: those flags change NaN/inf results of the kernel's own arithmetic; see
  ``codegen.emit.FASTMATH``, ``add_reassoc`` and ``div_invariant_f32``.)  Callers must NOT use
  ``nnan``/``ninf``: NaN/inf propagation relies on selects that those flags
  allow LLVM to delete.  ``contract`` (FMA fusion) never hurts accuracy here.
  ``error_model='numpy'`` removes the ZeroDivisionError branches numba would
  otherwise emit for ``/`` (which also block vectorization).
* Float32 functions use float32 constants only (module-level ``np.float32``),
  so their LLVM IR contains no ``double`` operations.
* Pass scalars of the matching dtype (float32 to ``*_f32``).  Other argument
  types compile a separate (promoted) specialization.
* Lookup for code generators: ``VMATH[(op, dtype_name)]`` -> function,
  ``VMATH_NAMES[(op, dtype_name)]`` -> importable name (``"exp_f32"``),
  ``VMATH_MAX_ULP[(op, dtype_name)]`` -> measured max error in ULP (float),
  ``VMATH_METHOD[(op, dtype_name)]`` -> short description.
* Cheap range handling: an argument is clamped with ``min(max(x, lo), hi)`` (Python's
  rule, a nan stays nan), which LLVM turns into one ``vmaxps``/``vminps`` each; written
  as ``x if x > lo else lo`` it became a compare and a blend each. The integer n of the
  2^n scaling is read from the bits of the round-to-integer shifter's sum
  (``t = x*log2e + 1.5*2^23``) by one integer subtraction, not converted from a float:
  LLVM leaves a float-to-int conversion of NaN undefined. Both together took exp_f32
  from 0.31 to 0.24 ns per element in cache (expm1 0.42 -> 0.37, exp_f64 0.85 -> 0.69).
* ``maximum(a, b)`` is exact, not an approximation: LLVM's ``llvm.maximum`` (np.maximum's
  NaN rule), for running maxima that vectorize without ``nnan``.
* ``trip_count(n)`` is ``n`` hidden from LLVM, so that a long row loop is not unrolled
  completely (see its docstring).
* ``hidden(x)`` is a float hidden from LLVM, read once before a kernel's loops: a masked
  running maximum over a constant fill then vectorizes (see its docstring).
* ``stream_copy(dst, start, src, n)`` copies a small (L1-resident) buffer to
  ``dst[start:start + n]`` with non-temporal (streaming) vector stores, and
  ``store_fence()`` orders them; for large kernel outputs (see their docstrings).

Measured accuracy
-----------------
Max error in ULP of the result dtype = distance in representable numbers
between our result and the reference rounded to the result dtype.
float32: reference = numpy/scipy float64 result rounded to float32; measured
EXHAUSTIVELY over all 2**32 float32 inputs (both signs, denormals, ±0, ±inf,
nans).  float64: reference = numpy ``longdouble`` (x87 80-bit) rounded to
float64 (erf: mpmath); 60M inputs = random bit patterns over the whole range
+ uniform on the interesting domain + |x| in [1e-20, 1] + edge/special values
(denormals, overflow/underflow thresholds).  Measured with the vmath
function inlined into a kernel compiled with ``FASTMATH_FLAGS`` on an
AVX-512 host (LLVM may or may not fuse FMAs on other hosts; the algorithms
do not depend on FMA).

=======  =======  ==========================================  ====  ==========
op       dtype    method                                      ULP   vectorizes
=======  =======  ==========================================  ====  ==========
exp      float32  n=rint(x/ln2), r=x-n*ln2 (Cody-Waite),      1     yes
                  e^r-1 deg-7 minimax, 2^n by vscalef (AVX-512)
                  or as two scalings
exp      float64  same, deg-13 minimax                        1     yes
expm1    float32  same reduction, 2^n*(e^r-1) + (2^n-1)       1     yes
expm1    float64  same                                        2     yes
log      float32  x=m*2^e, m in [sqrt(.5),sqrt(2)),           1     yes
                  s=f/(2+f), log1p(f)=f-f^2/2+s(f^2/2+R(s^2))
                  R: 3-term minimax; e*ln2 hi/lo
log      float64  same, R: 7-term minimax                     1     yes
log1p    float32  log kernel on u=1+x plus correction         1     yes
                  (x-(u-1))/u; exact f=x when u in [.71,1.41)
log1p    float64  same                                        1     yes
tanh     float32  -em/(2+em), em=expm1(-2|x|) (exp reduction,  2     yes
                  e^r-1 deg-7 minimax, 2^n*(e^r-1)+(2^n-1))
tanh     float64  same as float32, deg-13 minimax              3     yes
sigmoid  float32  t=exp(-|x|): x>=0: 1/(1+t), x<0: t/(1+t)    2     yes
sigmoid  float64  same                                        2     yes
erf      float32  |x|<=1: x+x*P(x^2) (deg-6 minimax);         1     yes
                  1<|x|<4: 1-exp(Q(|x|-1)), Q deg-6 minimax
                  of log(erfc); |x|>=4: ±1
erf      float64  libm ``math.erf`` fallback (a deg ~20       1     NO (scalar
                  polynomial would be needed; not worth it)         libm call)
=======  =======  ==========================================  ====  ==========

``VMATH_MAX_ULP`` holds these numbers; ``tests/codegen/test_vmath.py``
re-checks them on a subsample (~1.5M inputs per function).

Domain / special values (all handled branch-free with selects):
exp(-inf)=0, exp(+inf)=inf, exp(nan)=nan, overflow -> inf, underflow ->
correctly scaled denormals then 0 (like numpy); expm1(-inf)=-1, expm1(±0)=±0;
log(0)=-inf, log(<0)=nan, log(inf)=inf, denormal inputs exact-scaled;
log1p(-1)=-inf, log1p(<-1)=nan, log1p(±0)=±0; tanh(±inf)=±1, tanh(±0)=±0;
sigmoid(-inf)=0, sigmoid(inf)=1 (denormal results for very negative x);
erf(±inf)=±1, erf(±0)=±0; nan -> nan everywhere.

Polynomial coefficients were produced with a Remez exchange in 40-digit
mpmath (weighted for the final relative error; for the float32 sets the
coefficients were rounded to float32 one at a time, re-fitting the rest).

Layout (``codegen.vmath`` re-exports every name in ``__all__``; kernels import from it)
---------------------------------------------------------------------------------------
* ``intrinsics.py``: ``_vjit`` (how each function is compiled), the llvmlite intrinsics
  (bit-level helpers, ``maximum``, ``trip_count``, ``hidden``, ``stream_copy``,
  ``store_fence``);
* ``constants.py``: typed constants and polynomial coefficients;
* ``explog.py``: exp, expm1, log, log1p;
* ``tanh_erf.py``: tanh, sigmoid, erf;
* ``arith.py``: ``div_exact``, ``div_invariant_*``, ``add_reassoc``;
* ``divmod.py``: numpy's float floor division and remainder (``floor_divide_float``,
  ``remainder_float``);
* here: the lookup tables for code generators and the ``NUMBA_DISABLE_JIT`` stand-ins.
"""
import numpy as np
from numba import config as _numba_config

from .arith import add_reassoc, div_exact, div_invariant_f32, div_invariant_f64
from .divmod import floor_divide_float, remainder_float
from .explog import exp_f32, exp_f64, expm1_f32, expm1_f64, log1p_f32, log1p_f64, log_f32, log_f64
from .intrinsics import FASTMATH_FLAGS, maximum, store_fence, stream_copy, trip_count
from .intrinsics import hidden
from .tanh_erf import erf_f32, erf_f64, sigmoid_f32, sigmoid_f64, tanh_f32, tanh_f64

__all__ = [
    "exp_f32", "exp_f64", "expm1_f32", "expm1_f64",
    "log_f32", "log_f64", "log1p_f32", "log1p_f64",
    "tanh_f32", "tanh_f64", "sigmoid_f32", "sigmoid_f64",
    "erf_f32", "erf_f64", "maximum", "trip_count", "stream_copy", "store_fence", "div_exact",
    "div_invariant_f32", "div_invariant_f64", "add_reassoc", "floor_divide_float",
    "remainder_float",
    "hidden",
    "VMATH", "VMATH_NAMES", "VMATH_MAX_ULP", "VMATH_METHOD", "vmath_name",
    "FASTMATH_FLAGS",
]


# ---------------------------------------------------------------------------
# lookup tables for code generators
# ---------------------------------------------------------------------------

from ..lower import VMATH_NAMES  # noqa: E402 - the table kernels' sources are written from

VMATH = {key: globals()[name] for key, name in VMATH_NAMES.items()}

# True when the function vectorizes inside a numba loop (False: libm call).
VMATH_VECTORIZES = {key: key != ("erf", "float64") for key in VMATH_NAMES}

VMATH_METHOD = {
    ("exp", "float32"): "Cody-Waite n*ln2, deg-7 minimax, 2^n scale (split, or vscalef)",
    ("exp", "float64"): "Cody-Waite n*ln2, deg-13 minimax, 2^n scale (split, or vscalef)",
    ("expm1", "float32"): "same reduction, 2^n*(e^r-1) + (2^n-1)",
    ("expm1", "float64"): "same reduction, 2^n*(e^r-1) + (2^n-1)",
    ("log", "float32"): "m*2^e, m in [sqrt.5,sqrt2), s=f/(2+f), 3-term R(s^2)",
    ("log", "float64"): "m*2^e, m in [sqrt.5,sqrt2), s=f/(2+f), 7-term R(s^2)",
    ("log1p", "float32"): "log kernel on 1+x with rounding correction c/(1+x)",
    ("log1p", "float64"): "log kernel on 1+x with rounding correction c/(1+x)",
    ("tanh", "float32"): "-em/(2+em), em = expm1(-2|x|)",
    ("tanh", "float64"): "-em/(2+em), em = expm1(-2|x|)",
    ("sigmoid", "float32"): "{1, e^-|x|} / (1 + e^-|x|)",
    ("sigmoid", "float64"): "{1, e^-|x|} / (1 + e^-|x|)",
    ("erf", "float32"): "|x|<=1: x+x P(x^2); else 1-exp(Q(|x|-1))",
    ("erf", "float64"): "libm math.erf (scalar, not vectorized)",
}

# Measured max error in ULP (see module docstring for the procedure).
VMATH_MAX_ULP = {
    ("exp", "float32"): 1.0,       # exhaustive
    ("exp", "float64"): 1.0,
    ("expm1", "float32"): 1.0,     # exhaustive
    ("expm1", "float64"): 2.0,
    ("log", "float32"): 1.0,       # exhaustive
    ("log", "float64"): 1.0,
    ("log1p", "float32"): 1.0,     # exhaustive
    ("log1p", "float64"): 1.0,
    ("tanh", "float32"): 2.0,      # exhaustive
    ("tanh", "float64"): 3.0,
    ("sigmoid", "float32"): 2.0,   # exhaustive
    ("sigmoid", "float64"): 2.0,
    ("erf", "float32"): 1.0,       # exhaustive
    ("erf", "float64"): 1.0,       # libm (glibc), vs mpmath
}


def vmath_name(op, dtype):
    """Importable name (in ``codegen.vmath``) for op on dtype, or None."""
    return VMATH_NAMES.get((op, np.dtype(dtype).name))


# With NUMBA_DISABLE_JIT=1 (debugging generated kernels as plain Python, see README) the
# llvmlite intrinsics above cannot run: use scalar reference implementations instead.
if _numba_config.DISABLE_JIT:  # pragma: no cover - exercised by a subprocess test
    import math as _math

    def _py(fn, dtype):
        def scalar(x):
            with np.errstate(all="ignore"):
                return dtype(fn(float(x)))
        return scalar

    def _py_exp(v):
        try:
            return _math.exp(v)
        except OverflowError:
            return _math.inf

    def _py_expm1(v):
        try:
            return _math.expm1(v)
        except OverflowError:
            return _math.inf

    def _py_log(v):
        if v != v or v < 0:
            return _math.nan
        return -_math.inf if v == 0 else _math.log(v)

    def _py_log1p(v):
        if v != v or v < -1:
            return _math.nan
        return -_math.inf if v == -1 else _math.log1p(v)

    def _py_sigmoid(v):
        if v != v:
            return v
        return 1.0 / (1.0 + _py_exp(-v))

    _PY = {"exp": _py_exp, "expm1": _py_expm1, "log": _py_log, "log1p": _py_log1p,
           "tanh": _math.tanh, "sigmoid": _py_sigmoid, "erf": _math.erf}
    for (_op, _dt), _name in VMATH_NAMES.items():
        globals()[_name] = _py(_PY[_op], np.float32 if _dt == "float32" else np.float64)
    VMATH = {key: globals()[name] for key, name in VMATH_NAMES.items()}

    def trip_count(n):  # the stand-in for the intrinsic
        return n

    def hidden(x):  # the stand-in for the intrinsic
        return x

    def stream_copy(dst, start, src, n):  # plain stores stand in for streaming ones
        dst[start:start + n] = src[:n]

    def store_fence():
        pass

    def maximum(a, b):  # the scalar stand-in for the intrinsic
        if _math.isnan(a) or _math.isnan(b):
            return a + b  # NaN, of the operands' type
        return max(a, b)
