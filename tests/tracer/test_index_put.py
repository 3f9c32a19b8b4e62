"""`x[idx] = v`, `x[idx] += v` and `x.index_put_(indices, values, accumulate)` with index
tensors inside traced functions (eager/index_assign.py): compiled against eager over several
calls with changing values (outputs, the written tensors, .grad), against an independent
numpy reference, with repeated and negative indices, several index tensors broadcast
together, slices and ints mixed in, non-contiguous operands, NaN and inf, out-of-range
indices (the call raises eager's error and leaves eager's state), fullgraph and check mode.

Tiny shapes (up to 6x5x4).
"""
import numpy as np
import pytest

import eager
import tracer
from eager import nn

# (each test names its backends itself: MODES, BACKENDS)
pytestmark = pytest.mark.one_backend

BACKENDS = ["numba", "interpret"]
MODES = [dict(backend="numba"), dict(backend="interpret"),
         dict(backend="numba", check=True), dict(backend="numba", fullgraph=True)]
MODE_IDS = ["numba", "interpret", "check", "fullgraph"]


def _rng(k):
    return np.random.default_rng(k)


def _t(a):
    return eager.tensor(np.array(a))


def _same(a, b, what=""):
    a = a.numpy() if hasattr(a, "numpy") else a
    b = b.numpy() if hasattr(b, "numpy") else b
    assert a.dtype == b.dtype and a.shape == b.shape, what
    np.testing.assert_array_equal(a, b, err_msg=what)  # (bit for bit: NaN at the same places)


# ------------------------------------------------ forward: keys, as numpy writes them

def _np_put(x, key, v, accumulate=False):
    out = x.copy()
    view, rest = _ints_first(out, key)
    if accumulate:
        np.add.at(view, rest, v)
    else:
        view[rest] = v
    return out


def _ints_first(x, key):
    """(x with the key's ints applied, the rest of the key): PyTorch selects with an int
    before it indexes with arrays (x[0, :, idx] of a (6, 5, 4) x is (5, 3); numpy, taking
    the int as a 0-d array, gives (3, 5)). Basic indexing: the view writes into x."""
    items = key if isinstance(key, tuple) else (key,)
    ints = [isinstance(k, (int, np.integer)) and not isinstance(k, bool) for k in items]
    if not any(ints) or any(k is Ellipsis for k in items):
        return x, key
    view = x[tuple(k if i else slice(None) for k, i in zip(items, ints))]
    return view, tuple(k for k, i in zip(items, ints) if not i)


KEYS = {
    # name: (x shape, key builder from rng -> (numpy key, eager key), value shape)
    "rows with repeats": ((6, 4), lambda r: _both(r.integers(0, 6, 9)), (9, 4)),
    "negative rows": ((6, 4), lambda r: _both(r.integers(-6, 0, 5)), (5, 1)),
    "pairs": ((6, 4), lambda r: _both(r.integers(0, 6, 7), r.integers(-4, 4, 7)), (7,)),
    "broadcast pairs": ((6, 5), lambda r: _both(r.integers(0, 6, (3, 1)),
                                                r.integers(0, 5, (1, 4))), (3, 4)),
    "slice then index": ((6, 5, 4), lambda r: _both(slice(None), r.integers(0, 5, 6)),
                         (6, 6, 4)),
    "index then slice": ((6, 5, 4), lambda r: _both(r.integers(0, 6, 3), slice(1, 4)),
                         (3, 3, 4)),
    "int and index apart": ((6, 5, 4), lambda r: _both(2, slice(None), r.integers(0, 4, 3)),
                            (5, 3)),  # (PyTorch's layout: the int selects first)
    "index and int apart": ((6, 5, 4), lambda r: _both(r.integers(-6, 6, 3), slice(None), -1),
                            (3, 5)),
    "int, index, int": ((6, 5, 4), lambda r: _both(-2, r.integers(0, 5, 4), 3), (4,)),
    "indices apart": ((6, 5, 4), lambda r: _both(r.integers(0, 6, 2), slice(0, 5, 2),
                                                 r.integers(0, 4, 2)), (2, 3)),
    "ellipsis": ((6, 5, 4), lambda r: _both(Ellipsis, r.integers(0, 4, 5)), (6, 5, 5)),
    "list": ((6, 4), lambda r: ((np.array([0, 3, 3]),), ([0, 3, 3],)), (3, 4)),
    "constant mask": ((6, 4), lambda r: _mask(r), None),
    "transposed index": ((6, 5), lambda r: _both(r.integers(0, 6, (4, 3)).T,
                                                 r.integers(0, 5, (3, 4))), (3, 4)),
}


