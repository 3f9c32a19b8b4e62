"""Peers: the same workloads written by hand in numpy, in PyTorch (eager and
`torch.compile`) and in JAX (`jax.jit`), each measured in a process of its own.

    python -m benchmarks.peers --peer numpy --only W1,W2 --out peer.json

The suite starts one such process per peer that can be imported; a peer that is not
installed is reported as missing (a blank column with a footnote), never an error.
Every cell is verified against the workload's float64 reference before it is timed,
and the process measures with `benchmarks.timing`, as the main process does.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import time
import traceback

import numpy as np

from . import cnn, gpt, lstm_lm
from .timing import measure
from .workloads import BETAS, EPS, LR, TRAIN_CHECK_STEPS, WORKLOADS, Runner

# name -> (column title, module that must be importable, how the footnote names it)
PEERS = {
    "numpy": ("numpy", "numpy", "numpy written by hand (float32, preallocated buffers)"),
    "torch": ("torch", "torch", "PyTorch eager"),
    "torch_compile": ("torch.compile", "torch", "PyTorch torch.compile (default mode)"),
    "jax": ("jax.jit", "jax", "JAX jax.jit"),
}


def available(peer: str) -> tuple:
    """(True, "") if the peer's package can be imported here, else (False, why)."""
    module = PEERS[peer][1]
    if importlib.util.find_spec(module) is None:
        return False, f"{module} is not installed"
    return True, ""


# --------------------------------------------------------------------------------------
# numpy, by hand

def _np_gelu(inputs):
    x = inputs["x"]
    t = np.empty_like(x)
    out = np.empty_like(x)
    k = np.float32(0.044715)
    c = np.float32(math.sqrt(2.0 / math.pi))

    def call():
        # ufuncs with out=: no temporaries beyond `t` (augmented assignment would make
        # t and out locals of this closure)
        np.multiply(x, x, out=t)
        np.multiply(t, x, out=t)
        np.multiply(t, k, out=t)
        np.add(t, x, out=t)
        np.multiply(t, c, out=t)
        np.tanh(t, out=t)
        np.add(t, np.float32(1.0), out=t)
        np.multiply(x, np.float32(0.5), out=out)
        np.multiply(out, t, out=out)
        return out
    return call


def _np_softmax(inputs):
    x = inputs["x"]
    out = np.empty_like(x)

    def call():
        np.subtract(x, x.max(axis=-1, keepdims=True), out=out)
        np.exp(out, out=out)
        np.divide(out, out.sum(axis=-1, keepdims=True), out=out)
        return out
    return call


def _np_layer_norm(inputs):
    x, w, b = inputs["x"], inputs["w"], inputs["b"]
    n = x.shape[-1]
    out = np.empty_like(x)

    def call():
        np.subtract(x, x.mean(axis=-1, keepdims=True), out=out)
        # one pass, no temporary: sum of squares per row
        var = np.einsum("ij,ij->i", out, out) / np.float32(n)
        rstd = np.float32(1.0) / np.sqrt(var + np.float32(1e-5))
        np.multiply(out, rstd[:, None], out=out)
        np.multiply(out, w, out=out)
        np.add(out, b, out=out)
        return out
    return call


def _np_mlp_forward(inputs):
    x = inputs["x"]
    params = inputs["params"]
    n_layers = len(params) // 2

    def call():
        h = x
        for i in range(n_layers):
            z = h @ params[2 * i].T
            z += params[2 * i + 1]
            if i < n_layers - 1:
                np.maximum(z, 0, out=z)
            h = z
        return h
    return call


class NumpyTrainer:
    """An MLP with ReLU, cross-entropy and PyTorch's Adam rule, in float32 numpy."""

    def __init__(self, params, x, y):
        self.params = [p.copy() for p in params]
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]
        self.grads = [np.zeros_like(p) for p in params]
        self.x, self.y = x, y
        self.rows = np.arange(x.shape[0])
        self.t = 0

    def step(self) -> float:
        params, grads, x, y, rows = self.params, self.grads, self.x, self.y, self.rows
        n_layers = len(params) // 2
        hs = [x]                               # the input of each layer
        for i in range(n_layers):
            z = hs[-1] @ params[2 * i].T
            z += params[2 * i + 1]
            if i < n_layers - 1:
                np.maximum(z, 0, out=z)
            hs.append(z)
        z = hs.pop()
        z -= z.max(axis=1, keepdims=True)
        e = np.exp(z)
        s = e.sum(axis=1, keepdims=True)
        loss = float(np.log(s[:, 0]).mean() - z[rows, y].mean())
        dz = e
        dz /= s
        dz[rows, y] -= 1
        dz *= np.float32(1.0 / x.shape[0])
        for i in reversed(range(n_layers)):
            np.matmul(dz.T, hs[i], out=grads[2 * i])
            np.sum(dz, axis=0, out=grads[2 * i + 1])
            if i > 0:
                dh = dz @ params[2 * i]
                dh *= hs[i] > 0
                dz = dh
        self.t += 1
        b1, b2 = BETAS
        step_size = np.float32(LR / (1 - b1 ** self.t))
        bc2_sqrt = np.float32(math.sqrt(1 - b2 ** self.t))
        for p, g, m, v in zip(params, grads, self.m, self.v):
            m *= np.float32(b1)
            m += np.float32(1 - b1) * g
            v *= np.float32(b2)
            v += np.float32(1 - b2) * (g * g)
            denom = np.sqrt(v)
            denom /= bc2_sqrt
            denom += np.float32(EPS)
            p -= step_size * m / denom
        return loss


