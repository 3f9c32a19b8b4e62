"""nn.Module and nn.Parameter, with PyTorch's semantics."""
from __future__ import annotations

from collections import OrderedDict, namedtuple

import numpy as np

from .. import dispatch
from ..protocol import STRUCTURE_EPOCH  # bumped below on every change of module structure
from ..tensor import Tensor
from ..dtypes import is_floating


class Parameter(Tensor):
    """A tensor that a Module registers as a parameter; requires grad by default."""

    __slots__ = ()

    def __new__(cls, data=None, requires_grad: bool = True):
        if data is None:
            data = Tensor._wrap(np.zeros((0,), np.float32))
        if not isinstance(data, Tensor):
            from ..functions import tensor

            data = tensor(data)
        p = object.__new__(cls)
        p._data = data._data
        p.grad_fn = None
        p._version = [0]
        if requires_grad:
            p.requires_grad_(True)
        return p

    def __init__(self, data=None, requires_grad: bool = True):
        pass

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def __reduce_ex__(self, proto):
        return (Parameter, (Tensor._wrap(self._data), self.requires_grad))


class Module:
    """Base class of all layers: registers Parameters, buffers and sub-Modules by attribute."""

    # Hooks ((key, fn, flag), ...), set per instance when one is registered (module_hooks)
    _forward_pre_hooks = ()
    _forward_hooks = ()
    _backward_hooks = ()

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_non_persistent_buffers_set", set())
        self.__dict__["training"] = True  # (a new module: nothing a trace tracks yet)

    # `training` is tracked state (eager.dispatch.read_item): a compiled function guards the
    # value it read at entry, and one that sets it itself (model.train() at the top of a
    # step, model.eval() in an eval function) writes the same value at every call instead of
    # depending on the value it found. The flag lives in the instance dict under its name.
    @property
    def training(self) -> bool:
        d = self.__dict__
        if "training" not in d:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute 'training'")
        if not dispatch._hooked_threads:
            return d["training"]
        return dispatch.read_item(d, "training", name=f"{type(self).__name__}.training")

    @training.setter
    def training(self, mode) -> None:
        dispatch.note_item_write(self.__dict__, "training", mode)  # (before: it notes the old)
        self.__dict__["training"] = mode

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign attributes before Module.__init__() call; "
                                 "call super().__init__() first")
        params, modules = self._parameters, self._modules
        if isinstance(value, Parameter):
            store = params
        elif isinstance(value, Module):
            store = modules
        elif name in params or name in modules:
            # As PyTorch: a registered slot takes only its own kind or None. Assigning a
            # plain Tensor over a parameter would otherwise silently unregister it.
            if value is not None:
                kind = "parameter" if name in params else "child module"
                want = "eager.nn.Parameter" if name in params else "eager.nn.Module"
                raise TypeError(f"cannot assign '{type(value).__name__}' as {kind} '{name}' "
                                f"({want} or None expected)")
            store = params if name in params else modules
        elif name in self._buffers:
            store = self._buffers  # stays a buffer, as in PyTorch
        else:
            object.__setattr__(self, name, value)
            STRUCTURE_EPOCH[0] += 1  # (the tracer guards plain attributes: self.p, ...)
            return
        for other in (params, self._buffers, modules):
            if other is not store:
                other.pop(name, None)
        store[name] = value
        STRUCTURE_EPOCH[0] += 1
        self.__dict__.pop(name, None)

    def __getattr__(self, name):
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            if store in d and name in d[store]:
                return d[store][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        # A deletion is a change of structure too: a compiled function that read the
        # attribute must look again (it checks its module guards when the epoch moves).
        STRUCTURE_EPOCH[0] += 1
        for store in (self._parameters, self._buffers, self._modules):
            if name in store:
                del store[name]
                self.__dict__.get("_non_persistent_buffers_set", set()).discard(name)
                return
        object.__delattr__(self, name)

    def register_parameter(self, name, param):
        if param is None:
            self.__dict__.pop(name, None)  # a plain attribute would shadow the slot
            self._parameters[name] = None
            STRUCTURE_EPOCH[0] += 1
        else:
            setattr(self, name, param)

    def register_buffer(self, name, tensor, persistent: bool = True):
        """A tensor that is module state but not a parameter (running statistics, masks):
        moved by `to()`, saved by `state_dict()` unless `persistent=False`."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        if not isinstance(name, str):
            raise TypeError(f"buffer name should be a string. Got {type(name).__name__}")
        if "." in name or name == "":
            raise KeyError(f"buffer name can't contain \".\" or be empty, got {name!r}")
        if (name in self.__dict__ or name in self._parameters or name in self._modules) \
                and name not in self._buffers:
            raise KeyError(f"attribute '{name}' already exists")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer "
                            f"'{name}' (eager Tensor or None required)")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)
        STRUCTURE_EPOCH[0] += 1

    def add_module(self, name, module):
        self._modules[name] = module
        STRUCTURE_EPOCH[0] += 1

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args, **kwargs):
        if self._forward_hooks or self._forward_pre_hooks or self._backward_hooks:
            return _module_hooks.call_with_hooks(self, args, kwargs)
        return self.forward(*args, **kwargs)

    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        """``hook(module, args)`` before each forward; a returned value replaces args."""
        return _module_hooks.register_forward_pre_hook(self, hook, prepend=prepend,
                                                       with_kwargs=with_kwargs)

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False,
                              always_call=False):
        """``hook(module, args, output)`` after each forward; a returned value replaces the
        output.

        >>> h = layer.register_forward_hook(lambda m, args, out: out.clamp(min=0))
        """
        return _module_hooks.register_forward_hook(self, hook, prepend=prepend,
                                                   with_kwargs=with_kwargs,
                                                   always_call=always_call)

    def register_full_backward_hook(self, hook, prepend=False):
        """``hook(module, grad_input, grad_output)`` when the gradients of the module's
        inputs are computed; a returned tuple replaces grad_input."""
        return _module_hooks.register_full_backward_hook(self, hook, prepend=prepend)

    # -------------------------------------------------------------- traversal
    def named_modules(self, prefix=""):
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(f"{prefix}.{name}" if prefix else name)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        for name, m in self._modules.items():
            if m is not None:
                yield name, m

    def children(self):
        for _, m in self.named_children():
            yield m

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        seen = set()
        mods = self.named_modules(prefix) if recurse else [(prefix, self)]
        for mname, m in mods:
            for name, p in m._parameters.items():
                if p is None or (remove_duplicate and id(p) in seen):
                    continue
                seen.add(id(p))
                yield (f"{mname}.{name}" if mname else name), p

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        seen = set()
        mods = self.named_modules(prefix) if recurse else [(prefix, self)]
        for mname, m in mods:
            for name, b in m._buffers.items():
                if b is None or (remove_duplicate and id(b) in seen):
                    continue
                seen.add(id(b))
                yield (f"{mname}.{name}" if mname else name), b

    def buffers(self, recurse=True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def get_submodule(self, target: str) -> Module:
        """The sub-module at dotted path `target` ("" is this module), as in PyTorch."""
        if target == "":
            return self
        mod = self
        for item in target.split("."):
            if not isinstance(mod, Module) or item not in mod._modules \
                    or mod._modules[item] is None:
                raise AttributeError(f"{type(mod).__name__} has no attribute `{item}` "
                                     f"(looking up submodule {target!r})")
            mod = mod._modules[item]
        return mod

    def get_parameter(self, target: str) -> Parameter:
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        if name not in mod._parameters or mod._parameters[name] is None:
            raise AttributeError(f"{type(mod).__name__} has no parameter `{name}`")
        return mod._parameters[name]

    def get_buffer(self, target: str) -> Tensor:
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        if name not in mod._buffers or mod._buffers[name] is None:
            raise AttributeError(f"{type(mod).__name__} has no buffer `{name}`")
        return mod._buffers[name]

    # -------------------------------------------------------------- device and dtype
    def to(self, *args, **kwargs):
        """`to(device)`, `to(dtype)`, `to(device, dtype)`, `to(tensor)`: the device must be
        the CPU; a floating dtype converts every floating parameter and buffer in place
        (the Parameter objects stay, so optimizers built before keep working)."""
        from ..device import parse_to

        dtype, _ = parse_to(args, kwargs, "Module.to")
        if dtype is not None:
            if not is_floating(dtype):
                raise TypeError(f"nn.Module.to only accepts floating point dtypes, but got "
                                f"desired dtype={dtype}")
            self._cast_floating(dtype)
        return self

    def _cast_floating(self, dtype):
        for m in self.modules():
            for store in (m._parameters, m._buffers):
                for t in store.values():
                    if t is None or not is_floating(t.dtype) or t.dtype == dtype:
                        continue
                    # A new array (its dtype differs): a compiled function that captured
                    # this tensor sees the change and traces again.
                    t._data = t._data.astype(dtype)
                    t._version[0] += 1
                    if t._grad is not None:
                        t._grad = Tensor._wrap(t._grad._data.astype(dtype))

    def cpu(self):
        return self

    def cuda(self, device=None):
        from ..device import check_device

        check_device("cuda" if device is None else device, "Module.cuda")
        return self

    def float(self):
        return self.to(np.float32)

    def double(self):
        return self.to(np.float64)

    # -------------------------------------------------------------- modes
    def train(self, mode: bool = True):
        mode = bool(mode)
        changed = False
        for m in self.modules():
            if m.__dict__.get("training") is not mode:
                changed = True
            # (set even when unchanged: a trace then writes it at every call, whatever the
            # flag was when it traced)
            object.__setattr__(m, "training", mode)
        if changed:
            # (The tracer guards `training`. Only a real change moves the epoch: a
            # model.train() at the top of every step would otherwise send every compiled
            # function to re-check its module guards at every call.)
            STRUCTURE_EPOCH[0] += 1
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True):
        from ..optim import _zeroed

        for p in self.parameters():
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad = _zeroed(p.grad)

    def apply(self, fn):
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # -------------------------------------------------------------- state
    def state_dict(self, destination=None, prefix: str = "", keep_vars: bool = False):
        """Parameters and persistent buffers by dotted name, as PyTorch orders them: each
        module's own parameters, then its buffers, then its children in registration
        order. A tensor shared under two names (tied weights) appears under both."""
        out = OrderedDict() if destination is None else destination
        for name, t in self._state_items(prefix):
            out[name] = t if keep_vars else t.detach()
        return out

    def _state_items(self, prefix=""):
        for name, p in self._parameters.items():
            if p is not None:
                yield prefix + name, p
        for name, b in self._buffers.items():
            if b is not None and name not in self.__dict__.get("_non_persistent_buffers_set",
                                                               ()):
                yield prefix + name, b
        for name, m in self._modules.items():
            if m is not None:
                yield from m._state_items(prefix + name + ".")

    def load_state_dict(self, state_dict, strict: bool = True):
        own = dict(self._state_items())
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}: "
                               f"missing keys {missing}, unexpected keys {unexpected}")
        from ..autograd import no_grad

        with no_grad():
            for k, v in state_dict.items():
                if k not in own:
                    continue
                t = own[k]
                src = v if isinstance(v, Tensor) else Tensor._wrap(np.asarray(v))
                if src.shape != t.shape:
                    raise RuntimeError(f"size mismatch for {k}: copying a param with shape "
                                       f"{src.shape} from checkpoint, the shape in current "
                                       f"model is {t.shape}")
                t.copy_(src)
        return IncompatibleKeys(missing, unexpected)

    # -------------------------------------------------------------- repr
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = []
        extra = self.extra_repr()
        for name, m in self._modules.items():
            body = repr(m).replace("\n", "\n  ")
            lines.append(f"({name}): {body}")
        head = type(self).__name__ + "("
        if not lines:
            return head + extra + ")"
        if extra:
            lines.insert(0, extra)
        return head + "\n  " + "\n  ".join(lines) + "\n)"

    def __dir__(self):
        return list(super().__dir__()) + list(self._parameters) + list(self._modules)


# What load_state_dict returns, as PyTorch's `_IncompatibleKeys`.
IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


from . import module_hooks as _module_hooks  # noqa: E402 (it imports Function, Tensor)
