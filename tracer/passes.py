"""Graph-to-graph optimization passes.

Each pass is a function `Graph -> Graph` that never mutates its input: it
returns a new `Graph` (via `graph.replace`), or the very same object when it
found nothing to do, so `after is before` means "unchanged".  Each runs and
prints on its own:

    >>> g2 = simplify(g)           # x*1 -> x, reshape(reshape x) -> reshape x, ...
    >>> print(dce(cse(g2)))

`optimize(graph)` runs the pipeline (transpose_products, sum_products - in
product_sums.py -, simplify, fold_constants, cse, dce) to a fixed point and
verifies the result.  With `TRACER_LOGS=passes` it logs the IR
before and after every pass that changed something.

Shared conventions:

* Removing or merging an equation *renames* its output: later operands, the
  graph's outputs and updates are substituted.  Output `Var`s of surviving
  equations are reused, so names and source locations (`loc`) stay.
* Sub-graphs of control-flow equations (`cond`, `while_loop`: `Graph` values in
  params) are closed (`verify` checks each one on its own) and every pass
  recurses into them; their signatures (inputs, outputs) never change.
* Random equations (category `random`) are never folded, merged or removed, so
  a compiled function draws from the global generator exactly as eager does.
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np

from eager.dtypes import is_floating
from eager.ops import OPS

from . import logs
from .ir import Eqn, Graph, Literal, Var, VerifyError, infer_eqn, verify
from .product_sums import sum_products

MAX_FOLD_SIZE = 4096  # largest non-0-d result (in elements) that constant folding materializes


# ----------------------------------------------------------------------------- helpers

def _is_random(eqn: Eqn) -> bool:
    op = OPS.get(eqn.op)
    return op is not None and op.category == "random"


def _sub_graphs(eqn: Eqn) -> list:
    return [v for v in eqn.params.values() if isinstance(v, Graph)]


def _has_effect(eqn: Eqn) -> bool:
    """True if removing `eqn` would change what the program observably does (RNG draws;
    a value check that may raise, as eager raises there even when the value goes unused)."""
    if _is_random(eqn) or OPS[eqn.op].raises:
        return True
    return any(_graph_has_effect(g) for g in _sub_graphs(eqn))


def _graph_has_effect(graph: Graph) -> bool:
    return any(_has_effect(e) for e in graph.eqns)


def draws_random(graph: Graph) -> bool:
    """True if running `graph` draws from the random generator (in a sub-graph too)."""
    return any(_is_random(e) or any(draws_random(g) for g in _sub_graphs(e))
               for e in graph.eqns)


def _resolve(x, env: dict):
    """Follow renamings of `x` (a Var or Literal) through `env` (id(Var) -> operand)."""
    while isinstance(x, Var) and id(x) in env:
        x = env[id(x)]
    return x


def _same(a, b) -> bool:
    """Element-wise identity of two sequences."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _rewrite_eqn(eqn: Eqn, env: dict, on_sub: Callable[[Graph], Graph] | None) -> Eqn:
    """`eqn` with renamed inputs and transformed sub-graphs (the same object if unchanged)."""
    inputs = tuple(_resolve(x, env) for x in eqn.inputs)
    params = eqn.params
    if on_sub is not None and _sub_graphs(eqn):
        new = {k: on_sub(v) if isinstance(v, Graph) else v for k, v in eqn.params.items()}
        if any(new[k] is not params[k] for k in params):
            params = new
    if params is eqn.params and _same(inputs, eqn.inputs):
        return eqn
    return Eqn(eqn.op, inputs, params, eqn.out, eqn.loc)


