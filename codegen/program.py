"""A compiled program as data: its steps, in order, over a flat list of value slots.

Slots hold the graph inputs, then the captures, then consts and step outputs. A step is
one of: a kernel call (`KernelCall`), a numpy step (`NumpyStep`: a registry op, BLAS
matmul, a view), a kernel that could not be built and runs through numpy
(`FallbackStep`) or a sub-graph (`SubgraphStep`: cond, while_loop). Symbolic sizes (a
None of an input_signature) are bound from the arguments' shapes at each call and passed
to the steps that need them. One runner is generated from this list (codegen.runner):
it is what every call executes, and `describe()` prints the same list.
"""
from __future__ import annotations

import math
import threading

import numpy as np

from eager.dtypes import is_half
from eager.ops import Dim
from tracer import logs
from tracer.ir import Graph, Literal, Var
from tracer.symbolic import SymbolicDimError, binder, graph_dims, nonempty_checks

from . import ahead, build, fallback, gemm, runner, runner_forms
from .emit import PARALLEL_MIN_SIZE, runs_parallel
from .fuse import CallStep, KernelGroup, ViewStep, describe, merge_adjacent, partition
from .inplace_plan import _plan_inplace
from .kernel_source import canonical
from .lower import LOWERING
from .parallel import _split_call
from .step_kernels import Split
from .steps import (subgraph_runner, FallbackStep, Kernel, KernelCall, KernelOut, NumpyStep,
                    SubgraphStep, step_counts, step_text)


