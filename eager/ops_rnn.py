"""Registry rows for an LSTM layer's whole time loop: `lstm_recurrence` and its backward
`lstm_recurrence_backward` (PyTorch's mkldnn_rnn_layer: one primitive per layer and
direction instead of T matmuls, T gate kernels and, in backward, T more of each and T cats).

``lstm_recurrence(gx, w_hh, h0, c0, reverse, save)`` runs, for t in 0..T-1 (T-1..0 when
`reverse`), with gx (T, B, 4H) the input projection W_ih x + b_ih + b_hh of every step:

    a = gx[t] + h @ w_hh^T;  i, f, g, o = sigmoid, sigmoid, tanh, sigmoid of a's quarters
    c = f c + i g;  h = o tanh(c);  hs[t], cs[t] = h, c

Its one output packs, along dim 0, rows of (B, H): hs (T rows), cs (T rows) and, with
`save` (a forward whose backward will run), the gate activations i, f, g, o of every step
(4T rows holding (T, B, 4H) in C order) that the backward reads.  Without `save` (no
grad) there are 2T rows.  hs = out[:T] and the final cell state out[2T-1] (out[T]
reversed) are contiguous views.  Every row is an output with a gradient (nn.LSTM reads
only hs and a final c: the gradient of the other rows is then zero).

``lstm_recurrence_backward(g, y, w_hh, c0, reverse)`` takes the gradient g of that packed
output and the output y (save=True) and gives (4T + 2) rows of (B, H): dgx (T, B, 4H) in
C order, then dh0, then dc0.  dW_hh is ONE product outside,
dgx^T (4H, T*B) @ h_prev (T*B, H) (see the forward's vjp): a registry matmul, one big BLAS
call.  The backward has no vjp of its own: a double backward through it raises (PyTorch's
LSTM has one; ours says so, never a wrong number).

Both implementations are numpy loops over time (eager, the interpreter); the numba backend
runs the same loops in one Numba call per row (codegen.step_kernels_rnn), the per-step
product through the same OpenBLAS numpy calls.
"""
from __future__ import annotations

import numpy as np

from .dispatch import apply
from .errors import op_error
from .ops import OPS, TensorType, _sigmoid_impl, register


def _check(op, gx, w_hh, h0, c0):
    if gx.ndim != 3 or w_hh.ndim != 2 or h0.ndim != 2 or c0.ndim != 2:
        raise op_error(op, f"expected gx (T, B, 4H), w_hh (4H, H), h0 and c0 (B, H), got "
                       f"{tuple(gx.shape)}, {tuple(w_hh.shape)}, {tuple(h0.shape)}, "
                       f"{tuple(c0.shape)}", (gx, w_hh, h0, c0))
    t, b, g4 = gx.shape
    h = w_hh.shape[1]
    if g4 != 4 * h or tuple(w_hh.shape) != (4 * h, h) or tuple(h0.shape) != (b, h) \
            or tuple(c0.shape) != (b, h):
        raise op_error(op, f"shapes do not fit one LSTM layer of hidden size {h}: gx "
                       f"{tuple(gx.shape)}, w_hh {tuple(w_hh.shape)}, h0 {tuple(h0.shape)}, "
                       f"c0 {tuple(c0.shape)} (need gx (T, B, 4H), w_hh (4H, H), h0/c0 (B, H))",
                       (gx, w_hh, h0, c0))
    if len({np.dtype(x.dtype) for x in (gx, w_hh, h0, c0)}) != 1 \
            or np.dtype(gx.dtype).kind != "f":
        raise op_error(op, f"needs one floating dtype, got {gx.dtype}, {w_hh.dtype}, "
                       f"{h0.dtype}, {c0.dtype}", (gx, w_hh, h0, c0),
                       hint="cast the input and the states to the weights' dtype")
    return t, b, h


def _forward_infer(gx, w_hh, h0, c0, reverse, save):
    t, b, h = _check("lstm_recurrence", gx, w_hh, h0, c0)
    return TensorType(((6 if save else 2) * t, b, h), gx.dtype)


def _order(t, reverse):
    return range(t - 1, -1, -1) if reverse else range(t)


def _forward_impl(gx, w_hh, h0, c0, reverse, save):
    t, b, hid = gx.shape[0], gx.shape[1], w_hh.shape[1]
    y = np.empty(((6 if save else 2) * t, b, hid), gx.dtype)
    hs, cs = y[:t], y[t:2 * t]
    acts = y[2 * t:].reshape(t, b, 4 * hid) if save else None
    h, c = h0, c0
    w_t = w_hh.T
    for s in _order(t, reverse):
        a = gx[s] + step_product(h, w_t)
        i, f = _sigmoid_impl(a[:, :hid]), _sigmoid_impl(a[:, hid:2 * hid])
        g, o = np.tanh(a[:, 2 * hid:3 * hid]), _sigmoid_impl(a[:, 3 * hid:])
        c = f * c + i * g
        h = o * np.tanh(c)
        hs[s], cs[s] = h, c
        if save:
            acts[s, :, :hid], acts[s, :, hid:2 * hid] = i, f
            acts[s, :, 2 * hid:3 * hid], acts[s, :, 3 * hid:] = g, o
    return y


def step_product(h, w_t):
    """One time step's recurrent product h (B, H) @ w_hh^T (H, 4H) (or dA (B, 4H) @ w_hh):
    the one place a faster small-matrix product would go."""
    return h @ w_t


