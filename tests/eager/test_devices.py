"""Devices as PyTorch CPU code writes them, inference_mode and set_grad_enabled (issue 16
item 1), eager and compiled."""
import numpy as np
import pytest

import eager
import tracer
from eager import nn
from eager.nn import functional as F

BACKENDS = ["numba", "interpret"]


def test_device_objects_parse_compare_and_print_like_pytorch():
    d = eager.device("cpu")
    assert d.type == "cpu" and d.index is None
    assert d == "cpu" and d == eager.device("cpu") and d != "cuda"
    assert repr(d) == "device(type='cpu')" and str(d) == "cpu"
    assert eager.device("cuda:1") == eager.device("cuda", 1)
    assert repr(eager.device("cuda", 1)) == "device(type='cuda', index=1)"
    assert hash(eager.device("cpu")) == hash(eager.device("cpu"))
    with pytest.raises(RuntimeError, match="device type"):
        eager.device("gpu")
    with pytest.raises(RuntimeError, match="Invalid device string"):
        eager.device("cpu:x")


def test_the_usual_device_idiom_runs_on_the_cpu():
    device = eager.device("cuda" if eager.cuda.is_available() else "cpu")
    assert eager.cuda.is_available() is False and eager.cuda.device_count() == 0
    state = eager.get_rng_state()
    eager.cuda.manual_seed_all(1234)  # a no-op: the CPU generator does not move
    eager.cuda.manual_seed(1234)
    assert eager.get_rng_state() == state
    made = [
        eager.tensor([1.0, 2.0], device=device), eager.zeros(2, 3, device=device),
        eager.ones(2, device="cpu"), eager.full((2,), 3.0, device="cpu:0"),
        eager.arange(4, device=device), eager.linspace(0, 1, 5, device=device),
        eager.eye(3, device=device), eager.rand(2, device=device),
        eager.randn(2, device=device), eager.randint(0, 5, (3,), device=device),
        eager.zeros_like(eager.ones(2), device=device),
        eager.ones_like(eager.ones(2), device=device),
        eager.full_like(eager.ones(2), 7, device=device),
        eager.rand_like(eager.ones(2), device=device),
        eager.randn_like(eager.ones(2), device=device),
    ]
    for t in made:
        assert t.device == device and t.device.type == "cpu"
        assert t.is_cuda is False and t.is_cpu
    x = eager.randn(3, 4, device=device)
    assert x.to(device) is x and x.cpu() is x and x.to("cpu") is x
    y = x.to(device, eager.float64)
    assert y.dtype == eager.float64 and np.array_equal(y.numpy(), x.numpy().astype(np.float64))
    assert x.to(eager.ones(1, dtype=eager.int32)).dtype == eager.int32
    assert x.to(device=device, dtype=eager.float64).dtype == eager.float64
    assert x.to(eager.float64).dtype == eager.float64
    c = x.to(device, copy=True)
    assert c is not x and np.array_equal(c.numpy(), x.numpy())
    c.add_(1.0)
    assert not np.array_equal(c.numpy(), x.numpy())


@pytest.mark.parametrize("make", [
    lambda: eager.zeros(2, device="cuda"),
    lambda: eager.tensor([1.0], device=eager.device("cuda", 0)),
    lambda: eager.ones(2).to("cuda"),
    lambda: eager.ones(2).to(eager.device("cuda:0"), eager.float64),
    lambda: eager.ones(2).cuda(),
    lambda: nn.Linear(2, 2).to("cuda"),
    lambda: nn.Linear(2, 2).cuda(),
    lambda: nn.Linear(2, 2, device="cuda"),
    lambda: eager.randn(2, device="mps"),
], ids=["zeros", "tensor", "to", "to_dtype", "cuda", "module_to", "module_cuda",
        "layer_ctor", "mps"])
def test_a_non_cpu_device_raises_naming_the_cpu_only_runtime_and_the_line(make):
    with pytest.raises(RuntimeError, match="CPU only") as info:
        make()
    assert "test_devices.py" in str(info.value)


