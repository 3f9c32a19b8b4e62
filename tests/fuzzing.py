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
import traceback
import warnings
from dataclasses import dataclass, field, replace

import numpy as np

import eager
import eager.nn.functional as F
import tracer

MODES = ("eager", "interpret", "numba")

# Categories with known, open defects (issue 13 item in brackets); the default exclusions.
KNOWN_BUGGY = {
    "inplace_view": "in-place ops and slice assignment through views [item 1]",
    "inplace_arg": "in-place update of an argument dropped by the direct call [item 2]",
    "module_mode": "model.train()/eval() between calls not guarded [item 3]",
    "optim_hparams": "optimizer hyperparameters other than lr frozen [item 7]",
    "nonfinite": "NaN/inf inputs and results under Numba fast-math [item 13]",
    "backward_inside": "x.grad set by a backward inside a compiled function [item 14]",
    "clone_capture": "clone/copy_ of captured tensors baked in at trace time [item 13]",
    "noop_output": "an output that is an input or a no-op view of it loses grad_fn [item 9]",
    "getitem_0d": "backward of a 0-d getitem crashes compiled [item 11]",
    "inplace_autograd": "in-place op on a value backward needs: eager raises at backward, "
                        "compiled does not [fuzz finding F3, not fixed]",
    "join_mixed_dtype": "cat/stack of mixed dtypes: eager promotes, traced raises [item 13]",
    "reduce_size1": "a reduction over a size-1 dimension: KeyError on numba [item 13]",
    "grad_after_backward": "an output whose graph a backward inside consumed: compiled "
                           "requires_grad=False, eager True [fuzz finding F2, not fixed]",
}

SHAPES = [(), (4,), (3, 4), (1, 4), (3, 1), (2, 3, 4), (4, 4), (0, 4)]
FLOATS = ("float32", "float32", "float32", "float64")


# ----------------------------------------------------------------------------- inputs
def data(shape, dtype="float32", seed=0, layout="c", grad=False, nonfinite=False):
    """A deterministic input tensor: `layout` "c" contiguous, "T" transposed, "s" strided."""
    rng = np.random.default_rng(seed)
    shape = tuple(shape)
    full = shape
    if layout == "T" and len(shape) >= 2:
        full = shape[::-1]
    elif layout == "s" and len(shape) >= 1:
        full = shape[:-1] + (shape[-1] * 2,)
    if dtype == "bool":
        arr = rng.random(full) < 0.5
    elif dtype.startswith("int"):
        arr = rng.integers(-5, 6, size=full).astype(dtype)
    else:
        arr = (rng.standard_normal(full) * 2).astype(dtype)
        if nonfinite and arr.size:
            flat = arr.reshape(-1)
            for value in (np.nan, np.inf, -np.inf, 0.0, -0.0):
                flat[rng.integers(flat.size)] = value
    if layout == "T" and len(shape) >= 2:
        arr = arr.T
    elif layout == "s" and len(shape) >= 1:
        arr = arr[..., ::2]
    t = eager.from_numpy(np.asarray(arr))
    if grad:
        t.requires_grad_()
    return t


@dataclass(frozen=True)
class Input:
    name: str
    shape: tuple
    dtype: str
    seed: int
    layout: str = "c"
    grad: bool = False
    nonfinite: bool = False

    def source(self, seed_expr: str) -> str:
        extra = ""
        if self.layout != "c":
            extra += f", layout={self.layout!r}"
        if self.grad:
            extra += ", grad=True"
        if self.nonfinite:
            extra += ", nonfinite=True"
        return f"data({self.shape!r}, {self.dtype!r}, {seed_expr}{extra})"


@dataclass(frozen=True)
class Step:
    """One line of the program: `out = code` (or the bare statement `code`)."""
    code: str
    out: str | None
    uses: tuple
    category: str


