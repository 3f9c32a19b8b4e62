"""Everyday PyTorch idioms around modules, autograd, grad mode and random numbers, each run
eagerly and compiled on the same seed and compared call by call (outputs, parameters,
.grad, requires_grad, optimizer state). Allowed outcomes: the same numbers (perhaps after a
retrace), or an eager run with a RuntimeWarning naming the user's line (a TracingError
under fullgraph=True); never a different number without a word.

Tiny models with shared shapes (Linear 4 -> 8 -> 3 on a 4x4 batch) keep the kernels shared.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import eager
import tracer
from eager import nn

BACKENDS = ["numba", "interpret"]


def _x(k):
    return eager.tensor(np.random.default_rng(k).standard_normal((4, 4)).astype(np.float32))


def _mlp():
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


def _train(model, opt, x):
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    return loss.detach()


def _snapshot(model, opt, out):
    s = {"out": np.asarray(out.detach().numpy()).copy()}
    if model is not None:
        for name, p in model.named_parameters():
            s[name] = p.detach().numpy().copy()
            s[name + ".grad"] = None if p.grad is None else p.grad.numpy().copy()
            s[name + ".requires_grad"] = p.requires_grad
    if opt is not None:
        for k, st in enumerate(opt.state.values()):
            s.update({f"opt{k}.{key}": v.detach().numpy().copy() for key, v in st.items()
                      if isinstance(v, eager.Tensor)})
    return s


def _run(mode, setup, calls):
    """`calls` calls of the step `setup()` makes (eagerly, or compiled on backend `mode`);
    the snapshots after each call and the RuntimeWarnings raised."""
    eager.manual_seed(0)
    step, model, opt, between = setup()
    f = step if mode == "eager" else tracer.function(step, backend=mode)
    snaps = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(calls):
            between(i)
            snaps.append(_snapshot(model, opt, f(_x(i))))
    return snaps, [w for w in caught if issubclass(w.category, RuntimeWarning)]


def _assert_agree(setup, backend, calls=3):
    """Compiled agrees with eager after every call; returns the compiled run's warnings."""
    expected, _ = _run("eager", setup, calls)
    got, warned = _run(backend, setup, calls)
    for i, (e, c) in enumerate(zip(expected, got)):
        assert e.keys() == c.keys()
        for key, ev in e.items():
            cv = c[key]
            if ev is None or isinstance(ev, bool):
                assert cv == ev, f"call {i}: {key}: eager {ev}, compiled {cv}"
                continue
            np.testing.assert_allclose(cv, ev, rtol=1e-5, atol=1e-6,
                                       err_msg=f"call {i}: {key}")
    return warned


def _nothing(i):
    pass


# ------------------------------------------------------------------ random numbers

def seed_inside_the_step():
    # Found here: eager.manual_seed ran once, while tracing; every compiled call then drew
    # new numbers where eager draws the same ones at every call.
    def step(x):
        eager.manual_seed(7)
        return eager.randn(4) + x.sum()
    return step, None, None, _nothing


def rng_state_saved_and_restored_inside_the_step():
    # Found here: get_rng_state/set_rng_state ran once, while tracing (no draw moved the
    # generator then), so the compiled calls drew two different samples.
    def step(x):
        state = eager.get_rng_state()
        a = eager.randn(4)
        eager.set_rng_state(state)
        return a - eager.randn(4) + x.sum()
    return step, None, None, _nothing


def own_generator_reseeded_inside_the_step():
    # Found here: g.manual_seed ran once, while tracing; eager reseeds it at every call, so
    # the draws made from it between calls differed.
    g = eager.Generator()
    noise = []

    def step(x):
        g.manual_seed(3)
        return x.sum() + 1.0

    def between(i):
        if i:
            noise.append(eager.randn(4, generator=g))
    return step, None, None, between, noise


def _with_noise(setup):
    # (the noise drawn between calls is the output compared)
    def made():
        step, model, opt, between, noise = setup()
        return (lambda x: step(x) + (noise[-1] if noise else 0.0)), model, opt, between
    made.__name__ = setup.__name__
    return made


