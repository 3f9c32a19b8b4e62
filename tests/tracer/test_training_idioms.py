"""Everyday PyTorch training-script idioms, compiled against eager on the same seeds.

Each idiom is a compiled training step plus what a script does between calls (switch
train/eval, change the learning rate, step a scheduler, load a state dict, add a param
group ...). After every call the step's output, every parameter and buffer, every .grad
and the optimizer's state and learning rate are compared with the eager run's.
"""
import io

import numpy as np
import pytest

import eager
import eager.nn.functional as F
import tracer
from eager import nn

BACKENDS = ["numba", "interpret"]


def _batch(k):
    r = np.random.default_rng(k)
    return (eager.tensor(r.standard_normal((6, 4)).astype(np.float32)),
            eager.tensor(r.integers(0, 3, 6)))


def _mlp(dropout=0.0, batchnorm=False):
    layers = [nn.Linear(4, 8)] + ([nn.BatchNorm1d(8)] if batchnorm else []) + [nn.ReLU()]
    layers += [nn.Dropout(dropout)] if dropout else []
    return nn.Sequential(*layers, nn.Linear(8, 3))


def _train_step(model, opt):
    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return step


def _snapshot(model, opt, out):
    s = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    for n, p in model.named_parameters():
        s[n + ".grad"] = None if p.grad is None else p.grad.numpy().copy()
    if opt is not None:
        for k, st in enumerate(opt.state.values()):
            s.update({f"opt{k}.{key}": v.detach().numpy().copy() for key, v in st.items()
                      if isinstance(v, eager.Tensor)})
        s["lr"] = np.array([g["lr"] for g in opt.param_groups])
    s["output"] = out.detach().numpy().copy()
    return s


def _run(mode, idiom, calls=5):
    eager.manual_seed(0)
    step, model, opt, between = idiom()
    f = step if mode == "eager" else tracer.function(step, backend=mode)
    snaps = []
    for i in range(calls):
        between(i, model, opt)
        snaps.append(_snapshot(model, opt, f(*_batch(i))))
    return snaps


def _assert_agree(idiom, backend):
    for i, (e, c) in enumerate(zip(_run("eager", idiom), _run(backend, idiom))):
        assert e.keys() == c.keys(), f"call {i}: {sorted(e.keys() ^ c.keys())}"
        for key, ev in e.items():
            cv = c[key]
            if ev is None or cv is None:
                assert ev is None and cv is None, f"call {i}: {key}: eager {ev}, compiled {cv}"
                continue
            np.testing.assert_allclose(cv, ev, rtol=1e-4, atol=1e-5,
                                       err_msg=f"call {i}: {key}")


def add_param_group_after_tracing():
    # Found here: the trace looped over the one group it saw; the second group's
    # parameters were neither zeroed nor stepped (silently) until a guard saw the change.
    model = _mlp()
    opt = eager.optim.SGD(model[0].parameters(), lr=0.1)

    def between(i, model, opt):
        if i == 2:
            opt.add_param_group({"params": list(model[2].parameters()), "lr": 0.05})
    return _train_step(model, opt), model, opt, between


def manual_sgd_with_augmented_assignment():
    # Found here: `p -= lr * p.grad` rebound the name to a new tensor, eagerly and
    # compiled, so the parameters never changed (PyTorch's -= writes in place).
    model = _mlp()

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        with eager.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
                p.grad.zero_()
        return loss.detach()
    return step, model, None, lambda i, model, opt: None


def train_eval_switching():
    model = _mlp(0.3, True)
    opt = eager.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return _train_step(model, opt), model, opt, lambda i, m, o: m.train(i % 2 == 0)


def accumulation_with_zero_grad_set_to_none_false():
    model = _mlp()
    opt = eager.optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        loss = F.cross_entropy(model(x), y) / 2
        loss.backward()
        return loss.detach()

    def between(i, model, opt):
        if i % 2 == 0 and i:
            opt.step()
            opt.zero_grad(set_to_none=False)
    return step, model, opt, between


def learning_rate_and_scheduler_between_calls():
    model = _mlp()
    opt = eager.optim.AdamW(model.parameters(), lr=0.01)
    sched = eager.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)

    def between(i, model, opt):
        if i == 1:
            opt.param_groups[0]["lr"] = 0.02
        elif i:
            sched.step()
    return _train_step(model, opt), model, opt, between


def replacing_data_and_loading_state_after_tracing():
    model = _mlp(0.0, True)
    opt = eager.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    saved = {}

    def between(i, model, opt):
        if i == 1:
            buf = io.BytesIO()
            eager.save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
            saved["bytes"] = buf.getvalue()
        elif i == 2:
            model[0].weight.data = eager.ones(8, 4) * 0.1
        elif i == 3:
            checkpoint = eager.load(io.BytesIO(saved["bytes"]))
            model.load_state_dict(checkpoint["model"])
            opt.load_state_dict(checkpoint["opt"])
    return _train_step(model, opt), model, opt, between


def buffer_registered_after_tracing():
    class Shifted(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 3)

        def forward(self, x):
            out = self.lin(x)
            return out + self.shift if hasattr(self, "shift") else out

    model = Shifted()
    opt = eager.optim.SGD(model.parameters(), lr=0.1)

    def between(i, model, opt):
        if i == 2:
            model.register_buffer("shift", eager.ones(3))
    return _train_step(model, opt), model, opt, between


IDIOMS = [add_param_group_after_tracing, manual_sgd_with_augmented_assignment,
          train_eval_switching, accumulation_with_zero_grad_set_to_none_false,
          learning_rate_and_scheduler_between_calls,
          replacing_data_and_loading_state_after_tracing, buffer_registered_after_tracing]


@pytest.mark.parametrize("idiom", IDIOMS, ids=[f.__name__ for f in IDIOMS])
@pytest.mark.parametrize("backend", BACKENDS)
def test_idiom_compiled_matches_eager(idiom, backend):
    _assert_agree(idiom, backend)


def test_augmented_assignment_writes_in_place_as_pytorch():
    p = nn.Parameter(eager.ones(3))
    p.grad = eager.full((3,), 2.0)
    alias = p
    with eager.no_grad():
        alias -= 0.5 * p.grad
        alias *= 3.0
        alias /= 2.0
        alias += 1.0
    assert alias is p
    np.testing.assert_array_equal(p.detach().numpy(), np.full(3, 1.0, np.float32))
    with pytest.raises(RuntimeError, match="leaf"):
        p += 1.0
