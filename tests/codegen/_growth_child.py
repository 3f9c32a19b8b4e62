"""Long-lived growth probe (not a test: its figures are in the safety report): one
@function(max_traces=4) training step called with N distinct signatures (batch sizes
1..N) of a small conv + LSTM + MLP model (inference; GROWTH_TRAIN=1: a training step); at checkpoints prints RSS (MiB), open
file descriptors, child processes (zombies included), the kernel cache's bytes and codegen's
counters, and whether every compiled loss matched eager's.

    mkdir -m 700 /tmp/g && TRACEJIT_CACHE_DIR=/tmp/g TRACEJIT_CACHE_MAX_BYTES=4000000 \\
        python tests/codegen/_growth_child.py 200
"""
import json
import os
import sys

import numpy as np

import codegen
import eager
import eager.nn as nn
import eager.nn.functional as F
import eager.optim as optim
import tracer

TRAIN = os.environ.get("GROWTH_TRAIN") == "1"  # a training step: ~20 kernels a signature


def rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def children() -> dict:
    me, states = str(os.getpid()), {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me:
            states[fields[0]] = states.get(fields[0], 0) + 1
    return states


def cache_bytes() -> int:
    root = os.environ["TRACEJIT_CACHE_DIR"]
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.lstm = nn.LSTM(8, 16)
        self.q = nn.Linear(16, 16)
        self.out = nn.Linear(16, 3)

    def forward(self, x):                       # x (B, 1, 8, 8)
        h = self.conv(x).relu().mean(1)         # (B, 8, 8): 8 steps of 8 features
        seq, _ = self.lstm(h.permute(1, 0, 2))  # (8, B, 16)
        return self.out(F.gelu(self.q(seq)).mean(0))


def make():
    eager.manual_seed(0)
    model = Model()
    opt = optim.SGD(model.parameters(), lr=0.01)

    def step(x, y):
        if not TRAIN:  # (inference: a few kernels a signature, so 200 signatures are quick)
            with eager.no_grad():
                return F.cross_entropy(model(x), y)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()
    return step


def main(n: int):
    compiled = tracer.function(make(), max_traces=4)
    eager_step = make()
    rng = np.random.default_rng(0)
    right, out = True, []
    for i in range(1, n + 1):
        x = eager.from_numpy(rng.standard_normal((i, 1, 8, 8)).astype(np.float32))
        y = eager.from_numpy(rng.integers(0, 3, i))
        got, want = compiled(x, y).item(), eager_step(x, y).item()
        right = right and abs(got - want) <= 1e-4 * max(1.0, abs(want))
        if i == 1 or i % 10 == 0 or i == n:
            out.append({"signatures": i, "rss_mib": round(rss_mib(), 1),
                        "fds": len(os.listdir("/proc/self/fd")), "children": children(),
                        "cache_bytes": cache_bytes(), "right": right,
                        "traces": compiled.stats()["traces"] if hasattr(compiled, "stats") else None,
                        "stats": codegen.compile_stats()})
            print(json.dumps(out[-1]), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