def _finish(graph: Graph, eqns: list, env: dict, consts=None) -> Graph:
    """`graph` with new equations and consts and renamed results (itself if nothing changed)."""
    eqns = tuple(eqns)
    consts = graph.consts if consts is None else tuple(consts)
    outputs = tuple(_resolve(x, env) for x in graph.outputs)
    updates = tuple(_resolve(x, env) for x in graph.updates)
    same_consts = _same([v for v, _ in consts], [v for v, _ in graph.consts]) and _same(
        [a for _, a in consts], [a for _, a in graph.consts])
    if (same_consts and _same(eqns, graph.eqns) and _same(outputs, graph.outputs)
            and _same(updates, graph.updates)):
        return graph
    return graph.replace(eqns=eqns, consts=consts, outputs=outputs, updates=updates)


def _const_values(graph: Graph) -> dict:
    return {id(v): arr for v, arr in graph.consts}


def _value_of(x, consts: dict):
    """The array behind a Literal or const Var, else None."""
    if isinstance(x, Literal):
        return x.value
    return consts.get(id(x))


# ----------------------------------------------------------------------------- dce

def dce(graph: Graph) -> Graph:
    """Dead-code elimination.

    Drops equations whose outputs do not reach `outputs`/`updates`, and unused
    consts.  Inputs and captures always stay (they are the signature).  Random
    equations stay even when dead, so the generator advances exactly as in
    eager; a control-flow equation whose sub-graphs draw random numbers stays
    for the same reason.

        %0 = exp %x        <- dropped: %0 is never used
        %1 = normal[...]   <- kept: it advances the RNG
    """
    live = {id(x) for x in graph.results if isinstance(x, Var)}
    kept = []
    for eqn in reversed(graph.eqns):
        if not (_has_effect(eqn) or any(id(o) in live for o in eqn.outs)):
            continue
        eqn = _rewrite_eqn(eqn, {}, dce)
        kept.append(eqn)
        live.update(id(x) for x in eqn.inputs if isinstance(x, Var))
    kept.reverse()
    consts = [c for c in graph.consts if id(c[0]) in live]
    return _finish(graph, kept, {}, consts)


# ----------------------------------------------------------------------------- cse

def _operand_key(x):
    return x.key() if isinstance(x, Literal) else ("var", id(x))


def _eqn_key(eqn: Eqn):
    """A hashable identity of what `eqn` computes, or None if it must not be merged."""
    if OPS[eqn.op].control or _is_random(eqn):
        return None
    try:
        key = (eqn.op, eqn.param_key(), tuple(_operand_key(x) for x in eqn.inputs))
        hash(key)
    except TypeError:  # a param value that cannot be hashed (e.g. a slice): don't merge
        return None
    return key


def cse(graph: Graph) -> Graph:
    """Common-subexpression elimination.

    Equations with the same op, params and operands (Vars by identity, Literals
    by value) compute the same value: the later one is dropped and its uses are
    renamed to the first one's output.  Consts with equal dtype, shape and
    bytes are merged the same way.  Random and control-flow equations are never
    merged (control-flow inputs are renamed, and their sub-graphs get their own
    cse).

        %0 = mul %x, 2.0:f32            %0 = mul %x, 2.0:f32
        %1 = mul %x, 2.0:f32     ->     %2 = add %0, %0
        %2 = add %0, %1
    """
    env: dict = {}
    consts = []
    candidates: dict = {}  # (dtype, shape) -> [(Var, array)] kept so far
    for v, arr in graph.consts:
        same_kind = candidates.setdefault((arr.dtype.str, arr.shape), [])
        # Bytes, not ==: 0.0 and -0.0 must stay apart, equal NaNs may merge.
        twin = next((w for w, a in same_kind if a.tobytes() == arr.tobytes()), None)
        if twin is not None:
            env[id(v)] = twin
        else:
            same_kind.append((v, arr))
            consts.append((v, arr))

    seen: dict = {}
    eqns = []
    for eqn in graph.eqns:
        eqn = _rewrite_eqn(eqn, env, cse)
        key = _eqn_key(eqn)
        if key is not None:
            first = seen.get(key)
            if first is not None:
                env[id(eqn.out)] = first
                continue
            seen[key] = eqn.out
        eqns.append(eqn)
    return _finish(graph, eqns, env, consts)


