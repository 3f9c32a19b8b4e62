"""Head to head: tracejit compiled against a peer, interleaved in time.

    PYTHONPATH=<peers> python -m benchmarks.headtohead --only W8,W9,W10 --peer torch
    python -m benchmarks.headtohead --only W8 --rounds 15 --block-s 0.3 --json /tmp/h2h.json

`python -m benchmarks --peers` times tracejit and each peer in different processes minutes
apart; on a shared machine the machine's speed drifts more than a goal's margin in that
time. Here each contestant runs in a worker process of its own (built, verified against the
workload's float64 reference and warmed up there, as `python -m benchmarks` builds it), and
a coordinator alternates them: round r runs a block of calls in A, then a block in B (B
first in odd rounds), each worker timing every call of its block. The ratio of round r is
median(A's block) / median(B's block), from two blocks under the same load. The report
gives the median ratio over rounds and its spread, and a verdict against the goal
(issue 17, against PyTorch eager) that says "met" only when the upper quartile is under it.

Only one contestant runs at a time: the other waits in a blocking read of its pipe. Each
block starts after a pause (`--settle-s`, as the suite's round-robin: numpy's OpenBLAS
keeps its threads spinning ~0.1 s after its last call), and the coordinator reads each
waiting worker's process CPU time across the other's block: the "CPU while waiting"
column shows whether a waiting side's threads spun (PyTorch's OpenMP pool, OpenBLAS,
Numba's) when it should be ~0. The workers get the environment `python -m benchmarks`
gives its peer processes (benchmarks.peers sets no thread counts: each library takes
its default, 2 threads on this machine; the JSON records them).

Contestants: tracejit (compiled), tracejit_eager, and the peers of benchmarks.peers
(numpy, torch, torch_compile, jax). To check the harness, `sleep:MS` sleeps MS milliseconds a
call and `spin:MS` busy-waits that long: `--a sleep:60 --peer sleep:30 --only cal` gives ~2x
(a sleep wakes late by the machine's wake-up latency, a spin loses the core under load).
`tracejit@DIR` (or `tracejit_eager@DIR`) runs the worker from another checkout: two
versions of tracejit head to head (`--a tracejit --peer tracejit@/tmp/base`), to check
that a change leaves the warm step time where it was.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

from .peers import BUILDERS, PEERS, available
from .workloads import WORKLOADS, Runner

#: issue 17: compiled / PyTorch eager step time, at most (W8 <= 1.0x, W9 <= 0.7x, W10 <= 1.0x)
GOALS = {("tracejit", "torch"): {"W8": 1.0, "W9": 0.7, "W10": 1.0}}
TITLES = {"tracejit": "tracejit compiled", "tracejit_eager": "tracejit eager",
          **{k: v[2] for k, v in PEERS.items()}}
MIN_CALLS = 3              # per block, however long a call takes
ONE_THREAD = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS")
BUSY_CORES = 0.25          # other processes busier than this during the blocks: no verdict
SCHEMA = "tracejit-headtohead/1"


def title(contestant: str) -> str:
    name, _, tree = contestant.partition("@")
    if name.startswith(("sleep:", "spin:")):
        what, ms = name.split(":")
        name = f"{what} {ms} ms"
    return TITLES.get(name, name) + (f" at {tree}" if tree else "")


# --------------------------------------------------------------------------------------
# the worker: one contestant, one workload

def build(contestant: str, key: str) -> tuple:
    """(runner, verification dict) for `contestant` on workload `key`."""
    if contestant.startswith(("sleep:", "spin:")):
        what, ms = contestant.split(":")
        seconds = float(ms) / 1e3
        call = _spin(seconds) if what == "spin" else (lambda: time.sleep(seconds))
        return Runner(call, dict), {
            "verified": True, "detail": "a calibration contestant: nothing to verify"}
    w = WORKLOADS[key]
    inputs = w.inputs()
    if contestant in ("tracejit", "tracejit_eager"):
        import codegen  # noqa: F401 - registers the numba backend before any trace

        from .workloads import build_compiled, build_eager

        runner = (build_compiled if contestant == "tracejit" else build_eager)(w, inputs)
    else:
        runner = BUILDERS[contestant](w, inputs)
    check = w.verify(runner.collect(), inputs)
    w._expected = None   # (the reference can be large)
    return runner, {"verified": check["verified"], "detail": check["detail"]}


def _spin(seconds: float):
    def call():
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
    return call


def threads(contestant: str) -> dict:
    """The thread counts the contestant's libraries run with here."""
    out = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY",
                                          "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS")}
    if "torch" in sys.modules:
        out["torch"] = sys.modules["torch"].get_num_threads()
    if "numba" in sys.modules:
        out["numba"] = sys.modules["numba"].get_num_threads()
    return out


