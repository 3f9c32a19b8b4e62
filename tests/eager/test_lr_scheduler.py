"""eager.optim.lr_scheduler against the closed forms of PyTorch's documentation, for 20 steps,
on two parameter groups with different base rates."""
import math
from bisect import bisect_right

import numpy as np
import pytest

import eager
from eager import optim
from eager.optim import lr_scheduler

STEPS = 20
BASE = (0.1, 0.02)


def _opt(cls=optim.SGD, **kw):
    a, b = eager.zeros(2, requires_grad=True), eager.zeros(3, requires_grad=True)
    return cls([{"params": [a], "lr": BASE[0]}, {"params": [b], "lr": BASE[1]}], **kw)


def _run(opt, sched, steps=STEPS):
    """The rates in effect for each of `steps` optimizer steps (stepping the scheduler after
    each, as a training loop does)."""
    seen = []
    for _ in range(steps):
        seen.append([g["lr"] for g in opt.param_groups])
        assert sched.get_last_lr() == seen[-1]
        opt.step()
        sched.step()
    return np.array(seen)


def _expect(fn):
    return np.array([[fn(base, t) for base in BASE] for t in range(STEPS)])


def _cos(base, t, T, eta):
    return eta + (base - eta) * (1 + math.cos(math.pi * t / T)) / 2


