"""Fusion, tested structurally: how many kernels of which kind a program becomes.

Like tinygrad's `check_schedule`: GELU is one elementwise kernel, a row softmax one row
kernel, the seed MLP two BLAS calls and two kernels, and views are index arithmetic inside
kernels rather than copies.  One kernel's source is pinned as an exact string, so a change
to the code generator shows up here as a readable diff.
"""
from __future__ import annotations

import ast
import io
import tokenize

import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F
import tracer
from codegen.emit import FASTMATH
from codegen.fuse import CallStep, KernelGroup, ViewStep


def concrete_of(fn, *args):
    f = tracer.function(fn)
    with eager.no_grad():
        return f.get_concrete_function(*args)


def steps_of(concrete) -> list:
    return list(concrete.program.part.steps)


def summary(concrete) -> list:
    """The program's steps as short strings: 'kernel:row', 'blas', 'numpy', 'view'."""
    out = []
    for s in steps_of(concrete):
        if isinstance(s, KernelGroup):
            out.append(f"kernel:{s.kind}")
        elif isinstance(s, CallStep):
            out.append(s.how)
        else:
            assert isinstance(s, ViewStep)
            out.append("view")
    return out


def assert_kernels(concrete, kinds):
    assert [k.kind for k in concrete.kernels] == list(kinds), str(concrete)
    for k in concrete.kernels:
        assert k.fn is not None, f"{k.name} fell back to numpy: {k.error}"


def check_matches_eager(fn, concrete, *args, rtol=1e-5, atol=1e-6):
    with eager.no_grad():
        got = concrete(*args)
        exp = fn(*args)
    got = got if isinstance(got, tuple) else (got,)
    exp = exp if isinstance(exp, tuple) else (exp,)
    for g, e in zip(got, exp):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=rtol, atol=atol)


X = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)


def x_tensor():
    return eager.from_numpy(X.copy())


# --------------------------------------------------------------------------------------
# kernel counts

@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_gelu_is_one_elementwise_kernel(approximate):
    def gelu(x):
        return F.gelu(x, approximate=approximate)
    c = concrete_of(gelu, x_tensor())
    assert_kernels(c, ["elementwise"])
    assert summary(c) == ["kernel:elementwise"]
    assert len(c.kernels[0].group.members) == len(c.graph.eqns)
    check_matches_eager(gelu, c, x_tensor())


def test_row_softmax_is_one_row_kernel():
    def softmax(x):
        return F.softmax(x, -1)
    c = concrete_of(softmax, x_tensor())
    assert_kernels(c, ["row"])
    assert summary(c) == ["kernel:row"]
    check_matches_eager(softmax, c, x_tensor())


def test_log_softmax_is_one_row_kernel():
    def log_softmax(x):
        return F.log_softmax(x, -1)
    c = concrete_of(log_softmax, x_tensor())
    assert_kernels(c, ["row"])
    assert summary(c) == ["kernel:row"]
    check_matches_eager(log_softmax, c, x_tensor())


def test_layer_norm_with_weight_and_bias_is_one_row_kernel():
    def layer_norm(x, w, b):
        return F.layer_norm(x, (8,), w, b)
    args = (x_tensor(), eager.randn(8), eager.randn(8))
    c = concrete_of(layer_norm, *args)
    assert_kernels(c, ["row"])
    assert summary(c) == ["kernel:row"]
    check_matches_eager(layer_norm, c, *args)


def test_leading_axis_sum_is_one_col_kernel():
    def bias_grad(x):
        return x.sum(0)
    c = concrete_of(bias_grad, x_tensor())
    assert_kernels(c, ["col"])
    check_matches_eager(bias_grad, c, x_tensor())


