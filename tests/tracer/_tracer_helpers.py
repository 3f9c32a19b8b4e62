"""Helpers shared by the tracer test modules."""
import tracer


def fn(body=None, **options):
    """`tracer.function` on the interpreter, usable bare or with options."""
    options.setdefault("backend", "interpret")
    if body is None:
        return lambda f: tracer.function(f, **options)
    return tracer.function(body, **options)