# ----------------------------------------------------------------------------- constant folding

def fold_constants(graph: Graph, max_size: int = MAX_FOLD_SIZE) -> Graph:
    """Evaluate equations whose operands are all Literals or consts, with the op's numpy impl.

    A 0-d result becomes a `Literal` (inlined into its uses); a larger one
    becomes a const (the equation's output Var is reused, so the name stays)
    when it has at most `max_size` elements, else the equation stays.  0-d
    consts are turned into Literals too.  Random ops are never folded; neither
    are equations whose impl raises (the error then happens at run time, as in
    eager).

        %0 = add 2.0:f32, 3.0:f32
        %1 = mul %x, %0          ->    %1 = mul %x, 5.0:f32
    """
    known = _const_values(graph)
    env: dict = {}
    for v, arr in graph.consts:
        if arr.ndim == 0 and v.type.shape == ():
            env[id(v)] = Literal(np.array(arr, dtype=v.type.dtype), v.type)
    consts = list(graph.consts)
    eqns = []
    for eqn in graph.eqns:
        eqn = _rewrite_eqn(eqn, env, lambda g: fold_constants(g, max_size))
        value = _fold(eqn, known, max_size)
        if value is None:
            eqns.append(eqn)
        elif value.ndim == 0:
            env[id(eqn.out)] = Literal(value, eqn.out.type)
        else:
            consts.append((eqn.out, value))
            known[id(eqn.out)] = value
    return _finish(graph, eqns, env, consts)


def _fold(eqn: Eqn, known: dict, max_size: int):
    """The value of `eqn` if all its operands are constant (an owned ndarray), else None."""
    if OPS[eqn.op].control or _is_random(eqn) or not eqn.inputs:
        return None
    args = [_value_of(x, known) for x in eqn.inputs]
    if any(a is None for a in args):
        return None
    out = eqn.out.type
    if not all(isinstance(d, int) for d in out.shape):  # symbolic size: not a constant
        return None
    if out.shape and math.prod(out.shape) > max_size:  # too big to keep: don't compute it
        return None
    try:
        # Same IEEE results (inf, nan) as eager, without numpy's warnings at compile time.
        with np.errstate(all="ignore"):
            value = OPS[eqn.op].impl(*args, **eqn.params)
    except Exception:  # noqa: BLE001 - leave it to run time, where eager would raise too
        return None
    value = np.asarray(value)
    if value.shape != tuple(out.shape):
        return None
    # Own the memory (views of other consts, read-only broadcasts) and honour the IR type.
    return np.array(value, dtype=out.dtype, copy=True)


# ----------------------------------------------------------------------------- simplification

def simplify(graph: Graph) -> Graph:
    """Algebraic simplification (exact rewrites only).

    * `x*1, 1*x, x+(-0.0), (-0.0)+x, x-0.0, x/1 -> x`, when the 1 or 0 (a Literal or a
      const whose every element is exactly that value) does not change x's type
      (no hidden broadcast).  `x*0` is left alone: it is NaN for x = inf/NaN. Float
      zeros count with their sign: `x + 0.0` is +0.0 at x = -0.0 (1/x tells them apart),
      so only `x + (-0.0)` and `x - 0.0` are x for every x. Integers: any 0.
    * `neg(neg x) -> x`, `cast(x, x.dtype) -> x`;
    * `reshape(reshape x) -> reshape x`, `permute(permute x) -> permute x`,
      `broadcast_to(broadcast_to x) -> broadcast_to x`, and each of them
      disappears when it does not change x's shape (or order).

    The inner equation stays; `dce` removes it when nothing else uses it.
    """
    consts = _const_values(graph)
    defs: dict = {}  # id(Var) -> the (rewritten) equation that defines it
    env: dict = {}
    eqns = []
    for eqn in graph.eqns:
        eqn = _rewrite_eqn(eqn, env, simplify)
        result = _simplify_eqn(eqn, defs, consts)
        if isinstance(result, (Var, Literal)):
            env[id(eqn.out)] = result
            continue
        if result is not None:
            eqn = result
        eqns.append(eqn)
        if not isinstance(eqn.out, tuple):
            defs[id(eqn.out)] = eqn
    return _finish(graph, eqns, env)


