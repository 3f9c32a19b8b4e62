"""The source of one kernel module under construction: `KernelSource` names the kernel's
arguments and typed constants, follows views to affine flat offsets (`Aff`), loads operands
and computes one IR equation as a scalar expression from its lowering row (codegen.lower).
emit.py arranges these into loop nests by kernel kind.
"""
from __future__ import annotations

import re

import numpy as np

from tracer.ir import Literal, Var
from tracer.printing import format_eqn

from .fuse import KernelGroup, Partition
from .lower import expression, needs_positions


def c_strides(shape) -> tuple:
    strides = []
    acc = 1
    for k, d in enumerate(reversed(shape)):
        strides.append(acc)
        if k + 1 < len(shape):  # (the leading size is never a stride: it may be symbolic)
            acc *= d
    return tuple(reversed(strides))


class Aff:
    """An affine integer expression over loop variables: const + sum(coef * var)."""

    __slots__ = ("const", "terms")

    def __init__(self, const=0, terms=None):
        self.const = const
        self.terms = dict(terms or {})

    @staticmethod
    def var(name):
        return Aff(0, {name: 1})

    def scale(self, k):
        return Aff(self.const * k, {v: c * k for v, c in self.terms.items()})

    def __add__(self, other):
        terms = dict(self.terms)
        for v, c in other.terms.items():
            terms[v] = terms.get(v, 0) + c
        return Aff(self.const + other.const, {v: c for v, c in terms.items() if c})

    def render(self) -> str:
        parts = []
        for v, c in self.terms.items():
            parts.append(v if c == 1 else f"{v} * {c}" if c > 0 else f"{v} * ({c})")
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts)


def _render_position(ks, flat: Aff) -> str:
    text = flat.render()
    return f"np.uint64({text})" if ks.unknown_range_var in flat.terms else text


