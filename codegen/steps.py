"""The steps of a compiled program (codegen.program.Program): what each runs, on which
value slots. The generated runner (codegen.runner) is made from a list of them, and
`Program.describe()` prints the same list (`step_text`)."""
from __future__ import annotations

from dataclasses import dataclass

from eager.ops import OPS

from . import build
from .fuse import KernelGroup


def subgraph_runner(op: str):
    """What runs a sub-graph op (cond, while_loop: a `control` row), or None for others."""
    row = OPS.get(op)
    return row.run if row is not None and row.control else None


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
    # What is compiled: `source` without the names of IR values and user lines
    # (kernel_source.canonical), shared by every kernel of the same code, and its file's
    # name hint.
    compiled: str = ""
    hint: str = ""

    @property
    def fn(self):
        """The generated module's Numba dispatcher (None if the build failed). A kernel
        loaded from its object file has none until asked: this imports the module then."""
        if self.entry is None:
            return None
        return build.load_module(self.compiled or self.source, self.hint or self.name).kernel

    def __repr__(self) -> str:
        state = "compiled" if self.entry is not None else f"fallback ({self.error})"
        return f"<Kernel {self.name} {self.kind} {state}>"


@dataclass(eq=False)
class KernelOut:
    """One array a kernel writes."""

    slot: int
    shape: tuple = None         # (None when written through `io_slot`)
    dtype: object = None
    pooled: bool = False        # a per-thread buffer reused every call (it does not escape)
    io_slot: int = None         # written through the input it updates, element by element
    dest: int = -1              # position in `dests` of the array it may be written into


@dataclass(eq=False)
class KernelCall:
    kernel: Kernel
    entry: object               # the compiled entry point (wrapped when split in pieces)
    ins: list                   # input slots
    outs: list                  # KernelOut each
    dims: tuple = ()            # symbolic sizes passed after the arrays
    offsets: tuple = ()         # per input: the flat offset it is passed from (0: all of it)
    sizes: tuple = ()           # the ints passed last: size arguments, then lo, hi if any


@dataclass(eq=False)
class NumpyStep:
    eqn: object
    how: str                    # "numpy" | "blas" | "view"
    inputs: tuple               # per input: a slot, a Literal or None
    out: int
    dest: int = -1              # matmul: position in `dests` of the array it may write
    unique: bool = False        # scatter_add: no output position is written twice
    kernel: object = None       # numpy: the compiled entry of its row's step_kernel, if any
    kernel_name: str = ""
    kernel_sizes: object = None  # numpy: the int64 array of sizes its kernel takes last
    placement: str = ""         # its lowering row's `placement` (codegen.placement)


@dataclass(eq=False)
class FallbackStep:
    kernel: Kernel
    run: object                 # fallback.interpreted(...)
    reads: list                 # slots it reads
    outs: list                  # slots it writes


@dataclass(eq=False)
class SubgraphStep:
    eqn: object                 # a cond or while_loop equation
    inputs: tuple               # per input: a slot, a Literal or None
    outs: list


def step_counts(steps) -> dict:
    """How many steps of each kind run per call: "kernel" (compiled kernel calls), "blas",
    "numpy", "view", "fallback" (a kernel run through numpy) and "subgraph"."""
    counts = dict.fromkeys(("kernel", "blas", "numpy", "view", "fallback", "subgraph"), 0)
    for step in steps:
        if isinstance(step, KernelCall):
            counts["kernel"] += 1
        elif isinstance(step, FallbackStep):
            counts["fallback"] += 1
        elif isinstance(step, SubgraphStep):
            counts["subgraph"] += 1
        else:
            counts[step.how] += 1
    return counts


def step_text(step, name) -> str:
    """One line of `Program.describe_steps`."""
    if isinstance(step, KernelCall):
        ins = ", ".join(name(s) for s in step.ins)
        outs = ", ".join(name(o.slot) + (" (in place)" if o.io_slot is not None else "")
                         for o in step.outs)
        sizes = f" sizes {', '.join(map(str, step.dims))}" if step.dims else ""
        return f"kernel   {outs} = {step.kernel.name}({ins}){sizes}"
    if isinstance(step, FallbackStep):
        ins = ", ".join(name(s) for s in step.reads)
        outs = ", ".join(name(s) for s in step.outs)
        return f"fallback {outs} = {step.kernel.name}({ins}) through numpy"
    if isinstance(step, SubgraphStep):
        outs = ", ".join(name(s) for s in step.outs)
        return f"subgraph {outs} = {step.eqn.op}({', '.join(name(x) for x in step.inputs)})"
    into = " (into .grad)" if step.dest >= 0 else ""
    by = f" by {step.kernel_name}" if step.kernel is not None else ""
    return (f"{step.how:<8} {name(step.out)} = {step.eqn.op}("
            f"{', '.join(name(x) for x in step.inputs)}){into}{by}")