def _is_exactly(x, value, consts: dict) -> bool:
    arr = _value_of(x, consts)
    if arr is None or arr.size == 0 or not bool(np.all(arr == value)):
        return False
    # a float zero must have the sign asked for (0.0 and -0.0 are different constants)
    if value != 0 or not is_floating(arr.dtype):
        return True
    negative = math.copysign(1.0, value) < 0
    return bool(np.all(np.signbit(arr) == negative))


def _same_type(t, out: Var) -> bool:
    """Whether TensorType `t` is exactly `out`'s type (no broadcast, no dtype change)."""
    return tuple(t.shape) == tuple(out.type.shape) and t.dtype == out.type.dtype


# (op, operand position of the neutral constant, neutral value)
_IDENTITIES = {
    "mul": ((1, 1), (0, 1)),
    "add": ((1, -0.0), (0, -0.0)),
    "sub": ((1, 0.0),),
    "div": ((1, 1),),
}


def _simplify_eqn(eqn: Eqn, defs: dict, consts: dict):
    """A replacement for `eqn`: an operand (its value), a new Eqn, or None (keep)."""
    out = eqn.out
    if eqn.op in _IDENTITIES:
        for pos, neutral in _IDENTITIES[eqn.op]:
            other = eqn.inputs[1 - pos]
            if _is_exactly(eqn.inputs[pos], neutral, consts) and _same_type(other.type, out):
                return other
        return None
    if eqn.op == "stop_gradient":
        # Only autodiff cares, and it differentiates the unoptimized trace.
        return eqn.inputs[0]
    if eqn.op in ("neg", "cast", "reshape", "permute", "broadcast_to"):
        x = eqn.inputs[0]
        inner = defs.get(id(x)) if isinstance(x, Var) else None
        if inner is not None and inner.op != eqn.op:
            inner = None
        return _simplify_unary(eqn, x, inner)
    return None


def _simplify_unary(eqn: Eqn, x, inner: Eqn | None):
    out = eqn.out
    if eqn.op == "neg":
        return inner.inputs[0] if inner is not None else None
    if eqn.op == "cast":
        return x if eqn.params["dtype"] == x.type.dtype else None
    if eqn.op == "permute":
        perm = tuple(eqn.params["perm"])
        if inner is not None:
            # permute(y, p2) with y = permute(x, p1): out dim i is x dim p1[p2[i]].
            x = inner.inputs[0]
            perm = tuple(inner.params["perm"][p] for p in perm)
        if perm == tuple(range(len(perm))):
            return x
        return _retarget(eqn, x, perm=perm) if inner is not None else None
    # reshape and broadcast_to: only the final shape matters.
    if inner is not None:
        x = inner.inputs[0]
    if tuple(x.type.shape) == tuple(out.type.shape):
        return x
    return _retarget(eqn, x) if inner is not None else None


def _retarget(eqn: Eqn, x, **param_changes):
    """`eqn` applied to `x` instead (with some params changed), if that types the same."""
    params = dict(eqn.params, **param_changes)
    try:
        t = infer_eqn(eqn.op, [x.type], params)
    except Exception:  # noqa: BLE001 - not expressible that way: keep the original
        return None
    if not _same_type(t, eqn.out):
        return None
    return Eqn(eqn.op, (x,), params, eqn.out, eqn.loc)


# ----------------------------------------------------------------------------- pipeline

class PassStep(NamedTuple):
    """One pass that changed the graph, as reported to `optimize(..., log=...)`."""

    name: str
    round: int
    before: Graph
    after: Graph


