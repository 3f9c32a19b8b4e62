"""`eager.backends`: the switches PyTorch scripts set for accelerators, so those lines run.

On the CPU they change nothing: `eager.backends.cuda.matmul.allow_tf32 = True`,
`eager.backends.cudnn.benchmark = True`; `eager.backends.mps.is_available()` is False.
"""
from __future__ import annotations

import types


class _Flags(types.SimpleNamespace):
    """A namespace of settings that are recorded and have no effect on the CPU."""


cuda = types.SimpleNamespace(matmul=_Flags(allow_tf32=False,
                                           allow_fp16_reduced_precision_reduction=True,
                                           allow_bf16_reduced_precision_reduction=True),
                             is_built=lambda: False)
cudnn = _Flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=True,
               is_available=lambda: False)
mps = types.SimpleNamespace(is_available=lambda: False, is_built=lambda: False)
