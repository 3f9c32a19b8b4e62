"""The README's Python blocks run, in order, in one namespace, so the tour cannot rot.

A block right after a `<!-- not-tested -->` line is skipped (meant for shell commands).
The blocks run in a fresh subprocess (the tour sets TRACER_LOGS), compiled with the
README's name and line numbers so a failure points at the README line.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"

FENCE = re.compile(r"^```(\w*)\s*$")


def python_blocks(text: str) -> list:
    """[(first line number, source)] of the ```python blocks not marked not-tested."""
    blocks = []
    lines = text.splitlines()
    i = 0
    previous = ""
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            if lines[i].strip():
                previous = lines[i].strip()
            i += 1
            continue
        lang = m.group(1)
        start = i + 1
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            i += 1
        if lang == "python" and previous != "<!-- not-tested -->":
            blocks.append((start + 1, "\n".join(lines[start:i]) + "\n"))
        previous = ""
        i += 1
    return blocks


RUNNER = r"""
import sys
import warnings
# a kernel falling back to numpy fails the tour too (tests/conftest.py), matched by its
# message so that codegen is not imported before the tour imports it
warnings.filterwarnings("error", message="codegen: could not (build|generate) kernel")
blocks = eval(sys.stdin.read())
namespace = {"__name__": "__readme__"}
for line, source in blocks:
    # pad so that line numbers in tracebacks and in the IR match README.md
    code = compile("\n" * (line - 1) + source, "README.md", "exec")
    print(f"--- README.md block at line {line}", flush=True)
    exec(code, namespace)
"""


def test_readme_has_the_two_commands():
    text = README.read_text()
    assert 'pip install -e ".[test]" && python -m benchmarks --quick' in text
    assert "python -m pytest" in text


def test_block_extraction():
    text = "\n".join(["<!-- not-tested -->", "```python", "skipped()", "```", "",
                      "```python", "x = 1", "```", "```bash", "ls", "```"])
    assert python_blocks(text) == [(7, "x = 1\n")]


def test_readme_python_blocks_run():
    blocks = python_blocks(README.read_text())
    assert len(blocks) >= 5
    env = dict(os.environ)   # keeps the session's TRACEJIT_CACHE_DIR (see conftest.py)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.pop("TRACER_LOGS", None)
    proc = subprocess.run([sys.executable, "-c", RUNNER], input=repr(blocks), cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    # what the tour says it prints
    assert "fused kernels:" in proc.stdout and "def kernel(" in proc.stdout
    assert "tracing again (trace #2): arg x: shape (1024,) -> (2048,)" in proc.stderr
    assert "Instead, use tracer.cond" in proc.stdout
    # the CNN step's summary line, as the README shows it (update the README if it changed)
    shown = [ln for ln in README.read_text().splitlines() if ln.startswith("cnn_step: ")]
    printed = [ln for ln in proc.stdout.splitlines() if ln.startswith("cnn_step: ")]
    assert len(shown) == 1 and printed == shown, (shown, printed)


DISABLE_JIT_SCRIPT = r"""
import sys
import numpy as np
import eager, tracer
import eager.nn.functional as F

@tracer.function
def gelu(x):
    return F.gelu(x, approximate="tanh")

x = eager.randn(64)
k = gelu.get_concrete_function(x).kernels[0]
assert not hasattr(k.fn, "py_func"), "NUMBA_DISABLE_JIT=1 should leave a plain function"
path = k.file
assert path == sys.modules[k.module].__file__
executed = set()

def trace(frame, event, arg):
    # what pdb relies on: the generated file's lines run as Python
    if frame.f_code.co_filename == path:
        executed.add(frame.f_lineno)
    return trace

sys.settrace(trace)
y = gelu(x)
sys.settrace(None)
assert executed, "no line of the generated kernel ran as Python"
assert np.allclose(y.numpy(), F.gelu(x, approximate="tanh").numpy(), rtol=1e-5, atol=1e-6)
print("ok", len(executed))
"""


def test_numba_disable_jit_runs_kernels_as_python(tmp_path):
    """The README's debugging recipe: NUMBA_DISABLE_JIT=1 runs generated kernels as Python."""
    env = dict(os.environ, NUMBA_DISABLE_JIT="1", TRACEJIT_CACHE_DIR=str(tmp_path / "cache"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", DISABLE_JIT_SCRIPT], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert proc.stdout.startswith("ok")
