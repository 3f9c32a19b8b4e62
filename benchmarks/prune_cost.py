"""What keeping the kernel cache's bound costs a process that writes to a large cache: the
time of the bound's check after each write (codegen.kernelfiles._after_write), with N
kernels already in the directory (each as the cache holds one: module, object file, digest,
Numba's index and data), under the bound and at it.

    python -m benchmarks.prune_cost [N ...]        (default: 1000 10000)

Prints one JSON line per N: milliseconds per write (median of 15, and the first write's),
under the bound and over it (half the kernels must go).
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def fill(directory: Path, n: int, size: int = 2048) -> int:
    """n fake kernels (five files each), oldest first; their total bytes."""
    pycache = directory / "__pycache__"
    pycache.mkdir(mode=0o700, exist_ok=True)
    blob = b"x" * size
    now = time.time()
    for i in range(n):
        stem = f"k{i}_{i:016x}"
        for path in (directory / f"{stem}.py", directory / f"{stem}.tjo",
                     directory / f"{stem}.sum", pycache / f"{stem}.kernel-1.py311.nbi",
                     pycache / f"{stem}.kernel-1.py311.1.nbc"):
            path.write_bytes(blob)
            os.utime(path, (now - n + i, now - n + i))
    return 5 * n * size


def per_write(directory: Path, limit: int, writes: int = 15) -> tuple:
    """(median, first) ms of the bound's check after a write (a new kernel's files written
    first)."""
    from codegen import kernelfiles

    times = []
    for j in range(writes):
        stem = f"new{j}_{j:016x}"
        (directory / f"{stem}.py").write_bytes(b"y" * 2048)
        os.environ["TRACEJIT_CACHE_MAX_BYTES"] = str(limit)
        t = time.perf_counter()
        kernelfiles._after_write(directory, stem)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3, times[0] * 1e3


def main(argv=None) -> None:
    sizes = [int(a) for a in (argv if argv is not None else sys.argv[1:])] or [1000, 10000]
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp) / "cache"
            directory.mkdir(mode=0o700)
            total = fill(directory, n)
            under = per_write(directory, 4 * total)
            over = per_write(directory, total // 2 if n > 100 else 0)
        print(json.dumps({"kernels": n, "files": 5 * n, "ms_per_write_under_bound": under[0],
                          "ms_first_write_under_bound": under[1],
                          "ms_per_write_over_bound": over[0],
                          "ms_first_write_over_bound": over[1],
                          "load": round(os.getloadavg()[0], 2)}), flush=True)


if __name__ == "__main__":
    main()
