"""OpInfo entries of the math ops (issue 16 item 5), appended to `opinfo.OPINFOS`: forward
against Python-scalar references (the `math` module and Python's own operators, never the
registry's numpy calls), gradients against finite differences, traced and compiled on both
backends (elementwise entries named after their op get a derived compiled case in the
entry's `domain`; the others list their `compiled` cases).
"""
from __future__ import annotations

import math
import operator

import numpy as np
from opinfo import (ALL, BINARY, BOOL, F64, FLOATS, I32, I64, NUMERIC, Case, OpInfo, Sample, UNARY,
                    binary_grad, binary_samples, float_result, pointwise, reduce_grad,
                    reduce_rows, reduce_samples, shapes, specials, SPECIALS, unary_grad, unary_samples, values)

import eager

NAN, INF = math.nan, math.inf
INTS = (I32, I64)
INTS_BOOL = (I32, I64, BOOL)


def _e(name, op, call, ref, samples, dtypes=FLOATS, grad=None, **kw):
    return OpInfo(name, op, call, ref, samples, dtypes, grad, **kw)


def _safe(f, domain_error=NAN, overflow=None):
    """Python's math function f as an IEEE function: a domain error is NaN (or the pole's
    signed infinity, `domain_error(v)`), an overflow the signed infinity."""
    def g(*v):
        v = [float(x) for x in v]
        if any(x != x for x in v):
            return NAN
        try:
            return f(*v)
        except ValueError:
            return domain_error(*v) if callable(domain_error) else domain_error
        except OverflowError:
            return overflow(*v) if overflow else INF
    return g


def _pole_log(v):  # log2/log10 at 0: -inf; below: NaN
    return -INF if v == 0 else NAN


def _atanh_pole(v):
    return math.copysign(INF, v) if abs(v) == 1 else NAN


def _exp2(v):
    return 0.0 if v == -INF else 2.0 ** v


def _erfinv(v):
    """Bisection on math.erf (independent of scipy): the x with erf(x) = v."""
    if v != v or abs(v) > 1:
        return NAN
    if abs(v) == 1:
        return math.copysign(INF, v)
    lo, hi = -6.0, 6.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if math.erf(mid) < v:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _range_grad(lo, hi):
    def samples(rng):
        return [Sample((rng.uniform(lo, hi, s),)) for s in [(), (5,), (3, 4), (0, 3)]]
    return samples


def _unary(name, ref, grad=unary_grad(), domain=(-2.0, 2.0), tol=None, dtypes=ALL):
    extra = {"tol": tol} if tol else {}
    return _e(name, name, getattr(eager, name), pointwise(ref, float_result), unary_samples(),
              dtypes, grad, domain=domain, **extra)


_TANH_TOL = {np.dtype(np.float32): (2e-5, 1e-5)}

UNARY_MATH = [
    _unary("sin", _safe(math.sin)),
    _unary("cos", _safe(math.cos)),
    _unary("tan", _safe(math.tan), domain=(-1.4, 1.4), tol=_TANH_TOL),
    _unary("asin", _safe(math.asin), _range_grad(-0.9, 0.9), (-1.0, 1.0)),
    _unary("acos", _safe(math.acos), _range_grad(-0.9, 0.9), (-1.0, 1.0)),
    _unary("atan", _safe(math.atan)),
    _unary("sinh", _safe(math.sinh, overflow=lambda v: math.copysign(INF, v)),
           domain=(-80.0, 80.0)),
    _unary("cosh", _safe(math.cosh), domain=(-80.0, 80.0)),
    _unary("asinh", _safe(math.asinh), domain=(-100.0, 100.0)),
    _unary("acosh", _safe(math.acosh), _range_grad(1.2, 3.0), (1.0, 50.0)),
    _unary("atanh", _safe(math.atanh, _atanh_pole), _range_grad(-0.9, 0.9), (-1.0, 1.0)),
    _unary("log2", _safe(math.log2, _pole_log), unary_grad("pos"), (0.0, 50.0)),
    _unary("log10", _safe(math.log10, _pole_log), unary_grad("pos"), (0.0, 50.0)),
    _unary("exp2", _safe(_exp2), domain=(-100.0, 100.0)),
    _unary("erfinv", _erfinv, _range_grad(-0.9, 0.9), (-1.0, 1.0),
           tol={np.dtype(np.float32): (2e-5, 1e-6), F64: (1e-9, 1e-12)}),
]


