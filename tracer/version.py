"""tracejit's version: one place that every layer (and pyproject.toml) reads without
importing anything else (the kernel cache keys on it)."""

__version__ = "0.1.0"
