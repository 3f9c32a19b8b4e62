"""OpInfo entries of the dtype ops (issue 16 item 7), appended to `opinfo.OPINFOS`.

view_dtype's reference packs each element with `struct` and unpacks the bytes as the
target type, sharing no code with numpy's ndarray.view that eager calls."""
from __future__ import annotations

import struct

import numpy as np
from opinfo import ALL, Case, OpInfo, Raw, Sample, shapes, specials, values

import eager

_FORMAT = {"bool": "?", "uint8": "B", "int8": "b", "int16": "h", "uint16": "H", "int32": "i",
           "uint32": "I", "int64": "q", "uint64": "Q", "float16": "e", "float32": "f",
           "float64": "d"}


def _view_ref(x, dtype):
    dtype = np.dtype(dtype)
    src, dst = _FORMAT[x.dtype.name], _FORMAT[dtype.name]
    flat = [v.item() for v in x.reshape(-1)]
    raw = b"".join(struct.pack("<" + src, v) for v in flat)
    out = [struct.unpack_from("<" + dst, raw, i)[0] for i in range(0, len(raw), dtype.itemsize)]
    shape = x.shape[:-1] + (x.shape[-1] * x.dtype.itemsize // dtype.itemsize,) if x.ndim else ()
    return np.array(out, dtype).reshape(shape)


_TARGETS = {"float32": ("int32", "int16", "uint8", "float64"),
            "float64": ("int64", "float32", "uint16"),
            "int32": ("float32", "int8"), "int64": ("float64", "int32"), "bool": ("uint8",)}


def _view_samples(rng, dtype):
    out = []
    for target in _TARGETS[dtype.name]:
        wide = np.dtype(target).itemsize > dtype.itemsize
        shape = (3, 4) if not wide else (3, 8 // dtype.itemsize * 2)
        out.append(Sample((values(rng, shape, dtype), Raw(np.dtype(target))), desc=target))
        if dtype.kind == "f" and not wide:
            out.append(Sample((specials(dtype), Raw(np.dtype(target))), desc=target,
                              special=True))
    return out


def _views(x):
    # the input's bits (no float arithmetic first: NaN payloads are not specified), then
    # integer arithmetic inside a fused kernel. Only views to the same itemsize, which any
    # layout allows: another itemsize needs a contiguous last dim (PyTorch's rule), and
    # every layout is tried here (narrowing views compiled: tests/tracer/test_inplace_views.py)
    same = eager.int32 if x.dtype == eager.float32 else eager.int64
    return x.view(x.dtype) + 1, x.view(same) + 1, x.view(same) * 3 - 7


DTYPE_OPINFOS = [
    OpInfo("view_dtype", "view_dtype", lambda x, dt: x.view(dt), _view_ref, _view_samples, ALL,
           compiled=[Case("view_dtype", _views, shapes([(3, 4)], None, [(0, 4)]))]),
]
