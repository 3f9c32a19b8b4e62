"""Every environment switch is read by tracer.settings alone, listed in the README's table,
and read at use (issue 14 items 5 and 6); each process-wide trick has an off switch."""
from __future__ import annotations

import ast
import gc
import os
import pathlib
import subprocess
import sys

import pytest

import tracer
from tracer import backends, settings

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _environment_reads(path: pathlib.Path) -> list:
    """Lines of `path` that read the environment (os.environ, os.getenv)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == "os" and node.attr in ("environ", "getenv", "environb")]


def test_only_the_settings_module_reads_the_environment():
    found = {}
    for package in ("eager", "tracer", "codegen"):
        for path in sorted((ROOT / package).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            lines = _environment_reads(path)
            if lines and name != "tracer/settings.py":
                found[name] = lines
    assert not found, f"read the environment through tracer.settings instead: {found}"


def test_the_readme_table_lists_every_switch():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "## Environment switches" in readme
    section = readme.split("## Environment switches", 1)[1].split("\n## ", 1)[0]
    listed = {line.split("|")[1].strip().strip("`") for line in section.splitlines()
              if line.startswith("| `")}
    assert listed == {s.name for s in settings.TABLE}


def test_flags_are_read_at_each_use(monkeypatch):
    from codegen import ahead, build, matmul_layout

    for module, attr, setting in [(ahead, "ENABLED", settings.COMPILE_AHEAD),
                                  (build, "FAST_CACHE_LOAD", settings.FAST_CACHE_LOAD),
                                  (matmul_layout, "AUTOTUNE_MATMUL", settings.AUTOTUNE_MATMUL)]:
        monkeypatch.delenv(setting.name, raising=False)
        assert getattr(module, attr)
        for off in ("0", "off", " false "):
            monkeypatch.setenv(setting.name, off)
            assert not getattr(module, attr), (setting.name, off)
        monkeypatch.setenv(setting.name, "1")
        assert getattr(module, attr)


def test_gc_hold_switch_turns_the_hold_off(monkeypatch):
    seen = []

    def compile_fn(graph):
        seen.append(gc.get_threshold())
        return backends.get_backend("interpret")(graph)

    backends.register_backend("gc-switch-probe", compile_fn)
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        backends.get_backend("gc-switch-probe")("graph")
        monkeypatch.setenv("TRACEJIT_GC_HOLD", "0")
        backends.get_backend("gc-switch-probe")("graph")
    finally:
        del backends._BACKENDS["gc-switch-probe"]
        gc.set_threshold(*before)
    assert seen == [(700, 10, 1 << 30), (700, 10, 10)]


def _child(code: str, **env) -> list:
    full = dict(os.environ, PYTHONPATH=str(ROOT), **env)
    for k, v in env.items():
        if v is None:
            full.pop(k)
    out = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                         text=True, timeout=120, check=True)
    return out.stdout.split()


BLAS_PROBE = """
import sys
from codegen import numbashim, objload
numbashim._preload_blas()
print("scipy.linalg.cython_blas" in sys.modules, "scipy.linalg" in sys.modules,
      objload._ParentAttributes in sys.meta_path)
"""


def test_blas_preload_switch_turns_the_preload_and_its_finder_off():
    assert _child(BLAS_PROBE) == ["True", "False", "True"]
    assert _child(BLAS_PROBE, TRACEJIT_PRELOAD_BLAS="0") == ["False", "False", "False"]


LAYER_PROBE = """
from codegen import numbashim
numba = numbashim._numba()
print(numba.config.THREADING_LAYER)
"""


def test_threading_layer_switch_leaves_numbas_choice():
    assert _child(LAYER_PROBE, NUMBA_THREADING_LAYER=None) == ["workqueue"]
    assert _child(LAYER_PROBE, NUMBA_THREADING_LAYER=None,
                  TRACEJIT_THREADING_LAYER="0") == ["default"]
    assert _child(LAYER_PROBE, NUMBA_THREADING_LAYER="safe") == ["safe"]


def test_threading_layer_setting(monkeypatch):
    monkeypatch.delenv("NUMBA_THREADING_LAYER", raising=False)
    monkeypatch.delenv("TRACEJIT_THREADING_LAYER", raising=False)
    assert settings.threading_layer() == "workqueue"
    monkeypatch.setenv("TRACEJIT_THREADING_LAYER", "omp")
    assert settings.threading_layer() == "omp"
    monkeypatch.setenv("TRACEJIT_THREADING_LAYER", "0")
    assert settings.threading_layer() is None
    monkeypatch.setenv("TRACEJIT_THREADING_LAYER", "omp")
    monkeypatch.setenv("NUMBA_THREADING_LAYER", "tbb")
    assert settings.threading_layer() is None  # the user's own Numba setting wins


def test_check_and_logs_switches_are_read_through_settings(monkeypatch):
    from tracer import check

    monkeypatch.setenv("TRACER_CHECK", "3")
    try:
        assert check.env_calls(refresh=True) == 3
        monkeypatch.setenv("TRACER_CHECK", "bogus")
        with pytest.raises(ValueError, match="TRACER_CHECK='bogus'"):
            check.env_calls(refresh=True)
    finally:
        monkeypatch.delenv("TRACER_CHECK")
        check.env_calls(refresh=True)
    monkeypatch.setenv("TRACER_LOGS", "ir, Fusion")
    try:
        assert tracer.logs.refresh() == {"ir", "fusion"}
    finally:
        monkeypatch.delenv("TRACER_LOGS")
        tracer.logs.refresh()


def test_a_compiled_call_is_unchanged_with_every_trick_off(tmp_path):
    """The tricks change how fast, never what: a training step with all three off."""
    code = """
import numpy as np, eager, tracer, eager.nn as nn, eager.nn.functional as F
eager.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
opt = eager.optim.Adam(model.parameters(), lr=1e-2)
x, y = eager.randn(5, 4), eager.randint(0, 3, (5,))
@tracer.function
def step(x, y):
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
    return loss
print(" ".join(f"{step(x, y).item():.6f}" for _ in range(3)))
"""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    on = _child(code, TRACEJIT_CACHE_DIR=str(cache))
    off = _child(code, TRACEJIT_CACHE_DIR=str(cache), TRACEJIT_GC_HOLD="0",
                 TRACEJIT_PRELOAD_BLAS="0", TRACEJIT_THREADING_LAYER="0")
    assert on == off and len(on) == 3
