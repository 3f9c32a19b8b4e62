"""`@function`: trace once per input signature, optimize, compile, and call.

    @tracer.function
    def gelu(x):
        return 0.5 * x * (1 + eager.tanh(0.79788456 * (x + 0.044715 * x ** 3)))

    y = gelu(x)                                  # traces, compiles, runs
    print(gelu.get_concrete_function(x))         # the IR and the kernels

Like tf.function, Python side effects (print, appending to lists) happen only
while tracing, i.e. once per new signature; tensors the function reads from
outside (module parameters, globals, closure variables) are captured and read
again at every call, so in-place updates between calls are seen without
retracing. Every other Python value the trace read (globals and closures of
every function that ran, `model.training`, entries of dicts, lists and
namespaces) is guarded (tracer.guards): a change traces again. A call that
rebinds outside state (`self.total = self.total + x`), or whose arguments and
captures share memory where the trace writes one in place, runs eagerly with a
warning naming the line (a TracingError under fullgraph=True).
"""
from __future__ import annotations

import functools
import inspect
import os
import sys
import threading
import warnings

import numpy as np

from eager import dispatch
from eager.dispatch import _state as _grad_state
from eager.errors import _is_library_file, user_location
from eager.optim import Optimizer  # noqa: F401 (imported here before the split; kept)
from eager.tensor import Tensor

from . import check as _check
from . import logs
from .pytree import LEAF, Static, bind_arguments, flatten, put_argument_containers
from .control import GradientThroughControlFlow
from .rebinding import StateRebound, StreamRead, _where_defined
from .errors import ProgramRaised, step_error
from .trace import (GradientBeforeTrace, HistoryAfterCall, AutogradStateChanged,
                    RandomStateInTrace, TracingError, current_trace)
# The compiled specializations and the tracing of one signature live in their own modules;
# these names stay importable from here (tests, tracer.check). Function calls
# `trace_function` through this module's attribute, so patching
# `tracer.function.trace_function` (tests/tracer/conftest.py) still takes effect.
from .concrete import MISS, ConcreteFunction, _sig_text, raised_by_check
from .host_random import HostRandomInTrace
from .tracing import trace_function

from .run_mode import _RUN_EAGERLY, functions_run_eagerly, run_eagerly  # noqa: F401
from .run_mode import eager_after_raise
from .retrace import changing_args, why_traced_again
from .spec import TensorSpec  # noqa: F401 - (its own module; importable from here)

WARN_AFTER_TRACES = 8


# --------------------------------------------------------------------------------------
# the decorator

