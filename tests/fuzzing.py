"""The project's differential fuzzer: random programs, eager against interpret and numba.

A program is data (`Program`: arguments, captured tensors, an optional model and optimizer,
and a list of `Step`s, each one line of eager code) rendered to Python source. The source
is executed three times on fresh, equal inputs and state: eagerly, under
`tracer.function(fn, backend="interpret")` and under `backend="numba"`, each called a
few times, and after every call the outputs, the arguments, the captures, every `.grad`,
the parameters and the optimizer state are compared with dtype-aware tolerances. A
mismatch is shrunk (steps dropped while it persists) and printed as source that pastes
into a regression test (`check_source`).

    python -m tests.fuzzing --programs 1000 --seed 0          # from the repository root
    python -m tests.fuzzing --programs 50 --exclude none      # also the known-buggy areas

Op categories that other work items are still fixing are excluded by default
(`KNOWN_BUGGY`); `--exclude` replaces that list (`none` for the empty list).
"""
from __future__ import annotations

import argparse
import linecache
import re
import sys
import time
import warnings
from dataclasses import dataclass, field, replace

import numpy as np

import eager
import eager.nn.functional as F
import tracer
from tests.fuzz_programs import KNOWN_BUGGY, Program, data, generate  # noqa: F401

MODES = ("eager", "interpret", "numba")


# ----------------------------------------------------------------------------- running
_counter = [0]


def load(source: str) -> dict:
    """Execute a program's source (registered with linecache so errors show its lines)."""
    _counter[0] += 1
    filename = f"<fuzz-program-{_counter[0]}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    ns = {"eager": eager, "F": F, "data": data, "__name__": "fuzz_program"}
    exec(compile(source, filename, "exec"), ns)
    return ns


def _np(t):
    return None if t is None else np.array(t.detach().numpy(), copy=True)


def _snapshot(outs, args, state, output_requires_grad=True):
    snap = {}
    for i, o in enumerate(outs):
        if isinstance(o, eager.Tensor):
            snap[f"output {i}"] = _np(o)
            if output_requires_grad:
                snap[f"output {i}.requires_grad"] = o.requires_grad
        else:
            snap[f"output {i}"] = o
    for i, a in enumerate(args):
        snap[f"argument {i}"] = _np(a)
        snap[f"argument {i}.grad"] = _np(a.grad)
    for name, v in state.items():
        if isinstance(v, eager.Tensor):
            snap[name] = _np(v)
            snap[name + ".grad"] = _np(v.grad)
        elif name == "model":
            for pn, p in v.named_parameters():
                snap[f"model.{pn}"] = _np(p)
                snap[f"model.{pn}.grad"] = _np(p.grad)
        elif name == "opt":
            for gi, group in enumerate(v.param_groups):
                for pi, p in enumerate(group["params"]):
                    for key, val in sorted(v.state.get(p, {}).items()):
                        if isinstance(val, eager.Tensor):
                            snap[f"opt.state[{gi}.{pi}][{key}]"] = _np(val)
    return snap


def run(source: str, mode: str, ignore=frozenset()) -> list:
    """Run a program's source in one mode: per call a snapshot dict, or ("raises", ...)."""
    ns = load(source)
    eager.manual_seed(0)
    records = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            fn, state = ns["setup"]()
            if mode != "eager":
                fn = tracer.function(fn, backend=mode)
        except Exception as e:
            return [("raises", type(e).__name__, str(e).splitlines()[0] if str(e) else "")]
        for call in range(ns["CALLS"]):
            try:
                ns["between"](call, state)
                args = ns["args"](call)
                outs = fn(*args)
                outs = outs if isinstance(outs, tuple) else (outs,)
                if ns["KIND"] == "outside":
                    loss = sum((o.double() * (k + 1.0)).sum() for k, o in enumerate(outs)
                               if isinstance(o, eager.Tensor) and o.requires_grad)
                    if isinstance(loss, eager.Tensor):
                        loss.backward()
            except Exception as e:
                msg = str(e).splitlines()[0] if str(e) else ""
                # ...and the state the raising call left (eager's: the updates made before
                # the failing op), compared as after any call
                try:
                    left = _snapshot((), args, state)
                except Exception:  # noqa: BLE001 - args() itself raised
                    left = {}
                records.append(("raises", type(e).__name__, msg, left))
                break
            consumed = ns["KIND"] in ("inside", "train") and "grad_after_backward" in ignore
            records.append(_snapshot(outs, args, state, not consumed))
    return records


def _tolerance(dtype):
    # float64 results are often computed from float32 values (promotion), whose last-bit
    # differences (vector math, summation order) then show at about 1e-7.
    return 1e-4 if dtype == np.float32 else 1e-5


