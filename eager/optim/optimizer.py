"""The Optimizer base: parameter groups, state, state_dict, and how a step reads its
hyperparameters.

Updates are in-place tensor ops under no_grad, so they run eagerly and, inside
a traced function, record as functional updates of the parameters and state.
The step counter is a 0-d tensor (as in PyTorch), so stepping never changes a
Python constant that a trace would bake in.
"""
from __future__ import annotations

import math

import numpy as np

from .. import functions as T
from .. import dispatch as _dispatch
from ..dispatch import LIVE, TRUTH, VALUE, note_item_write, read_item
from ..tensor import Tensor
from ..dtypes import is_floating
from .tracked import ParamState, _ParamList, _State

_params = dict.__getitem__  # a group's parameter list, read without a trace event


class ParamGroup(dict):
    """One of `optimizer.param_groups`: a dict whose reads and writes a trace sees.

    Hyperparameters may change between calls of a compiled training step (an LR schedule,
    ``group["lr"] = lr`` inside the step). The optimizer reads each through
    eager.dispatch.read_item, saying how it uses it (a number for tensor math is read at
    every call; a switch such as ``nesterov`` is guarded); user code that reads or writes a
    group inside a traced function is seen here.
    """

    __slots__ = ("name", "owner")

    def __getitem__(self, key):
        if not _dispatch._hooked_threads:  # (no trace protocol installed anywhere)
            return dict.__getitem__(self, key)
        return read_item(self, key, VALUE)

    def get(self, key, default=None):
        if key not in self:
            return default
        return self[key]

    def __setitem__(self, key, value):
        if _dispatch._hooked_threads:  # (before the write: a trace notes the old value)
            note_item_write(self, key, value)
        if key == "params" and getattr(self, "owner", None) is not None:
            value = _ParamList(self.owner, [value] if isinstance(value, Tensor) else value)
            self.owner._groups_changed()
        dict.__setitem__(self, key, value)


