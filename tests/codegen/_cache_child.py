"""Helper for tests/codegen/test_cache_process.py: compile and run one @function in a fresh
process and print one JSON object: the outputs, codegen.compile_stats(), the kernels.

TRACEJIT_CACHE_DIR comes from the environment.  The inputs are fixed, so every run of this
script generates the same kernel sources (their comments cite this file's lines).
"""
import json
import sys
import warnings

import numpy as np

import codegen
import eager
import eager.nn.functional as F
import tracer


@tracer.function
def cached_step(x, w):
    h = F.gelu(x @ w)
    return F.softmax(h, -1), (h * 2 + 1).sum(0)


@tracer.function(input_signature=[tracer.TensorSpec((None, 6))])
def symbolic_rows(x):
    return F.log_softmax(x * 2.0, -1)


def train(steps=3):
    """A small Adam step: multi kernels, updates written in place, a cross-entropy row
    kernel. Returns the losses and the trained parameters."""
    eager.manual_seed(0)
    model = eager.nn.Sequential(eager.nn.Linear(6, 8), eager.nn.GELU(), eager.nn.Linear(8, 3))
    opt = eager.optim.Adam(model.parameters(), lr=1e-2)

    @tracer.function
    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    x = eager.from_numpy(np.linspace(-1, 1, 30, dtype=np.float32).reshape(5, 6))
    y = eager.from_numpy(np.array([0, 2, 1, 1, 0]))
    losses = [step(x, y).item() for _ in range(steps)]
    return losses, [p.detach().numpy().tolist() for p in model.parameters()]


def ieee_probe(a):
    return a @ a  # a numpy (BLAS) step: inf * 0 = nan, silently, as in eager


def main() -> None:
    x = eager.from_numpy(np.linspace(-2, 2, 24, dtype=np.float32).reshape(4, 6))
    w = eager.from_numpy(np.linspace(1, -1, 30, dtype=np.float32).reshape(6, 5))
    with warnings.catch_warnings(record=True) as caught:  # the filters a user has
        with eager.no_grad():
            outs = cached_step(x, w)
            concrete = cached_step.get_concrete_function(x, w)
            special = eager.from_numpy(np.array([[np.inf, 1.0], [0.0, 2.0]], np.float32))
            for backend in ("numba", "interpret"):
                tracer.function(ieee_probe, backend=backend)(special)
    rows = symbolic_rows(x).numpy().tolist()
    losses, params = train()
    print(json.dumps({
        "outputs": [o.numpy().tolist() for o in outs],
        "more_outputs": [rows, losses, params],
        # Whether Numba set up its compiler (its typing and lowering registries): loading
        # cached kernels does not need it; and whether Numba was imported at all: kernels
        # loaded from their object files do not need that either
        "numba_set_up": "numba.np.arraymath" in sys.modules,
        "numba_imported": "numba" in sys.modules,
        "stats": codegen.compile_stats(),
        "kernels": [k.name for k in concrete.kernels],
        "fallbacks": [k.name for k in concrete.kernels if k.entry is None],
        "modules": [k.module for k in concrete.kernels],
        "warnings": [str(w.message) for w in caught],
        "cache_dir": str(codegen.cache_dir()),
    }))


if __name__ == "__main__":
    main()