def _np_train_runner(inputs) -> Runner:
    trainer = NumpyTrainer(inputs["params"], inputs["x"], inputs["y"])

    def collect():
        out = {"loss": np.array([trainer.step() for _ in range(TRAIN_CHECK_STEPS)])}
        for k, (p, g) in enumerate(zip(trainer.params, trainer.grads)):
            out[f"param[{k}]"] = p.copy()
            out[f"grad[{k}]"] = g.copy()
        return out
    return Runner(trainer.step, collect)


def build_numpy(w, inputs) -> Runner:
    if w.key == "W8":
        return cnn.numpy_runner(inputs)
    if w.key == "W10":
        return lstm_lm.numpy_runner(inputs)
    if w.key == "W9":
        return gpt.numpy_runner(inputs)
    if w.kind == "train":
        return _np_train_runner(inputs)
    make = {"W1": _np_gelu, "W2": _np_softmax, "W3": _np_layer_norm, "W4": _np_mlp_forward,
            "W6": lambda inp: (lambda: inp["x"] * 2 + 1)}[w.key]
    call = make(inputs)
    return Runner(call, lambda: {"out": np.array(call())})


# --------------------------------------------------------------------------------------
# PyTorch (eager and torch.compile)

def build_torch(w, inputs, compiled: bool = False) -> Runner:
    import torch
    import torch.nn.functional as TF

    if w.key == "W8":
        return cnn.torch_runner(inputs, compiled)
    if w.key == "W10":
        return lstm_lm.torch_runner(inputs, compiled)
    if w.key == "W9":
        return gpt.torch_runner(inputs, compiled)
    wrap = torch.compile if compiled else (lambda f: f)
    t = {k: torch.from_numpy(v) for k, v in inputs.items() if isinstance(v, np.ndarray)}
    if w.kind == "train":
        model = _torch_mlp(inputs["params"])
        opt = torch.optim.Adam(model.parameters(), lr=LR, betas=BETAS, eps=EPS)

        def train_step(x, y):
            loss = TF.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss
        step = wrap(train_step)

        def call():
            return step(t["x"], t["y"])

        def collect():
            out = {"loss": np.array([call().item() for _ in range(TRAIN_CHECK_STEPS)])}
            for k, p in enumerate(model.parameters()):
                out[f"param[{k}]"] = p.detach().numpy().copy()
                out[f"grad[{k}]"] = p.grad.numpy().copy()
            return out
        return Runner(call, collect)
    if w.key == "W1":
        fn, args = wrap(lambda x: TF.gelu(x, approximate="tanh")), (t["x"],)
    elif w.key == "W2":
        fn, args = wrap(lambda x: torch.softmax(x, dim=-1)), (t["x"],)
    elif w.key == "W3":
        fn = wrap(lambda x, w_, b_: TF.layer_norm(x, (x.shape[-1],), w_, b_))
        args = (t["x"], t["w"], t["b"])
    elif w.key == "W4":
        model = _torch_mlp(inputs["params"])
        fn, args = wrap(model), (t["x"],)
    elif w.key == "W6":
        fn, args = wrap(lambda x: x * 2 + 1), (t["x"],)
    else:
        raise KeyError(w.key)

    def call():
        with torch.no_grad():
            return fn(*args)
    return Runner(call, lambda: {"out": call().numpy().copy()})


def _torch_mlp(params):
    import torch

    layers = []
    for i in range(len(params) // 2):
        out_f, in_f = params[2 * i].shape
        layers += [torch.nn.Linear(in_f, out_f), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1])
    with torch.no_grad():
        for p, v in zip(model.parameters(), params):
            p.copy_(torch.from_numpy(v))
    return model


# --------------------------------------------------------------------------------------
# JAX

def build_jax(w, inputs) -> Runner:
    import jax
    import jax.numpy as jnp

    if w.key in ("W8", "W9", "W10"):
        from . import jax_peers

        return jax_peers.RUNNERS[w.key](inputs)
    if w.kind == "train":
        return _jax_train_runner(inputs)
    if w.key == "W1":
        fn, names = (lambda x: jax.nn.gelu(x, approximate=True)), ("x",)
    elif w.key == "W2":
        fn, names = (lambda x: jax.nn.softmax(x, axis=-1)), ("x",)
    elif w.key == "W3":
        def fn(x, w_, b_):
            mu = x.mean(axis=-1, keepdims=True)
            var = jnp.square(x - mu).mean(axis=-1, keepdims=True)
            return (x - mu) * jax.lax.rsqrt(var + 1e-5) * w_ + b_
        names = ("x", "w", "b")
    elif w.key == "W4":
        params = [jnp.asarray(p) for p in inputs["params"]]

        def fn(x):
            return _jax_forward(params, x)
        names = ("x",)
    elif w.key == "W6":
        fn, names = (lambda x: x * 2 + 1), ("x",)
    else:
        raise KeyError(w.key)
    jitted = jax.jit(fn)
    args = [jnp.asarray(inputs[n]) for n in names]

    def call():
        return jitted(*args).block_until_ready()
    return Runner(call, lambda: {"out": np.asarray(call()).copy()})


