"""eager.nn: modules, parameters, layers and losses (PyTorch's API)."""
from . import functional, init
from .layers import (Dropout, Embedding, GELU, Identity, LayerNorm, Linear, ModuleList, ReLU,
                     Sequential, Sigmoid, SiLU, Softmax, Tanh)
from .loss_layers import (BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, KLDivLoss,
                          L1Loss, MSELoss, NLLLoss, SmoothL1Loss)
from .activation_layers import (CELU, ELU, GLU, Hardsigmoid, Hardswish, Hardtanh, LeakyReLU,
                                LogSigmoid, LogSoftmax, Mish, ReLU6, SELU, Softmin, Softplus,
                                Softsign)
from .containers import Flatten, ModuleDict, ParameterDict, ParameterList, Unflatten
from .module import Module, Parameter
from . import utils  # noqa: F401 - eager.nn.utils, as torch.nn.utils (clip_grad_norm_)
from . import conv_layers as _conv_layers
from .conv_layers import *  # noqa: F401,F403 - Conv2d, MaxPool2d, Upsample, ... (its __all__)
from . import norm_layers as _norm_layers
from .norm_layers import *  # noqa: F401,F403 - BatchNorm2d, GroupNorm, RMSNorm, ... (its __all__)
from .similarity import CosineSimilarity, PairwiseDistance, PixelShuffle, PixelUnshuffle
from .rnn import GRU, GRUCell, LSTM, LSTMCell, RNN, RNNCell
from .attention import MultiheadAttention, scaled_dot_product_attention
from .transformer import (Transformer, TransformerDecoder, TransformerDecoderLayer,
                          TransformerEncoder, TransformerEncoderLayer)

__all__ = ["functional", "init", "Module", "Parameter", "Linear", "Sequential", "ModuleList",
           "Identity", "ReLU", "GELU", "Tanh", "Sigmoid", "SiLU", "Softmax", "LayerNorm",
           "Embedding", "Dropout", "CrossEntropyLoss", "MSELoss", "NLLLoss", "ModuleDict",
           "ParameterList", "ParameterDict", "Flatten", "Unflatten",
           "LeakyReLU", "ELU", "SELU", "CELU", "ReLU6", "Hardtanh", "Hardswish", "Hardsigmoid",
           "Softplus", "Softsign", "Mish", "LogSigmoid", "GLU", "Softmin", "LogSoftmax",
           "BCELoss", "BCEWithLogitsLoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "KLDivLoss"]
__all__ += _conv_layers.__all__
__all__ += _norm_layers.__all__
__all__ += ["CosineSimilarity", "PairwiseDistance", "PixelShuffle", "PixelUnshuffle"]
__all__ += ["RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell"]
__all__ += ["MultiheadAttention", "Transformer", "TransformerEncoder",
            "TransformerEncoderLayer", "TransformerDecoder", "TransformerDecoderLayer"]
# F.scaled_dot_product_attention: attention.py builds on F.softmax/F.dropout, so functional
# cannot import it back without a cycle; eager.nn (always imported before its submodule
# functional is usable) puts it there.
functional.scaled_dot_product_attention = scaled_dot_product_attention
