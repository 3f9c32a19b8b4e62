"""The kernel cache and the compile child under the failure modes of issue 15, each in
fresh processes with a cache directory of their own (_safety_child.py):

* private by construction: 0700 directories under umask 000; a planted pickle in a
  group-writable ``__pycache__``, or one not owned by the user, is never unpickled; a
  symlinked ``.tjo`` is never loaded;
* loading never crashes: object files mutated many ways (their own sha256 line recomputed)
  all end in a correct result and exit status 0 (TRACEJIT_MUTATIONS=1000 for the full run);
  the ELF checks refuse, never crash on, any of 1000 mutated objects;
* self-healing: corrupt Numba index/data files are replaced at once, with one log line;
  a read-only or full cache compiles in memory (no numpy fallback);
* bounded: LRU pruning at TRACEJIT_CACHE_MAX_BYTES, stale temp files removed,
  ``python -m codegen.cache``;
* the compile-ahead child runs no user signal handler, atexit handler or at-fork hook, and
  dies with its parent; Ctrl-C raises KeyboardInterrupt once, in the program.
"""
from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from codegen import cache as kcache
from codegen import elfcheck, objload

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CHILD = HERE / "_safety_child.py"
MUTATIONS = int(os.environ.get("TRACEJIT_MUTATIONS", "40"))


def env_for(cache: Path, **extra) -> dict:
    env = dict(os.environ)
    env.update(extra)
    env["TRACEJIT_CACHE_DIR"] = str(cache)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    env.pop("TRACER_LOGS", None)
    return env


def run(cache: Path, *args, umask=None, code=None, **extra):
    """(the child's JSON report, its stderr)."""
    argv = [sys.executable, "-c", code] if code else [sys.executable, str(CHILD), *args]
    proc = subprocess.run(argv, env=env_for(cache, **extra), cwd=str(ROOT),
                          capture_output=True, text=True, timeout=300,
                          preexec_fn=(lambda: os.umask(umask)) if umask is not None else None)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


@pytest.fixture(scope="module")
def _first_run(tmp_path_factory) -> tuple:
    """One first (cold) process of the plain child, shared: (its cache, its report)."""
    template = tmp_path_factory.mktemp("first") / "kernels"
    return template, run(template)[0]


def first_run(template_and_report: tuple, cache: Path) -> dict:
    """`cache` made as the plain child's first process left its own (a copy: bytes, modes,
    times), and that process's report: the tests that damage what a first process wrote
    start from the same files without each paying that cold process."""
    template, report = template_and_report
    shutil.copytree(template, cache, copy_function=shutil.copy2)
    return report


def objects(cache: Path) -> list:
    return sorted(p for p in cache.glob("*.tjo") if not p.name.startswith("nrt-"))


def numba_files(cache: Path, suffix: str) -> list:
    return sorted((cache / "__pycache__").glob(f"*{suffix}"))


