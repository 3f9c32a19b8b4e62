"""Check mode: run the first calls of each trace eagerly as well, and compare.

    f = tracer.function(step, check=True)      # or check=N; TRACER_CHECK=1 for every function
    f(x)   # traces; runs eagerly on the state as it was, then compiled; compares

For each of the first N calls (default 2) of every trace, a checked call

1. snapshots every tensor the call can reach (arguments, the trace's captures, modules'
   parameters and buffers, optimizer state, `.grad`s) and the containers holding them
   (optimizer state dicts, modules' dicts, plain objects' attributes, lists, dicts);
2. runs the Python function eagerly (`run_eagerly` semantics: nested @functions inline),
   recording every op's value, and observes the outputs and that state by where it lives
   (`opt.state[0]['exp_avg']`, `model.0.weight.grad`, `self.total`);
3. puts the snapshot back into the same objects (a trace's guards check identities), the
   random generator included, and makes the ordinary compiled call;
4. compares outputs and state with dtype-aware tolerances: bit-exact for integers and
   bools, NaN where eager has NaN, infinities with their sign, floats within
   `TOLERANCES` (an optimizer's parameters also within an lr-scaled step where the two
   runs' gradients are rounding noise: `_StepAllowance`); and, where outputs carry
   gradients out of the call, the gradients a
   backward from them gives (one random cotangent, every leaf that requires grad). On a
   difference it raises `CheckError`, naming the first IR equation (and its kernel) whose
   value diverges, with the user's file and line.

When the eager run raises, what it changed is undone and the plain compiled call is made:
the caller gets its error and the state it leaves, as unchecked; if it returns instead,
that is a CheckError.

Localizing (tracer.check_compare): the compiled program is run step by step (kernel, BLAS
call, numpy step) and each stored value compared with the reference interpreter's on the
same graph (a codegen bug: the kernel is named); else the raw trace's equations, aligned
with the eager run's ops in dispatch order, are compared with them (a value the trace baked
in); else the optimized graph's (a pass). Where nothing diverges, the error says the
difference is in what the call returned or wrote back, rather than guess.

The compiled call's results are what the caller gets: with nothing to report, a checked
call returns what an unchecked one would. Side effects the snapshot does not cover (print,
files, closure variables rebound with `nonlocal`, threading objects such as an Event)
happen twice on a checked call; list
and dict contents are put back. Checked calls run one at a time. Off (the default),
nothing of this runs: the hook sits on Function.__call__'s slow path, behind one
attribute test, and the fast paths never see it.
"""
from __future__ import annotations

import threading
import types

import numpy as np

from eager import dispatch
from eager import random as _random
from eager.dtypes import finfo, is_floating
from eager.nn.module import Module
from eager.optim import Optimizer
from eager.protocol import TraceProtocol
from eager.tensor import Tensor

from . import settings
from .run_mode import _RUN_EAGERLY
from .check_compare import (CAPTURED, TOLERANCES, _Diff, _live, _ObservedTensor,
                            compare_arrays, computed_precision, differences, report)

ENV_VAR = settings.CHECK.name
DEFAULT_CALLS = 2
RECORD_LIMIT_BYTES = 1 << 28  # eager op values kept for localizing a difference


class CheckError(AssertionError):
    """A compiled call in check mode gave something other than the eager call."""


# --------------------------------------------------------------------------------------
# settings

_ENV: list = []


def env_calls(refresh: bool = False) -> int:
    """Calls per trace that `TRACER_CHECK` asks to check: unset or 0 off, 1 (or true, on,
    yes) the default of 2, a larger number that many. Read once (refresh=True: again)."""
    if refresh or not _ENV:
        raw = settings.CHECK.raw().lower()
        if raw in ("", "0", "false", "off", "no"):
            n = 0
        elif raw in ("1", "true", "on", "yes"):
            n = DEFAULT_CALLS
        else:
            try:
                n = int(raw)
            except ValueError:
                raise ValueError(f"{ENV_VAR}={raw!r}: expected 0, 1 or a number of calls to "
                                 f"check per trace") from None
        _ENV[:] = [max(n, 0)]
    return _ENV[0]


