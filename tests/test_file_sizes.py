"""Source files stay one concern each, under MAX_LINES lines (issue 14 item 5).

KNOWN_LARGE lists the files still over the limit, each with the most lines it may have:
a new file over the limit, or a listed one growing, fails here. Split a file, then lower
or drop its entry (the test also fails when an entry is stale, so the list stays true).
"""
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("eager", "tracer", "codegen", "benchmarks")
MAX_LINES = 700
# file -> its line count when this list was last updated (not yet split)
KNOWN_LARGE = {
    "eager/functions.py": 1067,
    "eager/ops.py": 765,
    "codegen/runtime.py": 871,
    "codegen/vmath.py": 1035,
    "codegen/build.py": 832,
    "codegen/emit.py": 881,
}


def _line_counts() -> dict:
    counts = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            with open(path, encoding="utf-8") as f:
                counts[path.relative_to(ROOT).as_posix()] = sum(1 for _ in f)
    return counts


def test_source_files_stay_under_the_line_limit():
    counts = _line_counts()
    assert counts, f"no source files found under {ROOT}"
    too_long = {name: n for name, n in counts.items()
                if n > KNOWN_LARGE.get(name, MAX_LINES)}
    assert not too_long, (
        f"source files over {MAX_LINES} lines (or grown past their KNOWN_LARGE entry): "
        f"{too_long}; split them by concern (one module per concern) instead")


@pytest.mark.parametrize("name", sorted(KNOWN_LARGE))
def test_known_large_files_are_still_large(name):
    """An entry of a file that has been split (or removed) goes from KNOWN_LARGE."""
    counts = _line_counts()
    assert counts.get(name, 0) > MAX_LINES, (
        f"{name} has {counts.get(name)} lines now: remove it from KNOWN_LARGE")
