"""The `sum_products` pass: a sum of matrix products becomes one product over a longer
contraction.

    sum_t X_t @ Y_t  ==  cat(X_1..X_T, axis=1) @ cat(Y_1..Y_T, axis=0)

A weight used at every step of a loop-unrolled recurrence (an RNN's W_hh) gets one gradient
contribution per step, dgates_t^T @ h_{t-1}, [4H, N] x [N, H] with a small batch N, and
autodiff sums them in a chain of adds.  T small products plus T - 1 adds of [4H, H] values
cost far more than one [4H, T N] x [T N, H] product (BLAS runs near its peak only when
every dimension is large) plus the copies into the two cats, which are often shared
anyway: backward through the recurrence already stacks the dgates_t for W_ih's gradient,
and the new cat is written in the same form, so `cse` merges the two.

The rewrite applies to an add tree (adds of one type, no broadcasting, each inner sum used
only by the next add) with at least two 2-d matmul leaves that are used only there, when
each product's cat copies no more values than the [M, K] add it saves
(N_t (M + K) <= M K).  Other leaves (the .grad accumulated so far, say) are added to the
new product.  Float only: the summation order changes, so results differ from eager's
chain of adds by rounding (float32: a few ULP of the largest partial sum; see
tests/tracer/test_product_sums.py).
"""
from __future__ import annotations

from eager.dtypes import is_floating
from eager.ops import TensorType

from .ir import Eqn, Graph, Var

MIN_PRODUCTS = 2


def _is_sum(e: Eqn | None, typ) -> bool:
    """A same-type, non-broadcasting float add of two Vars."""
    return (e is not None and e.op == "add" and not isinstance(e.out, tuple)
            and e.out.type == typ and is_floating(typ.dtype)
            and all(isinstance(x, Var) and x.type == typ for x in e.inputs))


def _is_product(e: Eqn | None, typ, uses: dict) -> bool:
    return (e is not None and e.op == "matmul" and uses.get(id(e.out), 0) == 1
            and e.out.type == typ and not e.params
            and all(isinstance(x, Var) and len(x.type.shape) == 2
                    and all(type(d) is int for d in x.type.shape)  # no symbolic dims
                    and x.type.dtype == typ.dtype for x in e.inputs))


def _leaves(root: Eqn, producer: dict, uses: dict) -> tuple[list, list]:
    """(the add tree's inner add eqns, its leaves in program order of their first use)."""
    typ = root.out.type
    inner, leaves, stack = [], [], [root]
    while stack:
        e = stack.pop()
        inner.append(e)
        for x in reversed(e.inputs):
            p = producer.get(id(x))
            if _is_sum(p, typ) and uses.get(id(x), 0) == 1:
                stack.append(p)
            else:
                leaves.append(x)
    return inner, leaves


def _worth_it(products: list) -> bool:
    if len(products) < MIN_PRODUCTS:
        return False
    m, k = products[0].out.type.shape
    return all(p.inputs[0].type.shape[1] * (m + k) <= m * k for p in products)


def _stacked_rows(rows: list, defs: dict) -> dict | None:
    """The reshape params of an existing `cat[axis=0](reshape(r) ...)` that stacks exactly
    `rows` (in some order), with that order: so the cat written here is the same equation
    and cse merges them.  None if there is none."""
    want = {id(r) for r in rows}
    for e in defs.get("cat", ()):
        if e.params.get("axis") != 0 or len(e.inputs) != len(rows):
            continue
        order, params = [], None
        for x in e.inputs:
            r = defs["_producer"].get(id(x))
            if r is None or r.op != "reshape" or not isinstance(r.inputs[0], Var):
                break
            src = r.inputs[0]
            if tuple(x.type.shape) != (1,) + tuple(src.type.shape) or id(src) not in want:
                break
            if params is not None and r.params != params:
                break
            params = r.params
            order.append(src)
        else:
            if len({id(s) for s in order}) == len(rows):
                return {"order": order, "params": params}
    return None


class _Builder:
    def __init__(self, loc: str, stem: str):
        self.eqns, self.loc, self.stem, self.n = [], loc, stem, 0

    def add(self, op: str, inputs, params, shape, dtype) -> Var:
        self.n += 1
        out = Var(f"{self.stem}s{self.n}", TensorType(tuple(shape), dtype))
        self.eqns.append(Eqn(op, tuple(inputs), dict(params), out, self.loc))
        return out


