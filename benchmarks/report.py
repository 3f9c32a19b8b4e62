"""What the suite writes: machine facts, the results table (text and Markdown), the
JSON document, and a PNG chart of speedups when matplotlib can be imported."""
from __future__ import annotations

import ctypes
import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from .peers import PEERS

__all__ = [
    "format_time",
    "machine_facts",
    "markdown",
    "table_rows",
    "text_table",
    "write_json",
    "write_png",
]

REPO = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------------------
# machine facts

def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _cpu_model() -> str:
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _mem_total_gib() -> float | None:
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return round(int(line.split()[1]) / 2 ** 20, 1)
    return None


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _blas() -> dict:
    """BLAS numpy was built with, and at run time (threadpoolctl if installed, else
    asking the loaded OpenBLAS directly) the core type and thread count it uses."""
    import numpy as np

    info: dict = {}
    try:
        deps = np.show_config(mode="dicts").get("Build Dependencies", {})
        blas = deps.get("blas", {})
        info["numpy_build"] = " ".join(str(blas.get(k, "")) for k in ("name", "version")).strip()
        config = blas.get("openblas configuration")
        if config:
            info["build_config"] = config
    except Exception:
        pass
    try:
        import threadpoolctl

        info["threadpoolctl"] = [
            {k: d.get(k) for k in ("internal_api", "version", "num_threads",
                                   "threading_layer", "architecture")}
            for d in threadpoolctl.threadpool_info()]
        return info
    except ImportError:
        pass
    info.update(_openblas_runtime())
    return info


def _openblas_runtime() -> dict:
    # The library numpy loaded, found among this process's mappings (Linux).
    paths = sorted({line.split()[-1] for line in _read("/proc/self/maps").splitlines()
                    if "openblas" in line.lower() and line.split()[-1].startswith("/")})
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        out = {}
        for prefix, suffix in (("scipy_openblas_", "64_"), ("scipy_openblas_", ""),
                               ("openblas_", "64_"), ("openblas_", "")):
            try:
                corename = getattr(lib, f"{prefix}get_corename{suffix}")
                threads = getattr(lib, f"{prefix}get_num_threads{suffix}")
            except AttributeError:
                continue
            corename.restype = ctypes.c_char_p
            threads.restype = ctypes.c_int
            out["runtime_core"] = corename().decode()
            out["runtime_threads"] = threads()
            out["library"] = os.path.basename(path)
            return out
    return {}


def _git() -> dict:
    def run(*args):
        try:
            return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    commit = run("rev-parse", "--short", "HEAD")
    dirty = bool(run("status", "--porcelain", "--untracked-files=no"))
    return {"commit": commit + ("+uncommitted changes" if dirty and commit else "")}


def machine_facts() -> dict:
    import numba

    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        usable = os.cpu_count()
    facts = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "memory_gib": _mem_total_gib(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "versions": {name: _version(name) for name in
                     ("tracejit", "numpy", "numba", "llvmlite", "scipy", "matplotlib",
                      "threadpoolctl", "torch", "jax")},
        "blas": _blas(),
        "numba_threads": numba.get_num_threads(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "env": {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS",
                                               "OMP_NUM_THREADS", "NUMBA_NUM_THREADS",
                                               "NUMBA_DISABLE_JIT", "TRACEJIT_CACHE_DIR")},
    }
    facts.update(_git())
    return facts


def _load(avg) -> str:
    return "/".join(f"{x:.1f}" for x in avg) if avg else "?"


def machine_lines(facts: dict) -> list:
    v = facts["versions"]
    blas = facts["blas"]
    if "threadpoolctl" in blas:
        rt = "; ".join(f"{d['internal_api']} {d['version']} {d.get('architecture') or ''} "
                       f"{d['num_threads']} threads" for d in blas["threadpoolctl"])
    elif "runtime_core" in blas:
        rt = f"{blas['runtime_core']} kernels, {blas['runtime_threads']} threads"
    else:
        rt = "run-time details unknown"
    env = facts["env"]
    lines = [
        f"CPU: {facts['cpu']}, {facts['cores']} cores ({facts['usable_cores']} usable), "
        f"{facts['memory_gib']} GiB",
        f"OS: {facts['os']}; Python {facts['python']}",
        "Libraries: " + ", ".join(f"{k} {v[k]}" for k in ("numpy", "numba", "llvmlite", "scipy")
                                  if v.get(k)),
        f"BLAS: {blas.get('numpy_build', '?')} ({rt}); "
        f"OPENBLAS_CORETYPE={env.get('OPENBLAS_CORETYPE') or 'unset'}",
        f"Load average at start: {_load(facts.get('load_average'))}"
        + (f", at end: {_load(facts.get('load_average_end'))}"
           if facts.get("load_average_end") else "")
        + f"; Numba threads: {facts['numba_threads']}; tracejit {v.get('tracejit') or '?'} at "
        f"commit {facts.get('commit') or '?'}; {facts['date']}",
    ]
    return lines


