"""`eager.nn.utils.rnn`, as torch.nn.utils.rnn: padding a list of variable-length sequences
into one batch (the usual DataLoader collate_fn of a seq2seq or text script).

>>> import eager
>>> from eager.nn.utils.rnn import pad_sequence
>>> pad_sequence([eager.ones(3), eager.ones(1)], batch_first=True).tolist()
[[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]
"""
from __future__ import annotations

from .. import functions as T
from ..errors import op_error
from .resample import pad


def pad_sequence(sequences, batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right"):
    """Stack tensors of shape (L_i, *) into (max L, B, *), or (B, max L, *) with
    `batch_first`, filling the missing steps with `padding_value` (differentiable)."""
    sequences = list(sequences)
    if not sequences:
        raise RuntimeError("received an empty list of sequences")
    if padding_side not in ("left", "right"):
        raise ValueError(f"Expected padding_side to be one of left or right, but got "
                         f"{padding_side}.")
    trailing = tuple(sequences[0].shape[1:])
    for s in sequences:
        if s.ndim == 0 or tuple(s.shape[1:]) != trailing:
            raise op_error("pad_sequence", f"every sequence must have shape (L, "
                           f"{', '.join(map(str, trailing))}) like the first, got "
                           f"{tuple(s.shape)}", tuple(sequences),
                           hint="only the first (length) dimension may differ",
                           exc=RuntimeError)
    longest = max(s.shape[0] for s in sequences)
    padded = []
    for s in sequences:
        missing = longest - s.shape[0]
        amounts = (0, 0) * len(trailing) + ((0, missing) if padding_side == "right"
                                            else (missing, 0))
        padded.append(pad(s, amounts, value=padding_value) if missing else s)
    return T.stack(padded, 0 if batch_first else 1)


from .packed import (PackedSequence, pack_padded_sequence, pack_sequence,  # noqa: E402
                     pad_packed_sequence)

__all__ = ["pad_sequence", "PackedSequence", "pack_padded_sequence", "pad_packed_sequence",
           "pack_sequence"]
