"""Optimizers against independent numpy references of PyTorch's documented update rules
(the algorithm boxes of torch.optim's docs), for 20 steps, in float64 and float32, with
two parameter groups holding different options."""
import math

import numpy as np
import pytest

import eager
from eager import optim

STEPS = 20


def _grads(seed, shapes):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(s) for s in shapes] for _ in range(STEPS)]


# ---------------------------------------------------------------- numpy references
# Each takes (theta, g, state, hp, t) with t counted from 1 and returns the new theta;
# `state` is a dict the reference keeps across steps.

def ref_sgd(th, g, st, hp, t):
    mu, tau, lr = hp.get("momentum", 0), hp.get("dampening", 0), hp["lr"]
    wd = hp.get("weight_decay", 0)
    if hp.get("maximize"):
        g = -g
    g = g + wd * th
    if mu:
        st["b"] = g if t == 1 else mu * st["b"] + (1 - tau) * g
        g = g + mu * st["b"] if hp.get("nesterov") else st["b"]
    return th - lr * g


def ref_adam(th, g, st, hp, t, decoupled=False):
    lr, (b1, b2), eps, wd = hp["lr"], hp.get("betas", (0.9, 0.999)), hp.get("eps", 1e-8), \
        hp.get("weight_decay", 0)
    if hp.get("maximize"):
        g = -g
    if decoupled:
        th = th * (1 - lr * wd)
    else:
        g = g + wd * th
    st["m"] = b1 * st.get("m", 0) + (1 - b1) * g
    st["v"] = b2 * st.get("v", 0) + (1 - b2) * g * g
    v = st["v"]
    if hp.get("amsgrad"):  # the running max of v (PyTorch's v_max; bias-corrected after)
        st["vmax"] = v = np.maximum(st.get("vmax", 0), v)
    mhat, vhat = st["m"] / (1 - b1 ** t), v / (1 - b2 ** t)
    return th - lr * mhat / (np.sqrt(vhat) + eps)


def ref_adamw(th, g, st, hp, t):
    return ref_adam(th, g, st, dict({"weight_decay": 1e-2}, **hp), t, decoupled=True)


def ref_adamax(th, g, st, hp, t):
    lr, (b1, b2), eps, wd = hp["lr"], hp.get("betas", (0.9, 0.999)), hp.get("eps", 1e-8), \
        hp.get("weight_decay", 0)
    g = g + wd * th
    st["m"] = b1 * st.get("m", 0) + (1 - b1) * g
    st["u"] = np.maximum(b2 * st.get("u", 0), np.abs(g) + eps)
    return th - lr * st["m"] / ((1 - b1 ** t) * st["u"])


def ref_nadam(th, g, st, hp, t):
    lr, (b1, b2), eps, wd = hp["lr"], hp.get("betas", (0.9, 0.999)), hp.get("eps", 1e-8), \
        hp.get("weight_decay", 0)
    psi = hp.get("momentum_decay", 4e-3)
    if hp.get("decoupled_weight_decay"):
        th = th * (1 - lr * wd)
    else:
        g = g + wd * th
    mu = [b1 * (1 - 0.5 * 0.96 ** (i * psi)) for i in range(1, t + 2)]   # mu_1 .. mu_{t+1}
    st["m"] = b1 * st.get("m", 0) + (1 - b1) * g
    st["v"] = b2 * st.get("v", 0) + (1 - b2) * g * g
    prod_t, prod_next = math.prod(mu[:t]), math.prod(mu[:t + 1])
    mhat = mu[t] * st["m"] / (1 - prod_next) + (1 - mu[t - 1]) * g / (1 - prod_t)
    vhat = st["v"] / (1 - b2 ** t)
    return th - lr * mhat / (np.sqrt(vhat) + eps)


