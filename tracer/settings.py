"""Every environment switch tracejit reads, in one table, read in one place.

No other module reads ``os.environ``: each asks this one, at the moment it needs the value
(so a test's ``monkeypatch.setenv`` is seen by the next use). Three kinds of reads:

- ``FLAG.on()`` (or ``bool(FLAG)``): an on/off switch, on unless set to ``0`` (also
  ``false``, ``off``, ``no``). Modules keep a flag as a module attribute
  (``ahead.ENABLED = settings.COMPILE_AHEAD``): every truth test reads the environment
  again, and a test may still replace the attribute with ``True``/``False``.
- ``SIZE.value()``: a size threshold, unset for the default, ``0`` for never.
- ``SETTING.raw()``: the text as set (``""`` when unset), for settings with their own
  syntax (``TRACER_LOGS``, ``TRACER_CHECK``, paths).

Caveats, each where the value is used: ``TRACER_LOGS`` and ``TRACER_CHECK`` are read at
their first use and kept (``tracer.logs.refresh()`` / ``tracer.check.env_calls(refresh=True)``
read them again); codegen's size thresholds are read once, when codegen is imported (at the
first compile with the numba backend). Numba's own variables (``NUMBA_*``) are Numba's:
tracejit reads them only to agree with what Numba will do, without importing it.

The README's table "Environment switches" is this table (tests/test_settings.py checks
that the two list the same names).

>>> from tracer import settings
>>> settings.GC_HOLD.on()          # unless TRACEJIT_GC_HOLD=0
True
"""
from __future__ import annotations

import os
from dataclasses import dataclass

_OFF = ("0", "false", "off", "no")


@dataclass(frozen=True)
class Setting:
    """One environment variable: its name, its default (as text) and what it does."""

    name: str
    default: str
    effect: str

    def raw(self) -> str:
        """The value as set, stripped; ``""`` when unset."""
        return os.environ.get(self.name, "").strip()

    def is_set(self) -> bool:
        return self.name in os.environ


@dataclass(frozen=True)
class Flag(Setting):
    """An on/off switch: on unless set to 0 (false, off, no). Truth-tests read it live."""

    def on(self) -> bool:
        return self.raw().lower() not in _OFF

    def __bool__(self) -> bool:
        return self.on()


@dataclass(frozen=True)
class Size(Setting):
    """A size threshold: unset or empty gives the default, 0 never (a huge value)."""

    def value(self) -> int:
        return threshold(self.name, int(self.default))