class Function:
    """A Python function traced into graphs, one per input signature (see `function`)."""

    def __init__(self, fn, input_signature=None, static_argnums=(), static_argnames=(),
                 backend="numba", fullgraph=False, dynamic=None, max_traces=64,
                 optimize=True, name=None, check=None):
        functools.update_wrapper(self, fn)
        # Check mode (tracer.check): how many calls of each trace also run eagerly, 0 = off.
        self._check = _check.calls_to_check(check)
        self._fn = fn
        self._name = name or getattr(fn, "__name__", "fn")
        self.input_signature = list(input_signature) if input_signature is not None else None
        self._symbolic = self.input_signature is not None and any(
            d is None or isinstance(d, str) for s in self.input_signature for d in s.shape)
        self._spec_checks = None
        if self.input_signature is not None:
            self._spec_checks = tuple(
                (len(sp.shape), sp.dtype,
                 tuple((ax, d) for ax, d in enumerate(sp.shape) if isinstance(d, int)),
                 tuple((ax, d) for ax, d in enumerate(sp.shape) if isinstance(d, str)))
                for sp in self.input_signature)
        self.static_argnums = tuple(static_argnums) if not isinstance(static_argnums, int) \
            else (static_argnums,)
        self.static_argnames = (static_argnames,) if isinstance(static_argnames, str) \
            else tuple(static_argnames)
        self.backend = backend
        self.fullgraph = fullgraph
        if dynamic:
            # Shapes are specialized per call signature; symbolic sizes come from
            # input_signature. Accepting dynamic=True and specializing anyway would be a
            # silent no-op.
            raise NotImplementedError(
                "tracer.function(dynamic=True) is not supported: each new input shape is "
                "traced again; for a dimension that may vary, give input_signature="
                "[tracer.TensorSpec((None, ...), dtype)]")
        self.dynamic = dynamic
        self.max_traces = max_traces
        self.optimize = optimize
        self._cache: dict = {}
        self._fast: dict = {}  # (tensor signature, grad mode) -> ConcreteFunction
        self._last1 = None     # (shape, dtype, requires_grad, grad mode, concrete): last hit
        # With an input_signature, one trace per (requires_grad flags, grad mode) serves
        # every call whose tensors match it: (rank, dtype, fixed dims, named dims) per spec.
        self._fast_spec: dict = {}
        self._fast_ok = (not self.static_argnums and not self.static_argnames
                         and self.input_signature is None)
        self._lock = threading.RLock()
        self.trace_count = 0
        # Cache bookkeeping for stats() and max_traces' least-recently-used eviction. Calls
        # are counted once, at the top of __call__; a trace's last use (`_last_use`: that
        # count) is stamped at every hit, on the fast paths too (one attribute store).
        self._calls = 0
        self._misses = 0
        self._eager_calls = 0
        self._evictions = 0
        self._compile_seconds = 0.0
        self._warned = set()
        self._eager_keys = set()
        self._refused: dict = {}  # key -> traces refused for rebinding outside state
        try:
            self._signature = inspect.signature(fn)
        except (TypeError, ValueError):
            self._signature = None
        params = self._signature.parameters.values() if self._signature is not None else ()
        self._param_names = [p.name for p in params]
        # (fewer positional arguments than this, or any by name: bound to the signature;
        # with keyword-only parameters, every call)
        self._n_positional = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                                 for p in params)
        if any(p.kind is p.KEYWORD_ONLY for p in params):
            self._n_positional = sys.maxsize

    # -------------------------------------------------------------- methods
    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        return _BoundFunction(self, instance)

    def __repr__(self):
        return f"<tracer.function {self._name} traces={self.trace_count}>"

    # -------------------------------------------------------------- keys
    def _bind(self, args, kwargs):
        if kwargs or len(args) < self._n_positional:
            return bind_arguments(self._signature, args, kwargs)
        return args, kwargs

    def _flatten_args(self, args, kwargs):
        static_pos = set(self.static_argnums)
        static_names = set(self.static_argnames)
        leaves, names = [], []
        trees = []
        for i, a in enumerate(args):
            pname = self._param_names[i] if i < len(self._param_names) else f"arg{i}"
            if i in static_pos or pname in static_names:
                trees.append(_static(a))
            else:
                trees.append(flatten(a, leaves, pname, names))
        kw_trees = []
        for k in sorted(kwargs):
            if k in static_names:
                kw_trees.append((k, _static(kwargs[k])))
            else:
                kw_trees.append((k, flatten(kwargs[k], leaves, k, names)))
        return leaves, names, (tuple(trees), tuple(kw_trees))

    def _key(self, leaves, tree):
        spec = self.input_signature
        if spec is not None and self._symbolic:
            # A None dimension is symbolic in the trace: every size shares one key.
            sig = tuple((tuple(d if isinstance(w, int) else None
                               for d, w in zip(t._data.shape, s.shape)),
                         t._data.dtype, t.requires_grad) for t, s in zip(leaves, spec))
        else:
            sig = tuple((t._data.shape, t._data.dtype, t.requires_grad) for t in leaves)
        return (tree, sig, dispatch.is_grad_enabled())

    # -------------------------------------------------------------- calling
    def __call__(self, *args, **kwargs):
        try:
            return self._call(*args, **kwargs)
        except ProgramRaised as raised:
            return eager_after_raise(self, args, kwargs, raised)

    def _call(self, *args, **kwargs):
        self._calls += 1
        # Fast path: positional plain-tensor arguments whose signature already has a cached,
        # directly runnable trace. Skips flattening and the general key; guards still run.
        if self._fast and not kwargs and not dispatch._hooked_threads and not _RUN_EAGERLY[0]:
            if len(args) == 1:  # the commonest case, unrolled
                a = args[0]
                d = a._data if a.__class__ is Tensor else None
                if d.__class__ is np.ndarray:
                    # The last hit first: comparing four fields is cheaper than hashing
                    # the nested key.
                    last = self._last1
                    enabled = _grad_state.grad_enabled
                    if last is not None and last[0] == d.shape and last[1] is d.dtype and \
                            last[2] is a.requires_grad and last[3] is enabled:
                        concrete = last[4]
                    else:
                        concrete = self._fast.get((((d.shape, d.dtype, a.requires_grad),),
                                                   enabled))
                        if concrete is not None:
                            self._last1 = (d.shape, d.dtype, a.requires_grad, enabled,
                                           concrete)
                    if concrete is not None:
                        concrete._last_use = self._calls  # (max_traces' recency)
                        run1 = concrete.run1
                        if run1 is not None:  # (unguarded: nothing captured)
                            try:
                                return Tensor._wrap(run1(d))
                            except Exception as exc:
                                if raised_by_check(exc):
                                    raise ProgramRaised(str(exc)) from exc
                                raise step_error(exc)
                        out = concrete.call_fast(args)
                        if out is not MISS:
                            return out
            sig = []
            for a in args:
                if a.__class__ is not Tensor or a._data.__class__ is not np.ndarray:
                    break
                d = a._data
                sig.append((d.shape, d.dtype, a.requires_grad))
            else:
                concrete = self._fast.get((tuple(sig), dispatch._state.grad_enabled))
                if concrete is not None:
                    concrete._last_use = self._calls
                    out = concrete.call_fast(args)
                    if out is not MISS:
                        return out
        elif self._fast_spec and not kwargs and not dispatch._hooked_threads \
                and not _RUN_EAGERLY[0]:
            concrete = self._spec_hit(args)
            if concrete is not None:
                concrete._last_use = self._calls
                out = concrete.call_fast(args)
                if out is not MISS:
                    return out
        if _RUN_EAGERLY[0] or current_trace() is not None:
            # Eager mode, or called from inside another trace: run (and so inline) the body.
            return self._fn(*args, **kwargs)
        if self._check and not _check.inside(self):
            return _check.checked_call(self, args, kwargs)
        bargs, bkwargs = self._bind(args, kwargs)  # (f(x, True) and f(x, flag=True): one key)
        leaves, names, tree = self._flatten_args(bargs, bkwargs)
        if self.input_signature is not None:
            self._check_signature(leaves, names)
        key = self._key(leaves, tree)
        if key in self._eager_keys:
            self._eager_calls += 1
            return self._fn(*args, **kwargs)
        concrete = self._lookup(key, leaves)
        if concrete is None:
            concrete = self._trace_new(bargs, bkwargs, leaves, names, tree, key)
            if concrete is None:
                self._eager_calls += 1
                return self._fn(*args, **kwargs)
        if concrete.undo_state is not None:
            out = self._first_run(concrete, key, leaves, args, kwargs)
        else:
            out = self._call_traced(concrete, key, leaves, args, kwargs)
        if concrete.arg_containers:  # (`return xs`: the caller's own list, as eagerly)
            out = put_argument_containers(out, concrete.arg_containers, bargs, bkwargs)
        return out

    def _call_traced(self, concrete, key, leaves, args, kwargs):
        """Run trace `concrete` of these arguments (or eagerly, where it cannot serve)."""
        if concrete._alias is not None:
            why = concrete.alias_hazard(leaves)
            if why is not None:
                return self._eager_for_alias(args, kwargs, why)
        if concrete.differentiable and dispatch.is_grad_enabled():
            plan = concrete.backward_plan([t.requires_grad for t in leaves])
            if plan is None:
                return self._eager_for_grad(args, kwargs, concrete.plan_error)
            fn = self._fn
            return concrete.run_with_grad(leaves, plan, lambda: fn(*args, **kwargs))
        if concrete.writes_input_grads and concrete.grads_go_outside(leaves):
            # (the trace's backward() stops at its argument; eager's goes on through its graph)
            return self._eager_for_grad(args, kwargs, "an argument is a non-leaf tensor (a "
                                        "view or product of one that requires grad) and the "
                                        "function's backward() would go on into its graph",
                                        "pass a leaf (x.detach().requires_grad_()) or call "
                                        "backward() outside the function")
        if concrete.writes_input_grads and any(t._grad_hooks for t in leaves):
            # (the trace's arguments are tensors of its own, without the caller's hooks)
            return self._eager_for_grad(args, kwargs, "an argument has a gradient hook "
                                        "(register_hook) that the function's backward would "
                                        "run", "register the hook on a parameter the function "
                                        "reads, or call backward() outside the function")
        if concrete.writes_input_grads and any(t.grad is not None for t in leaves):
            # The trace began with every argument's .grad unset, so its backward assigns
            # .grad where eager would accumulate into the existing one.
            return self._eager_for_grad(args, kwargs, "an argument's .grad is set and the "
                                        "function's backward would accumulate into it",
                                        "set the argument's .grad to None before the call "
                                        "(and add the old gradient yourself if you need it)")
        for t in leaves:
            if t._data.__class__ is not np.ndarray:
                return self._fn(*args, **kwargs)
        if self._fast_ok and not kwargs and len(leaves) == len(args) and \
                all(a.__class__ is Tensor for a in args) and not concrete.writes_input_grads \
                and not (concrete.differentiable and key[2]) and not concrete.one_shot:
            # (A one-shot trace materializes state made on the first call; running it again
            # would start that state over, which is why _cache never keeps it either.)
            self._fast[(key[1], key[2])] = concrete
        elif self._spec_checks is not None and not self.static_argnums and \
                not self.static_argnames and not kwargs and len(leaves) == len(args) and \
                all(a.__class__ is Tensor for a in args) and not concrete.writes_input_grads \
                and not (concrete.differentiable and key[2]) and not concrete.one_shot:
            self._fast_spec[(tuple(t.requires_grad for t in leaves), key[2])] = concrete
        return concrete.run(leaves)

    def _warn_once(self, message):
        if message not in self._warned:
            self._warned.add(message)
            warnings.warn(f"tracer.function: {message}", RuntimeWarning,
                          stacklevel=_user_stacklevel())

    def _lookup(self, key, leaves=None):
        bucket = self._cache.get(key)
        if bucket is None:
            return None
        for concrete in bucket:
            if concrete.guard_failure() is None and (
                    leaves is None or concrete.layout_failure(leaves) is None):
                concrete._last_use = self._calls
                return concrete
        return None

    def stats(self) -> dict:
        """What this function's trace cache did: traces held, hits (calls run by a trace it
        held), misses (calls that traced), evictions (traces dropped at `max_traces`, least
        recently used first), compile seconds (tracing excluded).

        >>> f = tracer.function(lambda x: x * 2, max_traces=8)
        >>> f.stats()["traces"]
        0
        """
        held = sum(len(b) for b in self._cache.values())
        return {"traces": held, "hits": self._calls - self._misses - self._eager_calls,
                "misses": self._misses, "evictions": self._evictions,
                "compile_seconds": self._compile_seconds}

    def _first_run(self, concrete, key, leaves, args, kwargs):
        """The first run of a trace that made optimizer state (a first step's moments): if
        it raises, eager's failing call has made no state, so the trace's goes again, and
        with it the trace, which holds that state (the next call traces anew)."""
        undo, concrete.undo_state = concrete.undo_state, None
        try:
            return self._call_traced(concrete, key, leaves, args, kwargs)
        except ProgramRaised:  # (before the program changed any tensor)
            undo()
            self._drop(key, concrete)
            raise

    def _evict_least_recently_used(self) -> None:
        """Drop the trace used longest ago (with its program, kernels' entries and buffers:
        nothing else holds them) to make room for a new one."""
        victim_key, victim = None, None
        for key, bucket in self._cache.items():
            for concrete in bucket:
                if victim is None or getattr(concrete, "_last_use", 0) < \
                        getattr(victim, "_last_use", 0):
                    victim_key, victim = key, concrete
        if victim is None:
            return
        self._drop(victim_key, victim)
        self._evictions += 1
        logs.log("recompiles", f"{self._name}: max_traces={self.max_traces} reached; "
                 f"evicted the least recently used trace")

    def _drop(self, victim_key, victim) -> None:
        """Forget trace `victim` of key `victim_key` (every table that holds it)."""
        victim.undo_state = None  # (never run now: the state it could undo may go)
        bucket = self._cache.get(victim_key, [])
        if victim in bucket:
            bucket.remove(victim)
            if not bucket:
                del self._cache[victim_key]
        for table in (self._fast, self._fast_spec):
            for k in [k for k, c in table.items() if c is victim]:
                del table[k]
        if self._last1 is not None and self._last1[4] is victim:
            self._last1 = None

    def _eager_for_grad(self, args, kwargs,
                        why="outputs need gradients outside the function",
                        advice=None):
        """Run this call eagerly (autograd must see every op): a silent loss of the whole
        speedup, so it warns once per function and reason (a TracingError under
        fullgraph=True)."""
        if self.fullgraph or why not in self._warned:
            if advice is None:
                advice = ("return only values that need no gradient outside (loss.detach(), "
                          "loss.item(), h.detach() for a carried hidden state) and call "
                          "backward() inside the function; or keep the state updates "
                          "(optimizer step, running statistics, in-place writes) out of a "
                          "function whose outputs you backpropagate through outside")
            message = (f"{_user_def_location(self._fn)}: tracer.function {self._name}: "
                       f"{why}; so it runs eagerly (no speedup) while gradient mode is on. "
                       f"To compile it: {advice}")
            if self.fullgraph:
                raise TracingError(message)
            self._warned.add(why)
            warnings.warn(message, RuntimeWarning, stacklevel=_user_stacklevel())
            logs.log("recompiles", f"{self._name}: {why}; running it eagerly so autograd "
                     f"sees every op")
        return self._fn(*args, **kwargs)

    def _eager_for_alias(self, args, kwargs, why):
        message = (f"{user_location()}: tracer.function {self._name}: {why}; running such "
                   f"calls eagerly (the compiled function treats its arguments and captures "
                   f"as separate memory: pass distinct tensors, or .clone() one, to run it "
                   f"compiled)")
        if self.fullgraph:
            raise TracingError(message)
        if "alias" not in self._warned:
            self._warned.add("alias")
            warnings.warn(message, RuntimeWarning, stacklevel=_user_stacklevel())
        logs.log("recompiles", f"{self._name}: {why}; running this call eagerly")
        return self._fn(*args, **kwargs)

    def get_concrete_function(self, *args, **kwargs) -> ConcreteFunction:
        """Trace (or fetch) the specialization for these arguments without running it."""
        if not args and not kwargs and self.input_signature is not None:
            from eager import functions as F

            args = tuple(F.zeros(tuple(d if isinstance(d, int) else 1 for d in s.shape),
                                 dtype=s.dtype)
                         for s in self.input_signature)
        args, kwargs = self._bind(args, kwargs)
        leaves, names, tree = self._flatten_args(args, kwargs)
        if self.input_signature is not None:
            self._check_signature(leaves, names)
        key = self._key(leaves, tree)
        concrete = self._lookup(key, leaves)
        if concrete is None:
            try:
                concrete = self._trace_new(args, kwargs, leaves, names, tree, key, force=True)
            except ProgramRaised as raised:  # (the function's own error, while tracing)
                raise raised.__cause__ from None
        return concrete

    def _spec_hit(self, args):
        """The trace for positional tensor `args` that match the input_signature, or None
        (then the general path checks them and says what does not match)."""
        checks = self._spec_checks
        if len(args) != len(checks):
            return None
        named = None
        for a, (rank, dtype, fixed, names) in zip(args, checks):
            if a.__class__ is not Tensor:
                return None
            d = a._data
            if d.__class__ is not np.ndarray or d.ndim != rank or d.dtype != dtype:
                return None
            shape = d.shape
            for ax, size in fixed:
                if shape[ax] != size:
                    return None
            for ax, name in names:
                if named is None:
                    named = {}
                if named.setdefault(name, shape[ax]) != shape[ax]:
                    return None
        return self._fast_spec.get((tuple(a.requires_grad for a in args),
                                    _grad_state.grad_enabled))

    def _check_signature(self, leaves, names):
        spec = self.input_signature
        if len(spec) != len(leaves):
            raise TypeError(f"{self._name}: input_signature has {len(spec)} tensor specs but "
                            f"the call passes {len(leaves)} tensors ({', '.join(names)})")
        named: dict = {}
        for s, t, n in zip(spec, leaves, names):
            if not s.matches(t):
                raise TypeError(f"{self._name}: argument {n} is {_sig_text(t.shape, t.dtype)} "
                                f"but input_signature expects {s}; pass a matching tensor or "
                                f"change the signature")
            for axis, (d, size) in enumerate(zip(s.shape, t.shape)):
                if isinstance(d, str):
                    first = named.setdefault(d, (size, n, axis))
                    if first[0] != size:
                        raise TypeError(
                            f"{self._name}: dimension {d!r} is {first[0]} in argument "
                            f"{first[1]} (dim {first[2]}) but {size} in argument {n} (dim "
                            f"{axis}); input_signature names them as one size")

    # -------------------------------------------------------------- tracing
    def _trace_new(self, args, kwargs, leaves, names, tree, key, force=False):
        with self._lock:
            concrete = self._lookup(key, leaves)
            if concrete is not None:
                return concrete
            while sum(len(b) for b in self._cache.values()) >= max(self.max_traces, 1) \
                    and self._cache:
                self._evict_least_recently_used()
            self._explain_retrace(key, names)
            try:
                concrete = self._trace(args, kwargs, leaves, names, tree)
            except StateRebound as exc:
                if self.fullgraph:
                    raise TracingError(exc.message) from None
                self._warn_once(exc.message)
                # Once more and these arguments run eagerly for good (a lazily made
                # buffer is rebound on the first call only).
                self._refused[key] = self._refused.get(key, 0) + 1
                if self._refused[key] >= 2:
                    self._eager_keys.add(key)
                return None
            except (GradientBeforeTrace, HistoryAfterCall, HostRandomInTrace, StreamRead,
                    AutogradStateChanged, RandomStateInTrace) as exc:
                # (only eager autograd can go on into a graph made before the call, or give
                # state a history; only eager draws new numbers from host generators)
                if self.fullgraph:
                    raise TracingError(str(exc)) from None
                self._warn_once(f"{exc}. Running this signature eagerly instead")
                self._eager_keys.add(key)
                return None
            except GradientThroughControlFlow as exc:
                # Correct gradients need eager autograd here: run this signature eagerly.
                if "control-grad" not in self._warned:
                    self._warned.add("control-grad")
                    warnings.warn(f"tracer.function {self._name}: {exc}. Running this "
                                  f"signature eagerly instead.", RuntimeWarning,
                                  stacklevel=4)
                self._eager_keys.add(key)
                return None
            concrete.backend_name = self.backend
            for source, why in concrete.frozen:
                message = (f"{_where_defined(self._fn)}: {self._name} reads {source}, "
                           f"{why}")
                if self.fullgraph:
                    raise TracingError(message)
                self._warn_once(message)
            self.trace_count += 1
            if not force:
                self._misses += 1
            concrete._last_use = self._calls
            self._compile_seconds += concrete.compile_seconds
            if not concrete.one_shot:
                self._cache.setdefault(key, []).append(concrete)
            if self.trace_count == WARN_AFTER_TRACES and "many" not in self._warned:
                self._warned.add("many")
                changing = self._changing_args()
                warnings.warn(
                    f"{user_location()}: tracer.function {self._name} has been traced "
                    f"{self.trace_count} times"
                    f"{'; the changing argument: ' + changing if changing else ''}. Each new "
                    f"shape, dtype or static value traces again: pass varying Python values "
                    f"(a step counter) as tensors (eager.tensor(n)), list one that takes few "
                    f"values in static_argnames, or use input_signature with None dimensions",
                    RuntimeWarning, stacklevel=_user_stacklevel())
            return concrete

    def _trace(self, args, kwargs, leaves, names, tree):
        return trace_function(self._fn, self._name, args, kwargs, leaves, names, tree,
                              self.static_argnums, self.static_argnames, self._param_names,
                              self.backend, self.optimize,
                              self.input_signature if self._symbolic else None)

    def _changing_args(self) -> str:
        return changing_args(list(self._cache), self._last_names or [], self._param_names)

    _last_names = None

    def _explain_retrace(self, key, names):
        self._last_names = names
        if self._cache and logs.enabled("recompiles"):
            logs.log("recompiles", f"{self._name}: tracing again (trace #{self.trace_count + 1})"
                     f": {why_traced_again(self._cache, key, names)}")