def _both(*items):
    """(numpy key, eager key): index arrays as int64 tensors (a transposed one stays a
    non-contiguous view)."""
    np_key = tuple(np.asarray(i) if isinstance(i, np.ndarray) else i for i in items)
    eager_key = tuple(eager.from_numpy(i) if isinstance(i, np.ndarray) else i for i in items)
    return np_key, eager_key


def _mask(r):
    m = r.random(6) < 0.5
    m[0] = True
    return (m,), (m,)  # (a numpy mask: a constant of the trace, as a static item)


def _value_shape(shape, np_key):
    view, rest = _ints_first(np.zeros(shape), np_key)
    return view[rest].shape


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("name", sorted(KEYS))
def test_assign_matches_numpy_and_eager_over_calls(name, mode):
    shape, make_key, _ = KEYS[name]

    def body(x, v, k0, *rest):
        key = _rebuild(k0, rest)
        x[key] = v
        return x * 2

    f = tracer.function(body, **mode)
    for call in range(3):
        r = _rng(call)
        np_key, eager_key = make_key(_rng(7))  # (one key: a new one would trace again)
        vshape = _value_shape(shape, np_key)
        x0 = r.standard_normal(shape).astype(np.float32)
        v = r.standard_normal(vshape).astype(np.float32)
        v.flat[0] = np.nan
        if v.size > 1:
            v.flat[1] = -np.inf
        args = _key_args(eager_key)
        xe, xc = eager.tensor(x0), eager.tensor(x0)
        out_e = body(xe, eager.tensor(v), *args)
        out_c = f(xc, eager.tensor(v), *args)
        expected = _np_put(x0, np_key, v)
        _same(xe, expected, "eager vs numpy")
        _same(xc, xe, "compiled vs eager: the argument written in place")
        _same(out_c, out_e, "compiled vs eager: the output")
    assert f.trace_count == 1


def _key_args(eager_key):
    """The key as arguments: index tensors passed as tensors (traced), the rest as a tuple
    of static items inside a marker."""
    items = eager_key if isinstance(eager_key, tuple) else (eager_key,)
    return (_Items(tuple(None if isinstance(i, eager.Tensor) else i for i in items)),) + \
        tuple(i for i in items if isinstance(i, eager.Tensor))


class _Items:
    """The key's non-tensor items (hashable, compared by value: a static argument)."""

    def __init__(self, items):
        self.items = items

    def __hash__(self):
        return hash(repr(self.items))

    def __eq__(self, other):
        return isinstance(other, _Items) and repr(other.items) == repr(self.items)


def _rebuild(k0, tensors):
    it = iter(tensors)
    return tuple(next(it) if i is None else i for i in k0.items)


# ------------------------------------------------ repeated indices: last write, bit for bit

@pytest.mark.parametrize("backend", BACKENDS)
def test_repeated_indices_last_write_wins_as_eager_bit_for_bit(backend):
    def body(x, rows, cols, v):
        x[rows, cols] = v
        return x

    f = tracer.function(body, backend=backend)
    for call in range(4):
        r = _rng(call)
        rows = r.integers(0, 3, (5, 1))   # (few positions: many repeats)
        cols = r.integers(-2, 2, (1, 6))
        v = r.standard_normal((5, 6)).astype(np.float32)
        x0 = r.standard_normal((3, 4)).astype(np.float32)
        xe, xc = eager.tensor(x0), eager.tensor(x0)
        body(xe, eager.from_numpy(rows), eager.from_numpy(cols), eager.tensor(v))
        out = f(xc, eager.from_numpy(rows), eager.from_numpy(cols), eager.tensor(v))
        _same(xe, _np_put(x0, (rows, cols), v))
        _same(xc, xe)
        assert out is xc  # (the argument itself, as eagerly)


@pytest.mark.parametrize("backend", BACKENDS)
def test_plus_equals_with_repeats_is_a_write_not_a_sum(backend):
    """`x[idx] += v` is x[idx] = x[idx] + v: a repeated index gets x + its last value once."""
    def body(scores, labels):
        scores[eager.arange(labels.shape[0]), labels] += 1
        scores[labels, labels] += 10
        return scores

    f = tracer.function(body, backend=backend)
    for call in range(3):
        labels = _rng(call).integers(0, 3, 6)
        s0 = _rng(10 + call).standard_normal((6, 3)).astype(np.float32)
        se, sc = eager.tensor(s0), eager.tensor(s0)
        body(se, eager.from_numpy(labels))
        f(sc, eager.from_numpy(labels))
        ref = s0.copy()
        ref[np.arange(6), labels] = ref[np.arange(6), labels] + 1
        ref[labels, labels] = ref[labels, labels] + 10
        _same(se, ref)
        _same(sc, se)


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_index_put_accumulate_adds_repeats_one_by_one(mode):
    def body(x, rows, cols, v):
        x.index_put_((rows, cols), v, accumulate=True)
        return x.index_put((rows,), eager.ones(1), accumulate=True).sum(1)

    f = tracer.function(body, **mode)
    for call in range(3):
        r = _rng(call)
        rows, cols = r.integers(-4, 4, 9), r.integers(0, 5, 9)
        v = r.standard_normal(9).astype(np.float32)
        x0 = r.standard_normal((4, 5)).astype(np.float32)
        xe, xc = eager.tensor(x0), eager.tensor(x0)
        args = (eager.from_numpy(rows), eager.from_numpy(cols), eager.tensor(v))
        oe, oc = body(xe, *args), f(xc, *args)
        ref = _np_put(x0, (rows, cols), v, accumulate=True)
        _same(xe, ref)
        _same(xc, xe)
        _same(oc, oe)
        _same(oe, _np_put(ref, (rows,), np.ones((9, 5), np.float32), True).sum(1))


