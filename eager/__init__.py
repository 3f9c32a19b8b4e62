"""eager: tensors with define-by-run autograd, PyTorch style.

>>> import eager
>>> x = eager.tensor([1.0, 2.0, 3.0], requires_grad=True)
>>> y = (x * x).sum()
>>> y.backward()
>>> x.grad
tensor([2., 4., 6.])
"""
import warnings as _warnings

# Like PyTorch, IEEE results (log(0) = -inf, 0/0 = nan, overflow = inf) are not warnings.
_warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"eager(\.|$)")

from . import dispatch as _dispatch
from . import dtypes
from . import functions as _functions
from . import ops
from . import scan_ops as _scan_ops  # noqa: F401  (registers cumsum, argsort, scatter, ...)
from . import ops_math as _ops_math  # noqa: F401  (registers sin, atan2, bitwise ops, prod, ...)
from . import dtype_ops as _dtype_ops  # noqa: F401  (registers view_dtype)
from . import strided_ops as _strided_ops  # noqa: F401  (registers diagonal, unfold)
from .dtype_ops import promote_types, result_type  # noqa: E402,F401
from .dtypes import (bfloat16, bool_, double, float16, float32, float64, half, int8,  # noqa: F401
                     int16, int32, int64, long, short, uint8, uint16, uint32, uint64)
from . import tensor as _tensor
from .tensor import Tensor
from . import autograd
from . import autograd_graph as _autograd_graph
from .autograd import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .dtypes import get_default_dtype, set_default_dtype  # noqa: E402,F401
from .random import Generator, initial_seed, manual_seed, get_rng_state, set_rng_state

# Bind the late references that keep the hot path free of imports.
_dispatch._Tensor = Tensor
_dispatch._attach_node = autograd.attach_node
for _module in (_functions,) + _functions.MODULES:
    _module.Tensor = Tensor
del _module
autograd.Tensor = Tensor
_autograd_graph.Tensor = Tensor

from .functions import (  # noqa: E402
    abs, add, amax, amin, arange, argmax, argmin, as_tensor, broadcast_to, cat, clamp, clip,
    concatenate, div, dot, eq, erf, exp, expand, eye, flatten, from_numpy, full, full_like, ge,
    gt, isfinite, isinf, isnan, le, linspace, log, logical_not, logsumexp, lt, matmul, max,
    maximum, mean, min, minimum, mul, ne, neg, ones, ones_like, permute, pow, rand, rand_like,
    randint, randn, randn_like, relu, reshape, rsqrt, sigmoid, sign, sqrt, square, squeeze,
    stack, std, stop_gradient, sub, sum, tanh, tensor, transpose, var,
    unsqueeze, where, zeros, zeros_like,
    expm1, log1p,
)
from .functions import (  # noqa: E402  (math, issue 16 item 5)
    acos, acosh, addmm, all, allclose, any, asin, asinh, atan, atan2, atanh, baddbmm,
    bitwise_and, bitwise_left_shift, bitwise_not, bitwise_or, bitwise_right_shift, bitwise_xor,
    ceil, clamp_max, clamp_min, copysign, cos, cosh, erfinv, exp2, floor, floor_divide, fmod,
    frac, hypot, isclose, lerp, log10, log2, logaddexp, nan_to_num, norm, outer, prod,
    reciprocal, remainder, round, sin, sinh, std_mean, tan, trunc, true_divide, var_mean,
)
from . import linalg  # noqa: E402
# (as_tensor: PyTorch's, with dtype= and device=, over the internal helper imported above)
from .device import (as_tensor, device, get_default_device, set_default_device,  # noqa: E402
                     with_device as _with_device)
from . import backends, cuda  # noqa: E402
from .autograd import inference_mode  # noqa: E402

# PyTorch's device= (and pin_memory=) on every creation function, checked in one place.
for _name in ("tensor", "zeros", "ones", "full", "zeros_like", "ones_like", "full_like",
              "arange", "linspace", "eye", "rand", "randn", "randint", "rand_like",
              "randn_like"):
    globals()[_name] = _with_device(getattr(_functions, _name))
del _name

from . import nn  # noqa: E402
from . import optim  # noqa: E402
from .nn.functional import softmax, log_softmax  # noqa: E402
from . import utils  # noqa: E402
from .serialization import load, save  # noqa: E402

# Indexing, shaping, scans and sampling (issue 16 item 4).
from .indexing import (gather, index_add, index_copy, index_put, index_select, masked_fill, masked_select, nonzero, where,  # noqa: E402
                       scatter, scatter_add, scatter_reduce, take_along_dim)
from .shaping import (bmm, chunk, diag, diagonal, einsum, flip, mm, movedim,  # noqa: E402
                      mv, narrow, select, repeat_interleave, roll, split, tile, tril, triu, unbind,
                      unflatten)
from .scan import (argsort, cummax, cummin, cumprod, cumsum, logcumsumexp, sort,  # noqa: E402
                   topk)
from .sampling import bernoulli, multinomial  # noqa: E402
from . import sampling as _sampling  # noqa: E402
from . import tensor_methods as _tensor_methods  # noqa: E402

_tensor_methods.attach()
randint = _with_device(_sampling.randint)
randperm = _with_device(_sampling.randperm)
empty = _with_device(_sampling.empty)
empty_like = _with_device(_sampling.empty_like)
moveaxis = movedim

Tensor.softmax = _tensor._method(softmax)          # x.softmax(dim), as in PyTorch
Tensor.log_softmax = _tensor._method(log_softmax)

bool = bool_  # noqa: A001  (eager.bool, like torch.bool)
float = float32  # noqa: A001
double = float64
long = int64
int = int32  # noqa: A001
view = reshape
multiply = mul
subtract = sub
divide = div
negative = neg
is_tensor = lambda obj: isinstance(obj, Tensor)  # noqa: E731

from . import ops_conv as _ops_conv  # noqa: E402,F401  (sliding-window rows: conv, pooling)
from . import ops_pool as _ops_pool  # noqa: E402,F401  (max pooling's index rows)
from . import ops_conv_direct as _ops_conv_direct  # noqa: E402,F401  (direct conv rows)
from . import ops_rnn as _ops_rnn  # noqa: E402,F401  (an LSTM layer's time loop)

__all__ = [name for name in dir() if not name.startswith("_")]

# PyTorch's dtype aliases that share a builtin's name (eager.float, eager.int, eager.bool)
float, int, bool = float32, int32, bool_  # noqa: A001
