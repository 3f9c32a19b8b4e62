"""Every registry op and composite, traced and interpreted, equals eager.

Generated from the OpInfo table (`tests/eager/opinfo.py`): each entry's samples run once
eagerly and once through a @function (backend "interpret"); results must agree in dtype,
shape and value.  A registry op without an entry, or whose entries never put it into a
traced graph, fails `test_every_registry_op_is_traced`.
"""
import os
import sys
import zlib

import numpy as np
import pytest

import eager
import tracer
from tracer.passes import optimize

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "eager"))
from opinfo import OPINFOS, to_call_arg  # noqa: E402

# Composites the tracer must handle (DESIGN.md); each needs an entry in the table.
COMPOSITES = ("gelu", "gelu_tanh", "softmax", "log_softmax", "layer_norm", "cross_entropy",
              "mse_loss", "linear", "dropout_eval", "logsumexp")

# (entry name, predicate on the sample) for samples where eager and the trace disagree
# because of a known bug outside the tracer; each has an xfail test below.
KNOWN_BUGS: dict = {}

CASES = [(info, dt) for info in OPINFOS for dt in info.dtypes]


def _arrays(sample):
    return [a for a in sample.args if isinstance(a, np.ndarray)]


def _rng(info, dtype):
    return np.random.default_rng(zlib.crc32(f"traced/{info.name}/{dtype}".encode()))


def _traced_call(info, sample):
    """(eager function of the sample's tensors, those tensors): non-tensor arguments are
    baked in through the closure, so the traced function takes tensors only."""
    args = [to_call_arg(a) for a in sample.args]
    kwargs = {k: to_call_arg(v) for k, v in sample.kwargs.items()}
    positions = [i for i, a in enumerate(args) if isinstance(a, eager.Tensor)]
    keys = [k for k, v in kwargs.items() if isinstance(v, eager.Tensor)]

    def call(*tensors):
        a, kw = list(args), dict(kwargs)
        for i, t in zip(positions, tensors):
            a[i] = t
        for k, t in zip(keys, tensors[len(positions):]):
            kw[k] = t
        return info.call(*a, **kw)

    call.__name__ = info.name
    return call, [args[i] for i in positions] + [kwargs[k] for k in keys]


def _as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def _assert_same(got, want, where):
    got, want = _as_tuple(got), _as_tuple(want)
    assert len(got) == len(want), where
    for g, w in zip(got, want):
        assert isinstance(g, eager.Tensor), f"{where}: got {type(g).__name__}"
        assert (g.dtype, g.shape) == (w.dtype, w.shape), \
            f"{where}: traced {g.dtype}{list(g.shape)}, eager {w.dtype}{list(w.shape)}"
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6, atol=1e-7,
                                       equal_nan=True, err_msg=where)
        else:
            np.testing.assert_array_equal(g.numpy(), w.numpy(), err_msg=where)


def run_traced(info, dtype):
    """Check every sample; return the registry ops seen in the traced graphs."""
    seen = set()
    for sample in info.samples(_rng(info, dtype), dtype):
        known = KNOWN_BUGS.get(info.name)
        if known is not None and known(sample):
            continue
        call, tensors = _traced_call(info, sample)
        compiled = tracer.function(call, backend="interpret")
        where = f"{info.name} on {sample!r}"
        with np.errstate(all="ignore"):
            eager.manual_seed(7)  # random ops draw the same numbers eagerly and compiled
            want = call(*tensors)
            eager.manual_seed(7)
            got = compiled(*tensors)
        _assert_same(got, want, where)
        cf = compiled.get_concrete_function(*tensors)
        assert compiled.trace_count == 1, where
        tracer.verify(cf.raw_graph)
        tracer.verify(cf.graph)
        tracer.verify(optimize(cf.raw_graph))
        seen.update(cf.raw_graph.op_counts())
    return seen


# (id of an entry, dtype) -> the registry ops its traces recorded, once its samples passed
# in this process: the table test and the coverage test below check each entry once
_CHECKED: dict = {}


def checked_ops(info, dtype):
    """`run_traced(info, dtype)`, run once per process (a failure is not remembered)."""
    key = (id(info), dtype)
    if key not in _CHECKED:
        _CHECKED[key] = run_traced(info, dtype)
    return _CHECKED[key]


@pytest.mark.parametrize("info,dtype", CASES, ids=[f"{i.name}-{d}" for i, d in CASES])
def test_traced_matches_eager(info, dtype):
    checked_ops(info, dtype)


def test_every_registry_op_is_traced():
    covered = {info.op for info in OPINFOS}
    # (cond and while_loop: tests/tracer/test_control.py)
    missing = sorted(n for n, op in eager.ops.OPS.items() if not op.control and n not in covered)
    assert not missing, f"registry ops without an entry in tests/eager/opinfo.py: {missing}"
    names = {info.name for info in OPINFOS}
    assert not set(COMPOSITES) - names, f"composites without an entry: " \
        f"{sorted(set(COMPOSITES) - names)}"
    # Each op shows up in a traced graph of one of its entries (a front end that skips the
    # op, e.g. reshape to the same shape, must not be all the table tests).
    seen_by_op = {}
    for info in OPINFOS:
        if info.op is not None:
            seen_by_op.setdefault(info.op, set()).update(checked_ops(info, info.dtypes[0]))
    never = sorted(op for op, seen in seen_by_op.items() if op not in seen)
    assert not never, f"ops never recorded by a trace of their entries: {never}"


def test_argmax_over_a_nonempty_dim_of_a_tensor_with_an_empty_dim():
    x = eager.zeros(2, 0, 3)
    want = eager.argmax(x, 0)
    assert want.shape == (0, 3)
    got = tracer.function(lambda t: eager.argmax(t, 0), backend="interpret")(x)
    assert got.shape == (0, 3)