class Optimizer:
    def __init__(self, params, defaults: dict):
        self.defaults = dict(defaults)
        if isinstance(params, (Tensor, set, frozenset)):
            raise TypeError("params argument given to the optimizer should be an iterable of "
                            f"Tensors or dicts (a list), but got {type(params).__name__}")
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(params[0], dict):
            params = [{"params": params}]
        self.param_groups = _ParamList(self)
        for group in params:
            self.add_param_group(group)
        # A defaultdict as in PyTorch: opt.state[p] is {} for a parameter not stepped yet.
        self.state = _State(self)

    def add_param_group(self, group: dict):
        group = ParamGroup(group)
        group.name = f"optimizer.param_groups[{len(self.param_groups)}]"
        ps = _params(group, "params")
        if isinstance(ps, (set, frozenset)):
            raise TypeError("optimizer parameters need to be organized in ordered collections "
                            "(a list), but the ordering of tensors in sets changes between runs")
        dict.__setitem__(group, "params", _ParamList(self, [ps] if isinstance(ps, Tensor) else ps))
        for p in _params(group, "params"):
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, got {type(p).__name__}")
            # As PyTorch: frozen parameters (requires_grad=False) are accepted and skipped
            # while their grad is None; only non-leaf tensors are refused.
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor; optimize the leaf it was "
                                 "computed from, or .detach().requires_grad_() a copy")
        ids = {id(p) for p in _params(group, "params")}
        if len(ids) != len(_params(group, "params")):
            raise ValueError("optimizer parameter group contains a parameter twice; list each "
                             "parameter once")
        for other in self.param_groups:
            if any(id(p) in ids for p in _params(other, "params")):
                raise ValueError("some parameters appear in more than one parameter group")
        for k, v in self.defaults.items():
            if k not in group:
                dict.__setitem__(group, k, v)
        group.owner = self
        self.param_groups.append(group)

    def _groups_changed(self):
        # A new object per change of the groups: a compiled step guards its identity (its
        # trace's zero_grad() and step() loop over the groups as they were).
        self._groups_token = object()

    def _state_changed(self):
        # The same for the state's entries (opt.state.clear(), a momentum buffer set to
        # None): a compiled step reads the state tensors it captured.
        self._state_token = object()

    def zero_grad(self, set_to_none: bool = True):
        for group in self.param_groups:
            for p in _params(group, "params"):
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    p.grad = _zeroed(p.grad)

    def state_dict(self):
        index = {}
        groups = []
        for group in self.param_groups:
            ids = []
            for p in _params(group, "params"):
                index.setdefault(id(p), len(index))
                ids.append(index[id(p)])
            g = {k: v for k, v in group.items() if k != "params"}
            g["params"] = ids
            groups.append(g)
        state = {index[id(p)]: dict(s) for p, s in self.state.items() if id(p) in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Load a `state_dict()` (PyTorch's layout: parameters are numbered in group order).

        Hyperparameters are replaced group by group (the ParamGroup objects stay, so a
        scheduler or a compiled step that holds them sees the new values); state tensors are
        copied, floating ones cast to their parameter's dtype except the step counts."""
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(f"loaded state dict has {len(saved_groups)} parameter groups, "
                             f"the optimizer has {len(self.param_groups)}")
        for group, saved in zip(self.param_groups, saved_groups):
            if len(saved["params"]) != len(_params(group, "params")):
                raise ValueError("loaded state dict contains a parameter group that doesn't "
                                 "match the size of optimizer's group")
        params = {}
        for group, saved in zip(self.param_groups, saved_groups):
            params.update(zip(saved["params"], _params(group, "params")))
        for group, saved in zip(self.param_groups, saved_groups):
            for k in [k for k in group if k != "params"]:
                if k not in saved:
                    del group[k]
            for k, v in saved.items():
                if k != "params":
                    group[k] = tuple(v) if isinstance(v, list) else v
        self.state = _State(self)
        for i, s in state_dict["state"].items():
            p = params[int(i)]
            self.state[p] = ParamState(self, {k: _loaded(k, v, p) for k, v in s.items()})

    def __repr__(self):
        lines = [type(self).__name__ + " ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(g):
                if k != "params":
                    lines.append(f"    {k}: {g[k]}")
        lines.append(")")
        return "\n".join(lines)


def _loaded(key, value, param):
    if not isinstance(value, Tensor):
        return value
    data = np.array(value._data, copy=True)
    if key != "step" and is_floating(data.dtype) and data.dtype != param.dtype:
        data = data.astype(param.dtype)
    return Tensor._wrap(data)


def closure_loss(closure):
    """What `step(closure)` returns: the closure's loss, computed with gradients on (step()
    runs under no_grad and the closure calls backward()), as PyTorch's optimizers do; None
    without a closure."""
    if closure is None:
        return None
    from ..autograd import enable_grad

    with enable_grad():
        return closure()


def _zeroed(grad: Tensor) -> Tensor:
    """A fresh zero gradient (zero_grad(set_to_none=False)). PyTorch zeroes .grad in place;
    a new array gives the same values and is safe when .grad is a view that must not be
    written, such as a gradient made with create_graph=True."""
    return T.zeros_like(grad)


def _number(group, key):
    """A hyperparameter fed to tensor math: a float eagerly, a per-call input when traced."""
    return read_item(group, key, LIVE)


def _switch(group, key):
    """A hyperparameter that decides what the step does: a trace is valid for its value."""
    return read_item(group, key, VALUE)


def _nonzero(group, key):
    """A hyperparameter used only if it is nonzero (`if weight_decay:`): None when it is
    zero, else its value (read at every call when traced). A trace is valid while it stays
    zero, or nonzero."""
    if read_item(group, key, TRUTH):
        return read_item(group, key, LIVE)
    return None


def _f64(x):
    """A float64 0-d tensor of a hyperparameter (a traced per-call input already is one)."""
    return x if isinstance(x, Tensor) else T.const(x, np.float64)


def _step_tensor():
    return Tensor._wrap(np.array(0.0, np.float32))


def _count(step: Tensor):
    """The step count, for step-dependent factors (bias corrections): a Python float eagerly,
    as PyTorch's default (non-capturable) path computes them; traced, a float64 tensor made
    from the step tensor (PyTorch's capturable path), so the trace bakes in no count."""
    if type(step._data) is np.ndarray:
        return step.item()
    return T.cast(step, np.float64)


def _pow(base, n):
    """``base ** n`` of hyperparameters and step counts: floats, or float64 tensors when
    traced."""
    if isinstance(base, Tensor) or isinstance(n, Tensor):
        return T.pow(_f64(base), _f64(n))
    return base ** n


def _sqrt(x):
    return T.sqrt(x) if isinstance(x, Tensor) else math.sqrt(x)


def _scalar(x, dtype):
    """A step factor (a float, or a float64 tensor when traced) as a 0-d tensor of `dtype`,
    so the update is computed in the parameter's dtype."""
    return T.cast(x, dtype) if isinstance(x, Tensor) else T.const(x, dtype)


def _grads(group, maximize):
    """(parameter, gradient) pairs of a group's parameters that have a gradient; the
    gradient negated under `maximize`."""
    for p in _params(group, "params"):
        g = p.grad
        if g is not None:
            yield p, (-g if maximize else g)


def _check_range(name, value, low=0.0, high=None):
    if not low <= value or (high is not None and not value < high):
        bound = f"[{low}, {high})" if high is not None else f">= {low}"
        raise ValueError(f"Invalid {name}: {value} (must be {bound})")


def _check_betas(betas):
    for i, b in enumerate(betas):
        _check_range(f"beta parameter at index {i}", b, 0.0, 1.0)


__all__ = ["Optimizer", "ParamGroup"]