def _user_stacklevel() -> int:
    """warnings.warn's stacklevel that points at the user's call, not into tracejit (the
    depth differs between f(x), a bound method and get_concrete_function)."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and _is_library_file(frame.f_code.co_filename):
        frame = frame.f_back
        level += 1
    return level


def _user_def_location(fn) -> str:
    """'file.py:LINE' where the user defined `fn` (for a bound Module.__call__, the
    module's forward)."""
    code = getattr(fn, "__code__", None)
    if code is None or _is_library_file(code.co_filename):
        owner = getattr(fn, "__self__", None)
        forward = getattr(type(owner), "forward", None) if owner is not None else None
        code = getattr(forward, "__code__", None) or code
    if code is None:
        return user_location()
    return f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}"


def _static(value):
    try:
        hash(value)
        return Static(value)
    except TypeError:
        return Static(value, by_identity=True)


class _BoundFunction:
    """`@function` on a method: the instance becomes a static (by identity) first argument."""

    def __init__(self, func: Function, instance):
        self._func = func
        self._instance = instance

    def __call__(self, *args, **kwargs):
        return self._func(self._instance, *args, **kwargs)

    def get_concrete_function(self, *args, **kwargs):
        return self._func.get_concrete_function(self._instance, *args, **kwargs)

    @property
    def trace_count(self):
        return self._func.trace_count

    def __repr__(self):
        return f"<bound {self._func!r} of {type(self._instance).__name__}>"


