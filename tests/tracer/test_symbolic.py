"""Symbolic (None) dimensions of an input_signature: one trace serves every size.

The interpreter backend here; tests/codegen/test_symbolic_kernels.py runs the same kind of
workloads through the numba backend (kernels taking the sizes at run time).
"""
import inspect

import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F
import tracer
from eager.ops import Dim
from tracer import TensorSpec, TracingError

from _symbolic_checks import (check_backward_through_mlp, check_every_size,
                              check_training_step)
from _tracer_helpers import fn

# 0/0 of a mean over an empty axis is a value here, not a warning (as in eager).
pytestmark = pytest.mark.filterwarnings(
    "ignore:(invalid value|divide by zero) encountered:RuntimeWarning")
HERE = "test_symbolic.py"
SIZES = (1, 7, 64, 0)
ROWS = [TensorSpec((None, 4), eager.float32)]


def line(f, marker: str) -> str:
    f = getattr(f, "__wrapped__", f)
    source, start = inspect.getsourcelines(f)
    hits = [start + i for i, text in enumerate(source) if marker in text]
    assert len(hits) == 1, marker
    return f"{HERE}:{hits[0]}"


_MLP = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
_LN = nn.LayerNorm(4)

WORKLOADS = {
    "elementwise": lambda x: eager.tanh(x * 2.0 + 1.0) * x,
    "softmax": lambda x: F.softmax(x, dim=-1),
    "log_softmax": lambda x: F.log_softmax(x, dim=-1),
    "layer_norm": lambda x: _LN(x),
    "mlp": lambda x: _MLP(x),
    "sum_over_symbolic_axis": lambda x: (x * x).sum(0),
    "sum_over_all": lambda x: x.sum(),
    "amax_rows": lambda x: eager.amax(x, 1),
    "argmax_rows": lambda x: eager.argmax(x, 1),
    "mean_rows": lambda x: x.mean(1, keepdim=True) - x,
    "mean_over_symbolic_axis": lambda x: x.mean(0) + x.mean(),
    "mse_loss": lambda x: F.mse_loss(x, x * 0.5),
    "transpose": lambda x: (x.T * 2.0).sum(1),
    "slice_columns": lambda x: x[:, 1:3] + x[:, :2],
    "reshape_keeping_the_dim": lambda x: eager.reshape(x, (x.shape[0], 2, 2)).sum(-1),
    "unsqueeze_broadcast": lambda x: x.unsqueeze(1) * x.unsqueeze(2),
    "gram": lambda x: x @ x.T,
    "contract_the_dim": lambda x: x.T @ x,
}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_one_trace_serves_every_size(name):
    f = check_every_size(WORKLOADS[name], "interpret", SIZES)
    assert f.trace_count == 1


def _printed(x):
    return F.softmax(x * 2.0, dim=-1).sum(0)  # printed-line


def test_printout_names_the_symbol():
    f = fn(_printed, input_signature=ROWS)
    cf = f.get_concrete_function()
    at = line(_printed, "printed-line")
    assert str(cf.graph) == f"""\
def printed(%x: f32[N0,4]) -> f32[4]:
  %0 = mul %x, 2.0:f32                      f32[N0,4]        {at}
  %1 = amax[axes=(1,), keepdim=True] %0     f32[N0,1]        {at}
  %3 = sub %0, %1                           f32[N0,4]        {at}
  %4 = exp %3                               f32[N0,4]        {at}
  %5 = sum[axes=(1,), keepdim=True] %4      f32[N0,1]        {at}
  %6 = div %4, %5                           f32[N0,4]        {at}
  %7 = sum[axes=(0,), keepdim=False] %6     f32[4]           {at}
  return %7"""


def test_each_none_is_its_own_symbol_in_argument_order():
    @fn(input_signature=[TensorSpec((None, 3)), TensorSpec((2, None, None))])
    def f(a, b):
        return a.sum(), b.sum()

    cf = f.get_concrete_function()
    assert [str(v.type) for v in cf.graph.inputs] == ["f32[N0,3]", "f32[2,N1,N2]"]


