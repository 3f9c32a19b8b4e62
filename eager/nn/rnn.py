"""Recurrent layers: nn.RNN, nn.LSTM, nn.GRU and their cells (PyTorch's names, parameter
layouts, gate orders and initialization, so a state dict maps one to one).

Written with registry ops, so they differentiate, trace and compile.  A layer projects the
input of ALL time steps with one matmul up front (x @ W_ih^T + b for the whole sequence).
An LSTM layer then runs its whole time loop as ONE registry op per direction
(`eager.ops_rnn.lstm_recurrence`, as PyTorch's mkldnn_rnn_layer; compiled, one Numba call
doing per step the W_hh product and the gate math), its backward one more, plus one dW_hh
product over all steps.  RNN and GRU (and an LSTM of mixed dtypes) run each time step as
one matmul with W_hh plus the gate math, which the fuser turns into one elementwise kernel;
that Python loop unrolls when traced: the trace is keyed by the input's shapes, so one
sequence length is one trace.  Cells are always the per-step code.

Equations (PyTorch's documentation), gates in this order in the stacked weights:
  RNN:  h' = act(W_ih x + b_ih + W_hh h + b_hh)                 act = tanh | relu
  LSTM: i, f, g, o = split(W_ih x + b_ih + W_hh h + b_hh)
        c' = sigmoid(f) c + sigmoid(i) tanh(g);  h' = sigmoid(o) tanh(c')
  GRU:  r, z, n from W_ih x + b_ih (ir, iz, in) and W_hh h + b_hh (hr, hz, hn)
        r = sigmoid(ir + hr), z = sigmoid(iz + hz), n = tanh(in + r hn), h' = (1 - z) n + z h
"""
from __future__ import annotations

import math

import numpy as np

from ..dtypes import default_float

from .. import functions as T
from .. import shaping as S
from ..device import check_device
from ..dispatch import is_grad_enabled
from ..dtypes import is_floating
from ..errors import op_error
from ..functions import getitem_basic
from ..ops_rnn import lstm_recurrence
from . import functional as F
from . import init
from .module import Module, Parameter

__all__ = ["RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell"]

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _empty(*shape):
    return Parameter(T.Tensor._wrap(np.zeros(shape, default_float())))


# --------------------------------------------------------------------------------------
# one time step: `gx` is the input's projection W_ih x + b_ih (for RNN/LSTM also + b_hh)

def _rnn_step(mode, gx, h, w_hh):
    pre = T.add(gx, T.matmul(h, T.t(w_hh)))
    return T.tanh(pre) if mode == "RNN_TANH" else T.relu(pre)


def _lstm_step(gx, h, c, w_hh):
    gates = T.add(gx, T.matmul(h, T.t(w_hh)))
    i, f, g, o = S.chunk(gates, 4, -1)
    c = T.add(T.mul(T.sigmoid(f), c), T.mul(T.sigmoid(i), T.tanh(g)))
    return T.mul(T.sigmoid(o), T.tanh(c)), c


def _gru_step(gx, h, w_hh, b_hh):
    gh = T.matmul(h, T.t(w_hh))
    if b_hh is not None:
        gh = T.add(gh, b_hh)
    x_r, x_z, x_n = S.chunk(gx, 3, -1)
    h_r, h_z, h_n = S.chunk(gh, 3, -1)
    r = T.sigmoid(T.add(x_r, h_r))
    z = T.sigmoid(T.add(x_z, h_z))
    n = T.tanh(T.add(x_n, T.mul(r, h_n)))
    return T.add(n, T.mul(z, T.sub(h, n)))  # (1 - z) n + z h


def _project(mode, x, w_ih, b_ih, b_hh):
    """W_ih x + b_ih over every leading dim at once; RNN/LSTM fold b_hh in too (it is added
    once per step either way), GRU keeps b_hn inside r * (W_hn h + b_hn)."""
    gx = T.matmul(x, T.t(w_ih))
    if b_ih is not None:
        gx = T.add(gx, T.add(b_ih, b_hh) if mode != "GRU" else b_ih)
    return gx


