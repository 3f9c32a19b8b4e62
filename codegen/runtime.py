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
import math
import threading
import warnings
from dataclasses import dataclass

import numpy as np

from eager.ops import OPS, Dim
from tracer import logs
from tracer.ir import Graph, Literal, Var
from tracer.symbolic import (SymbolicDimError, bind_params, bind_shape, binder,
                             check_nonempty, graph_dims, nonempty_checks, param_has_dims,
                             substitute_graph)

from . import ahead, build
from .emit import PARALLEL_MIN_SIZE, emit_kernel
from .fuse import CallStep, KernelGroup, ViewStep, describe, merge_adjacent, partition
# The executor's parts in their own modules. Names the runner reads through this module
# (and tests patch here: AUTOTUNE_MATMUL, _matmul_choice) are imported into it.
from .inplace_plan import InplaceUpdate, _aligned_reads, _plan_inplace  # noqa: F401
from .matmul_layout import (AUTOTUNE_MATMUL, AUTOTUNE_MAX_MKN, _matmul_choice,  # noqa: F401
                            _other_layout)
from .outpool import _recycled, _recycles
from .parallel import _split_call

log = logging.getLogger("tracer.kernels")
_warned: set = set()  # sources of the kernels whose numpy fallback was announced


class FallbackWarning(RuntimeWarning):
    """A kernel could not be built: its equations run through numpy (the registry's
    reference implementations) instead, with eager's results, slower. Issued once per
    distinct kernel; the test suite turns it into an error (tests/conftest.py)."""


def _warn_fallback(group: KernelGroup, error: str, stage: str = "build") -> None:
    """Say once that `group`'s kernel runs through numpy, at the user's line that made the
    program compile (its first call), naming the kernel, the lines it computes and why."""
    from eager.errors import user_location_full

    lines = []
    for e in group.members:
        if e.loc and e.loc not in lines:
            lines.append(e.loc)
    where = f" (from {', '.join(lines[:3])}{', ...' if len(lines) > 3 else ''})" if lines \
        else ""
    filename, lineno = user_location_full()
    warnings.warn_explicit(
        f"codegen: could not {stage} kernel {group.name}{where}: {error}; running its "
        f"{len(group.members)} equations through numpy instead (same results, slower)",
        FallbackWarning, filename, lineno, module="codegen.runtime")