def calls_to_check(check) -> int:
    """`check=` of tracer.function as a number of calls per trace (0: off)."""
    if check is None:
        return env_calls()
    if check is True:
        return DEFAULT_CALLS
    if check is False:
        return 0
    if isinstance(check, int) and check >= 0:
        return check
    raise TypeError(f"tracer.function: check={check!r}; pass True, False or a number of "
                    f"calls to check per trace")


class _Local(threading.local):
    def __init__(self):
        self.inside = set()  # ids of Functions making their compiled call of a checked call


_local = _Local()


def inside(func) -> bool:
    """Whether `func` is making the compiled half of a checked call (which runs the
    ordinary call path)."""
    return id(func) in _local.inside


# --------------------------------------------------------------------------------------
# the state a call can reach

# Objects whose state is coordination between threads, not the call's state: putting an
# Event's flag back (set by another thread meanwhile) would make the eager run wait forever.
_NOT_STATE_MODULES = ("threading", "_thread", "queue", "multiprocessing", "asyncio",
                      "concurrent")


def _plain_object(obj) -> bool:
    return hasattr(obj, "__dict__") and not isinstance(obj, (type, types.ModuleType)) \
        and not callable(obj) and not isinstance(obj, Tensor) \
        and type(obj).__module__.split(".")[0] not in _NOT_STATE_MODULES


def _is_number(v) -> bool:
    return isinstance(v, (bool, int, float, np.number)) and not isinstance(v, Tensor)


class _World:
    """Where each reachable tensor (and Python number) lives, and the containers that hold
    them: what a snapshot saves and what a comparison looks at."""

    def __init__(self, roots, captures=(), capture_names=()):
        self.paths: dict = {}       # path -> Tensor, None (an unset .grad) or a number
        self.tensors: dict = {}     # id -> Tensor
        self.containers: dict = {}  # id -> dict, list or object whose __dict__ is saved
        for path, obj in roots:
            self._visit(path, obj, 0)
        for t, name in zip(captures, capture_names):
            if isinstance(t, Tensor) and id(t) not in self.tensors:
                self._tensor(f"{CAPTURED}{name}>", t)

    def _tensor(self, path, t):
        self.paths.setdefault(path, t)
        self.tensors.setdefault(id(t), t)
        g = t._grad
        self.paths.setdefault(path + ".grad", g)
        if g is not None:
            self.tensors.setdefault(id(g), g)

    def _container(self, obj) -> bool:
        """Remember `obj`; False if it was seen already."""
        if id(obj) in self.containers:
            return False
        self.containers[id(obj)] = obj
        return True

    def _visit(self, path, obj, depth):
        if isinstance(obj, Tensor):
            self._tensor(path, obj)
        elif _is_number(obj):
            self.paths.setdefault(path, obj)
        elif isinstance(obj, Module):
            if not self._container(obj):
                return
            for name, p in list(obj.named_parameters()) + list(obj.named_buffers()):
                self._tensor(f"{path}.{name}", p)
            for mname, m in obj.named_modules():
                self._container(m)
                for store in ("_parameters", "_buffers", "_modules"):
                    self._container(m.__dict__[store])
                # Plain attributes: `training`, a step counter, a tensor kept unregistered.
                prefix = f"{path}.{mname}" if mname else path
                for attr, v in list(vars(m).items()):
                    if not attr.startswith("_") and (_is_number(v) or isinstance(v, Tensor)):
                        self._visit(f"{prefix}.{attr}", v, 3)
        elif isinstance(obj, Optimizer):
            if not self._container(obj):
                return
            self._container(obj.state)
            self._container(obj.param_groups)
            params = []
            for gi, group in enumerate(obj.param_groups):
                self._container(group)
                for key, value in group.items():
                    if _is_number(value):
                        self.paths.setdefault(f"{path}.param_groups[{gi}][{key!r}]", value)
                    elif isinstance(value, tuple):
                        for j, v in enumerate(value):
                            if _is_number(v):
                                self.paths.setdefault(
                                    f"{path}.param_groups[{gi}][{key!r}][{j}]", v)
                params.extend(group["params"])
            for k, p in enumerate(params):
                self._tensor(f"{path}.params[{k}]", p)
                st = obj.state.get(p) if hasattr(obj.state, "get") else None
                if isinstance(st, dict):
                    self._container(st)
                    for sname, v in st.items():
                        self._visit(f"{path}.state[{k}][{sname!r}]", v, 3)
        elif isinstance(obj, (list, tuple)) and depth < 3:
            if isinstance(obj, list) and not self._container(obj):
                return
            for i, x in enumerate(obj):
                # Numbers in a list are more often a log (losses.append) than state: only
                # the list's tensors are compared (its contents are still put back).
                if not _is_number(x):
                    self._visit(f"{path}[{i}]", x, depth + 1)
        elif isinstance(obj, dict) and depth < 3:
            if not self._container(obj):
                return
            for k, x in list(obj.items()):
                self._visit(f"{path}[{k!r}]", x, depth + 1)
        elif depth < 2 and _plain_object(obj):
            if not self._container(obj):
                return
            for attr, x in list(vars(obj).items()):
                self._visit(f"{path}.{attr}", x, depth + 1)

    def observe(self) -> dict:
        """path -> a copy of its value now (arrays copied: later runs overwrite them)."""
        seen = {}
        for path, v in self.paths.items():
            if isinstance(v, Tensor):
                seen[path] = _ObservedTensor(v)
            else:
                seen[path] = v
        return seen


