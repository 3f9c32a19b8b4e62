"""Every optimizer, stepped inside a compiled training step while a scheduler changes its
learning rate (OneCycleLR also its momentum/beta1) between calls: the same parameters and
optimizer state as eager, and one trace (no retrace on a hyperparameter change)."""
import numpy as np
import pytest

import eager
import eager.nn.functional as F
import tracer
from eager import nn, optim
from eager.nn.utils import clip_grad_norm_
from eager.optim import lr_scheduler

OPTIMIZERS = {
    "SGD": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01),
    "Adam": lambda ps: optim.Adam(ps, lr=0.05),
    "AdamW": lambda ps: optim.AdamW(ps, lr=0.05, weight_decay=0.1),
    "Adamax": lambda ps: optim.Adamax(ps, lr=0.05, weight_decay=0.01),
    "NAdam": lambda ps: optim.NAdam(ps, lr=0.05),
    "RAdam": lambda ps: optim.RAdam(ps, lr=0.05, betas=(0.9, 0.9)),  # both branches in 6 steps
    "RMSprop": lambda ps: optim.RMSprop(ps, lr=0.01, momentum=0.5, centered=True),
    "Adagrad": lambda ps: optim.Adagrad(ps, lr=0.1, lr_decay=0.05),
    "Adadelta": lambda ps: optim.Adadelta(ps, lr=1.0, weight_decay=0.01),
}
# (SGD with a dampening would trace its first step apart: see eager.optim.sgd)
TRACES = {}

SCHEDULERS = {
    "StepLR": lambda o: lr_scheduler.StepLR(o, step_size=2, gamma=0.5),
    "CosineAnnealingLR": lambda o: lr_scheduler.CosineAnnealingLR(o, T_max=5, eta_min=1e-3),
    "OneCycleLR": lambda o: lr_scheduler.OneCycleLR(o, max_lr=0.1, total_steps=8),
    "Warmup+Exponential": lambda o: lr_scheduler.SequentialLR(
        o, [lr_scheduler.LinearLR(o, start_factor=0.2, total_iters=2),
            lr_scheduler.ExponentialLR(o, gamma=0.8)], milestones=[3]),
}


def _setup(make_opt, make_sched, seed=0):
    eager.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    opt = make_opt(model.parameters())
    return model, opt, make_sched(opt)


def _data(k):
    rng = np.random.default_rng(k)
    return (eager.tensor(rng.standard_normal((5, 6)).astype(np.float32)),
            eager.tensor(rng.integers(0, 3, 5)))


def _values(x):
    return np.asarray(x.detach().numpy() if hasattr(x, "numpy") else x, dtype=np.float64)


def _assert_same(m_e, m_c, o_e, o_c):
    for (name, a), b in zip(m_e.named_parameters(), m_c.parameters()):
        np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=2e-5,
                                   atol=2e-6, err_msg=name)
    for ga, gb in zip(o_e.param_groups, o_c.param_groups):
        assert {k: v for k, v in ga.items() if k != "params"} == \
            {k: v for k, v in gb.items() if k != "params"}
    sd_e, sd_c = o_e.state_dict()["state"], o_c.state_dict()["state"]
    assert sorted(sd_e) == sorted(sd_c)
    for i in sd_e:
        assert sorted(sd_e[i]) == sorted(sd_c[i])
        for k in sd_e[i]:
            np.testing.assert_allclose(_values(sd_c[i][k]), _values(sd_e[i][k]), rtol=2e-5,
                                       atol=2e-6, err_msg=f"state[{i}][{k!r}]")