def _cell(mode, x, state, w_ih, w_hh, b_ih, b_hh):
    gx = _project(mode, x, w_ih, b_ih, b_hh)
    if mode == "LSTM":
        return _lstm_step(gx, state[0], state[1], w_hh)
    if mode == "GRU":
        return _gru_step(gx, state, w_hh, b_hh)
    return _rnn_step(mode, gx, state, w_hh)


def _lstm_fused(gx, state, w_hh, reverse):
    """One direction of one LSTM layer as ONE registry op over all steps (eager.ops_rnn),
    or None where the per-step code serves (no steps, a symbolic length, mixed dtypes).
    Returns the outputs (L, N, H) and the final state, as `_direction`."""
    h0, c0 = state
    steps = gx.shape[0]
    if not isinstance(steps, int) or steps == 0 \
            or len({np.dtype(x.dtype) for x in (gx, w_hh, h0, c0)}) != 1:
        return None
    # the gate activations are kept for the backward only where one can run
    save = is_grad_enabled() and any(x.requires_grad for x in (gx, w_hh, h0, c0))
    y = lstm_recurrence(gx, w_hh, h0, c0, reverse, save)
    whole = ((0, None, 1), (0, None, 1))
    hs = getitem_basic(y, ((0, steps, 1),) + whole)
    h_n = getitem_basic(hs, (0 if reverse else steps - 1,))
    c_n = getitem_basic(y, (steps if reverse else 2 * steps - 1,))
    return hs, (h_n, c_n)


def _direction(mode, gx, state, w_hh, b_hh, reverse):
    """Run one direction of one layer over the projected sequence gx (L, N, G); returns the
    outputs (L, N, H) and the final state."""
    if mode == "LSTM":
        fused = _lstm_fused(gx, state, w_hh, reverse)
        if fused is not None:
            return fused
    steps = S.unbind(gx, 0)
    outs = [None] * len(steps)
    order = range(len(steps) - 1, -1, -1) if reverse else range(len(steps))
    for t in order:
        if mode == "LSTM":
            state = _lstm_step(steps[t], state[0], state[1], w_hh)
            outs[t] = state[0]
        elif mode == "GRU":
            state = outs[t] = _gru_step(steps[t], state, w_hh, b_hh)
        else:
            state = outs[t] = _rnn_step(mode, steps[t], state, w_hh)
    return T.stack(outs, 0), state


# --------------------------------------------------------------------------------------
# the layers