class Planted:
    """A pickle that, if anyone unpickles it, leaves a file behind."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def plant(path: Path, marker: Path) -> None:
    with open(path, "wb") as f:  # as Numba's index: its version, then the payload
        pickle.dump(Planted(marker), f)
        f.write(pickle.dumps(Planted(marker)))


# --------------------------------------------------------------------------
# private by construction
# --------------------------------------------------------------------------

def test_directories_are_private_under_umask_000(tmp_path):
    cache = tmp_path / "home" / "kernels"
    report, _ = run(cache, umask=0)
    assert report["ok"] and not report["fallbacks"] and not report["warnings"], report
    for d in (cache, cache / "__pycache__"):
        st = os.lstat(d)
        assert oct(st.st_mode & 0o777) == oct(0o700), d
        assert st.st_uid == os.geteuid()
    assert numba_files(cache, ".nbi")  # Numba's files went into the private __pycache__


def test_planted_pickle_in_group_writable_pycache_is_not_loaded(tmp_path, _first_run):
    cache = tmp_path / "kernels"
    first = first_run(_first_run, cache)
    for p in objects(cache):  # (so that Numba's index would be read)
        p.unlink()
    os.chmod(cache / "__pycache__", 0o777)
    marker = tmp_path / "planted-pickle-ran"
    for index in numba_files(cache, ".nbi"):
        plant(index, marker)
    report, _ = run(cache)
    assert report["ok"] and not report["fallbacks"], report
    assert not marker.exists()
    (warning,) = report["warnings"]
    assert warning.startswith("CacheWarning") and "__pycache__" in warning, warning
    assert f"rm -rf {cache / '__pycache__'}" in warning and "in memory" in warning
    assert report["stats"]["numba_compiles"] == first["stats"]["numba_compiles"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
def test_numba_file_not_owned_by_the_user_is_not_loaded(tmp_path, _first_run):
    cache = tmp_path / "kernels"
    first_run(_first_run, cache)
    for p in objects(cache):
        p.unlink()
    marker = tmp_path / "planted-pickle-ran"
    (index,) = numba_files(cache, ".nbi")
    plant(index, marker)
    os.chown(index, 65534, 65534)
    report, stderr = run(cache)
    assert report["ok"] and not report["fallbacks"] and not report["warnings"], report
    assert not marker.exists()
    assert "not a regular file owned by you" in stderr
    again, _ = run(cache)  # healed: loads from the cache again
    assert again["stats"]["numba_compiles"] == 0 and again["ok"]


def test_symlinked_object_file_is_not_loaded(tmp_path, _first_run):
    cache = tmp_path / "kernels"
    first_run(_first_run, cache)
    (obj,) = objects(cache)
    outside = tmp_path / "world-writable.tjo"
    shutil.copy(obj, outside)  # the same valid bytes, digest and all
    os.chmod(outside, 0o666)
    obj.unlink()
    obj.symlink_to(outside)
    report, _ = run(cache)
    assert report["ok"] and not report["fallbacks"] and not report["warnings"], report
    assert report["stats"]["objects_loaded"] == 0 and report["stats"]["rebuilds"] == 1
    assert not obj.is_symlink()  # replaced by a file of the cache's own
    assert run(cache)[0]["stats"]["objects_loaded"] == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
def test_module_and_object_files_not_owned_by_the_user_are_not_used(tmp_path, _first_run):
    cache = tmp_path / "kernels"
    first_run(_first_run, cache)
    (obj,) = objects(cache)
    source = obj.with_suffix(".py")  # (named for what the kernel computes)
    for p in (obj, obj.with_suffix(".sum"), source):
        os.chown(p, 65534, 65534)
    report, _ = run(cache)
    assert report["ok"] and not report["fallbacks"] and not report["warnings"], report
    assert report["stats"]["objects_loaded"] == 0 and report["stats"]["rebuilds"] == 2
    for p in (obj, source):  # replaced by the user's own files
        assert p.stat().st_uid == os.geteuid()


def test_symlinked_or_foreign_directories_are_refused(tmp_path, monkeypatch):
    """In-process: the checks of the directory and its __pycache__ (each process's first
    use), and the message naming the fix."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(elsewhere)
    with pytest.raises(kcache.CacheDirPermissionError, match="it is a symlink"):
        kcache.check(link)
    cache = tmp_path / "kernels"
    cache.mkdir(mode=0o700)
    (cache / "__pycache__").symlink_to(elsewhere)
    with pytest.raises(kcache.CacheDirPermissionError, match="__pycache__.*symlink"):
        kcache.check(cache)
    readable = tmp_path / "readable"
    readable.mkdir()
    os.chmod(readable, 0o755)  # (the README always said 0700: 0755 no longer passes)
    with pytest.raises(kcache.CacheDirPermissionError, match="readable by group or others"):
        kcache.check(readable)
    fresh = tmp_path / "fresh"
    old = os.umask(0)
    try:
        kcache.check(fresh)
    finally:
        os.umask(old)
    assert [oct(os.stat(d).st_mode & 0o777) for d in (fresh, fresh / "__pycache__")] == \
        [oct(0o700)] * 2


