"""Helper for tests/codegen/test_cache_safety.py: compile and run a small @function in a
fresh process and print one JSON line (results checked against eager, counters, warnings).

    python _safety_child.py [ROWS]              # one call, rows x 8 input
    python _safety_child.py mutate N SEED       # N object-file mutations, one process
    python _safety_child.py llvm-load N SEED    # N mutated objects the ELF checks pass,
                                                # each loaded into a fresh LLVM engine
    python _safety_child.py slow-child MARKER   # the compile-ahead child sleeps (signals)

TRACEJIT_CACHE_DIR comes from the environment.
"""
import json
import os
import sys
import warnings

import numpy as np

import codegen
import eager
import eager.nn.functional as F
import tracer
from codegen import build


def fn(x):
    return F.softmax(x * 2.0, -1), (x + 1.0).tanh().sum(0)


def many(x, w):  # several kernels to compile: the compile-ahead child takes some
    h = (x * 2.0 + 1.0).tanh()
    y = h @ w
    z = (y - y.amax(dim=-1, keepdim=True)).exp()
    u = z @ w.T
    return (u * u).sum(dim=0), (u + 1.0).sum(dim=1)


def run(rows: int) -> dict:
    x = eager.from_numpy(np.linspace(-3, 3, rows * 8, dtype=np.float32).reshape(rows, 8))
    f = tracer.function(fn)
    with eager.no_grad():
        got = [o.numpy() for o in f(x)]
        want = [o.numpy() for o in fn(x)]
    kernels = f.get_concrete_function(x).kernels
    return {"ok": all(np.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(got, want)),
            "kernels": len(kernels), "fallbacks": [k.name for k in kernels if k.entry is None],
            "files": [k.file for k in kernels]}


def mutate(data: bytes, rng) -> bytes:
    """One way of damaging an object file; its own sha256 line recomputed, so only the
    digest recorded with the kernel (and the ELF checks) can refuse it."""
    first, _, body = data.partition(b"\n")
    body = bytearray(body)
    kind = rng.integers(3)
    if kind == 0:
        for _ in range(rng.integers(1, 9)):
            body[rng.integers(len(body))] = rng.integers(256)
    elif kind == 1:
        del body[rng.integers(len(body)):]
    else:
        body += bytes(rng.integers(0, 256, rng.integers(1, 64), dtype=np.uint8))
    import hashlib

    return b"# tracejit-object-sha256: " + hashlib.sha256(body).hexdigest().encode() + \
        b"\n" + bytes(body)


def mutations(n: int, seed: int) -> dict:
    first = run(4)
    directory = codegen.cache_dir()
    objects = sorted(p for p in directory.glob("*.tjo") if not p.name.startswith("nrt-"))
    pristine = {p: (p.read_bytes(), p.with_suffix(".sum").read_bytes()) for p in objects}
    rng = np.random.default_rng(seed)
    ok, loaded = first["ok"], 0
    for _ in range(n):
        for p, (data, digest) in pristine.items():
            p.write_bytes(mutate(data, rng))
            p.with_suffix(".sum").write_bytes(digest)
        build._ENTRIES.clear()
        before = build.compile_stats()["objects_loaded"]
        report = run(4)
        loaded += build.compile_stats()["objects_loaded"] - before
        ok = ok and report["ok"] and not report["fallbacks"]
    return {"ok": ok, "objects": len(objects), "mutated_objects_loaded": loaded}


def llvm_loads(n: int, seed: int) -> dict:
    """Objects mutated (mostly in their section table and what follows) that the ELF checks
    pass are loaded and linked by LLVM (not run: their machine code may be anything) in
    fresh engines: none may abort the process. The digest check is what keeps such objects
    out in real use; this checks the ELF checks' part alone."""
    import struct

    import llvmlite.binding as ll

    from codegen import elfcheck, objload

    run(4)
    directory = codegen.cache_dir()
    engine = objload._engine(sorted(directory.glob("nrt-*.tjo"))[0])
    (path,) = [p for p in directory.glob("*.tjo") if not p.name.startswith("nrt-")]
    _, obj = objload._unpack(path.read_bytes())
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    rng = np.random.default_rng(seed)
    passed, refused_by_llvm = 0, 0
    for _ in range(n):
        data = bytearray(obj)
        for _ in range(rng.integers(1, 4)):
            data[rng.integers(shoff if rng.integers(2) else 0, len(data))] = rng.integers(256)
        try:
            elfcheck.check(bytes(data))
        except elfcheck.ObjectFileError:
            continue
        passed += 1
        triple, cpu, features = engine.magic
        tm = ll.Target.from_triple(triple).create_target_machine(  # (each engine owns one)
            cpu=cpu, features=features, reloc="static", codemodel="jitdefault", jit=True)
        empty = ll.parse_assembly("")
        empty.triple = triple
        ee = ll.create_mcjit_compiler(empty, tm)
        try:
            ee.add_object_file(ll.ObjectFileRef.from_data(bytes(data)))
            ee.finalize_object()
        except Exception:  # noqa: BLE001 - refused with an exception: fine
            refused_by_llvm += 1
    return {"ok": True, "passed_checks": passed, "refused_by_llvm": refused_by_llvm}


def slow_child(marker: str) -> dict:
    """A cold compile whose compile-ahead child writes its pid to `marker` and sleeps:
    the test signals the process group (or kills this process) meanwhile."""
    from codegen import ahead

    def slow(source, name):
        with open(marker, "w") as f:
            f.write(str(os.getpid()))
        import time

        time.sleep(30)
    ahead._compile_in_child = slow
    ahead._threads_alone = lambda: True
    ahead._cpus = lambda: 2
    rng = np.random.default_rng(0)
    x = eager.from_numpy(rng.standard_normal((16, 24)).astype(np.float32))
    w = eager.from_numpy(rng.standard_normal((24, 8)).astype(np.float32))
    interrupts = 0
    for _ in range(3):
        try:
            f = tracer.function(many)
            with eager.no_grad():
                got = [o.numpy() for o in f(x, w)]
            break
        except KeyboardInterrupt:
            interrupts += 1
            ahead._compile_in_child = build.load_module  # (the next call: a quick child)
    with eager.no_grad():
        want = [o.numpy() for o in many(x, w)]
    kernels = f.get_concrete_function(x, w).kernels
    return {"ok": all(np.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(got, want)),
            "interrupts": interrupts, "fallbacks": [k.name for k in kernels if k.entry is None]}


def main() -> None:
    args = sys.argv[1:]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if args and args[0] == "mutate":
            report = mutations(int(args[1]), int(args[2]))
        elif args and args[0] == "llvm-load":
            report = llvm_loads(int(args[1]), int(args[2]))
        elif args and args[0] == "slow-child":
            report = slow_child(args[1])
        else:
            report = run(int(args[0]) if args else 4)
    report["stats"] = codegen.compile_stats()
    report["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
    report["numba_imported"] = "numba" in sys.modules
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
