"""Test session set-up: one kernel cache directory shared by the whole session, and a
kernel falling back to numpy (codegen.FallbackWarning) is an error unless the test is
marked `expect_fallback`: a fallback gives eager's results, so nothing else would notice
a kernel the code generator can no longer build."""
import os
import tempfile

import pytest

if "TRACEJIT_CACHE_DIR" not in os.environ:
    _dir = os.path.join(tempfile.mkdtemp(prefix="tracejit-test-"), "cache")
    os.environ["TRACEJIT_CACHE_DIR"] = _dir


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "expect_fallback: kernels of this test may fail to build and run through "
        "numpy (codegen.FallbackWarning is then a warning, not an error)")
    config.addinivalue_line("filterwarnings", "error::codegen.runtime.FallbackWarning")


def pytest_collection_modifyitems(items):
    for item in items:
        if item.get_closest_marker("expect_fallback") is not None:
            item.add_marker(pytest.mark.filterwarnings(
                "default::codegen.runtime.FallbackWarning"))


@pytest.fixture(autouse=True)
def _seed():
    import eager

    eager.manual_seed(0)
    yield