def run_block(call, seconds: float) -> dict:
    """Calls of `call` for at least `seconds` (and MIN_CALLS): each call's time."""
    times = []
    cpu0 = time.process_time()
    start = time.perf_counter()
    while len(times) < MIN_CALLS or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return {"times": times, "cpu_s": time.process_time() - cpu0}


def worker(contestant: str, key: str, warmup_s: float) -> int:
    """Serve the coordinator: JSON lines in on stdin, out on the original stdout (what the
    libraries print goes to stderr)."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)

    def reply(msg: dict) -> None:
        out.write(json.dumps(msg) + "\n")

    try:
        runner, check = build(contestant, key)
        if check["verified"]:
            run_block(runner.call, warmup_s)
    except Exception as exc:  # noqa: BLE001 - reported to the coordinator
        reply({"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]})
        return 1
    reply({"ready": True, "pid": os.getpid(), "threads": threads(contestant), **check})
    for line in sys.stdin:   # (a blocking read: a waiting worker uses no CPU)
        cmd = json.loads(line)
        if cmd["cmd"] == "block":
            reply(run_block(runner.call, cmd["seconds"]))
        elif cmd["cmd"] == "cpu":
            reply({"cpu_s": time.process_time()})
        else:
            break
    return 0


# --------------------------------------------------------------------------------------
# the coordinator

class Worker:
    """A contestant's worker process and its pipe."""

    def __init__(self, contestant: str, key: str, warmup_s: float, one_thread: bool = False):
        from .suite import REPO, _child_env

        self.contestant = contestant
        name, _, tree = contestant.partition("@")   # (tracejit@DIR: DIR's checkout)
        env = _child_env(dict.fromkeys(ONE_THREAD, "1") if one_thread else {})
        if tree:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [tree, env.get("PYTHONPATH")]))
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.headtohead", "--worker", name,
                 "--only", key, "--warmup-s", str(warmup_s)],
                cwd=tree or REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=None, text=True, bufsize=1)
        except OSError as exc:   # (tracejit@DIR with no such DIR)
            self.proc, self.hello = None, {"error": f"{type(exc).__name__}: {exc}"}
            return
        self.hello = self._read()

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            return {"error": f"the worker exited (status {self.proc.returncode}) "
                             "before it answered; its stderr is above"}
        return json.loads(line)

    def ask(self, **cmd) -> dict:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        return self._read()

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def spread(values: list) -> dict:
    q1, q3 = np.percentile(values, [25, 75])
    return {"min": min(values), "q1": float(q1), "median": statistics.median(values),
            "q3": float(q3), "max": max(values)}


def summarize(blocks_a: list, blocks_b: list, goal: float | None = None) -> dict:
    """The ratios of rounds of per-call times (seconds): round r is
    median(blocks_a[r]) / median(blocks_b[r]); the verdict is "met" only when the ratio's
    upper quartile is under `goal`."""
    med_a = [statistics.median(b) for b in blocks_a]
    med_b = [statistics.median(b) for b in blocks_b]
    ratios = [a / b for a, b in zip(med_a, med_b)]
    out = {"ratios": ratios, "ratio": spread(ratios),
           "a_ms": statistics.median(med_a) * 1e3, "b_ms": statistics.median(med_b) * 1e3,
           "a_block_ms": [m * 1e3 for m in med_a], "b_block_ms": [m * 1e3 for m in med_b],
           "goal": goal, "verdict": None}
    if goal is not None:
        r = out["ratio"]
        if r["q3"] < goal:
            out["verdict"] = "met"
        elif r["median"] < goal:
            out["verdict"] = "not shown (median under the goal, upper quartile not)"
        else:
            out["verdict"] = "not met"
    return out


