"""Pinned IR printouts (exact strings) and the Graphviz rendering.

Printouts name the user's line (`test_printing.py:N`).  Line numbers are not written by
hand: `line(fn, marker)` finds the line of `fn`'s source that contains `marker`, so moving a
function inside this file does not break the pins, while any change to the IR text does.
"""
import inspect
import re

import numpy as np

import eager
import eager.nn as nn
import eager.nn.functional as F
import tracer
from tracer.passes import optimize

HERE = "test_printing.py"


def line(fn, marker: str) -> str:
    """`test_printing.py:N` for the line of `fn` (a @function or plain function) with `marker`."""
    fn = getattr(fn, "__wrapped__", fn)
    source, start = inspect.getsourcelines(fn)
    hits = [start + i for i, text in enumerate(source) if marker in text]
    assert len(hits) == 1, f"marker {marker!r} found {len(hits)} times in {fn.__name__}"
    return f"{HERE}:{hits[0]}"


def checked(cf):
    """Every graph we print also verifies, before and after the passes."""
    tracer.verify(cf.raw_graph)
    tracer.verify(cf.graph)
    tracer.verify(optimize(cf.raw_graph))
    return cf


# --------------------------------------------------------------------------------------
# GELU (tanh approximation)

@tracer.function(backend="interpret")
def gelu(x):
    return F.gelu(x, approximate="tanh")  # gelu-line


def test_gelu_printout():
    x = eager.randn(1024, 1024)
    cf = checked(gelu.get_concrete_function(x))
    at = line(gelu, "gelu-line")
    expected = f"""\
def gelu(%x: f32[1024,1024]) -> f32[1024,1024]:
  %0 = mul %x, %x                           f32[1024,1024]   {at}
  %1 = mul %0, %x                           f32[1024,1024]   {at}
  %2 = mul %1, 0.044715:f32                 f32[1024,1024]   {at}
  %3 = add %x, %2                           f32[1024,1024]   {at}
  %4 = mul %3, 0.7978846:f32                f32[1024,1024]   {at}
  %5 = mul %x, 0.5:f32                      f32[1024,1024]   {at}
  %6 = tanh %4                              f32[1024,1024]   {at}
  %7 = add %6, 1.0:f32                      f32[1024,1024]   {at}
  %8 = mul %5, %7                           f32[1024,1024]   {at}
  return %8"""
    assert str(cf.graph) == expected
    # The concrete function shows the IR, then what the backend made of it.
    assert str(cf) == expected + "\nbackend: interpret (numpy, op by op)"
    assert repr(cf) == "<ConcreteFunction gelu x: f32[1024,1024]>"
    np.testing.assert_allclose(gelu(x).numpy(), F.gelu(x, approximate="tanh").numpy(),
                               rtol=1e-6, atol=1e-7)


# --------------------------------------------------------------------------------------
# the seed MLP

def _mlp():
    eager.manual_seed(0)
    return nn.Sequential(nn.Linear(100, 128), nn.ReLU(), nn.Linear(128, 10))


model = _mlp()


@tracer.function(backend="interpret")
def mlp_forward(x):
    return model(x)  # mlp-line


def test_seed_mlp_printout_under_no_grad():
    x = eager.randn(32, 100)
    with eager.no_grad():
        y = mlp_forward(x)
        cf = checked(mlp_forward.get_concrete_function(x))
        expect_y = model(x)
    np.testing.assert_allclose(y.numpy(), expect_y.numpy(), rtol=1e-5, atol=1e-6)
    assert mlp_forward.trace_count == 1
    at = line(mlp_forward, "mlp-line")
    assert str(cf.graph) == f"""\
def mlp_forward(%x: f32[32,100]) -> f32[32,10]:
  capture %k0: f32[128,100] = model.0.weight
  capture %k1: f32[128] = model.0.bias
  capture %k2: f32[10,128] = model.2.weight
  capture %k3: f32[10] = model.2.bias
  %0 = permute[perm=(1,0)] %k0              f32[100,128]     {at}
  %1 = matmul %x, %0                        f32[32,128]      {at}
  %2 = add %1, %k1                          f32[32,128]      {at}
  %3 = relu %2                              f32[32,128]      {at}
  %4 = permute[perm=(1,0)] %k2              f32[128,10]      {at}
  %5 = matmul %3, %4                        f32[32,10]       {at}
  %6 = add %5, %k3                          f32[32,10]       {at}
  return %6"""