def test_a_directory_others_could_replace_is_refused(tmp_path, monkeypatch):
    """The directory is checked once per process, then used by name: under a parent others
    may write to (no sticky bit), or that another user owns, it could be swapped for one
    of theirs after the check, whose Numba pickles this process would then load. Such a
    place was used as any other."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(kcache.CacheDirPermissionError, match=r"shared' is writable by "
                       r"others without the sticky bit.*replace the directory"):
        kcache.check(shared / "kernels")
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(shared / "kernels"))
    kcache.forget_checks()
    with pytest.warns(kcache.CacheWarning, match="sticky bit"):
        assert kcache.usable_dir() is None  # (kernels are compiled in memory)
    kcache.forget_checks()
    os.chmod(shared, 0o1777)  # as /tmp: entries stay their owners'
    kcache.check(shared / "kernels")
    if os.geteuid() == 0:  # (root can make a parent another user's)
        os.chmod(shared, 0o755)
        os.chown(shared, 12345, -1)
        with pytest.raises(kcache.CacheDirPermissionError, match="owned by uid 12345"):
            kcache.check(shared / "kernels")


# --------------------------------------------------------------------------
# loading never crashes
# --------------------------------------------------------------------------

def test_mutated_object_files_never_crash_and_give_correct_results(tmp_path, _first_run):
    """MUTATIONS (40 here; TRACEJIT_MUTATIONS=1000 for the full run, documented in the
    README) damaged copies of a kernel's object file, each with its sha256 line
    recomputed, in one process: each is refused before LLVM sees it and the kernel comes
    from Numba's cache; the results are right and the process exits with status 0."""
    cache = tmp_path / "kernels"
    first_run(_first_run, cache)
    report, _ = run(cache, "mutate", str(MUTATIONS), "7")
    assert report["ok"] and report["objects"] == 1, report
    assert report["mutated_objects_loaded"] == 0
    assert report["stats"]["rebuilds"] == MUTATIONS


def test_elf_checks_refuse_and_never_crash_on_mutated_objects(tmp_path):
    """The ELF checks alone (as if the digest had been forged too), 1000 mutations: each
    returns the symbols or raises ObjectFileError, nothing else."""
    cache = tmp_path / "kernels"
    run(cache)
    (path,) = objects(cache)
    _, obj = objload._unpack(path.read_bytes())
    defined, undefined = elfcheck.check(obj)
    assert defined and "kernel" in " ".join(defined), defined
    rng = np.random.default_rng(0)
    refused = 0
    for _ in range(1000):
        data = bytearray(obj)
        kind = rng.integers(3)
        if kind == 0:
            for _ in range(rng.integers(1, 9)):
                data[rng.integers(len(data))] = rng.integers(256)
        elif kind == 1:
            del data[rng.integers(len(data)):]
        else:
            data += bytes(rng.integers(0, 256, rng.integers(1, 64), dtype=np.uint8))
        try:
            elfcheck.check(bytes(data))
        except elfcheck.ObjectFileError:
            refused += 1
    assert refused > 300  # (bytes of machine code changed still parse: the digest refuses)


def test_objects_the_elf_checks_pass_never_abort_llvm(tmp_path):
    """Behind the digest, the ELF checks alone: mutated objects they pass are loaded by
    LLVM in a subprocess (fresh engines, code never run), and none aborts it (before the
    checks covered string-table ends, section types and flags, symbol kinds and relocation
    kinds: "LLVM ERROR: ... non-null terminated", "allocation of TLS not implemented",
    "Unresolved symbol type!")."""
    cache = tmp_path / "kernels"
    report, _ = run(cache, "llvm-load", str(max(MUTATIONS * 4, 160)), "11")
    assert report["ok"] and report["passed_checks"] > 20, report


def test_malformed_symbol_name_offset_is_refused_not_fatal(tmp_path):
    """The issue's SIGABRT ("st_name past the end of the string table"), checked first."""
    cache = tmp_path / "kernels"
    run(cache)
    (path,) = objects(cache)
    _, obj = objload._unpack(path.read_bytes())
    import struct

    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shnum, = struct.unpack_from("<H", obj, 0x3C)
    for i in range(shnum):
        kind, off = struct.unpack_from("<I", obj, shoff + i * 64 + 4)[0], \
            struct.unpack_from("<Q", obj, shoff + i * 64 + 24)[0]
        if kind == 2:
            bad = bytearray(obj)
            struct.pack_into("<I", bad, off + 24, 0x7FFFFFFF)  # symbol 1's st_name
            with pytest.raises(elfcheck.ObjectFileError, match="past its string table"):
                elfcheck.check(bytes(bad))
            return
    pytest.fail("no symbol table")


