"""Eager overhead: what the Python runtime costs on top of the numpy work it does.

Two ratios, both eager time / plain numpy time (targets: <= 3x each):

(a) dispatch overhead of one op on a 1-element float32 tensor, where numpy's own
    work is negligible, so the ratio is the cost of eager's front end, dispatch
    and Tensor creation relative to one numpy call;
(b) one training step of the seed MLP (x: 32x100 -> Linear 128 -> ReLU ->
    Linear 10, cross-entropy, backward, Adam), against the same step written by
    hand in numpy (forward, backward and PyTorch's Adam rule).

Before timing, (b) checks that both steps compute the same losses and parameters.

    python -m benchmarks.eager_overhead [--quick]
"""
from __future__ import annotations

import argparse
import math
import statistics
import timeit

import numpy as np

import eager
import eager.nn as nn
import eager.nn.functional as F
import eager.optim as optim

BATCH, IN, HIDDEN, OUT = 32, 100, 128, 10
LR, BETAS, EPS = 1e-3, (0.9, 0.999), 1e-8
TARGET = 3.0


# --------------------------------------------------------------------------------------
# timing

def _calls_per_run(fn, min_time: float) -> int:
    number, elapsed = timeit.Timer(fn).autorange()  # also the warm-up: calls for >= 0.2 s
    return max(1, round(number * min_time / elapsed))


def compare(eager_fn, numpy_fn, repeat: int, min_time: float) -> dict:
    """Median seconds per call of each, and the median of the per-repeat ratios.

    The two are timed alternately, run by run, so load from other processes hits both
    alike; each run lasts about `min_time` seconds.
    """
    n_eager = _calls_per_run(eager_fn, min_time)
    n_numpy = _calls_per_run(numpy_fn, min_time)
    t_eager, t_numpy, ratios = [], [], []
    for _ in range(repeat):
        te = timeit.timeit(eager_fn, number=n_eager) / n_eager
        tn = timeit.timeit(numpy_fn, number=n_numpy) / n_numpy
        t_eager.append(te)
        t_numpy.append(tn)
        ratios.append(te / tn)
    return dict(eager_s=statistics.median(t_eager), numpy_s=statistics.median(t_numpy),
                ratio=statistics.median(ratios))


# --------------------------------------------------------------------------------------
# (a) per-op dispatch

def _op_cases():
    a = eager.tensor([1.5])
    b = eager.tensor([0.25])
    an, bn = a.numpy(), b.numpy()
    assert an.dtype == np.float32 and an.shape == (1,)
    return [
        ("a + b", lambda: a + b, lambda: an + bn),
        ("eager.exp(a)", lambda: eager.exp(a), lambda: np.exp(an)),
        ("a * 2.0", lambda: a * 2.0, lambda: an * 2.0),
    ]


def bench_ops(repeat: int, min_time: float) -> list[dict]:
    rows = []
    for name, eager_fn, numpy_fn in _op_cases():
        e, n = eager_fn(), numpy_fn()
        if e.dtype != n.dtype or not np.array_equal(e.numpy(), n):
            raise AssertionError(f"{name}: eager gives {e.numpy()!r}, numpy {n!r}")
        rows.append(dict(name=name, **compare(eager_fn, numpy_fn, repeat, min_time)))
    return rows


# --------------------------------------------------------------------------------------
# (b) the seed MLP training step