# --------------------------------------------------------------------------------------
# rounding

def _round_half_even(v, decimals=0):
    if v != v or v in (INF, -INF):
        return v
    if decimals == 0:
        return float(round(v))  # Python's round: half to even
    f = 10.0 ** abs(decimals)  # numpy's (and PyTorch's) scaling rule
    return float(round(v * f)) / f if decimals > 0 else float(round(v / f)) * f


def _rounding_ref(f):
    def g(v):
        if isinstance(v, int):
            return v
        if v != v or v in (INF, -INF):
            return v
        return float(f(v)) if f(v) != 0 else math.copysign(0.0, v)
    return g


def _halves(rng, dtype):
    return [Sample((np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, -0.4, 0.49999997, 1e7 + 0.5],
                             dtype),), desc="halves", special=True)]


def _round_decimals_samples(rng, dtype):
    x = (values(rng, (3, 4), dtype) * 100).astype(dtype)
    return [Sample((x,), {"decimals": d}) for d in (0, 1, 2, -1)] + [
        Sample((specials(dtype),), {"decimals": 1}, special=True)]


def _round_decimals_ref(x, decimals=0):
    return np.array([_round_half_even(float(v), decimals) for v in x.ravel()],
                    x.dtype).reshape(x.shape)


ROUNDING = [
    _e("floor", "floor", eager.floor, pointwise(_rounding_ref(math.floor)), unary_samples(),
       FLOATS, unary_grad()),
    _e("ceil", "ceil", eager.ceil, pointwise(_rounding_ref(math.ceil)), unary_samples(),
       FLOATS, unary_grad()),
    _e("trunc", "trunc", eager.trunc, pointwise(_rounding_ref(math.trunc)), unary_samples(),
       FLOATS, unary_grad()),
    _e("round", "round", eager.round, pointwise(_rounding_ref(round)), unary_samples(),
       FLOATS, unary_grad()),
    _e("rounding_ints", None, lambda a: (a.floor(), eager.ceil(a), a.trunc(), a.round(),
                                         eager.round(a * 7, decimals=-1)),
       lambda a: (a, a, a, a, pointwise(lambda v: int(_round_half_even(float(v * 7), -1)))(a)),
       unary_samples(), (I32, I64)),
    _e("round_halves", "round", lambda a: a.round(), pointwise(_rounding_ref(round)), _halves),
    _e("round_decimals", "round", lambda a, decimals: eager.round(a, decimals=decimals),
       _round_decimals_ref, _round_decimals_samples,
       compiled=[Case("round_decimals", lambda a: (a.round(decimals=2), eager.round(a, decimals=-1),
                                                   (a * 100).round()), UNARY)]),
    _e("frac", None, eager.frac, pointwise(lambda v: v - math.trunc(v) if math.isfinite(v)
                                           else NAN),
       unary_samples(), FLOATS, unary_grad()),
    _e("frac_method", None, lambda a: a.frac(), pointwise(lambda v: v - math.trunc(v)),
       unary_samples(special=False), FLOATS),
]


# --------------------------------------------------------------------------------------
# binary

def _logaddexp(a, b):
    a, b = float(a), float(b)
    if a != a or b != b:
        return NAN
    if a == b and math.isinf(a):
        return a
    m = max(a, b)
    return m + math.log1p(math.exp(-abs(a - b)))


def _ints(a, b):
    return isinstance(a, int) and isinstance(b, int)


def _fmod(a, b):
    if _ints(a, b):
        return int(math.fmod(a, b))
    return _safe(math.fmod)(a, b)