def _train(opt_name, sched_name, backend, steps=6, clip=None, extra=None):
    make_opt, make_sched = OPTIMIZERS[opt_name], SCHEDULERS[sched_name]
    m_e, o_e, s_e = _setup(make_opt, make_sched)
    m_c, o_c, s_c = _setup(make_opt, make_sched)
    x_e, x_c = (extra(o_e), extra(o_c)) if extra is not None else (None, None)

    def body(model, opt, x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        norm = clip_grad_norm_(model.parameters(), clip) if clip is not None else loss
        opt.step()
        return loss, norm

    compiled = tracer.function(lambda x, y: body(m_c, o_c, x, y), backend=backend)
    lrs = set()
    for i in range(steps):
        x, y = _data(i)
        le, ne = body(m_e, o_e, x, y)
        lc, nc = compiled(x, y)
        np.testing.assert_allclose(lc.item(), le.item(), rtol=1e-5)
        np.testing.assert_allclose(nc.item(), ne.item(), rtol=1e-5)
        s_e.step()
        s_c.step()
        if extra is not None:
            x_e.step()
            x_c.step()
        assert s_c.get_last_lr() == s_e.get_last_lr()
        lrs.add(s_e.get_last_lr()[0])
        _assert_same(m_e, m_c, o_e, o_c)
    assert len(lrs) > 2  # the schedule did change the rate
    return compiled


@pytest.mark.parametrize("opt_name", list(OPTIMIZERS))
def test_every_optimizer_under_a_schedule_traces_once(opt_name):
    compiled = _train(opt_name, "CosineAnnealingLR", "interpret")
    assert compiled.trace_count == TRACES.get(opt_name, 1)


@pytest.mark.parametrize("opt_name", ["Adam", "NAdam", "RAdam", "RMSprop", "Adagrad",
                                      "Adadelta", "Adamax"])
def test_every_optimizer_compiled_with_numba(opt_name):
    compiled = _train(opt_name, "StepLR", "numba", steps=5)
    assert compiled.trace_count == 1


@pytest.mark.parametrize("backend", ["interpret", "numba"])
@pytest.mark.parametrize("opt_name", ["SGD", "AdamW"])
def test_one_cycle_changes_lr_and_momentum_without_retrace(opt_name, backend):
    compiled = _train(opt_name, "OneCycleLR", backend)
    assert compiled.trace_count == TRACES.get(opt_name, 1)


@pytest.mark.parametrize("sched_name", ["StepLR", "Warmup+Exponential"])
def test_clip_grad_norm_inside_the_compiled_step(sched_name):
    """The total norm is a tensor (no .item()), the clipped grads reach the update; clipping
    at 0.5 is active on this model, so a wrong coefficient shows in the parameters."""
    compiled = _train("Adam", sched_name, "interpret", clip=0.5)
    assert compiled.trace_count == 1


def test_clip_grad_norm_compiled_with_numba():
    compiled = _train("SGD", "StepLR", "numba", clip=0.5)
    assert compiled.trace_count == 1


def test_reduce_lr_on_plateau_with_the_returned_loss():
    """ReduceLROnPlateau.step takes the 0-d loss tensor the compiled step returned."""
    m_e, o_e, _ = _setup(OPTIMIZERS["RMSprop"], lambda o: None)
    m_c, o_c, _ = _setup(OPTIMIZERS["RMSprop"], lambda o: None)
    p_e = lr_scheduler.ReduceLROnPlateau(o_e, factor=0.5, patience=0, threshold=10.0)
    p_c = lr_scheduler.ReduceLROnPlateau(o_c, factor=0.5, patience=0, threshold=10.0)

    def body(model, opt, x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    compiled = tracer.function(lambda x, y: body(m_c, o_c, x, y), backend="interpret")
    for i in range(4):
        x, y = _data(i)
        p_e.step(body(m_e, o_e, x, y))
        p_c.step(compiled(x, y))
        _assert_same(m_e, m_c, o_e, o_c)
    assert o_c.param_groups[0]["lr"] < 0.01 / 4  # (a relative threshold of 10: never better)
    assert compiled.trace_count == 1


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_clip_grad_norm_error_if_nonfinite_when_the_compiled_step_runs(backend):
    """error_if_nonfinite needs the norm's value: the compiled step checks it when it runs
    (no retrace, no .item()) and raises RuntimeError before any parameter changes."""
    model, opt, _ = _setup(OPTIMIZERS["SGD"], lambda o: None)

    def body(x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        norm = clip_grad_norm_(model.parameters(), 0.5, error_if_nonfinite=True)
        opt.step()
        return norm

    compiled = tracer.function(body, backend=backend)
    x, y = _data(0)
    assert np.isfinite(compiled(x, y).item())
    before = [p.detach().numpy().copy() for p in model.parameters()]
    bad = eager.tensor(np.where(np.arange(30).reshape(5, 6) == 7, np.nan, 1.0)
                       .astype(np.float32))
    with pytest.raises(RuntimeError, match="non-finite"):
        compiled(bad, y)
    for p, b in zip(model.parameters(), before):
        np.testing.assert_array_equal(p.detach().numpy(), b)
    compiled(x, y)
    assert compiled.trace_count == 1


@pytest.mark.parametrize("make_sched", [
    lambda o: lr_scheduler.ExponentialLR(o, gamma=0.5),
    lambda o: lr_scheduler.SequentialLR(o, [lr_scheduler.LinearLR(o),
                                            lr_scheduler.StepLR(o, 2)], milestones=[2]),
    lambda o: lr_scheduler.ReduceLROnPlateau(o),
], ids=["ExponentialLR", "SequentialLR", "ReduceLROnPlateau"])
def test_scheduler_step_inside_the_compiled_step_is_refused(make_sched):
    """Traced once, a scheduler's step would repeat its first rate at every call: refused,
    naming the user's line, instead of a silently frozen schedule."""
    model, opt, sched = _setup(OPTIMIZERS["Adam"], make_sched)

    def body(x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if isinstance(sched, lr_scheduler.ReduceLROnPlateau):
            sched.step(loss)
        else:
            sched.step()
        return loss

    compiled = tracer.function(body, backend="interpret")
    with pytest.raises(RuntimeError, match=r"step\(\) inside a compiled function "
                                           r"\(at test_optim_sched.py:\d+\)"):
        compiled(*_data(0))


@pytest.mark.parametrize("opt_name,key,values", [
    ("RMSprop", "alpha", [0.99, 0.9, 0.5]),
    ("RMSprop", "momentum", [0.5, 0.9, 0.1]),
    ("Adagrad", "lr_decay", [0.05, 0.5, 0.0]),
    ("Adadelta", "rho", [0.9, 0.5, 0.99]),
    ("NAdam", "momentum_decay", [4e-3, 0.1, 0.5]),
    ("NAdam", "betas", [(0.9, 0.999), (0.5, 0.9)]),
    ("RAdam", "eps", [1e-8, 1e-2]),
    ("Adamax", "betas", [(0.9, 0.999), (0.6, 0.8)]),
])
def test_other_hyperparameters_change_without_retrace(opt_name, key, values):
    """Any number an optimizer feeds to its update is read at every call, as lr is."""
    def schedule(o):
        return _Setter(o, key, values)

    compiled = _train(opt_name, "StepLR", "interpret", extra=schedule)
    assert compiled.trace_count == 1


class _Setter:
    """Sets group[key] to the next of `values` at each step (a hand-written schedule)."""

    def __init__(self, opt, key, values):
        self.opt, self.key, self.values, self.i = opt, key, values, 0

    def step(self):
        self.i += 1
        for g in self.opt.param_groups:
            g[self.key] = self.values[self.i % len(self.values)]