def function(fn=None, *, input_signature=None, static_argnums=(), static_argnames=(),
             backend="numba", fullgraph=False, dynamic=None, max_traces=64, check=None):
    """Trace `fn` into a graph per input signature and run it compiled.

    Usable as ``@function`` and ``@function(...)``, on free functions and methods.
    ``fullgraph=True`` turns every "this will be frozen" warning into a `TracingError`.
    ``dynamic``: None or False (the only modes): a trace per input shape, unless
    `input_signature` names a dimension that may vary (``None``); True raises
    NotImplementedError.
    ``check=True`` (or a number of calls N; ``TRACER_CHECK=1`` for every function) runs
    the first N calls of each trace eagerly as well and raises `tracer.CheckError` where
    the compiled result differs (see tracer.check).

    >>> @function
    ... def f(x):
    ...     return x * 2 + 1
    >>> f(eager.ones(3))
    tensor([3., 3., 3.])
    """
    def wrap(f):
        return Function(f, input_signature=input_signature, static_argnums=static_argnums,
                        static_argnames=static_argnames, backend=backend, fullgraph=fullgraph,
                        dynamic=dynamic, max_traces=max_traces, check=check)
    if fn is None:
        return wrap
    return wrap(fn)


__all__ = ["function", "Function", "ConcreteFunction", "TensorSpec", "run_eagerly",
           "TracingError", "LEAF"]
