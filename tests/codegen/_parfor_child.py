"""Helper for tests/codegen/test_parfor_names.py: compile or load parallel kernels of one
function at several sizes in a fresh process and print how many results differ from eager.

    python _parfor_child.py compile N   every IR object at one address (Numba's hash of a
                                        parallel loop is its address: as when a process
                                        reuses an address, or two processes share a layout),
                                        then one kernel of size N into the cache
    python _parfor_child.py load N M .. those kernels, loaded from the cache into one process
"""
import sys

import numpy as np

import eager
import tracer
from codegen import emit

emit.PARALLEL_MIN_SIZE = 1  # (every size splits its loop across threads)


def wrong(n: int) -> int:
    rng = np.random.default_rng(n)
    x = eager.from_numpy(rng.standard_normal(n).astype(np.float32))
    b = eager.from_numpy(rng.standard_normal((2, n)).astype(np.float32))
    g = tracer.function(lambda b, x: b * x + 1.0)
    with eager.no_grad():
        got = g(b, x).numpy()
        assert "prange(" in g.get_concrete_function(b, x).kernels[0].source
        return int(not np.allclose(got, (b * x + 1.0).numpy(), rtol=1e-6, atol=1e-6))


if sys.argv[1] == "compile":
    import numba.core.ir

    numba.core.ir.id = lambda obj: 0x5EED
    print(wrong(int(sys.argv[2])))
else:
    print(sum(wrong(int(n)) for n in sys.argv[2:]))
