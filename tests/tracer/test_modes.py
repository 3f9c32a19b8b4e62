"""model.train() / model.eval() inside compiled functions: the everyday loop (a training step
that starts with model.train(), an eval function that starts with model.eval()) compiles, and
every call leaves what the eager call leaves. `training` is tracked state: a trace guards
the value it read before writing it, and writes what it wrote at every call.

Each test runs the same sequence of calls eagerly and compiled, from the same seed, and
compares after every call: outputs, parameters, .grad, buffers, optimizer state and every
module's flag."""
import warnings

import numpy as np
import pytest

import eager
import eager.nn.functional as F
import tracer
from eager import nn

BACKENDS = ["numba", "interpret"]


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(),
                                  nn.Dropout(0.5))
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.body(x))


def _batch(k):
    r = np.random.default_rng(k)
    return (eager.tensor(r.standard_normal((6, 4)).astype(np.float32)),
            eager.tensor(r.integers(0, 3, 6)))


def _state(model, opt, out):
    s = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    for n, p in model.named_parameters():
        s[n + ".grad"] = None if p.grad is None else p.grad.numpy().copy()
    for k, st in enumerate(opt.state.values()):
        s.update({f"opt{k}.{key}": np.asarray(v.detach().numpy() if isinstance(v, eager.Tensor)
                                              else v).copy() for key, v in st.items()})
    s["flags"] = np.array([m.training for m in model.modules()])
    outs = out if isinstance(out, tuple) else (out,)
    for j, o in enumerate(outs):
        s[f"output{j}"] = o.detach().numpy().copy()
    return s


def _compare(want, got):
    for i, (e, c) in enumerate(zip(want, got)):
        assert e.keys() == c.keys(), f"call {i}: {sorted(e.keys() ^ c.keys())}"
        for key, ev in e.items():
            cv = c[key]
            if ev is None or cv is None:
                assert ev is None and cv is None, f"call {i}: {key}: eager {ev}, compiled {cv}"
                continue
            np.testing.assert_allclose(cv, ev, rtol=1e-4, atol=1e-5, err_msg=f"call {i}: {key}")


def _run(mode, program, calls):
    """`program()` -> (model, opt, {name: function}); `calls`: (name, batch) in order."""
    eager.manual_seed(0)
    model, opt, functions = program()
    if mode != "eager":
        functions = {k: tracer.function(f, backend=mode) for k, f in functions.items()}
    states = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (an eager fallback warns: it must not happen)
        for name, k in calls:
            x, y = _batch(k)
            states.append(_state(model, opt, functions[name](x, y)))
    return states, functions


def _loop():
    model = _Net()
    # (SGD: Adam would blow up the rounding noise of the bias before BatchNorm, whose
    # gradient is 0 up to rounding, into lr-sized steps of either sign)
    opt = eager.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def train_step(x, y):
        model.train()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    def evaluate(x, y):
        model.eval()
        with eager.no_grad():
            return F.cross_entropy(model(x), y)

    return model, opt, {"train": train_step, "eval": evaluate}


@pytest.mark.parametrize("backend", BACKENDS)
def test_train_and_eval_alternating_compile_once_each(backend):
    calls = [("train", 0), ("eval", 1), ("train", 2), ("train", 3), ("eval", 4), ("eval", 5),
             ("train", 6)]
    want, _ = _run("eager", _loop, calls)
    got, functions = _run(backend, _loop, calls)
    _compare(want, got)
    assert functions["train"].trace_count == 1 and functions["eval"].trace_count == 1


def _flag_read_after_write():
    model = _Net()
    opt = eager.optim.SGD(model.parameters(), lr=0.1)

    def both(x, y):  # eval output, then a training output, in one call
        model.eval()
        with eager.no_grad():
            a = model(x)
        model.train()
        b = model(x)
        opt.zero_grad()
        F.cross_entropy(b, y).backward()
        opt.step()
        return a, b.detach(), eager.tensor(float(model.body[3].training))

    return model, opt, {"both": both}


@pytest.mark.parametrize("backend", BACKENDS)
def test_flag_written_then_read_in_one_trace(backend):
    calls = [("both", k) for k in range(3)]
    want, _ = _run("eager", _flag_read_after_write, calls)
    got, functions = _run(backend, _flag_read_after_write, calls)
    _compare(want, got)
    assert functions["both"].trace_count == 1