class KernelSource:
    """Builds the source of one kernel module."""

    def __init__(self, part: Partition, group: KernelGroup, io=None):
        self.part = part
        self.group = group
        # id(output Var) -> the input Var it overwrites element by element (an update
        # written in place): that output is stored through the input's argument.
        self.io = dict(io or {})
        self.members = {id(e.out): e for e in group.members}
        self.args: list = []          # base Vars read from memory
        self.arg_names: dict = {}
        self.outputs = list(group.outputs)
        self.out_names = {id(v): f"out{i}" for i, v in enumerate(self.outputs)}
        self.consts: dict = {}        # (dtype name, repr) -> name
        self.hidden: dict = {}        # const name -> the local holding it hidden (vmath.hidden)
        self.imports: set = set()
        self.lines: list = []
        # A loop variable whose range is not known at compile time (see ROW_BLOCK_SIZE):
        # indices that use it are cast to unsigned.
        self.unknown_range_var = None
        self.dims: list = []          # symbolic sizes the code names (set by _module)
        # Trip counts the code names as int64 arguments rather than literals (`size`):
        # size value -> argument name, in the order first named.
        self.sizes: dict = {}
        # The trip count of the outer loop when the runtime splits it among threads: the
        # kernel then takes `lo, hi` and runs iterations lo..hi-1 (see SPLIT_DOC).
        self.split = None
        self.split_type = "uint64"  # (a row kernel's block numbers go to rows() as int64)
        self.split_align = 64       # pieces start at multiples of this (elements, or rows)
        # A multi kernel: a value an earlier part wrote is read back from its output.
        self.multi = group.kind == "multi"
        # Every load from an argument, rendered last (`place_loads`): (argument name, flat
        # Aff, whether it is cast to unsigned). An argument read only at offsets of at least
        # c > 0 (a time step's slice of a whole sequence) is passed from element c on
        # (`offsets`), so kernels differing only in where their slices start are one
        # compiled kernel (see `canonical`).
        self.loads: list = []
        self.offsets: dict = {}       # argument name -> the flat offset it is passed from

    def index(self, flat: Aff) -> str:
        """`flat`, rendered as an index into an argument (see `unsigned`)."""
        text = flat.render()
        return f"np.uint64({text})" if self.unsigned(flat) else text

    def unsigned(self, flat: Aff) -> bool:
        """Whether an index into an argument is cast to unsigned: one using a loop variable
        of unknown range (see ROW_BLOCK_SIZE), or any sum or multiple (i0 * 65 + i1). A
        signed index could be negative, so Numba wraps each load and store in a
        negative-index fix-up; on a sum LLVM cannot always drop it, and then vectorizes
        the loop with gathers or not at all (layer_norm of x + pos[i1], rows of 128:
        248 -> 44 us; the cast costs nothing, as every index a kernel reads is in range).
        A bare loop variable (a range from 0) or a constant keeps its plain spelling."""
        if self.unknown_range_var in flat.terms:
            return True
        if not flat.terms:
            return False
        if len(flat.terms) > 1 or flat.const != 0:
            return True
        return next(iter(flat.terms.values())) != 1

    # -------------------------------------------------------------- names
    def size(self, n) -> str:
        """Trip count `n` as the code spells it. A size of 2 or more is an int64 argument
        (`sizes`: the program passes its value at each call), so that kernels differing
        only in it (a training step at another batch size) are one compiled kernel; 0 and
        1 stay literals, as a size-1 axis broadcasts and a size-0 one runs nothing (their
        kernels are other code). Equal sizes share one argument: code that names one size
        in two places is other code than code naming two (see emit.DYNAMIC_DOC)."""
        if type(n) is not int or n < 2:
            return str(n)
        name = self.sizes.get(n)
        if name is None:
            name = self.sizes[n] = f"size{len(self.sizes)}"
        return name

    def const(self, value, dtype, hidden=False) -> str:
        """The name of a typed constant; with `hidden`, of a local read once before the
        loops that LLVM cannot see through (see codegen.vmath.hidden)."""
        if hidden:
            name = self.const(value, dtype)
            if np.dtype(dtype).kind != "f":
                return name
            self.imports.add(("codegen.vmath", "hidden"))
            return self.hidden.setdefault(name, f"_o{name[2:]}")
        dtype = np.dtype(dtype)
        v = np.array(value, dtype=dtype).item()
        if dtype.kind == "f":
            text = repr(float(v))
            text = {"inf": "np.inf", "-inf": "-np.inf", "nan": "np.nan"}.get(text, text)
        elif dtype.kind == "b":
            text = "True" if v else "False"
        else:
            text = str(int(v))
        key = (dtype.name, text)
        name = self.consts.get(key)
        if name is None:
            name = f"_c{len(self.consts)}"
            self.consts[key] = name
        return name

    def arg(self, var: Var) -> str:
        name = self.arg_names.get(id(var))
        if name is None and id(var) in self.out_names and self.multi:
            # Written by an earlier loop nest of this kernel: read it back from there.
            old = self.io.get(id(var))
            return self.out_names[id(var)] if old is None else self.arg(old)
        if name is None:
            name = f"in{len(self.args)}"
            self.args.append(var)
            self.arg_names[id(var)] = name
        return name

    # -------------------------------------------------------------- loads
    def index_of(self, x, idx: list):
        """Follow views from operand `x` read at multi-index `idx` to (base, idx)."""
        views = self.part.views
        while isinstance(x, Var) and id(x) in views:
            e = views[id(x)]
            src = e.inputs[0]
            new_idx = _view_index(e, src.type.shape, idx)
            if new_idx is None:  # a reshape: same flat offset in a contiguous base
                return src, None, _flat(x.type.shape, idx)
            idx = new_idx
            x = src
        return x, idx, None

    def load(self, x, idx: list, scope: dict, body: list) -> str:
        if isinstance(x, Literal):
            return self.const(x.value, x.type.dtype)
        base, bidx, flat = self.index_of(x, idx)
        if isinstance(base, Literal):
            return self.const(base.value, base.type.dtype)
        if id(base) in scope:  # computed inside this kernel
            return scope[id(base)]
        if flat is None:
            flat = _flat(base.type.shape, bidx)
        name = self.arg(base)
        key = (name, flat.render())
        cached = scope.get(key)
        if cached is not None:
            return cached
        local = f"x{len([k for k in scope if isinstance(k, tuple)])}_{name}"
        self.loads.append((name, flat, self.unknown_range_var in flat.terms))
        body.append(f"{local} = {name}[@L{len(self.loads) - 1}@]")
        scope[key] = local
        return local

    def place_loads(self, lines: list) -> list:
        """`lines` with each load's index rendered, relative to where its argument is
        passed from (`offsets`: the least offset an argument is read at, when every load of
        it is that constant plus non-negative multiples of loop variables, which start at 0;
        only an input the kernel does not write in place: not an output a multi kernel
        reads back)."""
        written = {self.arg_names.get(id(old)) for old in self.io.values()}
        inputs = {self.arg_names[id(v)] for v in self.args}
        low: dict = {}
        for name, flat, _ in self.loads:
            fixed = type(flat.const) is int and all(type(c) is int and c >= 0
                                                    for c in flat.terms.values())
            if name in written or name not in inputs or not fixed:
                low[name] = 0
            else:
                low[name] = min(low.get(name, flat.const), flat.const)
        self.offsets = {name: c for name, c in low.items() if c > 0}

        def render(m):
            name, flat, unsigned = self.loads[int(m.group(1))]
            flat = flat + Aff(-self.offsets.get(name, 0))
            text = flat.render()
            return f"np.uint64({text})" if unsigned or self.unsigned(flat) else text
        return [_LOAD.sub(render, line) for line in lines]

    def operand_index(self, x, out_shape, idx):
        """Implicit broadcasting: the index of operand `x` for an output index `idx`."""
        shape = x.type.shape
        lead = len(out_shape) - len(shape)
        return [Aff(0) if shape[k] == 1 and out_shape[lead + k] != 1 else idx[lead + k]
                for k in range(len(shape))]

    def compute(self, e, idx, scope: dict, body: list, name: str) -> None:
        """Emit `name = <e on its operands>` (operands loaded or already in scope)."""
        out_shape = e.out.type.shape
        g = self.group
        if g.kind == "row" and tuple(out_shape) != tuple(g.shape):
            idx = _row_index(out_shape, g.shape[:g.split], idx)  # a per-row scalar
        args = []
        for x in e.inputs:
            if isinstance(x, Var) and id(x) in scope:
                args.append(scope[id(x)])
                continue
            args.append(self.load(x, self.operand_index(x, out_shape, idx), scope, body))
        d = e.inputs[1] if e.op == "div" else None
        if (d is not None and e.out.type.dtype.kind == "f"
                and (all(type(n) is int and n == 1 for n in d.type.shape)
                     or (g.kind == "row" and _is_row_value(g, d)))):
            # By a divisor the loop does not change (a scalar, or a row kernel's per-row
            # value): two multiplications by a reciprocal LLVM computes once (what 'arcp'
            # did, without its overflow at a denormal divisor; see vmath.div_invariant_f32).
            helper = "div_invariant_" + ("f32" if e.out.type.dtype.itemsize == 4 else "f64")
            self.imports.add(("codegen.vmath", helper))
            expr = f"{helper}({args[0]}, {args[1]})"
        elif needs_positions(e.op):
            expr = expression(e, args, self.imports, self.const,
                              self._positions(out_shape, idx))
        else:
            expr = expression(e, args, self.imports, self.const)
        body.append(f"{name} = {expr}  # {_eqn_comment(e)}")
        scope[id(e.out)] = name

    def _positions(self, out_shape, idx) -> tuple:
        """The rendered indices of the last two dims of an element of shape `out_shape`
        (0 along a broadcast dim of size 1)."""
        tail = idx[len(idx) - 2:]
        sizes = tuple(out_shape)[-2:]
        # (values compared with each other, not indices: unsigned only where a row block's
        # loop variable makes them so, as the comparison's operands must agree)
        return tuple(_render_position(self, Aff(0) if n == 1 else i)
                     for n, i in zip(sizes, tail))

    # -------------------------------------------------------------- the module
    def header(self, kind_doc: str) -> list:
        g = self.group
        shape = (f"iteration shape {list(g.shape)}" if g.kind != "multi" else
                 "iteration shapes " + ", ".join(str(list(p.shape)) for p in g.parts))
        return [
            f'"""Kernel {g.name}: {g.kind}, {shape}.',
            "",
            kind_doc,
            "Generated by tracejit codegen; each line cites the IR equation it implements.",
            '"""',
        ]


