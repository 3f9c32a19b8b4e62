"""Where a trace's captured tensors live: the roots a call reaches outside state from (its
arguments, closure variables and the globals its code names), the name and the way to find
again each captured tensor (`model.0.weight`, `opt.state[0]['exp_avg']`), the .grad of every
reachable parameter before the call, and the tensors the caller can reach afterwards."""
from __future__ import annotations

import inspect
import types

import numpy as np

from eager.nn.module import Module
from eager.optim import Optimizer
from eager.tensor import Tensor

from .trace import LiveScalar


class _Source:
    """Where a captured tensor was found, so a replaced object can be detected."""

    __slots__ = ("describe", "resolve")

    def __init__(self, describe, resolve):
        self.describe = describe
        self.resolve = resolve


def _state_roots(fn, args, kwargs) -> list:
    """(description, object) of everything outside the call its code can reach: the
    arguments, closure variables and globals it names, and the module or object a bound
    method or a Module call runs on."""
    roots = [(desc, obj) for desc, _get, obj, _free in _roots(fn, args, kwargs)]
    owner = fn if isinstance(fn, Module) else getattr(fn, "__self__", None)
    if owner is not None:
        roots.insert(0, ("self", owner))
    return roots


def _link_grad_aliases(caps):
    """A capture that is another tensor over a captured tensor's incoming .grad array (the
    `w.grad.detach()` backward accumulates into) stands for that .grad, whichever tensor it
    is at the next call (`w.grad = eager.zeros(3)` between calls): read it through its
    owner, never through the wrapper made while tracing."""
    grad_arrays = {}
    for s in caps:
        g = s.grad
        if isinstance(g, Tensor) and g._data.__class__ is np.ndarray:
            grad_arrays.setdefault(id(g._data), s.index)
    for s in caps:
        if getattr(s, "grad_owner", None) is None and not isinstance(s.tensor, LiveScalar):
            owner = grad_arrays.get(id(s.data))
            if owner is not None and owner != s.index:
                s.grad_owner = owner


def _reachable_tensor_ids(fn, args, kwargs) -> set:
    """Ids of tensors the caller can reach after the call: through arguments, closure
    variables and globals - modules' parameters and buffers, optimizers' state."""
    found = set()

    def visit(obj, depth):
        if isinstance(obj, Tensor):
            found.add(id(obj))
        elif isinstance(obj, Module):
            found.update(id(p) for p in obj.parameters())
            found.update(id(b) for b in obj.buffers())
        elif isinstance(obj, Optimizer):
            for st in obj.state.values():
                for v in st.values():
                    visit(v, depth + 1)
        elif depth < 2 and isinstance(obj, (list, tuple)):
            for x in obj:
                visit(x, depth + 1)
        elif depth < 2 and isinstance(obj, dict):
            for x in obj.values():
                visit(x, depth + 1)
        elif depth < 1 and hasattr(obj, "__dict__") and not isinstance(
                obj, (type, types.ModuleType)) and not callable(obj):
            for x in list(vars(obj).values()):
                visit(x, depth + 1)

    for _desc, _get, obj, _free in _roots(fn, args, kwargs):
        visit(obj, 0)
    return found


def _roots(fn, args, kwargs):
    """Where a call reaches outside objects from: (description, getter, object, is_free) for
    each argument, closure variable and global the function's code names. Free (closure and
    global) roots can be rebound between calls; arguments are part of the cache key."""
    for i, a in enumerate(args):
        yield _arg_name(fn, i), (lambda a=a: a), a, False
    for k, v in kwargs.items():
        yield k, (lambda v=v: v), v, False
    code = getattr(fn, "__code__", None)
    if code is None:
        return
    for var, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
        try:
            obj = cell.cell_contents
        except ValueError:
            continue
        yield var, (lambda cell=cell: cell.cell_contents), obj, True
    g = getattr(fn, "__globals__", {})
    for gname in _global_names(code):
        if gname in g:
            yield gname, (lambda g=g, gname=gname: g[gname]), g[gname], True