def test_seed_mlp_forward_is_two_matmuls_and_two_kernels():
    eager.manual_seed(0)
    model = nn.Sequential(nn.Linear(100, 128), nn.ReLU(), nn.Linear(128, 10))

    def forward(x):
        return model(x)
    x = eager.randn(32, 100)
    c = concrete_of(forward, x)
    steps = summary(c)
    assert steps.count("blas") == 2, steps
    assert steps.count("numpy") == 0, steps
    assert_kernels(c, ["elementwise", "elementwise"])
    # bias + relu after the first matmul, bias after the second; the weights' transposes
    # are zero-copy numpy views handed to BLAS
    assert [s for s in steps if s != "view"] == ["blas", "kernel:elementwise", "blas",
                                                 "kernel:elementwise"]
    assert [m.op for m in c.kernels[0].group.members] == ["add", "relu"]
    assert [m.op for m in c.kernels[1].group.members] == ["add"]
    for s in steps_of(c):
        if isinstance(s, ViewStep):
            assert s.eqn.op == "permute"
    check_matches_eager(forward, c, x, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------------------
# views are index arithmetic, not copies

@pytest.mark.parametrize("name, fn", [
    ("transpose", lambda x: x.T + 1),
    ("step_slice", lambda x: x[:, ::2] * 2),
    ("reversed", lambda x: x[::-1, 1:] - x[0, 1:]),
    ("broadcast", lambda x: x[:, :1].expand(4, 8) * x),
    ("permute_reshape", lambda x: x.reshape(2, 2, 8).permute(2, 0, 1) * 3),
])
def test_views_fuse_into_the_kernel_without_copies(name, fn):
    c = concrete_of(fn, x_tensor())
    assert summary(c) == ["kernel:elementwise"], str(c)
    (kernel,) = c.kernels
    # the kernel reads the function's input itself (the view's base), at its full shape
    assert "# in0: %x f32[4, 8]" in kernel.source, kernel.source
    assert kernel.group.outputs == [c.graph.outputs[0]]
    check_matches_eager(fn, c, x_tensor())


# --------------------------------------------------------------------------------------
# one kernel, pinned

PINNED_GELU = '''\
def gelu(x):
    return F.gelu(x, approximate="tanh")
'''

EXPECTED_GELU_SOURCE = '''\
"""Kernel gelu_k0_mul_add_tanh: elementwise, iteration shape [4, 8].

One loop over the output's elements: every array is read and written at the same flat offset.

Its outer loop runs lo..hi-1, so its code holds no count of that axis and one compiled
kernel serves every size of it (here 32). The program calls it with 0, n; past
PARALLEL_MIN_SIZE, it runs [0, n) in pieces on its threads at once, each a call of this
kernel for its own lo..hi (codegen.parallel._split_call): the kernel releases the GIL (nogil)
and compiles without Numba's parallel pipeline (prange), which added about 0.2 s to the
first compile of a GELU. Unsigned bounds, or indices cast to unsigned: Numba adds no
negative-index checks.
Generated by tracejit codegen; each line cites the IR equation it implements.
"""
import math  # noqa: F401

import numpy as np
from numba import prange  # noqa: F401
from codegen.build import njit  # numba.njit with a leaner cache load
from codegen.vmath import tanh_f32

_c0 = np.float32(0.044714998453855515)
_c1 = np.float32(0.7978845834732056)
_c2 = np.float32(0.5)
_c3 = np.float32(1.0)


@njit("void(float32[::1], float32[::1], uint64, uint64)", cache=True, fastmath=set(), error_model="numpy", nogil=True)
def kernel(in0, out0, lo, hi):
    # in0: %x f32[4, 8]
    # out0: %8 f32[4, 8]
    for i0 in range(lo, hi):
        x0_in0 = in0[i0]
        v0 = (x0_in0 * x0_in0)  # %0 = mul %x, %x  (pinned_gelu.py:2)
        v1 = (v0 * x0_in0)  # %1 = mul %0, %x  (pinned_gelu.py:2)
        v2 = (v1 * _c0)  # %2 = mul %1, 0.044715:f32  (pinned_gelu.py:2)
        v3 = (x0_in0 + v2)  # %3 = add %x, %2  (pinned_gelu.py:2)
        v4 = (v3 * _c1)  # %4 = mul %3, 0.7978846:f32  (pinned_gelu.py:2)
        v5 = (x0_in0 * _c2)  # %5 = mul %x, 0.5:f32  (pinned_gelu.py:2)
        v6 = tanh_f32(v4)  # %6 = tanh %4  (pinned_gelu.py:2)
        v7 = (v6 + _c3)  # %7 = add %6, 1.0:f32  (pinned_gelu.py:2)
        v8 = (v5 * v7)  # %8 = mul %5, %7  (pinned_gelu.py:2)
        out0[i0] = v8
'''


def test_pinned_gelu_kernel_source():
    # Defined in a file of its own name, so the source locations in the comments are stable.
    namespace = {"F": F}
    exec(compile(PINNED_GELU, "pinned_gelu.py", "exec"), namespace)
    c = concrete_of(namespace["gelu"], eager.zeros(4, 8))
    (kernel,) = c.kernels
    assert kernel.name == "gelu_k0_mul_add_tanh"
    assert kernel.source == EXPECTED_GELU_SOURCE


# --------------------------------------------------------------------------------------
# generated float32 code stays float32, and IEEE-exact where it matters

# Calls inside whose parentheses a bare numeric literal is fine (sizes, typed constants).
_LITERAL_OK_CALLS = {"range", "prange", "np.float32", "np.int32", "np.int64", "np.bool_",
                     "np.empty", "np.zeros"}


def _code_tokens(source: str):
    """Tokens of the source without its docstring, comments and the decorator line."""
    tree = ast.parse(source)
    skip_lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None), ast.Constant):
            skip_lines.update(range(node.lineno, node.end_lineno + 1))
        if isinstance(node, ast.FunctionDef):
            for d in node.decorator_list:
                skip_lines.update(range(d.lineno, d.end_lineno + 1))
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.start[0] in skip_lines or tok.type in (tokenize.COMMENT, tokenize.NL,
                                                      tokenize.NEWLINE):
            continue
        yield tok