class _Snapshot:
    """Values and containers of a _World, put back into the same objects by restore()."""

    def __init__(self, world: _World):
        self.tensors = []
        for t in world.tensors.values():
            data = t._data
            self.tensors.append((t, data, np.array(data, copy=True), t.grad_fn, t._version,
                                 t._version[0], dict(t.__dict__)))
        self.containers = []
        for obj in world.containers.values():
            if isinstance(obj, dict):
                self.containers.append((obj, "dict", list(obj.items())))
            elif isinstance(obj, list):
                self.containers.append((obj, "list", list(obj)))
            else:
                self.containers.append((obj, "attrs", dict(vars(obj))))
        self.rng = _random.get_rng_state()

    def restore(self):
        for obj, kind, saved in self.containers:
            if kind == "dict":
                # (dict's own: an optimizer's state counts changes, this is none)
                dict.clear(obj)
                dict.update(obj, saved)
            elif kind == "list":
                # (list's own: an optimizer's group lists count changes, this is none)
                list.__setitem__(obj, slice(None), saved)
            else:
                d = vars(obj)
                d.clear()
                d.update(saved)
        for t, data, copy, grad_fn, version, v, attrs in self.tensors:
            if isinstance(data, np.ndarray) and data.flags.writeable and \
                    data.shape == copy.shape:
                np.copyto(data, copy)
            t._data = data
            t.grad_fn = grad_fn
            t._version = version
            version[0] = v
            t.__dict__.clear()
            t.__dict__.update(attrs)
        _random.set_rng_state(self.rng)


# --------------------------------------------------------------------------------------
# the checked call

# Checked calls run one at a time: each puts state back that another thread's call might
# be using, and switches every @function to eager for its eager run.
_LOCK = threading.RLock()


def checked_call(func, args, kwargs):
    """Function.__call__ in check mode (see the module docstring)."""
    with _LOCK:
        return _checked_call(func, args, kwargs)