def _rewrite(root: Eqn, products: list, others: list, defs: dict) -> list:
    """Equations computing root.out as one product plus the other leaves."""
    typ = root.out.type
    b = _Builder(root.loc, root.out.name)
    # rows_t: X_t^T ([N_t, M]); a permuted X_t is read through its permute's input
    rows = []
    for p in products:
        x = p.inputs[0]
        src = defs["_producer"].get(id(x))
        if src is not None and src.op == "permute" and tuple(src.params["perm"]) == (1, 0):
            rows.append(src.inputs[0])
        else:
            rows.append(b.add("permute", [x], {"perm": (1, 0)}, tuple(x.type.shape)[::-1],
                              typ.dtype))
    ys = [p.inputs[1] for p in products]
    stacked = _stacked_rows(rows, defs)
    total = sum(r.type.shape[0] for r in rows)
    m, k = typ.shape
    if stacked is not None:
        index = {id(r): i for i, r in enumerate(rows)}
        order = [index[id(r)] for r in stacked["order"]]
        rows, ys = [rows[i] for i in order], [ys[i] for i in order]
        shaped = [b.add("reshape", [r], stacked["params"], (1,) + tuple(r.type.shape),
                        typ.dtype) for r in rows]
        cat3 = b.add("cat", shaped, {"axis": 0}, (len(rows),) + tuple(rows[0].type.shape),
                     typ.dtype)
        row_cat = b.add("reshape", [cat3], {"shape": (total, m)}, (total, m), typ.dtype)
    else:
        row_cat = b.add("cat", rows, {"axis": 0}, (total, m), typ.dtype)
    y_cat = b.add("cat", ys, {"axis": 0}, (total, k), typ.dtype)
    x_cat = b.add("permute", [row_cat], {"perm": (1, 0)}, (m, total), typ.dtype)
    acc = b.add("matmul", [x_cat, y_cat], {}, (m, k), typ.dtype)
    for i, other in enumerate(others):
        if i == len(others) - 1:
            b.eqns.append(Eqn("add", (acc, other), {}, root.out, root.loc))
            return b.eqns
        acc = b.add("add", [acc, other], {}, (m, k), typ.dtype)
    last = b.eqns[-1]
    b.eqns[-1] = Eqn(last.op, last.inputs, last.params, root.out, last.loc)
    return b.eqns


def sum_products(graph: Graph) -> Graph:
    """sum_t X_t @ Y_t -> cat(X_t, axis=1) @ cat(Y_t, axis=0), see the module docstring.

        %3 = matmul %1T, %h0                 %9 = cat[axis=0] %1, %2
        %4 = matmul %2T, %h1          ->     %10 = cat[axis=0] %h0, %h1
        %5 = add %3, %4                      %5 = matmul %9T, %10

    The products and inner adds it replaces are left dead, for `dce` (next in the pipeline).
    """
    producer = {id(e.out): e for e in graph.eqns if isinstance(e.out, Var)}
    uses = graph.use_counts()
    defs = {"_producer": producer, "cat": [e for e in graph.eqns if e.op == "cat"]}
    # an add tree's root: a sum whose value is not just one operand of a bigger sum
    consumer: dict = {}
    for e in graph.eqns:
        for x in e.inputs:
            consumer[id(x)] = e
    eqns, changed = [], False
    for e in graph.eqns:
        typ = getattr(e.out, "type", None)
        if _is_sum(e, typ):
            c = consumer.get(id(e.out))
            inner_sum = uses.get(id(e.out), 0) == 1 and _is_sum(c, typ)
            if not inner_sum:
                _, leaves = _leaves(e, producer, uses)
                products = [producer[id(x)] for x in leaves
                            if _is_product(producer.get(id(x)), typ, uses)]
                if _worth_it(products):
                    taken = {id(p.out) for p in products}
                    others = [x for x in leaves if id(x) not in taken]
                    eqns.extend(_rewrite(e, products, others, defs))
                    changed = True
                    continue
        eqns.append(e)
    if not changed:
        return graph
    return graph.replace(eqns=tuple(eqns))


__all__ = ["sum_products"]