@dataclass
class Program:
    seed: int
    args: list
    captures: list
    steps: list
    returns: tuple
    kind: str = "plain"          # plain | outside (backward after the call) | inside | train
    calls: int = 2
    model: str | None = None     # source of the model, e.g. "eager.nn.Linear(4, 3)"
    optimizer: str | None = None
    between: tuple = ()          # per call: a statement run before it (lr changes, eval())

    def categories(self) -> set:
        cats = {s.category for s in self.steps}
        cats.add(self.kind if self.kind in ("inside",) else "plain")
        if any(i.nonfinite for i in self.args + self.captures):
            cats.add("nonfinite")
        return cats

    def source(self) -> str:
        lines = ["def setup():"]
        for c in self.captures:
            lines.append(f"    {c.name} = {c.source(str(c.seed))}")
        if self.model:
            lines.append(f"    eager.manual_seed({self.seed})")
            lines.append(f"    model = {self.model}")
        if self.optimizer:
            lines.append(f"    opt = {self.optimizer}")
        params = ", ".join(a.name for a in self.args)
        lines.append("")
        lines.append(f"    def f({params}):")
        for s in self.steps:
            lines.append(f"        {s.out} = {s.code}" if s.out else f"        {s.code}")
        ret = ", ".join(self.returns) + ("," if len(self.returns) == 1 else "")
        lines.append(f"        return ({ret})")
        lines.append("")
        state = [f"{c.name!r}: {c.name}" for c in self.captures]
        for extra in ("model", "opt"):
            if getattr(self, "model" if extra == "model" else "optimizer"):
                state.append(f"{extra!r}: {extra}")
        lines.append(f"    return f, {{{', '.join(state)}}}")
        lines.append("")
        lines.append("")
        lines.append("def args(call):")
        items = ", ".join(a.source(f"{a.seed} + 1000 * call") for a in self.args)
        lines.append(f"    return [{items}]")
        lines.append("")
        lines.append("")
        lines.append("def between(call, state):")
        lines.append("    model, opt = state.get('model'), state.get('opt')")
        for i, stmt in enumerate(self.between):
            if stmt:
                lines.append(f"    if call == {i}:")
                lines.append(f"        {stmt}")
        lines.append("    return None")
        lines.append("")
        lines.append(f"KIND, CALLS = {self.kind!r}, {self.calls}")
        return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- generation