def _checked_call(func, args, kwargs):
    from .captures import _roots

    bargs, bkwargs = func._bind(args, kwargs)  # (as Function._call keys a call)
    leaves, names, tree = func._flatten_args(bargs, bkwargs)
    if func.input_signature is not None:
        func._check_signature(leaves, names)
    key = func._key(leaves, tree)
    if key in func._eager_keys:
        return _compiled_call(func, args, kwargs)
    roots = [(desc, obj) for desc, _get, obj, _free in _roots(func._fn, args, kwargs)]
    before_trace = None
    concrete = func._lookup(key, leaves)
    if concrete is None:
        # Tracing may make state (an optimizer's first-step moments): the eager run must
        # see the state as it was before, the compiled one as tracing left it.
        before_trace = _Snapshot(_World(roots))
        concrete = func._trace_new(bargs, bkwargs, leaves, names, tree, key)
        if concrete is None:  # this signature runs eagerly: nothing to compare
            return _compiled_call(func, args, kwargs)
    done = getattr(concrete, "checks_done", 0)
    if done >= func._check or concrete.grads_go_outside(leaves):
        # (nothing to compare: such a call runs eagerly, and a second eager run's
        # backward would go through the outside graph the first one freed)
        return _compiled_call(func, args, kwargs)
    concrete.checks_done = done + 1

    def world():
        return _World(roots, concrete._captures, concrete.graph.capture_names)

    start_world = world()
    start = _Snapshot(start_world)
    steps = _StepAllowance(start_world)
    if before_trace is not None:
        before_trace.restore()
    records = _Recorder()
    records.rng = _random.get_rng_state()  # both runs draw the same random numbers
    try:
        eager_out = _run_eagerly(func, args, kwargs, records)
        eager_leaves, eager_tree = _flat_outputs(eager_out)
        eager_world = world()
        eager_seen = eager_world.observe()
        grads = _GradientCheck(eager_out, leaves, names, eager_world)
    except Exception as exc:
        eager_error = exc
    else:
        eager_error = None
    finally:
        start.restore()
        _random.set_rng_state(records.rng)
    if eager_error is not None:
        return _compiled_call_after_eager_raised(func, args, kwargs, concrete, eager_error)
    try:
        inputs = [np.array(a, copy=True) for a in concrete._input_values(leaves)]
    except AttributeError:  # a captured .grad is unset: the compiled call retraces
        inputs = None
    out = _compiled_call(func, args, kwargs, concrete)
    if concrete.checks_done < func._check:
        _keep_off_fast_paths(func, concrete)
    out_leaves, out_tree = _flat_outputs(out)
    seen = world().observe()
    diffs = differences(eager_tree, eager_leaves, out_tree, out_leaves, eager_seen, seen,
                        steps.bind(eager_seen, seen), _precision(concrete, leaves))
    diffs += grads.compare(out)
    if diffs:
        raise CheckError(report(func, concrete, diffs, inputs, records))
    return out


class _StepAllowance:
    """The tolerance of a parameter an optimizer updates, beyond the dtype's.

    An adaptive optimizer (Adam and its kin) divides a gradient by its own running scale,
    so a step's size hardly depends on the gradient's magnitude: where the gradient is
    rounding noise (exactly 0 eagerly, 1e-9 compiled: an attention key bias, whose
    gradient is 0 in exact arithmetic), the two runs step the parameter by unrelated
    amounts of up to about lr. So the gradient is compared as every tensor is (relative
    to its own scale), and the parameter gets, per element, an extra allowance of
    STEP_BOUND * lr * (the relative difference of the two runs' gradients there, at most
    1): nothing where the gradients agree to many digits (a wrong update is still caught
    there), up to STEP_BOUND * lr where the gradient is noise. Without both runs'
    `.grad` after the call (set to None inside it) there is no allowance."""

    STEP_BOUND = 4.0  # two steps' difference, each at most ~2 lr (Adam: lr (1-b1)/sqrt(1-b2))

    def __init__(self, world: _World):
        self.lrs = {}  # id(parameter) -> the largest lr of the groups holding it
        for obj in world.containers.values():
            if not isinstance(obj, Optimizer):
                continue
            for group in obj.param_groups:
                try:
                    lr = abs(float(group.get("lr", 0.0)))
                except (TypeError, ValueError):
                    continue
                for p in group.get("params", ()):
                    self.lrs[id(p)] = max(lr, self.lrs.get(id(p), 0.0))

    def bind(self, eager_seen: dict, seen: dict):
        if not self.lrs:
            return None

        def allowance(path, e, c):
            lr = self.lrs.get(e.ident)
            if not lr or e.ident != c.ident:
                return None
            ge, gc = eager_seen.get(path + ".grad"), seen.get(path + ".grad")
            if not isinstance(ge, _ObservedTensor) or not isinstance(gc, _ObservedTensor) \
                    or ge.data.shape != e.data.shape or gc.data.shape != e.data.shape \
                    or ge.data.dtype.kind != "f":
                return None
            a = ge.data.astype(np.float64)
            b = gc.data.astype(np.float64)
            with np.errstate(invalid="ignore", divide="ignore"):
                rel = np.abs(a - b) / np.maximum(np.maximum(np.abs(a), np.abs(b)),
                                                 np.finfo(np.float64).tiny)
            rel = np.where(np.isfinite(rel), np.minimum(rel, 1.0), 0.0)
            return self.STEP_BOUND * lr * rel

        return allowance


