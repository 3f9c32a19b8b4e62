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
sin,     float32  q, r+rl = |x| mod pi/2 by Payne-Hanek in      1     yes
cos               64-bit integers (3 x 32 bits of 2/pi times
                  the 24-bit significand, exact for all x);
                  sin/cos kernels deg-9/deg-10 minimax in r^2
sin,     float64  same, 6 x 32 bits of 2/pi, 126 fraction       1     yes
cos               bits, r*pi/2 as a double-double (one FMA);
                  deg-15/deg-16 minimax
tan      float32  same reduction; r+r^3 T(r^2), T deg-6;       2     yes
                  -1/tan(r) for odd q
tan      float64  same reduction; sin(r)/cos(r) of the kernels  2     yes
asin     float32  |x|<=1/2: x+x^3 A(x^2), A deg-5; else         1     yes
                  pi/2-2asin(s), s=sqrt((1-|x|)/2) as hi+corr
asin     float64  same, A deg-13                              1     yes
acos     float32  pi/2-asin(x); |x|>1/2: 2asin(s) or            1     yes
                  pi-2asin(s) (same A)
acos     float64  same, A deg-13                              1     yes
atan     float32  t = x, (x-1)/(x+1) or -1/x (|t|<=tan(pi/8))   2     yes
                  plus 0, pi/4 or pi/2; t-t^3 Q(t^2), Q deg-4
atan     float64  same, Q deg-11                              2     yes
atan2    float32  atan's reduction on |y|, |x| (one rounding);  2     yes
                  offsets pi-{...} for x<0; numpy's table