def test_seed_mlp_with_frozen_parameters_compiles_with_grad_enabled():
    frozen = _mlp()
    for p in frozen.parameters():
        p.requires_grad_(False)

    @tracer.function(backend="interpret")
    def forward(x):
        return frozen(x)

    x = eager.randn(32, 100)
    y = forward(x)
    assert y.grad_fn is None and not y.requires_grad
    cf = checked(forward.get_concrete_function(x))
    assert cf.graph.capture_names == ("frozen.0.weight", "frozen.0.bias", "frozen.2.weight",
                                      "frozen.2.bias")
    assert cf.graph.op_counts() == {"permute": 2, "matmul": 2, "add": 2, "relu": 1}
    np.testing.assert_allclose(y.numpy(), frozen(x).numpy(), rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------
# captures: a closure tensor and module parameters

def _make_scaled():
    eager.manual_seed(1)
    layer = nn.Linear(4, 3)
    scale = eager.tensor([1.0, 2.0, 3.0])

    def scaled(x):
        h = layer(x)  # layer-line
        return h * scale  # scale-line

    return tracer.function(scaled, backend="interpret"), layer, scale


def test_captures_printout_names_their_sources():
    scaled, layer, scale = _make_scaled()
    x = eager.randn(2, 4)
    with eager.no_grad():
        cf = checked(scaled.get_concrete_function(x))
        expected = (layer(x) * scale).numpy()
        np.testing.assert_allclose(scaled(x).numpy(), expected, rtol=1e-6)
    a, b = line(scaled, "layer-line"), line(scaled, "scale-line")
    assert str(cf.graph) == f"""\
def scaled(%x: f32[2,4]) -> f32[2,3]:
  capture %k0: f32[3,4] = layer.weight
  capture %k1: f32[3] = layer.bias
  capture %k2: f32[3] = scale
  %0 = permute[perm=(1,0)] %k0              f32[4,3]         {a}
  %1 = matmul %x, %0                        f32[2,3]         {a}
  %2 = add %1, %k1                          f32[2,3]         {a}
  %3 = mul %2, %k2                          f32[2,3]         {b}
  return %3"""


# --------------------------------------------------------------------------------------
# cond

@tracer.function(backend="interpret")
def signed_scale(x):
    total = x.sum()  # sum-line
    return tracer.cond(total > 0,  # cond-line
                       lambda v: v * 2.0,  # true-line
                       lambda v: -v,  # false-line
                       x)


def test_cond_printout():
    x = eager.tensor([1.0, -2.0, 4.0])
    cf = checked(signed_scale.get_concrete_function(x))
    s, c = line(signed_scale, "sum-line"), line(signed_scale, "cond-line")
    t, f = line(signed_scale, "true-line"), line(signed_scale, "false-line")
    assert str(cf.graph) == f"""\
def signed_scale(%x: f32[3]) -> f32[3]:
  %0 = sum[axes=(0,), keepdim=False] %x     f32[]            {s}
  %1 = gt %0, 0.0:f32                       bool[]           {c}
  %4 = cond[n_operands=1] %1, %x            f32[3]           {c}
    true_graph:
      def true_branch(%op0: f32[3]) -> f32[3]:
        %2 = mul %op0, 2.0:f32              f32[3]           {t}
        return %2
    false_graph:
      def false_branch(%op0: f32[3]) -> f32[3]:
        %3 = neg %op0                       f32[3]           {f}
        return %3
  return %4"""
    np.testing.assert_array_equal(signed_scale(x).numpy(), [2.0, -4.0, 8.0])
    np.testing.assert_array_equal(signed_scale(-x).numpy(), [1.0, -2.0, 4.0])


# --------------------------------------------------------------------------------------
# updates: in-place changes of outside state and of arguments

steps = eager.zeros(())


@tracer.function(backend="interpret")
def count_and_bump(x):
    steps.add_(1)  # count-line
    x.mul_(2)  # bump-line
    return x + steps


def test_update_printout():
    x = eager.ones(3)
    cf = checked(count_and_bump.get_concrete_function(x))
    a, b = line(count_and_bump, "count-line"), line(count_and_bump, "bump-line")
    r = line(count_and_bump, "return x")
    assert str(cf.graph) == f"""\
def count_and_bump(%x: f32[3]) -> f32[3]:
  capture %k0: f32[] = steps
  %0 = add %k0, 1.0:f32                     f32[]            {a}
  %1 = mul %x, 2.0:f32                      f32[3]           {b}
  %2 = add %1, %0                           f32[3]           {r}
  update %k0.data <- %0
  update %x <- %1
  return %2"""
    # get_concrete_function traced without running: nothing changed yet.
    assert steps.item() == 0.0 and x.tolist() == [1.0, 1.0, 1.0]
    np.testing.assert_array_equal(count_and_bump(x).numpy(), [3.0, 3.0, 3.0])
    assert steps.item() == 1.0 and x.tolist() == [2.0, 2.0, 2.0]


def test_printouts_of_every_update_kind():
    """New optimizer state, a parameter's .grad and an argument's .grad all print."""
    eager.manual_seed(0)
    net = nn.Linear(3, 2)
    opt = eager.optim.Adam(net.parameters(), lr=0.01)

    @tracer.function(backend="interpret")
    def step(x, w):
        opt.zero_grad()
        loss = (net(x) * w).sum()
        loss.backward()
        opt.step()
        return loss

    x = eager.randn(4, 3)
    w = eager.randn(4, 2, requires_grad=True)
    text = str(checked(step.get_concrete_function(x, w)).graph)
    # Adam's first-step state is made as existing state: captures, updated like parameters.
    for piece in ["update %k0.data <-", "update %k0.grad <-", "update %k1.grad <-",
                  "update %w.grad <-", "capture %k0: f32[2,3] = net.weight",
                  "capture %k6: f32[] = opt.state[0]['step']", "update %k6.data <-",
                  "capture %k4: f64[] = optimizer.param_groups[0]['betas'][0], read at each call"]:
        assert piece in text, piece
    # SGD with dampening fills its first momentum buffer on a path of its own: new state.
    sgd = eager.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, dampening=0.5)

    @tracer.function(backend="interpret")
    def sgd_step(x):
        sgd.zero_grad()
        net(x).sum().backward()
        sgd.step()

    text = str(checked(sgd_step.get_concrete_function(x)).graph)
    assert "update new_state[0] <-" in text and "update new_state[1] <-" in text, text


