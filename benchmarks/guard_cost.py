"""Per-call cost of the guards of a training step: `python -m benchmarks.guard_cost`.

A 12-layer MLP (Linear + LayerNorm per layer, 50 parameter tensors) trained with Adam,
compiled twice: with the guards found while tracing (globals and closures of the code that
ran, container entries, module attributes) and with that discovery switched off
(tracer.discover.COLLECT, a benchmark-only switch). Prints both step times (medians,
round-robin) and the cost of the generated per-call guard check alone.
"""
from __future__ import annotations

import argparse
import sys
import timeit

from .timing import measure

LAYERS, WIDTH, BATCH = 12, 64, 32


def build(guarded: bool):
    import eager
    import eager.nn.functional as F
    import tracer
    from eager import nn, optim
    from tracer import discover

    eager.manual_seed(0)
    blocks = []
    for _ in range(LAYERS):
        blocks += [nn.Linear(WIDTH, WIDTH), nn.LayerNorm(WIDTH), nn.ReLU()]
    model = nn.Sequential(*blocks, nn.Linear(WIDTH, 10))
    opt = optim.Adam(model.parameters(), lr=1e-3)
    x = eager.randn(BATCH, WIDTH)
    y = eager.randint(0, 10, (BATCH,))

    def train_step(x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    step = tracer.function(train_step)
    discover.COLLECT[0] = guarded
    try:
        step(x, y)
        step(x, y)  # (the first Adam step traces apart)
    finally:
        discover.COLLECT[0] = True
    cf = step.get_concrete_function(x, y)
    n_params = len(list(model.parameters()))
    return step, (x, y), cf, n_params


def run(repeat: int = 7) -> dict:
    """Both step times (ms, medians) and the per-call guard check alone (µs)."""
    from tracer.guards import make_check

    guarded, g_args, g_cf, n_params = build(True)
    plain, p_args, _p_cf, _ = build(False)
    times = measure({"guarded": lambda: guarded(*g_args), "unguarded": lambda: plain(*p_args)},
                    repeat=repeat, min_run_s=0.2)
    check = make_check(g_cf._call_guards)
    assert check()
    number = 20000
    per_check = min(timeit.repeat(check, number=number, repeat=5)) / number
    return {"layers": LAYERS, "parameters": n_params,
            "guards_per_call": len(g_cf._call_guards),
            "guards_on_structure_change": len(g_cf._epoch_guards),
            "step_with_guards_ms": times["guarded"]["ms"],
            "step_without_guards_ms": times["unguarded"]["ms"],
            "guard_check_us": per_check * 1e6}


def format_text(r: dict) -> str:
    g_ms, u_ms = r["step_with_guards_ms"], r["step_without_guards_ms"]
    return "\n".join([
        f"guard cost, {r['layers']}-layer MLP training step ({r['parameters']} parameter "
        f"tensors, Adam):",
        f"  guards: {r['guards_per_call']} checked per call, "
        f"{r['guards_on_structure_change']} on structure change "
        f"(eager.protocol.STRUCTURE_EPOCH)",
        f"  step with guards     {g_ms * 1e3:9.1f} µs",
        f"  step without them    {u_ms * 1e3:9.1f} µs   difference {(g_ms - u_ms) * 1e3:+.1f} µs"
        f" ({(g_ms / u_ms - 1) * 100:+.1f}%)",
        f"  per-call guard check {r['guard_check_us']:9.2f} µs"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)
    print(format_text(run(args.repeat)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