# --------------------------------------------------------------------------------------
# the table

def format_time(ms: float | None) -> str:
    if ms is None:
        return ""
    if ms >= 1000:
        return f"{ms / 1000:.2f} s"
    if ms >= 1:
        return f"{ms:.3g} ms" if ms < 100 else f"{ms:.0f} ms"
    if ms >= 1e-3:
        return f"{ms * 1e3:.3g} µs"
    return f"{ms * 1e6:.0f} ns"


def _cell_text(cell: dict | None) -> str:
    if not cell:
        return ""
    if "error" in cell:
        return "ERROR"
    text = format_time(cell.get("ms"))
    if cell.get("verified") is False:
        return f"FAILED verification ({text})" if text else "FAILED verification"
    return text


def _ratio(x: float | None) -> str:
    return "" if x is None else (f"{x:.2f}x" if x < 10 else f"{x:.1f}x")


def _peer_ratio(w: dict, cell: dict | None) -> str:
    """compiled / peer time ("0.50x": compiled takes half the peer's time), both verified."""
    if not cell or cell.get("error") or not cell.get("verified") or not cell.get("ms"):
        return ""
    if not w.get("compiled_verified") or not w.get("compiled_ms"):
        return ""
    return _ratio(w["compiled_ms"] / cell["ms"])


def table_rows(doc: dict) -> tuple:
    """(header, rows, footnotes): the table as lists of strings."""
    notes = list(doc.get("footnotes", []))

    def mark(text: str) -> str:
        if text not in notes:
            notes.append(text)
        return f"[{notes.index(text) + 1}]"

    peers = [p for p in PEERS if p in doc.get("peers", {})]
    header = ["workload", "shape", "eager", "compiled", "speedup", "kernels", "first call (cold)",
              "fresh process (warm cache)", "x.copy()", "compiled / copy"]
    for p in peers:
        status = doc["peers"][p]
        title = PEERS[p][0]
        if not status.get("available"):
            title += " " + mark(f"{PEERS[p][0]}: not measured, {status.get('reason')}")
        header.append(title)
    rows = []
    for w in doc["workloads"]:
        cells = w["cells"]
        name = f"{w['key']} {w['name']}"
        for extra in w.get("notes", []):
            name += " " + mark(f"{w['key']}: {extra}")
        row = [name, w["shape"]]
        for which in ("eager", "compiled"):
            text = _cell_text(cells.get(which))
            if cells.get(which, {}).get("error"):
                text += " " + mark(f"{w['key']} {which}: {cells[which]['error']}")
            row.append(text)
        row.append(_ratio(w.get("speedup")))
        kernels = (w.get("compiled_info") or {}).get("kernels")
        row.append("" if kernels is None else str(kernels))
        fresh = w.get("fresh") or {}
        cold, warm = fresh.get("cold") or {}, fresh.get("warm") or {}
        for part, key in ((cold, "first_call_cold_s"), (warm, "first_call_warm_s")):
            if part.get("error"):
                row.append("ERROR " + mark(f"{w['key']} fresh process: {part['error']}"))
            elif w.get(key) is not None:
                row.append(format_time(w[key] * 1e3))
            else:
                row.append("")
        row.append(_cell_text(cells.get("copy")))
        row.append(_ratio(w.get("compiled_over_copy")))
        for p in peers:
            cell = cells.get(p)
            text = _cell_text(cell)
            ratio = _peer_ratio(w, cell)
            if ratio:
                text += f" ({ratio})"
            if cell and cell.get("error"):
                text += " " + mark(f"{w['key']} {PEERS[p][0]}: {cell['error']}")
            if cell and cell.get("verified") is False and not cell.get("error"):
                mark(f"{w['key']} {PEERS[p][0]}: {cell.get('detail')}")
            row.append(text)
        for which in ("eager", "compiled"):
            c = cells.get(which) or {}
            if c.get("verified") is False and not c.get("error"):
                mark(f"{w['key']} {which} FAILED verification: {c.get('detail')}")
        rows.append(row)
    return header, rows, notes


def text_table(doc: dict) -> str:
    header, rows, notes = table_rows(doc)
    # drop columns that are empty in every row (x.copy() outside W1-W3 runs, fresh columns
    # in a run that skipped them) to keep the terminal table narrow
    keep = [i for i in range(len(header))
            if i < 5 or any(r[i] for r in rows) or i >= 10]
    header = [header[i] for i in keep]
    rows = [[r[i] for i in keep] for r in rows]
    widths = [max([len(header[i])] + [len(r[i]) for r in rows]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(widths[i]) if i < 2 else h.rjust(widths[i])
                       for i, h in enumerate(header))]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(c.ljust(widths[i]) if i < 2 else c.rjust(widths[i])
                               for i, c in enumerate(r)))
    lines += [f"[{i + 1}] {n}" for i, n in enumerate(notes)]
    return "\n".join(lines)