def threshold(name: str, default: int) -> int:
    """A size threshold from environment variable `name`: unset or empty gives `default`,
    0 never (a value no size reaches)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r}: expected a whole number (0 turns it off), "
                         f"or leave it unset for the default {default}") from None
    return value if value > 0 else 1 << 62


def read(name: str) -> str:
    """An environment variable tracejit does not own (Numba's, XDG's), stripped."""
    return os.environ.get(name, "").strip()


def is_set(name: str) -> bool:
    return name in os.environ


# --------------------------------------------------------------------------------------
# the table (the README's "Environment switches" lists the same rows)

LOGS = Setting("TRACER_LOGS", "", "comma list of log topics printed through `logging`: "
               "ir, passes, fusion, kernels, recompiles, or all")
CHECK = Setting("TRACER_CHECK", "0", "check mode for every function: 1 checks the first 2 "
                "calls of each trace against eager, N the first N")
CACHE_DIR = Setting("TRACEJIT_CACHE_DIR", "$XDG_CACHE_HOME/tracejit or ~/.cache/tracejit",
                    "the kernel cache directory (private: 0700, the user's own)")
CACHE_MAX_BYTES = Setting("TRACEJIT_CACHE_MAX_BYTES", str(2 << 30),
                          "the kernel cache's bound; least recently used kernels go first")
FAST_CACHE_LOAD = Flag("TRACEJIT_FAST_CACHE_LOAD", "1",
                       "load cached kernels from object files or Numba's cache directly; "
                       "0: through Numba's own loader")
COMPILE_AHEAD = Flag("TRACEJIT_COMPILE_AHEAD", "1",
                     "compile some kernels of a program in a forked child meanwhile")
AUTOTUNE_MATMUL = Flag("TRACEJIT_AUTOTUNE_MATMUL", "1",
                       "time both operand layouts of a matmul when building a program")
GEMM = Flag("TRACEJIT_GEMM", "1",
            "float32 products of compiled programs through tracejit's own kernel where it "
            "is faster (by default an AVX-512 CPU whose numpy OpenBLAS runs AVX2 kernels: "
            "codegen.gemm); stacks: only stacks of matrices (attention's), all: every "
            "product, also on an AVX2 CPU; 0: numpy's BLAS always")
PARALLEL_MIN_SIZE = Size("TRACEJIT_PARALLEL_MIN_SIZE", str(1 << 22),
                         "kernels with at least this many iterations run in parallel "
                         "(0: never)")
STREAM_MIN_BYTES = Size("TRACEJIT_STREAM_MIN_BYTES", str(16 << 20),
                        "a row kernel's output of at least this many bytes is written with "
                        "streaming stores (0: never)")
OUTPUT_POOL_MIN_BYTES = Size("TRACEJIT_OUTPUT_POOL_MIN_BYTES", str(32 << 20),
                             "outputs of at least this many bytes are recycled between calls "
                             "(0: never)")
# Process-wide tricks, each with its off switch
GC_HOLD = Flag("TRACEJIT_GC_HOLD", "1",
               "hold full collections of Python's garbage collector off while a backend "
               "compiles; 0: the collector runs as configured")
PRELOAD_BLAS = Flag("TRACEJIT_PRELOAD_BLAS", "1",
                    "before Numba's set-up, load scipy.linalg.cython_blas alone (with a "
                    "sys.meta_path finder that attaches it to scipy.linalg later); "
                    "0: Numba imports scipy.linalg itself")
KEEP_HEAP = Flag("TRACEJIT_KEEP_HEAP", "1",
                 "glibc: at the first numba compile, set malloc's mmap threshold to 32 MiB "
                 "and its trim threshold to 64 MiB, so arrays freed at the end of a call are "
                 "reused by the next one instead of being returned to the OS and "
                 "page-faulted in again (not when MALLOC_*_ or GLIBC_TUNABLES are set); "
                 "0: glibc's defaults")
THREADING_LAYER = Setting("TRACEJIT_THREADING_LAYER", "workqueue",
                          "the Numba threading layer tracejit picks unless "
                          "NUMBA_THREADING_LAYER is set; 0: leave Numba's own choice")
# Numba's, read to agree with Numba without importing it
NUMBA_VARIABLES = ("NUMBA_THREADING_LAYER", "NUMBA_NUM_THREADS", "NUMBA_DISABLE_JIT",
                   "NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", "NUMBA_ENABLE_AVX")

TABLE = (LOGS, CHECK, CACHE_DIR, CACHE_MAX_BYTES, FAST_CACHE_LOAD, COMPILE_AHEAD,
         AUTOTUNE_MATMUL, GEMM, PARALLEL_MIN_SIZE, STREAM_MIN_BYTES, OUTPUT_POOL_MIN_BYTES, GC_HOLD,
         PRELOAD_BLAS, KEEP_HEAP, THREADING_LAYER)


def threading_layer() -> "str | None":
    """The threading layer tracejit sets in Numba's config, or None: leave it (the user's
    NUMBA_THREADING_LAYER, or TRACEJIT_THREADING_LAYER=0)."""
    if is_set("NUMBA_THREADING_LAYER"):
        return None
    raw = THREADING_LAYER.raw()
    if raw.lower() in _OFF:
        return None
    return raw or THREADING_LAYER.default


def table_markdown() -> str:
    """The table as Markdown rows (the README's "Environment switches")."""
    rows = ["| name | default | effect |", "|---|---|---|"]
    for s in TABLE:
        rows.append(f"| `{s.name}` | {s.default or '(unset)'} | {s.effect} |")
    return "\n".join(rows)


__all__ = ["Setting", "Flag", "Size", "TABLE", "threshold", "read", "is_set",
           "threading_layer", "table_markdown"]