def test_get_concrete_function_without_arguments_is_the_symbolic_trace():
    f = fn(lambda x: x * 2.0, input_signature=ROWS)
    cf = f.get_concrete_function()
    assert str(cf.graph.inputs[0].type) == "f32[N0,4]"
    for n in SIZES:
        x = eager.randn(n, 4)
        np.testing.assert_array_equal(f(x).numpy(), x.numpy() * 2)
        np.testing.assert_array_equal(cf(x).numpy(), x.numpy() * 2)  # the concrete function too
    assert f.trace_count == 1
    with pytest.raises(TypeError, match="traced for"):
        cf(eager.ones(3, 5))


def test_shape_of_a_traced_tensor_holds_the_symbol():
    seen = []

    @fn(input_signature=ROWS)
    def f(x):
        seen.append(x.shape)
        return x.reshape(x.shape[0], 2, 2)  # a Dim passes through shape arguments

    assert f(eager.ones(5, 4)).shape == (5, 2, 2)
    (shape,) = seen
    assert isinstance(shape[0], Dim) and str(shape[0]) == "N0" and shape[1] == 4
    assert shape[0] == shape[0] and shape[0] != 1 and shape[0] != 5


# --------------------------------------------------------------------------------------
# what needs the size while tracing: TracingError at the user's line

def _reshape_across(x):
    return x.reshape(-1)  # reshape-line


def _int_of_dim(x):
    return x * int(x.shape[0])  # int-line


def _cat_along(x):
    return eager.cat([x, x], 0)  # cat-line


def _broadcast_two_symbols(a, b):
    return a + b  # two-symbols-line


def _slice_along(x):
    return x[1:]  # slice-line


def _zeros_like(x):
    return eager.zeros_like(x) + x  # zeros-line


def _broadcast_fixed(x):
    return x + eager.ones(5, 4)  # fixed-line


@pytest.mark.parametrize("body, marker, words", [
    (_reshape_across, "reshape-line", ["reshape of (N0, 4) into (-1,)", "merges or splits"]),
    (_int_of_dim, "int-line", ["int(N0)"]),
    (_cat_along, "cat-line", ["cat on f32[N0,4], f32[N0,4]", "cat along the symbolic"]),
    (_slice_along, "slice-line", ["the slice 1:None:None along the symbolic dimension N0"]),
    (_zeros_like, "zeros-line", ["zeros of shape (N0, 4)", "eager.zeros(1, *x.shape[1:])"]),
    (_broadcast_fixed, "fixed-line", ["add on f32[N0,4], f32[5,4]", "may differ at run time"]),
])
def test_needing_the_size_raises_tracing_error(body, marker, words):
    f = fn(body, input_signature=ROWS)
    with pytest.raises(TracingError) as info:
        f(eager.ones(5, 4))
    message = str(info.value)
    assert line(body, marker) in message, message
    for w in words:
        assert w in message, message
    assert "drop that None from the input_signature" in message


def test_two_symbols_do_not_broadcast():
    f = fn(_broadcast_two_symbols, input_signature=[TensorSpec((None, 4)), TensorSpec((None, 4))])
    with pytest.raises(TracingError) as info:
        f(eager.ones(3, 4), eager.ones(3, 4))
    message = str(info.value)
    assert line(_broadcast_two_symbols, "two-symbols-line") in message
    assert "N0 vs N1" in message and "name the dimension alike in both TensorSpecs" in message


def test_a_mismatch_of_the_fixed_dims_still_raises_the_signature_error():
    f = fn(lambda x: x * 2.0, input_signature=ROWS)
    f(eager.ones(3, 4))
    with pytest.raises(TypeError, match=r"argument x is f32\[3,5\] but input_signature"):
        f(eager.ones(3, 5))


def test_max_over_an_empty_symbolic_axis_raises_as_eager_does():
    f = fn(lambda x: eager.amax(x, 0), input_signature=ROWS)
    np.testing.assert_array_equal(f(eager.ones(2, 4)).numpy(), np.ones(4))
    with pytest.raises(ValueError, match="size 0"):
        f(eager.ones(0, 4))


def test_mean_over_a_symbolic_axis_counts_at_run_time_and_is_not_folded():
    f = fn(lambda x: x.mean(0), input_signature=ROWS)
    cf = f.get_concrete_function()
    ops = cf.graph.op_counts()
    # the divisor: int64 ones broadcast to (N0,) and summed, never folded to a constant
    assert ops["broadcast_to"] == 1 and ops["sum"] == 2 and ops["div"] == 1
    (bcast,) = [e for e in cf.graph.eqns if e.op == "broadcast_to"]
    assert str(bcast.out.type) == "i64[N0]"
    for n in (1, 7):
        x = eager.randn(n, 4)
        np.testing.assert_allclose(f(x).numpy(), x.numpy().mean(0), rtol=1e-6)
    assert np.isnan(f(eager.ones(0, 4)).numpy()).all()  # 0/0, as eager's mean of nothing
    assert f.trace_count == 1


