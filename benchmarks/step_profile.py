"""Where a compiled workload's time goes: CPU time per step of its program.

    python -m benchmarks.step_profile W9 [--calls 20] [--top 25] [--wall]

Builds the workload compiled (benchmarks.workloads), warms it up, then runs its
program through the observing runner (the same generated lines as every call, with a
note after each step: codegen.runner.generate(observe=True)) and records the thread CPU
time between notes. Prints per call the median total, the time per kind of step (BLAS
products, kernels, numpy steps by op, views that copy) and the slowest steps with their
operand shapes. Thread CPU time, not wall time, so that other jobs on a shared machine
move the figures less; run with OPENBLAS_NUM_THREADS=1 NUMBA_NUM_THREADS=1 to see all of
the work on this thread (BLAS's and the kernels' worker threads are not counted).
`--wall` records wall-clock time instead (perf_counter): what a user waits for with all
threads, on a quiet machine only.

`--eager` profiles the workload's eager step instead: its time, the part spent in the
`matmul` op's implementation (np.matmul), and the products' floor: each of the step's
products (the same shapes and layouts) timed alone through codegen.gemm.matmul (numpy's
BLAS where the compiled program keeps it: codegen.gemm.use_for), medians of `--calls`.
eager / floor is the largest eager/compiled ratio any compiled step can reach while it
computes the same products.
"""
from __future__ import annotations

import argparse
import collections
import time

import numpy as np


def _trace(runner):
    """The concrete function of the workload's largest trace (a training step's)."""
    fn = runner.function
    traces = [c for bucket in fn._cache.values()
              for c in (bucket if isinstance(bucket, list) else [bucket])]
    return max(traces, key=lambda c: len(getattr(c.program, "steps", ())))


def profile(key: str, calls: int = 20, clock=time.thread_time) -> tuple:
    """(program, {step index: median seconds}, median seconds per call), timed by `clock`."""
    from codegen import runner as codegen_runner

    from .workloads import WORKLOADS, build_compiled

    w = WORKLOADS[key]
    run = build_compiled(w, w.inputs())
    run.call()
    run.call()
    concrete = _trace(run)
    program = concrete.program
    step_of = {}
    for i, step in enumerate(program.steps):
        for slot in codegen_runner._writes(step):
            step_of.setdefault(slot, i)
    observed = codegen_runner.generate(program, observe=True)[1]
    times = collections.defaultdict(list)
    state = {}

    def note(slot, value):
        i = step_of[slot]
        if state["step"] != i:  # (a step writing several values is noted once)
            times[i].append(clock() - state["t"])
            state["step"] = i
        state["t"] = clock()

    def timed(args, dests=None):
        state["t"], state["step"] = clock(), None
        return observed(args, note, dests)
    plain, plain1 = program._run, concrete.run1
    program._run = timed
    if plain1 is not None:  # (the one-argument fast path calls the program's run1)
        concrete.run1 = lambda a: timed([a])[0]
    try:
        totals = []
        for _ in range(calls):
            t = clock()
            run.call()
            totals.append(clock() - t)
    finally:
        program._run, concrete.run1 = plain, plain1
    if not times:
        raise RuntimeError(f"{key}: the observed program never ran (its calls took "
                           f"another path)")
    return program, {i: float(np.median(v)) for i, v in times.items()}, float(np.median(totals))


def _kind(step) -> str:
    from codegen.steps import NumpyStep

    if isinstance(step, NumpyStep):
        return f"{step.how} {step.eqn.op}"
    return type(step).__name__


def _shapes(step) -> str:
    eqn = getattr(step, "eqn", None)
    if eqn is None:
        return ""
    ins = ", ".join(str(list(x.type.shape)) for x in eqn.inputs if hasattr(x, "type"))
    return f"   {ins} -> {list(eqn.out.type.shape)}"


def _products(steps, med) -> tuple:
    """(flops, seconds) of the program's matrix products (2*M*N*K per matrix)."""
    flops = seconds = 0
    for i, step in enumerate(steps):
        eqn = getattr(step, "eqn", None)
        if eqn is None or eqn.op != "matmul":
            continue
        out, k = eqn.out.type.shape, eqn.inputs[0].type.shape[-1]
        if all(isinstance(d, int) for d in (*out, k)):
            flops += 2 * int(np.prod(out)) * k
            seconds += med.get(i, 0.0)
    return flops, seconds


