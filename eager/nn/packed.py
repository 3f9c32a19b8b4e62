"""PackedSequence, pack_padded_sequence, pad_packed_sequence and pack_sequence, as
torch.nn.utils.rnn's, and recurrent layers run on a PackedSequence.

A packed batch holds the steps of sequences sorted by decreasing length, time-major:
`batch_sizes[t]` sequences are still running at step t. The lengths are Python numbers a
program decides shapes with, so a trace reads them once (a lengths tensor made inside a
traced function cannot be read: the tracer refuses it and names the line). nn.LSTM / GRU
/ RNN run a packed batch one sequence at a time (each through the layer's own unpacked
code, so gradients, both directions and every layer are as for a padded batch cut to that
sequence's length), then pack the outputs again.

>>> packed = pack_padded_sequence(padded, [3, 1], batch_first=True)
>>> out, (h, c) = lstm(packed)
>>> out, lengths = pad_packed_sequence(out, batch_first=True)
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from .. import functions as T
from ..errors import op_error
from ..indexing import index_select
from ..tensor import Tensor


class PackedSequence(namedtuple("PackedSequence",
                                ["data", "batch_sizes", "sorted_indices", "unsorted_indices"])):
    """(data, batch_sizes, sorted_indices, unsorted_indices), as PyTorch's."""

    __slots__ = ()

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None and sorted_indices is not None:
            unsorted_indices = T.tensor(np.argsort(_ints(sorted_indices)).astype(np.int64))
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def lengths(self) -> list:
        """Each sequence's length, in sorted (packed) order."""
        sizes = _ints(self.batch_sizes)
        return [sum(1 for s in sizes if s > b) for b in range(sizes[0] if sizes else 0)]

    def to(self, *args, **kwargs):
        return type(self)(self.data.to(*args, **kwargs), self.batch_sizes,
                          self.sorted_indices, self.unsorted_indices)

    @property
    def is_cuda(self) -> bool:
        return False


def _ints(t) -> list:
    if isinstance(t, Tensor):
        return [int(v) for v in t.tolist()]
    return [int(v) for v in t]


def pack_padded_sequence(input, lengths, batch_first: bool = False,
                         enforce_sorted: bool = True) -> PackedSequence:
    """Pack a padded batch (T, B, *) ((B, T, *) with `batch_first`) of sequences with the
    given lengths; `enforce_sorted=False` sorts them by length first."""
    x = T.as_tensor(input, "pack_padded_sequence")
    lengths = _ints(lengths)
    if x.ndim < 2:
        raise op_error("pack_padded_sequence", f"expects a padded batch of at least 2 "
                       f"dimensions, got {tuple(x.shape)}", (x,), exc=ValueError)
    if batch_first:
        x = T.transpose(x, 0, 1)
    steps, batch = x.shape[0], x.shape[1]
    if len(lengths) != batch:
        raise op_error("pack_padded_sequence", f"expected {batch} lengths (the batch size), "
                       f"got {len(lengths)}", (x,), exc=ValueError)
    if any(n <= 0 or n > steps for n in lengths):
        raise op_error("pack_padded_sequence", f"every length must be in 1..{steps} (the "
                       f"padded length), got {lengths}", (x,),
                       hint="drop empty sequences from the batch", exc=RuntimeError)
    if enforce_sorted:
        if any(a < b for a, b in zip(lengths, lengths[1:])):
            raise op_error("pack_padded_sequence", f"`lengths` array must be sorted in "
                           f"decreasing order when `enforce_sorted` is True, got {lengths}",
                           (x,), hint="pass enforce_sorted=False to have them sorted",
                           exc=RuntimeError)
        order, sorted_indices = list(range(batch)), None
    else:
        order = sorted(range(batch), key=lambda b: -lengths[b])  # (stable, as torch.sort)
        sorted_indices = T.tensor(np.array(order, np.int64))
        x = index_select(x, 1, sorted_indices)
    ordered = [lengths[b] for b in order]
    sizes = [sum(1 for n in ordered if n > t) for t in range(ordered[0])]
    data = T.cat([x[t, :sizes[t]] for t in range(len(sizes))], 0)
    return PackedSequence(data, T.tensor(np.array(sizes, np.int64)), sorted_indices)