# --------------------------------------------------------------------------
# self-healing
# --------------------------------------------------------------------------

def test_corrupt_numba_files_heal_across_processes(tmp_path, _first_run):
    cache = tmp_path / "kernels"
    first_run(_first_run, cache)
    for p in objects(cache):
        p.unlink()
    for p in numba_files(cache, ".nbi"):
        p.write_bytes(b"\x80\x04not a pickle at all")
    report, stderr = run(cache)
    assert report["ok"] and not report["fallbacks"] and not report["warnings"], report
    assert stderr.count("deleted corrupt Numba cache files") == 1, stderr
    for p in objects(cache):
        p.unlink()
    for p in numba_files(cache, ".nbc"):
        p.write_bytes(p.read_bytes()[:100])
    report, stderr = run(cache)
    assert report["ok"] and not report["fallbacks"] and not report["warnings"], report
    assert stderr.count("deleted corrupt Numba cache files") == 1, stderr
    later, stderr = run(cache)  # healed: no warning, no log line, nothing compiled
    assert later["ok"] and not later["warnings"] and not stderr.strip(), stderr
    assert later["stats"]["numba_compiles"] == 0


def _mount_tmpfs(where: Path, size: str) -> bool:
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    where.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=700", "tmpfs",
                           str(where)], capture_output=True)
    return proc.returncode == 0


@pytest.fixture
def tmpfs(tmp_path):
    where = tmp_path / "mnt"
    if not _mount_tmpfs(where, "32k"):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield where
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_full_disk_compiles_in_memory_and_the_next_process_caches(tmpfs):
    """A 32 KiB file system: the source fits, Numba's data file does not. The kernels
    compile in memory (no numpy fallback, no crash); once there is room, the next process
    caches normally."""
    cache = tmpfs / "kernels"
    report, stderr = run(cache)
    assert report["ok"] and not report["fallbacks"], report
    assert stderr.count("cannot write to the kernel cache") == 1, stderr
    again, _ = run(cache)  # still full: still right
    assert again["ok"] and not again["fallbacks"], again
    subprocess.run(["mount", "-o", "remount,size=16m", str(tmpfs)], check=True)
    room, _ = run(cache)
    assert room["ok"] and not room["fallbacks"] and not room["warnings"], room
    warm, _ = run(cache)
    assert warm["stats"]["numba_compiles"] == 0 and warm["stats"]["objects_loaded"] == 1


def test_read_only_cache_compiles_in_memory_and_loads_what_it_has(tmpfs):
    subprocess.run(["mount", "-o", "remount,size=16m", str(tmpfs)], check=True)
    cache = tmpfs / "kernels"
    run(cache)
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    warm, _ = run(cache)  # what is there still loads
    assert warm["ok"] and warm["stats"]["objects_loaded"] == 1 and not warm["warnings"]
    # a new shape (1 row: other code; 5 rows would be 4 rows' kernel, taking its row count
    # as an argument): compiled in memory, not through numpy
    cold, stderr = run(cache, "1")
    assert cold["ok"] and not cold["fallbacks"], cold
    assert cold["stats"]["numba_compiles"] == 1
    assert "cannot write to the kernel cache" in stderr


FULL_AT_OBJECT_FILES = """
import errno, os, sys
sys.argv[1:] = ["4"]
sys.path.insert(0, HERE)
from codegen import kernelfiles, numbashim
real_write, real_fdopen = numbashim._atomic_write, os.fdopen


class Filling:
    # a file on a disk that fills up: half of what is written gets there, then ENOSPC
    def __init__(self, f):
        self.f = f

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()

    def write(self, data):
        self.f.write(data[:len(data) // 2])
        self.f.flush()
        raise OSError(errno.ENOSPC, "No space left on device")


def write(path, data):  # (object files and their digests: codegen.objload)
    if path.suffix != ".tjo":
        return real_write(path, data)
    kernelfiles.os.fdopen = lambda fd, mode: Filling(real_fdopen(fd, mode))
    try:
        return real_write(path, data)
    finally:
        kernelfiles.os.fdopen = real_fdopen


numbashim._atomic_write = write
import _safety_child
_safety_child.main()
""".replace("HERE", repr(str(HERE)))