CLOSED_FORMS = {
    "StepLR": (lambda o: lr_scheduler.StepLR(o, step_size=3, gamma=0.5),
               lambda base, t: base * 0.5 ** (t // 3)),
    "MultiStepLR": (lambda o: lr_scheduler.MultiStepLR(o, milestones=[2, 5, 5, 11], gamma=0.3),
                    lambda base, t: base * 0.3 ** bisect_right([2, 5, 5, 11], t)),
    "ExponentialLR": (lambda o: lr_scheduler.ExponentialLR(o, gamma=0.9),
                      lambda base, t: base * 0.9 ** t),
    # T_max = 7 < 20 steps: past T_max the rate rises again, as in PyTorch
    "CosineAnnealingLR": (lambda o: lr_scheduler.CosineAnnealingLR(o, T_max=7, eta_min=1e-3),
                          lambda base, t: _cos(base, t, 7, 1e-3)),
    "LinearLR": (lambda o: lr_scheduler.LinearLR(o, start_factor=0.25, end_factor=0.9,
                                                 total_iters=6),
                 lambda base, t: base * (0.25 + 0.65 * min(t, 6) / 6)),
    "LambdaLR": (lambda o: lr_scheduler.LambdaLR(o, lambda e: 1 / (1 + e) ** 0.5),
                 lambda base, t: base / (1 + t) ** 0.5),
    "SequentialLR": (lambda o: lr_scheduler.SequentialLR(
        o, [lr_scheduler.LinearLR(o, start_factor=0.5, total_iters=4),
            lr_scheduler.ExponentialLR(o, gamma=0.8)], milestones=[6]),
        lambda base, t: base * (0.5 + 0.5 * min(t, 4) / 4) if t < 6 else base * 0.8 ** (t - 6)),
}


@pytest.mark.parametrize("name", list(CLOSED_FORMS))
def test_scheduler_follows_its_closed_form(name):
    make, form = CLOSED_FORMS[name]
    opt = _opt()
    sched = make(opt)
    np.testing.assert_allclose(_run(opt, sched), _expect(form), rtol=1e-12, atol=1e-15)
    assert [g["initial_lr"] for g in opt.param_groups] == list(BASE)
    assert sched.last_epoch == STEPS


def test_two_schedulers_on_one_optimizer_compose():
    """PyTorch's schedulers are chainable: each scales the rate the other left."""
    opt = _opt()
    a = lr_scheduler.ExponentialLR(opt, gamma=0.9)
    b = lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)
    seen = []
    for _ in range(STEPS):
        seen.append([g["lr"] for g in opt.param_groups])
        opt.step()
        a.step()
        b.step()
    np.testing.assert_allclose(seen, _expect(lambda base, t: base * 0.9 ** t * 0.5 ** (t // 4)),
                               rtol=1e-12)


def _one_cycle(max_lr, total, t, pct=0.3, div=25.0, final_div=1e4, hi=0.95, lo=0.85):
    """The 1cycle policy as PyTorch documents it: cosine from max_lr/div up to max_lr over
    pct * total - 1 steps, then down to max_lr / div / final_div at step total - 1; the
    momentum goes from hi down to lo and back."""
    def anneal(start, end, frac):
        return end + (start - end) / 2 * (math.cos(math.pi * frac) + 1)

    peak = pct * total - 1
    start_lr = max_lr / div
    if t <= peak:
        frac = t / peak
        return anneal(start_lr, max_lr, frac), anneal(hi, lo, frac)
    frac = (t - peak) / (total - 1 - peak)
    return anneal(max_lr, start_lr / final_div, frac), anneal(lo, hi, frac)


@pytest.mark.parametrize("cls,key", [(optim.SGD, "momentum"), (optim.Adam, "betas")])
def test_one_cycle_follows_the_policy(cls, key):
    opt = _opt(cls, **({"momentum": 0.9} if key == "momentum" else {}))
    sched = lr_scheduler.OneCycleLR(opt, max_lr=[1.0, 0.5], total_steps=STEPS)
    for t in range(STEPS):
        for g, top in zip(opt.param_groups, (1.0, 0.5)):
            lr, mom = _one_cycle(top, STEPS, t)
            assert g["lr"] == pytest.approx(lr, rel=1e-12)
            m = g["momentum"] if key == "momentum" else g["betas"][0]
            assert m == pytest.approx(mom, rel=1e-12)
            if key == "betas":
                assert g["betas"][1] == 0.999
        opt.step()
        if t < STEPS - 1:
            sched.step()
    sched.step()  # step STEPS: the last one allowed
    with pytest.raises(ValueError, match="Tried to step"):
        sched.step()


def test_one_cycle_needs_a_momentum_to_cycle():
    with pytest.raises(ValueError, match="momentum or beta1"):
        lr_scheduler.OneCycleLR(_opt(optim.Adagrad), max_lr=0.1, total_steps=10)
    lr_scheduler.OneCycleLR(_opt(optim.Adagrad), max_lr=0.1, total_steps=10,
                            cycle_momentum=False)


def test_reduce_lr_on_plateau():
    opt = _opt()
    sched = lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=2, cooldown=1,
                                           min_lr=[0.0, 0.004])
    metrics = [1.0, 0.9, 0.95, 0.95, 0.95, eager.tensor(0.95), 0.95, 0.95, 0.95, 0.95, 0.5]
    # bad epochs counted after the best (0.9): the third bad one halves the rates, one
    # epoch of cooldown, then three more bad ones halve again (group 1 stops at min_lr)
    expect = [1, 1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25]
    for metric, factor in zip(metrics, expect):
        sched.step(metric)
        assert opt.param_groups[0]["lr"] == pytest.approx(BASE[0] * factor)
        assert opt.param_groups[1]["lr"] == pytest.approx(max(BASE[1] * factor, 0.004))
        assert sched.get_last_lr() == [g["lr"] for g in opt.param_groups]


def test_reduce_lr_on_plateau_max_mode_abs_threshold():
    opt = _opt()
    sched = lr_scheduler.ReduceLROnPlateau(opt, mode="max", factor=0.1, patience=0,
                                           threshold=0.5, threshold_mode="abs")
    sched.step(1.0)
    sched.step(1.4)  # not better by 0.5: reduce
    assert opt.param_groups[0]["lr"] == pytest.approx(0.01)
    sched.step(2.0)  # better
    assert opt.param_groups[0]["lr"] == pytest.approx(0.01)


@pytest.mark.parametrize("name", list(CLOSED_FORMS))
def test_scheduler_state_dict_resumes(name):
    make, _ = CLOSED_FORMS[name]
    opt = _opt()
    sched = make(opt)
    for _ in range(5):
        opt.step()
        sched.step()
    saved_opt, saved = opt.state_dict(), sched.state_dict()
    assert "optimizer" not in saved
    rest = _run(opt, sched, 8)
    opt2 = _opt()
    sched2 = make(opt2)
    opt2.load_state_dict(saved_opt)
    sched2.load_state_dict(saved)
    np.testing.assert_allclose(_run(opt2, sched2, 8), rest, rtol=1e-12)


def test_resuming_needs_initial_lr():
    with pytest.raises(KeyError, match="initial_lr"):
        lr_scheduler.StepLR(_opt(), step_size=2, last_epoch=4)


def test_sequential_lr_checks_its_arguments():
    opt, other = _opt(), _opt()
    with pytest.raises(ValueError, match="same optimizer"):
        lr_scheduler.SequentialLR(opt, [lr_scheduler.StepLR(opt, 2),
                                        lr_scheduler.StepLR(other, 2)], milestones=[3])
    with pytest.raises(ValueError, match="milestone"):
        lr_scheduler.SequentialLR(opt, [lr_scheduler.StepLR(opt, 2)], milestones=[3])


def test_verbose_is_accepted_as_in_older_scripts():
    opt = _opt()
    lr_scheduler.ReduceLROnPlateau(opt, "min", verbose=True)
    lr_scheduler.StepLR(opt, 3, verbose=False).step()
    assert opt.param_groups[0]["lr"] == BASE[0]
