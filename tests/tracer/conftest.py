"""Shared by the tracer tests: every graph any of them traces must verify."""
import sys

import pytest

import tracer
from tracer.passes import optimize


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
