"""The backend contract (tracer/backends.py): what a backend receives and returns, the
lazy registry, and the public names codegen uses instead of the tracer's private ones."""
from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import eager
import tracer
from tracer import backends
from tracer.ir import UpdateKind

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent


def test_available_backends_lists_numba_without_importing_codegen():
    code = ("import sys, tracer; print(tracer.available_backends(), "
            "'codegen' in sys.modules, 'numba' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120, check=True)
    assert out.stdout.split() == ["['interpret',", "'numba']", "False", "False"]


def test_codegen_imports_no_private_name_of_the_tracer():
    found = []
    for path in sorted((ROOT / "codegen").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tracer"):
                found += [f"{path.name}: {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and a.name != "__version__"]
    assert not found, found


def test_an_executable_missing_part_of_the_contract_is_refused():
    class NoDests:  # no dest_updates: an in-place update could be lost without a word
        kernels = ()

        def __init__(self, graph):
            self.graph = graph

        def __call__(self, args, dests=None):
            return backends.compile_interpret(self.graph)(args)

        def describe(self):
            return "no dests"

    backends.register_backend("no-dests", NoDests)
    try:
        f = tracer.function(lambda x: x + 1, backend="no-dests")
        with pytest.raises(TypeError, match="'no-dests' returned a NoDests without "
                                            "dest_updates"):
            f(eager.ones(2))
    finally:
        del backends._BACKENDS["no-dests"]


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_run_cond_and_run_while_are_public_and_serve_both_backends(backend):
    assert tracer.run_cond is backends.run_cond and tracer.run_while is backends.run_while

    @tracer.function(backend=backend)
    def f(x, n):
        y = tracer.cond(x.sum() > 0, lambda a: a * 2, lambda a: a - 1, x)
        _, z = tracer.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, a + 1.5),
                                 (eager.tensor(0), y))
        return z

    for data in ([1.0, 2.0], [-3.0, 1.0]):
        x = eager.tensor(data)
        expected = f._fn(x, eager.tensor(3))
        got = f(x, eager.tensor(3))
        np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_update_targets_are_update_kinds_and_grad_captures_a_field():
    w = eager.ones(3, requires_grad=True)

    @tracer.function(backend="interpret")
    def step(x):
        loss = (w * x).sum()
        loss.backward()
        with eager.no_grad():
            w.sub_(w.grad * 0.1)
        return loss

    step(eager.ones(3))
    graph = step.get_concrete_function(eager.ones(3)).graph
    kinds = [kind for kind, _ in graph.update_targets]
    assert kinds and all(isinstance(k, UpdateKind) for k in kinds)
    assert UpdateKind.DATA in kinds and UpdateKind.GRAD in kinds
    assert "grad_capture" not in graph.meta and isinstance(graph.grad_captures, dict)


def test_dynamic_true_raises_and_none_or_false_specialize():
    with pytest.raises(NotImplementedError, match="input_signature"):
        tracer.function(lambda x: x, dynamic=True)
    for dynamic in (None, False):
        f = tracer.function(lambda x: x * 2, dynamic=dynamic, backend="interpret")
        f(eager.ones(2))
        f(eager.ones(3))
        assert f.trace_count == 2