def _remainder(a, b):
    if _ints(a, b):
        return a % b
    a, b = float(a), float(b)
    if b == 0 or a != a or b != b or math.isinf(a):
        return NAN
    return a % b


def _floor_divide(a, b):
    if _ints(a, b):
        return a // b
    a, b = float(a), float(b)
    if b == 0:
        return NAN if a == 0 or a != a else math.copysign(INF, a) * math.copysign(1.0, b)
    if a != a or b != b or math.isinf(a):
        return NAN
    return a // b


def _ieee_div(a, b):
    a, b = float(a), float(b)
    if b == 0:
        return NAN if a == 0 or a != a else math.copysign(INF, a) * math.copysign(1.0, b)
    return a / b


def _trunc(v):
    return v if v != v or math.isinf(v) else float(math.trunc(v))


def _nonzero_pairs(rng, dtype):
    out = [Sample((values(rng, sa, dtype), values(rng, sb, dtype, "nonzero")))
           for sa, sb in [((), ()), ((5,), (5,)), ((3, 4), (4,)), ((2, 1, 4), (3, 1)),
                          ((0, 3), (3,))]]
    if dtype.kind == "f":
        n = len(SPECIALS)
        out.append(Sample((specials(dtype), specials(dtype, (n, 1))), special=True))
    return out


def _nonzero_grad(rng):
    return [s for s in _nonzero_pairs(rng, F64) if not s.special]


def _shift_pairs(rng, dtype):
    return [Sample((np.asarray(values(rng, sa, dtype) * 7, dtype),
                    values(rng, sb, dtype, "exponent")))
            for sa, sb in [((), ()), ((5,), (5,)), ((3, 4), (4,)), ((0, 3), (3,))]]


def _disjoint_nonzero_grad(rng):
    """Pairs away from the jumps of fmod/remainder (a/b near an integer)."""
    out = []
    for s in _nonzero_grad(rng):
        a, b = s.args
        q = np.asarray(a) / np.asarray(b)
        if np.all(np.abs(q - np.round(q)) > 0.01):
            out.append(s)
    return out