atan2    float64  same, Q deg-11                              2     yes
sinh     float32  a=|x|<16: (em + em/(em+1))/2, em=expm1(a)   2     yes
                  (exp's reduction); else 2^(n-1)(1+p(r))
sinh     float64  same, split at 32                           2     yes
cosh     float32  a<16: e/2 + 1/(2e), e=exp(a); else as sinh  1     yes
cosh     float64  same, split at 32                           1     yes
asinh    float32  a<=2: log1p(a + a^2/(1+sqrt(1+a^2)));       2     yes
                  else log(2a + 1/(a+sqrt(a^2+1))), a>2^12:
                  log(a)+ln2; one log kernel on u + c (c: the
                  rounding error of u, by Fast2Sum)
asinh    float64  same, a>2^28: log(a)+ln2                    2     yes
acosh    float32  x<=2: log1p(t + sqrt(2t+t^2)), t=x-1;       2     yes
                  else log(2x - 1/(x+sqrt(x^2-1))); as asinh
acosh    float64  same                                        2     yes
atanh    float32  a<1/2: log1p(2a + 2a^2/(1-a))/2;            2     yes
                  else log1p(2a/(1-a))/2
atanh    float64  same                                        2     yes
log2     float32  log's reduction; log(1+f) as hi (12 bits)   1     yes
                  + lo, times 1/ln2 as hi + lo; + e last
log2     float64  same, hi 21 bits                            1     yes
log10    float32  as log2 with 1/ln10, + e*log10(2) hi + lo   1     yes
log10    float64  same                                        1     yes
exp2     float32  n=rint(x), r=x-n (exact), 2^n(1+p(r*ln2)),  1     yes
                  p: exp's e^r-1 polynomial
exp2     float64  same                                        1     yes
hypot    float32  both scaled by 2^-e of the larger (its      1     yes
                  exponent), sqrt(m^2 + l^2) * 2^e; sampled
hypot    float64  same                                        1     yes
logaddexp float32 max + log1p(exp(-|a-b|)); ULP of           2     yes
                  max(|result|, 1/2); sampled
logaddexp float64 same                                        2     yes
=======  =======  ==========================================  ====  ==========

``VMATH_MAX_ULP`` holds these numbers; ``tests/codegen/test_vmath.py``
re-checks them on a subsample (~1.5M inputs per function; the trigonometric ones ~0.5M,
and the floats closest to multiples of pi/2 against mpmath). The trigonometric rows'
float32 bounds hold on all 2**32 inputs (``python -m benchmarks.vmath_accuracy sin cos
tan asin acos atan atan2``, 2026-12-01, 0 inputs over the bound, 0 NaN mismatches; about
1.5 minutes per op on a quiet machine), atan2 pairing each y with one x (a permutation of
the bit patterns); float64 on 9M inputs per function (as above, without the 60M's
denormal sweep).

Subsamples in the tests for sinh ... logaddexp: ~0.4M inputs per function.
The float64 rows of sinh ... logaddexp were measured on 20M inputs each (random bit
patterns, the op's domain, |x| in [1e-20, 10], 1 ± [1e-15, 1], |x| in [1e-300, 1e300])
against ``longdouble``. The binary functions (hypot, logaddexp) cannot be checked on every
pair: float32 is measured on 2**27 random bit-pattern pairs plus two 4096 x 4096 grids
(``benchmarks/vmath_accuracy.py``); logaddexp's error is in ULP of max(|result|, 1/2),
since near a result of 0 the sum max + log1p(...) cancels (numpy's own loops lose as
much there).

Domain / special values (all handled branch-free with selects):
exp(-inf)=0, exp(+inf)=inf, exp(nan)=nan, overflow -> inf, underflow ->
correctly scaled denormals then 0 (like numpy); expm1(-inf)=-1, expm1(±0)=±0;
log(0)=-inf, log(<0)=nan, log(inf)=inf, denormal inputs exact-scaled;
log1p(-1)=-inf, log1p(<-1)=nan, log1p(±0)=±0; tanh(±inf)=±1, tanh(±0)=±0;
sigmoid(-inf)=0, sigmoid(inf)=1 (denormal results for very negative x);
erf(±inf)=±1, erf(±0)=±0; sin/cos/tan(±inf)=nan, sin/tan(±0)=±0;
asin/acos(|x|>1)=nan, asin(±1)=±pi/2, acos(1)=0, acos(-1)=pi; atan(±inf)=±pi/2;
atan2: numpy's table (atan2(±0, +0)=±0, atan2(±0, -0)=±pi, atan2(±inf, ±inf)=±pi/4
or ±3pi/4, ...);
erf(±inf)=±1, erf(±0)=±0; sinh(±inf)=±inf and overflow to ±inf, cosh(±inf)=inf,
sinh/asinh/atanh keep ±0; acosh(<1)=nan, acosh(1)=0; atanh(±1)=±inf, atanh(|x|>1)=nan;
log2/log10 as log, log2 exact at powers of two; exp2 exact at integers, exp2(-inf)=0;
hypot(±inf, nan)=inf (an infinity wins over a nan, as C99); logaddexp(a, a)=a+ln2, so
(-inf, -inf) -> -inf and (inf, inf) -> inf, logaddexp(inf, -inf)=inf; nan -> nan
everywhere else.

Polynomial coefficients were produced with a Remez exchange in 40-digit
mpmath (weighted for the final relative error; for the float32 sets the
coefficients were rounded to float32 one at a time, re-fitting the rest).

Layout (``codegen.vmath`` re-exports every name in ``__all__``; kernels import from it)
---------------------------------------------------------------------------------------
* ``intrinsics.py``: ``_vjit`` (how each function is compiled), the llvmlite intrinsics
  (bit-level helpers, ``maximum``, ``trip_count``, ``hidden``, ``stream_copy``,
  ``store_fence``);
* ``constants.py``: typed constants and polynomial coefficients;
* ``explog.py``: exp, expm1, log, log1p, log2, log10, exp2, logaddexp;
* ``hyperbolic.py``: sinh, cosh, asinh, acosh, atanh, hypot;
* ``tanh_erf.py``: tanh, sigmoid, erf;
* ``trig.py``: sin, cos, tan (and the Payne-Hanek reduction); ``inverse_trig.py``: asin,
  acos, atan, atan2;
* ``arith.py``: ``div_exact``, ``div_invariant_*``, ``add_reassoc``, ``muladd_reassoc``;
* ``divmod.py``: numpy's float floor division and remainder (``floor_divide_float``,
  ``remainder_float``);
