"""Compiled training steps on the edge cases of issue 5, each against the same step run
eagerly on an identical copy of the model: a parameter the loss does not use, frozen
parameters next to trained ones, Dropout in train mode, a replaced parameter, and a call
under no_grad."""
from __future__ import annotations

import numpy as np
import pytest

import eager
import eager.nn.functional as F
import tracer
from eager import nn, optim


class _TwoHeads(nn.Module):
    """A model with a head the loss never uses: its parameters get no gradient."""

    def __init__(self, dropout=0.0):
        super().__init__()
        self.body = nn.Linear(6, 8)
        self.used = nn.Linear(8, 3)
        self.unused = nn.Linear(8, 2)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.used(self.drop(F.relu(self.body(x))))


def _pair(make_model, make_opt, freeze=()):
    eager.manual_seed(3)
    a, b = make_model(), make_model()
    b.load_state_dict(a.state_dict())
    for model in (a, b):
        for name, p in model.named_parameters():
            if name.startswith(freeze):
                p.requires_grad_(False)
    return (a, make_opt([p for p in a.parameters() if p.requires_grad])), \
        (b, make_opt([p for p in b.parameters() if p.requires_grad]))


def _step(model, opt, x, y):
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


def _data():
    rng = np.random.default_rng(5)
    return (eager.from_numpy(rng.standard_normal((5, 6)).astype(np.float32)),
            eager.from_numpy(rng.integers(0, 3, size=5)))


def _train_side_by_side(make_opt, steps, freeze=()):
    """`steps` compiled steps of one copy of _TwoHeads beside eager steps of the other,
    compared after each; returns the compiled copy, its optimizer and the step."""
    (a, opt_a), (b, opt_b) = _pair(_TwoHeads, make_opt, freeze=freeze)
    x, y = _data()
    step = tracer.function(lambda x, y: _step(a, opt_a, x, y))
    for _ in range(steps):
        got = step(x, y)
        want = _step(b, opt_b, x, y)
        assert got.item() == pytest.approx(want.item(), rel=1e-5)
        _assert_same(a, b, opt_a, opt_b)
    return a, opt_a, step


def _assert_same(a, b, opt_a, opt_b):
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5,
                                   atol=1e-7, err_msg=name)
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-7,
                                       err_msg=f"{name}.grad")
        sa, sb = opt_a.state.get(p, {}), opt_b.state.get(q, {})
        assert sorted(sa) == sorted(sb), name
        for key in sa:
            np.testing.assert_allclose(np.asarray(sa[key].detach().numpy()),
                                       np.asarray(sb[key].detach().numpy()), rtol=1e-5,
                                       atol=1e-7, err_msg=f"{name} state {key}")


@pytest.mark.parametrize("opt_name", ["sgd_momentum", "adam"])
def test_unused_and_frozen_parameters_are_left_as_eager_leaves_them(opt_name):
    make_opt = {"sgd_momentum": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9),
                "adam": lambda ps: optim.Adam(ps, lr=1e-2)}[opt_name]
    a, opt_a, step = _train_side_by_side(make_opt, 6, freeze=("body",))
    assert a.unused.weight.grad is None and a.body.weight.grad is None
    # State is made, at the first step, only for the parameters that have a gradient
    assert sorted(id(p) for p in opt_a.state) == sorted(id(p) for p in a.used.parameters())
    assert step.trace_count == 1


def test_dropout_in_train_mode_draws_new_masks_like_eager():
    (a, opt_a), (b, opt_b) = _pair(lambda: _TwoHeads(dropout=0.5),
                                   lambda ps: optim.SGD(ps, lr=0.1))
    x, y = _data()
    step = tracer.function(lambda x, y: _step(a, opt_a, x, y))
    losses = []
    for i in range(5):
        eager.manual_seed(100 + i)   # the same random stream for both at every step
        got = step(x, y).item()
        eager.manual_seed(100 + i)
        want = _step(b, opt_b, x, y).item()
        assert got == pytest.approx(want, rel=1e-5)
        losses.append(got)
        _assert_same(a, b, opt_a, opt_b)
    eager.manual_seed(7)
    first = step(x, y).item()
    second = step(x, y).item()   # no reseed: the generator moved on, so another mask
    assert first != second
    assert step.trace_count == 1