def main(argv=None) -> None:
    from codegen.steps import step_text

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--wall", action="store_true", help="wall-clock time, not thread CPU")
    parser.add_argument("--eager", action="store_true",
                        help="the eager step's products against their compiled floor")
    args = parser.parse_args(argv)
    clock = time.perf_counter if args.wall else time.thread_time
    if args.eager:
        _print_eager(args.workload, args.calls, clock)
        return
    program, med, total = profile(args.workload, args.calls, clock)
    steps = program.steps
    what = "wall" if args.wall else "thread CPU"
    print(f"{args.workload}: {total * 1e3:.2f} ms {what} per observed call; steps sum to "
          f"{sum(med.values()) * 1e3:.2f} ms; {len(steps)} steps, {len(program.kernels)} "
          f"kernels")
    by_kind = collections.Counter()
    for i, step in enumerate(steps):
        by_kind[_kind(step)] += med.get(i, 0.0)
    for kind, seconds in by_kind.most_common():
        print(f"  {seconds * 1e3:8.3f} ms  {kind}")
    flops, seconds = _products(steps, med)
    if flops:
        print(f"  products: {flops / 1e9:.3f} GFLOP in {seconds * 1e3:.3f} ms, "
              f"{flops / max(seconds, 1e-12) / 1e9:.0f} GFLOP/s ({what}); at that rate the "
              f"products alone bound the step from below")
    print("slowest steps:")
    for i in sorted(med, key=lambda i: -med[i])[:args.top]:
        print(f"  {med[i] * 1e3:8.3f} ms  [{i}] {step_text(steps[i], program._name)[:110]}"
              f"{_shapes(steps[i])}")


def eager_products(key: str, calls: int = 20, clock=time.thread_time) -> dict:
    """The eager step's median time, the median time in its products (the matmul op's
    numpy implementation), their FLOPs, and their floor: the sum of each product's median
    time alone through the call a compiled program makes for it."""
    from codegen import gemm
    from eager.ops import OPS

    from .workloads import WORKLOADS, build_eager

    op = OPS["matmul"]
    plain = op.impl
    seen = {"t": 0.0, "products": []}

    def timed(a, b, *rest, **params):
        t = clock()
        out = plain(a, b, *rest, **params)
        seen["t"] += clock() - t
        seen["products"].append((a, b))
        return out
    w = WORKLOADS[key]
    run = build_eager(w, w.inputs())
    object.__setattr__(op, "impl", timed)  # (OpDef is frozen)
    try:
        run.call()
        steps, in_products = [], []
        for _ in range(calls):
            seen["t"], seen["products"] = 0.0, []
            t = clock()
            run.call()
            steps.append(clock() - t)
            in_products.append(seen["t"])
    finally:
        object.__setattr__(op, "impl", plain)
    # (copies in the operands' own memory order: a transposed view stays transposed)
    products = [(a.copy(order="K"), b.copy(order="K")) for a, b in seen["products"]]
    flops = floor = 0.0
    for a, b in products:
        out = np.matmul(a, b)
        flops += 2 * out.size * a.shape[-1]
        fast = gemm.use_for(a.shape, b.shape, a.dtype)
        times = []
        for _ in range(calls):
            t = clock()
            if fast:
                gemm.matmul(a, b, out)
            else:
                np.matmul(a, b, out=out)
            times.append(clock() - t)
        floor += float(np.median(times))
    return {"step": float(np.median(steps)), "products": float(np.median(in_products)),
            "count": len(products), "flops": flops, "floor": floor}


def _print_eager(key: str, calls: int, clock) -> None:
    r = eager_products(key, calls, clock)
    what = "wall" if clock is time.perf_counter else "thread CPU"
    print(f"{key} eager: {r['step'] * 1e3:.2f} ms {what} per step; {r['count']} products, "
          f"{r['flops'] / 1e9:.3f} GFLOP, {r['products'] * 1e3:.2f} ms in np.matmul "
          f"({r['flops'] / max(r['products'], 1e-12) / 1e9:.0f} GFLOP/s); the rest "
          f"{(r['step'] - r['products']) * 1e3:.2f} ms")
    print(f"  the products' floor (each alone, as compiled programs call it): "
          f"{r['floor'] * 1e3:.2f} ms ({r['flops'] / max(r['floor'], 1e-12) / 1e9:.0f} "
          f"GFLOP/s); eager / floor = {r['step'] / max(r['floor'], 1e-12):.2f}x: no compiled "
          f"step computing these products is faster than that against this eager")


if __name__ == "__main__":
    main()
