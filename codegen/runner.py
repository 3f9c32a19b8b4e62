"""The runner: one Python function generated from a program's steps (codegen.steps), the
only way a compiled program runs.

Each step is a line or two over local variables `v<slot>` (W5's 22 steps spent more time
in slot-list bookkeeping than in most of their kernels). Kernels take flat 1-D views of
C-ordered arrays: `reshape(-1)` is free for contiguous arrays and makes a C-ordered copy
of anything else, so non-contiguous and negative-stride inputs are read correctly.
Outputs are allocated with numpy's allocator outside Numba (faster than allocating inside
a jitted function, which page-faults on fresh memory). Symbolic sizes are bound from the
arguments' shapes at the top of the runner (`n<j>`), and passed to kernels after their
arrays, used in output shapes and substituted in op parameters.
"""
from __future__ import annotations

import hashlib
import math

import numpy as np

from eager.dispatch import quiet
from eager.ops import OPS, Dim
from tracer.errors import STEP_LINES
from tracer.ir import Literal
from tracer.symbolic import bind_params, check_nonempty, param_has_dims

from . import matmul_layout, overlap, placement
from .lower import LOWERING
from .outpool import _recycled, _recycles
from .steps import FallbackStep, subgraph_runner, KernelCall, SubgraphStep

# Read when a runner is generated (tests switch them here).
AUTOTUNE_MATMUL = matmul_layout.AUTOTUNE_MATMUL
_matmul_choice = matmul_layout._matmul_choice


def generate(program, observe: bool = False):
    """(source, run, run1) for `program`: `run(args, dests)` -> the results;
    `run1(a)`, for a program of one argument, one result and no `dests`, takes the array
    and returns the result array (the one-argument fast path of tracer.function), else
    None. Both are made from the same lines.

    With `observe`, `run(args, note, dests=None)` calls `note(slot, value)` after each step
    for each value it wrote (check mode's search for the first diverging equation)."""
    gen = _Generator(program, observe)
    body, ns = gen.body()
    if not observe:  # (the observing runner runs every step in order, on this thread)
        program.regions = gen.regions
    results = [gen.result(r, j) for j, r in enumerate(program.results)]
    unpack = []
    if program.n_args:
        unpack = ["    " + ", ".join(f"v{s}" for s in range(program.n_args)) + ", = args"]
    header = "def run(args, note, dests=None):" if observe else "def run(args, dests):"
    source = "\n".join([header] + unpack + body
                       + [f"    return [{', '.join(results)}]"]) + "\n"
    one = program.bind is None and program.n_args == 1 and len(results) == 1 \
        and isinstance(program.results[0], int) and not program._dest_pos and not observe
    if one:
        source += "\n\n" + "\n".join(["def run1(v0):"] + body
                                     + [f"    return {results[0]}"]) + "\n"
    ns[STEP_LINES] = {n: gen.step_lines[line] for n, line in enumerate(source.splitlines(), 1)
                      if line in gen.step_lines}
    exec(compile(source, f"<tracejit runner {program.graph.name}>", "exec"), ns)
    return source, ns["run"], ns["run1"] if one else None