def test_replacing_a_parameter_object_retraces_and_trains_the_new_one():
    (a, opt_a), (b, opt_b) = _pair(_TwoHeads, lambda ps: optim.SGD(ps, lr=0.1))
    x, y = _data()
    step = tracer.function(lambda x, y: _step(a, opt_a, x, y))
    for _ in range(2):
        step(x, y)
        _step(b, opt_b, x, y)
    for model, opt in ((a, opt_a), (b, opt_b)):
        new = nn.Parameter(eager.zeros(3, 8))
        model.used.weight = new
        opt.param_groups[0]["params"][2] = new  # the optimizer follows the new object
    traces = step.trace_count
    for _ in range(3):
        step(x, y)
        _step(b, opt_b, x, y)
        _assert_same(a, b, opt_a, opt_b)
    assert step.trace_count == traces + 1
    assert np.any(a.used.weight.detach().numpy() != 0)


def test_a_step_called_under_no_grad_fails_like_eager():
    (a, opt_a), (b, opt_b) = _pair(_TwoHeads, lambda ps: optim.SGD(ps, lr=0.1))
    x, y = _data()
    step = tracer.function(lambda x, y: _step(a, opt_a, x, y))
    with eager.no_grad():
        with pytest.raises(RuntimeError) as eager_error:
            _step(b, opt_b, x, y)
        with pytest.raises(RuntimeError) as compiled_error:
            step(x, y)
    assert "grad" in str(compiled_error.value).lower()
    assert type(compiled_error.value) is type(eager_error.value)
    _assert_same(a, b, opt_a, opt_b)


def test_sgd_with_dampening_traces_its_first_step_apart():
    """PyTorch's first momentum buffer is the gradient itself, which a zero buffer updated
    with dampening would not give: that first step is a trace of its own, run once."""
    make_opt = lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.3)  # noqa: E731
    _, _, step = _train_side_by_side(make_opt, 5)
    assert step.trace_count == 2


def test_state_made_under_state_init_is_traced_as_existing_state():
    """User code can make lazy state the way the optimizers do: a running mean whose
    buffer appears at the first call traces once, and equals the eager run."""
    from eager.dispatch import state_init

    def make():
        running = {}

        def update(x):
            if "mean" not in running:
                with state_init():
                    running["mean"] = eager.zeros_like(x)
            running["mean"].mul_(0.5).add_(x, alpha=0.5)
            return running["mean"] * 2.0

        return running, update

    (got_state, f), (want_state, g) = make(), make()
    f = tracer.function(f)
    rng = np.random.default_rng(0)
    for _ in range(4):
        x = eager.from_numpy(rng.standard_normal((3, 2)).astype(np.float32))
        np.testing.assert_allclose(f(x).numpy(), g(x).numpy(), rtol=1e-6)
        np.testing.assert_allclose(got_state["mean"].numpy(), want_state["mean"].numpy(),
                                   rtol=1e-6)
    assert f.trace_count == 1
    # Eagerly state_init changes nothing; without it the first call is a trace of its own
    plain = {}

    @tracer.function
    def h(x):
        if "mean" not in plain:
            plain["mean"] = eager.zeros_like(x)
        plain["mean"].mul_(0.5).add_(x, alpha=0.5)
        return plain["mean"] * 2.0

    for _ in range(3):
        h(x)
    assert h.trace_count == 2
    np.testing.assert_allclose(plain["mean"].numpy(), x.numpy() * 0.875, rtol=1e-6)


def _rnn_step(fullgraph=False):
    eager.manual_seed(0)
    rnn = nn.RNN(3, 4, batch_first=True)
    opt = optim.SGD(rnn.parameters(), lr=0.1)

    def step(x, h):  # (line named by the warning)
        opt.zero_grad()
        out, h = rnn(x, h)
        loss = out.pow(2).mean()
        loss.backward()
        opt.step()
        return loss.detach(), h  # h still needs gradients: the call cannot be compiled

    return step, tracer.function(step, backend="interpret", fullgraph=fullgraph)


@pytest.mark.one_backend  # (what warns is the same on both)
def test_a_step_returning_a_tensor_that_needs_grad_warns_once_that_it_runs_eagerly():
    import inspect

    step, f = _rnn_step()
    line = f"test_training_edge_cases.py:{inspect.getsourcelines(step)[1]}"
    x = eager.tensor(np.linspace(-1, 1, 18, dtype=np.float32).reshape(2, 3, 3))
    h = eager.zeros(1, 2, 4)
    with pytest.warns(RuntimeWarning, match="runs eagerly") as got:
        loss, h = f(x, h)
    message = str(got[0].message)
    assert message.startswith(f"{line}: tracer.function step:") and ".detach()" in message
    assert got[0].filename == __file__  # (points at the user's call)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f(x, h.detach())  # once per function
    _plain, f = _rnn_step(fullgraph=True)
    with pytest.raises(tracer.TracingError, match="runs eagerly"):
        f(x, eager.zeros(1, 2, 4))
