"""eager.utils.data (issue 16 item 3): datasets, samplers, collate, DataLoader with and without
worker processes, random_split; and a small GPT-style training loop written as PyTorch users
write it (device, DataLoader, ModuleDict, eager.save/load checkpoint and resume), eager and
with the step compiled."""
import math
from collections import namedtuple

import numpy as np
import pytest

import eager
import tracer
from eager import nn
from eager.nn import functional as F
from eager.utils.data import (BatchSampler, ConcatDataset, DataLoader, Dataset,
                              IterableDataset, RandomSampler, SequentialSampler, Subset,
                              TensorDataset, default_collate, get_worker_info, random_split)


def _xy(n=10):
    return TensorDataset(eager.arange(n * 2).float().reshape(n, 2), eager.arange(n))


def test_tensor_dataset_indexes_every_tensor():
    ds = _xy()
    assert len(ds) == 10
    x, y = ds[3]
    assert x.tolist() == [6.0, 7.0] and y.item() == 3
    with pytest.raises(ValueError, match="Size mismatch"):
        TensorDataset(eager.zeros(3), eager.zeros(4))


def test_samplers():
    ds = _xy()
    assert list(SequentialSampler(ds)) == list(range(10))
    a = list(RandomSampler(ds, generator=eager.Generator().manual_seed(4)))
    b = list(RandomSampler(ds, generator=eager.Generator().manual_seed(4)))
    assert a == b and sorted(a) == list(range(10)) and a != list(range(10))
    # Without a generator the order follows the global seed.
    eager.manual_seed(8)
    c = list(RandomSampler(ds))
    eager.manual_seed(8)
    assert list(RandomSampler(ds)) == c
    drawn = list(RandomSampler(ds, replacement=True, num_samples=25,
                               generator=eager.Generator().manual_seed(0)))
    assert len(drawn) == 25 and set(drawn) <= set(range(10))
    assert len(list(RandomSampler(ds, num_samples=23))) == 23
    assert list(BatchSampler(range(7), 3, drop_last=False)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(BatchSampler(range(7), 3, drop_last=True)) == [[0, 1, 2], [3, 4, 5]]
    assert len(BatchSampler(range(7), 3, drop_last=False)) == 3
    with pytest.raises(ValueError, match="batch_size"):
        BatchSampler(range(7), 0, drop_last=False)
    with pytest.raises(ValueError, match="num_samples"):
        RandomSampler(ds, num_samples=0)


def test_dataloader_batches_lengths_and_shuffle_with_a_generator():
    ds = _xy()
    batches = list(DataLoader(ds, batch_size=4))
    assert [y.tolist() for _, y in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    x0, y0 = batches[0]
    assert x0.shape == (4, 2) and x0.dtype == eager.float32 and y0.dtype == eager.int64
    assert len(DataLoader(ds, batch_size=4)) == 3
    assert len(DataLoader(ds, batch_size=4, drop_last=True)) == 2
    assert [y.tolist() for _, y in DataLoader(ds, batch_size=4, drop_last=True)] == [
        [0, 1, 2, 3], [4, 5, 6, 7]]

    def epochs(seed):
        loader = DataLoader(ds, batch_size=3, shuffle=True,
                            generator=eager.Generator().manual_seed(seed))
        return [[y.tolist() for _, y in loader] for _ in range(2)]

    first = epochs(1)
    assert first == epochs(1) and first != epochs(2)
    assert first[0] != first[1]  # a new order each epoch
    assert sorted(sum(first[0], [])) == list(range(10))
    # Default batch_size=1 keeps a batch dimension; batch_size=None does not.
    x, y = next(iter(DataLoader(ds)))
    assert x.shape == (1, 2) and y.shape == (1,)
    x, y = next(iter(DataLoader(ds, batch_size=None)))
    assert x.shape == (2,) and y.shape == ()


def test_dataloader_argument_errors_match_pytorch():
    ds = _xy()
    with pytest.raises(ValueError, match="mutually exclusive with shuffle"):
        DataLoader(ds, sampler=SequentialSampler(ds), shuffle=True)
    with pytest.raises(ValueError, match="batch_sampler option is mutually exclusive"):
        DataLoader(ds, batch_sampler=BatchSampler(range(10), 2, False), batch_size=2)
    with pytest.raises(ValueError, match="num_workers"):
        DataLoader(ds, num_workers=-1)
    with pytest.raises(ValueError, match="drop_last"):
        DataLoader(ds, batch_size=None, drop_last=True)
    batches = list(DataLoader(ds, batch_sampler=BatchSampler(range(10), 5, False)))
    assert [y.tolist() for _, y in batches] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]


Point = namedtuple("Point", ["x", "y"])


def test_default_collate_of_tensors_numbers_tuples_dicts_and_arrays():
    batch = [{"img": eager.full((2,), float(i)), "label": i, "w": 0.5 * i, "ok": i % 2 == 0,
              "name": f"s{i}", "pair": (i, eager.tensor([i])), "arr": np.ones(3) * i,
              "pt": Point(i, float(i))} for i in range(3)]
    out = default_collate(batch)
    assert list(out) == ["img", "label", "w", "ok", "name", "pair", "arr", "pt"]
    assert out["img"].shape == (3, 2) and out["img"].dtype == eager.float32
    assert out["label"].dtype == eager.int64 and out["label"].tolist() == [0, 1, 2]
    assert out["w"].dtype == eager.float64 and out["w"].tolist() == [0.0, 0.5, 1.0]
    assert out["ok"].dtype == eager.bool_ and out["ok"].tolist() == [True, False, True]
    assert out["name"] == ["s0", "s1", "s2"]
    assert isinstance(out["pair"], list)  # PyTorch collates a tuple's fields into a list
    assert out["pair"][0].tolist() == [0, 1, 2] and out["pair"][1].shape == (3, 1)
    assert out["arr"].dtype == eager.float64 and out["arr"].shape == (3, 3)
    assert isinstance(out["pt"], Point) and out["pt"].y.dtype == eager.float64
    with pytest.raises(RuntimeError, match="equal size"):
        default_collate([[1, 2], [3]])
    with pytest.raises(TypeError, match="default_collate"):
        default_collate([object(), object()])


def test_random_split_concat_and_subset():
    ds = _xy()
    a, b = random_split(ds, [7, 3], generator=eager.Generator().manual_seed(0))
    assert len(a) == 7 and len(b) == 3
    ids = [int(y) for _, y in a] + [int(y) for _, y in b]
    assert sorted(ids) == list(range(10))
    a2, _ = random_split(ds, [7, 3], generator=eager.Generator().manual_seed(0))
    assert [int(y) for _, y in a2] == [int(y) for _, y in a]
    parts = random_split(ds, [0.5, 0.3, 0.2], generator=eager.Generator().manual_seed(0))
    assert [len(p) for p in parts] == [5, 3, 2]
    with pytest.raises(ValueError, match="Sum of input lengths"):
        random_split(ds, [4, 4])
    both = ConcatDataset([Subset(ds, [9, 8]), ds])
    assert len(both) == 12 and int(both[0][1]) == 9 and int(both[-1][1]) == 9
    assert len(ds + ds) == 20


class _Squares(Dataset):
    def __len__(self):
        return 13

    def __getitem__(self, i):
        if i == 11 and getattr(self, "fail", False):
            raise KeyError(f"sample {i} is broken")
        info = get_worker_info()
        return {"x": eager.tensor([float(i) ** 2]), "i": i,
                "worker": -1 if info is None else info.id}


def test_worker_processes_give_the_same_batches_as_the_main_process():
    ds = _Squares()

    def run(workers):
        loader = DataLoader(ds, batch_size=3, shuffle=True, num_workers=workers,
                            generator=eager.Generator().manual_seed(5))
        return [[(b["x"].tolist(), b["i"].tolist(), b["worker"].tolist()) for b in loader]
                for _ in range(2)]

    single, multi = run(0), run(2)
    strip = [[(x, i) for x, i, _ in epoch] for epoch in single]
    assert strip == [[(x, i) for x, i, _ in epoch] for epoch in multi]
    assert {w for epoch in multi for _, _, ws in epoch for w in ws} == {0, 1}
    assert {w for epoch in single for _, _, ws in epoch for w in ws} == {-1}
    assert sum(len(i) for _, i, _ in multi[0]) == 13


def test_an_error_in_a_worker_reaches_the_main_process_with_its_type():
    ds = _Squares()
    ds.fail = True
    loader = DataLoader(ds, batch_size=4, num_workers=2)
    with pytest.raises(KeyError, match="sample 11 is broken"):
        list(loader)


class _Stream(IterableDataset):
    def __iter__(self):
        return iter(range(7))

    def __len__(self):
        return 7


def test_iterable_dataset_batches():
    assert [b.tolist() for b in DataLoader(_Stream(), batch_size=3)] == [[0, 1, 2], [3, 4, 5],
                                                                        [6]]
    assert len(DataLoader(_Stream(), batch_size=3, drop_last=True)) == 2
    with pytest.raises(ValueError, match="shuffle"):
        DataLoader(_Stream(), shuffle=True)


# ------------------------------------------------------------------ a training loop

VOCAB, BLOCK, EMBD = 12, 6, 16


class TinyGPT(nn.Module):
    """One single-head transformer block, GPT-2 style, with nanoGPT's weight tying."""

    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(VOCAB, EMBD), wpe=nn.Embedding(BLOCK, EMBD),
            ln_1=nn.LayerNorm(EMBD), attn=nn.Linear(EMBD, 3 * EMBD), proj=nn.Linear(EMBD, EMBD),
            ln_2=nn.LayerNorm(EMBD),
            mlp=nn.Sequential(nn.Linear(EMBD, 4 * EMBD), nn.GELU(), nn.Linear(4 * EMBD, EMBD)),
            ln_f=nn.LayerNorm(EMBD)))
        self.lm_head = nn.Linear(EMBD, VOCAB, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.register_buffer("causal", eager.tensor(np.tril(np.ones((BLOCK, BLOCK), bool))),
                             persistent=False)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, idx):
        t = self.transformer
        n = idx.shape[1]
        x = t.wte(idx) + t.wpe(eager.arange(n, device=idx.device))
        h = t.ln_1(x)
        qkv = t.attn(h)
        q, k, v = qkv[..., :EMBD], qkv[..., EMBD:2 * EMBD], qkv[..., 2 * EMBD:]
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(EMBD))
        att = eager.where(self.causal[:n, :n], att, -1e9).softmax(-1)
        x = x + t.proj(att @ v)
        x = x + t.mlp(t.ln_2(x))
        return self.lm_head(t.ln_f(x))


