"""Helper for tests/codegen/test_process_safety.py: run the kernels of the last stop (the
float32 product kernel, the direct convolutions, the LSTM recurrence) compiled in a fresh
process and print one JSON line: the sha256 of every result's bits, whether each agrees
with eager, the kernel counters; and, asked for, what a forked child computes.

    python _process_child.py [threads] [fork] [only=STEP,...]

``threads``: then two threads call the functions at once, one tracing new signatures
meanwhile. ``fork``: then fork (multiprocessing's fork start method, as a DataLoader's workers) a
child that calls the functions again, traces a new signature and exits.
TRACEJIT_CACHE_DIR comes from the environment.
"""
import hashlib
import json
import multiprocessing
import os
import sys
import threading

import numpy as np

import codegen
import eager
import eager.nn as nn
import eager.nn.functional as F
import tracer
from codegen import gemm

ROWS = 128   # the product [128, 256] @ [256, 128] is split over the kernel's threads


def product(a, b, w):
    return a @ b, a @ w.T


def conv_step(x, w):
    y = F.conv2d(x, w, padding=1)
    (y * y).sum().backward()
    return y.detach()


def lstm_step(lstm, x):
    out, (h, c) = lstm(x)
    (out * out).sum().backward()
    return out.detach(), h.detach(), c.detach()


def inputs(rows=ROWS, side=8):
    """Each step's arguments: the product's first operand of `rows` rows (no new kernel),
    the convolution's input of `side` x `side` (new kernels)."""
    rng = np.random.default_rng(0)

    def t(*shape, grad=False):
        return eager.tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=grad)
    eager.manual_seed(0)
    return {"product": (t(rows, 256), t(256, 128), t(96, 256)),
            "conv": (t(2, 3, side, side, grad=True), t(4, 3, 3, 3, grad=True)),
            "lstm": (nn.LSTM(16, 32), t(5, 3, 16))}


def _arrays(name, args, out):
    if name == "product":
        return [o.numpy() for o in out]
    if name == "conv":
        grads = [a.grad.numpy() for a in args]
        for a in args:
            a.grad = None
        return [out.numpy(), *grads]
    lstm = args[0]
    grads = [p.grad.numpy() for p in lstm.parameters()]
    lstm.zero_grad()
    return [o.numpy() for o in out] + grads


STEPS = {"product": product, "conv": conv_step, "lstm": lstm_step}
ONLY = ()  # (only=lstm,conv on the command line: just those steps)


def run(data, compiled=True, functions=None):
    """{name: (sha256 of the results' bits, the results)} of each step."""
    got = {}
    for name, step in STEPS.items():
        if ONLY and name not in ONLY:
            continue
        fn = functions[name] if functions else tracer.function(step) if compiled else step
        args = data[name]
        with (eager.no_grad() if name == "product" else eager.enable_grad()):
            arrays = _arrays(name, args, fn(*args))
        got[name] = (hashlib.sha256(b"".join(a.tobytes() for a in arrays)).hexdigest(),
                     arrays)
    return got


def agrees(got, want) -> dict:
    return {name: all(np.allclose(a, b, rtol=1e-4, atol=1e-4)
                      for a, b in zip(got[name][1], want[name][1])) for name in got}


def digests(got) -> dict:
    return {name: h for name, (h, _) in got.items()}


def forked(queue):
    try:
        data = inputs()
        first = run(data)
        new = run(inputs(72, 6))  # new signatures: traced and compiled in the child
        queue.put({"digests": digests(first), "agrees_new": agrees(new, run(inputs(72, 6), False)),
                   "children": children(), "stats": codegen.compile_stats()})
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        queue.put({"error": repr(exc)})


def children() -> list:
    """This process's child processes (any state: zombies too)."""
    me = str(os.getpid())
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                stat = open(f"/proc/{pid}/stat").read()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[1] == me:
                found.append((int(pid), fields[0]))
    return found


def threads(expected) -> dict:
    """Two threads calling the same compiled functions at once (the product kernel's and
    the convolutions' thread splits, the LSTM kernels), the second one also tracing new
    signatures meanwhile: every result as in one thread."""
    functions = {name: tracer.function(step) for name, step in STEPS.items()}
    run(inputs(), functions=functions)
    start = threading.Barrier(2)
    seen, errors = [], []
    # (made here, one after the other: inputs() seeds and draws from the global generator,
    # so two threads making theirs at once would get each other's numbers)
    datas = [inputs(), inputs()]

    def worker(k):
        try:
            data = datas[k]
            start.wait()
            for i in range(6):
                seen.append(digests(run(data, functions=functions)) == expected)
                if k == 1:  # a new product signature each time, traced meanwhile
                    new = inputs(rows=ROWS + 8 + 8 * i)
                    seen.append(all(agrees(run(new), run(new, compiled=False)).values()))
        except BaseException as exc:  # noqa: BLE001 - reported
            errors.append(repr(exc))
    workers = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(timeout=120)
    return {"all_equal": all(seen), "calls": len(seen), "errors": errors,
            "hung": any(t.is_alive() for t in workers)}


def main(argv):
    global ONLY
    ONLY = tuple(name for a in argv if a.startswith("only=") for name in a[5:].split(","))
    data = inputs()
    want = run(data, compiled=False)
    got = run(data)
    report = {"gemm": gemm.available(), "digests": digests(got), "agrees": agrees(got, want)}
    os.environ["TRACEJIT_GEMM"] = "0"  # changed in the running process: new traces only
    off = run(data)
    os.environ.pop("TRACEJIT_GEMM")
    report["digests_gemm_off"] = digests(off)
    report["agrees_gemm_off"] = agrees(off, want)
    report["again"] = digests(run(data)) == report["digests"]
    if "numba" in sys.modules:  # (set_num_threads: the split kernels' pieces do not change)
        import numba

        numba.set_num_threads(1)
        report["one_thread"] = digests(run(data)) == report["digests"]
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    if "threads" in argv:
        report["threads"] = threads(report["digests"])
    if "fork" in argv:
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        child = ctx.Process(target=forked, args=(queue,))
        child.start()
        try:
            report["fork"] = queue.get(timeout=120)
        except Exception as exc:  # noqa: BLE001
            report["fork"] = {"error": f"no answer: {exc!r}"}
        child.join(timeout=30)
        report["fork_exitcode"] = child.exitcode
        report["after_fork"] = digests(run(data)) == report["digests"]
    report["children"] = children()
    report["stats"] = codegen.compile_stats()
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1:])