@dataclass(eq=False)
class Kernel:
    """One compiled fused kernel."""

    name: str
    kind: str
    source: str
    group: KernelGroup
    entry: object = None        # what runs: the compiled entry point (None if the build failed)
    module: str = ""            # the generated module's name
    file: str = ""              # its source file, in the cache directory
    error: str = ""

    @property
    def fn(self):
        """The generated module's Numba dispatcher (None if the build failed). A kernel
        loaded from its object file has none until asked: this imports the module then."""
        if self.entry is None:
            return None
        return build.load_module(self.source, self.name).kernel

    def __repr__(self) -> str:
        state = "compiled" if self.entry is not None else f"fallback ({self.error})"
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
        self._descs: list = []  # per op: what runner.py-style generation needs, or None
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
        # most are written straight into the tensors they update (_plan_inplace), the
        # rest land in reused buffers that the caller copies over their targets (W7's
        # Adam kernels spent most of their time faulting in three fresh 4 MiB arrays).
        self._escaping = set()
        for x in graph.outputs:
            while isinstance(x, Var):
                self._escaping.add(id(x))
                e = self.part.views.get(id(x))
                x = e.inputs[0] if e is not None else None
        self._tls = threading.local()
        # Updates written straight into the tensor they update (see _plan_inplace).
        self.inplace = _plan_inplace(graph, self.part, self._escaping)
        # ...planned on the separate kernels, whose order merging keeps.
        merge_adjacent(self.part, _small)
        self._dest_pos = {}  # slot of an update value -> its position in `dests`
        self.n_inputs = len(graph.inputs)
        self._flat_cache = [None] * self.n_args  # per capture slot: (array, its flat view)
        self.const_slots = []
        for v, value in graph.consts:
            self.const_slots.append((self._slot(v), value))
        self._ahead = ahead.start(self)  # a child compiles some kernels meanwhile
        try:
            for step in self.part.steps:
                n = len(self._descs)
                if isinstance(step, KernelGroup):
                    self.ops.append(self._kernel_op(step))
                elif isinstance(step, CallStep):
                    self.ops.append(self._call_op(step.eqn, step.how))
                elif isinstance(step, ViewStep):
                    self.ops.append(self._call_op(step.eqn, "view"))
                if len(self._descs) == n:
                    self._descs.append(None)
        finally:  # (if a step raises, the child must not outlive the failed build)
            self._ahead.close()
        self.result_reads = [self._reader(x) for x in graph.results]
        self._pad = [None] * (self.n_slots - self.n_args)
        self._result_slots = None
        if all(isinstance(x, Var) for x in graph.results):
            self._result_slots = [self.slots[id(x)] for x in graph.results]
        self.call1 = None  # set by _direct_call for a one-array-in, one-out program
        self._direct = self._direct_call()
        self.runner_source = None
        self._runner = None
        if self._direct is None:
            self._runner = self._generate_runner()

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
    def updates_in(self, group: KernelGroup) -> dict:
        """The in-place updates `group`'s kernel writes through the input it updates
        (emit_kernel's `io`): id(new value) -> the value it overwrites."""
        mine = set(map(id, group.parts or [group]))
        return {key: ip.old for key, ip in self.inplace.items()
                if ip.io and id(self.part.group_of.get(key)) in mine}

    def _kernel_op(self, group: KernelGroup):
        io = self.updates_in(group)
        try:
            source, ks = self._ahead.emit(self.part, group, io)  # (emitted there already)
        except SymbolicDimError:
            raise  # (compile_numba checked: a kernel of a per-size program never raises it)
        except Exception as exc:  # noqa: BLE001 - a code generator bug: fall back too
            kernel = Kernel(group.name, group.kind, "", group)
            self.kernels.append(kernel)
            return self._fall_back(group, kernel, exc, "generate", group.outputs)
        kernel = Kernel(group.name, group.kind, source, group)
        self.kernels.append(kernel)
        logs.log("kernels", lambda: f"kernel {group.name}:\n{source}")
        try:
            with self._ahead.loading(source):
                kernel.entry, kernel.module, kernel.file = build.load_kernel(source,
                                                                             group.name)
        except Exception as exc:  # noqa: BLE001 - never a crash: fall back below
            return self._fall_back(group, kernel, exc, "build", ks.outputs)
        in_slots = [self.slots[id(v)] for v in ks.args]
        # Arrays this program allocated itself are C-contiguous and writable, and their
        # flat views are kept in `flat`; anything else (arguments, captures, consts, numpy
        # results) is checked on every call.
        own = self._own_slots
        ins = [(s, s not in own) for s in in_slots]
        outs = []
        for v in ks.outputs:
            s = self._slot(v)
            own.add(s)
            if id(v) in io:  # written through the input it updates: no argument of its own
                outs.append((s, None, None, False, self.slots[id(io[id(v)])], -1))
                continue
            dest = -1
            if id(v) in self.inplace:
                dest = self._dest_pos.setdefault(s, len(self._dest_pos))
            outs.append((s, tuple(v.type.shape), v.type.dtype, id(v) not in self._escaping,
                         None, dest))
        entry = kernel.entry
        if ks.split is not None:
            entry = _split_call(entry, ks.split, 64 if group.kind == "elementwise" else 1)
        self._kernel_io = (in_slots, outs, entry)
        self._kernel_dims = ks.dims
        if self._bind is None:
            self._descs.append(("kernel", entry, ins, outs))
        return self._kernel_run(ins, outs, entry, ks.dims)

    def _fall_back(self, group: KernelGroup, kernel: Kernel, exc: Exception, stage: str,
                   outputs):
        """`group` as numpy steps (`_interpreted_group`), the user told once per kernel."""
        kernel.error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        # Once per distinct kernel (its source, else its name and error), not per name
        # alone: another function or shape that happens to share the name is a different
        # kernel. (Marked as told only once the warning returns: where it is an error,
        # every failure raises.)
        key = kernel.source or f"{group.name}\0{kernel.error}"
        if key not in _warned:
            _warn_fallback(group, kernel.error, stage)
            _warned.add(key)
        mine = set(map(id, group.parts or [group]))
        for k in [k for k in self.inplace if id(self.part.group_of.get(k)) in mine]:
            del self.inplace[k]  # the fallback writes fresh arrays
        return self._interpreted_group(group, outputs)

    def _kernel_run(self, ins, outs, entry, dims):
        """A kernel step as a closure over the slot list (what runs when the program has
        no generated runner: symbolic sizes, fallbacks, control flow). With symbolic sizes,
        output shapes are bound per call (pooled buffers follow the size) and the sizes
        are passed after the arrays."""
        tls = self._tls
        sizes_slot = self._sizes_slot
        flat_of = self._flat

        def run(env, flat, dests):
            sizes = env[sizes_slot] if sizes_slot is not None else None
            args = []
            for s, check in ins:
                a = flat[s]
                if a is None:
                    a = env[s]
                    a = flat[s] = flat_of(a, s) if check else a.reshape(-1)
                args.append(a)
            for s, shape, dtype, pooled, io_slot, dest in outs:
                if io_slot is not None:
                    # The kernel wrote into the array it read: the capture itself when it
                    # was contiguous and writable (flat_of hands back its view), else a copy.
                    a = env[io_slot]
                    f = flat[io_slot]
                    env[s] = a if _is_view_of(f, a) else f.reshape(a.shape)
                    flat[s] = f
                    continue
                if sizes is not None:
                    shape = bind_shape(shape, sizes)
                if dest >= 0 and dests is not None and dests[dest] is not None:
                    o = dests[dest]
                elif pooled:
                    pool = tls.__dict__.setdefault("buffers", {})
                    pair = pool.get(s)
                    if pair is None or pair[0].shape != shape:
                        o = np.empty(shape, dtype)
                        pair = pool[s] = (o, o.reshape(-1))
                    o = pair[0]
                elif _recycles(shape, dtype):
                    o = _recycled(tls.__dict__.setdefault("rings", {}).setdefault(s, []),
                                  shape, dtype)
                else:
                    o = np.empty(shape, dtype)
                f = o.reshape(-1)
                env[s] = o
                flat[s] = f
                args.append(f)
            if sizes is not None:
                entry(*args, *[sizes[d] for d in dims])
            else:
                entry(*args)
        return run

    def _flat(self, a, s, read_only=False):
        """`_kernel_arg(a)` for the array in slot `s`. For captures (parameters, optimizer
        state: the same arrays call after call) the last answer is kept when it is a view;
        a copy (of a non-contiguous or read-only array) is made afresh at every call, since
        the array's contents may have changed. Arguments are not kept: that would keep the
        caller's last input alive."""
        if s < self.n_inputs or s >= self.n_args:
            return _kernel_arg(a)
        hit = self._flat_cache[s]
        if hit is not None and hit[0] is a:
            return hit[1]
        f = _kernel_arg(a, read_only)
        self._flat_cache[s] = (a, f) if _is_view_of(f, a) else None
        return f

    def _interpreted_group(self, group: KernelGroup, outputs):
        """A kernel that could not be built, as its equations run one by one through the
        registry's numpy implementations (the reference semantics). Values come from this
        run (the group's own members, and views of them: a multi kernel's later loop nest
        reads an earlier one's values through views that no slot holds), else from slots
        (and views of slot values)."""
        members = list(group.members)
        out_slots = [(id(v), self._slot(v)) for v in outputs]
        slots = self.slots
        views = self.part.views
        sizes_slot = self._sizes_slot

        def run(env, flat, dests):
            sizes = env[sizes_slot] if sizes_slot is not None else None
            local = {}
            for e in members:
                vals = [_value_of(x, env, slots, views, local, sizes) for x in e.inputs]
                params = e.params if sizes is None else bind_params(e.params, sizes)
                local[id(e.out)] = np.asarray(OPS[e.op].impl(*vals, **params))
            for key, s in out_slots:
                env[s] = local[key]
        return run

    def _call_op(self, e, how):
        reads = [self._reader(x) for x in e.inputs]
        out_slots = [self._slot(o) for o in e.outs]
        sizes_slot = self._sizes_slot
        if OPS[e.op].control:  # cond, while_loop: the row runs the sub-graphs
            run_control = OPS[e.op].run

            def run(env, flat, dests):
                sizes = env[sizes_slot] if sizes_slot is not None else None
                outs = run_control(e, [r(env) for r in reads], sizes)
                for s, o in zip(out_slots, outs):
                    env[s] = o
            return run
        impl = OPS[e.op].impl
        params = e.params
        (out_slot,) = out_slots
        if sizes_slot is not None and any(param_has_dims(v) for v in params.values()):
            def run(env, flat, dests):  # a shape parameter holding a symbolic size: bind it
                out = impl(*[r(env) for r in reads], **bind_params(params, env[sizes_slot]))
                env[out_slot] = out if out.__class__ is np.ndarray else np.asarray(out)
            return run
        direct = [self.slots.get(id(x)) if isinstance(x, Var) else None for x in e.inputs]
        described = False
        if None not in direct:
            # The commonest ops get lines of their own in the generated runner (see
            # _generate_runner); as closures (no runner) they run the registry's numpy
            # implementation below, except matmul, which can write into a .grad's array.
            if e.op in ("permute", "reshape", "matmul", "gather") or (
                    e.op == "scatter_add" and self._unique_positions(e)):
                self._descs.append((e.op, direct, out_slot, e))
                described = True
            if e.op == "matmul":
                s0, s1 = direct
                matmul = np.matmul
                dest = -1
                if id(e.out) in self.inplace:
                    dest = self._dest_pos.setdefault(out_slot, len(self._dest_pos))

                def run(env, flat, dests):
                    if dest >= 0 and dests is not None and dests[dest] is not None:
                        env[out_slot] = matmul(env[s0], env[s1], out=dests[dest])
                    else:
                        env[out_slot] = matmul(env[s0], env[s1])
                return run
        if not described and all(x is None or isinstance(x, Literal) or id(x) in self.slots
                                 for x in e.inputs):
            self._descs.append(("call", impl, out_slot, e))

        def run(env, flat, dests):
            out = impl(*[r(env) for r in reads], **params)
            env[out_slot] = out if out.__class__ is np.ndarray else np.asarray(out)
        return run

    def _generate_runner(self):
        """The whole program as one generated Python function: each step a line or two
        over local variables, instead of closures indexing a slot list (W5's 22 steps
        spent more time in that bookkeeping than in most of their kernels). Returns None
        (the closures run instead) for programs with symbolic sizes, fallbacks, control
        flow or literal results. The source is kept in `runner_source`."""
        if self._bind is not None or None in self._descs or self._result_slots is None:
            return None
        ns = {"empty": np.empty, "zeros": np.zeros, "matmul": np.matmul,
              "fortran": np.asfortranarray, "contiguous": np.ascontiguousarray,
              "asarray": np.asarray, "ndarray": np.ndarray, "flat_of": self._flat,
              "arg": _kernel_arg, "is_view": _is_view_of, "tls": self._tls,
              "fc": self._flat_cache,
              # numpy's IEEE warnings from these lines are filtered as codegen's own are
              # (codegen/__init__.py): the filter matches on the module name.
              "__name__": "codegen.runner"}
        lines = ["def run(args, dests):"]
        if self.n_args:
            lines.append("    " + ", ".join(f"v{s}" for s in range(self.n_args))
                         + (",", "")[self.n_args > 1] + " = args")
        for s, value in self.const_slots:
            ns[f"v{s}"] = value
        flat_known = set()
        pooled = []  # (slot, shape, dtype) of the per-thread buffers, in order
        rings = []  # slots of outputs recycled through per-thread rings (_recycled)

        # Capture slots no kernel writes into (io slots are parameters and optimizer state
        # updated in place): a read-only array there (a live hyperparameter's) is passed
        # as it is, a view, rather than copied at every call.
        written = {o[4] for d in self._descs if d and d[0] == "kernel" for o in d[3]}

        def flat_of(s):
            if s not in flat_known:
                flat_known.add(s)
                if s in self._own_slots:
                    lines.append(f"    f{s} = v{s}.reshape(-1)")
                elif self.n_inputs <= s < self.n_args:
                    # A capture: its flat view from the last call when it is the same array
                    # (`_flat`'s cache, inlined); w<slot> says whether f<slot> is a view.
                    lines.append(f"    h = fc[{s}]")
                    lines.append(f"    if h is not None and h[0] is v{s}:")
                    lines.append(f"        f{s} = h[1]; w{s} = True")
                    lines.append("    else:")
                    read = ", True" if s not in written else ""
                    lines.append(f"        f{s} = flat_of(v{s}, {s}{read}); "
                                 f"w{s} = is_view(f{s}, v{s})")
                else:
                    lines.append(f"    f{s} = arg(v{s})")
            return f"f{s}"

        body_start = len(lines)
        fortran = set()  # slots holding a Fortran-ordered array (as built; not checked)
        for k, desc in enumerate(self._descs):
            kind = desc[0]
            if kind == "kernel":
                _, entry, ins, outs = desc
                ns[f"k{k}"] = entry
                args = [flat_of(s) for s, _check in ins]
                after = []
                for s, shape, dtype, is_pooled, io_slot, dest in outs:
                    flat_known.add(s)
                    if io_slot is not None:
                        # (io inputs are captures: see _plan_inplace)
                        after.append(f"    v{s} = v{io_slot} if w{io_slot} "
                                     f"else f{io_slot}.reshape(v{io_slot}.shape)")
                        after.append(f"    f{s} = f{io_slot}")
                        continue
                    ns[f"t{s}"] = (shape, dtype)
                    if is_pooled:
                        pooled.append((s, shape, dtype))
                        fresh = f"v{s}, f{s} = bufs[{len(pooled) - 1}]"
                    else:
                        if _recycles(shape, dtype):
                            rings.append(s)
                            make = f"recycled(rings[{len(rings) - 1}], *t{s})"
                        else:
                            make = f"empty(*t{s})"
                        fresh = (f"v{s} = {make}; f{s} = "
                                 + (f"v{s}" if len(shape) == 1 else f"v{s}.reshape(-1)"))
                    if dest >= 0:
                        lines.append(f"    d = dests[{dest}] if dests is not None else None")
                        lines.append("    if d is not None:")
                        lines.append(f"        v{s} = d; f{s} = d.reshape(-1)")
                        lines.append("    else:")
                        lines.append(f"        {fresh}")
                    else:
                        lines.append(f"    {fresh}")
                    args.append(f"f{s}")
                lines.append(f"    k{k}({', '.join(args)})  # {self.kernels[len([d for d in self._descs[:k] if d and d[0] == 'kernel'])].name}")
                lines.extend(after)
                continue
            if kind == "call":
                _, impl, out, e = desc
                ns[f"op{k}"] = impl
                ns[f"p{k}"] = e.params
                x = e.inputs[0] if e.inputs else None
                if e.op == "check_class_index" and isinstance(x, Var) \
                        and np.dtype(x.type.dtype).kind == "i":
                    # The registry's check, inlined (a third of its cost was the call): seen
                    # as unsigned, a negative index exceeds any size; on a hit the op's own
                    # implementation raises its IndexError.
                    v = f"v{self.slots[id(x)]}"
                    if math.prod(x.type.shape):
                        ns["umax"] = np.maximum.reduce
                        ns[f"u{k}"] = np.dtype(f"u{np.dtype(x.type.dtype).itemsize}")
                        lines.append(f"    if umax({v}.view(u{k}), None) >= {int(e.params['size'])}: "
                                     f"op{k}({v}, **p{k})  # check_class_index raises")
                    lines.append(f"    v{out} = {v}.view()")
                    continue
                operands = []
                for j, x in enumerate(e.inputs):
                    if x is None:
                        operands.append("None")
                    elif isinstance(x, Literal):
                        ns[f"l{k}_{j}"] = np.array(x.value)
                        operands.append(f"l{k}_{j}")
                    else:
                        operands.append(f"v{self.slots[id(x)]}")
                lines.append(f"    v{out} = op{k}({', '.join(operands)}, **p{k})  # {e.op}")
                lines.append(f"    if v{out}.__class__ is not ndarray: v{out} = asarray(v{out})")
                continue
            _, direct, out, e = desc
            a = [f"v{s}" for s in direct]
            if kind == "permute":
                lines.append(f"    v{out} = {a[0]}.transpose({tuple(e.params['perm'])})")
                if tuple(e.params["perm"]) == (1, 0) and direct[0] not in fortran:
                    fortran.add(out)  # the transpose of a C-ordered matrix (as a rule)
            elif kind == "reshape":
                lines.append(f"    v{out} = {a[0]}.reshape({tuple(e.params['shape'])})")
            elif kind == "gather":
                lines.append(f"    v{out} = {a[0]}[{', '.join(a[1:])}]")
            elif kind == "scatter_add":
                ns[f"t{out}"] = (tuple(e.params["shape"]), e.out.type.dtype)
                lines.append(f"    v{out} = zeros(*t{out}); v{out}[{', '.join(a[1:])}] = {a[0]}"
                             "  # scatter_add, no position repeats")
            else:  # matmul
                a = self._tuned_operands(e, direct, a, fortran)
                dest = self._dest_pos.get(out, -1) if id(e.out) in self.inplace else -1
                if dest >= 0:
                    lines.append(f"    d = dests[{dest}] if dests is not None else None")
                    lines.append(f"    v{out} = matmul({a[0]}, {a[1]}) if d is None else "
                                 f"matmul({a[0]}, {a[1]}, out=d)")
                else:
                    lines.append(f"    v{out} = matmul({a[0]}, {a[1]})")
        if pooled:
            ns["pool_specs"] = [(shape, dtype) for _, shape, dtype in pooled]
            lines[body_start:body_start] = [
                "    bufs = tls.__dict__.get('runner_buffers')",
                "    if bufs is None:",
                "        bufs = tls.runner_buffers = [(o, o.reshape(-1)) for o in "
                "(empty(shape, dtype) for shape, dtype in pool_specs)]"]
        if rings:
            ns["recycled"], ns["n_rings"] = _recycled, len(rings)
            lines[body_start:body_start] = [
                "    rings = tls.__dict__.get('output_rings')",
                "    if rings is None:",
                "        rings = tls.output_rings = [[] for _ in range(n_rings)]"]
        lines.append(f"    return [{', '.join(f'v{s}' for s in self._result_slots)}]")
        source = "\n".join(lines) + "\n"
        try:
            exec(compile(source, f"<tracejit runner {self.graph.name}>", "exec"), ns)
        except SyntaxError:  # pragma: no cover - a generator bug: run the closures
            return None
        self.runner_source = source
        return ns["run"]

    def _tuned_operands(self, e, slots, names, fortran) -> list:
        """The operand expressions of runner matmul `e`, one copied into the other layout
        where that measured faster (_matmul_choice)."""
        x, y = e.inputs
        shapes = (tuple(x.type.shape), tuple(y.type.shape))
        if not AUTOTUNE_MATMUL or len(shapes[0]) != 2 or len(shapes[1]) != 2 \
                or e.out.type.dtype not in (np.float32, np.float64) \
                or math.prod(shapes[0]) * shapes[1][1] > AUTOTUNE_MAX_MKN:
            return names
        layouts = ["F" if s in fortran else "C" for s in slots]
        if layouts[0] == layouts[1]:
            return names
        choice = _matmul_choice(*shapes, e.out.type.dtype, *layouts)
        if not choice:
            return names
        j = "ab".index(choice)
        names = list(names)
        names[j] = f"{('fortran', 'contiguous')[layouts[j] == 'F']}({names[j]})"
        return names

    def _unique_positions(self, e) -> bool:
        """Whether scatter_add `e` writes each output position at most once: some index is
        a constant, already of the indices' broadcast shape, whose values are distinct and
        within their dimension (so no two of them name one position, negatives included)."""
        g, *idx = e.inputs
        consts = {id(v): value for v, value in self.graph.consts}
        if tuple(g.type.shape) != tuple(np.broadcast_shapes(*(x.type.shape for x in idx))):
            return False
        for axis, x in enumerate(idx):
            c = consts.get(id(x))
            if c is None or tuple(c.shape) != tuple(g.type.shape):
                continue
            size = e.out.type.shape[axis]
            if c.size and (c.min() < 0 or c.max() >= size):
                continue
            flat = np.sort(c, axis=None)  # (not np.unique: it imports numpy.ma, 14 ms)
            if not (flat[1:] == flat[:-1]).any():
                return True
        return False

    # -------------------------------------------------------------- calling
    def __call__(self, args, dests=None):
        """Run on `args` (arrays of the inputs, then of the captures). `dests`, when given,
        holds per `dest_updates` entry the array that update's target tensor holds now
        (or None): such updates are computed straight into it."""
        direct = self._direct
        if direct is not None:
            return direct(args)
        runner = self._runner
        if runner is not None:
            return runner(args, dests)
        env = list(args) + self._pad
        if self._sizes_slot is not None:
            sizes = env[self._sizes_slot] = self._bind(args)
            check_nonempty(self._nonempty, sizes)
        flat = [None] * self.n_slots
        for s, value in self.const_slots:
            env[s] = value
        for op in self.ops:
            op(env, flat, dests)
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
        out_pos = {o[0]: j for j, o in enumerate(outs)}
        if any(s not in out_pos for s in self._result_slots) or \
                any(pooled or io is not None or dest >= 0 for _, _, _, pooled, io, dest in outs):
            return None
        order = [out_pos[s] for s in self._result_slots]
        specs = [(shape, dtype) for _, shape, dtype, _, _, _ in outs]
        if self._bind is None and any(_recycles(shape, dtype) for shape, dtype in specs):
            return None  # the runner recycles large outputs; its overhead does not matter
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

        # (One kernel output may be several results: an output that is also an update,
        # `return x.grad * 1` after a backward inside the function.)
        if len(in_slots) == 1 and len(specs) == 1 and len(order) == 1:
            (s0,) = in_slots
            ((shape0, dtype0),) = specs
            flat_out = len(shape0) == 1  # already the 1-D array the kernel takes

            def call1(a):  # one array in, one out: what ConcreteFunction.run1 calls
                out = empty(shape0, dtype0)
                entry(arg(a), out if flat_out else out.reshape(-1))
                return out
            self.call1 = call1 if s0 == 0 and self.n_args == 1 and len(order) == 1 else None

            if len(order) > 1:
                # The result is also an update (x.mul_(2); return x): every result slot
                # gets it, or the write-back of the argument is lost.
                n_results = len(order)

                def direct1_shared(args):
                    out = empty(shape0, dtype0)
                    entry(arg(args[s0]), out if flat_out else out.reshape(-1))
                    return [out] * n_results
                return direct1_shared

            def direct1(args):  # unrolled: comprehensions cost more than the kernel here
                out = empty(shape0, dtype0)
                entry(arg(args[s0]), out if flat_out else out.reshape(-1))
                return [out]
            return direct1

        def direct(args):
            arrays = [arg(args[s]) for s in in_slots]
            results = [empty(shape, dtype) for shape, dtype in specs]
            entry(*arrays, *[r.reshape(-1) for r in results])
            return [results[j] for j in order]
        return direct

    def references(self, slot: int, a) -> int:
        """How many references this program keeps between calls to the array `a` of
        argument slot `slot` (the flat-view cache of a capture: the array and its view), so
        a caller counting references (tracer.ownership) can tell them from outside ones."""
        hit = self._flat_cache[slot] if slot < len(self._flat_cache) else None
        return 2 if hit is not None and hit[0] is a else 0

    @property
    def dest_updates(self) -> list:
        """Update indices whose target arrays `__call__` takes in `dests`, in order."""
        update_of = {self.slots[key]: ip.update for key, ip in self.inplace.items()}
        return [update_of[s] for s, _ in sorted(self._dest_pos.items(), key=lambda t: t[1])]

    def describe(self) -> str:
        text = describe(self.part)
        if self._bind is not None:
            dims = ", ".join(map(str, graph_dims(self.graph)))
            text += f"\n  symbolic sizes {dims}: bound per call, run-time arguments of the kernels"
        failed = [k for k in self.kernels if k.entry is None]
        if failed:
            text += "\n" + "\n".join(f"  note: {k.name} runs through numpy ({k.error})"
                                     for k in failed)
        return text


