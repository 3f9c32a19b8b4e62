"""Opt-in diagnostics, switched by the environment variable `TRACER_LOGS`.

`TRACER_LOGS` is a comma list of topics (`ir`, `passes`, `fusion`, `kernels`,
`recompiles`, or `all`).  Each topic logs at INFO through the `logging` logger
`tracer.<topic>`, so the usual logging configuration applies; when nothing is
configured a stderr handler is attached to the `tracer` logger, so that

    TRACER_LOGS=passes python script.py

prints without `logging.basicConfig()`.

    >>> from tracer import logs
    >>> if logs.enabled("passes"):
    ...     logs.log("passes", lambda: f"dce removed {n} equations")
"""
from __future__ import annotations

import logging
import sys
from typing import Callable

from . import settings

ENV_VAR = settings.LOGS.name
TOPICS = ("ir", "passes", "fusion", "kernels", "recompiles")

_topics: frozenset | None = None  # parsed TRACER_LOGS; None until first read
_handler_checked = False


def refresh() -> frozenset:
    """Re-read `TRACER_LOGS` (it is read once and cached); returns the enabled topics."""
    global _topics
    raw = settings.LOGS.raw()
    _topics = frozenset(t.strip().lower() for t in raw.split(",") if t.strip())
    return _topics


def enabled(topic: str) -> bool:
    """Whether `topic` is listed in `TRACER_LOGS` (or `all` is)."""
    topics = _topics if _topics is not None else refresh()
    return topic in topics or "all" in topics


def logger(topic: str) -> logging.Logger:
    return logging.getLogger(f"tracer.{topic}")


def log(topic: str, msg: "str | Callable[[], str]") -> None:
    """Emit `msg` at INFO on `tracer.<topic>` if the topic is enabled.

    `msg` may be a zero-argument callable, so costly text (an IR printout) is
    only built when someone reads it.
    """
    if not enabled(topic):
        return
    _ensure_handler()
    if callable(msg):
        msg = msg()
    logger(topic).info("%s", msg)


def _ensure_handler() -> None:
    # Checked once: if the application configured logging (or pytest's capture is
    # active) we leave it alone; otherwise stderr, so the env var alone is enough.
    global _handler_checked
    if _handler_checked:
        return
    _handler_checked = True
    root = logging.getLogger("tracer")
    if root.level == logging.NOTSET:
        # The user asked for these messages by setting TRACER_LOGS; don't let the
        # root logger's default WARNING level swallow them.
        root.setLevel(logging.INFO)
    if not root.hasHandlers():
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
        root.addHandler(handler)


__all__ = ["ENV_VAR", "TOPICS", "enabled", "log", "logger", "refresh"]