# ------------------------------------------------ autograd, as PyTorch's

def _np_grads(x0, key, v, w, accumulate):
    """d sum(index_put(x, key, v) * w) / dx, / dv (v broadcast to the key's shape)."""
    gx = w.copy()
    if not accumulate:
        gx[key] = 0
    gv = w[key]
    return gx, gv


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("accumulate", [False, True])
def test_gradients_to_x_and_v(accumulate, mode):
    x0 = _rng(1).standard_normal((5, 4)).astype(np.float32)
    w0 = _rng(2).standard_normal((5, 4)).astype(np.float32)
    xp, vp = nn.Parameter(eager.tensor(x0)), nn.Parameter(eager.zeros(4))

    def step(rows, v_scale, w):
        h = xp * 1.0
        val = vp * v_scale
        if accumulate:
            h.index_put_((rows,), val, accumulate=True)
        else:
            h[rows] = val
        loss = (h * w).sum()
        loss.backward()
        return loss.detach()

    f = tracer.function(step, **mode)
    for call in range(3):
        rows = _rng(20 + call).integers(-5, 5, 6)  # (repeats)
        scale = eager.tensor(np.float32(call + 1.5))
        vp.data.copy_(eager.tensor(_rng(30 + call).standard_normal(4).astype(np.float32)))
        w = eager.tensor(w0 * (call + 1))
        results = []
        for run in (step, f):
            xp.grad = vp.grad = None
            loss = run(eager.from_numpy(rows), scale, w)
            results.append((loss, xp.grad.numpy().copy(), vp.grad.numpy().copy()))
        (le, gxe, gve), (lc, gxc, gvc) = results
        # (the loss is a sum: compiled kernels may add in another order)
        np.testing.assert_allclose(lc.numpy(), le.numpy(), rtol=1e-6)
        _same(gxc, gxe, "x.grad compiled vs eager")
        np.testing.assert_allclose(gvc, gve, rtol=1e-6, atol=1e-6)
        gx, gv = _np_grads(x0, (rows,), None, w.numpy(), accumulate)
        np.testing.assert_array_equal(gxe, gx)
        # (v broadcast over the rows, every repeat included; then through v * scale)
        np.testing.assert_allclose(gve, gv.sum(0) * (call + 1.5), rtol=1e-5, atol=1e-5)


def test_eager_autograd_through_index_assignment_works_outside_traces():
    # (it raised NotImplementedError before, eagerly too, once autograd recorded it)
    v = eager.tensor([1.0, 2.0], requires_grad=True)
    x = eager.zeros(4)
    x[eager.tensor([3, 3])] = v * 2
    x.sum().backward()
    assert x.tolist() == [0.0, 0.0, 0.0, 4.0]
    assert v.grad.tolist() == [2.0, 2.0]  # (PyTorch: each value its gradient, repeats too)


# ------------------------------------------------ state: captured tensors, views, modules

@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_writes_to_captured_tensors_and_views_are_written_back(mode):
    counts = eager.zeros(5, dtype=eager.int64)
    table = eager.tensor(_rng(0).standard_normal((6, 3)).astype(np.float32))

    def step(ids, x):
        counts.index_put_((ids,), eager.ones(ids.shape[0], dtype=eager.int64), accumulate=True)
        table[1:][ids] = x          # through a view of the captured table
        oh = eager.zeros(ids.shape[0], 5)
        oh[eager.arange(ids.shape[0]), ids] = 1.0   # one-hot
        return oh

    states = []
    f = tracer.function(step, **mode)
    for run in (step, f):
        counts.zero_()
        table.copy_(eager.tensor(_rng(0).standard_normal((6, 3)).astype(np.float32)))
        outs = []
        for call in range(3):
            ids = eager.from_numpy(_rng(call).integers(0, 5, 4))
            outs.append(run(ids, eager.full((4, 3), float(call))).numpy().copy())
        states.append((outs, counts.numpy().copy(), table.numpy().copy()))
    (oe, ce, te), (oc, cc, tc) = states
    for a, b in zip(oe, oc):
        _same(b, a)
    _same(cc, ce)
    _same(tc, te)
    assert ce.sum() == 12


