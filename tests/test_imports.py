"""Imports run one way (issue 14 item 4): `codegen -> tracer -> eager`, and no import
cycle anywhere in the three packages.

The module graph is read from the sources with `ast` (nothing is imported). An import at
module level is an edge; so is one inside a function, unless it is listed in LAZY with the
reason it is there. The graph must have no cycle. Going against the layers is refused even
lazily: eager imports neither tracer nor codegen, tracer does not import codegen (the
"numba" backend is found by name, tracer.backends.LAZY_BACKENDS).
"""
from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("eager", "tracer", "codegen")
LAYER = {"eager": 0, "tracer": 1, "codegen": 2}

# (importer, imported) -> why a function-level import there closes a cycle and stays
LAZY = {
    ("codegen.conv_kernels", "codegen.conv_blocked"):
        "the register-blocked generators (AVX2) build on conv_kernels' Geometry and module "
        "text; conv_kernels._make picks them per CPU when a kernel is generated",
    ("tracer.ir", "tracer.printing"):
        "str(graph) is the printout; printing needs the IR's classes",
    ("tracer.views", "tracer.trace"):
        "an in-place write's result keeps the argument's layout in a new TracedValue; the trace "
        "imports views for its view and write rules",
    ("codegen.fuse", "codegen.emit"):
        "fuse's cost estimate asks emit whether a row kernel streams its output (emit._streams); "
        "goes with the split of emit.py",
    ("codegen.fuse", "codegen.kernel_source"):
        "fusion asks whether views read a row value at its own row with the emitter's own "
        "index arithmetic (Aff, _view_index); kernel_source reads the partition's classes",
    # eager: the runtime's modules meet at run time; their module-level imports run one way
    ("eager.device", "eager.dtypes"): "parse_to reads dtypes; dtypes is imported by tensors",
    ("eager.device", "eager.functions"): "as_tensor makes a tensor through the front end",
    ("eager.device", "eager.tensor"): "parse_to/as_tensor check for Tensor; tensor imports device",
    ("eager.protocol", "eager.dispatch"):
        "the eager default computes through dispatch.eager_compute; dispatch holds the protocol",
    ("eager.dispatch", "eager.ops"): "an op's failure is explained with its registry types",
    ("eager.dispatch", "eager.tensor"): "check_tensor; tensor imports dispatch",
    ("eager.dtypes", "eager.errors"): "a dtype error names the user's line",
    ("eager.errors", "eager.dtypes"): "describe() prints short dtype names",
    ("eager.errors", "eager.ops"): "an error names a symbolic size (ops.Dim)",
    ("eager.ops", "eager.random"): "random ops draw from the current generator",
    ("eager.random", "eager.device"): "Generator(device) checks the device",
    ("eager.tensor", "eager.autograd"): "t.backward() runs autograd, which imports tensor",
    ("eager.functions.elementwise", "eager.functions.math_fns"):
        "div(rounding_mode=) is math_fns._divide_rounded, built on elementwise's functions",
}
# module-level cycles that remain, with why (none may be added)
MODULE_LEVEL = {
    ("eager.ops", "eager.functions"):
        "the registry's vjp rules call the front end, which applies registry ops; the "
        "import is the last line of ops.py",
}


def _modules() -> dict:
    mods = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            mods[".".join(parts)] = (path, is_package)
    return mods


def _targets(mods, module, is_package, node) -> set:
    """The modules of ours an import statement imports."""
    names = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = module.split(".")
            if not is_package:
                base = base[:-1]
            base = base[:len(base) - (node.level - 1)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        subs = [f"{prefix}.{a.name}" for a in node.names if f"{prefix}.{a.name}" in mods]
        names = subs if len(subs) == len(node.names) else subs + [prefix]
    found = set()
    for name in names:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)
    # importing a module of another package runs that package's __init__ first
    for name in list(found):
        top = name.split(".")[0]
        if top != module.split(".")[0]:
            found.add(top)
    return found


def _edges():
    """{(importer, imported): (line, lazy)}: lazy when no import of that pair is at
    module level (also under a module-level if/try)."""
    mods = _modules()
    edges = {}
    for module, (path, is_package) in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = set()
        for node in tree.body:
            nodes = ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]
            top.update(id(n) for n in nodes)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(mods, module, is_package, node):
                    lazy = id(node) not in top
                    line, was_lazy = edges.get((module, target), (node.lineno, True))
                    edges[(module, target)] = (min(line, node.lineno), was_lazy and lazy)
    return edges


def _cycles(edges) -> list:
    """Strongly connected components of more than one module (Tarjan)."""
    graph: dict = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _describe(cycle, edges) -> str:
    inside = [f"{a} -> {b} (line {line}{', lazy' if lazy else ''})"
              for (a, b), (line, lazy) in sorted(edges.items()) if a in cycle and b in cycle]
    return "cycle among " + ", ".join(cycle) + ":\n  " + "\n  ".join(inside)


def test_imports_follow_the_layers():
    wrong = [f"{a} imports {b} (line {line})" for (a, b), (line, _) in sorted(_edges().items())
             if LAYER[a.split(".")[0]] < LAYER[b.split(".")[0]]]
    assert not wrong, "codegen -> tracer -> eager, never back:\n" + "\n".join(wrong)


def test_module_level_imports_have_no_cycle():
    edges = {e: v for e, v in _edges().items() if not v[1] and e not in MODULE_LEVEL}
    cycles = _cycles(edges)
    assert not cycles, "\n".join(_describe(c, edges) for c in cycles)


def test_no_import_cycle_except_the_listed_lazy_imports():
    edges = {e: v for e, v in _edges().items() if e not in LAZY and e not in MODULE_LEVEL}
    cycles = _cycles(edges)
    assert not cycles, ("\n".join(_describe(c, edges) for c in cycles)
                        + "\nbreak the cycle (move the shared piece into a module both can "
                          "import), or list a function-level import in LAZY with why")


def test_listed_exceptions_still_exist():
    edges = _edges()
    stale = [e for e in LAZY if e not in edges or not edges[e][1]]
    stale += [e for e in MODULE_LEVEL if e not in edges or edges[e][1]]
    assert not stale, f"no longer lazy imports closing a cycle; remove from the lists: {stale}"


def test_the_checker_finds_a_cycle():
    edges = {("a", "b"): (1, False), ("b", "c"): (1, True), ("c", "a"): (2, False),
             ("c", "d"): (3, False)}
    assert _cycles(edges) == [["a", "b", "c"]]