def bare_literals(source: str) -> list:
    """Numeric literals and np.inf/np.nan outside index brackets and allowed calls."""
    stack = []          # per open bracket: "[" or the dotted name of the called function
    name = []           # the dotted name being read
    bad = []
    for tok in _code_tokens(source):
        if tok.type == tokenize.NAME:
            name = name + [tok.string] if name and name[-1] == "." else [tok.string]
        elif tok.type == tokenize.OP and tok.string == ".":
            name = name + ["."]
        if tok.type == tokenize.OP and tok.string in "([":
            stack.append("[" if tok.string == "[" else "".join(name))
        elif tok.type == tokenize.OP and tok.string in ")]":
            stack.pop()
        allowed = any(s == "[" or s in _LITERAL_OK_CALLS for s in stack)
        is_special = tok.type == tokenize.NAME and "".join(name) in ("np.inf", "np.nan")
        if (tok.type == tokenize.NUMBER or is_special) and not allowed:
            bad.append(f"line {tok.start[0]}: {tok.line.strip()}")
        if tok.type != tokenize.NAME and not (tok.type == tokenize.OP and tok.string == "."):
            name = []
    return bad


def test_the_literal_checker_catches_bare_literals():
    ok = "def kernel(a, out):\n    for i in range(4):\n        out[i * 2 + 1] = a[i] * _c0\n"
    assert bare_literals(ok) == []
    for bad in ["out[i] = a[i] * 0.5", "out[i] = a[i] + 1", "out[i] = -np.inf",
                "out[i] = max(a[i], 2.0)"]:
        src = f"def kernel(a, out):\n    for i in range(4):\n        {bad}\n"
        assert bare_literals(src), bad


def _float32_programs():
    rng = np.random.default_rng(1)
    x = eager.from_numpy(rng.standard_normal((4, 8)).astype(np.float32))
    w = eager.from_numpy(rng.standard_normal(8).astype(np.float32))
    y = eager.from_numpy(rng.integers(0, 8, size=4))
    fns = [
        lambda x, w, y: F.gelu(x),
        lambda x, w, y: F.gelu(x, approximate="tanh") * 3 + 2,
        lambda x, w, y: (F.softmax(x, -1), F.log_softmax(x, -1), x.sum(0), eager.amax(x, 0)),
        lambda x, w, y: F.layer_norm(x, (8,), w, w),
        lambda x, w, y: F.cross_entropy(x, y),
        lambda x, w, y: (x.clamp(-0.5, 0.5), x ** 2, x ** 0.5, 1 / (x + 1), x.sigmoid(),
                         eager.where(x > 0, x, 0.1 * x), x.exp().log(), x.abs().sqrt()),
        lambda x, w, y: (eager.logsumexp(x, -1), x.mean(-1), F.mse_loss(x, x * 0.5)),
    ]
    return [concrete_of(fn, x, w, y) for fn in fns]


