"""The jax.jit peers of W8-W10 (benchmarks/jax_peers.py) match the workloads' float64
references. JAX is optional: skipped where it is not installed (on the benchmark machine,
`PYTHONPATH=/opt/peers python -m pytest tests/test_jax_peers.py`)."""
import pytest

pytest.importorskip("jax")

from benchmarks import jax_peers  # noqa: E402
from benchmarks.workloads import WORKLOADS  # noqa: E402


@pytest.mark.parametrize("key", ["W8", "W9", "W10"])
def test_jax_peer_matches_the_float64_reference(key):
    w = WORKLOADS[key]
    inputs = w.inputs()
    check = w.verify(jax_peers.RUNNERS[key](inputs).collect(), inputs)
    assert check["verified"], check["detail"]
