"""Optimizer hyperparameters in a compiled training step behave as they do eagerly.

Numbers that feed the update (lr, betas, eps, weight_decay, momentum, dampening) are read
at every call: changing them between calls neither retraces nor goes stale. Switches
(nesterov, maximize, a weight decay or momentum turned on or off) select another trace.
Writes of a param group inside the compiled step happen at every call, as in eager.
"""
import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F
import eager.optim as optim
import tracer

BACKENDS = ["numba", "interpret"]


def _setup(make_opt, seed=0):
    eager.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    return model, make_opt(model)


def _data(k):
    rng = np.random.default_rng(k)
    return (eager.tensor(rng.standard_normal((5, 6)).astype(np.float32)),
            eager.tensor(rng.integers(0, 3, 5)))


def _assert_same(m_eager, m_comp, o_eager, o_comp, rtol=1e-5, atol=1e-6):
    for (n, a), b in zip(m_eager.named_parameters(), m_comp.parameters()):
        np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=rtol, atol=atol,
                                   err_msg=n)
    for ga, gb in zip(o_eager.param_groups, o_comp.param_groups):
        assert {k: v for k, v in ga.items() if k != "params"} == \
            {k: v for k, v in gb.items() if k != "params"}
    for pa, pb in zip([p for g in o_eager.param_groups for p in g["params"]],
                      [p for g in o_comp.param_groups for p in g["params"]]):
        sa, sb = o_eager.state.get(pa, {}), o_comp.state.get(pb, {})
        assert sorted(sa) == sorted(sb)
        for k in sa:
            np.testing.assert_allclose(np.asarray(sb[k].numpy() if hasattr(sb[k], "numpy")
                                                  else sb[k]),
                                       np.asarray(sa[k].numpy() if hasattr(sa[k], "numpy")
                                                  else sa[k]), rtol=rtol, atol=atol)