class RNNBase(Module):
    """The shared body of nn.RNN, nn.LSTM and nn.GRU."""

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, proj_size=0,
                 device=None, dtype=None):
        super().__init__()
        name = type(self).__name__
        check_device(device, f"nn.{name}")
        if proj_size:
            raise NotImplementedError(f"nn.{name}: proj_size={proj_size} is not supported; "
                                      "use proj_size=0 and a Linear layer on the output")
        if not isinstance(hidden_size, int) or hidden_size <= 0:
            raise ValueError(f"nn.{name}: hidden_size must be a positive int, got "
                             f"{hidden_size!r}")
        if not isinstance(num_layers, int) or num_layers <= 0:
            raise ValueError(f"nn.{name}: num_layers must be a positive int, got "
                             f"{num_layers!r}")
        if isinstance(dropout, bool) or not 0 <= dropout <= 1:
            raise ValueError(f"nn.{name}: dropout must be a number in [0, 1], got "
                             f"{dropout!r}")
        self.mode = mode
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first = bias, batch_first
        self.dropout, self.bidirectional, self.proj_size = float(dropout), bidirectional, 0
        gate = _GATES[mode] * hidden_size
        dirs = 2 if bidirectional else 1
        self._flat_weights_names = []
        for layer in range(num_layers):
            size_in = input_size if layer == 0 else hidden_size * dirs
            for suffix in ("", "_reverse")[:dirs]:
                shapes = [("weight_ih", (gate, size_in)), ("weight_hh", (gate, hidden_size))]
                if bias:
                    shapes += [("bias_ih", (gate,)), ("bias_hh", (gate,))]
                for kind, shape in shapes:
                    pname = f"{kind}_l{layer}{suffix}"
                    self.register_parameter(pname, _empty(*shape))
                    self._flat_weights_names.append(pname)
        self.reset_parameters()
        if dtype is not None:
            for p in self.parameters():
                p._data = p._data.astype(dtype)

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.hidden_size)
        for w in self.parameters():
            init.uniform_(w, -stdv, stdv)

    def flatten_parameters(self):
        """A no-op (PyTorch packs cuDNN weights here)."""

    @property
    def all_weights(self):
        per = 4 if self.bias else 2
        ws = [getattr(self, n) for n in self._flat_weights_names]
        return [ws[k:k + per] for k in range(0, len(ws), per)]

    def _layer_weights(self, layer, suffix):
        get = lambda kind: getattr(self, f"{kind}_l{layer}{suffix}")  # noqa: E731
        if self.bias:
            return get("weight_ih"), get("weight_hh"), get("bias_ih"), get("bias_hh")
        return get("weight_ih"), get("weight_hh"), None, None

    def _check_input(self, x, hx):
        name = f"nn.{type(self).__name__}"
        if x.ndim not in (2, 3):
            raise op_error(name, f"expects a 2-d (unbatched) or 3-d input, got shape "
                           f"{tuple(x.shape)}", (x,), exc=ValueError)
        if x.shape[-1] != self.input_size:
            raise op_error(name, f"input.size(-1) must be equal to input_size. Expected "
                           f"{self.input_size}, got {x.shape[-1]}", (x,),
                           hint=f"the input's last dim is the feature dim ({self.input_size})",
                           exc=RuntimeError)
        if not is_floating(x.dtype):
            raise op_error(name, f"needs a floating-point input, got {x.dtype}", (x,),
                           hint="cast with .float() first", exc=TypeError)

    def _state_shape(self, x):
        dirs = 2 if self.bidirectional else 1
        lead = (self.num_layers * dirs,)
        return lead + ((x.shape[1],) if x.ndim == 3 else ()) + (self.hidden_size,)

    def _check_state(self, h, shape, what):
        if tuple(h.shape) != shape:
            raise op_error(f"nn.{type(self).__name__}", f"Expected {what} size {shape}, got "
                           f"{tuple(h.shape)}", (h,), exc=RuntimeError)

    def forward(self, input, hx=None):
        if isinstance(input, tuple) and type(input).__name__ == "PackedSequence":
            from .packed import forward_packed

            return forward_packed(self, input, hx)
        self._check_input(input, hx)
        x = input
        batched = x.ndim == 3
        if batched and self.batch_first:
            x = T.transpose(x, 0, 1)
        if not batched:
            x = T.unsqueeze(x, 1)
        shape = self._state_shape(input if not (batched and self.batch_first)
                                  else T.transpose(input, 0, 1))
        lstm = self.mode == "LSTM"
        if hx is None:
            zeros = T.zeros(shape, dtype=x.dtype)
            hx = (zeros, zeros) if lstm else zeros
        if lstm:
            if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                raise op_error("nn.LSTM", "hx must be a tuple (h_0, c_0)", exc=TypeError)
            self._check_state(hx[0], shape, "hidden[0]")
            self._check_state(hx[1], shape, "hidden[1]")
            h0, c0 = hx
            if not batched:
                h0, c0 = T.unsqueeze(h0, 1), T.unsqueeze(c0, 1)
        else:
            self._check_state(hx, shape, "hidden")
            h0 = hx if batched else T.unsqueeze(hx, 1)
        dirs = 2 if self.bidirectional else 1
        h_n, c_n = [], []
        for layer in range(self.num_layers):
            if layer and self.dropout and self.training:
                x = F.dropout(x, self.dropout, True)
            outs = []
            for d, suffix in enumerate(("", "_reverse")[:dirs]):
                k = layer * dirs + d
                w_ih, w_hh, b_ih, b_hh = self._layer_weights(layer, suffix)
                gx = _project(self.mode, x, w_ih, b_ih, b_hh)
                state = (h0[k], c0[k]) if lstm else h0[k]
                out, state = _direction(self.mode, gx, state, w_hh, b_hh, bool(d))
                outs.append(out)
                if lstm:
                    h_n.append(state[0])
                    c_n.append(state[1])
                else:
                    h_n.append(state)
            x = outs[0] if dirs == 1 else T.cat(outs, -1)
        h_n = T.stack(h_n, 0)
        c_n = T.stack(c_n, 0) if lstm else None
        if not batched:
            x = T.squeeze(x, 1)
            h_n = T.squeeze(h_n, 1)
            c_n = T.squeeze(c_n, 1) if lstm else None
        elif self.batch_first:
            x = T.transpose(x, 0, 1)
        return (x, (h_n, c_n)) if lstm else (x, h_n)

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s