def test_a_disk_full_at_the_object_file_compiles_in_memory_and_leaves_no_half_file(tmp_path):
    """ENOSPC part-way through writing a kernel's object file (the module and Numba's
    files were written): the kernel runs (compiled, no numpy fallback), the user is told
    once, and no half object file is left for a later process to read: the next one
    compiles or loads from Numba's cache, right, and writes the object file whole."""
    cache = tmp_path / "kernels"
    report, stderr = run(cache, code=FULL_AT_OBJECT_FILES, TRACEJIT_COMPILE_AHEAD="0")
    assert report["ok"] and not report["fallbacks"], report
    # (said once, for two failed writes: the kernel's object file and Numba's runtime's)
    assert stderr.count("cannot write to the kernel cache") == 1, stderr
    assert "No space left on device" in stderr
    assert report["stats"]["numba_compiles"] == report["kernels"]
    assert not list(cache.glob("*.tjo")) and not list(cache.glob(".tmp-*"))  # no half file
    later, stderr = run(cache, TRACEJIT_COMPILE_AHEAD="0")
    assert later["ok"] and not later["fallbacks"] and not stderr.strip(), stderr
    assert later["stats"]["objects_written"] == later["kernels"] == len(objects(cache))


# --------------------------------------------------------------------------
# bounded
# --------------------------------------------------------------------------

def test_lru_pruning_at_a_small_bound_removes_whole_kernels(tmp_path):
    cache = tmp_path / "kernels"
    run(cache, "4")
    old = {p.name.split(".")[0] for p in cache.glob("*.py")}
    time.sleep(0.05)
    size = kcache.info(cache)["bytes"]
    # the next process writes another kernel past a bound that holds about one
    # (1 row: another kernel; 5 rows would share 4 rows' kernel, see test_dynamic_sizes)
    report, _ = run(cache, "1", TRACEJIT_CACHE_MAX_BYTES=str(size + 1000))
    assert report["ok"], report
    stems = {p.name.split(".")[0] for p in cache.glob("*.py")}
    assert stems and not stems & old  # the least recently used went, the new one stayed
    for stem in old:  # whole: source, object file, digest and Numba's files
        assert not list(cache.glob(f"{stem}*")) and not list(cache.glob(f"__pycache__/{stem}*"))
    assert kcache.info(cache)["bytes"] <= size + 1000


PARALLEL_KERNEL = """
import json, numpy as np, eager, tracer
x = eager.from_numpy(np.linspace(-1, 1, 64 * 8, dtype=np.float32).reshape(64, 8))
f = tracer.function(lambda x: (x.T * 2.0).exp())  # a 2-d loop nest: parallel=True
out = f(x).numpy()
(k,) = f.get_concrete_function(x).kernels
print(json.dumps({"ok": bool(np.allclose(out, np.exp(x.numpy().T * 2), rtol=1e-5)),
                  "parallel": "parallel=True" in k.source, "fallbacks": k.entry is None}))
"""


def test_a_parallel_kernel_loaded_from_the_cache_is_marked_used(tmp_path):
    """parallel=True kernels have no object file (Numba's cache serves them): loading one
    still marks it used, so pruning takes it last, not first."""
    cache = tmp_path / "kernels"
    report, _ = run(cache, code=PARALLEL_KERNEL, TRACEJIT_PARALLEL_MIN_SIZE="16")
    assert report == {"ok": True, "parallel": True, "fallbacks": False}, report
    (stem,) = kcache.entries(cache)
    hour_ago = time.time() - 3600
    for p in kcache.entries(cache)[stem][2]:
        os.utime(p, (hour_ago, hour_ago))
    report, _ = run(cache, code=PARALLEL_KERNEL, TRACEJIT_PARALLEL_MIN_SIZE="16")
    assert report == {"ok": True, "parallel": True, "fallbacks": False}, report
    assert kcache.entries(cache)[stem][1] > time.time() - 600  # used just now