_LOAD = re.compile(r"@L(\d+)@")


def canonical(source: str, summary: str) -> tuple:
    """(text, name hint) of the module a kernel's `source` compiles as: the same code
    without the docstring and comments, which name IR values and user lines. Kernels that
    differ only there (an unrolled loop's time steps: the same expression on other values)
    are then one module, compiled once and loaded once, and one entry of the disk cache.
    Generated code has no '#' but in comments (cutting a string there would not compile,
    never run differently). The first line's iteration shape is left out too: the code
    holds every size it depends on (as a literal, or as an argument: KernelSource.size),
    so kernels at two batch sizes whose code is the same are one module."""
    head, end, code = source.partition('\n"""\n')  # (the end of the module docstring)
    if not end:
        head, code = "", head
    # (what the first line says after the kernel's name: its kind)
    what = head.splitlines()[0].partition(": ")[2].split(", iteration shape")[0] if head else ""
    lines = []
    for line in code.splitlines():
        line = line.split("#", 1)[0].rstrip()
        if line:
            lines.append(line)
    doc = (f'"""Kernel {summary}: {what}\n\nThe compiled form of every kernel of this code '
           '(each kernel\'s own source, its lines\nciting the IR, is Kernel.source).\n"""')
    return doc + "\n" + "\n".join(lines) + "\n", summary


