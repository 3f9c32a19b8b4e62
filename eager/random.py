"""The global random generator behind every random op (`eager.manual_seed`)."""
from __future__ import annotations

import numpy as np

from . import dispatch as _dispatch

_seed = [int(np.random.SeedSequence().entropy % (2 ** 63))]  # (eager.initial_seed)
_generator = np.random.default_rng(_seed[0])


def manual_seed(seed: int) -> np.random.Generator:
    """Reseed the global generator so every random op (rand, randn, dropout, init) repeats."""
    global _generator
    _dispatch.note_random_state("eager.manual_seed()")
    _generator = np.random.default_rng(int(seed))
    _seed[0] = int(seed)
    return _generator


def seed() -> int:
    s = int(np.random.SeedSequence().entropy % (2 ** 63))
    manual_seed(s)
    return s


def generator() -> np.random.Generator:
    return _generator


def initial_seed() -> int:
    """The seed the global generator was last seeded with (manual_seed or seed), as
    torch.initial_seed."""
    _dispatch.note_random_state("eager.initial_seed()")
    return _seed[0]


def get_rng_state() -> dict:
    _dispatch.note_random_state("eager.get_rng_state()")
    return _generator.bit_generator.state


def set_rng_state(state: dict) -> None:
    _dispatch.note_random_state("eager.set_rng_state()")
    _generator.bit_generator.state = state


class Generator:
    """A random generator of its own (PyTorch's `torch.Generator`), for `DataLoader(shuffle=
    True, generator=g)`, `RandomSampler` and `random_split`: seeding it repeats their order
    without touching the global generator.

    >>> g = Generator().manual_seed(0)
    """

    def __init__(self, device="cpu"):
        from .device import check_device

        check_device(device, "Generator")
        self._seed = int(np.random.SeedSequence().entropy % (2 ** 63))
        self._rng = np.random.default_rng(self._seed)

    def manual_seed(self, seed: int) -> Generator:
        _dispatch.note_random_state("Generator.manual_seed()")
        self._seed = int(seed)
        self._rng = np.random.default_rng(self._seed)
        return self

    def seed(self) -> int:
        return self.manual_seed(int(np.random.SeedSequence().entropy % (2 ** 63)))._seed

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self) -> dict:
        _dispatch.note_random_state("Generator.get_state()")
        return self._rng.bit_generator.state

    def set_state(self, state: dict) -> Generator:
        _dispatch.note_random_state("Generator.set_state()")
        self._rng.bit_generator.state = state
        return self

    @property
    def device(self):
        from .device import CPU

        return CPU


def numpy_generator(generator=None) -> np.random.Generator:
    """The numpy generator behind `generator` (an eager.Generator), or the global one, for
    eager's own Python-level draws (a DataLoader's shuffle, RandomSampler, random_split): a
    trace cannot repeat those at every call, so it stops there (the call runs eagerly)."""
    _dispatch.note_random_state(
        "a shuffle or split drawn in Python from " + (
            "the global generator" if generator is None else "an eager.Generator")
        + " (DataLoader(shuffle=True), RandomSampler, random_split)")
    if generator is None:
        return _generator
    if not isinstance(generator, Generator):
        raise TypeError(f"expected an eager.Generator, got {type(generator).__name__}")
    return generator._rng