def _jax_forward(params, x):
    import jax.numpy as jnp

    n_layers = len(params) // 2
    h = x
    for i in range(n_layers):
        h = h @ params[2 * i].T + params[2 * i + 1]
        if i < n_layers - 1:
            h = jnp.maximum(h, 0)
    return h


def _jax_train_runner(inputs) -> Runner:
    import jax
    import jax.numpy as jnp

    def loss_fn(params, x, y):
        z = _jax_forward(params, x)
        logp = jax.nn.log_softmax(z, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    @jax.jit
    def train_step(params, m, v, t, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        b1, b2 = BETAS
        t = t + 1
        step_size = LR / (1 - b1 ** t)
        bc2_sqrt = jnp.sqrt(1 - b2 ** t)
        m = [b1 * mi + (1 - b1) * g for mi, g in zip(m, grads)]
        v = [b2 * vi + (1 - b2) * g * g for vi, g in zip(v, grads)]
        params = [p - step_size * mi / (jnp.sqrt(vi) / bc2_sqrt + EPS)
                  for p, mi, vi in zip(params, m, v)]
        return params, m, v, t, loss, grads

    x, y = jnp.asarray(inputs["x"]), jnp.asarray(inputs["y"].astype(np.int32))
    state = {"params": [jnp.asarray(p) for p in inputs["params"]]}
    state["m"] = [jnp.zeros_like(p) for p in state["params"]]
    state["v"] = [jnp.zeros_like(p) for p in state["params"]]
    state["t"] = jnp.float32(0)
    state["grads"] = None

    def call():
        p, m, v, t, loss, grads = train_step(state["params"], state["m"], state["v"],
                                             state["t"], x, y)
        state.update(params=p, m=m, v=v, t=t, grads=grads)
        return loss.block_until_ready()

    def collect():
        out = {"loss": np.array([float(call()) for _ in range(TRAIN_CHECK_STEPS)])}
        for k, (p, g) in enumerate(zip(state["params"], state["grads"])):
            out[f"param[{k}]"] = np.asarray(p).copy()
            out[f"grad[{k}]"] = np.asarray(g).copy()
        return out
    return Runner(call, collect)


BUILDERS = {
    "numpy": build_numpy,
    "torch": build_torch,
    "torch_compile": lambda w, inputs: build_torch(w, inputs, compiled=True),
    "jax": build_jax,
}


def library_version(peer: str) -> str:
    module = __import__(PEERS[peer][1])
    return getattr(module, "__version__", "?")


# --------------------------------------------------------------------------------------
# one peer process

def run_peer(peer: str, keys: list, repeat: int, min_run_s: float,
             repeat_for: dict | None = None) -> dict:
    """Verify and time each workload with one peer; a failure is recorded, not raised."""
    repeat_for = repeat_for or {}
    result = {"peer": peer, "available": True, "version": library_version(peer), "cells": {}}
    for key in keys:
        w = WORKLOADS[key]
        t0 = time.perf_counter()
        cell: dict = {}
        try:
            inputs = w.inputs()
            runner = BUILDERS[peer](w, inputs)
            check = w.verify(runner.collect(), inputs)
            cell.update(verified=check["verified"], detail=check["detail"],
                        max_err=check["max_err"])
            cell.update(measure({"t": runner.call}, repeat_for.get(key, repeat),
                                min_run_s)["t"])
        except Exception as exc:
            cell = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300],
                    "traceback": traceback.format_exc(limit=6), "verified": False}
        result["cells"][key] = cell
        status = cell.get("error") or ("ok" if cell.get("verified") else "FAILED verification")
        ms = f"{cell['ms']:.3f} ms" if "ms" in cell else "-"
        print(f"[peers] {PEERS[peer][0]:>13} {key} {w.name}: {ms} ({status}, "
              f"{time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.peers",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer", choices=sorted(PEERS), required=True)
    ap.add_argument("--only", default=",".join(WORKLOADS))
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--min-run", type=float, default=0.2)
    ap.add_argument("--repeat-for", default="{}", help="JSON {workload: repeat}")
    ap.add_argument("--out", default="-")
    args = ap.parse_args(argv)
    keys = [k.strip() for k in args.only.split(",") if k.strip()]
    ok, why = available(args.peer)
    if ok:
        result = run_peer(args.peer, keys, args.repeat, args.min_run,
                          json.loads(args.repeat_for))
    else:
        result = {"peer": args.peer, "available": False, "reason": why, "cells": {}}
    text = json.dumps(result)
    if args.out == "-":
        print(text)
    else:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
