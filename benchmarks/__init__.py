"""Eager vs compiled benchmarks: `python -m benchmarks`."""
