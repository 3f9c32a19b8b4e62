"""eager.utils: `eager.utils.data` (datasets, samplers, DataLoader), as in PyTorch."""
from . import data

__all__ = ["data"]