def _eqn_comment(e) -> str:
    text = format_eqn(e, "")[0]
    loc = e.loc
    core = text[: text.rfind(str(e.out.type))].rstrip() if loc else text
    return f"{core}  ({loc})" if loc else core


def _flat(shape, idx) -> Aff:
    out = Aff(0)
    for s, i in zip(c_strides(shape), idx):
        out = out + i.scale(s)
    return out


def _view_index(e, src_shape, idx):
    """The index into a view's input for index `idx` into its output (None: reshape)."""
    op = e.op
    if op == "broadcast_to":
        lead = len(e.out.type.shape) - len(src_shape)
        return [Aff(0) if src_shape[k] == 1 and e.out.type.shape[lead + k] != 1
                else idx[lead + k] for k in range(len(src_shape))]
    if op == "permute":
        perm = e.params["perm"]
        out = [None] * len(perm)
        for k, p in enumerate(perm):
            out[p] = idx[k]
        return out
    if op == "getitem":
        out = []
        o = 0
        for item in e.params["index"]:
            if item is None:
                o += 1
            elif isinstance(item, tuple):
                start, _stop, step = item
                out.append(Aff(start) + idx[o].scale(step))
                o += 1
            else:
                out.append(Aff(item))
        out.extend(idx[o:])
        return out
    if op == "reshape":
        a, b = src_shape, e.out.type.shape
        if [d for d in a if d != 1] == [d for d in b if d != 1]:
            kept = [i for d, i in zip(b, idx) if d != 1]
            it = iter(kept)
            return [Aff(0) if d == 1 else next(it) for d in a]
        return None
    raise AssertionError(op)


def _is_row_value(g, var) -> bool:
    return var.type.shape != g.shape


def _row_index(shape, outer_shape, idx):
    if tuple(shape) == tuple(outer_shape):
        return idx[:len(outer_shape)]
    return idx[:len(outer_shape)] + [Aff(0)] * (len(shape) - len(outer_shape))
