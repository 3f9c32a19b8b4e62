"""`eager.save(obj, f)` / `eager.load(f)`: checkpoints without pickle.

The file is a zip archive (stored, not compressed) holding

- ``eager_save.json``: ``{"format": "eager.save", "version": 1, "root": NODE}``, where a NODE
  describes one value: ``{"t": "dict" | "odict", "items": [[KEY_NODE, NODE], ...]}``,
  ``{"t": "list" | "tuple", "items": [NODE, ...]}``, ``{"t": "tensor", "id": N,
  "requires_grad": bool, "parameter": bool}``, ``{"t": "ndarray", "id": N}``,
  ``{"t": "scalar", "id": N}`` (a numpy scalar), ``{"t": "float", "v": "nan"}`` for
  non-finite floats, ``{"t": "device", "v": "cpu"}``, ``{"t": "dtype", "v": "float32"}``,
  and plain JSON for None, bools, ints, finite floats and strings;
- ``arrays/N.npy``: one array per distinct tensor (a tensor saved twice, like tied weights,
  is stored once and loads as one tensor again).  A bfloat16 array (which .npy cannot name:
  its descr would be a void type) is stored as its uint16 bits, and its node says
  ``"dtype": "bfloat16"``.

Loading parses the JSON and reads each array with ``np.load(allow_pickle=False)``: nothing
in the file can name a Python class or run code. Saving anything else (modules, optimizers,
arbitrary objects) raises a TypeError that says what to save instead (their state_dict()).
PyTorch's ``.pt`` files (pickles) are not read.

>>> import eager, io
>>> buf = io.BytesIO()
>>> eager.save({"w": eager.ones(2), "step": 3}, buf)
>>> _ = buf.seek(0)
>>> eager.load(buf)["step"]
3
"""
from __future__ import annotations

import io
import json
import math
import zipfile
from collections import OrderedDict

import numpy as np

from . import dtypes
from .device import check_device, device
from .errors import user_location
from .tensor import Tensor

FORMAT = "eager.save"
VERSION = 1
_INDEX = "eager_save.json"
_ARRAY_KINDS = "biuf"  # bool, signed/unsigned integers, floats: never object arrays


class LoadError(RuntimeError):
    """The file is not one `eager.save` wrote (or it is damaged)."""


# ------------------------------------------------------------------------------ save

def save(obj, f) -> None:
    """Write `obj` (tensors, numbers, strings, None, and dicts/lists/tuples of them, such as
    a model's or optimizer's state_dict) to `f`, a path or a binary file object."""
    arrays: list[np.ndarray] = []
    ids: dict[int, int] = {}
    keep: list = []  # objects whose id() is in `ids` stay alive until the end
    root = _encode(obj, "obj", arrays, ids, keep)
    index = json.dumps({"format": FORMAT, "version": VERSION, "root": root},
                       allow_nan=False).encode()
    with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr(_INDEX, index)
        for n, arr in enumerate(arrays):
            buf = io.BytesIO()
            if arr.dtype == dtypes.bfloat16:
                arr = arr.view(np.uint16)  # (the node says "dtype": "bfloat16")
            np.save(buf, arr, allow_pickle=False)
            zf.writestr(f"arrays/{n}.npy", buf.getvalue())


def _array_id(key, arr, arrays, ids, keep):
    n = ids.get(id(key))
    if n is None:
        n = ids[id(key)] = len(arrays)
        arrays.append(arr)
        keep.append(key)
    return n


def _storable(dtype) -> bool:
    return dtype.kind in _ARRAY_KINDS or dtype == dtypes.bfloat16


def _bits(node, arr):
    if arr.dtype == dtypes.bfloat16:
        node["dtype"] = "bfloat16"  # stored as uint16 bits
    return node


def _encode(obj, path, arrays, ids, keep):
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if type(obj) is int:
        return obj
    if type(obj) is float:
        return obj if math.isfinite(obj) else {"t": "float", "v": repr(obj)}
    if isinstance(obj, Tensor):
        data = obj._data
        if type(data) is not np.ndarray:
            raise TypeError(f"eager.save: {path} is a traced tensor (inside a compiled "
                            f"function); save outside it (at {user_location()})")
        from .nn.module import Parameter

        return _bits({"t": "tensor", "id": _array_id(obj, data, arrays, ids, keep),
                      "requires_grad": bool(obj.requires_grad),
                      "parameter": isinstance(obj, Parameter)}, data)
    if isinstance(obj, np.ndarray) and _storable(obj.dtype):
        return _bits({"t": "ndarray", "id": _array_id(obj, obj, arrays, ids, keep)}, obj)
    if isinstance(obj, np.generic) and _storable(obj.dtype):
        return _bits({"t": "scalar", "id": _array_id(obj, np.asarray(obj), arrays, ids, keep)},
                     obj)
    if isinstance(obj, device):
        return {"t": "device", "v": str(obj)}
    if isinstance(obj, np.dtype):
        return {"t": "dtype", "v": obj.name}
    if isinstance(obj, dict):  # any dict subclass (OrderedDict, optimizer param groups)
        kind = "odict" if isinstance(obj, OrderedDict) else "dict"
        items = [[_encode(k, f"{path} key {k!r}", arrays, ids, keep),
                  _encode(v, f"{path}[{k!r}]", arrays, ids, keep)] for k, v in obj.items()]
        return {"t": kind, "items": items}
    if isinstance(obj, (list, tuple)):
        kind = "tuple" if isinstance(obj, tuple) else "list"
        return {"t": kind, "items": [_encode(v, f"{path}[{i}]", arrays, ids, keep)
                                     for i, v in enumerate(obj)]}
    hint = ""
    if hasattr(obj, "state_dict"):
        hint = "; save its state_dict() and restore with load_state_dict()"
    raise TypeError(f"eager.save: cannot save {path} of type {type(obj).__name__}: the format "
                    f"(a zip of JSON and .npy arrays, no pickle) holds tensors, numpy arrays, "
                    f"numbers, strings, None and dicts/lists/tuples of them{hint} "
                    f"(at {user_location()})")


