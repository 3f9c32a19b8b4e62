"""eager.functions is split by concern (issue 14 item 5): each module's `__all__` lists what
it defines, the package re-exports their union, and no name is lost or defined twice.

Several front-end functions are named like builtins (sum, max, min, abs, pow): inside the
modules such a name must always mean the front-end function (builtins are reached as
``builtins.max`` or ``_builtin_sum``), so a helper moved to a module that forgot to import
one cannot call the builtin by accident (and the reverse)."""
import builtins
import dis
import inspect
import types

import pytest

import eager
import eager.functions as F

MODULES = F.MODULES
UNION = [name for module in MODULES for name in module.__all__]


def _unwrap(obj):
    return inspect.unwrap(obj) if callable(obj) else obj


def test_no_name_is_listed_twice():
    seen = {}
    for module in MODULES:
        for name in module.__all__:
            assert name not in seen, (f"{name} is in the __all__ of both {seen[name]} and "
                                      f"{module.__name__}")
            seen[name] = module.__name__


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_all_lists_exactly_what_the_module_defines(module):
    defined = sorted(name for name, obj in vars(module).items()
                     if not name.startswith("_") and callable(obj)
                     and getattr(obj, "__module__", None) == module.__name__)
    assert sorted(set(defined) - set(module.__all__)) == [], "defined here, missing in __all__"
    for name in module.__all__:
        obj = getattr(module, name)  # AttributeError: listed but not defined
        assert obj.__module__ == module.__name__, (
            f"{module.__name__}.__all__ lists {name}, which is {obj.__module__}'s")


def test_the_package_reexports_the_union():
    assert sorted(F.__all__) == sorted(UNION)
    for module in MODULES:
        for name in module.__all__:
            assert getattr(F, name) is getattr(module, name), name


def test_everything_eager_exports_from_the_modules_is_in_their_all():
    owners = {module.__name__ for module in MODULES}
    exported = {name: _unwrap(getattr(eager, name)) for name in eager.__all__}
    from_modules = {name for name, obj in exported.items()
                    if getattr(obj, "__module__", None) in owners}
    assert len(from_modules) > 60, "expected eager's functions to come from eager.functions"
    union = set(UNION)
    for name in sorted(from_modules):
        obj = exported[name]
        assert obj.__name__ in union, f"eager.{name} ({obj.__module__}.{obj.__name__})"
        assert getattr(F, obj.__name__) is obj, name


def test_the_late_tensor_binding_reaches_every_module():
    for module in (F,) + MODULES:
        assert module.Tensor is eager.Tensor, module.__name__


def _global_loads(code):
    for instr in dis.get_instructions(code):
        if instr.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            yield instr.argval
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _global_loads(const)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_names_of_front_end_functions_mean_the_front_end_functions(module):
    shadowing = {name for name in UNION if hasattr(builtins, name)}
    assert {"sum", "max", "min", "abs", "pow"} <= shadowing
    wrong = []
    for fname, fn in vars(module).items():
        if not isinstance(fn, types.FunctionType) or fn.__module__ != module.__name__:
            continue
        for name in set(_global_loads(fn.__code__)):
            if name in UNION and vars(module).get(name) is not getattr(F, name):
                got = vars(module).get(name, getattr(builtins, name, None))
                wrong.append(f"{fname} reads {name} as {got!r}")
    assert not wrong, f"{module.__name__}: {wrong}"


def test_shadowed_builtins_work_eagerly_through_the_modules():
    """The reductions that read both: a builtin max of the dims, eager's sum and abs."""
    x = eager.tensor([[1.0, -2.0], [3.0, float("inf")]])
    assert eager.logsumexp(x, 1).tolist()[1] == float("inf")
    assert eager.var(eager.tensor([2.0]), correction=2).item() != eager.var(
        eager.tensor([2.0]), correction=2).item()  # max(N - 2, 0) = 0 -> nan, as PyTorch
    assert eager.tensor([1, 2, 3])[eager.tensor([True, False, True])].tolist() == [1, 3]
    assert F.normalize_key(x, (Ellipsis, 0))[0] == ((0, 2, 1), 0)