def test_cache_command_and_stale_temp_files(tmp_path):
    cache = tmp_path / "kernels"
    run(cache, "4")
    run(cache, "4")
    stale, fresh = cache / ".tmp-abc.part", cache / "__pycache__" / "x.nbi.tmp.0123"
    for p in (stale, fresh):
        p.write_bytes(b"partial")
    os.utime(stale, (time.time() - 7200,) * 2)
    env = env_for(cache)
    out = subprocess.run([sys.executable, "-m", "codegen.cache"], env=env, cwd=str(ROOT),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and not out.stderr, out.stderr
    assert f"directory: {cache}" in out.stdout and "kernels: 1" in out.stdout
    counts = dict(line.split(": ", 1) for line in out.stdout.splitlines())
    assert counts["compiles"] == "1" and int(counts["hits"]) >= 1, out.stdout
    assert not stale.exists() and fresh.exists()  # older than an hour: removed
    out = subprocess.run([sys.executable, "-m", "codegen.cache", "prune"], env=dict(
        env, TRACEJIT_CACHE_MAX_BYTES="1"), cwd=str(ROOT), capture_output=True, text=True)
    assert out.returncode == 0 and "pruned 1 kernels" in out.stdout, out.stdout
    assert "kernels: 0" in out.stdout
    out = subprocess.run([sys.executable, "-m", "codegen.cache", "clear"], env=env,
                         cwd=str(ROOT), capture_output=True, text=True)
    assert out.returncode == 0 and list(cache.iterdir()) == []


# --------------------------------------------------------------------------
# the compile child
# --------------------------------------------------------------------------

USER_PROGRAM = r"""
import atexit, os, signal, sys
log = sys.argv[1]

def note(what):
    with open(log, "a") as f:
        f.write(f"{what} {os.getpid()}\n")

signal.signal(signal.SIGTERM, lambda *a: note("checkpoint"))  # a "save checkpoint" handler
atexit.register(note, "atexit")
os.register_at_fork(before=lambda: note("before_fork"), after_in_parent=lambda: note("after_fork"),
                    after_in_child=lambda: note("at_fork"))
note("parent")
sys.argv[1:] = ["slow-child", log + ".child"]
sys.path.insert(0, HERE)
import _safety_child
_safety_child.main()
"""


def _start_user_program(tmp_path, cache):
    log = tmp_path / "log"
    proc = subprocess.Popen([sys.executable, "-c", USER_PROGRAM.replace("HERE", repr(str(HERE))),
                             str(log)], env=env_for(cache, TRACEJIT_COMPILE_AHEAD="1"),
                            cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    marker = Path(str(log) + ".child")
    deadline = time.time() + 120
    while not marker.exists() or not marker.read_text():
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, "the compile-ahead child never started"
        time.sleep(0.02)
    return proc, log, int(marker.read_text())


def _gone(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


def test_child_runs_no_user_handler_atexit_or_at_fork_hook(tmp_path):
    proc, log, child = _start_user_program(tmp_path, tmp_path / "kernels")
    os.killpg(proc.pid, signal.SIGTERM)  # to the whole process group, child included
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert report["ok"] and not report["fallbacks"] and report["interrupts"] == 0, report
    lines = log.read_text().split()
    notes = list(zip(lines[::2], map(int, lines[1::2])))
    assert ("checkpoint", proc.pid) in notes  # the program's handler ran, in the program
    assert all(pid == proc.pid for _, pid in notes), notes  # nothing ran in the child
    assert [w for w, _ in notes].count("checkpoint") == 1
    assert [w for w, _ in notes].count("atexit") == 1
    # (nor in the program: the child is forked by os.fork with the user's hooks set aside)
    assert not {"at_fork", "before_fork", "after_fork"} & {w for w, _ in notes}, notes
    assert _gone(child)


def test_ctrl_c_during_a_cold_compile_raises_once_in_the_program(tmp_path):
    proc, log, child = _start_user_program(tmp_path, tmp_path / "kernels")
    time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert report["interrupts"] == 1, (report, err)  # once, in the program; the next call compiled
    assert report["ok"] and not report["fallbacks"], report
    assert _gone(child)


def test_child_dies_with_its_parent_even_by_sigkill(tmp_path):
    proc, _, child = _start_user_program(tmp_path, tmp_path / "kernels")
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert _gone(child), "the compile-ahead child outlived its SIGKILLed parent"
