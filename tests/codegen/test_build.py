import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from codegen import build, kernelfiles

REPO_ROOT = Path(__file__).resolve().parents[2]
HELPER = Path(__file__).resolve().with_name("_build_subprocess.py")

KERNEL_SRC = '''\
import numpy as np
import numba


@numba.njit(cache=True)
def _scale(v):
    return 2.0 * v + 1.0


@numba.njit(cache=True)
def kernel(x):
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = _scale(x[i])
    return out
'''

# Plain-Python module source: exercises the file/module machinery without
# paying for a Numba compilation.
PLAIN_SRC = '''\
def kernel(xs):
    return [3 * v for v in xs]
'''


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(d))
    build.reset_stats()
    yield d
    if d.exists():
        os.chmod(d, 0o700)
        build.clear_cache()


def test_load_and_call_njit_kernel(cache):
    mod = build.load_module(KERNEL_SRC, "ew_affine")
    x = np.arange(5, dtype=np.float64)
    np.testing.assert_allclose(mod.kernel(x), 2.0 * x + 1.0)

    path = Path(mod.__file__)
    assert path.parent == cache
    assert path.name.startswith("ew_affine_") and path.suffix == ".py"
    assert mod.__name__ == "tracejit_kernels." + path.stem
    assert sys.modules[mod.__name__] is mod
    assert path.read_text().startswith("# tracejit-sha256: ")

    stats = build.compile_stats()
    assert stats["modules_written"] == 1
    assert stats["modules_loaded"] == 1
    assert stats["numba_compiles"] >= 1
    assert stats["numba_cache_hits"] == 0
    # Numba wrote its own on-disk cache next to the generated source.
    assert list((cache / "__pycache__").glob("*.nbi"))


def test_same_source_same_module_one_write(cache):
    m1 = build.load_module(PLAIN_SRC, "plain")
    m2 = build.load_module(PLAIN_SRC, "plain")
    assert m1 is m2
    assert m1.kernel([1, 2]) == [3, 6]
    stats = build.compile_stats()
    assert stats["modules_written"] == 1
    assert stats["modules_loaded"] == 1
    assert len(list(cache.glob("*.py"))) == 1

    # A different source gives a different file/module.
    m3 = build.load_module(PLAIN_SRC + "\n# variant\n", "plain")
    assert m3 is not m1 and m3.__file__ != m1.__file__


def test_name_hint_is_sanitised(cache):
    mod = build.load_module(PLAIN_SRC, "1 weird.name/x")
    stem = Path(mod.__file__).stem
    assert mod.__name__ == "tracejit_kernels." + stem
    assert stem.isidentifier()


def test_directory_created_private(tmp_path, monkeypatch):
    d = tmp_path / "a" / "b" / "cache"  # parents do not exist yet
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(d))
    old_umask = os.umask(0o022)
    try:
        assert build.cache_dir() == d
    finally:
        os.umask(old_umask)
    assert d.is_dir()
    assert stat.S_IMODE(d.stat().st_mode) == 0o700


def test_env_read_at_call_time_and_xdg_default(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path / "one"))
    assert build.cache_dir() == tmp_path / "one"
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path / "two"))
    assert build.cache_dir() == tmp_path / "two"
    monkeypatch.delenv("TRACEJIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert build.cache_dir() == tmp_path / "xdg" / "tracejit"
    assert stat.S_IMODE((tmp_path / "xdg" / "tracejit").stat().st_mode) == 0o700


def test_refuses_world_writable_dir(tmp_path, monkeypatch):
    d = tmp_path / "open"
    d.mkdir()
    os.chmod(d, 0o777)
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(d))
    with pytest.raises(PermissionError) as excinfo:
        build.cache_dir()
    assert isinstance(excinfo.value, build.CacheDirPermissionError)
    msg = str(excinfo.value)
    assert str(d) in msg
    assert "0o777" in msg
    assert "chmod 700" in msg and "TRACEJIT_CACHE_DIR" in msg
    # Kernels are made in memory instead, the user told once what is wrong and the fix
    with pytest.warns(RuntimeWarning, match=f"chmod 700 {d}"):
        mod = build.load_module(PLAIN_SRC, "plain")
    assert getattr(mod, build.IN_MEMORY_FLAG, False)
    # Nothing was written into the insecure directory.
    assert list(d.iterdir()) == []


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="needs root to chown the directory")
def test_refuses_dir_owned_by_other_user(tmp_path, monkeypatch):
    d = tmp_path / "other"
    d.mkdir(mode=0o700)
    os.chown(d, 12345, -1)
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(d))
    with pytest.raises(build.CacheDirPermissionError, match="owned by uid 12345"):
        build.cache_dir()