class _Gen:
    """Draws a program by trying each candidate line eagerly on example values."""

    def __init__(self, seed: int, exclude: set):
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.exclude = exclude
        self.env = {"eager": eager, "F": F, "data": data}
        self.pool = {}        # name -> "arg" | "capture" | "temp"
        self.view_of = {}     # name -> root name, for views of arguments/captures/temps
        self.count = 0

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def new_input(self, name, role, seed, allow_grad):
        r = self.rng
        shape = self.pick(SHAPES)
        u = r.random()
        dtype = self.pick(FLOATS) if u < 0.75 else ("int32" if u < 0.85 else
                                                     "int64" if u < 0.92 else "bool")
        layout = "c"
        if len(shape) >= 2 and r.random() < 0.25:
            layout = self.pick(("T", "s"))
        grad = allow_grad and dtype.startswith("float") and r.random() < 0.5
        nonfinite = ("nonfinite" not in self.exclude and dtype.startswith("float")
                     and r.random() < 0.15)
        inp = Input(name, shape, dtype, seed, layout, grad, nonfinite)
        src = inp.source(str(seed))
        self.env[name] = eval(src, self.env)
        self.pool[name] = role
        return inp

    def float_names(self):
        return [n for n in self.pool if self.env[n].dtype.kind == "f"]

    def candidates(self, kind):
        """(category, code template, inputs, out?) candidates for one step."""
        p, rng = self.pick, self.rng
        names = list(self.pool)
        a, b = p(names), p(names)
        fl = self.float_names() or names
        x = p(fl)
        nd = self.env[a].ndim
        d = int(rng.integers(-nd, nd)) if nd else 0
        keep = bool(rng.random() < 0.4)
        scalar = p(("2.5", "-1.0", "0.5", "3", "0.0"))
        out = []
        # elementwise and broadcasting
        for op in ("+", "-", "*", "/"):
            out.append(("elementwise", f"{a} {op} {b}", (a, b)))
        out.append(("elementwise", f"{a} * {scalar} + 1", (a,)))
        out.append(("elementwise", f"{scalar} - {a}", (a,)))
        out.append(("elementwise", f"eager.maximum({a}, {b})", (a, b)))
        out.append(("elementwise", f"eager.minimum({a}, {b})", (a, b)))
        out.append(("elementwise", f"{x} ** 2", (x,)))
        out.append(("elementwise", f"-{a}", (a,)))
        out.append(("compare", f"{a} > {b}", (a, b)))
        out.append(("compare", f"{a} == {b}", (a, b)))
        out.append(("compare", f"eager.where({a} > 0, {a}, {b})", (a, b)))
        out.append(("compare", f"eager.where({x} <= 0.5, {x}, {scalar})", (x,)))
        for fn in ("exp", "tanh", "sigmoid", "relu", "abs"):
            out.append(("unary", f"{x}.{fn}()", (x,)))
        out.append(("unary", f"({x}.abs() + 1).log()", (x,)))
        out.append(("unary", f"({x}.abs() + 0.5).sqrt()", (x,)))
        out.append(("unary", f"{x}.clamp(-0.5, 1.0)", (x,)))
        # reductions with dims
        out.append(("reduce", f"{a}.sum()", (a,)))
        out.append(("reduce", f"{a}.sum(dim={d}, keepdim={keep})", (a,)))
        out.append(("reduce", f"{x}.mean(dim={d}, keepdim={keep})", (x,)))
        out.append(("reduce", f"{a}.amax(dim={d}, keepdim={keep})", (a,)))
        out.append(("reduce", f"{a}.amin(dim={d})", (a,)))
        out.append(("reduce", f"{a}.argmax(dim={d})", (a,)))
        out.append(("reduce", f"{x}.var(dim={d})", (x,)))
        out.append(("reduce", f"eager.logsumexp({x}, dim={d})", (x,)))
        # views and indexing
        out.append(("view", f"{a}.reshape(-1)", (a,)))
        if nd >= 2:
            out.append(("view", f"{a}.T", (a,)))
            out.append(("view", f"{a}.transpose(0, {nd - 1})", (a,)))
            out.append(("view", f"{a}[:, ::2]", (a,)))
            perm = tuple(int(i) for i in rng.permutation(nd))
            out.append(("view", f"{a}.permute{perm}", (a,)))
        if nd >= 1:
            out.append(("view", f"{a}[1:]", (a,)))
            out.append(("view", f"{a}[0]", (a,)))
            out.append(("view", f"{a}.unsqueeze({d})", (a,)))
            out.append(("view", f"{a}[eager.tensor([0, -1])]", (a,)))
            out.append(("view", f"{a}.flatten()", (a,)))
        out.append(("view", f"{a}.squeeze()", (a,)))
        out.append(("view", f"{a}.expand(2, *{a}.shape)", (a,)))
        # matmul and joins
        out.append(("matmul", f"{a} @ {b}", (a, b)))
        if nd >= 2:
            out.append(("matmul", f"{x} @ {x}.transpose(-2, -1)", (x,)))
        out.append(("join", f"eager.cat([{a}, {b}], dim={d})", (a, b)))
        out.append(("join", f"eager.stack([{a}, {b}], dim=0)", (a, b)))
        # nn functions and casts
        out.append(("nn", f"F.softmax({x}, dim={d})", (x,)))
        out.append(("nn", f"F.log_softmax({x}, dim=-1)", (x,)))
        out.append(("nn", f"F.gelu({x})", (x,)))
        if self.env[x].ndim:
            out.append(("nn", f"F.layer_norm({x}, ({self.env[x].shape[-1]},))", (x,)))
        out.append(("cast", f"{a}.{p(('float', 'double', 'int', 'long', 'bool'))}()", (a,)))
        out.append(("clone", f"{a}.clone()", (a,)))
        results = [(cat, code, uses, True) for cat, code, uses in out]
        # in-place ops: the category depends on what they write to
        target = p(names)
        role = self.pool[target]
        if target in self.view_of or target in self.view_of.values():
            icat = "inplace_view"   # writes through a view, or to a base that has views
        elif self.env[target].requires_grad and role == "temp":
            icat = "inplace_autograd"
        else:
            icat = {"arg": "inplace_arg", "capture": "inplace_capture"}.get(role, "inplace_temp")
        for code in (f"{target}.add_({b})", f"{target}.mul_({scalar})", f"{target}.copy_({b})",
                     f"{target}.zero_()", f"{target}.clamp_(-1.0, 1.0)", f"{target}.sub_({b})"):
            results.append((icat, code, (target, b), False))
        if self.env[target].ndim:
            results.append(("inplace_view", f"{target}[1:] = {b}", (target, b), False))
            results.append(("inplace_view", f"{target}[0].mul_({scalar})", (target,), False))
        return results

    def _noop_of_input(self, value):
        """Is `value` an argument or capture itself, or a view of one with its shape?"""
        for n, role in self.pool.items():
            t = self.env[n]
            if role != "temp" and (value is t or (value.shape == t.shape and value.dtype
                                                 == t.dtype and np.shares_memory(
                                                     value._data, t._data))):
                return True
        return False

    def _reduces_size1(self, code, name):
        t = self.env[name]
        m = re.search(r"dim=(-?\d+)", code)
        if m is None and ("softmax" in code or "layer_norm" in code):
            m = re.match(r"(-1)", "-1")
        if m is None or t.ndim == 0:
            return False
        return t.shape[int(m.group(1)) % t.ndim] == 1

    def step(self, kind):
        for _ in range(40):
            cat, code, uses, has_out = self.pick(self.candidates(kind))
            if cat in self.exclude:
                continue
            if cat == "clone" and any(self.pool[u] == "capture" for u in uses):
                cat = "clone_capture"
                if cat in self.exclude:
                    continue
            if cat == "join" and self.env[uses[0]].dtype != self.env[uses[1]].dtype:
                cat = "join_mixed_dtype"
                if cat in self.exclude:
                    continue
            if cat in ("reduce", "nn") and "reduce_size1" in self.exclude \
                    and self._reduces_size1(code, uses[0]):
                continue
            name = f"t{self.count}" if has_out else None
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    value = eval(code, self.env) if has_out else exec(code, self.env)
            except Exception:
                continue
            if has_out:
                if not isinstance(value, eager.Tensor):
                    continue
                if value.numel() > 4096:
                    continue
                if self._noop_of_input(value) and "noop_output" in self.exclude:
                    continue
                if (value.ndim == 0 and "[" in code and value.requires_grad
                        and "getitem_0d" in self.exclude):
                    continue
                self.env[name] = value
                self.pool[name] = "temp"
                if cat == "view" and "[eager.tensor" not in code:
                    self.view_of[name] = self.view_of.get(uses[0], uses[0])
                self.count += 1
            return Step(code, name, tuple(uses), cat)
        return None


