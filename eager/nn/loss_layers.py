"""Loss modules (PyTorch's names, constructor arguments and defaults)."""
from __future__ import annotations

from . import functional as F
from .module import Module


class CrossEntropyLoss(Module):
    def __init__(self, reduction: str = "mean", label_smoothing: float = 0.0):
        super().__init__()
        self.reduction = reduction
        self.label_smoothing = label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(input, target, self.reduction, self.label_smoothing)


class MSELoss(Module):
    def __init__(self, reduction: str = "mean"):
        super().__init__()
        self.reduction = reduction

    def forward(self, input, target):
        return F.mse_loss(input, target, self.reduction)


class NLLLoss(Module):
    def __init__(self, reduction: str = "mean"):
        super().__init__()
        self.reduction = reduction

    def forward(self, input, target):
        return F.nll_loss(input, target, self.reduction)