@pytest.mark.parametrize("damage", ["truncate", "corrupt"])
def test_corrupt_file_is_rebuilt(cache, damage):
    mod = build.load_module(KERNEL_SRC, "ew_affine")
    path = Path(mod.__file__)
    good = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(good[: len(good) // 2])
    else:
        path.write_bytes(good.replace(b"2.0 * v", b"7.0 * v"))

    # Forget the in-memory module (but keep the damaged file) so the next
    # load has to go to disk, as a new process would.
    build._MODULES.clear()
    before = build.compile_stats()
    mod2 = build.load_module(KERNEL_SRC, "ew_affine")
    after = build.compile_stats()

    assert mod2 is not mod and mod2.__file__ == mod.__file__
    assert path.read_bytes() == good
    assert after["rebuilds"] == before["rebuilds"] + 1
    assert after["modules_written"] == before["modules_written"] + 1
    x = np.arange(4, dtype=np.float64)
    np.testing.assert_allclose(mod2.kernel(x), 2.0 * x + 1.0)


def test_a_cache_directory_removed_mid_process_is_made_again(cache, caplog):
    """A long-lived process whose cache directory goes (a temp cleaner, an `rm -rf`): the
    kernel being written then is made in memory, said once; the next is cached again in
    the directory made anew, private."""
    build.load_module(PLAIN_SRC, "plain")
    shutil.rmtree(cache)
    gone = build.load_module(PLAIN_SRC + "\n# 1\n", "plain")
    assert gone.kernel([1]) == [3] and "(in memory)" in gone.__file__
    assert caplog.text.count("cannot write to the kernel cache") == 1
    again = build.load_module(PLAIN_SRC + "\n# 2\n", "plain")
    assert again.kernel([2]) == [6] and Path(again.__file__).parent == cache
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(cache / "__pycache__").st_mode) == 0o700


def test_second_process_hits_numba_cache(cache, tmp_path):
    mod = build.load_module(KERNEL_SRC, "ew_affine")
    x = np.arange(6, dtype=np.float64)
    np.testing.assert_allclose(mod.kernel(x), 2.0 * x + 1.0)
    assert build.compile_stats()["numba_compiles"] >= 1

    src_file = tmp_path / "kernel_src.py.txt"
    src_file.write_text(KERNEL_SRC, encoding="utf-8")
    env = dict(os.environ)
    env["TRACEJIT_CACHE_DIR"] = str(cache)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.pop("NUMBA_CACHE_DIR", None)
    env.pop("NUMBA_DISABLE_JIT", None)
    proc = subprocess.run(
        [sys.executable, str(HELPER), str(src_file), "ew_affine", "6"],
        env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])

    assert report["module"] == mod.__name__
    assert report["file"] == mod.__file__
    assert report["result"] == (2.0 * x + 1.0).tolist()
    stats = report["stats"]
    assert stats["numba_compiles"] == 0, stats
    assert stats["numba_cache_hits"] > 0, stats
    assert stats["modules_written"] == 0 and stats["rebuilds"] == 0, stats
    assert stats["modules_loaded"] == 1, stats