def test_random_ops_of_a_symbolic_shape_take_the_size_at_run_time():
    f = fn(lambda x: x + eager.randn(x.shape), input_signature=ROWS)
    drop = nn.Dropout(0.5)
    g = fn(lambda x: drop(x), input_signature=ROWS)
    for n in SIZES:
        assert f(eager.zeros(n, 4)).shape == (n, 4)
        assert g(eager.ones(n, 4)).shape == (n, 4)
    assert f.trace_count == 1 and g.trace_count == 1


def test_a_broadcast_constant_keeps_the_size_symbolic():
    f = fn(lambda x: x + eager.ones(1, *x.shape[1:]).expand(x.shape), input_signature=ROWS)
    for n in SIZES:
        x = eager.randn(n, 4)
        np.testing.assert_array_equal(f(x).numpy(), x.numpy() + 1)
    assert f.trace_count == 1


def test_cond_with_symbolic_operands():
    @fn(input_signature=[TensorSpec((None, 4)), TensorSpec((), eager.bool_)])
    def f(x, flag):
        return tracer.cond(flag, lambda v: v * 2.0, lambda v: v.sum(1, keepdim=True) + v, x)

    for n in (3, 0):
        x = eager.randn(n, 4)
        np.testing.assert_allclose(f(x, eager.tensor(True)).numpy(), x.numpy() * 2)
        np.testing.assert_allclose(f(x, eager.tensor(False)).numpy(),
                                   x.numpy().sum(1, keepdims=True) + x.numpy(), rtol=1e-6)
    assert f.trace_count == 1


# --------------------------------------------------------------------------------------
# autograd through a compiled function with a symbolic batch dimension

def test_backward_through_a_symbolic_mlp_forward():
    f = check_backward_through_mlp("interpret", SIZES)
    assert f.trace_count == 1


# --------------------------------------------------------------------------------------
# named dimensions: one symbol across arguments

def test_a_named_dimension_is_one_symbol_across_arguments():
    @fn(input_signature=[TensorSpec(("batch", 4)), TensorSpec(("batch", 2)),
                         TensorSpec((None,))])
    def f(x, y, z):
        return F.mse_loss(x[:, :2], y), z.sum()

    cf = f.get_concrete_function()
    # printed with the user's name (kernels name the size N0: test_symbolic_kernels.py)
    assert [str(v.type) for v in cf.graph.inputs] == ["f32[batch,4]", "f32[batch,2]", "f32[N1]"]
    assert "f32[batch,2]" in str(cf.graph)
    for n in (3, 0, 9):
        x, y = eager.randn(n, 4), eager.randn(n, 2)
        loss, _ = f(x, y, eager.ones(5))
        np.testing.assert_allclose(loss.numpy(), F.mse_loss(x[:, :2], y).numpy(), rtol=1e-6)
    assert f.trace_count == 1
    with pytest.raises(TypeError, match=r"dimension 'batch' is 3 in argument x \(dim 0\) but 4 "
                                        r"in argument y"):
        f(eager.ones(3, 4), eager.ones(4, 2), eager.ones(5))


def test_needing_the_value_of_a_named_dimension_names_it():
    @fn(input_signature=[TensorSpec(("batch", 4))])
    def mean_by_hand(x):
        return x.sum() / int(x.shape[0])

    with pytest.raises(tracer.TracingError, match=r"test_symbolic.py:\d+: int\(batch\) needs the "
                       r"value of the symbolic dimension batch \(named in the input_signature\)"):
        mean_by_hand(eager.ones(3, 4))


@pytest.mark.parametrize("loss_name", ["mse", "cross_entropy"])
def test_a_training_step_traces_once_for_every_batch_size(loss_name):
    import eager.optim as optim

    f = check_training_step("interpret", loss_name, lambda ps: optim.Adam(ps, lr=1e-2),
                            (3, 5, 8, 1, 16))
    # Adam's first-step state is made as existing state: one trace for every call and size
    assert f.trace_count == 1


def _loss_two_symbols(x, y):
    return F.cross_entropy(x, y)  # ce-line