BINARY_MATH = [
    _e("atan2", "atan2", eager.atan2, pointwise(_safe(math.atan2), float_result),
       binary_samples(), NUMERIC, binary_grad("any", "nonzero")),
    _e("copysign", "copysign", eager.copysign, pointwise(math.copysign, float_result),
       binary_samples(), NUMERIC, binary_grad("nonzero", "nonzero")),
    _e("hypot", "hypot", eager.hypot,
       pointwise(lambda a, b: INF if math.isinf(float(a)) or math.isinf(float(b))
                 else _safe(math.hypot)(a, b), float_result),
       binary_samples(), NUMERIC, binary_grad("nonzero", "nonzero")),
    _e("logaddexp", "logaddexp", eager.logaddexp, pointwise(_logaddexp, float_result),
       binary_samples(), NUMERIC, binary_grad(), domain=(-50.0, 50.0)),
    _e("fmod", "fmod", eager.fmod, pointwise(_fmod), _nonzero_pairs, NUMERIC,
       _disjoint_nonzero_grad),
    _e("remainder", "remainder", eager.remainder, pointwise(_remainder), _nonzero_pairs,
       NUMERIC, _disjoint_nonzero_grad),
    _e("remainder_operator", "remainder", lambda a, b: a % b, pointwise(_remainder),
       _nonzero_pairs, NUMERIC),
    _e("remainder_scalar", "remainder", lambda a: (a % 3, 7 % a, a % -2.5),
       lambda a: (pointwise(lambda v: _remainder(v, 3))(a),
                  pointwise(lambda v: _remainder(7, v))(a),
                  pointwise(lambda v: _remainder(float(v), -2.5), float_result)(a)),
       lambda rng, dt: [Sample((values(rng, (3, 4), dt, "nonzero"),))] + (
           [Sample((specials(dt),), special=True)] if dt.kind == "f" else []), NUMERIC),
    _e("floor_divide", "floor_divide", eager.floor_divide, pointwise(_floor_divide),
       _nonzero_pairs, NUMERIC),
    _e("floor_divide_operator", "floor_divide", lambda a, b: (a // b, a // 2, 7 // b),
       lambda a, b: (pointwise(_floor_divide)(a, b),
                     pointwise(lambda v: _floor_divide(v, 2))(a),
                     pointwise(lambda v: _floor_divide(7, v))(b)),
       _nonzero_pairs, NUMERIC),
    _e("div_trunc", None, lambda a, b: eager.div(a, b, rounding_mode="trunc"),
       pointwise(lambda a, b: (int(a / b) if _ints(a, b) else _trunc(_ieee_div(a, b)))),
       _nonzero_pairs, NUMERIC,
       compiled=[Case("div_trunc", lambda a, b: (eager.div(a, b, rounding_mode="trunc"),
                                                 eager.div((a * 9).long(), (b * 4).long() + 9,
                                                           rounding_mode="trunc")),
                      shapes([(3, 4), (4,)], [(), ()], [(0, 4), (4,)], lo=0.5, hi=2.0))]),
    _e("div_floor", None, lambda a, b: eager.div(a, b, rounding_mode="floor"),
       pointwise(_floor_divide), _nonzero_pairs, NUMERIC),
    # an integer divisor's zeros raise (PyTorch's ZeroDivisionError): test_math_ops.py
    _e("check_nonzero", "check_nonzero", lambda a, b: a // b, pointwise(_floor_divide),
       _nonzero_pairs, (I32, I64),
       compiled=[Case("check_nonzero", lambda a, b: (
           (a * 40).long() // ((b * 40).long().abs() + 1), (a * 40).long() % (b > 9).long().neg(
           ).add(3)), BINARY)]),
    _e("lerp", None, eager.lerp,
       lambda a, b, w: pointwise(lambda x, y, t: x + t * (y - x) if abs(t) < 0.5
                                 else y - (y - x) * (1 - t))(a, b, w),
       lambda rng, dt: [Sample((values(rng, (3, 4), dt), values(rng, (3, 4), dt),
                                values(rng, (4,), dt))),
                        Sample((values(rng, (5,), dt), values(rng, (5,), dt),
                                np.array([0.0, 1.0, 0.5, 0.25, 2.0], dt)))],
       FLOATS, lambda rng: [Sample(tuple(values(rng, (3, 4), F64) for _ in range(3)))]),
    _e("reciprocal", None, lambda a: a.reciprocal(), pointwise(lambda v: 1.0 / float(v),
                                                               float_result),
       unary_samples("nonzero", special=False), NUMERIC, unary_grad("nonzero")),
]


# --------------------------------------------------------------------------------------
# bitwise

def _int_pair_case(name, fn):
    return Case(name, lambda a, b: fn((a * 40).long(), (b * 40).long()), BINARY)


def _bitwise(name, sym, ref):
    fn = getattr(eager, name)
    return [
        _e(name, name, fn, pointwise(ref), binary_samples(), INTS_BOOL,
           compiled=[_int_pair_case(name, fn),
                     Case(name + "_bool", lambda a, b: fn(a > 0, b > 0), BINARY)]),
        _e(name + "_operator", name, lambda a, b: (sym(a, b), sym(a, 3), sym(5, b)),
           lambda a, b: (pointwise(ref)(a, b), pointwise(lambda v: ref(v, 3), _promoted)(a),
                         pointwise(lambda v: ref(5, v), _promoted)(b)),
           binary_samples(), INTS),
    ]


def _promoted(*dts):
    return dts[0]


def _shift(name, sym, ref):
    fn = getattr(eager, name)
    return [
        _e(name, name, fn, pointwise(ref), _shift_pairs, INTS,
           compiled=[Case(name, lambda a, b: fn((a * 40).long(), (b * 2 + 2).long()), BINARY)]),
        _e(name + "_operator", name, lambda a, b: (sym(a, b), sym(a, 2), sym(5, b)),
           lambda a, b: (pointwise(ref)(a, b), pointwise(lambda v: ref(v, 2))(a),
                         pointwise(lambda v: ref(5, v))(b)),
           _shift_pairs, INTS),
    ]


