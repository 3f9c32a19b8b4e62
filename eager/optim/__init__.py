"""eager.optim: optimizers with PyTorch's update rules, parameter groups and state layout,
and `eager.optim.lr_scheduler`.

Every optimizer reads its hyperparameters from its param groups at each step (see
optimizer.py), so a compiled training step traces once and follows a schedule that
changes them between calls.
"""
from . import lr_scheduler
from .adam import Adam, Adamax, AdamW, NAdam, RAdam
from .adaptive import Adadelta, Adagrad, RMSprop
from .optimizer import Optimizer, ParamGroup, _zeroed  # noqa: F401 - (nn.Module.zero_grad)
from .sgd import SGD

__all__ = [
           "SGD",
           "Adadelta",
           "Adagrad",
           "Adam",
           "AdamW",
           "Adamax",
           "NAdam",
           "Optimizer",
           "ParamGroup",
           "RAdam",
           "RMSprop",
           "lr_scheduler",
]