def test_a_loss_over_two_batch_symbols_says_to_name_the_dimension():
    f = fn(_loss_two_symbols, input_signature=[TensorSpec((None, 4)),
                                               TensorSpec((None,), eager.int64)])
    with pytest.raises(TracingError) as info:
        f(eager.randn(2, 4), eager.tensor([0, 1]))
    message = str(info.value)
    assert line(_loss_two_symbols, "ce-line") in message
    assert "name that dimension alike in both TensorSpecs" in message


def test_returning_a_symbolic_size_raises():
    f = fn(lambda x: (x * 2.0, x.shape), input_signature=ROWS)
    with pytest.raises(TracingError, match="returning the symbolic size N0 from <lambda>"):
        f(eager.ones(3, 4))


def test_the_verifier_tells_symbols_apart():
    from tracer.ir import Eqn, Var, VerifyError
    from tracer.symbolic import SymbolicDim

    f = fn(lambda x: x * 2.0, input_signature=ROWS)
    g = f.get_concrete_function().graph
    tracer.verify(g)
    (e,) = g.eqns
    other = Var(e.out.name, eager.ops.TensorType((SymbolicDim("N1"), 4), e.out.type.dtype))
    bad = g.replace(eqns=(Eqn(e.op, e.inputs, e.params, other, e.loc),), outputs=(other,))
    with pytest.raises(VerifyError, match=r"typed f32\[N1,4\] but the registry infers"):
        tracer.verify(bad)


# --------------------------------------------------------------------------------------
# every registry op and composite (the OpInfo table) with a symbolic leading dimension

# Entries some of whose samples need the size while tracing (a reshape merging it, a slice
# or cat along it, a fixed size broadcast against it, ...): those refuse with TracingError.
NEEDS_THE_SIZE = {"broadcast_to", "cat", "expand", "flatten", "gather", "getitem", "linear",
                  "matmul", "matmul_operator", "reshape", "reshape_varargs", "scatter_slice",
                  "setitem", "slice_update",
                  "view"}
# issue 16 item 4 (tests/eager/opinfo_shaping.py): a mask or arange of the size (tril, the
# per-dim indices of gather/scatter/sort), a slice along it (split, flip, roll, narrow), or
# a random draw of that shape (multinomial)
NEEDS_THE_SIZE |= {"chunk", "cummax", "cummin", "cummin_grad", "diag", "diagonal", "einsum",
                   "flip", "gather_dim", "index_select", "multinomial", "narrow", "repeat",
                   "repeat_interleave", "roll", "scatter", "scatter_add_dim",
                   "scatter_reduce_amax", "scatter_reduce_amin", "scatter_reduce_mean",
                   "scatter_reduce_prod", "scatter_reduce_sum", "scatter_value", "sort",
                   "split", "take_along_dim", "tile", "topk", "tril", "triu", "unbind",
                   "unflatten", "unfold"}
# view(dtype) to another itemsize scales the last dimension (a 1-D sample's only one)
NEEDS_THE_SIZE |= {"view_dtype"}
# convolutions merge the batch into one matrix product's columns
NEEDS_THE_SIZE |= {"conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d"}
# math (issue 16 item 5): reshape to (-1, 1) / batched matmul of a symbolic leading size
NEEDS_THE_SIZE |= {"addmm", "baddbmm", "outer"}
# an LSTM layer's time loop packs its rows along the time dim (6T rows of (B, H))
NEEDS_THE_SIZE |= {"lstm_recurrence", "lstm_recurrence_backward"}
# tests/eager/opinfo_apis.py: select checks its index against the size it selects along;
# index_add / index_copy scatter with per-dim indices of it; pixel_shuffle's (9, 1, 2)
# sample splits the symbolic channels
NEEDS_THE_SIZE |= {"select", "index_add", "index_add_", "index_add_alpha", "index_copy",
                   "index_copy_", "pixel_shuffle"}
# eager/index_assign.py: index_put / index_get ask numpy for the selected shape of x
NEEDS_THE_SIZE |= {"index_put", "index_put_accumulate", "index_get"}


# Softmax over a dim that is symbolic and 0 in a call: eager returns the empty result (as
# PyTorch), the compiled call raises amax's clear error (the max shift has no identity and a
# trace cannot branch on the size); a raise, never a different number.
RAISES_WHEN_EMPTY = {"softmax", "softmax_method", "log_softmax"}