def ref_radam(th, g, st, hp, t):
    lr, (b1, b2), eps, wd = hp["lr"], hp.get("betas", (0.9, 0.999)), hp.get("eps", 1e-8), \
        hp.get("weight_decay", 0)
    if hp.get("decoupled_weight_decay"):
        th = th * (1 - lr * wd)
    else:
        g = g + wd * th
    st["m"] = b1 * st.get("m", 0) + (1 - b1) * g
    st["v"] = b2 * st.get("v", 0) + (1 - b2) * g * g
    mhat = st["m"] / (1 - b1 ** t)
    rho_inf = 2 / (1 - b2) - 1
    rho_t = rho_inf - 2 * t * b2 ** t / (1 - b2 ** t)
    if rho_t > 5:
        lt = math.sqrt(1 - b2 ** t) / (np.sqrt(st["v"]) + eps)
        rt = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf
                       / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
        return th - lr * mhat * lt * rt
    return th - lr * mhat


def ref_rmsprop(th, g, st, hp, t):
    lr, alpha, eps, wd = hp["lr"], hp.get("alpha", 0.99), hp.get("eps", 1e-8), \
        hp.get("weight_decay", 0)
    mu = hp.get("momentum", 0)
    g = g + wd * th
    st["v"] = alpha * st.get("v", 0) + (1 - alpha) * g * g
    v = st["v"]
    if hp.get("centered"):
        st["ga"] = alpha * st.get("ga", 0) + (1 - alpha) * g
        v = v - st["ga"] ** 2
    if mu > 0:
        st["b"] = mu * st.get("b", 0) + g / (np.sqrt(v) + eps)
        return th - lr * st["b"]
    return th - lr * g / (np.sqrt(v) + eps)


def ref_adagrad(th, g, st, hp, t):
    lr, eta, wd, eps = hp["lr"], hp.get("lr_decay", 0), hp.get("weight_decay", 0), \
        hp.get("eps", 1e-10)
    g = g + wd * th
    clr = lr / (1 + (t - 1) * eta)
    st["s"] = st.get("s", hp.get("initial_accumulator_value", 0)) + g * g
    return th - clr * g / (np.sqrt(st["s"]) + eps)


def ref_adadelta(th, g, st, hp, t):
    lr, rho, eps, wd = hp["lr"], hp.get("rho", 0.9), hp.get("eps", 1e-6), hp.get("weight_decay", 0)
    g = g + wd * th
    st["v"] = rho * st.get("v", 0) + (1 - rho) * g * g
    dx = np.sqrt(st.get("u", 0) + eps) / np.sqrt(st["v"] + eps) * g
    st["u"] = rho * st.get("u", 0) + (1 - rho) * dx * dx
    return th - lr * dx


# (optimizer, reference, options of group 0, options of group 1)
CASES = [
    (optim.SGD, ref_sgd, dict(lr=0.1), dict(lr=0.05, momentum=0.9, weight_decay=0.01)),
    (optim.SGD, ref_sgd, dict(lr=0.1, momentum=0.8, nesterov=True),
     dict(lr=0.05, momentum=0.9, dampening=0.3, maximize=True)),
    (optim.Adam, ref_adam, dict(lr=0.01), dict(lr=0.03, betas=(0.8, 0.99), weight_decay=0.1,
                                               maximize=True)),
    (optim.AdamW, ref_adamw, dict(lr=0.01), dict(lr=0.03, weight_decay=0.3)),
    (optim.Adam, ref_adam, dict(lr=0.01, amsgrad=True), dict(lr=0.03, betas=(0.8, 0.99))),
    (optim.AdamW, ref_adamw, dict(lr=0.01), dict(lr=0.03, weight_decay=0.3, amsgrad=True,
                                                 maximize=True)),
    (optim.Adamax, ref_adamax, dict(lr=0.02), dict(lr=0.01, betas=(0.7, 0.9), weight_decay=0.1)),
    (optim.NAdam, ref_nadam, dict(lr=0.02), dict(lr=0.01, momentum_decay=0.01, weight_decay=0.1)),
    (optim.NAdam, ref_nadam, dict(lr=0.02, weight_decay=0.2, decoupled_weight_decay=True),
     dict(lr=0.01, betas=(0.5, 0.9))),
    # beta2 = 0.9: rho_t crosses 5 at step 5, so both RAdam branches run
    (optim.RAdam, ref_radam, dict(lr=0.02, betas=(0.9, 0.9)),
     dict(lr=0.01, weight_decay=0.1)),
    (optim.RAdam, ref_radam, dict(lr=0.02, weight_decay=0.1, decoupled_weight_decay=True),
     dict(lr=0.01, betas=(0.8, 0.95))),
    (optim.RMSprop, ref_rmsprop, dict(lr=0.01), dict(lr=0.02, alpha=0.9, weight_decay=0.1)),
    (optim.RMSprop, ref_rmsprop, dict(lr=0.01, centered=True, momentum=0.9),
     dict(lr=0.02, momentum=0.5)),
    (optim.Adagrad, ref_adagrad, dict(lr=0.1), dict(lr=0.05, lr_decay=0.1, weight_decay=0.1,
                                                    initial_accumulator_value=0.5)),
    (optim.Adadelta, ref_adadelta, dict(lr=1.0), dict(lr=0.5, rho=0.8, weight_decay=0.1,
                                                      eps=1e-4)),
]