def _token_data():
    rng = np.random.default_rng(0)
    seqs = rng.integers(0, VOCAB, size=(24, BLOCK + 1))
    return TensorDataset(eager.tensor(seqs[:, :-1]), eager.tensor(seqs[:, 1:]))


def _run(mode, epochs, ckpt_in=None, ckpt_out=None):
    """Train TinyGPT for `epochs` epochs (resuming from `ckpt_in`), return the losses."""
    device = eager.device("cuda" if eager.cuda.is_available() else "cpu")
    eager.manual_seed(1337)
    eager.cuda.manual_seed_all(1337)
    model = TinyGPT().to(device)
    opt = eager.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    g = eager.Generator().manual_seed(0)
    loader = DataLoader(_token_data(), batch_size=8, shuffle=True, drop_last=True,
                        generator=g)
    start = 0
    if ckpt_in is not None:
        ckpt = eager.load(ckpt_in, map_location=device)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        g.set_state(ckpt["loader_rng"])
        start = ckpt["epoch"]

    def train_step(xb, yb):
        logits = model(xb)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), yb.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    step = train_step if mode == "eager" else tracer.function(train_step, backend=mode)
    model.train()
    losses = []
    for epoch in range(start, epochs):
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            losses.append(step(xb, yb).item())
    if ckpt_out is not None:
        eager.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                    "loader_rng": g.get_state(), "epoch": epochs}, ckpt_out)
    if mode != "eager":
        assert step.trace_count == 1
    with eager.inference_mode():
        model.eval()
        val = F.cross_entropy(model(loader.dataset.tensors[0]).view(-1, VOCAB),
                              loader.dataset.tensors[1].view(-1)).item()
    return losses, val