def compare_values(expected, got) -> str | None:
    """Why two snapshot values differ (None if they agree)."""
    if isinstance(expected, np.ndarray) or isinstance(got, np.ndarray):
        if not (isinstance(expected, np.ndarray) and isinstance(got, np.ndarray)):
            return f"expected {_short(expected)}, got {_short(got)}"
        if expected.dtype != got.dtype or expected.shape != got.shape:
            return (f"expected {expected.dtype}{list(expected.shape)}, "
                    f"got {got.dtype}{list(got.shape)}")
        if expected.dtype.kind != "f":
            if not np.array_equal(expected, got):
                return f"expected {_short(expected)}, got {_short(got)}"
            return None
        en, gn = np.isnan(expected), np.isnan(got)
        if not np.array_equal(en, gn):
            return f"NaN positions differ: expected {_short(expected)}, got {_short(got)}"
        ei, gi = np.isinf(expected), np.isinf(got)
        if not np.array_equal(ei, gi) or not np.array_equal(expected[ei], got[ei]):
            return f"inf positions differ: expected {_short(expected)}, got {_short(got)}"
        fin = ~(en | ei)
        e, g = expected[fin].astype(np.float64), got[fin].astype(np.float64)
        if e.size == 0:
            return None
        rtol = _tolerance(expected.dtype)
        atol = rtol * max(1.0, float(np.abs(e).max()))
        bad = np.abs(e - g) > atol + rtol * np.abs(e)
        if bad.any():
            err = float(np.abs(e - g).max())
            return f"max error {err:.3g}: expected {_short(expected)}, got {_short(got)}"
        return None
    if expected != got:
        return f"expected {expected!r}, got {got!r}"
    return None


def _short(v):
    if isinstance(v, np.ndarray):
        with np.printoptions(precision=5, threshold=12, edgeitems=3):
            return f"{v.dtype}{list(v.shape)} {np.array2string(v, separator=', ')}"
    return repr(v)


@dataclass
class Finding:
    mode: str
    kind: str           # mismatch | raises-only-compiled | raises-only-eager | unsupported
    detail: str
    call: int = 0

    def __str__(self):
        return f"[{self.mode}] {self.kind} at call {self.call}: {self.detail}"


def compare_runs(expected: list, got: list, mode: str) -> Finding | None:
    for call, (e, g) in enumerate(zip(expected, got)):
        e_raises, g_raises = isinstance(e, tuple), isinstance(g, tuple)
        if e_raises and g_raises:
            if e[1] != g[1]:
                return Finding(mode, "mismatch", f"eager raised {e[1]}: {e[2]}; "
                               f"compiled raised {g[1]}: {g[2]}", call)
            left_e, left_g = (e[3] if len(e) > 3 else {}), (g[3] if len(g) > 3 else {})
            for key in left_e:
                why = compare_values(left_e[key], left_g.get(key))
                if why:
                    return Finding(mode, "mismatch", f"after raising {e[1]}: {key}: {why}",
                                   call)
            return None
        if g_raises:
            kind = ("unsupported" if g[1] == "TracingError" and "support" in g[2]
                    else "raises-only-compiled")
            return Finding(mode, kind, f"{g[1]}: {g[2]}", call)
        if e_raises:
            return Finding(mode, "raises-only-eager", f"{e[1]}: {e[2]}", call)
        for key in e:
            why = compare_values(e[key], g.get(key))
            if why:
                return Finding(mode, "mismatch", f"{key}: {why}", call)
    if len(expected) != len(got):
        return Finding(mode, "mismatch", f"{len(expected)} eager calls, {len(got)} compiled",
                       min(len(expected), len(got)))
    return None


def check_source(source: str, modes=("interpret", "numba"), ignore=frozenset()) -> list:
    """Findings of one program's source (an empty list when every mode agrees with eager).

    `ignore` holds KNOWN_BUGGY categories that are comparisons rather than generated code.
    """
    expected = run(source, "eager", ignore)
    findings = []
    for mode in modes:
        try:
            got = run(source, mode, ignore)
        except Exception as e:  # a crash of the runner itself is a finding too
            got = [("raises", type(e).__name__, str(e))]
        f = compare_runs(expected, got, mode)
        if f:
            findings.append(f)
    return findings


def check(program: Program, modes=("interpret", "numba"), ignore=frozenset()) -> list:
    return check_source(program.source(), modes, ignore)