def _name(case):
    return case[0].__name__


@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-10), (np.float32, 2e-5)])
@pytest.mark.parametrize("case", CASES, ids=[_name(c) for c in CASES])
def test_optimizer_follows_the_documented_rule(case, dtype, rtol):
    opt_cls, ref, hp0, hp1 = case
    if opt_cls is optim.NAdam:
        # (PyTorch keeps NAdam's mu_product as a float32 0-d tensor, whatever the params)
        rtol = max(rtol, 1e-6)
    shapes = [(3, 4), (5,)]
    rng = np.random.default_rng(1)
    init = [rng.standard_normal(s) for s in shapes]
    params = [eager.tensor(a.astype(dtype), requires_grad=True) for a in init]
    opt = opt_cls([dict(params=[params[0]], **hp0), dict(params=[params[1]], **hp1)])
    ths = [a.astype(dtype).astype(np.float64) for a in init]
    states = [{}, {}]
    for t, gs in enumerate(_grads(2, shapes), start=1):
        for p, g in zip(params, gs):
            p.grad = eager.tensor(g.astype(dtype))
        opt.step()
        ths = [ref(th, g.astype(dtype).astype(np.float64), st, hp, t)
               for th, g, st, hp in zip(ths, gs, states, (hp0, hp1))]
        for p, th in zip(params, ths):
            np.testing.assert_allclose(p.detach().numpy(), th, rtol=rtol, atol=rtol,
                                       err_msg=f"step {t}")
            assert p.dtype == dtype


def test_per_group_options_fill_from_the_defaults():
    a, b = (eager.zeros(2, requires_grad=True) for _ in range(2))
    opt = optim.RMSprop([{"params": [a]}, {"params": b, "lr": 0.5, "centered": True}], lr=0.1)
    assert opt.param_groups[0]["lr"] == 0.1 and opt.param_groups[1]["lr"] == 0.5
    assert opt.param_groups[1]["centered"] and not opt.param_groups[0]["centered"]
    c = eager.zeros(3, requires_grad=True)
    opt.add_param_group({"params": [c], "alpha": 0.5})
    assert opt.param_groups[2]["alpha"] == 0.5 and opt.param_groups[2]["lr"] == 0.1
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [a]})
    with pytest.raises(TypeError, match="ordered collections"):
        opt.add_param_group({"params": {eager.zeros(1, requires_grad=True)}})
    with pytest.raises(TypeError, match="iterable of Tensors"):
        optim.Adam(a)


def test_added_group_is_stepped_with_its_own_options():
    a = eager.tensor([1.0, 2.0], requires_grad=True)
    b = eager.tensor([3.0], requires_grad=True)
    opt = optim.Adagrad([a], lr=0.1)
    opt.add_param_group({"params": [b], "lr": 1.0, "initial_accumulator_value": 1.0})
    a.grad, b.grad = eager.tensor([1.0, 1.0]), eager.tensor([2.0])
    opt.step()
    np.testing.assert_allclose(a.detach().numpy(), [0.9, 1.9], rtol=1e-6)
    np.testing.assert_allclose(b.detach().numpy(), [3.0 - 2.0 / math.sqrt(5.0)], rtol=1e-6)


