"""`python -m benchmarks.first_call W6 --breakdown`: the cold first call's stages and its
kernel compiles (the wrappers of benchmarks.cold_breakdown still find what they wrap)."""
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_breakdown_of_a_cold_first_call(tmp_path):
    cache = tmp_path / "cache"   # (empty: a cold call)
    env = dict(os.environ, TRACEJIT_CACHE_DIR=str(cache))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-m", "benchmarks.first_call", "W6", "--breakdown"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    b = doc["breakdown"]
    stages = b["stages"]
    assert stages["call_s"] == doc["first_call_s"]
    assert 0 < stages["backend_s"] < stages["call_s"] and stages["tracing_s"] > 0
    assert stages["passes_s"] > 0 and stages["  emit_s"] > 0
    # every kernel the call compiled is listed once, by the program or a compile-ahead child
    assert len(b["kernels"]) == doc["stats"]["numba_compiles"] >= 1
    for k in b["kernels"]:
        assert k["by"] == "program" or k["by"].startswith("child ")
        assert k["s"] > 0 and k["cpu_s"] > 0 and k["kernel"]
    assert sum(c["kernels"] for c in b["children"]) \
        == sum(k["by"] != "program" for k in b["kernels"])
    assert stages["critical_cpu_s"] >= stages["program_cpu_s"] > 0
    assert "cold first call, by stage" in proc.stderr