@pytest.mark.parametrize("setup", [seed_inside_the_step,
                                   rng_state_saved_and_restored_inside_the_step,
                                   _with_noise(own_generator_reseeded_inside_the_step)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_global_generator_reseeded_inside_runs_eagerly_with_a_warning(setup, backend):
    warned = _assert_agree(setup, backend)
    assert warned and "test_module_idioms.py" in str(warned[0].message)
    assert "generator" in str(warned[0].message)


def test_global_generator_reseeded_inside_is_refused_under_fullgraph():
    step, _, _, _ = seed_inside_the_step()
    with pytest.raises(tracer.TracingError,
                       match=r"test_module_idioms\.py:\d+: eager\.manual_seed\(\)"):
        tracer.function(step, backend="interpret", fullgraph=True)(_x(0))


# ------------------------------------------------------------------ requires_grad

def layer_frozen_and_unfrozen_inside_the_step():
    # Found here: the trace saved the parameters' requires_grad as it was when first used
    # (frozen), so every compiled call left the layer frozen.
    model = _mlp()
    opt = eager.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x):
        model[0].requires_grad_(False)
        loss = _train(model, opt, x)
        model[0].requires_grad_(True)
        return loss
    return step, model, opt, _nothing


def layer_frozen_inside_the_step():
    # The step leaves the layer frozen: a trace would freeze it only once.
    model = _mlp()
    opt = eager.optim.SGD(model.parameters(), lr=0.1)

    def step(x):
        model[0].weight.requires_grad_(False)
        return _train(model, opt, x)

    def between(i):
        if i == 1:
            model[0].weight.requires_grad_(True)
    return step, model, opt, between


@pytest.mark.parametrize("backend", BACKENDS)
def test_requires_grad_toggled_off_and_on_inside_the_step(backend):
    assert not _assert_agree(layer_frozen_and_unfrozen_inside_the_step, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_requires_grad_changed_inside_the_step_runs_eagerly_with_a_warning(backend):
    warned = _assert_agree(layer_frozen_inside_the_step, backend)
    assert warned and "requires_grad" in str(warned[0].message)
    assert "test_module_idioms.py" in str(warned[0].message)


@pytest.mark.parametrize("backend", BACKENDS)
def test_argument_made_to_require_grad_inside_runs_eagerly_with_a_warning(backend):
    # Found here: `x.requires_grad_()` on an argument (input saliency) changed only the
    # trace's own leaf; the caller's tensor got its .grad but kept requires_grad False.
    eager.manual_seed(0)
    model = nn.Linear(4, 3)

    def step(x):
        x.requires_grad_()
        y = model(x).sum()
        y.backward()
        return y.detach()

    f = tracer.function(step, backend=backend)
    for i in range(2):
        x, x_eager = _x(0), _x(0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            f(x)
        assert i or "argument x (False -> True)" in str(caught[0].message)
        step(x_eager)
        assert x.requires_grad and x_eager.requires_grad
        np.testing.assert_allclose(x.grad.numpy(), x_eager.grad.numpy(), rtol=1e-6)
        model.zero_grad()
    # An argument that requires grad already: nothing changes, the call compiles.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f(_x(1).requires_grad_())
    assert f.trace_count >= 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_grad_mode_switched_off_and_left_so_runs_eagerly_with_a_warning(backend):
    # Found here: a bare eager.set_grad_enabled(False) inside ran once, while tracing; the
    # compiled calls left gradient mode on where eager switches it off at every call.
    model = _mlp()

    def step(x):
        eager.set_grad_enabled(False)
        return model(x) * 2

    f = tracer.function(step, backend=backend)
    try:
        for i in range(3):
            eager.set_grad_enabled(True)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out = f(_x(i))
            assert i or "gradient mode off" in str(caught[0].message)
            assert not eager.is_grad_enabled() and not out.requires_grad
            eager.set_grad_enabled(True)
            np.testing.assert_allclose(out.numpy(), step(_x(i)).numpy(), rtol=1e-6)
    finally:
        eager.set_grad_enabled(True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_grad_mode_switched_and_set_back_inside_compiles(backend):
    model = _mlp()

    def step(x):
        prev = eager.is_grad_enabled()
        eager.set_grad_enabled(False)
        y = model(x) * 2
        eager.set_grad_enabled(prev)
        return y

    f = tracer.function(step, backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i in range(2):
            out = f(_x(i))
            assert eager.is_grad_enabled() and not out.requires_grad
            np.testing.assert_allclose(out.numpy(), step(_x(i)).numpy(), rtol=1e-6)
    assert f.trace_count == 1


# ------------------------------------------------------------------ containers the step reads

class _WithHooks(nn.Module):
    """Forward hooks kept by hand in a plain list (eager.nn.Module has no hook API)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.hooks = []
        self.log = []  # (the training loop's, never read by forward)

    def forward(self, x):
        out = self.lin(x)
        for hook in self.hooks:
            out = hook(out)
        return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_entries_added_to_containers_the_step_reads_retrace(backend):
    # Found here: only the container's identity was guarded, so an element appended to a
    # list or a key added to a dict after the first call was silently ignored.
    eager.manual_seed(0)
    extra, cfg, model = [eager.ones(3)], {}, _WithHooks()

    def step(x):
        out = model(x) * cfg.get("scale", 1.0)
        for k, v in cfg.items():
            out = out + (v if k != "scale" else 0.0)
        return out + sum(extra)

    f = tracer.function(step, backend=backend)
    changes = [lambda: extra.append(eager.full((3,), 2.0)),
               lambda: cfg.__setitem__("scale", 3.0),
               lambda: cfg.__setitem__("shift", 0.5),
               lambda: model.hooks.append(lambda t: t * 0.5)]
    with eager.no_grad():
        for i, change in enumerate([lambda: None] + changes):
            change()
            np.testing.assert_allclose(f(_x(i)).numpy(), step(_x(i)).numpy(), rtol=1e-6,
                                       err_msg=f"after change {i}")
        assert f.trace_count == 5
        f(_x(0))
        model.log.append(1.0)  # a list the code never names: not guarded
        f(_x(0))
    assert f.trace_count == 5  # (nothing that matters changed: the same trace)


# ------------------------------------------------------------------ custom autograd.Function

class _ScaledGrad(eager.autograd.Function):
    """Identity forward, a backward of its own (gradient scaling, straight-through...)."""

    @staticmethod
    def forward(ctx, x):
        return x * 1.0

    @staticmethod
    def backward(ctx, g):
        return g * 2.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_custom_function_with_the_gradient_going_outside_keeps_its_backward(backend):
    # Found here: the outputs needed grad outside, so the compiled forward went on the tape
    # with the IR autodiff of the ops forward recorded (x * 1.0): the Function's own
    # backward (g * 2) was silently bypassed.
    eager.manual_seed(0)
    model = _mlp()

    def forward(x):
        return _ScaledGrad.apply(model(x)).pow(2).sum()

    f = tracer.function(forward, backend=backend)
    for i in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            f(_x(i)).backward()
        assert i or "_ScaledGrad" in str(caught[0].message)
        got = [p.grad.numpy().copy() for p in model.parameters()]
        model.zero_grad()
        forward(_x(i)).backward()
        for g, p in zip(got, model.parameters()):
            np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-5, atol=1e-6)
        model.zero_grad()


@pytest.mark.parametrize("backend", BACKENDS)
def test_custom_function_with_backward_inside_compiles(backend):
    def setup():
        model = _mlp()

        def step(x):
            loss = _ScaledGrad.apply(model(x)).pow(2).sum()
            loss.backward()
            return loss.detach()
        return step, model, None, _nothing
    assert not _assert_agree(setup, backend, calls=2)


def test_partial_activation_changed_in_place_retraces(backend="interpret"):
    # Found here: only the partial object's identity was guarded; its keywords, a dict the
    # user can change in place, were read once. (A guard of the trace: one backend covers it;
    # on Numba each slope compiled a kernel of its own, 20 s of the suite.)
    import functools

    eager.manual_seed(0)
    lin = nn.Linear(4, 3)
    act = functools.partial(eager.nn.functional.leaky_relu, negative_slope=0.1)

    def step(x):
        return act(lin(x))

    f = tracer.function(step, backend=backend)
    with eager.no_grad():
        for i, slope in enumerate([0.1, 0.5, 0.9]):
            act.keywords["negative_slope"] = slope
            np.testing.assert_allclose(f(_x(i)).numpy(), step(_x(i)).numpy(), rtol=1e-6,
                                       err_msg=f"negative_slope={slope}")
    assert f.trace_count == 3