def pack_sequence(sequences, enforce_sorted: bool = True) -> PackedSequence:
    """Pack a list of (L_i, *) tensors."""
    sequences = list(sequences)
    lengths = [s.shape[0] for s in sequences]
    longest = max(lengths)
    padded = [s if s.shape[0] == longest else T.cat(
        [s, T.zeros((longest - s.shape[0],) + tuple(s.shape[1:]), dtype=s.dtype)], 0)
        for s in sequences]
    return pack_padded_sequence(T.stack(padded, 1), lengths, enforce_sorted=enforce_sorted)


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False,
                        padding_value: float = 0.0, total_length=None):
    """(padded batch, lengths): the inverse of pack_padded_sequence, in the original batch
    order."""
    if not isinstance(sequence, PackedSequence):
        raise TypeError(f"pad_packed_sequence expects a PackedSequence, got "
                        f"{type(sequence).__name__}")
    data = sequence.data
    sizes = _ints(sequence.batch_sizes)
    batch, steps = sizes[0], len(sizes)
    if total_length is not None:
        if total_length < steps:
            raise ValueError(f"Expected total_length to be at least the length of the "
                             f"longest sequence ({steps}), got {total_length}")
    rows, start = [], 0
    for n in sizes:
        step = data[start:start + n]
        start += n
        if n < batch:
            fill = T.full((batch - n,) + tuple(data.shape[1:]), padding_value, dtype=data.dtype)
            step = T.cat([step, fill], 0)
        rows.append(step)
    for _ in range(steps, total_length or steps):
        rows.append(T.full((batch,) + tuple(data.shape[1:]), padding_value, dtype=data.dtype))
    padded = T.stack(rows, 0)
    lengths = sequence.lengths()
    if sequence.unsorted_indices is not None:
        padded = index_select(padded, 1, sequence.unsorted_indices)
        lengths = [lengths[i] for i in _ints(sequence.unsorted_indices)]
    if batch_first:
        padded = T.transpose(padded, 0, 1)
    return padded, T.tensor(np.array(lengths, np.int64))


def forward_packed(layer, packed: PackedSequence, hx=None):
    """`layer(packed, hx)` for nn.RNN / LSTM / GRU: each sequence through the layer's
    unpacked forward, the outputs packed again; h_n (and c_n) in the caller's order."""
    lstm = layer.mode == "LSTM"
    lengths = packed.lengths()
    padded, _ = pad_packed_sequence(PackedSequence(packed.data, packed.batch_sizes))
    if hx is not None and packed.sorted_indices is not None:  # (given in the caller's order)
        hx = tuple(index_select(h, 1, packed.sorted_indices) for h in hx) if lstm \
            else index_select(hx, 1, packed.sorted_indices)
    outs, states = [], []
    for b, n in enumerate(lengths):
        x = padded[:n, b:b + 1]
        if layer.batch_first:
            x = T.transpose(x, 0, 1)
        h = None
        if hx is not None:
            h = (hx[0][:, b:b + 1], hx[1][:, b:b + 1]) if lstm else hx[:, b:b + 1]
        out, state = layer.forward(x, h)
        outs.append(T.transpose(out, 0, 1) if layer.batch_first else out)  # (n, 1, H)
        states.append(state)
    sizes = _ints(packed.batch_sizes)
    data = T.cat([T.cat([outs[b][t] for b in range(sizes[t])], 0)
                  for t in range(len(sizes))], 0)
    result = PackedSequence(data, packed.batch_sizes, packed.sorted_indices,
                            packed.unsorted_indices)

    def gather(parts):
        h = T.cat(parts, 1)
        if packed.unsorted_indices is not None:
            h = index_select(h, 1, packed.unsorted_indices)
        return h

    if lstm:
        return result, (gather([s[0] for s in states]), gather([s[1] for s in states]))
    return result, gather(states)


__all__ = ["PackedSequence", "pack_padded_sequence", "pad_packed_sequence", "pack_sequence"]