def _precision(concrete, leaves) -> tuple:
    """check_compare.computed_precision of the trace, its updates by the tensor they
    write (a captured tensor's data, an argument changed in place)."""
    graph = concrete.raw_graph
    ids = []
    for kind, i in graph.update_targets:
        if kind == "data":
            ids.append(id(concrete._captures[i]))
        elif kind == "input":
            ids.append(id(leaves[i]))
        else:
            ids.append(None)
    return computed_precision(graph, ids)


def _compiled_call_after_eager_raised(func, args, kwargs, concrete, eager_error):
    """The eager run raised (what it changed is undone): make the plain compiled call, so
    that the caller sees what an unchecked call gives, state included (a failing call may
    change state before it raises: BatchNorm counts the batch before rejecting it). It
    should raise too; if it returns, that is a difference."""
    try:
        _compiled_call(func, args, kwargs, concrete)
    except Exception as exc:
        if exc is not eager_error:
            exc.add_note(f"tracer check mode: the eager run of {func._name} raised as well "
                         f"({type(eager_error).__name__}: {eager_error})")
        raise
    if concrete.checks_done < func._check:
        _keep_off_fast_paths(func, concrete)
    raise CheckError(
        f"tracer check: {func._name} (call {concrete.checks_done} of the trace for "
        f"({concrete.signature})): the eager call raises {type(eager_error).__name__}: "
        f"{eager_error}; the compiled call returned without raising (its results and "
        f"state changes stand)") from eager_error


def _compiled_call(func, args, kwargs, concrete=None):
    """The ordinary call (every path it has), or for a one-shot trace (state it makes runs
    once, so it is never cached: calling again would trace again) that trace itself."""
    if concrete is not None and concrete.one_shot:
        if concrete.differentiable and dispatch.is_grad_enabled():
            leaves = _leaves(args, kwargs, func)
            plan = concrete.backward_plan([t.requires_grad for t in leaves])
            if plan is None:
                return func._eager_for_grad(args, kwargs, concrete.plan_error)
            return concrete.run_with_grad(leaves, plan, lambda: func._fn(*args, **kwargs))
        return concrete.run(_leaves(args, kwargs, func))
    _local.inside.add(id(func))
    func._calls -= 1  # (the checked call was counted once already: stats() stay as unchecked)
    try:
        return func(*args, **kwargs)
    finally:
        _local.inside.discard(id(func))


def _leaves(args, kwargs, func):
    return func._flatten_args(*func._bind(args, kwargs))[0]


def _keep_off_fast_paths(func, concrete):
    """A trace with checks to go must come back to the slow path, where the hook is."""
    for table in (func._fast, func._fast_spec):
        for k in [k for k, c in table.items() if c is concrete]:
            del table[k]
    if func._last1 is not None and func._last1[4] is concrete:
        func._last1 = None


class _Recorder(TraceProtocol):
    """Each op's value as the eager run computes it, in dispatch order (a trace protocol that
    runs ops eagerly and records their values)."""

    def __init__(self):
        self.values = []  # (op name, array)
        self.bytes = 0
        self.complete = True

    def apply(self, op, inputs, params):
        out = dispatch.eager_compute(op, inputs, params)
        if self.bytes < RECORD_LIMIT_BYTES:
            self.values.append((op.name, np.array(out, copy=True)))
            self.bytes += out.nbytes
        else:
            self.complete = False
        return out


def _run_eagerly(func, args, kwargs, records):
    flag = _RUN_EAGERLY
    was = flag[0]
    flag[0] = True  # nested @functions run their Python too
    prev = dispatch.set_protocol(records)
    try:
        return func._fn(*args, **kwargs)
    finally:
        dispatch.set_protocol(prev)
        flag[0] = was