def test_float32_kernels_have_only_typed_constants_and_safe_fastmath():
    sources = [k.source for c in _float32_programs() for k in c.kernels]
    assert len(sources) >= 7
    # (and none of the others: each changed a NaN or inf result, see test_fastmath_semantics)
    forbidden = {"nnan", "ninf", "afn", "fast", "reassoc", "arcp", "nsz", "contract"}
    assert not forbidden & FASTMATH
    for src in sources:
        assert bare_literals(src) == [], src
        code = "\n".join(t.line for t in _code_tokens(src))
        assert "float64" not in code, src
        constants = [line for line in src.splitlines() if line.startswith("_c")]
        for line in constants:
            assert " = np.float32(" in line or " = np.int64(" in line or \
                " = np.bool_(" in line, line
        # fastmath is an explicit set of flags, never True (which implies nnan/ninf/afn)
        (fn,) = [n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef)]
        (deco,) = fn.decorator_list
        kwargs = {kw.arg: kw.value for kw in deco.keywords}
        flags = ast.literal_eval(kwargs["fastmath"])
        assert isinstance(flags, set), src
        assert not forbidden & flags, flags


# --------------------------------------------------------------------------------------
# adjacent small elementwise kernels: one "multi" kernel

def test_adjacent_elementwise_kernels_of_other_shapes_share_one_kernel():
    rng = np.random.default_rng(1)
    x = eager.from_numpy(rng.standard_normal((3, 4)).astype(np.float32))
    y = eager.from_numpy(rng.standard_normal((4, 3)).astype(np.float32))
    s = eager.from_numpy(np.array(0.5, np.float32))

    def fn(x, y, s):
        scale = s * 2 + 1                  # 0-d: a local variable of the kernel
        u = x * scale                      # (3, 4)
        v = u.transpose(0, 1) * y - scale  # (4, 3), reads u back through a transpose
        return u, v

    concrete = concrete_of(fn, x, y, s)
    assert_kernels(concrete, ["multi"])
    (group,) = [s for s in steps_of(concrete) if isinstance(s, KernelGroup)]
    assert [list(p.shape) for p in group.parts] == [[], [3, 4], [4, 3]]
    # `scale` is carried as a local, never stored: the kernel writes only u and v.
    assert len(group.carried) == 1 and group.outputs == list(concrete.graph.outputs)
    assert "3 loop nests in one kernel" in str(concrete)
    check_matches_eager(fn, concrete, x, y, s)


def test_adjacent_row_and_col_kernels_share_one_kernel():
    # (a loss's gradient and a gradient summed from it over the batch axis alone; summed
    # over all its rows, the sum is the row kernel's own: test_row_col_sums.py)
    x = eager.from_numpy(
        np.random.default_rng(2).standard_normal((3, 8, 5)).astype(np.float32))

    def fn(x):
        g = x - x.amax(dim=-1, keepdim=True)   # row
        return g, g.sum(dim=0)                 # col, reading g back from memory

    concrete = concrete_of(fn, x)
    assert_kernels(concrete, ["multi"])
    (group,) = [s for s in steps_of(concrete) if isinstance(s, KernelGroup)]
    assert [p.kind for p in group.parts] == ["row", "col"]
    source = concrete.kernels[0].source
    assert "acc0_0 = " in source  # each part's locals carry its number
    check_matches_eager(fn, concrete, x)


def test_a_scalar_a_reduction_part_reads_is_stored_not_carried():
    rng = np.random.default_rng(3)
    x = eager.from_numpy(rng.standard_normal((8, 5)).astype(np.float32))
    s = eager.from_numpy(np.array(0.5, np.float32))

    def fn(x, s):
        scale = (s * 2 + 1).exp()              # 0-d, read by the row part and the last
        y = F.softmax(x * scale, dim=-1)
        return y, y.sum(dim=0) * scale

    concrete = concrete_of(fn, x, s)
    assert_kernels(concrete, ["multi"])
    (group,) = [s for s in steps_of(concrete) if isinstance(s, KernelGroup)]
    # (y.sum(dim=0) is summed in the row part's last pass: test_row_col_sums.py)
    assert [(p.kind, list(p.shape)) for p in group.parts] == \
        [("elementwise", []), ("row", [8, 5]), ("elementwise", [5])]
    assert not group.carried
    check_matches_eager(fn, concrete, x, s)