def _run_both(make_opt, schedule, backend, steps=6, expect_traces=None):
    """Train eagerly and compiled side by side; `schedule(opt, i)` changes hyperparameters
    between steps (outside the step)."""
    m_e, o_e = _setup(make_opt)
    m_c, o_c = _setup(make_opt)

    def body(model, opt, x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    compiled = tracer.function(lambda x, y: body(m_c, o_c, x, y), backend=backend)
    for i in range(steps):
        schedule(o_e, i)
        schedule(o_c, i)
        x, y = _data(i)
        le = body(m_e, o_e, x, y)
        lc = compiled(x, y)
        np.testing.assert_allclose(lc.item(), le.item(), rtol=1e-5)
        _assert_same(m_e, m_c, o_e, o_c)
    if expect_traces is not None:
        assert compiled.trace_count == expect_traces
    return compiled


def _set(key, values):
    def schedule(opt, i):
        for g in opt.param_groups:
            g[key] = values[i % len(values)]
    return schedule


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("key,values", [
    ("lr", [0.1, 0.05, 0.01]),
    ("betas", [(0.9, 0.999), (0.5, 0.9), (0.8, 0.99)]),
    ("eps", [1e-8, 1e-2, 1e-4]),
    ("weight_decay", [0.01, 0.1, 0.5]),
])
def test_adam_numbers_are_read_at_every_call(backend, key, values):
    make = (lambda m: optim.AdamW(m.parameters(), lr=0.05, weight_decay=0.01))
    _run_both(make, _set(key, values), backend, expect_traces=1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("key,values", [
    ("lr", [0.1, 0.05, 0.3]),
    ("momentum", [0.9, 0.5, 0.99]),
    ("dampening", [0.1, 0.5, 0.3]),
    ("weight_decay", [0.01, 0.2, 0.05]),
])
def test_sgd_numbers_are_read_at_every_call(backend, key, values):
    make = (lambda m: optim.SGD(m.parameters(), lr=0.1, momentum=0.9, dampening=0.1,
                                weight_decay=0.01))
    # (a trace for the first step, which creates the momentum buffers, then one for
    # every later step)
    _run_both(make, _set(key, values), backend, expect_traces=2)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("make,key,values", [
    (lambda m: optim.Adam(m.parameters(), lr=0.05), "weight_decay", [0.0, 0.1, 0.0, 0.2]),
    (lambda m: optim.Adam(m.parameters(), lr=0.05), "maximize", [False, True]),
    # (turned on after the first step: max_exp_avg_sq starts then, eager and compiled alike)
    (lambda m: optim.AdamW(m.parameters(), lr=0.05), "amsgrad", [False, True, True, False]),
    (lambda m: optim.SGD(m.parameters(), lr=0.1, momentum=0.9), "nesterov", [False, True]),
    (lambda m: optim.SGD(m.parameters(), lr=0.1), "momentum", [0.0, 0.9, 0.0]),
    (lambda m: optim.SGD(m.parameters(), lr=0.1, momentum=0.9, dampening=0.5), "dampening",
     [0.5, 0.0, 0.5]),
])
def test_switching_hyperparameters_retrace(backend, make, key, values):
    f = _run_both(make, _set(key, values), backend, steps=len(values) * 2)
    assert f.trace_count >= 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_lr_set_inside_the_compiled_step(backend):
    """nanoGPT's loop: the step sets each group's lr from the schedule, then steps."""
    def make(m):
        return optim.AdamW(m.parameters(), lr=1.0, weight_decay=0.1)

    m_e, o_e = _setup(make)
    m_c, o_c = _setup(make)

    def body(model, opt, x, y, lr):
        for g in opt.param_groups:
            g["lr"] = lr
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    compiled = tracer.function(lambda x, y, lr: body(m_c, o_c, x, y, lr),
                               static_argnames=("lr",), backend=backend)
    for i, lr in enumerate([0.1, 0.02, 0.1, 0.02, 0.05]):
        x, y = _data(i)
        le = body(m_e, o_e, x, y, lr)
        lc = compiled(x, y, lr=lr)
        np.testing.assert_allclose(lc.item(), le.item(), rtol=1e-5)
        assert o_c.param_groups[0]["lr"] == lr
        _assert_same(m_e, m_c, o_e, o_c)
    assert compiled.trace_count == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_lr_decayed_inside_the_compiled_step(backend):
    """The step reads the group's lr and writes it back: each call sees the last one's."""
    def make(m):
        return optim.SGD(m.parameters(), lr=0.4)

    m_e, o_e = _setup(make)
    m_c, o_c = _setup(make)

    def body(model, opt, x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        for g in opt.param_groups:
            g["lr"] = g["lr"] * 0.5
        return loss

    compiled = tracer.function(lambda x, y: body(m_c, o_c, x, y), backend=backend)
    for i in range(4):
        x, y = _data(i)
        le = body(m_e, o_e, x, y)
        lc = compiled(x, y)
        np.testing.assert_allclose(lc.item(), le.item(), rtol=1e-5)
        assert o_c.param_groups[0]["lr"] == o_e.param_groups[0]["lr"] == 0.4 * 0.5 ** (i + 1)
        _assert_same(m_e, m_c, o_e, o_c)


def test_lr_written_after_the_step_is_not_read_by_it():
    """A write that follows the optimizer's read: that call's step used the incoming lr."""
    def make(m):
        return optim.SGD(m.parameters(), lr=0.3)

    m_e, o_e = _setup(make)
    m_c, o_c = _setup(make)

    def body(model, opt, x, y, nxt):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        for g in opt.param_groups:
            g["lr"] = nxt
        return loss

    compiled = tracer.function(lambda x, y, nxt: body(m_c, o_c, x, y, nxt),
                               static_argnums=(2,))
    for i, nxt in enumerate([0.1, 0.2, 0.1, 0.2]):
        x, y = _data(i)
        body(m_e, o_e, x, y, nxt)
        compiled(x, y, nxt)
        _assert_same(m_e, m_c, o_e, o_c)
    assert compiled.trace_count == 2


def test_param_groups_with_their_own_hyperparameters():
    """GPT-style: weight decay on matrices only, two groups, an outside lr schedule."""
    def make(m):
        decay = [p for p in m.parameters() if p.ndim >= 2]
        no_decay = [p for p in m.parameters() if p.ndim < 2]
        return optim.AdamW([{"params": decay, "weight_decay": 0.1},
                            {"params": no_decay, "weight_decay": 0.0}], lr=0.01,
                           betas=(0.9, 0.95))

    def schedule(opt, i):
        for g in opt.param_groups:
            g["lr"] = 0.01 * (1 + np.cos(np.pi * i / 6)) / 2

    _run_both(make, schedule, "numba", steps=6, expect_traces=1)


def test_a_tensor_written_into_a_param_group_is_refused():
    m, o = _setup(lambda m: optim.SGD(m.parameters(), lr=0.1))

    @tracer.function
    def step(x, lr):
        for g in o.param_groups:
            g["lr"] = lr
        return (m(x) * 2).sum()

    with pytest.raises(tracer.TracingError, match=r"param_groups\[0\]\['lr'\].*test_optim_live"):
        step(_data(0)[0], eager.tensor(0.1))


def test_retrace_explains_a_switched_hyperparameter(caplog):
    import logging
    import os

    m, o = _setup(lambda m: optim.SGD(m.parameters(), lr=0.1, momentum=0.9))
    f = tracer.function(lambda x: o.step() or m(x).sum())
    x = _data(0)[0]
    old = os.environ.get("TRACER_LOGS")
    os.environ["TRACER_LOGS"] = "recompiles"
    tracer.logs.refresh()
    try:
        with caplog.at_level(logging.INFO):
            f(x)
            o.param_groups[0]["nesterov"] = True
            f(x)
    finally:
        if old is None:
            del os.environ["TRACER_LOGS"]
        else:
            os.environ["TRACER_LOGS"] = old
        tracer.logs.refresh()
    assert f.trace_count == 2
    assert "optimizer.param_groups[0]['nesterov']: False -> True" in caplog.text


@pytest.mark.parametrize("how,value,others", [
    ("value", False, [True, 0, None, "x"]),
    ("value", 0.5, [0.25, float("nan"), 1, None]),
    ("value", float("nan"), [0.5, 1.0]),
    ("value", (0.9, 0.99), [(0.9, 0.98), (0.9,), [0.9, 0.99]]),
    ("truth", 0.1, [0.0, 0, None]),
    ("truth", 0.0, [0.1, 1, True]),
])
def test_item_guard_source_agrees_with_its_explanation(how, value, others):
    """The generated fast check and the retrace explanation come from one record."""
    from tracer.pystate import ItemGuard

    group = {"k": value}
    guard = ItemGuard(group, "k", how, value, "g['k']", "here")
    ns = {"MISS": "miss"}
    exec("def check():\n" + "\n".join(guard.check_source(0, ns)) + "\n    return None\n", ns)
    assert guard.failure() is None and ns["check"]() is None
    for other in others + ["gone"]:
        if other == "gone":
            del group["k"]
        else:
            group["k"] = other
        passes = guard.failure() is None
        assert (ns["check"]() is None) == passes, other
        if how == "value":
            assert not passes, other
    if how == "truth":
        group["k"] = value * 2
        assert guard.failure() is None and ns["check"]() is None