class Program:
    """The 'numba' backend's executable for one graph: `program(args, dests=None)`."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.part = partition(graph)
        self.slots: dict = {}
        self.slot_vars: list = []
        self.own_slots: set = set()  # C-contiguous writable arrays this program allocates
        self.kernels: list = []
        self.steps: list = []
        self._failed_builds: dict = {}  # compiled code -> why its build failed
        for v in tuple(graph.inputs) + tuple(graph.captures):
            self._slot(v)
        self.n_args = len(self.slot_vars)
        self.n_inputs = len(graph.inputs)
        self.bind = binder(graph)  # None, or args -> {Dim: size}
        self.dims = graph_dims(graph) if self.bind is not None else []
        self.nonempty = nonempty_checks(graph) if self.bind is not None else ()
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
        self.tls = threading.local()
        # Updates written straight into the tensor they update (see _plan_inplace).
        self.inplace = _plan_inplace(graph, self.part, self._escaping)
        # ...planned on the separate kernels, whose order merging keeps.
        merge_adjacent(self.part, small_kernel)
        self._dest_pos = {}  # slot of an update value -> its position in `dests`
        self._flat_cache = [None] * self.n_args  # per capture slot: (array, its flat view)
        self.const_slots = [(self._slot(v), value) for v, value in graph.consts]
        self._defined = set(range(self.n_args)) | {s for s, _ in self.const_slots}
        # Every kernel's source, emitted once (a symbolic size a kernel cannot take at run
        # time raises SymbolicDimError here, before anything forks or compiles).
        self.emitted = ahead.emit_all(self)
        self.step_sources = self._step_sources()  # (compiled ahead too)
        self.ahead_sources = self._ahead_sources()  # (and these)
        self._ahead = ahead.start(self)  # a child compiles some kernels meanwhile
        try:
            for step in self.part.steps:
                if isinstance(step, KernelGroup):
                    self.steps.append(self._kernel_op(step))
                elif isinstance(step, CallStep):
                    self.steps.append(self._call_op(step.eqn, step.how))
                elif isinstance(step, ViewStep):
                    self.steps.append(self._call_op(step.eqn, "view"))
            for source, name in self.ahead_sources:  # (before the children are stopped)
                with self._ahead.loading(source):
                    try:
                        build.load_kernel(source, name)
                    except Exception:  # noqa: BLE001 - the runner builds it, or falls back
                        pass
        finally:  # (if a step raises, the child must not outlive the failed build)
            self._ahead.close()
            self.emitted, self.step_sources, self.ahead_sources = {}, {}, []
        self.results = [self._operand(x) for x in graph.results]
        # {long step: the steps run meanwhile on the calling thread} (codegen.overlap)
        self.regions: dict = {}
        self.runner_source, self._run, self.call1 = runner.generate(self)
        self._observed = None  # (run_observed's runner, generated on first use)

    # -------------------------------------------------------------- slots
    def _slot(self, v: Var) -> int:
        s = self.slots.get(id(v))
        if s is None:
            s = len(self.slot_vars)
            self.slots[id(v)] = s
            self.slot_vars.append(v)
        return s

    def _operand(self, x):
        """What a step reads for input `x`: its slot, or the Literal, or None."""
        if x is None or isinstance(x, Literal):
            return x
        return self.slots[id(x)]

    def _define(self, slots) -> None:
        self._defined.update(slots)

    # -------------------------------------------------------------- steps
    def updates_in(self, group: KernelGroup) -> dict:
        """The in-place updates `group`'s kernel writes through the input it updates
        (emit_kernel's `io`): id(new value) -> the value it overwrites."""
        mine = set(map(id, group.parts or [group]))
        return {key: ip.old for key, ip in self.inplace.items()
                if ip.io and id(self.part.group_of.get(key)) in mine}

    def _kernel_op(self, group: KernelGroup):
        if _touches_half(group):
            # Numba has no bfloat16 and only partial CPU float16: the registry's impls
            # (eager's own results: each op computed in float32 and rounded once to the
            # half type, as PyTorch's CPU kernels do) by design, not a fallback.
            kernel = Kernel(group.name, group.kind, "", group)
            self.kernels.append(kernel)
            return self._numpy_steps(group, kernel, group.outputs)
        try:
            source, ks = self._ahead.emit(self.part, group, self.updates_in(group))
        except SymbolicDimError:
            raise  # (emit_all has emitted it already without raising)
        except Exception as exc:  # noqa: BLE001 - a code generator bug: fall back too
            kernel = Kernel(group.name, group.kind, "", group)
            self.kernels.append(kernel)
            return self._fall_back(group, kernel, exc, "generate", group.outputs)
        io = ks.io
        compiled, hint = canonical(source, group.summary)
        kernel = Kernel(group.name, group.kind, source, group, compiled=compiled, hint=hint)
        self.kernels.append(kernel)
        logs.log("kernels", lambda: f"kernel {group.name}:\n{source}")
        try:
            failed = self._failed_builds.get(compiled)
            if failed is not None:  # (the same code as a kernel that failed: not again)
                raise failed
            with self._ahead.loading(compiled):
                kernel.entry, kernel.module, kernel.file = build.load_kernel(compiled, hint)
        except Exception as exc:  # noqa: BLE001 - never a crash: fall back below
            self._failed_builds[compiled] = exc
            return self._fall_back(group, kernel, exc, "build", ks.outputs)
        ins = [self.slots[id(v)] for v in ks.args]
        outs = []
        for v in ks.outputs:
            s = self._slot(v)
            self.own_slots.add(s)
            if id(v) in io:  # written through the input it updates: no argument of its own
                outs.append(KernelOut(s, io_slot=self.slots[id(io[id(v)])]))
                continue
            dest = -1
            if id(v) in self.inplace:
                dest = self._dest_pos.setdefault(s, len(self._dest_pos))
            outs.append(KernelOut(s, tuple(v.type.shape), v.type.dtype,
                                  id(v) not in self._escaping, None, dest))
        entry = kernel.entry
        # The sizes the code takes as arguments (emit.DYNAMIC_DOC): this program's.
        sizes = _checked_sizes(ks, group)
        if ks.split is not None:
            if runs_parallel(group.shape):
                entry = _split_call(entry, ks.split, ks.split_align)
            else:  # (at once: the runner passes lo, hi = 0, n with the sizes)
                sizes += (0, ks.split)
        self._define(o.slot for o in outs)
        offsets = tuple(ks.offsets.get(ks.arg_names[id(v)], 0) for v in ks.args)
        return KernelCall(kernel, entry, ins, outs, tuple(ks.dims), offsets, sizes)

    def _fall_back(self, group: KernelGroup, kernel: Kernel, exc: Exception, stage: str,
                   outputs):
        """`group` as numpy steps (fallback.interpreted), the user told once per kernel."""
        kernel.error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        fallback.warn_fallback(group, kernel.error, stage, kernel.source)
        return self._numpy_steps(group, kernel, outputs)

    def _numpy_steps(self, group: KernelGroup, kernel: Kernel, outputs):
        mine = set(map(id, group.parts or [group]))
        for k in [k for k in self.inplace if id(self.part.group_of.get(k)) in mine]:
            del self.inplace[k]  # the fallback writes fresh arrays
        reads = fallback.reads_of(group, self.slots, self._defined, self.part.views)
        outs = [self._slot(v) for v in outputs]
        self._define(outs)
        run = fallback.interpreted(group, outputs, self.slots, self.part.views, reads)
        return FallbackStep(kernel, run, reads, outs)

    def _call_op(self, e, how):
        inputs = tuple(self._operand(x) for x in e.inputs)
        outs = [self._slot(o) for o in e.outs]
        self._define(outs)
        if subgraph_runner(e.op) is not None:
            return SubgraphStep(e, inputs, outs)
        (out,) = outs
        dest = -1
        if how == "blas" and id(e.out) in self.inplace:
            dest = self._dest_pos.setdefault(out, len(self._dest_pos))
        row = LOWERING.get(e.op)
        unique = row is not None and row.unique_positions \
            and all(isinstance(s, int) for s in inputs) and self._unique_positions(e)
        step = NumpyStep(e, how, inputs, out, dest, unique)
        if row is not None and row.how == how:
            step.placement = row.placement
        if how == "numpy" and all(isinstance(s, int) for s in inputs):
            self._step_kernel(step)
        return step

    def _step_sources(self) -> dict:
        """id(eqn) -> (its step kernel as the lowering row makes it, the kernel's source
        text, its name hint) for each numpy step whose row has a kernel for it, made before
        compile-ahead forks: its children compile these too. (Compiled in the program, the
        conv and LSTM kernels each left Numba's and LLVM's memory in it: a long-lived
        process tracing new shapes grew 10-20 MiB a signature.)"""
        out = {}
        for step in self.part.steps:
            if not isinstance(step, CallStep) or step.how != "numpy":
                continue
            e = step.eqn
            row = LOWERING.get(e.op)
            if row is None or row.step_kernel is None or subgraph_runner(e.op) is not None \
                    or any(x is None or isinstance(x, Literal) for x in e.inputs):
                continue
            try:
                made = row.step_kernel(e)
            except Exception:  # noqa: BLE001 - _step_kernel makes it again, as before
                continue
            if made is None:
                continue
            text = made[0] if isinstance(made, tuple) else made
            text = text.source if isinstance(text, Split) else text
            out[id(e)] = (made, text, e.op)
        return out

    def _ahead_sources(self) -> list:
        """(source, name hint) of the kernels the runner loads besides the steps' own:
        codegen.gemm's product kernel where a product takes it. A child compiles it with
        the rest (in the program, after the others, it was 2 s of W8-W10's cold call)."""
        for step in self.part.steps:
            if isinstance(step, CallStep) and step.how == "blas" \
                    and runner_forms.uses_gemm(step.eqn):
                got = gemm.ahead_source()
                return [got] if got is not None else []
        return []

    def _step_kernel(self, step: NumpyStep) -> None:
        """Compile the Numba kernel of `step`'s lowering row (`step_kernel`), if it has one
        for these shapes; if it cannot be built, the numpy implementation runs (the same
        values: each step kernel computes what it computes)."""
        row = LOWERING.get(step.eqn.op)
        make = row.step_kernel if row is not None else None
        made = self.step_sources.get(id(step.eqn))
        source = made[0] if made is not None else make(step.eqn) if make is not None else None
        if source is None:
            return
        if isinstance(source, tuple):  # (a kernel for any sizes, and this step's sizes)
            source, step.kernel_sizes = source
        split = None
        if isinstance(source, Split):  # (a kernel run in pieces of [0, n) on the threads)
            source, split = source.source, source
        name = f"{self.graph.name}_{step.eqn.op}"
        logs.log("kernels", lambda: f"step kernel {name}:\n{source}")
        try:
            # (its file named for the op: every function with this kernel shares it)
            with self._ahead.loading(source):  # (a child may be compiling it)
                step.kernel = build.load_kernel(source, step.eqn.op)[0]
            if split is not None:
                step.kernel = _split_call(step.kernel, split.n, split.align)
            step.kernel_name = name
        except Exception as exc:  # noqa: BLE001 - never a crash: numpy computes it
            message = f"step kernel {name} not built ({exc}): numpy runs it"
            logs.log("kernels", lambda: message)

    def _unique_positions(self, e) -> bool:
        """Whether scatter_add `e` writes each output position at most once: some index is
        a constant, already of the indices' broadcast shape, whose values are distinct and
        within their dimension (so no two of them name one position, negatives included)."""
        g, *idx = e.inputs
        consts = {id(v): value for v, value in self.graph.consts}
        if not all(isinstance(d, int) for x in e.inputs for d in x.type.shape):
            return False
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
        return self._run(args, dests)

    def run_observed(self, args, note):
        """Run on `args` (no `dests`) calling `note(slot, value)` for each value a step
        writes, in order: the same generated lines as `__call__` (check mode compares each
        value with the reference interpreter's)."""
        if self._observed is None:
            self._observed = runner.generate(self, observe=True)[1]
        return self._observed(args, note)

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

    # -------------------------------------------------------------- printing
    def describe(self) -> str:
        text = describe(self.part)
        if self.bind is not None:
            dims = ", ".join(map(str, self.dims))
            text += f"\n  symbolic sizes {dims}: bound per call, run-time arguments of the kernels"
        failed = [k for k in self.kernels if k.entry is None]
        if failed:
            text += "\n" + "\n".join(f"  note: {k.name} runs through numpy ({k.error})"
                                     for k in failed)
        return text + "\n" + self.describe_steps() + self.describe_regions()

    def describe_regions(self) -> str:
        """The steps the runner runs at once (codegen.overlap), a line per long step."""
        lines = []
        for k, mine in self.regions.items():
            beside = ", ".join(step_text(self.steps[j], self._name).split(None, 1)[1]
                               .split(" = ")[0] for j in mine)
            outs = step_text(self.steps[k], self._name).split(None, 1)[1].split(" = ")[0]
            lines.append(f"  at once: {outs} = {self.steps[k].eqn.op} on the kernel pool's "
                         f"thread, {beside} on the calling thread")
        return "".join("\n" + line for line in lines)

    @property
    def compiled_kernels(self) -> list:
        """The distinct compiled kernels the steps call, in order of first use: kernels
        whose code differs only in the names of values and lines are one (see
        kernel_source.canonical), each compiled once."""
        first = {}
        for k in self.kernels:
            if k.entry is not None:
                first.setdefault(k.module, k)
        return list(first.values())

    def step_counts(self) -> dict:
        """Steps per call by kind (steps.step_counts), and under "kernels" the compiled
        kernels by kind ({"elementwise": 9, "row": 2, ...}; a multi kernel counts once)."""
        counts = step_counts(self.steps)
        kinds: dict = {}
        for k in self.kernels:
            if k.entry is not None:
                kinds[k.kind] = kinds.get(k.kind, 0) + 1
        counts["kernels"] = kinds
        return counts

    def describe_steps(self) -> str:
        """The program's steps, one line each, as the generated runner runs them; a kernel
        step that runs the compiled code of an earlier one names it."""
        n = len(self.steps)
        calls = sum(1 for s in self.steps if isinstance(s, KernelCall))
        distinct = len(self.compiled_kernels)
        shared = (f" ({calls} kernel calls of {distinct} compiled kernels)"
                  if distinct < calls else "")
        lines = [f"program: {n} step{'s' if n != 1 else ''}{shared}, one generated runner "
                 f"(program.runner_source)"]
        first = {}
        for step in self.steps:
            text = "  " + step_text(step, self._name)
            if isinstance(step, KernelCall):
                owner = first.setdefault(step.kernel.module, step.kernel)
                if owner is not step.kernel:
                    text += f"  (the code of {owner.name})"
            lines.append(text)
        results = ", ".join(self._name(r) for r in self.results)
        lines.append(f"  return {results}")
        return "\n".join(lines)

    def _name(self, x) -> str:
        if x is None:
            return "None"
        if isinstance(x, Literal):
            return repr(x)
        return repr(self.slot_vars[x])


def _checked_sizes(ks, group) -> tuple:
    """The values of the size arguments of `ks`'s code (KernelSource.size): each must be
    the count of one of its loops (a dim of the kernel's or a part's iteration shape, or
    merged leading or trailing dims), and 2 or more (0 and 1 are literals of other
    code). The kernel has no bounds checks: a size that disagreed with its arrays would
    read and write past them, so a disagreement is an error here, once per program."""
    sizes = tuple(ks.sizes)
    counts = set()  # every dim, and every product of leading or trailing dims (merged loops)
    for p in group.parts or [group]:
        counts.update(d for d in p.shape if not isinstance(d, Dim))
        if sizes and not any(isinstance(d, Dim) for d in p.shape):
            for k in range(len(p.shape)):
                counts.update((math.prod(p.shape[:k + 1]), math.prod(p.shape[k:])))
    for n in sizes:
        if type(n) is not int or n < 2 or n not in counts:
            raise AssertionError(f"kernel {group.name}: size argument {n!r} is not a loop "
                                 f"count (2 or more) of its iteration shape {group.shape}")
    return sizes


def small_kernel(group) -> bool:
    """Kernels that merge_adjacent may run as one: below the prange size (and of known
    size: a symbolic one may be large)."""
    return not any(isinstance(d, Dim) for d in group.shape) \
        and math.prod(group.shape) < PARALLEL_MIN_SIZE


__all__ = ["Kernel", "Program"]


def _touches_half(group: KernelGroup) -> bool:
    """Whether a value `group`'s kernel reads or writes is float16 or bfloat16 (see
    lower._NP_TYPE)."""
    for e in group.members:
        for v in (*e.inputs, *e.outs):
            t = getattr(v, "type", None)
            if t is not None and is_half(t.dtype):
                return True
    return False
