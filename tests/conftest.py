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


# The files that take longest (`--durations` of a full run, most first). They run first:
# `--dist loadfile` hands whole files to the two workers in collection order (pyproject's
# addopts turn off xdist's reordering by test count, which put these few-test files last),
# so the files left for the end are short ones and the workers finish close together. A
# file not listed keeps its place after these.
SLOW_FILES = [
    "tests/codegen/test_numba_backend.py",
    "tests/eager/test_ops.py",
    "tests/tracer/test_conv_traced.py",
    "tests/tracer/test_fuzz.py",
    "tests/tracer/test_activations_traced.py",
    "tests/tracer/test_symbolic.py",
    "tests/codegen/test_process_safety.py",
    "tests/tracer/test_pytorch_program.py",
    "tests/programs/test_program_dcgan.py",
    "tests/tracer/test_attention_traced.py",
    "tests/programs/test_program_transformer.py",
    "tests/codegen/test_cache_process.py",
    "tests/codegen/test_cache_safety.py",
    "tests/programs/test_program_seq2seq.py",
    "tests/codegen/test_symbolic_kernels.py",
    "tests/programs/test_program_resnet.py",
    "tests/tracer/test_norm_traced.py",
    "tests/codegen/test_streaming.py",
    "tests/tracer/test_rnn_traced.py",
    "tests/programs/test_program_vae.py",
    "tests/eager/test_data.py",
    "tests/test_readme.py",
    # (mid-sized files that sorted late: a long one last left the other worker idle)
    "tests/tracer/test_runtime_errors.py",
    "tests/tracer/test_shaping_traced.py",
    "tests/test_benchmarks_smoke.py",
    "tests/test_headtohead.py",
]


def pytest_collection_modifyitems(items):
    for item in items:
        if item.get_closest_marker("expect_fallback") is not None:
            item.add_marker(pytest.mark.filterwarnings(
                "default::codegen.runtime.FallbackWarning"))
    rank = {path: i for i, path in enumerate(SLOW_FILES)}
    # (a stable sort: within a file, and among the files not listed, the order stays)
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


@pytest.fixture(autouse=True)
def _seed():
    import eager

    eager.manual_seed(0)
    yield