def _not(v):
    return (not v) if isinstance(v, bool) else ~v


BITWISE = (
    _bitwise("bitwise_and", operator.and_, operator.and_)
    + _bitwise("bitwise_or", operator.or_, operator.or_)
    + _bitwise("bitwise_xor", operator.xor, operator.xor)
    + _shift("bitwise_left_shift", operator.lshift, operator.lshift)
    + _shift("bitwise_right_shift", operator.rshift, operator.rshift)
    + [_e("bitwise_not", "bitwise_not", eager.bitwise_not, pointwise(_not), unary_samples(),
          INTS_BOOL,
          compiled=[Case("bitwise_not", lambda a: (~(a * 40).long(), ~(a > 0),
                                                   (a > 0) ^ True), UNARY)]),
       _e("bitwise_not_operator", "bitwise_not", lambda a: ~a, pointwise(_not),
          unary_samples(), INTS_BOOL)]
)


# --------------------------------------------------------------------------------------
# reductions and the rest

def _row_prod(row):
    out = 1
    for v in row:
        out = out * v
    return out


def prod_ref(a, dim=None, keepdim=False):
    dtype = a.dtype if a.dtype.kind == "f" else I64
    conv = float if a.dtype.kind == "f" else int
    return reduce_rows(a, dim, keepdim, lambda r: _row_prod([conv(v) for v in r]), dtype)


def _prod_zero_grad(rng):
    x = values(rng, (3, 4), F64)
    x[0, 1] = 0.0
    x[1, 0] = x[1, 2] = 0.0
    y = values(rng, (2, 3, 4), F64)
    y[1, 1, 1] = 0.0
    return [Sample((x, 1, False), desc="one zero / two zeros per row"),
            Sample((x, None, False)), Sample((y, (0, 2), True))]


def _prods(x):
    y = eager.where(x > 1.5, 0.0, x)  # zeros in the products
    return eager.prod(x, 1), x.prod(), eager.prod(y, (0, 2), keepdim=True), x.prod(-1) * 2


def _bool_reduce_ref(fn):
    def ref(a, dim=None, keepdim=False):
        return reduce_rows(a, dim, keepdim, lambda r: fn(bool(v) for v in r), BOOL)
    return ref


def _isclose_ref(a, b, rtol=1e-5, atol=1e-8, equal_nan=False):
    def one(x, y):
        x, y = float(x), float(y)
        if x != x or y != y:
            return equal_nan and x != x and y != y
        if x == y:
            return True
        if math.isinf(x) or math.isinf(y):
            return False
        return abs(x - y) <= atol + rtol * abs(y)
    return pointwise(one, lambda *d: BOOL)(a, b)


def _isclose_samples(rng, dtype):
    a = values(rng, (3, 4), dtype)
    b = (a + (rng.uniform(-2e-5, 2e-5, (3, 4)) * np.abs(a)).astype(dtype)).astype(dtype)
    n = len([NAN, INF, -INF, 0.0, 1.0])
    sp = np.array([NAN, INF, -INF, 0.0, 1.0], dtype)
    return [Sample((a, b)), Sample((a, b), {"rtol": 0.0, "atol": 1e-5}),
            Sample((sp, sp.reshape(n, 1)), special=True),
            Sample((sp, sp.reshape(n, 1)), {"equal_nan": True}, special=True)]


def _norm_ref(ord):
    def row(r):
        r = [abs(float(v)) for v in r]
        if ord == INF:
            return max(r) if r else NAN
        if ord == -INF:
            return min(r) if r else NAN
        if ord == 0:
            return float(sum(v != 0 for v in r))
        return math.fsum(v ** ord for v in r) ** (1.0 / ord)

    def ref(a, dim=None, keepdim=False):
        return reduce_rows(a, dim, keepdim, row, a.dtype)
    return ref


_NORM_CASES = [((5,), None, False), ((3, 4), 1, False), ((3, 4), -2, True),
               ((2, 3, 4), (0, 2), False), ((), None, False)]


