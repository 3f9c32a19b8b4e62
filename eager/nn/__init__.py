"""eager.nn: modules, parameters, layers and losses (PyTorch's API)."""
from . import functional, init
from .layers import (CrossEntropyLoss, Dropout, Embedding, GELU, Identity, LayerNorm, Linear,
                     ModuleList, MSELoss, NLLLoss, ReLU, Sequential, Sigmoid, SiLU, Softmax,
                     Tanh)
from .containers import Flatten, ModuleDict, ParameterDict, ParameterList, Unflatten
from .module import Module, Parameter
from . import utils  # noqa: F401 - eager.nn.utils, as torch.nn.utils (clip_grad_norm_)
from . import conv_layers as _conv_layers
from .conv_layers import *  # noqa: F401,F403 - Conv2d, MaxPool2d, Upsample, ... (its __all__)
from .attention import MultiheadAttention, scaled_dot_product_attention
from .transformer import (Transformer, TransformerDecoder, TransformerDecoderLayer,
                          TransformerEncoder, TransformerEncoderLayer)

__all__ = ["functional", "init", "Module", "Parameter", "Linear", "Sequential", "ModuleList",
           "Identity", "ReLU", "GELU", "Tanh", "Sigmoid", "SiLU", "Softmax", "LayerNorm",
           "Embedding", "Dropout", "CrossEntropyLoss", "MSELoss", "NLLLoss", "ModuleDict",
           "ParameterList", "ParameterDict", "Flatten", "Unflatten", "MultiheadAttention",
           "Transformer", "TransformerEncoder", "TransformerEncoderLayer", "TransformerDecoder",
           "TransformerDecoderLayer"]
__all__ += _conv_layers.__all__
# F.scaled_dot_product_attention: attention.py builds on F.softmax/F.dropout, so functional
# cannot import it back without a cycle; eager.nn (always imported before its submodule
# functional is usable) puts it there.
functional.scaled_dot_product_attention = scaled_dot_product_attention