def generate(seed: int, exclude=frozenset(KNOWN_BUGGY), n_steps=None) -> Program:
    """A random program; every line ran eagerly on example values while it was drawn."""
    g = _Gen(seed, set(exclude))
    r = g.rng
    kinds = ["plain"] * 5 + ["outside"] * 3 + ["train"] * 2
    if "backward_inside" not in g.exclude:
        kinds += ["inside"] * 2
    kind = g.pick(kinds)
    grads = kind in ("outside", "inside")
    args = [g.new_input(f"a{i}", "arg", seed * 100 + i, grads)
            for i in range(int(r.integers(1, 4)))]
    captures = [g.new_input(f"c{i}", "capture", seed * 100 + 50 + i, grads)
                for i in range(int(r.integers(0, 3)))]
    model = optimizer = None
    between = ()
    steps = []
    calls = int(r.integers(2, 4))
    if kind == "train":
        model, optimizer, between = _train_setup(g, args, calls)
        steps = [Step("opt.zero_grad()", None, (), "train"), Step("model(a0)", "h", ("a0",), "train")]
    for _ in range(n_steps or int(r.integers(2, 9))):
        s = g.step(kind)
        if s is not None:
            steps.append(s)
    temps = [s.out for s in steps if s.out and s.category != "train"]
    if kind == "train":
        steps += _train_tail(g, temps)
        returns = ("loss",)
    elif kind in ("outside", "inside"):
        fl = [t for t in temps if g.env[t].dtype.kind == "f" and g.env[t].requires_grad]
        if not fl and "noop_output" not in g.exclude:
            fl = [n for n in g.float_names() if g.env[n].requires_grad]
        if not fl:
            kind = "plain"
        else:
            picked = fl[-1]
            if kind == "inside":
                steps.append(Step(f"({picked} * {picked}).sum()", "loss", (picked,), "inside"))
                steps.append(Step("loss.backward()", None, ("loss",), "inside"))
                returns = ("loss",) + tuple(t for t in temps[-2:] if t != picked)
            else:
                returns = (picked,) + tuple(t for t in temps[-2:-1] if t != picked)
    if kind == "plain":
        if not temps:
            steps.append(Step(f"{args[0].name} * 1", "t_out", (args[0].name,), "elementwise"))
            temps = ["t_out"]
        k = int(r.integers(1, 4))
        returns = tuple(temps[-k:])
    return Program(seed, args, captures, steps, returns, kind, calls, model, optimizer,
                   between)