# ------------------------------------------------------------------------------ load

def load(f, map_location=None, weights_only=None, **kwargs):
    """Read what `eager.save` wrote. `map_location` may name the CPU (anything else raises);
    `weights_only` is accepted for PyTorch compatibility (loading never runs code)."""
    if map_location is not None and not callable(map_location) \
            and not isinstance(map_location, dict):
        check_device(map_location, "eager.load(map_location=...)")
    name = f if isinstance(f, (str, bytes)) or hasattr(f, "__fspath__") else "the file"
    try:
        zf = zipfile.ZipFile(f, "r")
    except zipfile.BadZipFile as exc:
        raise LoadError(f"eager.load: {name} is not a file written by eager.save (not a zip "
                        f"archive). PyTorch .pt pickles and other pickles are not loaded: "
                        f"unpickling can run arbitrary code") from exc
    with zf:
        names = set(zf.namelist())
        if _INDEX not in names:
            torch_like = any(n.endswith("data.pkl") for n in names)
            raise LoadError(
                f"eager.load: {name} is a zip archive but not one eager.save wrote (no "
                f"{_INDEX})" + ("; it looks like a PyTorch checkpoint, which is a pickle and "
                                "is not loaded: unpickling can run arbitrary code"
                                if torch_like else ""))
        try:
            index = json.loads(zf.read(_INDEX).decode())
        except (ValueError, UnicodeDecodeError) as exc:
            raise LoadError(f"eager.load: {name}: damaged index ({exc})") from exc
        if not isinstance(index, dict) or index.get("format") != FORMAT:
            raise LoadError(f"eager.load: {name}: the index is not an eager.save index")
        if index.get("version") != VERSION:
            raise LoadError(f"eager.load: {name} has format version {index.get('version')!r}; "
                            f"this eager reads version {VERSION}")
        loaded: dict[int, object] = {}
        return _decode(index.get("root"), zf, names, name, loaded)


def _read_array(n, zf, names, name):
    member = f"arrays/{n}.npy"
    if not isinstance(n, int) or isinstance(n, bool) or member not in names:
        raise LoadError(f"eager.load: {name}: missing array {n!r}")
    try:
        arr = np.load(io.BytesIO(zf.read(member)), allow_pickle=False)
    except ValueError as exc:
        raise LoadError(f"eager.load: {name}: array {n} is not a plain numeric .npy "
                        f"({exc})") from exc
    if arr.dtype.kind not in _ARRAY_KINDS:
        raise LoadError(f"eager.load: {name}: array {n} has unsupported dtype {arr.dtype}")
    return arr


def _decode(node, zf, names, name, loaded):
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if isinstance(node, list) or not isinstance(node, dict) or "t" not in node:
        raise LoadError(f"eager.load: {name}: malformed entry {str(node)[:80]!r}")
    kind = node["t"]
    if kind in ("dict", "odict"):
        out = OrderedDict() if kind == "odict" else {}
        for pair in node.get("items", ()):
            if not isinstance(pair, list) or len(pair) != 2:
                raise LoadError(f"eager.load: {name}: malformed dict item")
            key = _decode(pair[0], zf, names, name, loaded)
            try:
                out[key] = _decode(pair[1], zf, names, name, loaded)
            except TypeError as exc:  # an unhashable key
                raise LoadError(f"eager.load: {name}: bad dict key {key!r}") from exc
        return out
    if kind in ("list", "tuple"):
        items = [_decode(v, zf, names, name, loaded) for v in node.get("items", ())]
        return tuple(items) if kind == "tuple" else items
    if kind == "float":
        value = node.get("v")
        if value not in ("nan", "inf", "-inf"):
            raise LoadError(f"eager.load: {name}: bad float {value!r}")
        return float(value)
    if kind == "device":
        return device(str(node.get("v")))
    if kind == "dtype":
        return dtypes.canonical(str(node.get("v")))
    if kind in ("tensor", "ndarray", "scalar"):
        n = node.get("id")
        key = (kind, n)
        if key in loaded:
            return loaded[key]
        arr = _read_array(n, zf, names, name)
        if node.get("dtype") == "bfloat16":
            if arr.dtype != np.uint16:
                raise LoadError(f"eager.load: {name}: bfloat16 array {n} is not stored as "
                                f"uint16 bits")
            arr = arr.view(dtypes.bfloat16)
        if kind == "ndarray":
            value = arr
        elif kind == "scalar":
            value = arr[()]
        else:
            value = _make_tensor(arr, node)
        loaded[key] = value
        return value
    raise LoadError(f"eager.load: {name}: unknown entry type {str(kind)[:40]!r}")


def _make_tensor(arr, node):
    from .nn.module import Parameter

    dtype = dtypes.canonical(arr.dtype)
    if arr.dtype != dtype or not arr.flags.c_contiguous or not arr.flags.writeable:
        arr = np.array(arr, dtype=dtype, order="C")  # (ascontiguousarray makes 0-d 1-d)
    t = Tensor._wrap(arr)
    requires_grad = bool(node.get("requires_grad")) and dtypes.is_floating(dtype)
    if node.get("parameter"):
        return Parameter(t, requires_grad=requires_grad)
    if requires_grad:
        t.requires_grad_(True)
    return t