@pytest.mark.one_backend  # (tests/codegen/test_symbolic_kernels.py does Numba's share)
def test_every_opinfo_sample_with_a_symbolic_leading_dimension():
    """Each sample's tensors that share the first one's leading size get one named symbolic
    dim; one trace must then equal eager at that size, 1 and 0 - or refuse with
    TracingError, and only for entries that can need the size."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "eager"))
    from opinfo import OPINFOS
    from test_registry_traced import _assert_same, _rng, _traced_call

    traced, refused = 0, set()
    for info in OPINFOS:
        for dtype in info.dtypes:
            for sample in info.samples(_rng(info, dtype), dtype):
                call, tensors = _traced_call(info, sample)
                if not tensors or tensors[0].ndim == 0 or tensors[0].shape[0] < 2:
                    continue
                n0 = tensors[0].shape[0]
                named = [t.ndim >= 1 and t.shape[0] == n0 for t in tensors]
                spec = [TensorSpec(("b",) + tuple(t.shape[1:]) if nm else t.shape, t.dtype)
                        for t, nm in zip(tensors, named)]
                f = fn(call, input_signature=spec)
                try:
                    for k in (n0, 1, 0):
                        args = [t[:k] if nm else t for t, nm in zip(tensors, named)]
                        with np.errstate(all="ignore"):
                            eager.manual_seed(7)
                            try:
                                want = call(*args)
                            except (ValueError, IndexError):
                                continue  # eager refuses this size (e.g. max over 0 rows)
                            eager.manual_seed(7)
                            try:
                                got = f(*args)
                            except ValueError as exc:
                                if k == 0 and info.name in RAISES_WHEN_EMPTY and \
                                        "of size 0" in str(exc):
                                    continue
                                raise
                        _assert_same(got, want, f"{info.name} on {sample!r}, {k} rows")
                except TracingError:
                    refused.add(info.name)
                    continue
                assert f.trace_count == 1, info.name
                traced += 1
    assert refused <= NEEDS_THE_SIZE, sorted(refused - NEEDS_THE_SIZE)
    assert traced > 1000


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_cross_entropy_over_a_symbolic_batch_never_hides_a_bad_label(backend):
    # A label outside [0, C) raises IndexError as in eager (and PyTorch), checked when the
    # program runs: the symbolic batch's one-hot pick would otherwise give a NaN row.
    # (The function and signature of tests/codegen/test_symbolic_kernels.py's cross-entropy
    # test: the kernels compiled once serve both.)
    f = tracer.function(lambda x, y: F.cross_entropy(x * 2.0, y), backend=backend,
                        input_signature=[TensorSpec(("batch", 5)),
                                         TensorSpec(("batch",), eager.int64)])
    x = eager.randn(3, 5)
    with eager.no_grad():
        good = f(x, eager.tensor([0, 1, 4])).item()
        assert good == pytest.approx(
            F.cross_entropy(x * 2.0, eager.tensor([0, 1, 4])).item(), rel=1e-6)
        for bad in ([0, 1, 5], [0, -1, 2]):
            with pytest.raises(IndexError):
                F.cross_entropy(x * 2.0, eager.tensor(bad))
            with pytest.raises(IndexError, match="out of bounds"):
                f(x, eager.tensor(bad))
    assert f.trace_count == 1


def test_signature_checks_still_refuse_after_the_fast_path_has_a_trace():
    # Calls that match an input_signature skip the general path once a trace exists; the
    # ones that do not match must still reach it and fail there.
    f = tracer.function(lambda x, y: x.sum(1) + y, backend="interpret",
                        input_signature=[TensorSpec(("b", 4), eager.float32),
                                         TensorSpec(("b",), eager.float32)])
    for n in (3, 5, 3):
        out = f(eager.ones(n, 4), eager.ones(n))
        np.testing.assert_array_equal(out.numpy(), np.full(n, 5.0, np.float32))
    assert f.trace_count == 1 and f._fast_spec
    with pytest.raises(TypeError, match="dimension 'b' is 3"):
        f(eager.ones(3, 4), eager.ones(2))
    with pytest.raises(TypeError, match="input_signature expects"):
        f(eager.ones(3, 5), eager.ones(3))
    with pytest.raises(TypeError, match="input_signature expects"):
        f(eager.ones(3, 4, dtype=eager.float64), eager.ones(3))
    assert f.trace_count == 1