def _flat_outputs(out):
    from .pytree import flatten

    leaves, names = [], []
    tree = flatten(out, leaves, "out", names)
    return [(n, _ObservedTensor(t)) for n, t in zip(names, leaves)], tree


class _GradientCheck:
    """Gradients that flow back through the outputs after the call: eager's, taken right
    after the eager run (its graph saved the arrays the restore then overwrites), against
    the compiled backward's, both for one random cotangent per differentiable output, with
    respect to every leaf tensor that requires grad (arguments, parameters)."""

    def __init__(self, eager_out, leaves, names, world):
        from eager import autograd

        self.expected = None
        if not dispatch.is_grad_enabled():
            return
        outs, _ = _tensor_leaves(eager_out)
        self.which = [k for k, t in enumerate(outs) if _live(t) and is_floating(t.dtype)]
        if not self.which:
            return
        wrt, where = {}, {}
        for t, name in zip(leaves, names):
            if t.requires_grad and t.grad_fn is None:
                wrt.setdefault(id(t), t)
                where.setdefault(id(t), name)
        for path, t in world.paths.items():
            if isinstance(t, Tensor) and t.requires_grad and t.grad_fn is None:
                wrt.setdefault(id(t), t)
                where.setdefault(id(t), path)
        if not wrt:
            return
        self.wrt = list(wrt.values())
        self.where = [where[id(t)] for t in self.wrt]
        rng = np.random.default_rng(0)
        self.cotangents = [Tensor._wrap(rng.standard_normal(outs[k].shape)
                                        .astype(outs[k].dtype)) for k in self.which]
        try:
            got = autograd.grad([outs[k] for k in self.which], self.wrt,
                                grad_outputs=self.cotangents, allow_unused=True)
        except Exception:  # noqa: BLE001 - no eager gradient to compare with
            return
        self.expected = [_grad_array(g, t) for g, t in zip(got, self.wrt)]

    def compare(self, out) -> list:
        from eager import autograd

        if self.expected is None:
            return []
        outs, _ = _tensor_leaves(out)
        if len(outs) != len(self.which) and max(self.which) >= len(outs):
            return []  # (the outputs' structure differs: reported already)
        picked = [outs[k] for k in self.which]
        if not all(t.requires_grad for t in picked):
            return []  # (reported as an output without grad_fn)
        try:
            got = autograd.grad(picked, self.wrt, grad_outputs=self.cotangents,
                                retain_graph=True, allow_unused=True)
        except Exception as exc:  # noqa: BLE001 - eager's backward worked
            return [_Diff("gradient", f"backward through the compiled outputs raises "
                          f"{type(exc).__name__}: {exc}; eagerly it works")]
        # The backward starts from cotangents of the outputs' dtypes: a float64 leaf's
        # gradient through a float32 output is float32 math cast up, eagerly too (fuzz seed
        # 17709: hypot(c0 f64[], t f32[3,4]) is float32, so c0's gradient is a float32 sum;
        # eager's and the compiled one differ from the exact value by 7e-7 and 1.1e-6), so
        # it gets the coarsest output dtype's tolerance.
        coarsest = max((t.dtype for t in picked), key=lambda d: finfo(d).eps)
        diffs = []
        for e, g, t, path in zip(self.expected, got, self.wrt, self.where):
            at = coarsest if finfo(coarsest).eps > finfo(e.dtype).eps else None
            d = compare_arrays(e, _grad_array(g, t), computed_at=at)
            if d is not None:
                diffs.append(_Diff(f"gradient w.r.t. {path} (backward from the outputs with "
                                   f"a random cotangent)", *d))
        return diffs


def _grad_array(g, t) -> np.ndarray:
    if g is None:  # unused: a zero gradient
        return np.zeros(t.shape, t.dtype)
    return np.array(g._data, copy=True)


def _tensor_leaves(out):
    from .pytree import flatten

    leaves, names = [], []
    tree = flatten(out, leaves, "out", names)
    return leaves, tree


__all__ = ["CheckError", "TOLERANCES", "calls_to_check", "checked_call", "compare_arrays",
           "env_calls"]
