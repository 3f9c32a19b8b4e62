"""Test session set-up: one kernel cache directory shared by the whole session."""
import os
import tempfile

import pytest

if "TRACEJIT_CACHE_DIR" not in os.environ:
    _dir = os.path.join(tempfile.mkdtemp(prefix="tracejit-test-"), "cache")
    os.environ["TRACEJIT_CACHE_DIR"] = _dir


@pytest.fixture(autouse=True)
def _seed():
    import eager

    eager.manual_seed(0)
    yield