@pytest.mark.parametrize("mode", ["eager", "numba"])
def test_gpt_training_resumed_from_a_checkpoint_matches_an_uninterrupted_run(mode, tmp_path):
    full, full_val = _run(mode, epochs=3)
    assert len(full) == 9 and full[-1] < full[0]
    first, _ = _run(mode, epochs=1, ckpt_out=tmp_path / "ckpt.pt")
    rest, rest_val = _run(mode, epochs=3, ckpt_in=tmp_path / "ckpt.pt")
    assert first + rest == full
    assert rest_val == full_val
    if mode != "eager":
        eager_losses, _ = _run("eager", epochs=3)
        np.testing.assert_allclose(full, eager_losses, rtol=2e-5, atol=1e-6)


def test_default_collate_batches_bfloat16_numpy_arrays():
    # (issue 16 remainder: it raised "numpy arrays of dtype bfloat16 cannot be batched")
    rows = (np.arange(8, dtype=np.float32).reshape(4, 2) / 3).astype(eager.bfloat16)
    loader = DataLoader([(rows[i], rows[i, 0]) for i in range(4)], batch_size=2)
    batches = list(loader)
    assert [(x.dtype, x.shape) for x in batches[0]] == [(eager.bfloat16, (2, 2)),
                                                        (eager.bfloat16, (2,))]
    np.testing.assert_array_equal(batches[1][0].numpy(), rows[2:])

    def f(x, y):
        return (x * 2 + y[:, None]).float()

    compiled = tracer.function(f)
    for x, y in batches:
        np.testing.assert_array_equal(compiled(x, y).numpy(), f(x, y).numpy())