def transpose_products(graph: Graph) -> Graph:
    """(A @ B)^T -> B^T @ A^T when the product is used only transposed.

    A linear layer's weight gradient comes out of autodiff as permute(matmul(x^T, g));
    computing matmul(g^T, x) instead gives the (out, in) layout directly (BLAS takes the
    transposes as flags), so the optimizer kernel that reads it streams memory in order
    instead of striding across it.
    """
    producer = {id(e.out): e for e in graph.eqns if isinstance(e.out, Var)}
    uses = graph.use_counts()
    eqns = []
    env: dict = {}
    changed = False
    for e in graph.eqns:
        e = _rewrite_eqn(e, env, None)
        if e.op == "permute" and isinstance(e.inputs[0], Var):
            perm = tuple(e.params["perm"])
            n = len(perm)
            m = producer.get(id(e.inputs[0]))
            swaps_last = n >= 2 and perm == tuple(range(n - 2)) + (n - 1, n - 2)
            if swaps_last and m is not None and m.op == "matmul" and \
                    uses.get(id(m.out), 0) == 1:
                a, b = m.inputs
                ta = _transposed(a, e.loc)
                tb = _transposed(b, e.loc)
                eqns.extend([ta, tb])
                eqns.append(Eqn("matmul", (tb.out, ta.out), {}, e.out, e.loc))
                changed = True
                continue
        eqns.append(e)
    if not changed:
        return graph
    return dce(_finish(graph, eqns, env))


def _transposed(x, loc) -> Eqn:
    """x with its last two dims swapped. Its own rank, not the product's: a batched
    x @ w has a 2-d w, and w^T broadcasts against the batch as w did."""
    from eager.ops import TensorType

    shape = tuple(x.type.shape)
    n = len(shape)
    perm = tuple(range(n - 2)) + (n - 1, n - 2)
    out = Var(f"{x.name}T" if isinstance(x, Var) else "litT",
              TensorType(tuple(shape[p] for p in perm), x.type.dtype))
    return Eqn("permute", (x,), {"perm": perm}, out, loc)


PIPELINE = (
    ("transpose_products", transpose_products),
    ("sum_products", sum_products),
    ("simplify", simplify),
    ("fold_constants", fold_constants),
    ("cse", cse),
    ("dce", dce),
)


def optimize(graph: Graph, log: Callable[[PassStep], None] | None = None, *,
             passes=PIPELINE, max_rounds: int = 4) -> Graph:
    """Run `passes` in order, repeating until a round changes nothing (at most `max_rounds`).

    The input and every pass output that differs from its input are verified
    (`tracer.ir.verify`, so a bad rewrite is blamed on the pass that made it),
    reported to `log` as a `PassStep`, and, when `TRACER_LOGS` contains
    `passes`, logged with the IR before and after on the `tracer.passes` logger.

        >>> steps = []
        >>> g = optimize(graph, log=steps.append)
        >>> [s.name for s in steps]
        ['simplify', 'dce']
    """
    verify(graph)
    for rnd in range(1, max_rounds + 1):
        changed = False
        for name, run in passes:
            after = run(graph)
            if after is graph:
                continue
            changed = True
            try:
                verify(after)
            except VerifyError as exc:
                raise VerifyError(f"pass {name} (round {rnd}) produced an invalid graph: "
                                  f"{exc}\n{after}") from exc
            step = PassStep(name, rnd, graph, after)
            if log is not None:
                log(step)
            logs.log("passes", lambda step=step: _describe(step))
            graph = after
        if not changed:
            break
    return graph


def _describe(step: PassStep) -> str:
    n0, n1 = len(step.before.eqns), len(step.after.eqns)
    return (f"{step.name} (round {step.round}) on {step.after.name}: {n0} -> {n1} equations\n"
            f"--- before {step.name}\n{step.before}\n--- after {step.name}\n{step.after}")


__all__ = ["MAX_FOLD_SIZE", "PIPELINE", "PassStep", "cse", "dce", "fold_constants",
           "optimize", "simplify", "sum_products"]
