"""Containers and the module API (issue 16 item 2): ModuleDict, ParameterList, ParameterDict,
Flatten, Unflatten, buffers, state_dict order and tied weights, get_submodule, apply,
requires_grad_, zero_grad; a compiled training step over a container model."""
import numpy as np
import pytest

import eager
import tracer
from eager import nn
from eager.nn import functional as F

BACKENDS = ["numba", "interpret"]


def test_module_dict_registers_in_order_and_behaves_like_a_dict():
    heads = nn.ModuleDict({"b": nn.Linear(2, 3), "a": nn.Linear(3, 1)})
    heads["c"] = nn.Tanh()
    heads.update([("d", nn.Linear(1, 1, bias=False))])
    assert list(heads.keys()) == ["b", "a", "c", "d"] and len(heads) == 4
    assert "a" in heads and "z" not in heads and list(heads) == ["b", "a", "c", "d"]
    assert [n for n, _ in heads.named_parameters()] == [
        "b.weight", "b.bias", "a.weight", "a.bias", "d.weight"]
    del heads["d"]
    assert list(heads.keys()) == ["b", "a", "c"]
    assert isinstance(heads.pop("c"), nn.Tanh) and len(heads) == 2
    with pytest.raises(TypeError, match="not a Module"):
        heads["x"] = eager.ones(2)
    with pytest.raises(KeyError):
        heads["missing"]
    x = eager.randn(4, 2)
    np.testing.assert_allclose(heads["a"](heads["b"](x)).detach().numpy(),
                               F.linear(F.linear(x, heads.b.weight, heads.b.bias),
                                        heads.a.weight, heads.a.bias).detach().numpy())


def test_module_list_edits_keep_positional_names():
    blocks = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    first, last = blocks[0], blocks[-1]
    blocks += [nn.Tanh()]
    blocks.insert(0, nn.ReLU())
    assert [type(b).__name__ for b in blocks] == ["ReLU", "Linear", "Linear", "Linear", "Tanh"]
    assert blocks[1] is first and blocks[3] is last
    del blocks[0]
    blocks[3] = nn.Sigmoid()
    assert isinstance(blocks[1:3], nn.ModuleList) and len(blocks[1:3]) == 2
    assert list(blocks.state_dict()) == ["0.weight", "0.bias", "1.weight", "1.bias",
                                         "2.weight", "2.bias"]
    assert isinstance(blocks[3], nn.Sigmoid)
    with pytest.raises(IndexError):
        blocks[7] = nn.ReLU()


def test_parameter_list_and_dict_register_wrap_and_index():
    plist = nn.ParameterList([nn.Parameter(eager.ones(2)), eager.zeros(3)])
    plist.append(eager.full((1,), 5.0))
    assert len(plist) == 3 and all(isinstance(p, nn.Parameter) for p in plist)
    assert plist[-1].tolist() == [5.0] and plist[1].shape == (3,)
    assert [n for n, _ in plist.named_parameters()] == ["0", "1", "2"]
    assert all(p.requires_grad for p in plist.parameters())
    with pytest.raises(IndexError):
        plist[3]
    pdict = nn.ParameterDict({"scale": eager.ones(2)})
    pdict["shift"] = nn.Parameter(eager.zeros(2))
    assert list(pdict.keys()) == ["scale", "shift"] and "shift" in pdict
    assert [n for n, _ in pdict.named_parameters()] == ["scale", "shift"]
    assert isinstance(pdict["scale"], nn.Parameter)
    with pytest.raises(TypeError):
        pdict["bad"] = 3.0


def test_flatten_and_unflatten_match_numpy_and_backpropagate():
    x = eager.randn(2, 3, 4, 5, requires_grad=True)
    y = nn.Flatten()(x)
    assert y.shape == (2, 60)
    np.testing.assert_array_equal(y.detach().numpy(), x.detach().numpy().reshape(2, 60))
    assert nn.Flatten(0, 2)(x).shape == (24, 5)
    z = nn.Unflatten(1, (6, 10))(y)
    assert z.shape == (2, 6, 10)
    assert nn.Unflatten(-1, (2, -1))(y).shape == (2, 2, 30)
    (z * eager.arange(10.0)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(),
                                  np.broadcast_to(np.arange(10.0), (2, 6, 10))
                                  .reshape(2, 3, 4, 5))
    assert repr(nn.Flatten()) == "Flatten(start_dim=1, end_dim=-1)"
    with pytest.raises(TypeError):
        nn.Unflatten(1, 6)


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(eager.ones(2))
        self.register_buffer("mask", eager.ones(2, 2))
        self.child = nn.Linear(2, 2)
        self.register_buffer("cache", eager.zeros(2), persistent=False)
        self.d = nn.Parameter(eager.zeros(1))