def _norm_entries():
    out = []
    for ord, name in [(2, "2"), (1, "1"), (INF, "inf"), (-INF, "neg_inf"), (0, "0"),
                      (3, "3"), (0.5, "half")]:
        nonempty = ord in (INF, -INF)
        smp = reduce_samples("nonzero", special=False, cases=_NORM_CASES)
        grad = None if ord == 0 else reduce_grad("nonzero", nonempty)
        if ord in (INF, -INF):
            grad = (lambda rng, s=smp: [x for x in s(rng, F64) if x.args[0].ndim])  # no ties
            grad = None  # amax/amin ties among |x| make the gradient depend on the draw
        out.append(_e(f"vector_norm_{name}", None,
                      lambda a, dim, keepdim, o=ord: eager.linalg.vector_norm(a, o, dim, keepdim),
                      _norm_ref(ord), smp, FLOATS, grad, tol={np.dtype(np.float32): (1e-5, 1e-6)}))
    out.append(_e("norm_method", None, lambda a, dim, keepdim: a.norm(dim=dim, keepdim=keepdim),
                  _norm_ref(2), reduce_samples(special=False, cases=_NORM_CASES), FLOATS,
                  tol={np.dtype(np.float32): (1e-5, 1e-6)}))
    return out


def _nan_to_num_ref(x, **kw):
    info = np.finfo(x.dtype)
    nan, pos, neg = kw.get("nan", 0.0), kw.get("posinf"), kw.get("neginf")
    pos = float(info.max) if pos is None else pos
    neg = float(info.min) if neg is None else neg

    def one(v):
        return nan if v != v else pos if v == INF else neg if v == -INF else v
    return pointwise(one)(x)


def _nan_to_num_samples(rng, dtype):
    x = np.array([NAN, INF, -INF, 0.0, -1.5, 2.0], dtype)
    return [Sample((x,), special=True), Sample((x,), {"nan": 1.0, "posinf": 9.0,
                                                      "neginf": -9.0}, special=True)]


def _addmm_ref(inp, m1, m2, beta=1, alpha=1):
    n, k = m1.shape
    m = m2.shape[1]
    out = np.zeros((n, m), inp.dtype)
    full = np.broadcast_to(inp, (n, m))
    for i in range(n):
        for j in range(m):
            s = math.fsum(float(m1[i, t]) * float(m2[t, j]) for t in range(k))
            out[i, j] = (beta * float(full[i, j]) if beta else 0.0) + alpha * s
    return out


def _addmm_samples(rng, dtype):
    return [Sample((values(rng, (3, 5), dtype), values(rng, (3, 4), dtype),
                    values(rng, (4, 5), dtype))),
            Sample((values(rng, (5,), dtype), values(rng, (3, 4), dtype),
                    values(rng, (4, 5), dtype)), {"beta": 0.5, "alpha": 2.0}),
            Sample((np.full((3, 5), NAN, dtype), values(rng, (3, 4), dtype),
                    values(rng, (4, 5), dtype)), {"beta": 0}, desc="beta 0 ignores NaN")]


def _baddbmm_ref(inp, b1, b2, beta=1, alpha=1):
    full = np.broadcast_to(inp, (b1.shape[0], b1.shape[1], b2.shape[2]))
    return np.stack([_addmm_ref(full[i], b1[i], b2[i], beta, alpha) for i in range(b1.shape[0])])


def _baddbmm_samples(rng, dtype):
    return [Sample((values(rng, (2, 3, 5), dtype), values(rng, (2, 3, 4), dtype),
                    values(rng, (2, 4, 5), dtype))),
            Sample((values(rng, (5,), dtype), values(rng, (2, 3, 4), dtype),
                    values(rng, (2, 4, 5), dtype)), {"beta": 2.0, "alpha": -1.0})]


def _no_nan(samples_fn):
    def samples(rng):
        return [s for s in samples_fn(rng, F64) if "NaN" not in s.desc]
    return samples