def _backward_infer(g, y, w_hh, c0, reverse):
    b, hid = c0.shape[0], w_hh.shape[1]
    t = y.shape[0] // 6 if y.ndim == 3 else 0
    if y.ndim != 3 or y.shape[0] != 6 * t or tuple(y.shape[1:]) != (b, hid) \
            or tuple(g.shape) != tuple(y.shape) or tuple(w_hh.shape) != (4 * hid, hid):
        raise op_error("lstm_recurrence_backward", f"expected the gradient and the saved "
                       f"output of lstm_recurrence(save=True), (6T, B, H), with w_hh (4H, H) "
                       f"and c0 (B, H); got {tuple(g.shape)}, {tuple(y.shape)}, "
                       f"{tuple(w_hh.shape)}, {tuple(c0.shape)}", (g, y, w_hh, c0))
    return TensorType((4 * t + 2, b, hid), y.dtype)


def _backward_impl(g, y, w_hh, c0, reverse):
    t, b, hid = y.shape[0] // 6, y.shape[1], y.shape[2]
    out = np.empty((4 * t + 2, b, hid), y.dtype)
    dgx = out[:4 * t].reshape(t, b, 4 * hid)
    cs, acts = y[t:2 * t], y[2 * t:].reshape(t, b, 4 * hid)
    g_acts = g[2 * t:].reshape(t, b, 4 * hid)
    dh = np.zeros((b, hid), y.dtype)
    dc = np.zeros((b, hid), y.dtype)
    one = y.dtype.type(1)
    for s in _order(t, not reverse):
        prev = s + 1 if reverse else s - 1
        c_prev = c0 if prev < 0 or prev >= t else cs[prev]
        i, f = acts[s, :, :hid], acts[s, :, hid:2 * hid]
        gg, o = acts[s, :, 2 * hid:3 * hid], acts[s, :, 3 * hid:]
        dh = g[s] + dh
        tc = np.tanh(cs[s])
        dc = g[t + s] + dc + dh * o * (one - tc * tc)
        ga = g_acts[s]   # (zeros, unless something reads the gate rows)
        da = dgx[s]
        da[:, :hid] = (dc * gg + ga[:, :hid]) * i * (one - i)
        da[:, hid:2 * hid] = (dc * c_prev + ga[:, hid:2 * hid]) * f * (one - f)
        da[:, 2 * hid:3 * hid] = (dc * i + ga[:, 2 * hid:3 * hid]) * (one - gg * gg)
        da[:, 3 * hid:] = (dh * tc + ga[:, 3 * hid:]) * o * (one - o)
        dc = dc * f
        dh = step_product(da, w_hh)
    out[4 * t], out[4 * t + 1] = dh, dc
    return out


def _whole(rows, ndim=3):
    return ((rows[0], rows[1], 1),) + ((0, None, 1),) * (ndim - 1)


def _forward_vjp(g, out, gx, w_hh, h0, c0, reverse, save):
    from . import functions as fn

    if not save:
        raise op_error("lstm_recurrence", "was run with save=False (no gradient expected), "
                       "but a gradient reached it", (g,),
                       hint="run the LSTM with grad enabled when its backward is needed")
    t, b, g4 = gx.shape
    hid = g4 // 4
    back = lstm_recurrence_backward(g, out, w_hh, c0, reverse)
    dgx = fn.reshape(fn.getitem_basic(back, _whole((0, 4 * t))), (t, b, g4))
    dh0 = fn.getitem_basic(back, (4 * t,))
    dc0 = fn.getitem_basic(back, (4 * t + 1,))
    # dW_hh = sum over steps of dA_s^T h_prev(s): one product over all steps
    if t == 0:
        dw = fn.broadcast_to(fn.const(0, w_hh.dtype), tuple(w_hh.shape))
    else:
        # the hidden state each step's product read: h0, then hs of the steps before
        prev = fn.reshape(h0, (1, b, hid))
        if t > 1:
            hs = fn.getitem_basic(out, _whole((1, t) if reverse else (0, t - 1)))
            prev = fn.cat([hs, prev] if reverse else [prev, hs], 0)
        dw = fn.matmul(fn.transpose(fn.reshape(dgx, (t * b, g4)), 0, 1),
                       fn.reshape(prev, (t * b, hid)))
    return dgx, dw, dh0, dc0


def _backward_vjp(*args, **params):
    raise op_error("lstm_recurrence_backward", "has no derivative: a double backward (a "
                   "gradient of a gradient, create_graph=True) through nn.LSTM's fused "
                   "recurrence is not supported",
                   hint="differentiate an LSTM written with LSTMCell (or nn.GRU/nn.RNN) "
                        "for second derivatives", exc=NotImplementedError)


def lstm_recurrence(gx, w_hh, h0, c0, reverse=False, save=True):
    """One LSTM layer's time loop: packed (hs, cs[, gate activations]) rows (see above)."""
    return apply(OPS["lstm_recurrence"], gx, w_hh, h0, c0, reverse=bool(reverse),
                 save=bool(save))


def lstm_recurrence_backward(g, y, w_hh, c0, reverse=False):
    """The gradient of lstm_recurrence: packed (dgx, dh0, dc0) rows (see above)."""
    return apply(OPS["lstm_recurrence_backward"], g, y, w_hh, c0, reverse=bool(reverse))


register("lstm_recurrence", "matmul", 4, _forward_impl, _forward_infer, vjp=_forward_vjp,
         saves=(1, 2, 3), saves_out=True, params=("reverse", "save"),
         doc="One LSTM layer's loop over time from the input projection gx (T, B, 4H): "
             "rows hs (T), cs (T) and with save the gate activations (4T) of (B, H).")
register("lstm_recurrence_backward", "matmul", 4, _backward_impl, _backward_infer,
         vjp=_backward_vjp, params=("reverse",),
         doc="lstm_recurrence's gradient from its output's gradient and saved output: rows "
             "dgx (4T), dh0, dc0 of (B, H).")

__all__ = ["lstm_recurrence", "lstm_recurrence_backward", "step_product"]
