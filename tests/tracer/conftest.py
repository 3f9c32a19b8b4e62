"""Shared by the tracer tests: every graph any of them traces must verify, and every test
that compiles with the default backend runs on both backends."""
import ast
import inspect
import re
import sys
import textwrap

import _tracer_helpers
import pytest

import tracer
from tracer.passes import optimize

BACKENDS = ("interpret", "numba")

# A call that leaves the backend to its default: the helper `fn` (interpreter by default)
# or `tracer.function` without `backend=` (Numba by default).
_DEFAULT_BACKEND_CALL = re.compile(
    r"@fn\b|(?<![\w.])fn\(|tracer\.function\b(?!\([^)\n]*backend=)")


def pytest_configure(config):
    config.addinivalue_line("markers", "one_backend: a tracer test that asserts something "
                            "only one backend does (program structure, kernels, timing); "
                            "it runs on the default backend only")


def pytest_generate_tests(metafunc):
    """Behaviour is the same on every backend, so a test that compiles with the default
    backend runs once per backend (a test that names its backend, or takes a `backend`
    parameter, runs as it says)."""
    if "backend" in metafunc.fixturenames or metafunc.definition.get_closest_marker(
            "one_backend"):
        return
    try:
        source = inspect.getsource(metafunc.function)
    except (OSError, TypeError):
        return
    if _DEFAULT_BACKEND_CALL.search(source) and _leaves_the_backend_to_default(source):
        metafunc.parametrize("default_backend", BACKENDS, indirect=True)


def _leaves_the_backend_to_default(source: str) -> bool:
    """Whether the test's code uses `fn` or `tracer.function` without `backend=` (read from
    its syntax tree: the regex above also matches a call whose `backend=` comes after a
    parenthesis or on another line, and such a test would run twice on one backend)."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return True
    named = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and any(k.arg == "backend" for k in node.keywords):
            named.add(id(node.func))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "fn" and id(node) not in named:
            return True
        if isinstance(node, ast.Attribute) and node.attr == "function" and \
                isinstance(node.value, ast.Name) and node.value.id == "tracer" and \
                id(node) not in named:
            return True
    return False


@pytest.fixture(autouse=True)
def default_backend(request, monkeypatch):
    """This run's backend for `fn` and for `tracer.function` without `backend=`."""
    backend = getattr(request, "param", None)
    if backend is None:
        yield None
        return
    original = tracer.function

    def function(fn=None, **options):
        options.setdefault("backend", backend)
        return original(fn, **options)

    monkeypatch.setattr(tracer, "function", function)
    monkeypatch.setattr(_tracer_helpers, "BACKEND", [backend])
    yield backend


@pytest.fixture(autouse=True)
def _verify_every_trace(monkeypatch):
    """Every graph traced by a tracer test verifies, raw and after the passes."""
    module = sys.modules["tracer.function"]
    original = module.trace_function

    def trace_and_verify(*args, **kwargs):
        cf = original(*args, **kwargs)
        tracer.verify(cf.raw_graph)
        tracer.verify(cf.graph)
        tracer.verify(optimize(cf.raw_graph))
        return cf

    monkeypatch.setattr(module, "trace_function", trace_and_verify)
