"""Helper for tests/codegen/test_build.py: load a kernel in a fresh process.

Usage: python _build_subprocess.py SOURCE_FILE NAME_HINT N
Loads the source with codegen.build.load_module, calls ``kernel(x)`` with
``x = np.arange(N, dtype=np.float64)`` and prints one JSON object with the
result and codegen.build.compile_stats().  TRACEJIT_CACHE_DIR comes from the
environment.
"""
import json
import sys

import numpy as np

from codegen import build


def main() -> None:
    source_file, name_hint, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(source_file, encoding="utf-8") as f:
        source = f.read()
    mod = build.load_module(source, name_hint)
    out = mod.kernel(np.arange(n, dtype=np.float64))
    print(json.dumps({
        "result": out.tolist(),
        "module": mod.__name__,
        "file": mod.__file__,
        "cache_dir": str(build.cache_dir()),
        "stats": build.compile_stats(),
    }))


if __name__ == "__main__":
    main()
