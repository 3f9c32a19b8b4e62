"""eager.save / eager.load (issue 16 item 3): round trips of nested structures and dtypes,
model and optimizer state, and files that must be refused without running anything."""
import io
import json
import os
import pickle
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

import eager
from eager import nn
from eager.serialization import LoadError


def _roundtrip(obj, tmp_path=None):
    if tmp_path is None:
        buf = io.BytesIO()
        eager.save(obj, buf)
        buf.seek(0)
        return eager.load(buf)
    path = tmp_path / "ckpt.pt"
    eager.save(obj, path)
    return eager.load(str(path))


def _assert_tensor_equal(a, b):
    assert type(a) is type(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())


def test_nested_structures_and_every_dtype_round_trip(tmp_path):
    base = eager.arange(24).float().reshape(4, 6)
    shared = eager.randn(3)
    obj = {
        "f32": eager.randn(2, 3), "f64": eager.randn(2, dtype=eager.float64),
        "i32": eager.arange(5, dtype=eager.int32), "i64": eager.arange(5),
        "bool": eager.tensor([True, False, True]), "scalar": eager.tensor(3.5),
        "empty": eager.zeros(0, 4),
        "transposed": base.T, "strided": base[::2, 1::3],
        "special": eager.tensor([float("nan"), float("inf"), -float("inf"), -0.0]),
        "numbers": [1, 2.5, float("nan"), float("inf"), True, None, "text", 2 ** 70],
        "tuple": (shared, shared, 3),
        "by_int": {0: "zero", 7: eager.ones(1)},
        "ordered": OrderedDict([("b", 1), ("a", 2)]),
        "numpy": np.arange(6, dtype=np.int16).reshape(2, 3), "np_scalar": np.float32(1.25),
        "device": eager.device("cpu"), "dtype": eager.float64,
    }
    for got in (_roundtrip(obj), _roundtrip(obj, tmp_path)):
        assert list(got) == list(obj)
        for key in ("f32", "f64", "i32", "i64", "bool", "scalar", "empty", "transposed",
                    "strided", "special"):
            _assert_tensor_equal(got[key], obj[key])
        assert got["scalar"].shape == () and got["transposed"].shape == (6, 4)
        assert np.signbit(got["special"].numpy()[3])
        nums = got["numbers"]
        assert nums[:2] == [1, 2.5] and np.isnan(nums[2]) and nums[3] == float("inf")
        assert nums[4:] == [True, None, "text", 2 ** 70] and type(nums[4]) is bool
        assert isinstance(got["tuple"], tuple) and got["tuple"][2] == 3
        assert got["tuple"][0] is got["tuple"][1]  # one tensor saved once loads as one
        assert got["by_int"][0] == "zero" and list(got["by_int"]) == [0, 7]
        assert type(got["ordered"]) is OrderedDict and list(got["ordered"]) == ["b", "a"]
        assert got["numpy"].dtype == np.int16 and got["numpy"].tolist() == [[0, 1, 2],
                                                                           [3, 4, 5]]
        assert got["np_scalar"] == np.float32(1.25) and got["np_scalar"].dtype == np.float32
        assert got["device"] == eager.device("cpu") and got["dtype"] == eager.float64
        # Loaded tensors own writable memory.
        got["f32"].add_(1.0)


def test_requires_grad_and_parameters_survive():
    p = nn.Parameter(eager.randn(3))
    t = eager.randn(2, requires_grad=True)
    got = _roundtrip({"p": p, "t": t, "frozen": nn.Parameter(eager.ones(1),
                                                             requires_grad=False)})
    assert isinstance(got["p"], nn.Parameter) and got["p"].requires_grad
    assert got["t"].requires_grad and got["t"].is_leaf and not isinstance(got["t"],
                                                                          nn.Parameter)
    assert not got["frozen"].requires_grad
    _assert_tensor_equal(got["p"], p)


def test_model_and_optimizer_state_round_trip_and_training_continues_identically():
    eager.manual_seed(1)
    model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.GELU(), nn.Linear(8, 2))
    model[1].register_buffer("seen", eager.zeros(1, dtype=eager.int64))
    opt = eager.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    x, y = eager.randn(6, 4), eager.randint(0, 2, (6,))

    def step(m, o):
        loss = nn.functional.cross_entropy(m(x), y)
        o.zero_grad()
        loss.backward()
        o.step()
        return loss.item()

    for _ in range(3):
        step(model, opt)
    buf = io.BytesIO()
    eager.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 3}, buf)
    buf.seek(0)
    ckpt = eager.load(buf, map_location="cpu", weights_only=True)
    assert ckpt["step"] == 3 and list(ckpt["model"]) == list(model.state_dict())

    eager.manual_seed(99)
    resumed = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.GELU(), nn.Linear(8, 2))
    resumed[1].register_buffer("seen", eager.ones(1, dtype=eager.int64))
    resumed.load_state_dict(ckpt["model"])
    ropt = eager.optim.AdamW(resumed.parameters(), lr=5.0, weight_decay=0.0)
    ropt.load_state_dict(ckpt["optimizer"])
    assert ropt.param_groups[0]["lr"] == 1e-2 and ropt.param_groups[0]["weight_decay"] == 0.1
    assert resumed[1].seen.tolist() == [0]
    for _ in range(3):
        assert step(resumed, ropt) == step(model, opt)
    for a, b in zip(model.parameters(), resumed.parameters()):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())


