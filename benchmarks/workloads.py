"""The benchmark workloads: inputs, float64 references, and the eager / compiled versions.

Each workload is one `Workload` row: how to make its inputs (seeded numpy arrays, so
every process and every peer sees the same numbers), a float64 numpy reference that
every measured implementation is checked against before it is timed, and tolerances.

An implementation is built from the inputs into a `Runner`:

* `call()` is what gets timed (one forward, or one training step);
* `collect()` is what gets verified: the output of one call, or for a training step
  the losses, parameters and last gradients after `TRAIN_CHECK_STEPS` steps from the
  initial state (so `collect()` must run on a freshly built runner).

This module imports only numpy at the top; `eager` and `tracer` are imported by the
builders, so a peer process (numpy, PyTorch, JAX) never loads tracejit.

    >>> w = WORKLOADS["W1"]
    >>> inputs = w.inputs()
    >>> runner = build_compiled(w, inputs)
    >>> w.verify(runner.collect(), inputs)["verified"]
    True
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from . import cnn, gpt, lstm_lm, trainrefs
from .timing import NormTolerance, Tolerance, compare

__all__ = [
    "BETAS",
    "EPS",
    "LR",
    "TRAIN_CHECK_STEPS",
    "WORKLOADS",
    "Runner",
    "Workload",
    "build_compiled",
    "build_eager",
    "mlp_init",
    "train_reference",
]

SEED = 20240601
LR, BETAS, EPS = 1e-3, (0.9, 0.999), 1e-8
TRAIN_CHECK_STEPS = 3
GELU_C = math.sqrt(2.0 / math.pi)


@dataclass
class Runner:
    call: Callable[[], object]
    collect: Callable[[], dict[str, np.ndarray]]
    info: Callable[[], dict] = field(default=dict)   # may trace: call it last
    function: object = None       # the tracer.Function, for its trace_count


@dataclass
class Workload:
    key: str                      # "W1"
    name: str                     # "GELU (tanh)"
    shape: str                    # how the table describes the problem size
    kind: str                     # "pure" (a function of its inputs) or "train" (a step)
    make_inputs: Callable[[np.random.Generator], dict]
    reference: Callable[[dict], dict[str, np.ndarray]]
    tolerance: dict[str, Tolerance]
    memory_bound: bool = False    # compare with x.copy() of the same bytes
    layers: tuple = ()            # training and MLP workloads: layer widths
    _expected: object = field(default=None, repr=False, compare=False)

    def inputs(self) -> dict:
        return self.make_inputs(np.random.default_rng(SEED))

    def expected(self, inputs: dict) -> dict:
        """The float64 reference for `inputs` (computed once per inputs object)."""
        cached = getattr(self, "_expected", None)
        if cached is None or cached[0] is not inputs:
            cached = (inputs, self.reference(inputs))
            self._expected = cached
        return cached[1]

    def verify(self, got: dict[str, np.ndarray], inputs: dict) -> dict:
        ref = dict(self.expected(inputs))
        bases = ref.pop("_bases", None)
        return compare(got, ref, self.tolerance, bases, ref.pop("_free", None))


# --------------------------------------------------------------------------------------
# inputs

def mlp_init(rng: np.random.Generator, layers: tuple) -> list:
    """[w0, b0, w1, b1, ...] in float32, initialized as torch.nn.Linear does."""
    params = []
    for fan_in, fan_out in zip(layers[:-1], layers[1:]):
        bound = 1.0 / math.sqrt(fan_in)
        params.append(rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32))
        params.append(rng.uniform(-bound, bound, (fan_out,)).astype(np.float32))
    return params


def _normal(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _mlp_inputs(layers, batch, with_labels):
    def make(rng):
        d = {"x": _normal(rng, (batch, layers[0])), "params": mlp_init(rng, layers)}
        if with_labels:
            d["y"] = rng.integers(0, layers[-1], (batch,)).astype(np.int64)
        return d
    return make


# --------------------------------------------------------------------------------------
# float64 references (written for clarity, not speed)

def _f64(a):
    return np.asarray(a, dtype=np.float64)


def ref_gelu(inputs):
    x = _f64(inputs["x"])
    return {"out": 0.5 * x * (1.0 + np.tanh(GELU_C * (x + 0.044715 * x ** 3)))}


def ref_softmax(inputs):
    x = _f64(inputs["x"])
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return {"out": e / e.sum(axis=-1, keepdims=True)}


def ref_layer_norm(inputs):
    x = _f64(inputs["x"])
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return {"out": (x - mu) / np.sqrt(var + 1e-5) * _f64(inputs["w"]) + _f64(inputs["b"])}


def _ref_forward(params, x):
    """Activations of the MLP: [input, pre-activation 1, hidden 1, ..., logits]."""
    acts = [x]
    h = x
    n_layers = len(params) // 2
    for i in range(n_layers):
        z = h @ params[2 * i].T + params[2 * i + 1]
        acts.append(z)
        h = np.maximum(z, 0.0) if i < n_layers - 1 else z
        if i < n_layers - 1:
            acts.append(h)
    return acts


def ref_mlp_forward(inputs):
    params = [_f64(p) for p in inputs["params"]]
    return {"out": _ref_forward(params, _f64(inputs["x"]))[-1]}


def train_reference(params, x, y, steps):
    """`steps` Adam steps on cross-entropy in float64: the losses, the parameters after
    the last step and the gradients of the last step (and the initial parameters, so
    that parameter updates are compared normwise with updates)."""
    initial = {f"param[{k}]": _f64(p) for k, p in enumerate(params)}
    params = [_f64(p).copy() for p in params]
    x = _f64(x)
    n = x.shape[0]
    rows = np.arange(n)
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    losses = []
    grads = None
    b1, b2 = BETAS
    n_layers = len(params) // 2
    for step in range(1, steps + 1):
        acts = _ref_forward(params, x)
        z = acts[-1]
        zmax = z.max(axis=1, keepdims=True)
        lse = zmax[:, 0] + np.log(np.exp(z - zmax).sum(axis=1))
        losses.append(np.mean(lse - z[rows, y]))
        p_soft = np.exp(z - lse[:, None])
        dz = p_soft.copy()
        dz[rows, y] -= 1.0
        dz /= n
        grads = [None] * len(params)
        for i in reversed(range(n_layers)):
            h_in = acts[2 * i]              # input of layer i (x or the ReLU output)
            grads[2 * i] = dz.T @ h_in
            grads[2 * i + 1] = dz.sum(axis=0)
            if i > 0:
                dh = dz @ params[2 * i]
                dz = dh * (acts[2 * i - 1] > 0)   # through the ReLU of layer i-1
        for k, (p, g) in enumerate(zip(params, grads)):
            m[k] = b1 * m[k] + (1 - b1) * g
            v[k] = b2 * v[k] + (1 - b2) * g * g
            bc1 = 1 - b1 ** step
            bc2 = 1 - b2 ** step
            denom = np.sqrt(v[k]) / math.sqrt(bc2) + EPS
            params[k] = p - (LR / bc1) * m[k] / denom
    out = {"loss": np.array(losses)}
    for k in range(len(params)):
        out[f"param[{k}]"] = params[k]
        out[f"grad[{k}]"] = grads[k]
    out["_bases"] = initial
    return out


def ref_train(inputs):
    return train_reference(inputs["params"], inputs["x"], inputs["y"], TRAIN_CHECK_STEPS)


def ref_affine(inputs):
    return {"out": _f64(inputs["x"]) * 2 + 1}


# --------------------------------------------------------------------------------------
# the workloads

# Losses elementwise; parameter updates (params - initial params) and the last step's
# gradients normwise. The last gradients are taken at parameters that already differ by
# float32 rounding of two Adam steps, so they get more room: torch.compile's Adam (its
# own operation order) lands at 1e-3 on W7, the rest at 1e-6; a wrong rule gives O(1).
_TRAIN_TOL = {"loss": Tolerance(rtol=5e-5, atol=0.0),
              "grad": NormTolerance(1e-2),
              "param": NormTolerance(1e-3)}

SEED_MLP = (100, 128, 10)
BIG_MLP = (1024, 1024, 1024, 10)

WORKLOADS: dict[str, Workload] = {w.key: w for w in [
    Workload("W1", "GELU (tanh)", "f32[16777216]", "pure",
             lambda rng: {"x": _normal(rng, (1 << 24,), 2.0)},
             ref_gelu, {"out": Tolerance(rtol=1e-5, atol=2e-6)}, memory_bound=True),
    Workload("W2", "softmax over rows", "f32[4096,1024]", "pure",
             lambda rng: {"x": _normal(rng, (4096, 1024), 2.0)},
             ref_softmax, {"out": Tolerance(rtol=1e-4, atol=1e-8)}, memory_bound=True),
    Workload("W3", "layer_norm (weight, bias)", "f32[4096,1024]", "pure",
             lambda rng: {"x": _normal(rng, (4096, 1024), 2.0) + np.float32(0.5),
                          "w": (1.0 + _normal(rng, (1024,), 0.1)).astype(np.float32),
                          "b": _normal(rng, (1024,), 0.1)},
             ref_layer_norm, {"out": Tolerance(rtol=1e-4, atol=2e-5)}, memory_bound=True),
    Workload("W4", "seed MLP forward, no_grad", "32x100 -> 128 -> 10", "pure",
             _mlp_inputs(SEED_MLP, 32, False),
             ref_mlp_forward, {"out": Tolerance(rtol=1e-4, atol=1e-5)}, layers=SEED_MLP),
    Workload("W5", "seed MLP training step", "32x100 -> 128 -> 10, CE, Adam", "train",
             _mlp_inputs(SEED_MLP, 32, True), ref_train, _TRAIN_TOL, layers=SEED_MLP),
    Workload("W6", "per-call overhead x*2+1", "f32[1]", "pure",
             lambda rng: {"x": np.array([1.5], np.float32)},
             ref_affine, {"out": Tolerance(rtol=1e-6, atol=0.0)}),
    Workload("W7", "larger MLP training step", "256x1024 -> 1024 -> 1024 -> 10, CE, Adam",
             "train", _mlp_inputs(BIG_MLP, 256, True), ref_train, _TRAIN_TOL, layers=BIG_MLP),
    Workload("W8", "LeNet-5 CNN training step", "64x1x28x28, conv 5x5 6/16, max-pool 2, "
             "400 -> 120 -> 84 -> 10, CE, SGD momentum", "train", cnn.cnn_inputs,
             cnn.ref_cnn_train, _TRAIN_TOL),
    Workload("W10", "LSTM language-model training step", "35x20 tokens, vocab 1000, "
             "2-layer LSTM 128, tied decoder, CE, clip 0.25, SGD", "train",
             lstm_lm.lm_inputs, lstm_lm.ref_lm_train, _TRAIN_TOL),
    Workload("W9", "GPT-2 style training step", "16x64 tokens, vocab 65, 2 pre-LN blocks "
             "width 128 4 heads, causal SDPA, GELU MLP, tied head, CE, clip 1.0, AdamW",
             "train", gpt.gpt_inputs, gpt.ref_gpt_train, _TRAIN_TOL),
]}


# --------------------------------------------------------------------------------------
# eager and compiled (tracejit) implementations

def _tracejit_parts(w: Workload, inputs: dict):
    """(body, args, run) for a pure workload: `body(*args)` is the eager program and
    `run(fn)` calls `fn(*args)` the way a user would (inside no_grad for W4)."""
    import eager
    import eager.nn.functional as F

    if w.key == "W1":
        def gelu(x):
            return F.gelu(x, approximate="tanh")
        return gelu, (eager.from_numpy(inputs["x"]),), None
    if w.key == "W2":
        def softmax(x):
            return F.softmax(x, dim=-1)
        return softmax, (eager.from_numpy(inputs["x"]),), None
    if w.key == "W3":
        def layer_norm(x, weight, bias):
            return F.layer_norm(x, (x.shape[-1],), weight, bias)
        return layer_norm, tuple(eager.from_numpy(inputs[k]) for k in ("x", "w", "b")), None
    if w.key == "W4":
        model = _eager_mlp(inputs["params"])

        def mlp_forward(x):
            return model(x)

        def run(fn, x):
            with eager.no_grad():
                return fn(x)
        return mlp_forward, (eager.from_numpy(inputs["x"]),), run
    if w.key == "W6":
        def affine(x):
            return x * 2 + 1
        return affine, (eager.from_numpy(inputs["x"]),), None
    raise KeyError(w.key)


def _eager_mlp(params):
    """nn.Sequential(Linear, ReLU, ..., Linear) holding copies of `params`."""
    import eager
    from eager import nn

    layers = []
    for i in range(len(params) // 2):
        out_f, in_f = params[2 * i].shape
        layers += [nn.Linear(in_f, out_f), nn.ReLU()]
    model = nn.Sequential(*layers[:-1])
    names = [name for name, _ in model.named_parameters()]   # 0.weight, 0.bias, 2.weight...
    model.load_state_dict({n: eager.tensor(p) for n, p in zip(names, params)})
    return model


def _train_runner(inputs, compiled: bool) -> Runner:
    import eager
    import eager.nn.functional as F
    import tracer
    from eager import optim

    model = _eager_mlp(inputs["params"])
    opt = optim.Adam(model.parameters(), lr=LR, betas=BETAS, eps=EPS)
    x = eager.from_numpy(inputs["x"])
    y = eager.from_numpy(inputs["y"])

    def train_step(x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    step = tracer.function(train_step) if compiled else train_step

    def call():
        return step(x, y)

    collect = trainrefs.model_collect(call, model)

    def info():
        if not compiled:
            return {}
        c = step.get_concrete_function(x, y)
        return {"trace_count": step.trace_count, "eqns": len(c.graph.eqns),
                "kernels": len(c.kernels)}

    return Runner(call, collect, info, step if compiled else None)


def build_eager(w: Workload, inputs: dict) -> Runner:
    if w.key == "W8":
        return cnn.tracejit_runner(inputs, compiled=False)
    if w.key == "W10":
        return lstm_lm.tracejit_runner(inputs, compiled=False)
    if w.key == "W9":
        return gpt.tracejit_runner(inputs, compiled=False)
    if w.kind == "train":
        return _train_runner(inputs, compiled=False)
    body, args, run = _tracejit_parts(w, inputs)
    return _pure_runner(body, args, run)


def build_compiled(w: Workload, inputs: dict) -> Runner:
    """The workload under `@tracer.function` (numba backend)."""
    import tracer

    if w.key == "W8":
        return cnn.tracejit_runner(inputs, compiled=True)
    if w.key == "W10":
        return lstm_lm.tracejit_runner(inputs, compiled=True)
    if w.key == "W9":
        return gpt.tracejit_runner(inputs, compiled=True)
    if w.kind == "train":
        return _train_runner(inputs, compiled=True)
    body, args, run = _tracejit_parts(w, inputs)
    fn = tracer.function(body)
    runner = _pure_runner(fn, args, run)

    def info():
        if run is None:
            c = fn.get_concrete_function(*args)
        else:  # under the same grad mode as the timed calls, or it would trace again
            c = run(fn.get_concrete_function, *args)
        return {"trace_count": fn.trace_count, "eqns": len(c.graph.eqns),
                "kernels": len(c.kernels)}
    runner.info = info
    runner.function = fn
    return runner


def _pure_runner(fn, args, run) -> Runner:
    if run is None:
        def call():
            return fn(*args)
    else:
        def call():
            return run(fn, *args)

    def collect():
        return {"out": call().numpy().copy()}
    return Runner(call, collect)
