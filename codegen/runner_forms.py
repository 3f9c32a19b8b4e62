"""Runner lines for single ops that a numpy/blas/view step writes inline instead of calling
the registry's implementation (a lowering row's ``inline``): each is one op's algorithm
(numpy's own view call, BLAS through np.matmul, an inlined check), kept out of the generic
runner so the runner holds no op names.

Each form is ``f(gen, k, step, a, direct, bound) -> bool``: `gen` the runner generator
(codegen.runner._Generator: its `lines`, `ns`, `fortran`), `k` the step's position, `a`
the operand expressions when every operand is a slot and no parameter depends on a
symbolic size (`direct`), `bound` whether parameters are bound per call. It appends its
lines and returns True, or returns False to let the implementation be called.
"""
from __future__ import annotations

import math

import numpy as np

from tracer.ir import Var


def permute(gen, k, step, a, direct, bound) -> bool:
    if not direct:
        return False
    e, out = step.eqn, step.out
    gen.lines.append(f"    v{out} = {a[0]}.transpose({tuple(e.params['perm'])})")
    if tuple(e.params["perm"]) == (1, 0) and step.inputs[0] not in gen.fortran:
        gen.fortran.add(out)  # the transpose of a C-ordered matrix (as a rule)
    return True


def reshape(gen, k, step, a, direct, bound) -> bool:
    if not direct:
        return False
    gen.lines.append(f"    v{step.out} = {a[0]}.reshape({tuple(step.eqn.params['shape'])})")
    return True


def gather(gen, k, step, a, direct, bound) -> bool:
    if not direct:
        return False
    gen.lines.append(f"    v{step.out} = {a[0]}[{', '.join(a[1:])}]")
    return True


def scatter_add(gen, k, step, a, direct, bound) -> bool:
    if not (direct and step.unique):
        return False
    e, out = step.eqn, step.out
    gen.ns[f"t{out}"] = (tuple(e.params["shape"]), e.out.type.dtype)
    gen.lines.append(f"    v{out} = zeros(*t{out}); v{out}[{', '.join(a[1:])}] = {a[0]}"
                     "  # scatter_add, no position repeats")
    return True


def matmul(gen, k, step, a, direct, bound) -> bool:
    if not direct:
        return False
    e, out, lines = step.eqn, step.out, gen.lines
    a = gen.tuned_operands(e, step.inputs, a)
    if step.dest >= 0:
        lines.append(f"    d = dests[{step.dest}] if dests is not None else None")
        lines.append(f"    v{out} = matmul({a[0]}, {a[1]}) if d is None else "
                     f"matmul({a[0]}, {a[1]}, out=d)")
    elif id(e.out) not in gen.p._escaping and len(e.out.type.shape) >= 2 \
            and all(x.type.dtype == e.out.type.dtype for x in e.inputs):
        # A value that stays inside the program: into a buffer reused every call, as a
        # kernel's pooled output. W9's step spent more time page-faulting fresh matmul
        # outputs (numpy asks the OS for fresh pages) than multiplying.
        buf = gen.pool(e.out.type.shape, e.out.type.dtype)
        lines.append(f"    v{out} = matmul({a[0]}, {a[1]}, out={buf})")
    else:
        lines.append(f"    v{out} = matmul({a[0]}, {a[1]})")
    return True


def check_class_index(gen, k, step, a, direct, bound) -> bool:
    e, slots = step.eqn, step.inputs
    x = e.inputs[0] if e.inputs else None
    if not (isinstance(x, Var) and not bound and np.dtype(x.type.dtype).kind == "i"
            and isinstance(slots[0], int) and all(isinstance(d, int) for d in x.type.shape)):
        return False
    # The registry's check, inlined (a third of its cost was the call): seen as
    # unsigned, a negative index exceeds any size; on a hit the op's own
    # implementation raises its IndexError.
    v = f"v{slots[0]}"
    if math.prod(x.type.shape):
        gen.ns["umax"] = np.maximum.reduce
        gen.ns[f"u{k}"] = np.dtype(f"u{np.dtype(x.type.dtype).itemsize}")
        gen.lines.append(f"    if umax({v}.view(u{k}), None) >= {int(e.params['size'])}: "
                         f"op{k}({v}, **p{k})  # check_class_index raises")
    gen.lines.append(f"    v{step.out} = {v}.view()")
    return True
