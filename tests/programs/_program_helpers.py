"""Shared by the program tests: run one training program eagerly and compiled with the
same seed, and compare everything a user could look at after every step."""
from __future__ import annotations

import numpy as np

import eager


def snapshot(modules, optimizers) -> dict:
    """Copies of everything a step changes: parameters, .grad, buffers, optimizer state."""
    snap = {}
    for m_i, module in enumerate(modules):
        for name, p in module.named_parameters():
            snap[f"m{m_i}.{name}"] = p.detach().numpy().copy()
            snap[f"m{m_i}.{name}.grad"] = None if p.grad is None else p.grad.numpy().copy()
        for name, b in module.named_buffers():
            snap[f"m{m_i}.buffer.{name}"] = b.numpy().copy()
    for o_i, opt in enumerate(optimizers):
        state = opt.state_dict()
        for g_i, group in enumerate(state["param_groups"]):
            for key, value in group.items():
                if key != "params":
                    snap[f"opt{o_i}.group{g_i}.{key}"] = value
        for p_id, per_param in state["state"].items():
            for key, value in per_param.items():
                snap[f"opt{o_i}.state{p_id}.{key}"] = (
                    value.numpy().copy() if isinstance(value, eager.Tensor) else value)
    return snap


def assert_same(compiled: dict, eager_: dict, step: int, rtol: float, atol: float) -> None:
    assert list(compiled) == list(eager_), f"step {step}: different state keys"
    for key, e in eager_.items():
        c = compiled[key]
        where = f"step {step}: {key}"
        if e is None or c is None:
            assert e is None and c is None, where
        elif isinstance(e, np.ndarray):
            assert c.dtype == e.dtype and c.shape == e.shape, where
            np.testing.assert_allclose(c, e, rtol=rtol, atol=atol, err_msg=where)
        elif isinstance(e, float):
            np.testing.assert_allclose(c, e, rtol=rtol, atol=atol, err_msg=where)
        else:
            assert c == e, (where, c, e)


def compare_runs(run, steps: int, backend: str, rtol: float = 2e-5, atol: float = 1e-6):
    """`run(compiled, backend)` yields (outputs, snapshot) after each training step; the
    compiled run must match the eager one at every step. Returns the eager outputs."""
    eager_steps = list(run(False, None))
    compiled_steps = list(run(True, backend))
    assert len(eager_steps) == len(compiled_steps) == steps
    for i, ((e_out, e_snap), (c_out, c_snap)) in enumerate(zip(eager_steps, compiled_steps)):
        np.testing.assert_allclose(np.asarray(c_out, dtype=np.float64),
                                   np.asarray(e_out, dtype=np.float64),
                                   rtol=rtol, atol=atol, err_msg=f"step {i}: outputs")
        assert_same(c_snap, e_snap, i, rtol, atol)
    return [out for out, _ in eager_steps]