class NumpyMLP:
    """The seed MLP and its Adam step, by hand in float32 numpy (PyTorch's rules)."""

    def __init__(self, params: list[np.ndarray]):
        self.params = [p.astype(np.float32, copy=True) for p in params]  # w1, b1, w2, b2
        self.exp_avg = [np.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [np.zeros_like(p) for p in self.params]
        self.steps = 0

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        w1, b1, w2, b2 = self.params
        n = x.shape[0]
        rows = np.arange(n)
        # forward: logits = relu(x @ w1.T + b1) @ w2.T + b2
        h_pre = x @ w1.T
        h_pre += b1
        h = np.maximum(h_pre, 0)
        z = h @ w2.T
        z += b2
        # cross-entropy through a stable log-softmax
        z -= z.max(axis=1, keepdims=True)
        e = np.exp(z)
        s = e.sum(axis=1, keepdims=True)
        loss = float(np.log(s[:, 0]).mean() - z[rows, y].mean())
        # backward: dL/dz = (softmax - one_hot) / n
        dz = e / s
        dz[rows, y] -= 1
        dz *= np.float32(1.0 / n)
        grads = [None, None, dz.T @ h, dz.sum(axis=0)]
        dh = dz @ w2
        dh *= h_pre > 0
        grads[0] = dh.T @ x
        grads[1] = dh.sum(axis=0)
        # Adam (torch.optim.Adam, single-tensor path)
        self.steps += 1
        b1_, b2_ = BETAS
        step_size = LR / (1 - b1_ ** self.steps)
        bc2_sqrt = math.sqrt(1 - b2_ ** self.steps)
        for p, g, m, v in zip(self.params, grads, self.exp_avg, self.exp_avg_sq):
            m *= b1_
            m += (1 - b1_) * g
            v *= b2_
            v += (1 - b2_) * (g * g)
            denom = np.sqrt(v)
            denom /= bc2_sqrt
            denom += EPS
            p -= step_size * m / denom
        return loss


def _make_eager_step(seed: int = 0):
    eager.manual_seed(seed)
    model = nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, OUT))
    optimizer = optim.Adam(model.parameters(), lr=LR, betas=BETAS, eps=EPS)
    x = eager.randn(BATCH, IN)
    y = eager.randint(0, OUT, (BATCH,))

    def step():
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss

    return step, model, x, y


def _make_pair(seed: int = 0):
    eager_step, model, x, y = _make_eager_step(seed)
    ref = NumpyMLP([p.detach().numpy() for p in model.parameters()])
    xn, yn = x.numpy().copy(), y.numpy().copy()
    return eager_step, model, (lambda: ref.step(xn, yn)), ref


def check_same_step(n_steps: int = 5) -> float:
    """Run both implementations side by side; raise unless losses and params agree."""
    eager_step, model, numpy_step, ref = _make_pair()
    worst = 0.0
    for i in range(n_steps):
        le, ln = eager_step().item(), numpy_step()
        if not math.isclose(le, ln, rel_tol=1e-5):
            raise AssertionError(f"step {i}: eager loss {le} != numpy loss {ln}")
        for (name, p), q in zip(model.named_parameters(), ref.params):
            pe = p.detach().numpy()
            err = float(np.max(np.abs(pe - q)))
            worst = max(worst, err)
            if not np.allclose(pe, q, rtol=1e-5, atol=1e-6):
                raise AssertionError(f"step {i}: {name} differs by {err:.3g}")
    return worst


CHECKED_STEPS = 5


def bench_mlp(repeat: int, min_time: float) -> dict:
    worst = check_same_step(CHECKED_STEPS)
    eager_step, _, numpy_step, _ = _make_pair()
    return dict(name="MLP train step", **compare(eager_step, numpy_step, repeat, min_time),
                max_param_diff=worst, checked_steps=CHECKED_STEPS)


# --------------------------------------------------------------------------------------

def run(quick: bool) -> dict:
    """Measure both ratios; returns {'ops': [row, ...], 'mlp': row}, times in seconds."""
    repeat, min_time = (5, 0.05) if quick else (11, 0.1)
    return {"ops": bench_ops(repeat, min_time), "mlp": bench_mlp(repeat, min_time),
            "target": TARGET}


def _fmt_time(seconds: float) -> str:
    if seconds < 1e-6:
        return f"{seconds * 1e9:8.0f} ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:8.2f} us"
    return f"{seconds * 1e3:8.3f} ms"


def format_table(results: dict) -> str:
    lines = [f"{'workload':<32}{'eager':>12}{'numpy':>12}{'ratio':>9}  target <= "
             f"{results['target']:g}x"]
    rows = [("(a) 1-element f32: " + r["name"], r) for r in results["ops"]]
    rows.append(("(b) " + results["mlp"]["name"], results["mlp"]))
    for label, r in rows:
        mark = "ok" if r["ratio"] <= results["target"] else "ABOVE"
        lines.append(f"{label:<32}{_fmt_time(r['eager_s']):>12}{_fmt_time(r['numpy_s']):>12}"
                     f"{r['ratio']:>8.2f}x  {mark}")
    mlp = results["mlp"]
    lines.append(f"(b) checked: eager and numpy steps agree (max param diff "
                 f"{mlp['max_param_diff']:.1e} over {mlp['checked_steps']} steps)")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.eager_overhead",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter repeats")
    args = parser.parse_args(argv)
    print(format_table(run(args.quick)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
