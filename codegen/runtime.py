"""The executor: a compiled program is its kernels, BLAS calls and numpy steps, in order.

Values live in a flat list of slots (graph inputs, captures, consts, then
step outputs).  Kernels take flat 1-D views of C-ordered arrays: `reshape(-1)`
is free for contiguous arrays and makes a C-ordered copy of anything else, so
non-contiguous and negative-stride inputs are read correctly.  Outputs are
allocated with numpy's allocator outside Numba (faster than allocating inside
a jitted function, which page-faults on fresh memory).

Symbolic dimensions (a None of an input_signature, `tracer.symbolic`) are bound
from the arguments' shapes at each call: kernels take them as int64 arguments
(loop bounds, named as the IR prints them), outputs are allocated from them, and
op parameters holding them are substituted before numpy runs the op.  Emission
refuses (SymbolicDimError) where a symbolic size would have to be a stride - an
array it indexes has the size after its leading dimension, such as a (4, N0)
result - or a compile-time constant (a row buffer of that length); a graph with
such a kernel runs as `PerSizeProgram`: the whole program specialized and
compiled once per distinct size, cached.  Symbolic loops are never prange'd.
"""
from __future__ import annotations

import logging
import threading
import warnings
from dataclasses import dataclass

import numpy as np

from eager.ops import OPS, Dim
from tracer import logs
from tracer.interpret import _run_cond, _run_while
from tracer.ir import Graph, Literal, Var
from tracer.symbolic import (SymbolicDimError, bind_params, bind_shape, binder,
                             check_nonempty, graph_dims, nonempty_checks, param_has_dims,
                             substitute_graph)

from . import build
from .emit import emit_kernel
from .fuse import CallStep, KernelGroup, ViewStep, describe, partition

log = logging.getLogger("tracer.kernels")
_warned: set = set()


@dataclass(eq=False)
class Kernel:
    """One compiled fused kernel."""

    name: str
    kind: str
    source: str
    group: KernelGroup
    fn: object = None           # the Numba dispatcher (None if the build failed)
    module: str = ""
    error: str = ""

    def __repr__(self) -> str:
        state = "compiled" if self.fn is not None else f"fallback ({self.error})"
        return f"<Kernel {self.name} {self.kind} {state}>"