# ----------------------------------------------------------------------------- shrinking
def _without(program: Program, index: int) -> Program | None:
    """The program without step `index` and every later step that reads what it made."""
    dropped = set()
    steps = []
    for i, s in enumerate(program.steps):
        if i == index or dropped & set(s.uses):
            if s.out:
                dropped.add(s.out)
            continue
        steps.append(s)
    returns = tuple(r for r in program.returns if r not in dropped)
    if not returns:
        temps = [s.out for s in steps if s.out]
        returns = (temps[-1],) if temps else (program.args[0].name,)
    if program.kind == "train" and "loss" in dropped:
        return None
    return replace(program, steps=steps, returns=returns)


def shrink(program: Program, finding: Finding, budget_s: float = 60.0,
           ignore=frozenset()) -> Program:
    """Drop steps, calls, returns and inputs while the same kind of finding persists."""
    deadline = time.monotonic() + budget_s

    def same(p):
        try:
            fs = check(p, (finding.mode,), ignore)
        except Exception:
            return False
        return any(f.kind == finding.kind and _signature(f) == _signature(finding) for f in fs)

    changed = True
    while changed and time.monotonic() < deadline:
        changed = False
        for i in reversed(range(len(program.steps))):
            cand = _without(program, i)
            if cand is not None and same(cand):
                program, changed = cand, True
                break
        if changed:
            continue
        for cand in _simpler(program):
            if same(cand):
                program, changed = cand, True
                break
    return program


def _signature(f: Finding) -> str:
    """What a shrunk program must keep showing: the exception type, or what differs."""
    head = f.detail.split(":")[0]
    if f.kind == "mismatch":
        head = re.sub(r"\d+", "N", head)
        if "requires_grad" not in head and ".grad" not in head:
            head = "value"
    return head


def _simpler(program: Program):
    if program.calls > 1:
        yield replace(program, calls=program.calls - 1, between=program.between[:-1])
    if len(program.returns) > 1:
        for r in program.returns:
            yield replace(program, returns=(r,))
    used = {u for s in program.steps for u in s.uses} | set(program.returns)
    for c in program.captures:
        if c.name not in used:
            yield replace(program, captures=[x for x in program.captures if x is not c])
    for a in program.args:
        if a.layout != "c":
            yield replace(program, args=[replace(x, layout="c") if x is a else x
                                         for x in program.args])
    for c in program.captures:
        if c.layout != "c":
            yield replace(program, captures=[replace(x, layout="c") if x is c else x
                                             for x in program.captures])


# ----------------------------------------------------------------------------- driver
@dataclass
class Report:
    programs: int = 0
    findings: list = field(default_factory=list)   # (program, finding, shrunk program)
    seconds: float = 0.0


def fuzz(n_programs: int, seed: int = 0, exclude=frozenset(KNOWN_BUGGY), time_budget=None,
         modes=("interpret", "numba"), minimize=True, log=None) -> Report:
    report = Report()
    start = time.monotonic()
    for i in range(n_programs):
        if time_budget is not None and time.monotonic() - start > time_budget:
            break
        program = generate(seed + i, exclude)
        findings = check(program, modes, set(exclude))
        report.programs += 1
        for f in findings:
            shrunk = shrink(program, f, ignore=set(exclude)) if minimize else program
            report.findings.append((program, f, shrunk))
            if log:
                log(f"program {seed + i}: {f}\n{shrunk.source()}")
        if log and (i + 1) % 50 == 0:
            log(f"... {i + 1} programs, {len(report.findings)} findings, "
                f"{time.monotonic() - start:.0f} s")
    report.seconds = time.monotonic() - start
    return report


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tests.fuzzing", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--programs", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--exclude", default=",".join(sorted(KNOWN_BUGGY)),
                    help="comma list of categories to leave out ('none': none); default: "
                    + ", ".join(sorted(KNOWN_BUGGY)))
    ap.add_argument("--modes", default="interpret,numba")
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--show", type=int, default=None, help="print program SEED and exit")
    ns = ap.parse_args(argv)
    exclude = set() if ns.exclude in ("", "none") else set(ns.exclude.split(","))
    if ns.show is not None:
        print(generate(ns.show, exclude).source())
        return 0
    report = fuzz(ns.programs, ns.seed, exclude, modes=tuple(ns.modes.split(",")),
                  minimize=not ns.no_shrink, log=lambda s: print(s, flush=True))
    print(f"{report.programs} programs (seeds {ns.seed}..{ns.seed + report.programs - 1}), "
          f"{len(report.findings)} findings, {report.seconds:.0f} s; excluded: "
          f"{', '.join(sorted(exclude)) or 'none'}")
    return 1 if report.findings else 0


if __name__ == "__main__":
    sys.exit(main())