def markdown_table(doc: dict) -> str:
    header, rows, notes = table_rows(doc)
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join(["---"] * 2 + ["---:"] * (len(header) - 2)) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |")
    lines.append("")
    lines += [f"[{i + 1}] {n}  " for i, n in enumerate(notes)]
    return "\n".join(lines)


def peers_line(doc: dict) -> str | None:
    if not doc.get("peers"):
        return None
    parts = []
    for p, status in doc["peers"].items():
        if status.get("available"):
            parts.append(f"{PEERS[p][0]} ({status.get('version')})")
        else:
            parts.append(f"{PEERS[p][0]}: {status.get('reason')}")
    return "Peers: " + "; ".join(parts)


def method_text(doc: dict) -> str:
    m = doc["method"]
    n = m.get("fresh_repeat", 1)
    settle = (f", each run after a {m['settle_s'] * 1e3:.0f} ms pause (numpy's OpenBLAS threads "
              f"spin ~0.1 s after an eager cell's last product)" if m.get("settle_s") else "")
    fresh = (f"Both are medians of {n} such pairs of processes, each pair with a cache of "
             f"its own." if n > 1 else "Both are one run each.")
    return (f"Median of {m['repeat']} timed runs per cell (W7: {m['repeat_W7']}), each run "
            f"at least {m['min_run_s'] * 1e3:.0f} ms of back-to-back calls, after a warm-up; "
            f"the cells of a row are timed round-robin{settle}. Every cell is verified against a "
            f"float64 numpy reference before it is timed. Speedup = eager / compiled; kernels "
            f"= the compiled step's kernel count; a peer's (N x) = compiled / that peer's "
            f"time (below 1: compiled is faster), each peer timed in a process of its own. First "
            f"call (cold): trace + compile + run in a fresh process with an empty kernel cache "
            f"directory, after numpy and tracejit are imported (Numba is imported during the "
            f"call, to compile). Fresh process (warm cache): imports + first call in a new process "
            f"reusing that cache, with tracejit's .pyc files written beforehand (as a "
            f"previous run writes them). {fresh}")


def markdown(doc: dict) -> str:
    parts = ["# tracejit benchmarks", "",
             f"`{doc['command']}`{' (quick run)' if doc['quick'] else ''}", ""]
    parts += [f"- {line}" for line in machine_lines(doc["machine"])]
    if peers_line(doc):
        parts.append(f"- {peers_line(doc)}")
    parts += ["", method_text(doc), "", markdown_table(doc), ""]
    eo = doc.get("eager_overhead")
    if eo and "ops" in eo:
        parts += ["## Eager overhead (eager time / numpy time)", "",
                  "| case | eager | numpy | ratio |", "|---|---:|---:|---:|"]
        for r in list(eo["ops"]) + [eo["mlp"]]:
            parts.append(f"| {r['name']} | {format_time(r['eager_s'] * 1e3)} | "
                         f"{format_time(r['numpy_s'] * 1e3)} | {r['ratio']:.2f}x |")
        parts.append("")
    ex = doc.get("example")
    if ex:
        parts += ["## W1 traced (f32[1024])", "", "```", ex["ir"], "```", "",
                  "```python", ex["kernel_source"].rstrip(), "```", ""]
    return "\n".join(parts)


def write_json(doc: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    os.replace(tmp, path)


def write_png(doc: dict, path: Path) -> bool:
    """Bar chart of speedup over eager per workload; False if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        return False
    series = ["compiled"] + [p for p in PEERS if p in doc.get("peers", {})
                             and doc["peers"][p].get("available")]
    labels = [w["key"] for w in doc["workloads"]]
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(labels) * max(1, len(series)) / 2, 4))
    width = 0.8 / len(series)
    for j, s in enumerate(series):
        vals = []
        for w in doc["workloads"]:
            e = (w["cells"].get("eager") or {}).get("ms")
            c = w["cells"].get(s) or {}
            ok = e and c.get("ms") and c.get("verified") and not c.get("error")
            vals.append(e / c["ms"] if ok else 0.0)
        xs = [i + (j - (len(series) - 1) / 2) * width for i in range(len(labels))]
        ax.bar(xs, vals, width, label=PEERS[s][0] if s in PEERS else "tracejit compiled")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels)
    ax.set_yscale("log")
    ax.set_ylabel("speedup over tracejit eager (log)")
    ax.set_title("tracejit benchmarks, " + doc["machine"]["cpu"])
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def python_command(argv: list) -> str:
    return " ".join(["python -m benchmarks", *argv]).strip() if argv is not None else \
        " ".join(sys.argv)