def test_ensure_compiled_reports_source(cache):
    mod = build.load_module(KERNEL_SRC, "ew_affine")
    x = np.arange(3, dtype=np.float64)
    assert build.ensure_compiled(mod.kernel, (x,)) == "compiled"
    assert build.ensure_compiled(mod.kernel, (x,)) == "memory"

    # A fresh module object (new dispatchers) for the same file reads
    # Numba's disk cache instead of compiling.
    build._MODULES.clear()
    mod2 = build.load_module(KERNEL_SRC, "ew_affine")
    before = build.compile_stats()
    assert build.ensure_compiled(mod2.kernel, (x,)) == "cache"
    after = build.compile_stats()
    assert after["numba_compiles"] == before["numba_compiles"]
    assert after["numba_cache_hits"] == before["numba_cache_hits"] + 1
    np.testing.assert_allclose(mod2.kernel(x), 2.0 * x + 1.0)


def test_clear_cache_empties_directory(cache):
    mod = build.load_module(KERNEL_SRC, "ew_affine")
    mod.kernel(np.arange(3, dtype=np.float64))
    assert any(cache.iterdir())
    assert (cache / "__pycache__").is_dir()

    build.clear_cache()
    assert cache.is_dir()
    assert list(cache.iterdir()) == []
    assert mod.__name__ not in sys.modules

    # Loading again writes a fresh file and gives a new module object.
    before = build.compile_stats()["modules_written"]
    mod2 = build.load_module(KERNEL_SRC, "ew_affine")
    assert mod2 is not mod
    assert build.compile_stats()["modules_written"] == before + 1


def test_size_thresholds_from_the_environment(monkeypatch):
    from tracer.settings import threshold as _env_threshold

    monkeypatch.delenv("TRACEJIT_TEST_THRESHOLD", raising=False)
    assert _env_threshold("TRACEJIT_TEST_THRESHOLD", 64) == 64
    for raw, want in [("", 64), (" ", 64), ("100", 100), ("0", 1 << 62)]:
        monkeypatch.setenv("TRACEJIT_TEST_THRESHOLD", raw)
        assert _env_threshold("TRACEJIT_TEST_THRESHOLD", 64) == want, raw
    monkeypatch.setenv("TRACEJIT_TEST_THRESHOLD", "4M")
    with pytest.raises(ValueError, match="TRACEJIT_TEST_THRESHOLD='4M': expected a whole number"):
        _env_threshold("TRACEJIT_TEST_THRESHOLD", 64)


VMATH_FILES = sorted(p.name for p in Path(build.__file__).with_name("vmath").glob("*.py"))


def test_vmath_files_are_the_package():
    import codegen.vmath
    assert {"__init__.py", "intrinsics.py", "explog.py"} <= set(VMATH_FILES)
    assert Path(codegen.vmath.__file__).parent == Path(build.__file__).with_name("vmath")


@pytest.mark.parametrize("edited", VMATH_FILES)
def test_a_vmath_change_gives_kernels_new_files(cache, monkeypatch, edited):
    """Kernels call codegen.vmath, whose source Numba's cache does not check: the cache key
    includes the digest of every one of its files, or a kernel cached before a vmath change
    would be loaded after it (stale results)."""
    before = build.load_module(PLAIN_SRC, "uses_vmath")
    vmath = Path(build.__file__).with_name("vmath") / edited
    real_digest = kernelfiles._file_digest

    def digest_after_an_edit(path):
        return "edited" if Path(path) == vmath else real_digest(path)

    kernelfiles._version_salt.cache_clear()
    monkeypatch.setattr(kernelfiles, "_file_digest", digest_after_an_edit)
    try:
        after = build.load_module(PLAIN_SRC, "uses_vmath")
    finally:
        monkeypatch.setattr(kernelfiles, "_file_digest", real_digest)
        kernelfiles._version_salt.cache_clear()
    assert Path(after.__file__) != Path(before.__file__)
    assert after.kernel([1]) == [3]
    again = build.load_module(PLAIN_SRC, "uses_vmath")
    assert Path(again.__file__) == Path(before.__file__)
