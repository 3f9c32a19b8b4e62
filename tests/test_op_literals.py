"""Per-op facts live in the op's rows (issue 14 item 3): code in tracer/ and codegen/ does
not compare op names, except where listed in ALLOWED with the reason.

The sources are read with `ast` (nothing is imported besides the registry, for the names).
An op-name literal counts when it is compared (`e.op == "x"`, `op != "x"`), tested for
membership (`op in ("x", "y")`), or gathered into a set/tuple/list/dict of two or more op
names (a table of ops kept outside the rows). The lowering table codegen/lower.py, whose
rows are keyed by op name, is the one file allowed to name ops freely. A new op-name literal
outside the list fails this test: give the fact a row field (eager/ops.py `OpDef`,
codegen/lower.py `Lowering`) or a function attached to the row instead.
"""
from __future__ import annotations

import ast
import pathlib

import eager  # noqa: F401 - registers every op
from eager.ops import OPS

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCANNED = ("tracer", "codegen")
OP_NAMES = {"op", "name", "op_name"}  # what an op's name is held in
EXEMPT = {"codegen/lower.py"}  # the lowering table itself: one row per op name

# (file, op) -> why that file still names the op
ALLOWED = {
    ("tracer/autodiff.py", "add"): "gradient accumulation sums cotangents with add/sub "
                                   "(one algorithm, TODO: a row's 'linear in inputs' field)",
    ("tracer/autodiff.py", "sub"): "as add",
    **{("tracer/autodiff.py", op): "_COMPARISONS: comparisons are not recomputed across the "
                                   "backward (TODO: an OpDef field)"
       for op in ("eq", "ne", "gt", "ge", "lt", "le")},
    **{("tracer/layout.py", op): "the witness of each view op (TODO: a view function on the "
                                 "OpDef row)"
       for op in ("permute", "getitem", "broadcast_to", "reshape", "stop_gradient", "cast",
                  "view_dtype")},
    **{("tracer/views.py", op): "eager view links per view op (TODO: as layout.py)"
       for op in ("reshape", "broadcast_to", "stop_gradient", "getitem", "permute",
                  "view_dtype")},
    **{("tracer/passes.py", op): "algebraic simplifications (inverse pairs, permute "
                                 "into matmul): rules between two ops"
       for op in ("stop_gradient", "neg", "cast", "reshape", "permute", "broadcast_to",
                  "matmul")},
    ("tracer/symbolic.py", "amax"): "max reductions refuse an empty symbolic extent "
                                    "(TODO: OpDef reduce='max' covers amax, not argmax)",
    ("tracer/symbolic.py", "argmax"): "as amax; argmax's axis parameter differs",
    **{("codegen/kernel_source.py", op): "index arithmetic of each view op inside a kernel "
                                         "(TODO: a function on the view rows)"
       for op in ("broadcast_to", "permute", "getitem", "reshape")},
    ("codegen/kernel_source.py", "div"): "a loop-invariant divisor becomes a reciprocal "
                                         "multiplication (TODO: a Lowering field)",
    **{("tracer/passes.py", op): "_IDENTITIES: each op's neutral operand (TODO: an OpDef "
                                 "field, as reduce= is)"
       for op in ("mul", "add", "sub", "div")},
    **{("codegen/vmath/__init__.py", op): "vmath implements functions named after the ops "
                                          "(its pure-Python reference table)"
       for op in ("exp", "expm1", "log", "log1p", "tanh", "sigmoid", "erf")},
    **{("codegen/vmath/__init__.py", op): "as exp (trig.py, inverse_trig.py)"
       for op in ("sin", "cos", "tan", "asin", "acos", "atan", "atan2")},
    **{("codegen/fuse.py", op): "which views fuse into a kernel's index arithmetic"
       for op in ("reshape", "broadcast_to")},
    ("codegen/reshape_fold.py", "reshape"): "the rule between a kernel op and the reshape "
                                            "that reads it (the op computed at the "
                                            "reshape's shape): a rule between two ops",
    **{("tracer/product_sums.py", op): "the sum-of-products rewrite: a rule between add and "
                                       "matmul, and the cat/permute/reshape it writes"
       for op in ("add", "matmul", "cat", "permute", "reshape")},
}


def _op_literals(tree) -> list:
    """(line, op) of each op-name literal compared, tested or gathered into a table."""
    names = set(OPS)
    found = []

    def ops_in(node) -> list:
        return [n for n in ast.walk(node)
                if isinstance(n, ast.Constant) and isinstance(n.value, str)
                and n.value in names]

    skipped = set()  # `__all__ = [...]` lists function names, not ops
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                for t in node.targets):
            skipped.add(id(node.value))
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Compare):
            # (only a comparison of an op's name: `OPS[op].reduce == "sum"` reads a row)
            sides = [node.left] + list(node.comparators)
            if any(isinstance(x, ast.Name) and x.id in OP_NAMES
                   or isinstance(x, ast.Attribute) and x.attr in OP_NAMES for x in sides):
                found += [(c.lineno, c.value) for c in ops_in(node)]
        elif isinstance(node, (ast.Set, ast.Tuple, ast.List)):
            consts = [c for c in node.elts if isinstance(c, ast.Constant)
                      and isinstance(c.value, str) and c.value in names]
            if len(consts) >= 2:
                found += [(c.lineno, c.value) for c in consts]
        elif isinstance(node, ast.Dict):
            consts = [c for c in node.keys if isinstance(c, ast.Constant)
                      and isinstance(c.value, str) and c.value in names]
            if len(consts) >= 2:
                found += [(c.lineno, c.value) for c in consts]
    return sorted(set(found))


def _scan() -> dict:
    hits = {}
    for package in SCANNED:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in EXEMPT:
                continue
            for line, op in _op_literals(ast.parse(path.read_text(), rel)):
                hits.setdefault((rel, op), []).append(line)
    return hits


def test_no_op_name_literals_outside_the_rows():
    new = {key: lines for key, lines in _scan().items() if key not in ALLOWED}
    assert not new, (
        "op names compared in code (file, op): lines\n"
        + "\n".join(f"  {k}: {v}" for k, v in sorted(new.items()))
        + "\nput the fact in the op's row (OpDef / Lowering field, or a function on the row)"
          ", or list it in ALLOWED with the reason")


def test_the_allow_list_has_no_stale_entries():
    stale = sorted(set(ALLOWED) - set(_scan()))
    assert not stale, f"ALLOWED names literals no longer there: {stale}"


def test_the_scan_sees_a_comparison_and_a_table():
    tree = ast.parse('if e.op == "matmul": pass\nX = {"add", "sub"}\nY = ("exp",)\n')
    assert _op_literals(tree) == [(1, "matmul"), (2, "add"), (2, "sub")]