def _read_before_write():
    model = _Net()
    opt = eager.optim.SGD(model.parameters(), lr=0.1)

    def report_then_eval(x, y):  # the flag as found decides the output: guarded
        scale = 2.0 if model.training else 3.0
        model.eval()
        with eager.no_grad():
            return model(x) * scale

    def to_train(x, y):
        model.train()
        return x.sum()

    return model, opt, {"f": report_then_eval, "train": to_train}


@pytest.mark.parametrize("backend", BACKENDS)
def test_flag_read_before_the_write_is_guarded(backend):
    calls = [("f", 0), ("f", 1), ("train", 2), ("f", 3), ("f", 4)]
    want, _ = _run("eager", _read_before_write, calls)
    got, functions = _run(backend, _read_before_write, calls)
    _compare(want, got)
    assert functions["f"].trace_count == 2  # (entry True, then entry False)


def _argument_and_submodule():
    model = _Net()
    opt = eager.optim.SGD(model.parameters(), lr=0.1)

    def set_mode(x, y, mode):  # a flag that depends on an argument
        model.train(mode)
        with eager.no_grad():
            return model(x)

    def freeze_body(x, y):  # only a submodule: the rest keeps its flag
        model.body.eval()
        with eager.no_grad():
            return model(x)

    return model, opt, {"on": lambda x, y: set_mode(x, y, True),
                        "off": lambda x, y: set_mode(x, y, False), "body": freeze_body,
                        "mode": set_mode}


@pytest.mark.parametrize("backend", BACKENDS)
def test_flag_from_an_argument_and_nested_submodules(backend):
    calls = [("on", 0), ("body", 1), ("off", 2), ("body", 3), ("on", 4), ("body", 5)]
    want, _ = _run("eager", _argument_and_submodule, calls)
    got, functions = _run(backend, _argument_and_submodule, calls)
    _compare(want, got)
    assert functions["body"].trace_count == 1
    # The flag as a Python argument of the compiled function: one trace per value
    eager.manual_seed(0)
    model, _opt, fs = _argument_and_submodule()
    f = tracer.function(fs["mode"], backend=backend)
    x, y = _batch(0)
    for mode in (True, False, True, False):
        f(x, y, mode)
        assert [m.training for m in model.modules()] == [mode] * len(list(model.modules()))
    assert f.trace_count == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_call_that_raises_after_train_leaves_the_flag_as_eager(backend):
    def program():
        model = _Net()

        def loss_of(x, y):
            model.train()
            with eager.no_grad():
                return F.cross_entropy(model(x), y)
        return model, loss_of

    results = {}
    for mode in ("eager", backend):
        eager.manual_seed(0)
        model, loss_of = program()
        f = loss_of if mode == "eager" else tracer.function(loss_of, backend=mode)
        x, y = _batch(0)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            f(x, y)
        model.eval()
        with pytest.raises(IndexError):
            f(x, eager.tensor([0, 1, 2, 7, 0, 1]))  # (a class out of range, after train())
        results[mode] = _state(model, eager.optim.SGD(model.parameters(), lr=0.1), x)
    _compare([results["eager"]], [results[backend]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_train_inside_a_forward_backpropagated_outside(backend):
    def program():
        # (no BatchNorm: a running-statistics update with outputs needing gradients outside
        # runs eagerly, flag or not)
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 3))
        opt = eager.optim.SGD(model.parameters(), lr=0.1)

        def forward(x, y):  # its output needs gradients outside: the compiled backward
            model.train()
            return F.cross_entropy(model(x), y)

        def evaluate(x, y):
            model.eval()
            with eager.no_grad():
                return model(x)

        def fwd_bwd(x, y):
            opt.zero_grad()
            loss = functions["forward"](x, y)
            loss.backward()
            opt.step()
            return loss.detach()

        functions = {"forward": forward, "eval": evaluate}
        return model, opt, {"step": fwd_bwd, "eval": lambda x, y: functions["eval"](x, y),
                            "_functions": functions}

    calls = [("step", 0), ("eval", 1), ("step", 2), ("eval", 3)]
    states = {}
    for mode in ("eager", backend):
        eager.manual_seed(0)
        model, opt, fs = program()
        inner = fs.pop("_functions")
        if mode != "eager":
            for k in list(inner):
                inner[k] = tracer.function(inner[k], backend=mode)
        states[mode] = []
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for name, k in calls:
                states[mode].append(_state(model, opt, fs[name](*_batch(k))))
    _compare(states["eager"], states[backend])
    assert inner["forward"].trace_count == 1 and inner["eval"].trace_count == 1