@pytest.mark.parametrize("backend", BACKENDS)
def test_embedding_rows_zeroed_under_no_grad_in_a_training_step(backend):
    eager.manual_seed(0)
    emb = nn.Embedding(7, 3)
    opt = eager.optim.SGD(emb.parameters(), lr=0.1)
    w0 = emb.weight.detach().clone()

    def step(ids, pad):
        loss = emb(ids).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        with eager.no_grad():
            emb.weight[pad] = 0
        return loss.detach()

    results = []
    for run in (step, tracer.function(step, backend=backend)):
        with eager.no_grad():
            emb.weight.copy_(w0)
        losses = [run(eager.tensor([1, 2, 2, 5]), eager.tensor([0, 6])).item()
                  for _ in range(3)]
        results.append((losses, emb.weight.detach().numpy().copy()))
    assert results[0][0] == results[1][0]
    _same(results[1][1], results[0][1])
    assert not results[0][1][[0, 6]].any()


# ------------------------------------------------ run-time errors: eager's, eager's state

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("accumulate", [False, True])
def test_an_index_out_of_range_raises_as_eager_and_leaves_eagers_state(backend, accumulate):
    buf = eager.zeros(3)

    def step(x, rows):
        buf.add_(1.0)                       # a write in place before the failing op
        x.index_put_((rows,), eager.ones(rows.shape[0], 2), accumulate=accumulate)
        return x.sum()

    f = tracer.function(step, backend=backend)
    x0 = np.arange(8, dtype=np.float32).reshape(4, 2)
    xc = eager.tensor(x0)
    assert f(xc, eager.tensor([0, 3])).item() == step(eager.tensor(x0), eager.tensor([0, 3])).item()
    seen = []
    for run in (step, f):
        buf.zero_()
        x = eager.tensor(x0)
        with pytest.raises(IndexError) as info:
            run(x, eager.tensor([1, 4]))  # 4 is out of range for 4 rows
        seen.append((str(info.value), buf.numpy().copy(), x.numpy().copy()))
    assert seen[1][0] == seen[0][0]
    _same(seen[1][1], seen[0][1])
    _same(seen[1][2], seen[0][2])
    for rows in ([-5], [2, -5]):
        with pytest.raises(IndexError):
            f(eager.tensor(x0), eager.tensor(rows))


# ------------------------------------------------ what stays refused, clearly

def test_a_mask_computed_inside_with_many_values_is_refused_clearly():
    def body(x, v):
        x[x > 0] = v
        return x

    f = tracer.function(body, backend="interpret")
    with pytest.raises(tracer.TracingError, match=r"numpy\(\) of a traced tensor"):
        f(eager.tensor([1.0, -1.0, 2.0]), eager.tensor([5.0, 6.0]))


def test_none_in_the_key_is_refused_clearly():
    x = eager.zeros(3, 2)
    with pytest.raises(NotImplementedError, match="None"):
        tracer.function(lambda x, i: x.__setitem__((None, i), 1.0) or x,
                        backend="interpret")(x, eager.tensor([0]))


def test_index_put_rejects_non_tensor_indices():
    with pytest.raises(TypeError, match="indices"):
        eager.zeros(3).index_put_([0, 1], eager.ones(2))


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_int_apart_from_the_index_selects_first_as_in_pytorch(backend):
    # x[0, :, idx] of a (4, 3, 7) x: PyTorch's (3, 3) values go to x[0][:, idx], not to the
    # transposed places numpy's rule (the int as a 0-d index array) would pick; with a
    # square result nothing raises, so a wrong layout would be silent
    idx = np.array([1, 2, 5])
    v = np.arange(9, dtype=np.float32).reshape(3, 3) + 100
    x0 = np.arange(84, dtype=np.float32).reshape(4, 3, 7)
    expected = x0.copy()
    expected[0][:, idx] = v
    expected_acc = x0.copy()
    expected_acc[0][:, idx] += v

    def body(x, i, v):
        x[0, :, i] = v
        return x + 0

    def acc(x, i, v):
        x[0, :, i] += v
        return x + 0

    for fn, want in ((body, expected), (acc, expected_acc)):
        f = tracer.function(fn, backend=backend)
        for _ in range(2):
            xe, xc = eager.tensor(x0), eager.tensor(x0)
            fn(xe, eager.from_numpy(idx), eager.tensor(v))
            f(xc, eager.from_numpy(idx), eager.tensor(v))
            _same(xe, want, "eager vs PyTorch's layout")
            _same(xc, xe, "compiled vs eager")
