"""OpInfo entries of an LSTM layer's time loop (eager/ops_rnn.py): `lstm_recurrence` and
`lstm_recurrence_backward`, against references written here from PyTorch's documented LSTM
equations: loops over time steps, batch rows and hidden units in Python floats (float64),
sharing no code with the rows.

Imported at the end of opinfo.py (which appends `RNN_OPINFOS` to its table).
"""
from __future__ import annotations

import math

import numpy as np
from opinfo import F64, FLOATS, Case, OpInfo, Raw, Sample, shapes, values

from eager import ops_rnn

TOL = {np.dtype(np.float32): (1e-5, 1e-6)}
# the shapes of tests/tracer/test_rnn_traced.py's LSTM layer (L, N, H): the compiled
# cases' float32 kernels are the ones that test compiles (one Numba compile for both)
T, B, H = 3, 3, 6


def _sig(v):
    return 1.0 / (1.0 + math.exp(-v)) if v >= 0 else math.exp(v) / (1.0 + math.exp(v))


def _steps(t, reverse):
    return list(range(t - 1, -1, -1)) if reverse else list(range(t))


def lstm_ref(gx, w, h0, c0, reverse=False, save=True):
    """Rows hs, cs (and the gate activations i, f, g, o of each step as (T, B, 4H))."""
    t, b, g4 = gx.shape
    hid = g4 // 4
    hs, cs = np.zeros((t, b, hid)), np.zeros((t, b, hid))
    acts = np.zeros((t, b, g4))
    h = np.array(h0, np.float64)
    c = np.array(c0, np.float64)
    for s in _steps(t, reverse):
        h_new, c_new = np.zeros((b, hid)), np.zeros((b, hid))
        for n in range(b):
            for j in range(hid):
                pre = [float(gx[s, n, q * hid + j])
                       + sum(float(w[q * hid + j, k]) * h[n, k] for k in range(hid))
                       for q in range(4)]
                i, f, o = _sig(pre[0]), _sig(pre[1]), _sig(pre[3])
                g = math.tanh(pre[2]) if not math.isnan(pre[2]) else math.nan
                c_new[n, j] = f * c[n, j] + i * g
                h_new[n, j] = o * math.tanh(c_new[n, j])
                for q, v in enumerate((i, f, g, o)):
                    acts[s, n, q * hid + j] = v
        h, c = h_new, c_new
        hs[s], cs[s] = h, c
    rows = [hs, cs] + ([acts.reshape(4 * t, b, hid)] if save else [])
    return np.concatenate(rows).astype(gx.dtype)


def lstm_backward_ref(g, y, w, c0, reverse=False):
    """Back through time by the chain rule, one unit at a time: rows dgx, dh0, dc0."""
    t, b, hid = y.shape[0] // 6, y.shape[1], y.shape[2]
    cs, acts = y[t:2 * t], y[2 * t:].reshape(t, b, 4 * hid)
    gh, gc, ga = g[:t], g[t:2 * t], g[2 * t:].reshape(t, b, 4 * hid)
    dgx = np.zeros((t, b, 4 * hid))
    dh, dc = np.zeros((b, hid)), np.zeros((b, hid))
    for s in reversed(_steps(t, reverse)):
        prev = s + 1 if reverse else s - 1
        c_prev = c0 if not 0 <= prev < t else cs[prev]
        for n in range(b):
            for j in range(hid):
                i, f, gg, o = (float(acts[s, n, q * hid + j]) for q in range(4))
                tc = math.tanh(float(cs[s, n, j]))
                d_h = float(gh[s, n, j]) + dh[n, j]
                d_c = float(gc[s, n, j]) + dc[n, j] + d_h * o * (1 - tc * tc)
                d_act = (d_c * gg, d_c * float(c_prev[n, j]), d_c * i, d_h * tc)
                slope = (i * (1 - i), f * (1 - f), 1 - gg * gg, o * (1 - o))
                for q in range(4):
                    dgx[s, n, q * hid + j] = (d_act[q] + float(ga[s, n, q * hid + j])) * slope[q]
                dc[n, j] = d_c * f
        dh = np.array([[sum(dgx[s, n, r] * float(w[r, k]) for r in range(4 * hid))
                        for k in range(hid)] for n in range(b)])
    rows = [dgx.reshape(4 * t, b, hid), dh[None], dc[None]]
    return np.concatenate(rows).astype(y.dtype)


def _inputs(rng, dtype, t=T, b=B, hid=H):
    return (values(rng, (t, b, 4 * hid), dtype), values(rng, (4 * hid, hid), dtype) * 0.5,
            values(rng, (b, hid), dtype), values(rng, (b, hid), dtype))


def _forward_samples(rng, dtype):
    out = [Sample(_inputs(rng, dtype), desc="forward"),
           Sample(_inputs(rng, dtype) + (Raw(True),), desc="reverse"),
           Sample(_inputs(rng, dtype, 1, 1, 2) + (Raw(False), Raw(False)), desc="no save"),
           Sample(_inputs(rng, dtype, 0), desc="no steps")]
    nan = _inputs(rng, dtype)
    nan[0][1, 0, 2] = math.nan      # batch row 0 goes NaN from step 1 on, row 1 stays finite
    out.append(Sample(nan, desc="NaN in the input", special=True))
    return out


def _backward_samples(rng, dtype):
    out = []
    for reverse in (False, True):
        gx, w, h0, c0 = _inputs(rng, dtype)
        y = ops_rnn._forward_impl(gx, w, h0, c0, reverse, True)
        g = values(rng, y.shape, dtype)
        out.append(Sample((g, y, w, c0, Raw(reverse)), desc=f"reverse={reverse}"))
    return out


def _forward_grad_samples(rng):
    return [s for s in _forward_samples(rng, F64) if not s.special and s.desc != "no save"]


def _trained(gx, w, h0, c0):
    """Forward and its backward (by autograd: the vjp's matmul and cat), compiled."""
    return (ops_rnn.lstm_recurrence(gx, w, h0, c0, False, True),
            ops_rnn.lstm_recurrence(gx * 0.5, w, h0, c0, True, False))


def _backward(gx, w, h0, c0, g):
    y = ops_rnn.lstm_recurrence(gx, w, h0, c0, False, True)
    yr = ops_rnn.lstm_recurrence(gx, w, h0, c0, True, True)
    return (ops_rnn.lstm_recurrence_backward(g, y, w, c0, False),
            ops_rnn.lstm_recurrence_backward(g * 2, yr, w, c0, True))


_SHAPES = [(T, B, 4 * H), (4 * H, H), (B, H), (B, H)]

RNN_OPINFOS = [
    OpInfo("lstm_recurrence", "lstm_recurrence",
           lambda gx, w, h0, c0, reverse=False, save=True:
               ops_rnn.lstm_recurrence(gx, w, h0, c0, reverse, save),
           lstm_ref, _forward_samples, FLOATS, _forward_grad_samples, tol=TOL,
           compiled=[Case("lstm_recurrence", _trained, shapes(_SHAPES), tol="reduce")]),
    OpInfo("lstm_recurrence_backward", "lstm_recurrence_backward",
           lambda g, y, w, c0, reverse=False:
               ops_rnn.lstm_recurrence_backward(g, y, w, c0, reverse),
           lstm_backward_ref, _backward_samples, FLOATS, tol=TOL,
           compiled=[Case("lstm_recurrence_backward", _backward,
                          shapes(_SHAPES + [(6 * T, B, H)]), tol="reduce")]),
]