def _train_setup(g, args, calls):
    x = g.env[args[0].name]
    if x.ndim == 0 or x.dtype.kind != "f" or x.shape[-1] == 0:
        args[0] = replace(args[0], shape=(3, 4), dtype="float32", layout="c", grad=False)
        g.env[args[0].name] = eval(args[0].source(str(args[0].seed)), g.env)
        x = g.env[args[0].name]
    n_in = x.shape[-1]
    hidden = g.pick((3, 4))
    layers = [f"eager.nn.Linear({n_in}, {hidden})", g.pick(("eager.nn.ReLU()", "eager.nn.Tanh()",
                                                           "eager.nn.GELU()"))]
    mode_cat = "module_mode" not in g.exclude
    if g.rng.random() < 0.4:
        layers.append(f"eager.nn.LayerNorm({hidden})")
    layers.append(f"eager.nn.Dropout({g.pick(('0.0', '0.5') if mode_cat else ('0.0',))})")
    model = "eager.nn.Sequential(" + ", ".join(layers) + ")"
    if "0.5" in model:
        model += ".eval()"
    g.env["model"] = eval(model, g.env)
    which = g.pick(("sgd", "sgdm", "adam", "adamw"))
    optimizer = {
        "sgd": "eager.optim.SGD(model.parameters(), lr=0.1)",
        "sgdm": "eager.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)",
        "adam": "eager.optim.Adam(model.parameters(), lr=0.01)",
        "adamw": "eager.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)",
    }[which]
    between = [None]
    for i in range(1, calls):
        stmt = f"opt.param_groups[0]['lr'] = {0.05 * i + 0.01:.2f}"
        if "optim_hparams" not in g.exclude and which != "sgd" and g.rng.random() < 0.5:
            key = "momentum" if which == "sgdm" else "betas"
            stmt = (f"opt.param_groups[0]['{key}'] = "
                    + ("0.5" if key == "momentum" else "(0.8, 0.99)"))
        between.append(stmt)
    g.env["h"] = g.env["model"](x)
    g.pool["h"] = "temp"
    return model, optimizer, tuple(between)


def _train_tail(g, temps):
    last = temps[-1] if temps and g.env[temps[-1]].dtype.kind == "f" else "h"
    return [
        Step(f"({last} * {last}).mean() + (h * h).mean()", "loss", (last, "h"), "train"),
        Step("loss.backward()", None, ("loss",), "train"),
        Step("opt.step()", None, (), "train"),
    ]


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
                records.append(("raises", type(e).__name__, msg))
                break
            consumed = ns["KIND"] in ("inside", "train") and "grad_after_backward" in ignore
            records.append(_snapshot(outs, args, state, not consumed))
    return records


def _tolerance(dtype):
    return 1e-4 if dtype == np.float32 else 1e-7


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