* ``intpow.py``: integer powers that wrap on overflow (``pow_uint64``);
* here: the lookup tables for code generators and the ``NUMBA_DISABLE_JIT`` stand-ins.
"""
import numpy as np
from numba import config as _numba_config

from .arith import (add_reassoc, div_exact, div_invariant_f32, div_invariant_f64,
                    muladd_reassoc)
from .divmod import floor_divide_float, remainder_float
from .explog import (exp2_f32, exp2_f64, exp_f32, exp_f64, expm1_f32, expm1_f64, log1p_f32,
                     log1p_f64, log2_f32, log2_f64, log10_f32, log10_f64, log_f32, log_f64,
                     logaddexp_f32, logaddexp_f64)
from .hyperbolic import (acosh_f32, acosh_f64, asinh_f32, asinh_f64, atanh_f32, atanh_f64,
                         cosh_f32, cosh_f64, hypot_f32, hypot_f64, sinh_f32, sinh_f64)
from .intpow import pow_uint64
from .inverse_trig import (acos_f32, acos_f64, asin_f32, asin_f64, atan2_f32, atan2_f64,
                           atan_f32, atan_f64)
from .intrinsics import FASTMATH_FLAGS, maximum, store_fence, stream_copy, trip_count
from .intrinsics import hidden
from .tanh_erf import erf_f32, erf_f64, sigmoid_f32, sigmoid_f64, tanh_f32, tanh_f64
from .trig import cos_f32, cos_f64, sin_f32, sin_f64, tan_f32, tan_f64

__all__ = [
    "exp_f32", "exp_f64", "expm1_f32", "expm1_f64",
    "log_f32", "log_f64", "log1p_f32", "log1p_f64",
    "tanh_f32", "tanh_f64", "sigmoid_f32", "sigmoid_f64",
    "erf_f32", "erf_f64",
    "sinh_f32", "sinh_f64", "cosh_f32", "cosh_f64", "asinh_f32", "asinh_f64",
    "acosh_f32", "acosh_f64", "atanh_f32", "atanh_f64", "log2_f32", "log2_f64",
    "log10_f32", "log10_f64", "exp2_f32", "exp2_f64", "hypot_f32", "hypot_f64",
    "logaddexp_f32", "logaddexp_f64",
    "maximum", "trip_count", "stream_copy", "store_fence", "div_exact",
    "div_invariant_f32", "div_invariant_f64", "add_reassoc", "muladd_reassoc",
    "floor_divide_float",
    "remainder_float", "pow_uint64",
    "sin_f32", "sin_f64", "cos_f32", "cos_f64", "tan_f32", "tan_f64", "asin_f32", "asin_f64",
    "acos_f32", "acos_f64", "atan_f32", "atan_f64", "atan2_f32", "atan2_f64",
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
_LIBM = {("erf", "float64")}
VMATH_VECTORIZES = {key: key not in _LIBM for key in VMATH_NAMES}

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
    # trig.py, inverse_trig.py
    ("sin", "float32"): "Payne-Hanek in integers to r + rl, |r|<=pi/4; deg-9/10 minimax",
    ("sin", "float64"): "same, 192 bits of 2/pi, r*pi/2 by FMA; deg-15/16 minimax",
    ("cos", "float32"): "Payne-Hanek in integers to r + rl, |r|<=pi/4; deg-9/10 minimax",
    ("cos", "float64"): "same, 192 bits of 2/pi, r*pi/2 by FMA; deg-15/16 minimax",
    ("tan", "float32"): "same reduction; r + r^3 T(r^2) deg-15, -1/tan for odd q",
    ("tan", "float64"): "same reduction; sin(r)/cos(r) or -cos(r)/sin(r)",
    ("asin", "float32"): "|x|<=.5: x+x^3 A(x^2); else pi/2-2asin(sqrt((1-|x|)/2))",
    ("asin", "float64"): "same, A: deg-13 minimax",
    ("acos", "float32"): "pi/2-asin(x); |x|>.5: 2asin(s) or pi-2asin(s), s=sqrt((1-|x|)/2)",
    ("acos", "float64"): "same, A: deg-13 minimax",
    ("atan", "float32"): "t in {x, (x-1)/(x+1), -1/x}, |t|<=tan(pi/8); t-t^3 Q(t^2)",
    ("atan", "float64"): "same, Q: deg-11 minimax",
    ("atan2", "float32"): "atan of {a/b, (a-b)/(a+b), -b/a}, quadrant offsets, numpy's table",
    ("atan2", "float64"): "same, Q: deg-11 minimax",
    ("sinh", "float32"): "|x|<16: (em + em/(em+1))/2, em=expm1|x|; else 2^(n-1) e^r",
    ("sinh", "float64"): "|x|<32: (em + em/(em+1))/2, em=expm1|x|; else 2^(n-1) e^r",
    ("cosh", "float32"): "|x|<16: e/2 + 1/(2e), e=exp|x|; else 2^(n-1) e^r",
    ("cosh", "float64"): "|x|<32: e/2 + 1/(2e), e=exp|x|; else 2^(n-1) e^r",
    ("asinh", "float32"): "log1p(a + a^2/(1+sqrt(1+a^2))) | log(2a + 1/(a+sqrt(a^2+1)))",
    ("asinh", "float64"): "log1p(a + a^2/(1+sqrt(1+a^2))) | log(2a + 1/(a+sqrt(a^2+1)))",
    ("acosh", "float32"): "log1p(t + sqrt(2t+t^2)), t=x-1 | log(2x - 1/(x+sqrt(x^2-1)))",
    ("acosh", "float64"): "log1p(t + sqrt(2t+t^2)), t=x-1 | log(2x - 1/(x+sqrt(x^2-1)))",
    ("atanh", "float32"): "log1p(2a + 2a^2/(1-a))/2 | log1p(2a/(1-a))/2",
    ("atanh", "float64"): "log1p(2a + 2a^2/(1-a))/2 | log1p(2a/(1-a))/2",
    ("log2", "float32"): "log reduction, log(1+f) as hi+lo times 1/ln2 hi+lo, + e",
    ("log2", "float64"): "log reduction, log(1+f) as hi+lo times 1/ln2 hi+lo, + e",
    ("log10", "float32"): "log reduction, hi+lo times 1/ln10 hi+lo, + e log10(2) hi+lo",
    ("log10", "float64"): "log reduction, hi+lo times 1/ln10 hi+lo, + e log10(2) hi+lo",
    ("exp2", "float32"): "n=rint(x), r=x-n exact, 2^n (1 + expm1 poly(r ln2))",
    ("exp2", "float64"): "n=rint(x), r=x-n exact, 2^n (1 + expm1 poly(r ln2))",
    ("hypot", "float32"): "both scaled by 2^-e of the larger, sqrt(m^2 + l^2) 2^e",
    ("hypot", "float64"): "both scaled by 2^-e of the larger, sqrt(m^2 + l^2) 2^e",
    ("logaddexp", "float32"): "max(a,b) + log1p(exp(-|a-b|)); a == b: a + ln2",
    ("logaddexp", "float64"): "max(a,b) + log1p(exp(-|a-b|)); a == b: a + ln2",
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
    # trig.py, inverse_trig.py
    ("sin", "float32"): 1.0,       # exhaustive
    ("sin", "float64"): 1.0,
    ("cos", "float32"): 1.0,       # exhaustive
    ("cos", "float64"): 1.0,
    ("tan", "float32"): 2.0,       # exhaustive
    ("tan", "float64"): 2.0,
    ("asin", "float32"): 1.0,      # exhaustive
    ("asin", "float64"): 1.0,
    ("acos", "float32"): 1.0,      # exhaustive
    ("acos", "float64"): 1.0,
    ("atan", "float32"): 2.0,      # exhaustive
    ("atan", "float64"): 2.0,
    ("atan2", "float32"): 2.0,     # every y value, each with one x
    ("atan2", "float64"): 2.0,
    ("sinh", "float32"): 2.0,      # exhaustive
    ("sinh", "float64"): 2.0,
    ("cosh", "float32"): 1.0,      # exhaustive
    ("cosh", "float64"): 1.0,
    ("asinh", "float32"): 2.0,     # exhaustive
    ("asinh", "float64"): 2.0,
    ("acosh", "float32"): 2.0,     # exhaustive
    ("acosh", "float64"): 2.0,
    ("atanh", "float32"): 2.0,     # exhaustive
    ("atanh", "float64"): 2.0,
    ("log2", "float32"): 1.0,      # exhaustive
    ("log2", "float64"): 1.0,
    ("log10", "float32"): 1.0,     # exhaustive
    ("log10", "float64"): 1.0,
    ("exp2", "float32"): 1.0,      # exhaustive
    ("exp2", "float64"): 1.0,
    # binary: sampled (2**27 random pairs + grids), not exhaustive
    ("hypot", "float32"): 1.0,
    ("hypot", "float64"): 1.0,
    # sampled as hypot; in ULP of max(|result|, 1/2) (the sum cancels near a result of 0)
    ("logaddexp", "float32"): 2.0,
    ("logaddexp", "float64"): 2.0,
}


def vmath_name(op, dtype):
    """Importable name (in ``codegen.vmath``) for op on dtype, or None."""
    return VMATH_NAMES.get((op, np.dtype(dtype).name))


# With NUMBA_DISABLE_JIT=1 (debugging generated kernels as plain Python, see README) the
# llvmlite intrinsics above cannot run: use scalar reference implementations instead.
if _numba_config.DISABLE_JIT:  # pragma: no cover - exercised by a subprocess test
    import math as _math

    def _py(fn, dtype):
        def scalar(*x):
            with np.errstate(all="ignore"):
                return dtype(fn(*map(float, x)))
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
           "tanh": _math.tanh, "sigmoid": _py_sigmoid, "erf": _math.erf,
           # numpy's functions: math.sin(inf) raises, math.atan2 follows C's table
           "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
           "atan": np.arctan, "atan2": np.arctan2}
    # numpy's float64 ufuncs (its special values), rounded to the dtype by `_py`
    _PY.update(sinh=np.sinh, cosh=np.cosh, asinh=np.arcsinh, acosh=np.arccosh,
               atanh=np.arctanh, log2=np.log2, log10=np.log10, exp2=np.exp2, hypot=np.hypot,
               logaddexp=np.logaddexp)
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

    def add_reassoc(a, b):  # the stand-in for the intrinsic: the addition, in order
        return a + b

    def muladd_reassoc(s, a, b):  # ... and a multiply-add (not fused: one rounding more)
        return s + a * b
