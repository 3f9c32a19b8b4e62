"""The trace protocol (eager/protocol.py): eager reports its events to one current object,
which is eager execution itself unless something installs another; eager never imports the
tracer."""

import ast
import pathlib

import numpy as np

import eager
import eager.nn as nn
import eager.optim as optim
from eager import dispatch
from eager.protocol import EAGER, STRUCTURE_EPOCH, TraceProtocol

EAGER_DIR = pathlib.Path(eager.__file__).parent


def _imported_modules(path):
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


def test_eager_never_imports_the_tracer_or_codegen():
    offenders = [(str(p.relative_to(EAGER_DIR)), m)
                 for p in sorted(EAGER_DIR.rglob("*.py"))
                 for m in _imported_modules(p)
                 if m.split(".")[0] in ("tracer", "codegen")]
    assert offenders == []


def test_the_default_protocol_is_eager_execution():
    assert dispatch.current_protocol() is EAGER
    assert dispatch._hooked_threads == 0
    assert not dispatch.tracing()
    a = eager.tensor([1.0, 2.0])
    np.testing.assert_array_equal(EAGER.apply(eager.ops.OPS["exp"], (a,), {}), eager.exp(a).numpy())
    assert EAGER.live_scalar(lambda: 3.5, np.float64, "x", None) == 3.5
    assert EAGER.read_item({"lr": 0.1}, "lr", 0.1, dispatch.VALUE, np.float64, "") == 0.1
    t = eager.zeros(2)
    EAGER.write_inplace(t, np.ones(2, np.float32))
    assert t.tolist() == [1.0, 1.0]


class _Observer(TraceProtocol):
    """Runs everything eagerly (the defaults) and notes each event."""

    def __init__(self):
        self.events = []

    def apply(self, op, inputs, params):
        self.events.append(("apply", op.name))
        return super().apply(op, inputs, params)

    def tensor_created(self, t, state):
        self.events.append(("created", state))

    def grad_access(self, t, write):
        self.events.append(("grad", write))

    def live_scalar(self, getter, dtype, name, key):
        self.events.append(("live", name))
        return super().live_scalar(getter, dtype, name, key)

    def read_item(self, container, key, value, how, dtype, name):
        self.events.append(("read", key, how))
        return value

    def write_item(self, container, key, value):
        self.events.append(("write", key))

    def __enter__(self):
        self._prev = dispatch.set_protocol(self)
        return self

    def __exit__(self, *exc):
        dispatch.set_protocol(self._prev)


def test_an_installed_protocol_sees_each_kind_of_event_and_changes_no_result():
    def step():
        eager.manual_seed(3)
        model = nn.Linear(3, 2)
        opt = optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
        x = eager.tensor([[1.0, -2.0, 0.5]])
        loss = (model(x) ** 2).sum()
        loss.backward()
        opt.step()
        opt.param_groups[0]["lr"] = 0.25
        with dispatch.state_init():
            eager.zeros(1)
        return loss.item(), [p.detach().numpy().copy() for p in model.parameters()]

    plain = step()
    with _Observer() as obs:
        assert dispatch.current_protocol() is obs and dispatch._hooked_threads == 1
        assert not dispatch.tracing()  # it observes, it does not record
        seen = step()
    assert dispatch.current_protocol() is EAGER and dispatch._hooked_threads == 0
    assert seen[0] == plain[0]
    for a, b in zip(seen[1], plain[1]):
        np.testing.assert_array_equal(a, b)
    kinds = {e[0] for e in obs.events}
    assert {"apply", "created", "grad", "read", "write"} <= kinds, kinds
    assert ("created", True) in obs.events and ("created", False) in obs.events
    assert ("grad", True) in obs.events and ("grad", False) in obs.events
    assert ("write", "lr") in obs.events
    assert any(e[0] == "read" and e[2] == dispatch.LIVE for e in obs.events)


def test_live_scalar_reaches_the_protocol_only_while_one_is_installed():
    assert dispatch.live_scalar(lambda: 2.0, name="a") == 2.0
    with _Observer() as obs:
        assert dispatch.live_scalar(lambda: 2.0, name="a") == 2.0
    assert obs.events == [("live", "a")]


def test_protocols_nest_and_the_count_of_hooked_threads_follows():
    with _Observer() as outer:
        with _Observer() as inner:
            eager.exp(eager.ones(1))
            assert dispatch.current_protocol() is inner and dispatch._hooked_threads == 1
        eager.exp(eager.ones(1))
        assert dispatch.current_protocol() is outer
    assert dispatch._hooked_threads == 0
    assert ("apply", "exp") in inner.events and ("apply", "exp") in outer.events


def test_the_structure_epoch_is_the_protocol_module_s_and_module_writes_move_it():
    from eager.nn import module

    assert module.STRUCTURE_EPOCH is STRUCTURE_EPOCH
    m = nn.Linear(2, 2)
    before = STRUCTURE_EPOCH[0]
    m.scale = 2.0
    assert STRUCTURE_EPOCH[0] > before
    before = STRUCTURE_EPOCH[0]
    m.eval()
    assert STRUCTURE_EPOCH[0] > before