def _kernel_arg(a, read_only=False):
    """A flat, C-ordered, writable view (or copy) of `a`, as kernels take their arrays;
    with `read_only` (an array the kernel only reads) a read-only view will do."""
    if a.__class__ is not np.ndarray:
        a = np.asarray(a)
    flags = a.flags
    if flags.c_contiguous and (flags.writeable or read_only):
        return a if a.ndim == 1 else a.reshape(-1)
    flat = a.reshape(-1)  # a copy in C order when `a` is not contiguous
    # ... except when the strides are uniform (a[::2], a[::-1], (3,1) sliced with a step):
    # then reshape(-1) returns a strided 1-D *view*, which the kernel (entered without
    # argument typing) would read as contiguous memory: wrong values. Copy those too.
    if not (flat.flags.writeable and flat.flags.c_contiguous):
        flat = flat.copy()
    return flat


def _small(group) -> bool:
    """Kernels that merge_adjacent may run as one: below the prange size (and of known
    size: a symbolic one may be large)."""
    return not any(isinstance(d, Dim) for d in group.shape) \
        and math.prod(group.shape) < PARALLEL_MIN_SIZE


def _is_view_of(f, a) -> bool:
    """Whether `f`, from `_kernel_arg(a)`, is a view of `a`'s memory rather than a copy."""
    if f is a:
        return True
    b = f.base
    return b is not None and (b is a or b is a.base)


def _value_of(x, env, slots, views, local, sizes=None):
    """A value for the interpreted fallback: a literal, a value this run computed
    (`local`), one in its slot, or a view of any of these (evaluated, then kept in
    `local`)."""
    if x is None:
        return None
    if isinstance(x, Literal):
        return x.value
    v = local.get(id(x))
    if v is not None:
        return v
    s = slots.get(id(x))
    if s is not None and env[s] is not None:
        return env[s]
    e = views.get(id(x))
    if e is None:
        raise KeyError(f"the numpy fallback cannot find {x!r}")  # a partition bug
    src = _value_of(e.inputs[0], env, slots, views, local, sizes)
    params = e.params if sizes is None else bind_params(e.params, sizes)
    v = local[id(x)] = np.asarray(OPS[e.op].impl(src, **params))
    return v


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

    dest_updates = ()  # (each size's Program plans its own in-place updates)

    def references(self, slot: int, a) -> int:
        """`Program.references`, over every size's program."""
        return sum(p.references(slot, a) for p in list(self._programs.values()))

    def __call__(self, args, dests=None):
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
        merge_adjacent(part, _small)
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