def _machine_busy_s() -> float | None:
    """CPU seconds all processes of the machine have used since boot (Linux /proc/stat,
    in clock ticks: 10 ms steps), or None."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _load() -> list | None:
    return [round(v, 2) for v in os.getloadavg()] if hasattr(os, "getloadavg") else None


def head_to_head(key: str, a: str, b: str, rounds: int, block_s: float, settle_s: float,
                 warmup_s: float, log=None, one_thread: bool = False) -> dict:
    """One workload, A against B; see the module doc."""
    row = {"key": key, "a": a, "b": b, "load_start": _load()}
    if key in WORKLOADS:
        row["name"] = WORKLOADS[key].name
    workers = []
    try:
        for contestant in (a, b):
            wk = Worker(contestant, key, warmup_s, one_thread)
            workers.append(wk)
            if "error" in wk.hello or not wk.hello.get("verified"):
                row["error"] = (f"{title(contestant)}: " + (wk.hello.get("error") or
                                "FAILED verification: " + wk.hello.get("detail", "")))
                return row
        row["threads"] = {wk.contestant: wk.hello["threads"] for wk in workers}
        times = {0: [], 1: []}
        cpu = {0: [], 1: []}      # CPU seconds per call of each block (all threads)
        waiting_cpu = {0: [], 1: []}
        others = []    # cores busy with other processes during each block
        for r in range(rounds):
            for i in ((0, 1) if r % 2 == 0 else (1, 0)):
                other = workers[1 - i]
                if settle_s:
                    time.sleep(settle_s)
                before = other.ask(cmd="cpu")["cpu_s"]
                busy0, t0 = _machine_busy_s(), time.perf_counter()
                block = workers[i].ask(cmd="block", seconds=block_s)
                busy1, t1 = _machine_busy_s(), time.perf_counter()
                times[i].append(block["times"])
                cpu[i].append(block["cpu_s"] / len(block["times"]))
                waiting_cpu[1 - i].append(other.ask(cmd="cpu")["cpu_s"] - before)
                if busy0 is not None:
                    own = block["cpu_s"] + waiting_cpu[1 - i][-1]
                    others.append(max(0.0, busy1 - busy0 - own) / (t1 - t0))
            if log:
                log(f"[{key}] round {r + 1}/{rounds}: "
                    f"{statistics.median(times[0][-1]) * 1e3:.3f} ms / "
                    f"{statistics.median(times[1][-1]) * 1e3:.3f} ms")
        row.update(summarize(times[0], times[1], GOALS.get((a, b), {}).get(key)))
        row["calls_per_block"] = [statistics.median(len(t) for t in times[i]) for i in (0, 1)]
        row["cpu_ratio"] = spread([x / y for x, y in zip(cpu[0], cpu[1])])
        row["a_cpu_ms"], row["b_cpu_ms"] = (statistics.median(cpu[i]) * 1e3 for i in (0, 1))
        row["waiting_cpu_ms"] = {workers[i].contestant: {
            "median": statistics.median(waiting_cpu[i]) * 1e3,
            "max": max(waiting_cpu[i]) * 1e3} for i in (0, 1)}
        row["other_cores"] = spread(others) if others else None
        busy = row["other_cores"]["median"] if others else 0.0
        if row["verdict"] and busy > BUSY_CORES:
            # (PyTorch's OpenMP threads wait for each other when a job takes a core: a
            # ratio then says more about the load than about the two contestants)
            row["verdict"] = (f"none: other jobs kept {busy:.2f} cores busy; rerun on a "
                              "quieter machine")
    finally:
        for wk in workers:
            wk.close()
        row["load_end"] = _load()
    return row


# --------------------------------------------------------------------------------------
# the report

def _ms(v: float) -> str:
    return f"{v * 1e3:.0f} µs" if v < 1 else f"{v:.3g} ms" if v < 100 else f"{v:.0f} ms"


def markdown(doc: dict) -> str:
    a, b = doc["a"], doc["b"]
    lines = [(f"Head to head: {title(a)} (A) against {title(b)} (B); ratio = A / B per round "
              f"(below 1: A faster). {doc['rounds']} rounds, blocks of {doc['block_s']} s "
              f"each side, order alternating, {doc['settle_s']} s pause before each block"
              f"{'; one thread each' if doc.get('one_thread') else ''}. CPU ratio: the same "
              "with each block's CPU time per call (all its threads)."),
             "",
             ("| workload | A | B | ratio (median) | min / q1 / q3 / max | CPU ratio | goal "
              "| verdict "
              "| CPU while waiting (A, B; max) | other jobs (cores, median / max) "
              "| load start / end |"),
             "|---|---:|---:|---:|---|---:|---:|---|---|---|---|"]
    for row in doc["workloads"]:
        name = f"{row['key']} {row.get('name', '')}".strip()
        load = f"{_load_text(row['load_start'])} / {_load_text(row['load_end'])}"
        if "error" in row:
            lines.append(f"| {name} | | | | {row['error']} | | | | | | {load} |")
            continue
        r = row["ratio"]
        wait = ", ".join(f"{_ms(row['waiting_cpu_ms'][c]['max'])}" for c in (a, b))
        goal = f"{row['goal']:.2f}x" if row["goal"] is not None else ""
        busy = row.get("other_cores")
        busy = f"{busy['median']:.2f} / {busy['max']:.2f}" if busy else "?"
        lines.append(
            f"| {name} | {_ms(row['a_ms'])} | {_ms(row['b_ms'])} | {r['median']:.3f}x | "
            f"{r['min']:.3f} / {r['q1']:.3f} / {r['q3']:.3f} / {r['max']:.3f} | "
            f"{row['cpu_ratio']['median']:.3f}x | {goal} | "
            f"{row['verdict'] or ''} | {wait} | {busy} | {load} |")
    return "\n".join(lines) + "\n"


def _load_text(avg) -> str:
    return "/".join(f"{v:.2f}" for v in avg) if avg else "?"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.headtohead",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="W8,W9,W10")
    ap.add_argument("--a", default="tracejit", help="contestant A (default tracejit)")
    ap.add_argument("--peer", default="torch", help="contestant B: " + ", ".join(
        ["tracejit", "tracejit_eager", *PEERS, "tracejit@DIR", "sleep:MS", "spin:MS"]))
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--block-s", type=float, default=0.3)
    ap.add_argument("--settle-s", type=float, default=0.15)
    ap.add_argument("--warmup-s", type=float, default=0.5)
    ap.add_argument("--one-thread", action="store_true",
                    help="workers with one thread each (" + ", ".join(ONE_THREAD) + "=1): "
                         "the CPU ratio then compares work, little moved by other jobs")
    ap.add_argument("--json", default=None, help="also write the JSON document here")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    keys = [k.strip() for k in args.only.split(",") if k.strip()]
    if args.worker:
        return worker(args.worker, keys[0], args.warmup_s)
    for c in (args.a, args.peer):
        if c in PEERS and not available(c)[0]:
            print(f"{title(c)}: {available(c)[1]}", file=sys.stderr)
            return 2
    calibration = all(c.startswith(("sleep:", "spin:")) for c in (args.a, args.peer))
    unknown = [k for k in keys if k not in WORKLOADS and not calibration]
    if unknown:
        print(f"unknown workload(s) {', '.join(unknown)}", file=sys.stderr)
        return 2
    from .report import machine_facts

    doc = {"schema": SCHEMA, "a": args.a, "b": args.peer, "rounds": args.rounds,
           "block_s": args.block_s, "settle_s": args.settle_s, "one_thread": args.one_thread,
           "load_start": _load(),
           "machine": machine_facts(), "workloads": []}

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    for key in keys:
        doc["workloads"].append(head_to_head(key, args.a, args.peer, args.rounds,
                                             args.block_s, args.settle_s, args.warmup_s, log,
                                             args.one_thread))
    doc["load_end"] = _load()
    text = markdown(doc)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    print(text, end="")
    return 0 if all("error" not in row for row in doc["workloads"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