def test_dict_subclasses_save_as_dicts():
    class Group(dict):
        pass

    got = _roundtrip({"param_groups": [Group(lr=0.1, params=[0, 1])]})
    assert got == {"param_groups": [{"lr": 0.1, "params": [0, 1]}]}


@pytest.mark.parametrize("obj, hint", [
    (nn.Linear(2, 2), "state_dict"),
    ({"fn": lambda x: x}, "function"),
    ({"set": {1, 2}}, "set"),
    ([np.array(["a", "b"])], "ndarray"),
    ({"complex": 1 + 2j}, "complex"),
])
def test_saving_anything_else_raises_a_clear_type_error(obj, hint):
    with pytest.raises(TypeError, match="no pickle") as info:
        eager.save(obj, io.BytesIO())
    assert hint in str(info.value) and "test_save_load.py" in str(info.value)


class _Payload:
    """Unpickling this would create the marker file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_pickle_is_refused_and_never_executed(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    path.write_bytes(pickle.dumps(_Payload(str(marker))))
    with pytest.raises(LoadError, match="not a file written by eager.save"):
        eager.load(str(path))
    assert not marker.exists()


def test_a_pytorch_style_zip_is_refused_and_never_executed(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "model.pt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", pickle.dumps(_Payload(str(marker))))
        zf.writestr("archive/version", "3\n")
    with pytest.raises(LoadError, match="PyTorch checkpoint"):
        eager.load(path)
    assert not marker.exists()


def _forged(tmp_path, index, arrays=None):
    path = tmp_path / "forged.pt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("eager_save.json", index if isinstance(index, str) else json.dumps(index))
        for name, data in (arrays or {}).items():
            zf.writestr(name, data)
    return path


def test_an_object_array_inside_a_forged_archive_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    buf = io.BytesIO()
    np.save(buf, np.array([_Payload(str(marker))], dtype=object), allow_pickle=True)
    index = {"format": "eager.save", "version": 1, "root": {"t": "tensor", "id": 0}}
    path = _forged(tmp_path, index, {"arrays/0.npy": buf.getvalue()})
    with pytest.raises(LoadError, match="not a plain numeric"):
        eager.load(path)
    assert not marker.exists()


@pytest.mark.parametrize("index, match", [
    ("{not json", "damaged index"),
    ({"format": "other", "version": 1, "root": None}, "not an eager.save index"),
    ({"format": "eager.save", "version": 99, "root": None}, "version 99"),
    ({"format": "eager.save", "version": 1, "root": {"t": "pickle", "v": "x"}},
     "unknown entry type"),
    ({"format": "eager.save", "version": 1, "root": {"t": "tensor", "id": 3}},
     "missing array"),
    ({"format": "eager.save", "version": 1, "root": {"t": "float", "v": "__import__"}},
     "bad float"),
    ({"format": "eager.save", "version": 1,
      "root": {"t": "dict", "items": [[{"t": "list", "items": []}, 1]]}}, "bad dict key"),
])
def test_damaged_or_unknown_archives_give_a_clear_error(tmp_path, index, match):
    with pytest.raises(LoadError, match=match):
        eager.load(_forged(tmp_path, index))


def test_random_bytes_and_missing_index_give_a_clear_error(tmp_path):
    path = tmp_path / "junk.bin"
    path.write_bytes(os.urandom(256))
    with pytest.raises(LoadError, match="not a zip archive"):
        eager.load(path)
    other = tmp_path / "other.zip"
    with zipfile.ZipFile(other, "w") as zf:
        zf.writestr("readme.txt", "hello")
    with pytest.raises(LoadError, match="no eager_save.json"):
        eager.load(other)


def test_map_location_must_be_the_cpu():
    buf = io.BytesIO()
    eager.save({"x": eager.ones(1)}, buf)
    buf.seek(0)
    assert eager.load(buf, map_location=eager.device("cpu"))["x"].tolist() == [1.0]
    buf.seek(0)
    with pytest.raises(RuntimeError, match="CPU only"):
        eager.load(buf, map_location="cuda:0")