class _Generator:
    def __init__(self, program, observe=False):
        self.p = program
        self.observe = observe
        self.ns = {"empty": np.empty, "zeros": np.zeros, "matmul": np.matmul,
                   "fortran": np.asfortranarray, "contiguous": np.ascontiguousarray,
                   "asarray": np.asarray, "array": np.array, "ndarray": np.ndarray,
                   "flat_of": capture_flattener(program), "arg": _kernel_arg,
                   "is_view": _is_view_of, "tls": program.tls, "fc": program._flat_cache,
                   "bind_params": bind_params,
                   # numpy's IEEE warnings from these lines are filtered as codegen's own
                   # are (codegen/__init__.py): the filter matches on the module name.
                   "__name__": "codegen.runner"}
        self.lines: list = []
        self.flat_known: dict = {}  # slot -> the expression saying whether f<slot> is a view
        self.pooled: list = []      # (shape, dtype) of the per-thread buffers, in order
        self.zeroed: set = set()    # which of them are made filled with zeros
        self.rings = 0              # outputs recycled through per-thread rings (_recycled)
        self.step_lines: dict = {}  # generated line of a numpy step -> its equation
        self.fortran: set = set()   # slots holding a Fortran-ordered array (as built)
        self.dim_names = {d: f"n{j}" for j, d in enumerate(program.dims)}
        # Where this runner keeps its per-thread buffers and rings: its own attributes of
        # the program's thread-local. A runner numbers them in the order its lines are
        # made, and the program's runner makes them in its own order (codegen.overlap's
        # plan lays out placement's cats first): the observing runner sharing them wrote
        # W10's stacked states into a buffer of another shape, or could write into the
        # one a scatter_slice keeps zeroed (every later call then read garbage there).
        # An observing runner's are named after its lines, made at the end (`_observed_keys`):
        # two made from one program (benchmarks.step_profile makes one per profile, check
        # mode one per program) share them, rather than each keeping a set per thread for
        # the program's life.
        self.keys = None
        if not observe:
            n = program.__dict__.get("_runners_made", 0)
            program._runners_made = n + 1
            tail = f"_{n}" if n else ""  # (the program's own runner, made first: no number)
            self.keys = (f"runner_buffers{tail}", f"output_rings{tail}")
        # Capture slots no kernel writes into (io slots are parameters and optimizer state
        # updated in place): a read-only array there (a live hyperparameter's) is passed
        # as it is, a view, rather than copied at every call.
        self.written = {o.io_slot for st in program.steps if isinstance(st, KernelCall)
                        for o in st.outs}

    # -------------------------------------------------------------- pieces
    def shape(self, shape) -> str:
        if all(not isinstance(d, Dim) for d in shape):
            return repr(tuple(shape))
        return "(" + "".join(f"{self.dim_names[d] if isinstance(d, Dim) else d}, "
                             for d in shape) + ")"

    def operand(self, x, name: str) -> str:
        if x is None:
            return "None"
        if isinstance(x, Literal):
            self.ns[name] = np.array(x.value)
            return name
        return f"v{x}"

    def result(self, r, j) -> str:
        if r is None:
            return "None"
        if isinstance(r, Literal):
            self.ns[f"lr{j}"] = r.value
            return f"array(lr{j})"  # (a fresh array each call, as the caller may keep it)
        return f"v{r}"

    def pool(self, shape, dtype, zeroed: bool = False) -> str:
        """The expression of a per-thread buffer of `shape` and `dtype`, reused every call
        (for a value that does not escape the program, as a kernel's pooled output);
        `zeroed`: filled with zeros when made (static shapes only)."""
        self.pooled.append((tuple(shape), dtype))
        i = len(self.pooled) - 1
        if zeroed:
            assert self.p.bind is None
            self.zeroed.add(i)
        if self.p.bind is None:
            return f"bufs[{i}][0]"
        self.ns[f"P{i}"] = dtype
        return f"pooled(bufs, {i}, {self.shape(shape)}, P{i})[0]"

    def flat_of(self, s) -> str:
        p, lines = self.p, self.lines
        if s not in self.flat_known:
            if s in p.own_slots:
                lines.append(f"    f{s} = v{s}.reshape(-1)")
                self.flat_known[s] = "True"
            elif p.n_inputs <= s < p.n_args:
                # A capture: its flat view from the last call when it is the same array
                # (capture_flattener's cache, inlined); w<slot> says whether f<slot> is a view.
                lines.append(f"    h = fc[{s}]")
                lines.append(f"    if h is not None and h[0] is v{s}:")
                lines.append(f"        f{s} = h[1]; w{s} = True")
                lines.append("    else:")
                read = ", True" if s not in self.written else ""
                lines.append(f"        f{s} = flat_of(v{s}, {s}{read}); "
                             f"w{s} = is_view(f{s}, v{s})")
                self.flat_known[s] = f"w{s}"
            else:
                lines.append(f"    f{s} = arg(v{s})")
                self.flat_known[s] = f"is_view(f{s}, v{s})"
        return f"f{s}"

    # -------------------------------------------------------------- the body
    def body(self):
        p, lines, ns = self.p, self.lines, self.ns
        if p.bind is not None:
            ns["bind"] = p.bind
            lines.append("    sizes = bind(args)")
            if p.nonempty:
                ns["check_nonempty"], ns["nonempty"] = check_nonempty, p.nonempty
                lines.append("    check_nonempty(nonempty, sizes)")
            for d, name in self.dim_names.items():
                ns[f"D{name}"] = d
                lines.append(f"    {name} = sizes[D{name}]")
        for s, value in p.const_slots:
            ns[f"v{s}"] = value
        start = len(lines)
        order, regions = ([*range(len(p.steps))], {}) if self.observe else overlap.plan(self)
        self.regions = regions
        for k in order:
            if k in regions:
                self.region(k, regions[k])
            else:
                self.step(k, p.steps[k])
        prologue = []
        if self.observe:
            self.keys = self._observed_keys()
        if self.rings:
            ns["recycled"], ns["n_rings"] = _recycled, self.rings
            rings = self.keys[1]
            prologue += [f"    rings = tls.__dict__.get('{rings}')",
                         "    if rings is None:",
                         f"        rings = tls.{rings} = [[] for _ in range(n_rings)]"]
        if self.pooled:
            ns["pool_specs"], bufs = self.pooled, self.keys[0]
            if p.bind is None:
                ns["pool_makers"] = [np.zeros if i in self.zeroed else np.empty
                                     for i in range(len(self.pooled))]
                prologue += [f"    bufs = tls.__dict__.get('{bufs}')",
                             "    if bufs is None:",
                             f"        bufs = tls.{bufs} = [(o, o.reshape(-1)) for o in "
                             "(make(*spec) for make, spec in zip(pool_makers, pool_specs))]"]
            else:
                ns["pooled"] = _pooled
                prologue += [f"    bufs = tls.__dict__.get('{bufs}')",
                             "    if bufs is None:",
                             f"        bufs = tls.{bufs} = [None] * len(pool_specs)"]
        lines[start:start] = prologue
        return lines, ns

    def _observed_keys(self) -> tuple:
        """The thread-local names of an observing runner's buffers and rings: a digest of
        its lines and buffer layout, so that only runners of the very same code share
        them (runs of one runner in turn, as far as the buffers can tell)."""
        layout = repr((self.lines, self.pooled, sorted(self.zeroed), self.rings))
        tail = hashlib.sha256(layout.encode()).hexdigest()[:16]
        return f"observed_buffers_{tail}", f"observed_rings_{tail}"

    def step(self, k, step):
        """The lines of step `k` (the runner's own order)."""
        p, lines, ns = self.p, self.lines, self.ns
        if isinstance(step, KernelCall):
            self.kernel(k, step)
        elif isinstance(step, FallbackStep):
            ns[f"fb{k}"] = step.run
            sizes = "sizes" if p.bind is not None else "None"
            reads = "".join(f", v{s}" for s in step.reads)
            lines.append(f"    {''.join(f'v{s}, ' for s in step.outs)}= fb{k}({sizes}{reads})"
                         f"  # {step.kernel.name} through numpy")
        elif isinstance(step, SubgraphStep):
            ns[f"sub{k}"], ns[f"e{k}"] = subgraph_runner(step.eqn.op), step.eqn
            sizes = "sizes" if p.bind is not None else "None"
            ops = ", ".join(self.operand(x, f"l{k}_{j}") for j, x in enumerate(step.inputs))
            lines.append(f"    {''.join(f'v{s}, ' for s in step.outs)}= "
                         f"sub{k}(e{k}, [{ops}], {sizes})  # {step.eqn.op}")
        else:
            first = len(lines)
            self.numpy_step(k, step)
            # (which equation each line runs: an index error names its op and line)
            self.step_lines.update((line, step.eqn) for line in lines[first:])
        if self.observe:
            lines.extend(f"    note({s}, v{s})" for s in _writes(step))

    def region(self, k, mine):
        """Long step `k` on the kernel pool's thread while this one runs steps `mine`
        (codegen.overlap); the earlier of two failing steps' error is raised."""
        p, lines, ns = self.p, self.lines, self.ns
        ns.update(spawn=overlap.spawn, join=overlap.join, settle=overlap.settle)
        first = len(lines)
        self.step(k, p.steps[k])
        body = ["    " + line for line in lines[first:]]
        self.step_lines.update((line, p.steps[k].eqn) for line in body)
        out = _writes(p.steps[k])
        lines[first:] = [f"    def side{k}():  # {p.steps[k].eqn.op} on the pool's thread",
                         *body, f"        return {', '.join(f'v{s}' for s in out)},",
                         f"    job{k} = spawn(side{k})", "    try:"]
        for j in mine:
            lines.append(f"        at = {j}")
            start = len(lines)
            self.step(j, p.steps[j])
            moved = ["    " + line for line in lines[start:]]
            self.step_lines.update((line, p.steps[j].eqn) for line in moved)
            lines[start:] = moved
        lines += ["    except BaseException as exc:",
                  f"        settle(job{k}, side{k}, exc, at, {k})",
                  f"    {''.join(f'v{s}, ' for s in out)}= join(job{k}, side{k})"]

    def kernel(self, k, step):
        p, lines, ns = self.p, self.lines, self.ns
        ns[f"k{k}"] = step.entry
        offsets = step.offsets or (0,) * len(step.ins)
        args = [self.flat_of(s) + (f"[{off}:]" if off else "")
                for s, off in zip(step.ins, offsets)]
        after = []
        for o in step.outs:
            s = o.slot
            if o.io_slot is not None:
                # Written through the input it updates (io inputs are captures, see
                # _plan_inplace): the capture itself when the kernel got a view of it.
                io = o.io_slot
                after.append(f"    v{s} = v{io} if {self.flat_known[io]} "
                             f"else f{io}.reshape(v{io}.shape)")
                after.append(f"    f{s} = f{io}")
                self.flat_known[s] = "True"
                continue
            self.flat_known[s] = "True"
            symbolic = any(isinstance(d, Dim) for d in o.shape)
            shape = self.shape(o.shape)
            ns[f"T{s}"] = o.dtype
            place = placement.output_place(self, s) if o.pooled else None
            if place is not None:  # (made in its place in a buffer of a later step's)
                fresh = f"v{s} = {place}; f{s} = v{s}.reshape(-1)"
            elif o.pooled:
                self.pooled.append((o.shape, o.dtype))
                i = len(self.pooled) - 1
                # (in a program with symbolic sizes, every buffer is made on first use)
                fresh = (f"v{s}, f{s} = pooled(bufs, {i}, {shape}, T{s})"
                         if p.bind is not None else f"v{s}, f{s} = bufs[{i}]")
            else:
                if symbolic:
                    ns["fresh"] = _fresh
                    make = f"fresh(rings[{self.rings}], {shape}, T{s})"
                    self.rings += 1
                elif _recycles(o.shape, o.dtype):
                    make = f"recycled(rings[{self.rings}], {shape}, T{s})"
                    self.rings += 1
                else:
                    make = f"empty({shape}, T{s})"
                fresh = (f"v{s} = {make}; f{s} = "
                         + (f"v{s}" if len(o.shape) == 1 else f"v{s}.reshape(-1)"))
            if o.dest >= 0:
                lines.append(f"    d = dests[{o.dest}] if dests is not None else None")
                lines.append("    if d is not None:")
                lines.append(f"        v{s} = d; f{s} = d.reshape(-1)")
                lines.append("    else:")
                lines.append(f"        {fresh}")
            else:
                lines.append(f"    {fresh}")
            args.append(f"f{s}")
        args += [self.dim_names[d] for d in step.dims]
        args += [str(int(n)) for n in step.sizes]  # (this program's: emit.DYNAMIC_DOC)
        lines.append(f"    k{k}({', '.join(args)})  # {step.kernel.name}")
        lines.extend(after)

    def numpy_step(self, k, step):
        p, lines, ns = self.p, self.lines, self.ns
        e, out = step.eqn, step.out
        slots = step.inputs
        ns[f"op{k}"] = quiet(OPS[e.op].impl)
        ns[f"p{k}"] = e.params
        if step.kernel is not None:  # its lowering row's Numba kernel (static shapes)
            ns[f"k{k}"], ns[f"T{out}"] = step.kernel, e.out.type.dtype
            if id(e.out) in p._escaping:
                lines.append(f"    v{out} = empty({tuple(e.out.type.shape)}, T{out})")
            else:  # (a buffer reused every call, as a kernel's pooled output)
                lines.append(f"    v{out} = {self.pool(e.out.type.shape, e.out.type.dtype)}")
            ins = "".join(f"arg(v{s}, True), " for s in slots)
            sizes = ""
            if step.kernel_sizes is not None:  # (a kernel for any sizes: these ones)
                ns[f"z{k}"], sizes = step.kernel_sizes, f", z{k}"
            # (a kernel that refuses its inputs returns true: the implementation raises,
            # or computes the value)
            lines.append(f"    if k{k}({ins}v{out}.reshape(-1){sizes}): v{out}[...] = "
                         f"op{k}({', '.join(f'v{s}' for s in slots)}, **p{k})"
                         f"  # {step.kernel_name}")
            return
        bound = p.bind is not None and any(param_has_dims(v) for v in e.params.values())
        direct = not bound and all(isinstance(s, int) for s in slots)
        a = [f"v{s}" for s in slots] if direct else []
        row = LOWERING.get(e.op)
        if row is not None and row.inline is not None \
                and row.inline(self, k, step, a, direct, bound):
            return
        ops = ", ".join(self.operand(x, f"l{k}_{j}") for j, x in enumerate(slots))
        params = f"bind_params(p{k}, sizes)" if bound else f"p{k}"
        lines.append(f"    v{out} = op{k}({ops}{', ' if ops else ''}**{params})  # {e.op}")
        lines.append(f"    if v{out}.__class__ is not ndarray: v{out} = asarray(v{out})")

    def tuned_operands(self, e, slots, names) -> list:
        """The operand expressions of runner matmul `e`, one copied into the other layout
        where that measured faster (_matmul_choice)."""
        x, y = e.inputs
        shapes = (tuple(x.type.shape), tuple(y.type.shape))
        if not AUTOTUNE_MATMUL or len(shapes[0]) != 2 or len(shapes[1]) != 2 \
                or any(isinstance(d, Dim) for s in shapes for d in s) \
                or e.out.type.dtype not in (np.float32, np.float64) \
                or math.prod(shapes[0]) * shapes[1][1] > matmul_layout.AUTOTUNE_MAX_MKN:
            return names
        layouts = ["F" if s in self.fortran else "C" for s in slots]
        if layouts[0] == layouts[1]:
            return names
        choice = _matmul_choice(*shapes, e.out.type.dtype, *layouts)
        if not choice:
            return names
        j = "ab".index(choice)
        names = list(names)
        names[j] = f"{('fortran', 'contiguous')[layouts[j] == 'F']}({names[j]})"
        return names


