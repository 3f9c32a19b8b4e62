"""eager.utils.data: datasets, samplers and the DataLoader, with PyTorch's meaning and defaults.

>>> import eager
>>> from eager.utils.data import DataLoader, TensorDataset
>>> ds = TensorDataset(eager.arange(6).float().reshape(6, 1), eager.arange(6))
>>> loader = DataLoader(ds, batch_size=4, shuffle=True, generator=eager.Generator().manual_seed(0))
>>> [tuple(y.shape) for x, y in loader]
[(4,), (2,)]

Batches are made in the main process (`num_workers=0`) or by `num_workers` worker processes
(`multiprocessing`, the 'fork' context on Linux); the sampler always runs in the main
process, so both give the same batches in the same order.
"""
from __future__ import annotations

import bisect
import math
import random as _pyrandom
import sys
import traceback
from collections import namedtuple
from collections.abc import Mapping, Sequence

import numpy as np

from .. import dtypes
from .. import functions as F
from ..random import Generator, numpy_generator
from ..tensor import Tensor

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "ConcatDataset", "Subset",
           "Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler",
           "BatchSampler", "DataLoader", "random_split", "default_collate", "get_worker_info"]


# ------------------------------------------------------------------------------ datasets

class Dataset:
    """A map-style dataset: `__getitem__(index)` and (for samplers) `__len__()`."""

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def __add__(self, other: Dataset) -> ConcatDataset:
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A dataset that is a stream: `__iter__()` yields samples (no indices, no sampler)."""

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")


class TensorDataset(Dataset):
    """Samples are `tuple(t[i] for t in tensors)`; all tensors share their first dimension."""

    def __init__(self, *tensors: Tensor):
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        n = tensors[0].shape[0]
        if any(t.shape[0] != n for t in tensors):
            raise ValueError("Size mismatch between tensors: first dimensions "
                             f"{[t.shape[0] for t in tensors]}")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


class ConcatDataset(Dataset):
    """The datasets one after another."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("datasets should not be an empty iterable")
        self.cumulative_sizes = []
        total = 0
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise TypeError("ConcatDataset does not support IterableDataset")
            total += len(d)
            self.cumulative_sizes.append(total)

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx += len(self)
        which = bisect.bisect_right(self.cumulative_sizes, idx)
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][idx - start]


class Subset(Dataset):
    """The samples of `dataset` at `indices`."""

    def __init__(self, dataset, indices):
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return [self.dataset[self.indices[i]] for i in idx]
        return self.dataset[self.indices[idx]]

    def __len__(self) -> int:
        return len(self.indices)


def random_split(dataset, lengths, generator=None) -> list:
    """Split `dataset` into non-overlapping random Subsets of the given lengths (or
    fractions summing to 1, remainders given round-robin as in PyTorch)."""
    n = len(dataset)
    lengths = list(lengths)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        counts = [math.floor(n * frac) for frac in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        lengths = counts
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    perm = numpy_generator(generator).permutation(n).tolist()
    out, start = [], 0
    for length in lengths:
        out.append(Subset(dataset, perm[start:start + length]))
        start += length
    return out


# ------------------------------------------------------------------------------ samplers

class Sampler:
    """Yields dataset indices."""

    def __init__(self, data_source=None):
        pass

    def __iter__(self):
        raise NotImplementedError


class SequentialSampler(Sampler):
    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A random permutation each epoch (or `num_samples` draws with replacement). Without a
    generator, each epoch's order is drawn from the global generator (`eager.manual_seed`)."""

    def __init__(self, data_source, replacement: bool = False, num_samples=None,
                 generator=None):
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if not isinstance(replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got "
                            f"replacement={replacement}")
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got "
                             f"num_samples={self.num_samples}")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def _rng(self):
        if self.generator is not None:
            return numpy_generator(self.generator)
        # As PyTorch: a fresh seed from the global generator for each epoch.
        seed = int(numpy_generator().integers(0, 2 ** 63 - 1))
        return np.random.default_rng(seed)

    def __iter__(self):
        n = len(self.data_source)
        rng = self._rng()
        if self.replacement:
            return iter(rng.integers(0, n, size=self.num_samples).tolist())
        reps, rest = divmod(self.num_samples, n)
        order = [i for _ in range(reps) for i in rng.permutation(n).tolist()]
        order += rng.permutation(n).tolist()[:rest]
        return iter(order)

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    def __init__(self, indices, generator=None):
        self.indices = indices
        self.generator = generator

    def __iter__(self):
        perm = numpy_generator(self.generator).permutation(len(self.indices)).tolist()
        return (self.indices[i] for i in perm)

    def __len__(self) -> int:
        return len(self.indices)