@pytest.mark.parametrize("case", CASES[2:], ids=[_name(c) for c in CASES[2:]])
def test_state_dict_round_trip_continues_identically(case):
    """PyTorch's layout: integer parameter ids in group order, state per id; a fresh optimizer
    loaded from it continues exactly as the original does."""
    opt_cls, _, hp0, hp1 = case
    rng = np.random.default_rng(3)
    init = [rng.standard_normal(s).astype(np.float32) for s in [(4,), (2, 2)]]

    def make():
        ps = [eager.tensor(a, requires_grad=True) for a in init]
        return ps, opt_cls([dict(params=[ps[0]], **hp0), dict(params=[ps[1]], **hp1)])

    pa, oa = make()
    grads = _grads(4, [(4,), (2, 2)])
    for gs in grads[:3]:
        for p, g in zip(pa, gs):
            p.grad = eager.tensor(g.astype(np.float32))
        oa.step()
    sd = oa.state_dict()
    assert [g["params"] for g in sd["param_groups"]] == [[0], [1]]
    assert set(sd["state"]) == {0, 1}
    assert {k: v for k, v in sd["param_groups"][1].items() if k != "params"} == \
        {k: v for k, v in oa.param_groups[1].items() if k != "params"}
    pb, ob = make()
    for p, q in zip(pb, pa):
        p.data = q.detach().clone() if hasattr(q, "clone") else eager.tensor(q.numpy().copy())
    ob.load_state_dict(sd)
    for gs in grads[3:8]:
        for o, ps in ((oa, pa), (ob, pb)):
            for p, g in zip(ps, gs):
                p.grad = eager.tensor(g.astype(np.float32))
            o.step()
    for p, q in zip(pa, pb):
        np.testing.assert_array_equal(q.detach().numpy(), p.detach().numpy())


def test_load_state_dict_checks_the_groups():
    a, b = eager.zeros(2, requires_grad=True), eager.zeros(3, requires_grad=True)
    sd = optim.Adam([a, b]).state_dict()
    with pytest.raises(ValueError, match="parameter groups"):
        optim.Adam([{"params": [a]}, {"params": [b]}]).load_state_dict(sd)
    with pytest.raises(ValueError, match="doesn't match the size"):
        optim.Adam([a]).load_state_dict(sd)


@pytest.mark.parametrize("make", [
    lambda ps: optim.RMSprop(ps, lr=-1.0),
    lambda ps: optim.Adamax(ps, betas=(1.0, 0.9)),
    lambda ps: optim.NAdam(ps, momentum_decay=-1.0),
    lambda ps: optim.Adadelta(ps, rho=1.5),
    lambda ps: optim.Adagrad(ps, eps=-1.0),
])
def test_invalid_hyperparameters_raise_value_error(make):
    with pytest.raises(ValueError, match="Invalid"):
        make([eager.zeros(2, requires_grad=True)])


def test_amsgrad_state_is_pytorchs():
    p = eager.tensor([1.0, -2.0], requires_grad=True)
    opt = optim.Adam([p], lr=0.1, amsgrad=True)
    p.grad = eager.tensor([3.0, 1.0])
    opt.step()
    sd = opt.state_dict()
    assert list(sd["state"][0]) == ["step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"]
    assert sd["param_groups"][0]["amsgrad"] is True
    p.grad = eager.tensor([0.0, 0.0])  # v shrinks; its max stays
    opt.step()
    st = opt.state[p]
    np.testing.assert_allclose(st["max_exp_avg_sq"].numpy(), 0.001 * np.array([9.0, 1.0]),
                               rtol=1e-6)
    assert (st["exp_avg_sq"].numpy() < st["max_exp_avg_sq"].numpy()).all()