def test_accelerator_switches_scripts_set_are_accepted_and_report_no_accelerator():
    eager.backends.cuda.matmul.allow_tf32 = True
    eager.backends.cudnn.allow_tf32 = True
    eager.backends.cudnn.benchmark = True
    assert eager.backends.mps.is_available() is False
    assert eager.backends.cudnn.is_available() is False
    x = eager.ones(2)
    assert x.pin_memory() is x and not x.is_pinned()
    with pytest.raises(RuntimeError, match="CPU only"):
        eager.cuda.current_device()


def test_default_device_is_the_cpu():
    eager.set_default_device("cpu")
    eager.set_default_device(None)
    assert eager.get_default_device() == eager.device("cpu")
    assert eager.ones(1).get_device() == -1
    with pytest.raises(RuntimeError, match="CPU only"):
        eager.set_default_device("cuda")
    with eager.device("cpu"):
        assert eager.zeros(1).device.type == "cpu"


def test_as_tensor_shares_numpy_memory_and_takes_dtype_and_device():
    a = np.ones(3, np.float32)
    t = eager.as_tensor(a, device="cpu")
    a[0] = 5.0
    assert t.tolist() == [5.0, 1.0, 1.0]
    assert eager.as_tensor(t) is t and eager.as_tensor(t, dtype=eager.float64).dtype == \
        eager.float64
    assert eager.as_tensor([1, 2], dtype=eager.float64).tolist() == [1.0, 2.0]
    with pytest.raises(RuntimeError, match="CPU only"):
        eager.as_tensor(a, device="cuda")


def test_to_rejects_what_is_neither_a_device_nor_a_dtype():
    with pytest.raises(TypeError):
        eager.ones(2).to("float128x")
    with pytest.raises(TypeError, match="floating point"):
        nn.Linear(2, 2).to(eager.int64)


def test_module_to_and_cpu_keep_the_parameter_objects_and_cast_floating_state():
    m = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
    m[1].register_buffer("steps", eager.zeros(1, dtype=eager.int64))
    m[1].register_buffer("scale", eager.ones(4))
    params = list(m.parameters())
    before = [p.detach().numpy().copy() for p in params]
    assert m.to(eager.device("cpu")) is m and m.cpu() is m
    opt = eager.optim.SGD(m.parameters(), lr=0.1)
    m.to(eager.float64)
    assert [id(p) for p in m.parameters()] == [id(p) for p in params]
    for p, b in zip(m.parameters(), before):
        assert p.dtype == eager.float64 and p.requires_grad
        np.testing.assert_array_equal(p.detach().numpy(), b.astype(np.float64))
    assert m[1].steps.dtype == eager.int64 and m[1].scale.dtype == eager.float64
    # The optimizer built before .to() still updates the same parameters.
    (m(eager.randn(2, 3, dtype=eager.float64)) * eager.arange(4.0, dtype=eager.float64)) \
        .sum().backward()
    opt.step()
    assert m[0].weight.dtype == eager.float64
    assert not np.array_equal(m[0].weight.detach().numpy(), before[0].astype(np.float64))
    m.float()
    assert all(p.dtype == eager.float32 for p in m.parameters())


# ------------------------------------------------------------------ grad modes

def test_inference_mode_as_context_manager_and_decorator():
    x = eager.ones(2, requires_grad=True)
    with eager.inference_mode():
        assert not eager.is_grad_enabled()
        assert not (x * 2).requires_grad
    assert eager.is_grad_enabled()
    with eager.inference_mode(False):
        assert (x * 2).requires_grad

    @eager.inference_mode()
    def called():
        return (x * 2).requires_grad, eager.is_grad_enabled()

    @eager.inference_mode
    def bare():
        return (x * 2).requires_grad

    assert called() == (False, False) and bare() is False
    assert eager.is_grad_enabled()
    assert called.__name__ == "called" and bare.__name__ == "bare"


