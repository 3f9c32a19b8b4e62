"""numpy installed outside site-packages (found through PYTHONPATH, as `pip install --target`
leaves it) is library code for the trace's discovery of user code: its helpers' attribute
reads are not the user's (a conv's im2col read `<DummyArray self>.base` and warned)."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import warnings
import numpy as np
import eager, tracer
import eager.nn.functional as F
from tracer.discover import is_user_file

assert np.__file__.startswith(PREFIX), np.__file__          # numpy came through PYTHONPATH
assert not is_user_file(np.lib.stride_tricks.__file__)

@tracer.function(backend="interpret")
def conv(x, w):
    return F.conv2d(x, w).sum()

x, w = eager.randn(2, 1, 6, 6), eager.randn(3, 1, 3, 3)
with warnings.catch_warnings():
    warnings.simplefilter("error")
    out = conv(x, w)
assert abs(out.item() - F.conv2d(x, w).sum().item()) < 1e-3
print("ok")
"""


def test_numpy_on_pythonpath_is_library_code(tmp_path):
    (tmp_path / "numpy").symlink_to(os.path.dirname(np.__file__))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(tmp_path)])
    script = f"PREFIX = {str(tmp_path)!r}\n" + SCRIPT
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert proc.stdout.strip() == "ok"