class BatchSampler(Sampler):
    """Groups a sampler's indices into lists of `batch_size`."""

    def __init__(self, sampler, batch_size: int, drop_last: bool):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got "
                             f"batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got "
                             f"drop_last={drop_last}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self):
        batch = []
        for idx in self.sampler:
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        return (len(self.sampler) + self.batch_size - 1) // self.batch_size


# ------------------------------------------------------------------------------ collate

def default_collate(batch):
    """Stack a list of samples into a batch, as PyTorch's default_collate: tensors and numpy
    arrays are stacked on a new first dimension, floats become a float64 tensor, ints an
    int64 tensor, strings stay a list, and dicts, tuples and lists are collated per field
    (a tuple of fields comes back as a list, as in PyTorch)."""
    elem = batch[0]
    if isinstance(elem, Tensor):
        return F.stack(list(batch), 0)
    if isinstance(elem, np.ndarray):
        if elem.dtype.kind not in "biuf" and elem.dtype != dtypes.bfloat16:
            raise TypeError(f"default_collate: numpy arrays of dtype {elem.dtype} cannot be "
                            "batched")
        return F.stack([F.from_numpy(np.asarray(b)) for b in batch], 0)
    if isinstance(elem, np.generic):
        return F.tensor(np.array(batch))
    if isinstance(elem, bool):
        return F.tensor(list(batch))
    if isinstance(elem, float):
        return F.tensor(list(batch), dtype=np.float64)
    if isinstance(elem, int):
        return F.tensor(list(batch), dtype=np.int64)
    if isinstance(elem, (str, bytes)):
        return list(batch)
    if isinstance(elem, Mapping):
        fields = {key: default_collate([d[key] for d in batch]) for key in elem}
        try:
            return type(elem)(fields)
        except TypeError:
            return fields
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return type(elem)(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(elem, Sequence):
        size = len(elem)
        if any(len(b) != size for b in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        fields = [default_collate(list(s)) for s in zip(*batch)]
        if isinstance(elem, tuple):
            return fields
        try:
            return type(elem)(fields)
        except TypeError:
            return fields
    raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, "
                    f"dicts or lists; found {type(elem)}")


def _default_convert(sample):
    """batch_size=None: samples pass through, numpy arrays become tensors."""
    if isinstance(sample, np.ndarray) and sample.dtype.kind in "biuf":
        return F.from_numpy(sample)
    return sample


# ------------------------------------------------------------------------------ workers

WorkerInfo = namedtuple("WorkerInfo", ["id", "num_workers", "seed", "dataset"])
_worker_info = None


def get_worker_info():
    """Inside a DataLoader worker process: its WorkerInfo(id, num_workers, seed, dataset);
    None in the main process."""
    return _worker_info


class _WorkerError:
    """An exception raised in a worker, carried back as its type name and traceback text."""

    def __init__(self, exc, worker_id):
        self.exc_type = type(exc)
        self.text = (f"Caught {type(exc).__name__} in DataLoader worker process {worker_id}.\n"
                     "Original " + "".join(traceback.format_exception(exc)))

    def reraise(self):
        try:
            err = self.exc_type(self.text)
        except Exception:  # noqa: BLE001 - an exception type with other arguments
            err = RuntimeError(self.text)
        raise err


def _worker_loop(dataset, fetch, index_queue, result_queue, worker_id, num_workers, seed,
                 init_fn):
    global _worker_info
    from ..random import manual_seed

    manual_seed(seed)
    _pyrandom.seed(seed)
    _worker_info = WorkerInfo(worker_id, num_workers, seed, dataset)
    try:
        if init_fn is not None:
            init_fn(worker_id)
    except Exception as exc:  # noqa: BLE001
        result_queue.put((None, _WorkerError(exc, worker_id)))
        return
    while True:
        try:
            job = index_queue.get()
        except (EOFError, KeyboardInterrupt):
            return
        if job is None:
            return
        batch_no, indices = job
        try:
            result = fetch(dataset, indices)
        except KeyboardInterrupt:
            return  # Ctrl-C reaches the main process too; it raises and stops the workers
        except Exception as exc:  # noqa: BLE001 - re-raised in the main process
            result = _WorkerError(exc, worker_id)
        result_queue.put((batch_no, result))


class _Fetcher:
    """Turns a batch of indices into a batch (picklable, so spawn/forkserver work too)."""

    def __init__(self, collate_fn, batched):
        self.collate_fn = collate_fn
        self.batched = batched

    def __call__(self, dataset, indices):
        if not self.batched:
            return self.collate_fn(dataset[indices])
        return self.collate_fn([dataset[i] for i in indices])


class _MultiProcessIter:
    """Sends index batches to workers round-robin, yields results in sampler order."""

    _POLL_SECONDS = 5.0

    def __init__(self, loader, base_seed):
        self._loader = loader
        import multiprocessing  # (not at import time: most programs never start workers)

        n = loader.num_workers
        ctx = loader.multiprocessing_context
        if ctx is None:
            methods = multiprocessing.get_all_start_methods()
            ctx = "fork" if sys.platform.startswith("linux") and "fork" in methods else None
        if isinstance(ctx, str) or ctx is None:
            ctx = multiprocessing.get_context(ctx)
        self._indices = iter(loader._index_sampler)
        self._result_queue = ctx.Queue()
        self._index_queues = []
        self._workers = []
        fetch = _Fetcher(loader.collate_fn, loader._batched)
        for worker_id in range(n):
            iq = ctx.Queue()
            w = ctx.Process(target=_worker_loop, daemon=True,
                            args=(loader.dataset, fetch, iq, self._result_queue, worker_id, n,
                                  base_seed + worker_id, loader.worker_init_fn))
            w.start()
            self._index_queues.append(iq)
            self._workers.append(w)
        self._sent = 0
        self._next = 0
        self._pending = {}
        self._exhausted = False
        self._closed = False
        for _ in range(loader.prefetch_factor * n):
            self._send()

    def _send(self):
        if self._exhausted:
            return
        try:
            indices = next(self._indices)
        except StopIteration:
            self._exhausted = True
            return
        self._index_queues[self._sent % len(self._workers)].put((self._sent, indices))
        self._sent += 1

    def __iter__(self):
        return self

    def _get(self):
        import queue

        timeout = self._loader.timeout
        while True:
            try:
                return self._result_queue.get(timeout=timeout if timeout > 0
                                              else self._POLL_SECONDS)
            except queue.Empty:
                if timeout > 0:
                    self.close()
                    raise RuntimeError(f"DataLoader timed out after {timeout} seconds")
                dead = [w.pid for w in self._workers if not w.is_alive()]
                if dead:
                    self.close()
                    raise RuntimeError(f"DataLoader worker (pid(s) {dead}) exited "
                                       "unexpectedly") from None

    def __next__(self):
        if self._closed or self._next >= self._sent:
            self.close()
            raise StopIteration
        while self._next not in self._pending:
            batch_no, result = self._get()
            if batch_no is None:  # worker_init_fn failed
                self.close()
                result.reraise()
            self._pending[batch_no] = result
        result = self._pending.pop(self._next)
        self._next += 1
        self._send()
        if isinstance(result, _WorkerError):
            self.close()
            result.reraise()
        return result

    def close(self):
        if self._closed:
            return
        self._closed = True
        for iq in self._index_queues:
            try:
                iq.put(None)
            except (OSError, ValueError):
                pass
        for w in self._workers:
            w.join(timeout=self._POLL_SECONDS)
            if w.is_alive():
                w.terminate()
                w.join()
        for q in self._index_queues + [self._result_queue]:
            q.cancel_join_thread()
            q.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


# ------------------------------------------------------------------------------ loader

class DataLoader:
    """Iterates over `dataset` in batches, as PyTorch's DataLoader.

    `shuffle=True` draws each epoch's order from `generator` (an `eager.Generator`) or,
    without one, from the global generator (`eager.manual_seed`). `num_workers > 0` loads
    batches in worker processes; `pin_memory`, `persistent_workers` are accepted and have
    no effect on the CPU.
    """

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers: int = 0, collate_fn=None, pin_memory: bool = False,
                 drop_last: bool = False, timeout: float = 0, worker_init_fn=None,
                 multiprocessing_context=None, generator=None, *, prefetch_factor=None,
                 persistent_workers: bool = False, pin_memory_device: str = ""):
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 "
                             "to disable multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in "
                             "multiprocessing. let num_workers > 0 to enable multiprocessing, "
                             "otherwise set prefetch_factor to None.")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        if generator is not None and not isinstance(generator, Generator):
            raise TypeError(f"generator must be an eager.Generator, got "
                            f"{type(generator).__name__}")
        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = 2 if prefetch_factor is None else prefetch_factor
        self.pin_memory = pin_memory
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.generator = generator
        self.persistent_workers = persistent_workers
        iterable = isinstance(dataset, IterableDataset)
        self._iterable = iterable
        if iterable:
            if shuffle not in (None, False):
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified "
                                 f"shuffle option, but got shuffle={shuffle}")
            if sampler is not None or batch_sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified "
                                 "sampler and batch_sampler options")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with "
                                 "batch_size, shuffle, sampler, and drop_last")
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually "
                             "exclusive with drop_last")
        if sampler is None and not iterable:
            sampler = RandomSampler(dataset, generator=generator) if shuffle \
                else SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None and not iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self._batched = batch_sampler is not None or (iterable and batch_size is not None)
        if collate_fn is None:
            collate_fn = default_collate if self._batched else _default_convert
        self.collate_fn = collate_fn

    @property
    def _index_sampler(self):
        return self.batch_sampler if self.batch_sampler is not None else self.sampler

    def __len__(self) -> int:
        if self._iterable:
            n = len(self.dataset)
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        return len(self._index_sampler)

    def __iter__(self):
        if self._iterable:
            if self.num_workers:
                raise NotImplementedError("DataLoader: num_workers > 0 with an "
                                          "IterableDataset is not supported yet; use "
                                          "num_workers=0")
            return self._iter_stream()
        # Drawn whether or not there are workers (their seeds are base_seed + worker id), so
        # the generator, and every later epoch's order, does not depend on num_workers.
        base_seed = int(numpy_generator(self.generator).integers(0, 2 ** 62))
        if self.num_workers:
            return _MultiProcessIter(self, base_seed)
        return self._iter_single()

    def _iter_single(self):
        fetch = _Fetcher(self.collate_fn, self._batched)
        for indices in self._index_sampler:
            yield fetch(self.dataset, indices)

    def _iter_stream(self):
        if self.batch_size is None:
            for sample in self.dataset:
                yield self.collate_fn(sample)
            return
        batch = []
        for sample in self.dataset:
            batch.append(sample)
            if len(batch) == self.batch_size:
                yield self.collate_fn(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.collate_fn(batch)