def test_state_dict_key_order_follows_pytorch_and_skips_non_persistent_buffers():
    m = _Block()
    # PyTorch: a module's own parameters, then its persistent buffers, then each child.
    assert list(m.state_dict()) == ["a", "d", "mask", "child.weight", "child.bias"]
    assert [n for n, _ in m.named_buffers()] == ["mask", "cache"]
    assert [n for n, _ in m.named_buffers(recurse=False)] == ["mask", "cache"]
    outer = nn.Sequential(m, nn.Linear(2, 1))
    assert list(outer.state_dict())[:3] == ["0.a", "0.d", "0.mask"]
    assert [n for n, _ in outer.named_buffers()] == ["0.mask", "0.cache"]
    sd = m.state_dict()
    assert not sd["a"].requires_grad
    assert m.state_dict(keep_vars=True)["a"] is m.a
    # Buffers load back; a non-persistent one is neither expected nor overwritten.
    m2 = _Block()
    m2.cache.fill_(7.0)
    sd["mask"] = eager.full((2, 2), 3.0)
    result = m2.load_state_dict(sd)
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert m2.mask.tolist() == [[3.0, 3.0], [3.0, 3.0]] and m2.cache.tolist() == [7.0, 7.0]
    # Re-registering as persistent puts it back in the state.
    m2.register_buffer("cache", m2.cache, persistent=True)
    assert "cache" in m2.state_dict()
    m2.register_buffer("cache", m2.cache, persistent=False)
    del m2.cache
    m2.register_buffer("cache", eager.zeros(2))
    assert "cache" in m2.state_dict()


def test_register_buffer_rejects_bad_names_and_values_as_pytorch():
    m = nn.Linear(2, 2)
    with pytest.raises(KeyError):
        m.register_buffer("a.b", eager.ones(1))
    with pytest.raises(KeyError):
        m.register_buffer("weight", eager.ones(1))
    with pytest.raises(TypeError):
        m.register_buffer("x", [1.0])
    m.register_buffer("empty", None)
    assert "empty" not in m.state_dict() and m.empty is None


class _TinyGPTHead(nn.Module):
    """nanoGPT's weight tying: the output projection shares the embedding matrix."""

    def __init__(self, vocab=11, dim=4):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(wte=nn.Embedding(vocab, dim),
                                              ln_f=nn.LayerNorm(dim)))
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight

    def forward(self, idx):
        return self.lm_head(self.transformer.ln_f(self.transformer.wte(idx)))


def test_tied_weights_keep_both_names_in_the_state_dict():
    m = _TinyGPTHead()
    keys = list(m.state_dict())
    assert keys == ["transformer.wte.weight", "transformer.ln_f.weight",
                    "transformer.ln_f.bias", "lm_head.weight"]
    # named_parameters() still lists the shared tensor once (optimizers see it once)...
    assert [n for n, _ in m.named_parameters()] == [
        "transformer.wte.weight", "transformer.ln_f.weight", "transformer.ln_f.bias"]
    assert len(list(m.named_parameters(remove_duplicate=False))) == 4
    # ...and a strict load of its own state dict into a fresh model works and keeps the tie.
    fresh = _TinyGPTHead()
    fresh.load_state_dict(m.state_dict())
    assert fresh.lm_head.weight is fresh.transformer.wte.weight
    np.testing.assert_array_equal(fresh.lm_head.weight.detach().numpy(),
                                  m.lm_head.weight.detach().numpy())


def test_get_submodule_parameter_buffer():
    m = nn.Sequential(_Block(), nn.Linear(2, 1))
    assert m.get_submodule("0.child") is m[0].child and m.get_submodule("") is m
    assert m.get_parameter("0.child.weight") is m[0].child.weight
    assert m.get_buffer("0.mask") is m[0].mask
    with pytest.raises(AttributeError, match="nope"):
        m.get_submodule("0.nope")
    with pytest.raises(AttributeError):
        m.get_parameter("0.mask")