def test_set_grad_enabled_as_call_context_manager_and_decorator():
    x = eager.ones(2, requires_grad=True)

    @eager.set_grad_enabled(False)
    def frozen():
        return (x * 2).requires_grad

    assert eager.is_grad_enabled()  # decorating does not switch the mode
    assert frozen() is False and eager.is_grad_enabled()
    with eager.set_grad_enabled(False):
        assert not (x * 2).requires_grad
    assert eager.is_grad_enabled()
    eager.set_grad_enabled(False)
    try:
        assert not eager.is_grad_enabled()
    finally:
        eager.set_grad_enabled(True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_inference_mode_inside_and_around_compiled_calls(backend):
    eager.manual_seed(3)
    lin = nn.Linear(8, 4)
    x = eager.randn(5, 8)

    def inner(x):
        with eager.inference_mode():
            y = lin(x).relu()
        return y * 2.0

    def plain(x):
        return lin(x).tanh()

    f_inner = tracer.function(inner, backend=backend)
    f_plain = tracer.function(plain, backend=backend)
    got = f_inner(x)
    want = inner(x)
    assert not got.requires_grad and not want.requires_grad
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)

    with eager.inference_mode():
        out = f_plain(x)
    assert not out.requires_grad
    np.testing.assert_allclose(out.numpy(), plain(x).detach().numpy(), rtol=1e-6, atol=1e-6)
    # Outside it again, the compiled call records history as eager does.
    out = f_plain(x)
    assert out.requires_grad
    out.sum().backward()
    g_compiled = lin.weight.grad.numpy().copy()
    lin.zero_grad()
    plain(x).sum().backward()
    np.testing.assert_allclose(g_compiled, lin.weight.grad.numpy(), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ compiled state changes

def _step_pair(backend):
    """The same model, loss and optimizer twice: one stepped by a compiled function, one
    eagerly."""
    eager.manual_seed(11)
    m1 = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    m2 = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    m2.load_state_dict(m1.state_dict())
    o1 = eager.optim.SGD(m1.parameters(), lr=0.1)
    o2 = eager.optim.SGD(m2.parameters(), lr=0.1)

    def step(model, opt, x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    compiled = tracer.function(lambda x, y: step(m1, o1, x, y), backend=backend)
    return m1, m2, compiled, lambda x, y: step(m2, o2, x, y)


def _same(m1, m2):
    for (n1, p1), (n2, p2) in zip(m1.named_parameters(), m2.named_parameters()):
        assert n1 == n2 and p1.dtype == p2.dtype
        np.testing.assert_allclose(p1.detach().numpy(), p2.detach().numpy(), rtol=1e-5,
                                   atol=1e-6, err_msg=n1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_module_to_float64_between_compiled_steps_is_seen(backend):
    m1, m2, compiled, eager_step = _step_pair(backend)
    x, y = eager.randn(4, 6), eager.randint(0, 3, (4,))
    for _ in range(2):
        assert compiled(x, y).item() == pytest.approx(eager_step(x, y).item(), rel=1e-5)
    m1.to(eager.float64)
    m2.to(eager.float64)
    with eager.no_grad():  # float32-level differences of the first steps would hide float64's
        for p1, p2 in zip(m1.parameters(), m2.parameters()):
            p2.copy_(p1)
    x64 = x.to(eager.float64)
    for _ in range(2):
        got, want = compiled(x64, y), eager_step(x64, y)
        assert got.dtype == want.dtype == eager.float64
        assert got.item() == pytest.approx(want.item(), rel=1e-9)
    _same(m1, m2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_requires_grad_false_between_compiled_steps_freezes_the_layer(backend):
    m1, m2, compiled, eager_step = _step_pair(backend)
    x, y = eager.randn(4, 6), eager.randint(0, 3, (4,))
    for _ in range(2):
        compiled(x, y)
        eager_step(x, y)
    m1[0].requires_grad_(False)
    m2[0].requires_grad_(False)
    frozen = m1[0].weight.detach().numpy().copy()
    for _ in range(3):
        assert compiled(x, y).item() == pytest.approx(eager_step(x, y).item(), rel=1e-5)
    np.testing.assert_array_equal(m1[0].weight.detach().numpy(), frozen)
    _same(m1, m2)
    # And back: the layer trains again.
    m1.requires_grad_(True)
    m2.requires_grad_(True)
    for _ in range(2):
        assert compiled(x, y).item() == pytest.approx(eager_step(x, y).item(), rel=1e-5)
    assert not np.array_equal(m1[0].weight.detach().numpy(), frozen)
    _same(m1, m2)
