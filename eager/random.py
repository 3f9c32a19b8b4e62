"""The global random generator behind every random op (`eager.manual_seed`)."""
from __future__ import annotations

import numpy as np

_generator = np.random.default_rng()


def manual_seed(seed: int) -> np.random.Generator:
    """Reseed the global generator so every random op (rand, randn, dropout, init) repeats."""
    global _generator
    _generator = np.random.default_rng(int(seed))
    return _generator


def seed() -> int:
    s = int(np.random.SeedSequence().entropy % (2 ** 63))
    manual_seed(s)
    return s


def generator() -> np.random.Generator:
    return _generator


def get_rng_state() -> dict:
    return _generator.bit_generator.state


def set_rng_state(state: dict) -> None:
    _generator.bit_generator.state = state
