"""Helpers shared by the tracer test modules."""
import tracer

# The backend `fn` uses unless told: conftest.py runs each test that calls `fn` once per
# backend and sets it for that run.
BACKEND = ["interpret"]


def fn(body=None, **options):
    """`tracer.function` on this run's backend (see BACKEND), usable bare or with options."""
    options.setdefault("backend", BACKEND[0])
    if body is None:
        return lambda f: tracer.function(f, **options)
    return tracer.function(body, **options)