def _writes(step) -> list:
    """The slots a step writes."""
    if isinstance(step, KernelCall):
        return [o.slot for o in step.outs]
    if isinstance(step, (FallbackStep, SubgraphStep)):
        return list(step.outs)
    return [step.out]


# ------------------------------------------------------------------ run-time helpers
def capture_flattener(program):
    """`flat_of(a, s, read_only=False)`: `_kernel_arg(a)` for the capture in slot `s`. For
    captures (parameters, optimizer state: the same arrays call after call) the last
    answer is kept in `program._flat_cache` when it is a view; a copy (of a non-contiguous
    or read-only array) is made afresh at every call, since the array's contents may have
    changed."""
    cache = program._flat_cache

    def flat_of(a, s, read_only=False):
        hit = cache[s]
        if hit is not None and hit[0] is a:
            return hit[1]
        f = _kernel_arg(a, read_only)
        cache[s] = (a, f) if _is_view_of(f, a) else None
        return f
    return flat_of


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


def _is_view_of(f, a) -> bool:
    """Whether `f`, from `_kernel_arg(a)`, is a view of `a`'s memory rather than a copy."""
    if f is a:
        return True
    b = f.base
    return b is not None and (b is a or b is a.base)


def _pooled(bufs: list, i: int, shape: tuple, dtype):
    """Per-thread buffer `i` (and its flat view) of a symbolic shape: reused while the
    bound shape stays, reallocated when it changes."""
    pair = bufs[i]
    if pair is None or pair[0].shape != shape:
        o = np.empty(shape, dtype)
        pair = bufs[i] = (o, o.reshape(-1))
    return pair


def _fresh(ring: list, shape: tuple, dtype):
    """An output of a symbolic shape: recycled when large enough (outpool), else new."""
    if _recycles(shape, dtype):
        return _recycled(ring, shape, dtype)
    return np.empty(shape, dtype)