class Program:
    """The 'numba' backend's executable for one graph."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.part = partition(graph)
        self.slots: dict = {}
        self._own_slots: set = set()
        self.n_slots = 0
        self.kernels: list = []
        self.ops: list = []
        self._kernel_io = None  # (input slots, output specs, entry) of the last kernel
        for v in tuple(graph.inputs) + tuple(graph.captures):
            self._slot(v)
        self.n_args = self.n_slots
        # Symbolic dims: bound at each call into a slot of their own ({Dim: size}).
        self._bind = binder(graph)
        self._sizes_slot = None
        self._nonempty = ()
        if self._bind is not None:
            self._sizes_slot = self.n_slots
            self.n_slots += 1
            self._nonempty = nonempty_checks(graph)
        # Values that leave the program (outputs, and what output views look into) get
        # fresh memory every call; every other kernel output reuses a buffer per thread,
        # which also saves the page faults of touching new memory. Updates do not leave:
        # the caller copies them into the tensors they update (tracer.function), so an
        # optimizer step's new parameters and moments land in reused buffers (W7's Adam
        # kernels spent most of their time faulting in three fresh 4 MiB arrays).
        self._escaping = set()
        for x in graph.outputs:
            while isinstance(x, Var):
                self._escaping.add(id(x))
                e = self.part.views.get(id(x))
                x = e.inputs[0] if e is not None else None
        self._tls = threading.local()
        self.const_slots = []
        for v, value in graph.consts:
            self.const_slots.append((self._slot(v), value))
        for step in self.part.steps:
            if isinstance(step, KernelGroup):
                self.ops.append(self._kernel_op(step))
            elif isinstance(step, CallStep):
                self.ops.append(self._call_op(step.eqn, step.how))
            elif isinstance(step, ViewStep):
                self.ops.append(self._call_op(step.eqn, "view"))
        self.result_reads = [self._reader(x) for x in graph.results]
        self._pad = [None] * (self.n_slots - self.n_args)
        self._result_slots = None
        if all(isinstance(x, Var) for x in graph.results):
            self._result_slots = [self.slots[id(x)] for x in graph.results]
        self._direct = self._direct_call()

    # -------------------------------------------------------------- slots
    def _slot(self, v: Var) -> int:
        s = self.slots.get(id(v))
        if s is None:
            s = self.n_slots
            self.slots[id(v)] = s
            self.n_slots += 1
        return s

    def _reader(self, x):
        if x is None:
            return lambda env: None
        if isinstance(x, Literal):
            value = x.value
            return lambda env: np.array(value)
        s = self.slots[id(x)]
        return lambda env: env[s]

    # -------------------------------------------------------------- steps
    def _kernel_op(self, group: KernelGroup):
        source, ks = emit_kernel(self.part, group)
        kernel = Kernel(group.name, group.kind, source, group)
        self.kernels.append(kernel)
        logs.log("kernels", lambda: f"kernel {group.name}:\n{source}")
        try:
            module = build.load_module(source, group.name)
            kernel.fn = module.kernel
            kernel.module = module.__name__
        except Exception as exc:  # noqa: BLE001 - never a crash: fall back below
            kernel.error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            # Once per distinct kernel (its source), not per name: another function or
            # shape that happens to share the name is a different kernel.
            if source not in _warned:
                _warned.add(source)
                warnings.warn(f"codegen: could not build kernel {group.name} ({kernel.error}); "
                              f"running its {len(group.members)} equations through numpy "
                              f"instead", RuntimeWarning, stacklevel=2)
            return self._interpreted_group(group, ks.outputs)
        in_slots = [self.slots[id(v)] for v in ks.args]
        # Arrays this program allocated itself are C-contiguous and writable; anything else
        # (arguments, captures, consts, numpy results) is checked on every call.
        checked = [s not in self._own_slots for s in in_slots]
        outs = [(self._slot(v), tuple(v.type.shape), v.type.dtype, id(v) not in self._escaping)
                for v in ks.outputs]
        for s, _, _, _ in outs:
            self._own_slots.add(s)
        tls = self._tls
        self._kernel_io = (in_slots, outs, None)
        entry = kernel.fn
        if hasattr(entry, "get_overload"):  # not under NUMBA_DISABLE_JIT=1 (plain Python)
            entry = entry.get_overload(entry.signatures[0])  # skips argument typing
        ins = list(zip(in_slots, checked))
        self._kernel_io = (in_slots, outs, entry)
        self._kernel_dims = ks.dims
        if self._bind is not None:
            return self._symbolic_kernel_run(ins, outs, entry, ks.dims)

        def run(env):
            args = []
            for s, check in ins:
                a = env[s]
                if check:
                    a = _kernel_arg(a)
                else:
                    a = a.reshape(-1)
                args.append(a)
            pool = None
            for s, shape, dtype, pooled in outs:
                if pooled:
                    if pool is None:
                        pool = tls.__dict__.setdefault("buffers", {})
                    o = pool.get(s)
                    if o is None:
                        o = pool[s] = np.empty(shape, dtype)
                else:
                    o = np.empty(shape, dtype)
                env[s] = o
                args.append(o.reshape(-1))
            entry(*args)
        return run

    def _symbolic_kernel_run(self, ins, outs, entry, dims):
        """A kernel call with symbolic sizes: output shapes bound per call, sizes passed."""
        tls = self._tls
        sizes_slot = self._sizes_slot

        def run(env):
            sizes = env[sizes_slot]
            args = [_kernel_arg(env[s]) if check else env[s].reshape(-1) for s, check in ins]
            for s, shape, dtype, pooled in outs:
                shape = bind_shape(shape, sizes)
                if pooled:
                    pool = tls.__dict__.setdefault("buffers", {})
                    o = pool.get(s)
                    if o is None or o.shape != shape:
                        o = pool[s] = np.empty(shape, dtype)
                else:
                    o = np.empty(shape, dtype)
                env[s] = o
                args.append(o.reshape(-1))
            entry(*args, *[sizes[d] for d in dims])
        return run

    def _interpreted_group(self, group: KernelGroup, outputs):
        members = list(group.members)
        reads = []
        for e in members:
            for x in e.inputs:
                if isinstance(x, Var) and id(x) not in {id(m.out) for m in members}:
                    reads.append(x)
        out_slots = [(id(v), self._slot(v)) for v in outputs]
        slots = self.slots
        sizes_slot = self._sizes_slot

        def run(env):
            local = {}
            sizes = env[sizes_slot] if sizes_slot is not None else None
            for x in reads:
                if id(x) not in local:
                    local[id(x)] = _value_of(x, env, slots, self.part, sizes)
            for e in members:
                vals = [x.value if isinstance(x, Literal) else local[id(x)] for x in e.inputs]
                params = e.params if sizes is None else bind_params(e.params, sizes)
                local[id(e.out)] = np.asarray(OPS[e.op].impl(*vals, **params))
            for key, s in out_slots:
                env[s] = local[key]
        return run

    def _call_op(self, e, how):
        reads = [self._reader(x) for x in e.inputs]
        out_slots = [self._slot(o) for o in e.outs]
        sizes_slot = self._sizes_slot
        if e.op == "cond":
            def run(env):
                sizes = env[sizes_slot] if sizes_slot is not None else None
                outs = _run_cond(e, [r(env) for r in reads], sizes)
                for s, o in zip(out_slots, outs):
                    env[s] = o
            return run
        if e.op == "while_loop":
            def run(env):
                sizes = env[sizes_slot] if sizes_slot is not None else None
                outs = _run_while(e, [r(env) for r in reads], sizes)
                for s, o in zip(out_slots, outs):
                    env[s] = o
            return run
        impl = OPS[e.op].impl
        params = e.params
        (out_slot,) = out_slots
        if sizes_slot is not None and any(param_has_dims(v) for v in params.values()):
            def run(env):  # a shape parameter holding a symbolic size: bind it now
                out = impl(*[r(env) for r in reads], **bind_params(params, env[sizes_slot]))
                env[out_slot] = out if out.__class__ is np.ndarray else np.asarray(out)
            return run

        def run(env):
            out = impl(*[r(env) for r in reads], **params)
            env[out_slot] = out if out.__class__ is np.ndarray else np.asarray(out)
        return run

    # -------------------------------------------------------------- calling
    def __call__(self, args):
        direct = self._direct
        if direct is not None:
            return direct(args)
        env = list(args) + self._pad
        if self._sizes_slot is not None:
            sizes = env[self._sizes_slot] = self._bind(args)
            check_nonempty(self._nonempty, sizes)
        for s, value in self.const_slots:
            env[s] = value
        for op in self.ops:
            op(env)
        slots = self._result_slots
        if slots is not None:
            return [env[s] for s in slots]
        return [r(env) for r in self.result_reads]

    def _direct_call(self):
        """For the common tiny program - one kernel from the arguments to the results -
        a call without the slot list (per-call overhead is the point of W6)."""
        if len(self.kernels) != 1 or len(self.ops) != 1 or self.const_slots \
                or self._kernel_io is None or self._nonempty:
            return None
        in_slots, outs, entry = self._kernel_io
        if any(s >= self.n_args for s in in_slots) or self._result_slots is None:
            return None
        out_pos = {s: j for j, (s, _, _, _) in enumerate(outs)}
        if any(s not in out_pos for s in self._result_slots) or any(p for *_, p in outs):
            return None
        order = [out_pos[s] for s in self._result_slots]
        specs = [(shape, dtype) for _, shape, dtype, _ in outs]
        empty = np.empty
        arg = _kernel_arg
        if self._bind is not None:
            where = self._bind.where  # Dim -> (argument, axis) holding its size
            if any(d not in where for d in graph_dims(self.graph)):
                return None
            # each size read straight from the arguments' shapes, no {Dim: size} dict
            sized = [(tuple(where[d] if isinstance(d, Dim) else d for d in shape), dtype)
                     for shape, dtype in specs]
            dim_at = [where[d] for d in self._kernel_dims]

            def direct_symbolic(args):
                arrays = [arg(args[s]) for s in in_slots]
                results = [empty(tuple(args[d[0]].shape[d[1]] if d.__class__ is tuple else d
                                       for d in shape), dtype) for shape, dtype in sized]
                entry(*arrays, *[r.reshape(-1) for r in results],
                      *[args[i].shape[axis] for i, axis in dim_at])
                return [results[j] for j in order]
            return direct_symbolic

        if len(in_slots) == 1 and len(specs) == 1:
            (s0,) = in_slots
            ((shape0, dtype0),) = specs

            def direct1(args):  # unrolled: comprehensions cost more than the kernel here
                out = empty(shape0, dtype0)
                entry(arg(args[s0]), out.reshape(-1))
                return [out]
            return direct1

        def direct(args):
            arrays = [arg(args[s]) for s in in_slots]
            results = [empty(shape, dtype) for shape, dtype in specs]
            entry(*arrays, *[r.reshape(-1) for r in results])
            return [results[j] for j in order]
        return direct

    def describe(self) -> str:
        text = describe(self.part)
        if self._bind is not None:
            dims = ", ".join(map(str, graph_dims(self.graph)))
            text += f"\n  symbolic sizes {dims}: bound per call, run-time arguments of the kernels"
        failed = [k for k in self.kernels if k.fn is None]
        if failed:
            text += "\n" + "\n".join(f"  note: {k.name} runs through numpy ({k.error})"
                                     for k in failed)
        return text


def _kernel_arg(a):
    """A flat, C-ordered, writable view (or copy) of `a`, as kernels take their arrays."""
    if a.__class__ is not np.ndarray:
        a = np.asarray(a)
    flags = a.flags
    if flags.c_contiguous and flags.writeable:
        return a.reshape(-1)
    flat = a.reshape(-1)  # a copy in C order when `a` is not contiguous
    # ... except when the strides are uniform (a[::2], a[::-1], (3,1) sliced with a step):
    # then reshape(-1) returns a strided 1-D *view*, which the kernel (entered without
    # argument typing) would read as contiguous memory: wrong values. Copy those too.
    if not (flat.flags.writeable and flat.flags.c_contiguous):
        flat = flat.copy()
    return flat


def _value_of(x, env, slots, part, sizes=None):
    """A value for the interpreted fallback: from its slot, or by evaluating its views."""
    s = slots.get(id(x))
    if s is not None and env[s] is not None:
        return env[s]
    e = part.views.get(id(x))
    if e is None:
        raise KeyError(f"fallback cannot find {x!r}")
    src = _value_of(e.inputs[0], env, slots, part, sizes)
    params = e.params if sizes is None else bind_params(e.params, sizes)
    return np.asarray(OPS[e.op].impl(src, **params))


class PerSizeProgram:
    """A graph with symbolic dims that some kernel cannot take as run-time sizes: one
    `Program` per distinct binding of the sizes, specialized and compiled on first use
    (kernels then have literal shapes; their modules land in the on-disk cache as usual)."""

    def __init__(self, graph: Graph, why: str):
        self.graph = graph
        self.why = why
        self._bind = binder(graph)
        self._dims = graph_dims(graph)
        self._programs: dict = {}
        self._lock = threading.Lock()
        self._last = None

    @property
    def kernels(self) -> list:
        """The kernels of the specialization used last (none before the first call)."""
        return self._last.kernels if self._last is not None else []

    def __call__(self, args):
        sizes = self._bind(args)
        key = tuple(sizes[d] for d in self._dims)
        program = self._programs.get(key)
        if program is None:
            with self._lock:
                program = self._programs.get(key)
                if program is None:
                    program = Program(substitute_graph(self.graph, sizes))
                    self._programs[key] = program
        self._last = program
        return program(args)

    def describe(self) -> str:
        dims = ", ".join(map(str, self._dims))
        text = (f"symbolic sizes {dims}: compiled per size ({self.why}); "
                f"{len(self._programs)} size(s) so far")
        if self._last is not None:
            text += "\n" + self._last.describe()
        return text


def _symbolic_kernels_ok(graph: Graph):
    """None if every kernel of `graph` can take its symbolic sizes at run time, else why not
    (emission is cheap: this runs before anything compiles)."""
    name = "fusion"
    try:
        part = partition(graph)
        for step in part.steps:
            if isinstance(step, KernelGroup):
                name = f"kernel {step.name}"
                emit_kernel(part, step)
    except SymbolicDimError as exc:
        return f"{name}: {exc.detail}"
    return None


def compile_numba(graph: Graph) -> Program:
    if binder(graph) is not None:
        why = _symbolic_kernels_ok(graph)
        if why is not None:
            program = PerSizeProgram(graph, why)
            logs.log("fusion", lambda: f"{graph.name}: {program.describe()}")
            return program
    program = Program(graph)
    logs.log("fusion", lambda: f"{graph.name}:\n{program.describe()}")
    return program