# --------------------------------------------------------------------------------------
# Graphviz

def _dot_checks(graph):
    dot = graph.to_dot()
    assert dot.startswith(f'digraph "{graph.name}" {{\n') and dot.endswith("\n}")
    assert dot.count("{") == dot.count("}")
    boxes = re.findall(r'^  "e(\d+)" \[label="([^"\\]+)\\n([^"]*)", shape=box\];$', dot,
                       flags=re.M)
    assert [int(i) for i, _, _ in boxes] == list(range(len(graph.eqns)))
    assert [op for _, op, _ in boxes] == [e.op for e in graph.eqns]
    assert [loc for _, _, loc in boxes] == [e.loc for e in graph.eqns]
    declared = set(re.findall(r'^  ("[^"]+") \[', dot, flags=re.M))
    for a, b in re.findall(r'^  ("[^"]+") -> ("[^"]+");$', dot, flags=re.M):
        assert a in declared and b in declared, (a, b)
    return dot


def test_to_dot_has_one_box_per_equation_and_is_deterministic():
    x = eager.randn(32, 100)
    with eager.no_grad():
        graph = mlp_forward.get_concrete_function(x).graph
    dot = _dot_checks(graph)
    assert "model.0.weight" in dot  # captures are labelled with their source
    assert dot == graph.to_dot()
    for g in (gelu.get_concrete_function(eager.randn(3)).graph,
              signed_scale.get_concrete_function(eager.randn(3)).graph):
        _dot_checks(g)
    # Two separate traces of one function render identically (no object ids in the text).
    def body(v):
        return F.gelu(v, approximate="tanh")

    again = tracer.function(body, backend="interpret")
    other = tracer.function(body, backend="interpret")
    v = eager.randn(5)
    assert again.get_concrete_function(v).graph.to_dot() == \
        other.get_concrete_function(v).graph.to_dot()
