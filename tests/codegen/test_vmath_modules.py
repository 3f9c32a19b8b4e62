"""codegen.vmath is a package split by concern (issue 14 item 5): each module's `__all__`
lists what it defines, the package re-exports their union (generated kernels import
``from codegen.vmath import exp_f32``), and Numba's disk cache of every vmath function is
stamped with the whole package, since a function calls and reads other files' code."""
import hashlib
from pathlib import Path

import pytest

from codegen import vmath as V

MODULES = (V.intrinsics, V.constants, V.explog, V.tanh_erf, V.arith, V.divmod, V.intpow,
           V.trig, V.inverse_trig, V.hyperbolic)
TABLES = {"VMATH", "VMATH_NAMES", "VMATH_MAX_ULP", "VMATH_METHOD", "vmath_name"}


def test_every_file_of_the_package_is_a_listed_module():
    files = {p.stem for p in Path(V.__file__).parent.glob("*.py")} - {"__init__"}
    assert files == {m.__name__.rpartition(".")[2] for m in MODULES}


def test_the_package_exports_the_union_of_the_modules_all():
    union = [name for module in MODULES for name in module.__all__]
    assert len(union) == len(set(union)), "a name in two modules' __all__"
    assert sorted(V.__all__) == sorted(set(union) | TABLES)
    for module in MODULES:
        for name in module.__all__:
            assert getattr(V, name) is getattr(module, name), name


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_all_lists_what_the_module_defines(module):
    public = {name for name, obj in vars(module).items()
              if not name.startswith("_") and name.isidentifier()
              and getattr(getattr(obj, "py_func", obj), "__module__", None) == module.__name__}
    public |= {name for name in vars(module) if name.isupper() and not name.startswith("_")}
    assert sorted(public) == sorted(module.__all__)


def test_kernel_names_resolve_in_the_package():
    """What the code generator writes (codegen.lower's table) is importable from the
    package, as the function the tables give."""
    for key, name in V.VMATH_NAMES.items():
        assert getattr(V, name) is V.VMATH[key], name


def test_numba_cache_stamp_covers_every_vmath_file():
    h = hashlib.sha256()
    for path in sorted(Path(V.__file__).parent.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    for name in ("exp_f32", "tanh_f64", "erf_f32", "div_invariant_f32", "log1p_f64"):
        stamp = getattr(V, name)._cache._cache_file._source_stamp
        assert stamp[1] == h.hexdigest(), name


def test_twins_compile_one_text_per_dtype_and_refuse_a_float64_constant_in_float32():
    """`intrinsics._twins` makes `<name>_f32` and `<name>_f64` from one function: each reads
    its dtype's member of every `_Twin` global, lives in the module under its own name (so
    Numba's disk cache and pickling find it), and a float32 member may not read a float64."""
    import numpy as np

    from codegen.vmath.constants import _Twin
    from codegen.vmath.intrinsics import _twins

    f32, f64 = V.explog.exp
    assert (f32, f64) == (V.exp_f32, V.exp_f64)
    for fn, suffix in ((f32, "f32"), (f64, "f64")):
        assert fn.py_func.__qualname__ == fn.py_func.__name__ == f"exp_{suffix}"
        assert fn.py_func.__module__ == "codegen.vmath.explog"
        assert fn.py_func.__code__ is V.explog.exp.f32.py_func.__code__
        assert getattr(V.explog, f"exp_{suffix}") is fn
    assert f32.py_func.__globals__["_ONE"] is V.constants._ONE.f32
    assert type(f32.py_func.__globals__["_ONE"]) is np.float32
    assert type(f64.py_func.__globals__["_ONE"]) is np.float64

    def uses_a_double(x):
        return x * _DOUBLE

    uses_a_double.__globals__["_DOUBLE"] = 2.0
    try:
        with pytest.raises(TypeError, match="reads the float64 '_DOUBLE'"):
            _twins(uses_a_double)
        uses_a_double.__globals__["_DOUBLE"] = _Twin(np.float32(2.0), np.float64(2.0))
        pair = _twins(uses_a_double)
        assert pair.f32(np.float32(1.5)) == np.float32(3.0)
        assert pair.f64(1.5) == 3.0
    finally:
        del uses_a_double.__globals__["_DOUBLE"]