def _var_mean_ref(fn):
    def ref(a, dim=None, keepdim=False):
        mean = reduce_rows(a, dim, keepdim, lambda r: math.fsum(r) / len(r), a.dtype)

        def var(r):
            m = math.fsum(r) / len(r)
            return math.fsum((v - m) ** 2 for v in r) / (len(r) - 1) if len(r) > 1 else NAN
        v = reduce_rows(a, dim, keepdim, var, a.dtype)
        return (fn(v), mean)
    return ref


_VM_CASES = [((5,), None, False), ((3, 4), 1, False), ((3, 4), 0, True),
             ((2, 3, 4), (0, 2), False)]


OTHERS = [
    _e("prod", "prod", lambda a, dim, keepdim: eager.prod(a, dim, keepdim=keepdim), prod_ref,
       reduce_samples(), ALL, lambda rng: reduce_grad()(rng) + _prod_zero_grad(rng),
       compiled=[Case("prod", _prods, shapes([(2, 3, 4)], [(1, 1, 1)], [(2, 0, 4)]))]),
    _e("prod_method", "prod", lambda a, dim, keepdim: a.prod(dim, keepdim=keepdim), prod_ref,
       reduce_samples(special=False), NUMERIC),
    _e("any", None, lambda a, dim, keepdim: eager.any(a, dim, keepdim), _bool_reduce_ref(any),
       reduce_samples(), ALL),
    _e("all", None, lambda a, dim, keepdim: a.all(dim, keepdim), _bool_reduce_ref(all),
       reduce_samples(), ALL),
    _e("isclose", None, eager.isclose, _isclose_ref, _isclose_samples, FLOATS),
    _e("var_mean", None, lambda a, dim, keepdim: tuple(eager.var_mean(a, dim, keepdim=keepdim)),
       _var_mean_ref(lambda v: v), reduce_samples(special=False, cases=_VM_CASES), FLOATS,
       lambda rng: reduce_samples(special=False, cases=_VM_CASES)(rng, F64), tol={np.dtype(np.float32): (1e-4, 1e-5)}),
    _e("std_mean", None, lambda a, dim, keepdim: tuple(a.std_mean(dim, keepdim=keepdim)),
       _var_mean_ref(np.sqrt), reduce_samples(special=False, cases=_VM_CASES), FLOATS,
       tol={np.dtype(np.float32): (1e-4, 1e-5)}),
    _e("nan_to_num", None, lambda a, **kw: a.nan_to_num(**kw), _nan_to_num_ref,
       _nan_to_num_samples, FLOATS),
    _e("clamp_min", None, lambda a: (eager.clamp_min(a, 0.5), a.clamp_max(-0.25)),
       lambda a: (pointwise(lambda v: v if v != v else max(v, 0.5))(a),
                  pointwise(lambda v: v if v != v else min(v, -0.25))(a)),
       unary_samples(), FLOATS, unary_grad()),
    _e("addmm", None, lambda i, a, b, **kw: eager.addmm(i, a, b, **kw), _addmm_ref,
       _addmm_samples, FLOATS, _no_nan(_addmm_samples), tol={np.dtype(np.float32): (1e-5, 1e-5)}),
    _e("baddbmm", None, lambda i, a, b, **kw: i.baddbmm(a, b, **kw), _baddbmm_ref,
       _baddbmm_samples, FLOATS, _no_nan(_baddbmm_samples),
       tol={np.dtype(np.float32): (1e-5, 1e-5)}),
    _e("outer", None, eager.outer, lambda a, b: np.array(
           [[x * y for y in b.tolist()] for x in a.tolist()], a.dtype).reshape(len(a), len(b)),
       lambda rng, dt: [Sample((values(rng, (3,), dt), values(rng, (4,), dt))),
                        Sample((values(rng, (0,), dt), values(rng, (2,), dt)))],
       NUMERIC, lambda rng: [Sample((values(rng, (3,), F64), values(rng, (4,), F64)))]),
] + _norm_entries()

MATH_OPINFOS = UNARY_MATH + ROUNDING + BINARY_MATH + BITWISE + OTHERS