def _global_names(code) -> list:
    """Names read by `code` and by the lambdas and functions nested in it (a tracer.cond
    branch written inline reads `model` from there)."""
    names = dict.fromkeys(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names.update(dict.fromkeys(_global_names(c)))
    return list(names)


def _plain_object(obj) -> bool:
    """An instance of a user class (not a function, class or module) whose attributes may
    hold tensors, modules and optimizers."""
    return hasattr(obj, "__dict__") and not isinstance(obj, (type, types.ModuleType)) \
        and not callable(obj)


def _entry_grads(fn, args, kwargs) -> dict:
    """id -> (tensor, .grad) for every parameter the call can reach, before it runs."""
    found = {}

    def visit(obj, depth=0):
        if isinstance(obj, Tensor):
            found.setdefault(id(obj), (obj, obj.grad))
        elif isinstance(obj, Module):
            for p in obj.parameters():
                found.setdefault(id(p), (p, p.grad))
        elif isinstance(obj, Optimizer):
            for group in obj.param_groups:
                for p in group["params"]:
                    found.setdefault(id(p), (p, p.grad))
        elif depth == 0 and isinstance(obj, (list, tuple)):
            for x in obj:
                visit(x, 1)
        elif depth == 0 and _plain_object(obj):
            for x in list(vars(obj).values()):  # a trainer object holding model and opt
                visit(x, 1)

    for _desc, _get, obj, free in _roots(fn, args, kwargs):
        if free or not isinstance(obj, Tensor):  # tensor arguments are traced, not captured
            visit(obj)
    return found


def _find_sources(fn, args, kwargs, captured):
    """Name each captured tensor by where it lives, and how to find it again."""
    wanted = {id(t): i for i, t in enumerate(captured)}
    names = [""] * len(captured)
    sources = []
    root_guards = []

    def visit_module(root_desc, get_root, module):
        found = False
        for pname, p in list(module.named_parameters()) + list(module.named_buffers()):
            i = wanted.get(id(p))
            if i is not None and not names[i]:
                names[i] = f"{root_desc}.{pname}"
                sources.append((i, _Source(names[i], _path_resolver(get_root, pname))))
                found = True
        return found

    def visit(root_desc, get_root, obj, depth=0):
        """Name the captures found under `obj`; True if there were any."""
        if isinstance(obj, Tensor):
            i = wanted.get(id(obj))
            if i is not None and not names[i]:
                names[i] = root_desc
                sources.append((i, _Source(root_desc, get_root)))
                return True
        elif isinstance(obj, Module):
            return visit_module(root_desc, get_root, obj)
        elif isinstance(obj, Optimizer):
            # add_param_group() after tracing: the trace looped over the groups it saw
            token = getattr(obj, "_groups_token", None)
            if token is not None:
                root_guards.append((f"{root_desc}.param_groups",
                                    lambda o=obj: o._groups_token, token))
            found = False
            params = [p for g in obj.param_groups for p in g["params"]]
            for k, p in enumerate(params):
                for sname, st in obj.state.get(p, {}).items():
                    j = wanted.get(id(st)) if isinstance(st, Tensor) else None
                    if j is not None and not names[j]:
                        names[j] = f"{root_desc}.state[{k}][{sname!r}]"
                        found = True
            if found:
                # opt.load_state_dict() replaces the state dict: the captured buffers are
                # then stale, so its identity is checked at every call; and a change of its
                # entries in place (opt.state.clear(), a buffer set to None) gives the
                # optimizer a new state token (eager/optim/tracked.py).
                root_guards.append((f"{root_desc}.state", lambda o=obj: o.state, obj.state))
                token = getattr(obj, "_state_token", None)
                if token is not None:
                    root_guards.append((f"{root_desc}.state's entries",
                                        lambda o=obj: o._state_token, token))
            return found
        elif depth == 0 and _plain_object(obj):
            # A trainer or a plain class's `self`: name self.scale, self.model.0.weight, and
            # guard the attributes (rebinding self.scale has no epoch to announce it).
            found = False
            for attr, value in list(vars(obj).items()):
                get = (lambda get_root=get_root, attr=attr: getattr(get_root(), attr))
                if visit(f"{root_desc}.{attr}", get, value, 1):
                    root_guards.append((f"{root_desc}.{attr}", get, value))
                    found = True
            return found
        return False

    for desc, get, obj, free in _roots(fn, args, kwargs):
        if visit(desc, get, obj) and free:
            root_guards.append((desc, get, obj))
    for i, t in enumerate(captured):
        if not names[i] and isinstance(t, LiveScalar):
            names[i] = f"{t.name or 'a Python number'}, read at each call"
        elif not names[i]:
            from .concrete import _sig_text

            names[i] = f"<tensor {_sig_text(t.shape, t.dtype)}>"
    return names, sources, tuple(root_guards)


def _arg_name(fn, i):
    try:
        return list(inspect.signature(fn).parameters)[i]
    except (TypeError, ValueError, IndexError):
        return f"arg{i}"


def _path_resolver(get_root, path):
    parts = path.split(".")

    def resolve():
        obj = get_root()
        for p in parts:
            if isinstance(obj, Module):
                d = obj.__dict__
                if p in d["_parameters"]:
                    obj = d["_parameters"][p]
                elif p in d["_buffers"]:
                    obj = d["_buffers"][p]
                elif p in d["_modules"]:
                    obj = d["_modules"][p]
                else:
                    obj = getattr(obj, p)
            else:
                obj = getattr(obj, p)
        return obj
    return resolve