class RNN(RNNBase):
    """Elman RNN, h' = tanh|relu(W_ih x + b_ih + W_hh h + b_hh)."""

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, device=None,
                 dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"nn.RNN: unknown nonlinearity {nonlinearity!r} (tanh or relu)")
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size,
                         hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         device=device, dtype=dtype)
        self.nonlinearity = nonlinearity

    def extra_repr(self):
        s = super().extra_repr()
        return s + (", nonlinearity='relu'" if self.nonlinearity == "relu" else "")


class LSTM(RNNBase):
    """Long short-term memory; gates i, f, g, o stacked in that order."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, proj_size, device, dtype)


class GRU(RNNBase):
    """Gated recurrent unit; gates r, z, n stacked in that order."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, device=None, dtype=None):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, device=device, dtype=dtype)


# --------------------------------------------------------------------------------------
# the cells

class _CellBase(Module):
    mode = ""

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__()
        check_device(device, f"nn.{type(self).__name__}")
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        gate = _GATES[self.mode] * hidden_size
        self.weight_ih = _empty(gate, input_size)
        self.weight_hh = _empty(gate, hidden_size)
        if bias:
            self.bias_ih = _empty(gate)
            self.bias_hh = _empty(gate)
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        stdv = 1.0 / math.sqrt(hidden_size)
        for w in self.parameters():
            init.uniform_(w, -stdv, stdv)
        if dtype is not None:
            for p in self.parameters():
                p._data = p._data.astype(dtype)

    def _prepare(self, x, hx):
        name = f"nn.{type(self).__name__}"
        if x.ndim not in (1, 2):
            raise op_error(name, f"expects a 1-d (unbatched) or 2-d input, got shape "
                           f"{tuple(x.shape)}", (x,), exc=ValueError)
        if x.shape[-1] != self.input_size:
            raise op_error(name, f"input has inconsistent input_size: got {x.shape[-1]} "
                           f"expected {self.input_size}", (x,), exc=RuntimeError)
        shape = tuple(x.shape[:-1]) + (self.hidden_size,)
        if hx is None:
            z = T.zeros(shape, dtype=x.dtype)
            hx = (z, z) if self.mode == "LSTM" else z
        for h in (hx if self.mode == "LSTM" else (hx,)):
            if tuple(h.shape) != shape:
                raise op_error(name, f"hidden state has shape {tuple(h.shape)}, expected "
                               f"{shape}", (x, h), exc=RuntimeError)
        return hx

    def forward(self, input, hx=None):
        hx = self._prepare(input, hx)
        return _cell(self.mode, input, hx, self.weight_ih, self.weight_hh, self.bias_ih,
                     self.bias_hh)

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        return s + (", bias=False" if not self.bias else "")


class RNNCell(_CellBase):
    mode = "RNN_TANH"

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None,
                 dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"nn.RNNCell: unknown nonlinearity {nonlinearity!r} "
                             "(tanh or relu)")
        super().__init__(input_size, hidden_size, bias, device, dtype)
        self.mode = "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"
        self.nonlinearity = nonlinearity

    def extra_repr(self):
        s = super().extra_repr()
        return s + (", nonlinearity='relu'" if self.nonlinearity == "relu" else "")


class LSTMCell(_CellBase):
    mode = "LSTM"


class GRUCell(_CellBase):
    mode = "GRU"