def test_apply_requires_grad_and_zero_grad():
    m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    seen = []

    def init(mod):
        seen.append(type(mod).__name__)
        if isinstance(mod, nn.Linear):
            nn.init.zeros_(mod.bias)

    assert m.apply(init) is m
    assert seen == ["Linear", "ReLU", "Linear", "Sequential"]  # children first, as PyTorch
    assert all(not p.detach().numpy().any() for p in (m[0].bias, m[2].bias))
    m(eager.randn(2, 3)).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())
    m(eager.randn(2, 3)).sum().backward()
    m.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.numpy().any() for p in m.parameters())
    assert m.requires_grad_(False) is m
    assert not any(p.requires_grad for p in m.parameters())
    assert not m(eager.randn(2, 3)).requires_grad
    m[2].requires_grad_()
    assert [p.requires_grad for p in m.parameters()] == [False, False, True, True]


def test_copy_under_no_grad_between_modules_takes_no_history():
    a, b = nn.Linear(3, 3), nn.Linear(3, 3)
    b(eager.randn(1, 3))  # b.weight now has a (transposed) view of it
    with eager.no_grad():
        for pa, pb in zip(a.parameters(), b.parameters()):
            pb.copy_(pa * 2.0 if pa.ndim == 1 else pa)
    assert b.weight.is_leaf and b.bias.is_leaf and b.bias.grad_fn is None
    np.testing.assert_array_equal(b.weight.detach().numpy(), a.weight.detach().numpy())
    np.testing.assert_array_equal(b.bias.detach().numpy(), a.bias.detach().numpy() * 2)


# ------------------------------------------------------------------ compiled

class _Mixture(nn.Module):
    """Experts in a ModuleDict, per-expert gates in a ParameterList and a ParameterDict."""

    def __init__(self):
        super().__init__()
        self.experts = nn.ModuleDict({"relu": nn.Sequential(nn.Linear(6, 8), nn.ReLU()),
                                      "tanh": nn.Sequential(nn.Linear(6, 8), nn.Tanh())})
        self.gates = nn.ParameterList([eager.full((8,), 0.5), eager.full((8,), 1.5)])
        self.out = nn.ParameterDict({"w": nn.Parameter(eager.randn(8, 3) * 0.3),
                                     "b": eager.zeros(3)})
        self.flat = nn.Flatten()
        self.register_buffer("offset", eager.full((3,), 0.1))

    def forward(self, x):
        x = self.flat(x)
        h = sum(g * e(x) for g, e in zip(self.gates, self.experts.values()))
        return h @ self.out["w"] + self.out["b"] + self.offset


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_training_step_over_container_model_matches_eager(backend):
    eager.manual_seed(5)
    m1 = _Mixture()
    m2 = _Mixture()
    m2.load_state_dict(m1.state_dict())
    assert len(list(m1.parameters())) == 8
    o1 = eager.optim.Adam(m1.parameters(), lr=1e-2)
    o2 = eager.optim.Adam(m2.parameters(), lr=1e-2)
    x = eager.randn(5, 2, 3)
    y = eager.randint(0, 3, (5,))

    def step(model, opt, x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    compiled = tracer.function(lambda x, y: step(m1, o1, x, y), backend=backend)
    for _ in range(5):
        got = compiled(x, y)
        want = step(m2, o2, x, y)
        assert got.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-6)
    assert compiled.trace_count == 1
    for (n, p1), p2 in zip(m1.state_dict().items(), m2.state_dict().values()):
        np.testing.assert_allclose(p1.numpy(), p2.numpy(), rtol=1e-5, atol=1e-6, err_msg=n)
    # Replacing a gate through the container is seen by the compiled step.
    for m in (m1, m2):
        m.gates[0] = nn.Parameter(eager.full((8,), -1.0))
    o1.add_param_group({"params": [m1.gates[0]]})
    o2.add_param_group({"params": [m2.gates[0]]})
    for _ in range(2):
        got = compiled(x, y)
        want = step(m2, o2, x, y)
        assert got.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-6)
    np.testing.assert_allclose(m1.gates[0].detach().numpy(), m2.gates[0].detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    # So is a buffer replaced by assignment, and one re-registered.
    for m in (m1, m2):
        m.offset = eager.full((3,), -2.0)
    assert "offset" in dict(m1.named_buffers())
    assert compiled(x, y).item() == pytest.approx(step(m2, o2, x, y).item(), rel=1e-5)
    for m in (m1, m2):
        m.register_buffer("offset", eager.tensor([0.5, -0.5, 3.0]))
    assert compiled(x, y).item() == pytest.approx(step(m2, o2, x, y).item(), rel=1e-5)
